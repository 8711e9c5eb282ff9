"""The documented TLB geometries (tlbsim.host.tlb_geometry) and how calibrate and validate use them."""

from __future__ import annotations

from tlbsim.host import tlb_geometry as tg
from tlbsim.host import validate as val


def test_lookup_by_vendor_family_model() -> None:
    zen3 = tg.lookup("AuthenticAMD", 25, 1)  # this workplace's EPYC guest (CPUID 0x80000005/6: 64, 2048)
    assert zen3 is not None and (zen3.l1_entries, zen3.l1_ways, zen3.l2_entries) == (64, 0, 2048)
    zen5 = tg.lookup("AuthenticAMD", 0x1A, 0x02)
    assert zen5 is not None and (zen5.l1_entries, zen5.l2_entries) == (96, 4096)
    icx = tg.lookup("GenuineIntel", 6, 0x6A)  # Ice Lake-SP
    assert icx is not None and (icx.l1_entries, icx.l1_ways, icx.l2_entries, icx.l2_ways) == (64, 4, 2048, 16)
    skx = tg.lookup("GenuineIntel", 6, 0x55)
    assert skx is not None and skx.l2_entries == 1536
    # unknown: no guess
    assert tg.lookup("GenuineIntel", 6, 0x01) is None
    assert tg.lookup("AuthenticAMD", 25, None) is None
    assert tg.lookup("SomeVendor", 6, 0x6A) is None
    for _, _, _, g in tg.TABLE:  # every row names where it comes from
        assert "Manual" in g.source or "Guide" in g.source


def test_agreement_flags_a_disagreement() -> None:
    ok, phrase = tg.agreement(1916, 2048)
    assert ok and "agrees" in phrase
    ok, phrase = tg.agreement(6144, 2048)
    assert not ok and "DISAGREES" in phrase and "+200%" in phrase


def test_knee_rows_check_against_the_documented_geometry() -> None:
    doc = {"microarchitecture": "Zen 3", "l1_entries": 64, "l2_entries": 2048}
    # the fit found the wrong knees (the symptom): held-out rows fail
    real = [{"level": "l1", "entries": 1641.0, "confidence": "high"}, {"level": "l2", "entries": 21111.0}]
    rows = val.knee_rows(real, {}, {"l1": 1546.0, "l2": 22672.0}, "", {"l1": 1536, "l2": 22528}, doc)
    assert [(r.status, r.role, r.real) for r in rows] == [("FAIL", "check", 64.0), ("FAIL", "check", 2048.0)]
    assert "measured 1641 (high confidence)" in rows[0].note
    rows = val.knee_rows(real, {}, {"l1": 64.0, "l2": 2059.0}, "", {"l1": 64, "l2": 2048}, doc)
    assert [r.status for r in rows] == ["pass", "pass"]
    report = val.Report(rows, "p", "m")
    assert report.passed and report.counts()["pass"] == 2
    # a level whose preset value was taken from the table is not held out
    rows = val.knee_rows(real, {}, {"l1": 64.0, "l2": 2059.0}, "", {"l1": 64, "l2": 2048}, doc, ["l2"])
    assert [r.role for r in rows] == ["check", "fit"]


def test_an_intel_model_number_older_than_its_flags_is_the_hypervisors() -> None:
    # A KVM guest of this workplace: model 0xA7 (Rocket Lake, Sunny Cove's table) with AMX,
    # which only Sapphire Rapids (Golden Cove) and later have.
    spr = tg.lookup("GenuineIntel", 6, 0xA7, ["amx_tile"])
    assert spr is not None and (spr.l1_entries, spr.l1_ways) == (96, 6)
    assert "0xa7" in spr.microarchitecture and "amx_tile" in spr.microarchitecture
    rkl = tg.lookup("GenuineIntel", 6, 0xA7)
    assert rkl is not None and rkl.l1_entries == 64
    # A number that already names Golden Cove, and an unknown one, are left as they are.
    assert tg.lookup("GenuineIntel", 6, 0x8F, ["amx_tile"]) == tg.lookup("GenuineIntel", 6, 0x8F)
    assert tg.lookup("GenuineIntel", 6, 0x01, ["amx_tile"]) is None
    assert tg.lookup("AuthenticAMD", 25, 1, ["amx_tile"]) == tg.lookup("AuthenticAMD", 25, 1)
