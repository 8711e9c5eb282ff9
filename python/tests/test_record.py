"""`tlbsim record`: the QEMU plugin's events against strace, and errors on bad recordings."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import tlbsim
from tlbsim import record as rec

HERE = Path(__file__).parent
NEEDS = pytest.mark.skipif(
    shutil.which("qemu-x86_64") is None or shutil.which("strace") is None,
    reason="needs qemu-x86_64 (Debian package qemu-user) and strace",
)
# The calls the plugin records that strace's memory and process classes also show.
COMPARED = {
    "mmap",
    "munmap",
    "mprotect",
    "madvise",
    "brk",
    "mremap",
    "msync",
    "clone",
    "clone3",
    "fork",
    "vfork",
    "exit",
    "exit_group",
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("tiny") / "tiny"
    subprocess.run(["gcc", "-O1", "-pthread", "-o", str(exe), str(HERE / "data/record_tiny.c")], check=True)
    return exe


def _strace_calls(exe: Path, tmp: Path) -> dict[int, list[tuple[str, bool]]]:
    """Per thread (in order of first appearance): (call, succeeded) for the compared calls
    made after the program's own code starts (main's first call is the thread's mmap)."""
    log = tmp / "strace.log"
    subprocess.run(["strace", "-f", "-o", str(log), "-e", "trace=memory,process", str(exe)], check=True)
    per: dict[int, list[tuple[str, bool]]] = {}
    for line in log.read_text().splitlines():
        m = re.match(r"(\d+)\s+(\w+)\(", line)
        if m and m.group(2) in COMPARED:
            # `= -1 ERRNO` is a failure; an unfinished call (its result on a later line)
            # or exit (no result) succeeded.
            ok = re.search(r"\)\s+=\s+-1 ", line) is None
            per.setdefault(int(m.group(1)), []).append((_norm(m.group(2)), ok))
    return per


def _norm(name: str) -> str:
    return "clone" if name == "clone3" else name


@NEEDS
def test_recorded_syscalls_match_strace(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "tiny.tlbsim"
    s = rec.record([str(tiny)], out, progress=False)
    assert s["exit_code"] == 0
    info = rec.info(out, syscalls=True)
    assert len(info["threads"]) == 2
    got: dict[int, list[tuple[str, bool]]] = {}
    for c in info["syscalls"]:
        # QEMU 7.2 answers clone3 with ENOSYS (38) and glibc falls back to clone.
        if c["name"] in COMPARED and not (c["name"] == "clone3" and c["ret"] == -38):
            got.setdefault(c["tid"], []).append((_norm(c["name"]), c["ret"] >= 0 or c["ret"] < -4095))
    want = _strace_calls(tiny, tmp_path)
    # Threads in order of first appearance; QEMU loads the program and its interpreter
    # itself (no execve, and the loader's first mappings are QEMU's), so each thread's
    # sequence is compared from the tiny program's own calls: the worker thread's whole
    # sequence, and the main thread's tail from its last clone on.
    g, w = list(got.values()), list(want.values())
    assert len(g) == len(w) == 2
    assert g[1] == w[1]

    def tail(seq):
        last = max(i for i, c in enumerate(seq) if c[0] == "clone")
        return seq[last:]

    assert tail(g[0]) == tail(w[0])
    # Results: the worker's munmap and mprotect succeeded, its mmap returned an address.
    worker = [c for c in info["syscalls"] if c["tid"] == info["threads"][1]["tid"]]
    names = [c["name"] for c in worker]
    assert names[:3] == ["mmap", "mprotect", "munmap"]
    assert worker[0]["ret"] == worker[1]["args"][0] == worker[2]["args"][0]
    assert worker[0]["args"][1] == 8192 and worker[2]["args"][1] == 8192
    assert info["instructions"] > 10_000 and info["by_kind"]["store"] > 0


@NEEDS
def test_no_fetches_counts_instructions(tiny: Path, tmp_path: Path) -> None:
    a = rec.record([str(tiny)], tmp_path / "a.tlbsim", progress=False)
    b = rec.record([str(tiny)], tmp_path / "b.tlbsim", fetches=False, progress=False)
    assert "fetch" not in b["by_kind"] and b["by_kind"]["instructions"] > 0
    # The same program: instruction counts within 1% (thread interleaving differs).
    assert abs(a["instructions"] - b["instructions"]) <= 0.01 * a["instructions"]
    assert b["bytes"] < a["bytes"]


def _write_raw(path: Path, records: bytes) -> None:
    path.write_bytes(b"TLBSIM\0\x02" + records)


def test_truncated_and_malformed_recordings_name_the_offset(tmp_path: Path) -> None:
    # A Syscall record (munmap) cut inside its second argument.
    raw = tmp_path / "cut.raw"
    _write_raw(raw, bytes([0x21, 0x05, 0x24, 0x0B, 0x02, 0x80, 0x80, 0x04, 0x80]))
    with pytest.raises(tlbsim.TlbsimError, match=r"byte offset 16: truncated varint \(syscall argument\)"):
        rec._tlbsim.record_finish(str(raw), str(tmp_path / "cut.tlbsim"))
    assert not (tmp_path / "cut.tlbsim").exists()
    # Too many syscall arguments.
    _write_raw(raw, bytes([0x24, 0x09, 0x07]))
    with pytest.raises(tlbsim.TlbsimError, match=r"byte offset 10: syscall argument count 7"):
        rec._tlbsim.record_finish(str(raw), str(tmp_path / "bad.tlbsim"))
    # A finished recording cut short: the reader names where it ends.
    _write_raw(raw, bytes([0x21, 0x05, 0x24, 0x0B, 0x02, 0x80, 0x20, 0x80, 0x20, 0x00]))
    out = tmp_path / "ok.tlbsim"
    s = rec._tlbsim.record_finish(str(raw), str(out))
    assert '"syscall:munmap":1' in s.replace(" ", "")
    full = (
        subprocess.run(["zstd", "-dc", str(out)], check=False, capture_output=True).stdout
        if shutil.which("zstd")
        else None
    )
    if full is not None:
        cut = tmp_path / "short.tlbsim"
        cut.write_bytes(full[:-3])
        with pytest.raises(tlbsim.TlbsimError, match=r"byte offset \d+: "):
            rec.info(cut)
    # Unknown tag.
    bad = tmp_path / "tag.tlbsim"
    bad.write_bytes(b"TLBSIM\0\x02" + bytes([0x26, 0x7F, 0x00]))
    with pytest.raises(tlbsim.TlbsimError, match=r"byte offset 8: unknown record tag 0x26"):
        rec.info(bad)


def test_record_without_qemu_names_the_package(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(rec, "QEMU", "qemu-x86_64-not-installed")
    with pytest.raises(rec.RecordError, match="qemu-user"):
        rec.record(["true"], tmp_path / "x.tlbsim", progress=False)


def test_bare_program_name_is_looked_up_in_path(tmp_path: Path, monkeypatch) -> None:
    # QEMU user mode loads the file it is given (no $PATH search): a bare name is resolved
    # first, as the shell would, and one not found is an error naming it.
    exe = tmp_path / "bin" / "myprog"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(exe.parent))
    assert rec.resolve("myprog") == str(exe)
    assert rec.resolve("./myprog") == "./myprog"  # a path is left as given
    with pytest.raises(rec.RecordError, match="no-such-program: not found"):
        rec.resolve("no-such-program")


@NEEDS
def test_record_by_bare_name_reports_the_qemu_process(tiny: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", f"{tiny.parent}:{os.environ['PATH']}")
    seen = []
    s = rec.record([tiny.name], tmp_path / "t.tlbsim", fetches=False, progress=False, on_start=seen.append)
    assert s["exit_code"] == 0 and len(s["threads"]) == 2
    assert len(seen) == 1 and seen[0].returncode == 0  # the QEMU process, waited for


# ---- Replay (`workload.kind = "recorded"`) ----

NATIVE = Path(__file__).resolve().parents[2] / "target" / "native"
NEEDS_QEMU = pytest.mark.skipif(
    shutil.which("qemu-x86_64") is None, reason="needs qemu-x86_64 (Debian package qemu-user)"
)


def _run(path: Path, coherence: str = "linux", cores: int = 2, **workload) -> dict:
    cfg = {
        "machine": {"sockets": 1, "cores_per_socket": cores},
        "workload": {"kind": "recorded", "paths": [str(path)], **workload},
        "os": {"checker": True, "coherence": coherence},
    }
    return tlbsim.run(cfg).stats["totals"]


@NEEDS_QEMU
def test_replayed_file_server_shoots_down_once_per_request(tmp_path: Path) -> None:
    out = tmp_path / "fs.tlbsim"
    s = rec.record([str(NATIVE / "file_server"), "2", "60"], out, progress=False)
    assert s["exit_code"] == 0
    munmaps = s["by_kind"]["syscall:munmap"]
    assert munmaps >= 120
    linux = _run(out)
    # Its own calls, at their recorded addresses: every access mapped, none stale.
    assert linux["segv_signals"] == 0
    assert linux["violations_security"] == 0 and linux["violations_consistency"] == 0
    assert linux["instructions"] == s["instructions"]
    # Two workers on two cores: a worker's munmap finds the other in the address space
    # nearly every time (the real kernel measured 0.99 IPIs per request on 2 vCPUs).
    assert linux["shootdown_ipis_sent"] >= 0.6 * 120, linux
    oracle = _run(out, "oracle")
    assert oracle["shootdown_ipis_sent"] == 0
    # One worker: nobody else runs in the address space when it unmaps; the main thread
    # sleeps in pthread_join (its recorded futex wait) until the worker's exit wakes it.
    one = tmp_path / "fs1.tlbsim"
    s1 = rec.record([str(NATIVE / "file_server"), "1", "60"], one, progress=False)
    assert s1["by_kind"].get("syscall:futex", 0) >= 1
    assert _run(one)["shootdown_ipis_sent"] <= 1


@NEEDS_QEMU
def test_replayed_gc_barrier_flushes_at_each_protection_change(tmp_path: Path) -> None:
    out = tmp_path / "gc.tlbsim"
    s = rec.record([str(NATIVE / "gc_barrier"), "1", "5", "64"], out, progress=False)
    assert s["exit_code"] == 0
    mprotects = s["by_kind"]["syscall:mprotect"]
    assert mprotects > 10
    linux = _run(out)
    assert linux["violations_security"] == 0 and linux["violations_consistency"] == 0
    # Arming (RW→RO) and each barrier fault's RO→RW flush the collector's and the mutator's
    # CPUs: one shootdown per heap mprotect, within the few the loader's made alone.
    assert 0.9 * (mprotects - 10) <= linux["shootdowns_sent"] <= mprotects, (linux, mprotects)


# Every example of examples/record/ (the Makefile's RECORD_EXAMPLES), with small arguments.
EXAMPLES = {
    "file_server": ["2", "20"],
    "gc_barrier": ["2", "10", "128"],
    "spin_unmap": ["50", "4"],
    "sleep_read": ["20", "100", "8"],
    "prefork_threads": ["2", "2", "20"],
}


@NEEDS_QEMU
def test_every_example_replays_without_a_cycle_of_waits(tmp_path: Path) -> None:
    # Replay compiles the recording's cross-thread order into waits; the run checks them
    # first (Workload::check refuses a cycle, which would deadlock the replay), so a replay
    # that runs is one without a cycle. (gc_barrier's replayed SIGSEGVs are not asserted:
    # some recordings still show stores on pages no recorded call un-protected; see the
    # header of crates/tlbsim-core/src/workload/recorded.rs.)
    sources = {p.stem for p in (Path(__file__).resolve().parents[2] / "examples" / "record").glob("*.c")}
    assert sources == set(EXAMPLES), "a new example needs arguments here"
    for name, args in EXAMPLES.items():
        out = tmp_path / f"{name}.tlbsim"
        s = rec.record([str(NATIVE / name), *args], out, progress=False)
        assert s["exit_code"] == 0, name
        totals = _run(out, cores=3)
        assert totals["violations_security"] == 0 and totals["violations_consistency"] == 0, (name, totals)


@NEEDS_QEMU
def test_replayed_sleeper_sleeps_reads_through_the_page_cache_and_is_not_interrupted(tmp_path: Path) -> None:
    # A reader thread nanosleeps 200 us and preads a page, over and over, while main maps,
    # touches and unmaps memory OPS times. Replayed, each sleep takes its requested time
    # with the reader's CPU idle and lazy, so main's munmaps rarely interrupt it (natively:
    # under 0.05 IPIs per operation); if the sleeps took no time the reader would be in
    # the address space at nearly every munmap.
    ops = 200
    out = tmp_path / "sleep.tlbsim"
    s = rec.record([str(NATIVE / "sleep_read"), str(ops), "200", "16"], out, progress=False)
    assert s["exit_code"] == 0
    # glibc's nanosleep is the clock_nanosleep call; the loader preads libc's headers too.
    sleeps = s["by_kind"].get("syscall:clock_nanosleep", 0) + s["by_kind"].get("syscall:nanosleep", 0)
    assert sleeps >= 1 and s["by_kind"]["syscall:pread64"] >= sleeps
    assert s["by_kind"]["syscall:munmap"] >= ops
    cfg = {
        "machine": {"sockets": 1, "cores_per_socket": 2},
        "workload": {"kind": "recorded", "paths": [str(out)]},
        "os": {"checker": True, "coherence": "linux"},
    }
    stats = tlbsim.run(cfg).stats
    linux = stats["totals"]
    assert linux["segv_signals"] == 0
    assert linux["violations_security"] == 0 and linux["violations_consistency"] == 0
    assert linux["instructions"] == s["instructions"]
    # Every sleep's 200 us, in simulated time.
    assert stats["run"]["seconds"] >= sleeps * 200e-6, (stats["run"], sleeps)
    assert linux["shootdown_ipis_received"] / ops < 0.5, linux


@NEEDS_QEMU
def test_replayed_forked_child_runs_its_own_threads(tmp_path: Path) -> None:
    # A prefork server's worker process with threads: the parent forks a child, the child
    # creates two threads that each map, touch and unmap memory OPS times.
    ops = 60
    out = tmp_path / "prefork.tlbsim"
    s = rec.record([str(NATIVE / "prefork_threads"), "1", "2", str(ops)], out, progress=False)
    assert s["exit_code"] == 0
    assert s["by_kind"]["syscall:munmap"] >= 2 * ops
    info = rec.info(out)
    assert len(info["threads"]) == 4  # the parent, the child and its two threads
    linux = _run(out)
    assert linux["segv_signals"] == 0
    assert linux["violations_security"] == 0 and linux["violations_consistency"] == 0
    assert linux["instructions"] == s["instructions"]
    # The child's two threads run on the two cores in the child's address space: each
    # one's munmap finds the other there some of the time (one IPI at most per munmap).
    assert 0 < linux["shootdown_ipis_sent"] <= s["by_kind"]["syscall:munmap"], linux
    assert _run(out, "oracle")["shootdown_ipis_sent"] == 0


@NEEDS_QEMU
def test_fork_is_recorded_before_the_childs_events(tmp_path: Path) -> None:
    # The parent blocks in waitpid (no recorded call) until the child has exited: its fork
    # record must still reach the file before the child's events (the child's exit flushes
    # them), else replay meets the child's mappings before the process exists.
    exe = tmp_path / "fork_wait"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(HERE / "data/record_fork_wait.c")], check=True)
    out = tmp_path / "fork.tlbsim"
    s = rec.record([str(exe)], out, progress=False)
    assert s["exit_code"] == 0
    info = rec.info(out, syscalls=True)
    calls = info["syscalls"]
    parent = info["threads"][0]["tid"]
    fork = next(
        k for k, c in enumerate(calls) if c["tid"] == parent and c["name"] in ("clone", "fork") and c["ret"] > 0
    )
    child = calls[fork]["ret"]
    child_calls = [k for k, c in enumerate(calls) if c["tid"] == child]
    assert len(child_calls) >= 40  # its 20 mmaps and munmaps (and exit_group)
    assert fork < child_calls[0], (fork, child_calls[0])
    linux = _run(out)
    assert linux["segv_signals"] == 0
    assert linux["instructions"] == s["instructions"]


def _steal_ticks() -> int | None:
    """Time this (virtual) machine's CPUs were runnable but not run by the host, in ticks:
    the `steal` field of /proc/stat's `cpu` line."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    return int(fields[8]) if fields[0] == "cpu" and len(fields) > 8 else None


@NEEDS_QEMU
def test_replayed_spinner_receives_the_shootdowns_it_receives_natively(tmp_path: Path) -> None:
    # One thread spins in user space on a flag until the other has mapped, touched and
    # unmapped memory OPS times: the spinner replays as a spin until main's releasing store,
    # so its CPU is in the address space at each munmap, as it is natively.
    ops = 300
    cmd = [str(NATIVE / "spin_unmap"), str(ops), "4"]
    out = tmp_path / "spin.tlbsim"
    s = rec.record(cmd, out, progress=False)
    assert s["exit_code"] == 0
    assert s["by_kind"]["syscall:munmap"] >= ops
    linux = _run(out)
    assert linux["segv_signals"] == 0
    assert linux["violations_security"] == 0 and linux["violations_consistency"] == 0
    replayed = linux["shootdown_ipis_received"] / ops
    steal0 = _steal_ticks()
    native = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    steal1 = _steal_ticks()
    if native["tlb_ipis"] < 0:
        pytest.skip("/proc/interrupts has no TLB: row: the native count is unknown")
    # While another task (or, in a VM, the host) has the spinner's CPU, that CPU is not in
    # the address space: the kernel's count then measures the machine's load, not the program.
    if native["spinner_preempted"] != 0 or (steal0 is not None and steal1 is not None and steal1 > steal0):
        pytest.skip(
            f"the native spinner was preempted ({native['spinner_preempted']} involuntary switches, "
            f"{None if steal0 is None or steal1 is None else steal1 - steal0} ticks stolen): "
            f"its {native['tlb_ipis'] / ops:.2f} IPIs per operation do not measure the program "
            f"(replayed: {replayed:.2f})"
        )
    real = native["tlb_ipis"] / ops
    assert abs(replayed - real) <= 0.2 * real, (replayed, real, linux)


@pytest.mark.skipif(
    shutil.which("qemu-x86_64") is None or shutil.which("valgrind") is None, reason="needs qemu-x86_64 and valgrind"
)
def test_replayed_dtlb_misses_match_lackey(tmp_path: Path) -> None:
    exe = tmp_path / "pages"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(HERE / "data/record_pages.c")], check=True)
    lackey = tmp_path / "pages.lackey"
    subprocess.run(
        ["valgrind", "--tool=lackey", "--trace-mem=yes", f"--log-file={lackey}", str(exe)],
        check=True,
        capture_output=True,
    )
    recording = tmp_path / "pages.tlbsim"
    rec.record([str(exe)], recording, fetches=False, progress=False)
    machine = {"sockets": 1, "cores_per_socket": 1, "tlb": {"l1d": {"entries": 64, "ways": 4}}}
    traced = tlbsim.run(
        {
            "machine": machine,
            "workload": {"kind": "trace", "format": "lackey", "paths": [str(lackey)], "fetches": False},
        }
    ).stats
    replayed = tlbsim.run(
        {"machine": machine, "workload": {"kind": "recorded", "paths": [str(recording)], "fetches": False}}
    ).stats
    a, b = traced["totals"]["l1_tlb_misses"], replayed["totals"]["l1_tlb_misses"]
    assert a > 100_000
    assert abs(a - b) <= 0.01 * a, (a, b)


def test_bad_recorded_workload_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(tlbsim.TlbsimError, match="workload.paths"):
        tlbsim.run({"workload": {"kind": "recorded", "paths": [str(tmp_path / "none.tlbsim")]}})
    bad = tmp_path / "bad.tlbsim"
    bad.write_bytes(b"TLBSIM\0\x02" + bytes([0x26, 0x7F, 0x00]))
    with pytest.raises(tlbsim.TlbsimError, match=r"byte offset 8"):
        tlbsim.run({"workload": {"kind": "recorded", "paths": [str(bad)]}})


def test_tlb_ipis_reads_the_tlb_row(tmp_path: Path, monkeypatch) -> None:
    fake = tmp_path / "interrupts"
    fake.write_text(
        "           CPU0       CPU1\n  0:         10          0   IO-APIC   2-edge  timer\n"
        " TLB:        120         35   TLB shootdowns\n"
    )
    monkeypatch.setenv("TLBSIM_PROC_INTERRUPTS", str(fake))
    assert rec.tlb_ipis() == 155
    fake.write_text("           CPU0\n  0:         10   IO-APIC   2-edge  timer\n")
    assert rec.tlb_ipis() is None


@NEEDS_QEMU
def test_compare_sets_real_beside_simulated(tmp_path: Path, monkeypatch, capsys) -> None:
    # A kernel without the TLB row: the real count is unknown, the replay's is there.
    fake = tmp_path / "interrupts"
    fake.write_text("           CPU0\n")
    monkeypatch.setenv("TLBSIM_PROC_INTERRUPTS", str(fake))
    from tlbsim.cli import main

    out = tmp_path / "fs.tlbsim"
    code = main(
        ["record", "--compare", "--cores", "2", "--out", str(out), "--", str(NATIVE / "file_server"), "2", "30"]
    )
    assert code == 0
    text = capsys.readouterr().out
    m = re.search(r"real n/a .*simulated ([\d,]+) \(linux, 2 cores", text)
    assert m, text
    assert int(m.group(1).replace(",", "")) > 0
