"""record/recordings.py (`make recordings`): its trace counting, input and table, without
running the programs (that is `make recordings`, minutes long and needing root)."""

from __future__ import annotations

from pathlib import Path

import pytest

# Lines as this kernel's trace instance prints them (Linux 6.18: a shootdown to one CPU goes
# out as ipi_send_cpu with the generic single-call handler as its callback).
TRACE = """\
# tracer: nop
              xz-28619   [000] dNs4. 84724.761974: ipi_send_cpu: cpu=1 callsite=update_curr+0x80/0x140 callback=0x0
              xz-28619   [000] ...2. 84724.869690: tlb_flush: pages:1 reason:remote IPI send (4)
              xz-28619   [000] ...2. 84724.869691: ipi_send_cpu: cpu=1 callsite=on_each_cpu_cond_mask+0x20/0x60 callback=generic_smp_call_function_single_interrupt+0x0/0x10
              xz-28620   [001] ...2. 84724.869700: tlb_flush: pages:1 reason:remote IPI send (4)
              xz-28620   [001] ...2. 84724.869800: tlb_flush: pages:-1 reason:flush on task switch (0)
          httpd-1234   [001] ...2. 84724.870000: ipi_send_cpumask: cpumask=0,2-4 callsite=on_each_cpu_cond_mask+0x20/0x60 callback=flush_tlb_func+0x0/0x1f0
          httpd-1234   [001] d..3. 84724.870100: ipi_send_cpu: cpu=0 callsite=wakeup_preempt+0x92/0xa0 callback=0x0
"""


def test_count_trace_counts_shootdown_ipis_per_target_and_requests(recordings) -> None:
    got = recordings.count_trace(TRACE)
    # One single-target shootdown IPI, one to 4 CPUs (0, 2, 3, 4); two flush requests (the
    # second sent no IPI: its target was filtered); the scheduler's IPIs are not shootdowns.
    assert got == {"tlb_ipis": 1 + 4, "flush_requests": 2, "other_ipis": 2}
    assert recordings.count_trace("") == {"tlb_ipis": 0, "flush_requests": 0, "other_ipis": 0}


@pytest.mark.parametrize(("text", "n"), [("0", 1), ("1", 1), ("0-1", 2), ("0,2-4", 4), ("3-3,7,9-10", 4), ("", 0)])
def test_cpulist_len(recordings, text: str, n: int) -> None:
    assert recordings.cpulist_len(text) == n


def test_input_is_fixed_and_of_its_size(recordings, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    recordings.make_input(a)
    recordings.make_input(b)
    assert a.stat().st_size == recordings.INPUT_BYTES
    assert a.read_bytes() == b.read_bytes()
    # Text of a fixed vocabulary: compressible (bzip2 blocks of it are not stored raw).
    import bz2

    assert len(bz2.compress(a.read_bytes())) < recordings.INPUT_BYTES // 2


def test_operations_follow_the_block_sizes(recordings) -> None:
    progs = {p.name: p for p in recordings.programs(2)}
    assert progs["pbzip2"].ops() == -(-recordings.INPUT_BYTES // recordings.PBZIP2_BLOCK)
    assert progs["xz"].ops() == -(-recordings.INPUT_BYTES // recordings.XZ_BLOCK)
    assert "-p2" in progs["pbzip2"].command() and "-T2" in progs["xz"].command()


def test_client_output_parsing(recordings) -> None:
    progs = {p.name: p for p in recordings.programs(2)}
    assert progs["memcached"].client_ops("cmd_get: 1800\nRun time: 0.1s Ops: 2000 TPS: 16356") == 2000
    assert progs["apache2"].client_ops("Complete requests:      2000\nFailed requests:        3\n") == 1997
    assert progs["postgresql"].client_ops("number of transactions actually processed: 100/100\n") == 100
    with pytest.raises(RuntimeError, match="Ops"):
        progs["memcached"].client_ops("connection refused")


def test_table_has_a_row_per_program_and_names_failures(recordings) -> None:
    runs = [{"tlb_ipis": i, "flush_requests": 2 * i, "ops": 4} for i in (0, 3, 8)]
    native = {"runs": runs, "requests": [0, 6, 16], "ipis_per_op": 0.75}
    ok = {
        "name": "xz",
        "unit": "xz block",
        "command": "xz -T2",
        "native": native,
        "recording": {"ops": 4, "bytes": 5e7, "seconds": 10.0},
        "replay": {"ipis_sent": 12, "shootdowns_by_reason": {"copy_on_write": 12}, "segv_signals": 0, "seconds": 20.0},
    }
    failed = {"name": "postgresql", "unit": "transaction", "command": "postgres", "native": native}
    failed["record_error"] = "RuntimeError: postgres exited before it accepted connections"
    text = recordings.table([ok, failed])
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) == 2
    assert "| 6 [0–16] | 3 [0–8] | 1.500 (4.000) |" in rows[0]
    assert "12 (copy_on_write 12) | 3.000 |" in rows[0]
    assert "- postgresql: record error: RuntimeError: postgres exited" in text
