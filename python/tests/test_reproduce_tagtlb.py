"""`tlbsim reproduce tagtlb --quick`: the tag paper's flush profile, MPTTI and
service-level claims on the tagtlb-p4 preset (VMs under the credit scheduler)."""

import tlbsim


def test_reproduce_tagtlb_quick_gives_every_claim_and_the_orderings_that_must_hold(tmp_path):
    r = tlbsim.reproduce("tagtlb", tmp_path, quick=True, jobs=2)
    claims = {c["id"]: c for c in r.claims}
    assert {
        "fig5-0012-cpu0-inter-vm",
        "fig6-tpcc-tpcc-nopin-cr3",
        "fig7-cr3-1024",
        "fig9-512-flat",
        "fig10-isolation-30",
    } <= set(claims)
    assert all(c["ours"] is not None for c in r.claims), [c["id"] for c in r.claims if c["ours"] is None]
    # Pinning dom0 alone on CPU 0 leaves it no VM to switch to.
    assert claims["fig5-0012-cpu0-inter-vm"]["ours"] == 0
    # Tags only remove flushes: domain tags the inter-VM ones, CR3 tags more.
    for lab in ("tpcc-tpcc-nopin", "tpcc-tpcc-0012", "tpcc-vortex-nopin", "tpcc-vortex-0012"):
        assert claims[f"fig6-{lab}-cr3"]["ours"] <= claims[f"fig6-{lab}-domain"]["ours"] <= 1.0, lab
    # A larger CR3-tagged TLB misses less than an untagged one of its size.
    assert claims["fig7-cr3-1024"]["ours"] < 1.0
    # §6.5's controller: its claims are there, its table and its figure are written, and
    # with epochs of 1/20 of a phase it beats every static split of the phased workload.
    assert {"sec6.5-phases-epoch-1/20", "sec6.5-phases-epoch-1/4", "sec6.5-tpcc-64", "sec6.5-tpcc-vortex-64"} <= set(
        claims
    )
    assert claims["sec6.5-phases-epoch-1/20"]["ours"] < 1.0
    import json

    rows = json.loads((tmp_path / "controller.json").read_text())
    assert len(rows["phases"]) == 12 and rows["best_static"].startswith("static ")
    static = [p["guests_dtlb_mptti"] for p in rows["phases"] if p["controller"] == "static"]
    assert min(static) == min(p["guests_dtlb_mptti"] for p in rows["phases"] if p["run"] == rows["best_static"])
    assert len(rows["vm_mix"]) == 4 and all(v["best_static_guests_dtlb_mptti"] is not None for v in rows["vm_mix"])
    assert (tmp_path / "controller_phases.png").stat().st_size > 10_000
    assert "controller_phases.png" in (tmp_path / "index.html").read_text()
