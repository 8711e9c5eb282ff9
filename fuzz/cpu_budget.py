"""Fuzz one target for a budget of CPU time rather than of wall time (issue 51: "one
CPU-hour per target"): `python3 fuzz/cpu_budget.py TARGET CPU_SECONDS` (`make fuzz-cpu
TARGET=x CPU_SECONDS=3600`).

`make fuzz` bounds a run by wall time (afl-fuzz -V, libFuzzer -max_total_time), which on a
shared machine is not CPU time: a fuzzer under `nice` on a loaded machine gets a fraction
of a core. This runs `make fuzz TARGET=... SECONDS=<a wall bound far beyond the budget>` in
a process group of its own and every 10 s adds up the CPU time of it and its descendants:
for each live one, user + system time of its own and of the children it has reaped (so
each process's time is counted once: in itself while it lives, then in the parent that
reaped it — afl-fuzz's fork server reaps its children). When the sum reaches
the budget it stops the fuzzer with SIGINT (afl-fuzz and libFuzzer both stop cleanly on
it, afl-fuzz writing its final fuzzer_stats), then prints the CPU seconds, the wall time
and the fuzzer's own counts: AFL++'s fuzzer_stats lines, or libFuzzer's last status line
and the corpus size. Findings are where `make fuzz` puts them (fuzz/out/TARGET/).

Under `nice` on a kernel with autogroup scheduling (`/proc/sys/kernel/sched_autogroup_enabled`
= 1, the default of most distributions' kernels) the niceness counts only within a
session, and afl-fuzz's fork server starts a session of its own: the fuzzed program then
competes with every other session as an equal. To keep a fuzzer in the background, as
root: `echo 0 > /proc/sys/kernel/sched_autogroup_enabled`.

Linux only (/proc). Exit status: 0, or 1 when the fuzzer stopped on its own before the
budget (a crash stops neither fuzzer: they keep the input and go on).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")
POLL_SECONDS = 10.0


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of `root` and its live descendants, each with the children it has reaped.

    By parentage, not by process group: afl-fuzz's fork server calls setsid()."""
    procs: dict[int, tuple[int, int]] = {}  # pid: (parent, clock ticks)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = (Path("/proc") / entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile: its time is in its parent's once reaped
        # the command is in parentheses and may hold spaces: split after the last ')'
        fields = stat[stat.rindex(")") + 2 :].split()
        # fields[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17
        procs[int(entry)] = (int(fields[1]), sum(int(f) for f in fields[11:15]))
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in procs.items():
        children.setdefault(parent, []).append(pid)
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        if pid in procs:
            total += procs[pid][1]
        stack.extend(children.get(pid, []))
    return total / TICKS


def make_list(name: str) -> list[str]:
    """A `NAME := a b c` list of the Makefile."""
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line.startswith(f"{name} :="):
            return line.split(":=", 1)[1].split()
    raise SystemExit(f"cpu_budget.py: no {name} in the Makefile")


def report(target: str, cpu: float, wall: float) -> None:
    print(f"target {target}: {cpu:.0f} CPU seconds in {wall:.0f} s of wall time")
    stats = ROOT / "fuzz" / "out" / target / "default" / "fuzzer_stats"
    log = ROOT / "fuzz" / "out" / f"{target}.log"
    if stats.exists():
        for line in stats.read_text().splitlines():
            if re.match(r"(run_time|execs_done|execs_per_sec|corpus_count|saved_crashes|saved_hangs)\s", line):
                print("  " + line)
    elif log.exists():
        status = [line for line in log.read_text(errors="replace").splitlines() if re.match(r"#\d+", line)]
        if status:
            print("  last libFuzzer status: " + status[-1])
        corpus = ROOT / "fuzz" / "out" / target / "corpus"
        if corpus.is_dir():
            print(f"  corpus: {len(list(corpus.iterdir()))} files")
        found = sorted(p.name for p in (ROOT / "fuzz" / "out" / target).glob("*-*") if p.is_file())
        print("  findings: " + (", ".join(found) if found else "none"))


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: cpu_budget.py TARGET CPU_SECONDS", file=sys.stderr)
        return 2
    target, budget = argv[0], int(argv[1])
    wall_bound = max(budget * 20, 600)
    # Build first, outside the budget (`make fuzz` then finds it built: a second or two).
    rust = target in make_list("FUZZ_RUST_TARGETS")
    if not rust and target not in make_list("FUZZ_PY_TARGETS"):
        print(f"cpu_budget.py: unknown target {target!r}", file=sys.stderr)
        return 2
    subprocess.run(["make", "--no-print-directory", "fuzz-build" if rust else "develop"], cwd=ROOT, check=True)
    start = time.monotonic()
    proc = subprocess.Popen(["make", "--no-print-directory", "fuzz", f"TARGET={target}", f"SECONDS={wall_bound}"], cwd=ROOT, process_group=0)
    cpu = 0.0
    stopped = False
    try:
        while proc.poll() is None:
            time.sleep(POLL_SECONDS)
            cpu = max(cpu, tree_cpu_seconds(proc.pid))
            if cpu >= budget and not stopped:
                os.killpg(proc.pid, signal.SIGINT)
                stopped = True
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGINT)
        stopped = True
    proc.wait()
    report(target, cpu, time.monotonic() - start)
    return 0 if stopped else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
