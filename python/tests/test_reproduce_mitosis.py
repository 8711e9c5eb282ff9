"""`tlbsim reproduce mitosis --quick`: Mitosis' claims (Tables 2, 4, 5, 6; Figs. 4, 9a, 10a,
10b, 11; §3.1's AutoNUMA observation)
beside ours, and what must hold whatever the scale."""

import tlbsim


def test_reproduce_mitosis_quick_puts_every_claim_beside_ours(tmp_path):
    r = tlbsim.reproduce("mitosis", tmp_path, quick=True, jobs=2)
    claims = {c["id"]: c for c in r.claims}
    assert len(claims) == 39
    assert all(c["ours"] is not None for c in claims.values()), [i for i, c in claims.items() if c["ours"] is None]
    ours = {i: c["ours"] for i, c in claims.items()}
    for w in ("gups", "xsbench"):
        # Remote data and remote page tables each cost; both cost most; a local replica
        # makes remote page tables (with interference) as fast as local ones.
        assert ours[f"table2-{w}-rp-rd"] > max(ours[f"table2-{w}-lp-rd"], ours[f"table2-{w}-rp-ld"]) > 1.0
        assert abs(ours[f"fig10a-{w}-rpi-ld-m"] - 1.0) < 0.02
        assert ours[f"fig10a-{w}-rpi-ld"] >= ours[f"table2-{w}-rp-ld"] - 0.01
    # Table 4 is arithmetic on the simulated tables: more copies, more memory; a large
    # footprint amortizes them.
    for size in ("1mb", "1gb"):
        assert (
            1.0
            < ours[f"table4-{size}-2"]
            < ours[f"table4-{size}-4"]
            < ours[f"table4-{size}-8"]
            < ours[f"table4-{size}-16"]
        )
    assert ours["table4-1gb-16"] < ours["table4-1mb-16"]
    assert abs(ours["table4-1gb-16"] - 1.029) < 0.01
    # Replication makes every VMA operation dearer, mprotect of many pages most.
    assert all(ours[i] >= 1.0 for i in ours if i.startswith("table5-"))
    assert ours["table5-mprotect-8mb"] > ours["table5-mprotect-4kb"]
    # Fig. 4: one thread's first touch puts every leaf PTE on its socket; Mitosis none remote.
    assert ours["fig4-first-touch-skew"] > 0.99
    assert abs(ours["fig4-interleave"] - 0.75) < 0.05
    assert ours["fig9a-canneal"] > 1.0
    assert ours["fig9a-canneal-autonuma"] > 1.0
    assert ours["fig9b-canneal"] >= 0.99
    # AutoNUMA moves data pages toward the workers and never a page-table page.
    assert ours["s31-autonuma-moves-data"] > 0
    assert ours["s31-autonuma-keeps-page-tables"] == 0
    # 2 MiB pages: a local replica removes the remote page tables' cost; the more 2 MiB
    # allocations fail, the nearer the 4 KiB slowdown.
    assert abs(ours["fig10b-gups-trpi-ld-m"] - 1.0) < 0.02 and abs(ours["fig11-gups-trpi-ld-m-fragmented"] - 1.0) < 0.02
    assert ours["fig10b-gups-trpi-ld"] < ours["fig11-gups-trpi-ld-fragmented"] <= ours["fig10a-gups-rpi-ld"] + 0.05
