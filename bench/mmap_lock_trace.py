"""Summarise bench/mmap_lock_trace.sh's trace: for the two munmap_lock workers, how often a
woken writer takes mmap_lock before sleeping again, its wake-to-run latency, and the lock's
free windows (between a release and the next acquisition, by the same thread or the other).
Usage: python3 bench/mmap_lock_trace.py OUT.txt"""

import collections
import re
import sys

LINE = re.compile(r"^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+):\s+(\w+):\s*(.*)$")


def quantiles(v: list[float]) -> str:
    if not v:
        return "none"
    v = sorted(v)
    n = len(v)
    return f"n={n} median {v[n // 2] * 1e6:.1f} us, p10 {v[n // 10] * 1e6:.1f}, p90 {v[9 * n // 10] * 1e6:.1f}"


def main(path: str) -> None:
    with open(path) as f:
        ev = [(m[1], int(m[2]), float(m[4]), m[5], m[6]) for m in map(LINE.match, f) if m]
    writes = collections.Counter(
        pid
        for comm, pid, _, name, rest in ev
        if comm.startswith("munmap_lock") and name == "mmap_lock_acquire_returned" and "write=true" in rest
    )
    workers = [p for p, _ in writes.most_common(2)]
    mms = collections.Counter(
        re.search(r"mm=(\w+)", r)[1] for _, p, _, n, r in ev if p in workers and n.startswith("mmap_lock")
    )
    mm = "mm=" + mms.most_common(1)[0][0]
    waking: dict[int, float] = {}
    woken: set[int] = set()
    latency: list[float] = []
    outcome: collections.Counter[str] = collections.Counter()
    windows: dict[bool, list[float]] = {True: [], False: []}
    free_since, last_releaser = None, None
    for _, pid, t, name, rest in ev:
        if name == "sched_waking":
            p = int(re.search(r" pid=(\d+)", rest)[1])
            if p in workers:
                waking.setdefault(p, t)
        elif name == "sched_switch":
            m = re.search(r"prev_pid=(\d+).*prev_state=(\S+) ==> .*next_pid=(\d+)", rest)
            prev, state, nxt = int(m[1]), m[2], int(m[3])
            if prev in woken and state == "D":
                outcome["woken, slept again without the lock"] += 1
                woken.discard(prev)
            if nxt in waking:
                latency.append(t - waking.pop(nxt))
                woken.add(nxt)
        elif name.startswith("mmap_lock") and pid in workers and mm in rest:
            if name == "mmap_lock_acquire_returned":
                if pid in woken:
                    outcome["woken, took the lock"] += 1
                    woken.discard(pid)
                if free_since is not None:
                    windows[last_releaser == pid].append(t - free_since)
                free_since = None
            elif name == "mmap_lock_released":
                free_since, last_releaser = t, pid
    print("wake-to-run latency:", quantiles(latency))
    print("wakes:", dict(outcome))
    print("free windows, the releaser takes it again:", quantiles(windows[True]))
    print("free windows, the other thread takes it:", quantiles(windows[False]))


if __name__ == "__main__":
    main(sys.argv[1])
