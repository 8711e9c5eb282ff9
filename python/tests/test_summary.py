"""tlbsim.summary: the CLI's summary table."""

from __future__ import annotations

from typing import Any

from tlbsim.summary import HEADERS, summary_row, summary_table, tlb_misses


def test_table_has_header_cores_and_total(fake_stats: dict[str, Any]) -> None:
    lines = summary_table(fake_stats).splitlines()
    assert lines[0].split()[0] == "core"
    assert [line.split()[0] for line in lines[1:4]] == ["0", "1", "total"]


def test_summary_shows_the_makespan_and_a_legend_of_its_columns(fake_stats: dict[str, Any]) -> None:
    fake_stats["run"] = {"makespan_cycles": 3_000_000, "seconds": 0.001}
    text = summary_table(fake_stats)
    assert text.splitlines()[0].startswith("makespan: 3,000,000 cycles (1.000 ms simulated)")
    legend = " ".join(text.split())
    assert "The total row sums the counters over the cores (its cycles too" in legend
    for column in ("cyc/walk:", "PT local/remote:", "miss/10k instr:"):
        assert column in legend


def test_row_values() -> None:
    row = {
        "instructions": 20_000,
        "accesses": 10_000,
        "l1_tlb_hits": 9_000,
        "l1_tlb_misses": 1_000,
        "l2_tlb_hits": 600,
        "l2_tlb_misses": 400,
        "walks": 400,
        "walk_cycles": 10_000,
        "pt_accesses_local": 1_200,
        "pt_accesses_remote": 400,
        "cycles": 1_234_567,
    }
    cells = dict(zip(HEADERS, summary_row("0", row), strict=True))
    assert cells["accesses"] == "10,000"
    assert cells["L1 hit %"] == "90.00"
    assert cells["L2 hit %"] == "60.00"
    assert cells["cyc/walk"] == "25.0"
    assert cells["PT remote"] == "400"
    assert cells["cycles"] == "1,234,567"
    assert cells["miss/10k instr"] == "200.00"


def test_missing_or_zero_counters_show_dash() -> None:
    cells = dict(zip(HEADERS, summary_row("total", {"accesses": 0}), strict=True))
    assert cells["L1 hit %"] == "-"
    assert cells["cyc/walk"] == "-"
    assert cells["walks"] == "-"


def test_tlb_misses_falls_back_to_l1_without_l2() -> None:
    assert tlb_misses({"l1_tlb_misses": 5, "l2_tlb_hits": 0, "l2_tlb_misses": 0}) == 5
    assert tlb_misses({"l1_tlb_misses": 5, "l2_tlb_hits": 2, "l2_tlb_misses": 3}) == 3


def test_os_mode_run_adds_the_shootdown_table_and_thread_classes() -> None:
    import tlbsim
    from tlbsim.summary import summary_table

    r = tlbsim.run(
        None,
        machine__cores_per_socket=2,
        workload__kind="shootdown-patterns",
        workload__pattern="munmap-4k",
        workload__ops=200,
    )
    text = summary_table(r.stats)
    assert "IPIs recv" in text and "violations sec/cons" in text
    legend = " ".join(text.split())
    for column in ("false pos:", "IPIs sent/recv:", "violations sec/cons:", "target cyc:"):
        assert column in legend
    assert "makespan: " in text and "warning" not in text
    total = next(line for line in text.splitlines()[::-1] if line.startswith("total"))
    # munmap-4k with a spinning sibling: one IPI per operation.
    assert total.split()[3] == "200"
    assert any(line.startswith("measure") and " 200 " in line for line in text.splitlines())


def test_trace_mode_summary_has_no_shootdown_table() -> None:
    import tlbsim
    from tlbsim.summary import summary_table

    r = tlbsim.run(None, workload__accesses=1000, machine__cores_per_socket=1)
    assert "IPIs recv" not in summary_table(r.stats)


def test_a_run_that_cannot_send_a_shootdown_says_so() -> None:
    import tlbsim
    from tlbsim.summary import summary_table

    # apache at 2 threads: 2 processes of 1 worker each, each on its own core.
    r = tlbsim.run(None, machine__cores_per_socket=2, workload__kind="apache", workload__threads=2, workload__ops=20)
    assert r.stats["totals"]["shootdowns_sent"] == 0
    text = " ".join(summary_table(r.stats).split())
    assert (
        "warning: no TLB shootdown was sent, so the coherence policy (os.coherence) cannot have changed this run"
        in text
    )
    assert "each of its 2 process(es) ran on one core" in text
    # With 4 workers per process it sends shootdowns: no warning.
    r = tlbsim.run(None, machine__cores_per_socket=8, workload__kind="apache", workload__threads=8, workload__ops=20)
    assert r.stats["totals"]["shootdowns_sent"] > 0
    assert "warning" not in summary_table(r.stats)
