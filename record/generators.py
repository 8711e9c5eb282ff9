"""`make generators`: the generators held against the programs they stand for (issue 47 item 6).

For each generator that models one of the programs of `make recordings` (record/recordings.py,
docs/GUIDE.md "A library of real programs"), this replays the program's recording and runs
the generator on the same machine config (one socket of `--cores` cores, the recordings'
`os.coherence = "linux"`; the generator with the recording's threads where it has threads,
sized to the recording's operations), and sets the two side by side per operation:

- shootdowns (`shootdowns_sent`, by cause), shootdown IPIs (`shootdown_ipis_sent`), page
  faults (`page_faults`), system calls: the recording's own (its `syscall:*` events, what
  the program called under QEMU) and the model's (`syscalls`: the calls the OS model runs,
  which for a generator are only its mmap/munmap/madvise and the like), instructions;
- TLB misses per thousand instructions: first level (`l1_tlb_misses`), second level
  (`l2_tlb_misses`, the STLB) and page walks (`walks`);
- the false-positive share: `false_positive_targets` (a delivered request whose CPU held no
  translation of the range, os/shootdown.rs `deliver`) over the requests delivered
  (`shootdown_ipis_received` + `shootdown_messages_received` +
  `shootdowns_deferred_received`);
- the real IPIs per operation of the native runs (`results.json` of `make recordings`).

The recording's operations are its load generator's (requests, transactions, gets/sets) or
its input's (bzip2 blocks); the generator's are its own `ops_completed` of the classes that
stand for the program (reclaim: the same 500,000 bytes of input, counted in the recording's
100,000-byte bzip2 blocks). Per-thread figures of each recording (instructions and system
calls of every thread) go to the JSON, with the per-operation counts of each system call.

Writes DIR/generators.json and DIR/generators.md. Needs the recordings of `make recordings`
(`--recordings`, default out/recordings). Not part of `make test`.

Usage: python record/generators.py [--recordings DIR] [--out DIR] [--cores N] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import tlbsim
from tlbsim import record as rec

# record/recordings.py's loads, which fix the generators' sizes (the same operations).
APACHE_REQUESTS = 2000  # ab -n 2000
APACHE_WORKERS = 4  # ThreadsPerChild = 2 x 2 threads (record/recordings.py Apache)
MEMCACHED_OPS = 20000  # memaslap -x 20000
PGBENCH_TRANSACTIONS = 100  # pgbench -c 2 -t 50
PBZIP2_BLOCK = 100_000  # pbzip2 -b1: the recording's operation (5 of its 500,000-byte input)
# The reclaim generator's input: two 500k BWT blocks, one per compressor thread. Its
# compute_cycles are per BWT block whatever the block's length (generators/reclaim.rs), so
# the recording's 500,000 bytes split over 2 threads would be two 250,000-byte blocks at a
# full block's cost each; whole blocks keep its cost per byte the one it stands for.
RECLAIM_BYTES = 1_000_000
THREADS = 2  # the recordings' -p / -t / -c (record/recordings.py DEFAULT_THREADS)
YCSB_OPS = 100_000  # record/recordings.py YCSB_OPS
# record/ycsb_leveldb.cc's database as loaded by record/recordings.py: 150,000 records of
# 1,000 bytes (150 MiB of tables on disk, `du`) and a table cache of 64 (max_open_files 74).
YCSB_DB_BYTES = 150 << 20
YCSB_TABLE_CACHE = 64
# record/ycsb_lmdb.c's data.mdb for the same 150,000 records: 381,526,016 bytes.
YCSB_LMDB_BYTES = 364 << 20
# wrk's threads in the apache generator's mpm_event model (generators/apache.rs WRK_THREADS).
WRK_THREADS = 6


@dataclass
class Side:
    """One generator run: its workload and the classes whose operations count."""

    label: str
    workload: dict
    classes: list[str]
    # Operations to divide by instead of the classes' ops_completed (reclaim: the input's
    # bytes in the recording's blocks).
    ops: int | None = None
    note: str = ""


@dataclass
class Pairing:
    name: str
    recordings: list[str]
    unit: str
    generators: list[Side] = field(default_factory=list)


# The threads of a recording that do the load's work, by a system call only they make: a
# worker of Apache sends the response with writev (the listener accepts and polls), one of
# memcached with sendmsg, a PostgreSQL backend answers pgbench with sendto; pbzip2's
# compressors are the threads that call no read or write (its producer reads, its writer
# writes) and run most of its instructions.
ROLES = {
    "apache2-X-k": {"workers": "writev", "listener": "epoll_wait"},
    "apache2-X": {"workers": "writev", "listener": "accept4"},
    "apache2": {"workers": "writev", "listener": "accept4"},
    "memcached": {"workers": "sendmsg"},
    "postgresql": {"backends": "sendto"},
}


def pairings() -> list[Pairing]:
    return [
        Pairing(
            "apache",
            ["apache2-X-k", "apache2-X", "apache2"],
            "request",
            [
                Side(
                    "apache (default model)",
                    # One process of the recording's 4 workers (both recordings serve from one
                    # process), 2000 requests in all.
                    {
                        "kind": "apache",
                        "threads": APACHE_WORKERS,
                        "processes": 1,
                        "ops": APACHE_REQUESTS // APACHE_WORKERS,
                    },
                    ["worker"],
                ),
                Side(
                    "apache, compute_cycles = 20,000",
                    # The default before this comparison (generators/apache.rs REQUEST_CYCLES).
                    {
                        "kind": "apache",
                        "threads": APACHE_WORKERS,
                        "processes": 1,
                        "ops": APACHE_REQUESTS // APACHE_WORKERS,
                        "compute_cycles": 20_000,
                    },
                    ["worker"],
                    note="the former [inferred] default",
                ),
                Side(
                    "apache test=mpm_event",
                    # One child of 4 workers; wrk on the second core (the model isolates the
                    # client on cores of its own: 1 of the 2); ~2000 responses.
                    {
                        "kind": "apache",
                        "test": "mpm_event",
                        "threads": APACHE_WORKERS,
                        "processes": 1,
                        "client_cores": 1,
                        "ops": APACHE_REQUESTS // WRK_THREADS,
                    },
                    ["worker"],
                    note="server on 1 core, wrk on the other",
                ),
            ],
        ),
        Pairing(
            "reclaim ~ PBZIP2",
            ["pbzip2"],
            "bzip2 block (100,000 input bytes)",
            [
                Side(
                    "reclaim (default memory limit)",
                    {"kind": "reclaim", "threads": THREADS, "region_bytes": RECLAIM_BYTES},
                    [],
                    ops=RECLAIM_BYTES // PBZIP2_BLOCK,
                    note="limit: half the input, 1 MiB",
                ),
                Side(
                    "reclaim (no memory pressure)",
                    {"kind": "reclaim", "threads": THREADS, "region_bytes": RECLAIM_BYTES, "memory_limit_mib": 1024},
                    [],
                    ops=RECLAIM_BYTES // PBZIP2_BLOCK,
                    note="limit 1 GiB, as the recording ran",
                ),
            ],
        ),
        Pairing(
            "vm-mix OLTP ~ PostgreSQL",
            ["postgresql"],
            "transaction",
            [
                Side(
                    "vm-mix tpcc-tpcc",
                    # Two terminals per guest, as pgbench's 2 clients; 50 transactions each.
                    {"kind": "vm-mix", "test": "tpcc-tpcc", "threads": THREADS, "ops": PGBENCH_TRANSACTIONS // THREADS},
                    ["dom1-tpcc", "dom2-tpcc"],
                    note="Xen guests: dom0 and the two guests' work counted too",
                ),
            ],
        ),
        Pairing(
            "ycsb leveldb ~ LevelDB (YCSB-B)",
            ["ycsb-leveldb"],
            "YCSB-B request",
            [
                Side(
                    "ycsb leveldb (YCSB-B)",
                    # The recording's database: 150,000 records of 1,000 bytes in ~75 tables of
                    # 2 MiB, a table cache of 64 (record/ycsb_leveldb.cc), no memory pressure.
                    {
                        "kind": "ycsb",
                        "test": "leveldb",
                        "ycsb": "b",
                        "threads": THREADS,
                        "ops": YCSB_OPS // THREADS,
                        "region_bytes": YCSB_DB_BYTES,
                        "table_cache": YCSB_TABLE_CACHE,
                        "memory_limit_mib": 1024,
                    },
                    ["client"],
                    note="table cache 64 of 75 tables, limit 1 GiB, as the recording ran",
                ),
                Side(
                    "ycsb leveldb (YCSB-B, defaults)",
                    {"kind": "ycsb", "test": "leveldb", "ycsb": "b", "threads": THREADS, "ops": YCSB_OPS // THREADS},
                    ["client"],
                    note="the generator's defaults: 64 MiB, half the tables cached, a quarter in memory",
                ),
            ],
        ),
        Pairing(
            "ycsb lmdb ~ LMDB (YCSB-C)",
            ["ycsb-lmdb"],
            "YCSB-C request",
            [
                Side(
                    "ycsb lmdb (YCSB-C)",
                    # The recording's data file (364 MiB), no memory pressure.
                    {
                        "kind": "ycsb",
                        "test": "lmdb",
                        "ycsb": "c",
                        "threads": THREADS,
                        "ops": YCSB_OPS // THREADS,
                        "region_bytes": YCSB_LMDB_BYTES,
                        "memory_limit_mib": 1024,
                    },
                    ["client"],
                    note="364 MiB, limit 1 GiB, as the recording ran",
                ),
            ],
        ),
        Pairing(
            "mitosis-bench memcached ~ memcached",
            ["memcached"],
            "get/set",
            [
                Side(
                    "mitosis-bench memcached",
                    # `redis` is the same operation (generators/mitosis.rs).
                    {"kind": "mitosis-bench", "test": "memcached", "threads": THREADS, "ops": MEMCACHED_OPS // THREADS},
                    ["memcached"],
                ),
            ],
        ),
    ]


def measures(stats: dict, ops: float) -> dict:
    """Per-operation and per-thousand-instruction figures of a run's stats."""
    totals = stats["totals"]
    kinstr = totals["instructions"] / 1000 or float("nan")
    per = stats["per_structure"]
    l1d = sum(per[k]["misses"] for k in ("l1d", "l1d_2m", "l1d_1g") if k in per)
    l1i = per["l1i"]["misses"] if "l1i" in per else 0
    delivered = (
        totals["shootdown_ipis_received"]
        + totals["shootdown_messages_received"]
        + totals["shootdowns_deferred_received"]
    )
    return {
        "ops": ops,
        "instructions_per_op": totals["instructions"] / ops,
        "shootdowns_per_op": totals["shootdowns_sent"] / ops,
        "shootdowns_per_op_by_cause": {k: v / ops for k, v in totals["shootdowns_sent_by_reason"].items() if v},
        "ipis_per_op": totals["shootdown_ipis_sent"] / ops,
        "page_faults_per_op": totals["page_faults"] / ops,
        "model_syscalls_per_op": totals["syscalls"] / ops,
        "model_syscalls_per_op_by_call": {k: v["calls"] / ops for k, v in totals["syscalls_by_call"].items()},
        "l1_misses_pki": totals["l1_tlb_misses"] / kinstr,
        "l1d_misses_pki": l1d / kinstr,
        "l1i_misses_pki": l1i / kinstr,
        "stlb_misses_pki": totals["l2_tlb_misses"] / kinstr,
        "walks_pki": totals["walks"] / kinstr,
        "false_positive_share": totals["false_positive_targets"] / delivered if delivered else None,
        "totals": {
            k: totals[k]
            for k in (
                "instructions",
                "accesses",
                "l1_tlb_misses",
                "l2_tlb_misses",
                "walks",
                "page_faults",
                "cow_faults",
                "file_faults",
                "syscalls",
                "shootdowns_sent",
                "shootdown_ipis_sent",
                "shootdown_ipis_received",
                "false_positive_targets",
                "pages_reclaimed",
                "segv_signals",
            )
        },
    }


def recorded_work(name: str, path: Path) -> dict:
    """A recording's work, whole (not per operation): instructions, loads and stores and
    system calls of all threads and of each role (`ROLES`), its threads with their system
    calls by name, and its system calls by name."""
    info = rec.info(path, syscalls=True)
    threads = info["threads"]
    calls_of: dict[int, dict[str, int]] = {}
    for c in info.pop("syscalls"):
        calls = calls_of.setdefault(c["tid"], {})
        calls[c["name"]] = calls.get(c["name"], 0) + 1
    for t in threads:
        t["syscalls_by_call"] = dict(sorted(calls_of.get(t["tid"], {}).items(), key=lambda kv: -kv[1]))

    def work(ts: list[dict]) -> dict:
        return {
            "threads": len(ts),
            "instructions": sum(t["instructions"] for t in ts),
            "loads_stores": sum(t["loads"] + t["stores"] for t in ts),
            "syscalls": sum(t["syscalls"] for t in ts),
        }

    roles = {}
    taken: set[int] = set()
    for role, call in ROLES.get(name, {}).items():
        # The threads that make `call` (a listener: the one that makes it most, of the rest).
        mine = [t for t in threads if t["tid"] not in taken and t["syscalls_by_call"].get(call)]
        if role == "listener" and mine:
            mine = [max(mine, key=lambda t: t["syscalls_by_call"][call])]
        taken.update(t["tid"] for t in mine)
        roles[role] = {"by": call, **work(mine)}
    calls = {k.split(":", 1)[1]: v for k, v in info["by_kind"].items() if k.startswith("syscall:")}
    return {
        "all": work(threads),
        # The first thread (the process started: start-up, configuration, and for a server
        # its parent's or main thread's waits) left out.
        "after_first": work(threads[1:]),
        "roles": roles,
        "calls": dict(sorted(calls.items(), key=lambda kv: -kv[1])),
        "threads": threads,
    }


def per_op(w: dict, ops: float) -> dict:
    return {k: v / ops if k != "threads" else v for k, v in w.items() if k != "by"} | (
        {"by": w["by"]} if "by" in w else {}
    )


def recording_side(name: str, recordings: Path, results: dict, cores: int) -> dict:
    """Replay recording `name` (as record/recordings.py does) and measure it per operation."""
    r = results.get(name)
    path = recordings / f"{name}.tlbsim"
    if r is None or not path.exists() or not r.get("recording", {}).get("ops"):
        return {"label": name, "error": f"no recording of {name} in {recordings} (run make recordings)"}
    ops = r["recording"]["ops"]
    t0 = time.monotonic()
    stats = tlbsim.run(rec.replay_config(path, cores, fetches=False)).stats
    m = measures(stats, ops)
    w = recorded_work(name, path)
    m.update(
        {
            "label": name,
            "command": r.get("command"),
            "replay_seconds": time.monotonic() - t0,
            "recorded_instructions_per_op": w["all"]["instructions"] / ops,
            "recorded_instructions_per_op_after_first_thread": w["after_first"]["instructions"] / ops,
            "recorded_syscalls_per_op": w["all"]["syscalls"] / ops,
            "recorded_syscalls_per_op_by_call": {k: v / ops for k, v in w["calls"].items()},
            "recorded_loads_stores_per_op": w["all"]["loads_stores"] / ops,
            "roles": {role: per_op(x, ops) for role, x in w["roles"].items()},
            "threads": w["threads"],
            "native_ipis_per_op": r.get("native", {}).get("ipis_per_op"),
            "native_ipis_source": (r.get("native", {}).get("runs") or [{}])[0].get("source"),
        }
    )
    return m


def marginal(name: str, short: Path, long: Path) -> dict | None:
    """The work per operation by difference of two recordings of `name` under loads of
    different sizes (`--long`: `record/recordings.py --load-scale N`): what a program does
    once (start-up, a connection's set-up, exit) cancels out."""
    runs = []
    for d in (short, long):
        path, results = d / f"{name}.tlbsim", d / "results.json"
        if not path.exists() or not results.exists():
            return None
        r = next((x for x in json.loads(results.read_text()) if x["name"] == name), None)
        if r is None or not r.get("recording", {}).get("ops"):
            return None
        runs.append((r["recording"]["ops"], recorded_work(name, path)))
    (ops0, w0), (ops1, w1) = runs
    d_ops = ops1 - ops0
    if d_ops <= 0:
        return None

    def diff(a: dict, b: dict) -> dict:
        return {k: (b[k] - a[k]) / d_ops for k in ("instructions", "loads_stores", "syscalls")}

    return {
        "ops": [ops0, ops1],
        "all": diff(w0["all"], w1["all"]),
        "roles": {
            role: {"by": x["by"], **diff(w0["roles"][role], x)}
            for role, x in w1["roles"].items()
            if role in w0["roles"]
        },
        "calls": {k: (v - w0["calls"].get(k, 0)) / d_ops for k, v in w1["calls"].items()},
    }


def generator_side(side: Side, cores: int) -> dict:
    t0 = time.monotonic()
    stats = tlbsim.run(
        {"machine": {"sockets": 1, "cores_per_socket": cores}, "workload": side.workload, "os": {"coherence": "linux"}}
    ).stats
    ops = side.ops if side.ops is not None else sum(stats["per_class"][c]["ops_completed"] for c in side.classes)
    m = measures(stats, ops)
    m.update(
        {
            "label": side.label,
            "workload": side.workload,
            "note": side.note,
            "seconds": time.monotonic() - t0,
            "makespan_cycles": stats["run"]["makespan_cycles"],
        }
    )
    return m


def fmt(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "—"
    if x != 0 and abs(x) < 10**-digits:
        return f"{x:.1e}"
    return f"{x:,.{digits}f}"


def causes(by: dict) -> str:
    return ", ".join(f"{k} {fmt(v, 3)}" for k, v in by.items()) or "—"


def table(out: list[dict], cores: int) -> str:
    head = (
        "| pairing | side | ops | instructions / op | syscalls / op: program's (model's) | page faults / op "
        "| shootdowns / op (by cause) | IPIs / op (real) | L1 TLB misses / kinstr: data (instr.) | STLB misses / kinstr "
        "| walks / kinstr | false-positive share |"
    )
    rows = [head, "| " + " | ".join(["---"] * 12) + " |"]
    for p in out:
        for s in p["sides"]:
            if "error" in s:
                rows.append(f"| {p['name']} | {s['label']} | {s['error']} |" + " |" * 9)
                continue
            recorded = "recorded_syscalls_per_op" in s
            syscalls = (
                f"{fmt(s['recorded_syscalls_per_op'])} ({fmt(s['model_syscalls_per_op'])})"
                if recorded
                else f"— ({fmt(s['model_syscalls_per_op'])})"
            )
            ipis = fmt(s["ipis_per_op"], 3)
            if recorded and s.get("native_ipis_per_op") is not None:
                ipis += f" ({fmt(s['native_ipis_per_op'], 3)})"
            label = f"recording `{s['label']}`" if recorded else f"generator {s['label']}"
            if s.get("note"):
                label += f" ({s['note']})"
            rows.append(
                f"| {p['name']} | {label} | {fmt(s['ops'], 0)} × {p['unit']} | {fmt(s['instructions_per_op'], 0)} | "
                f"{syscalls} | {fmt(s['page_faults_per_op'])} | {fmt(s['shootdowns_per_op'], 3)} "
                f"({causes(s['shootdowns_per_op_by_cause'])}) | {ipis} | {fmt(s['l1d_misses_pki'])} ({fmt(s['l1i_misses_pki'])}) | "
                f"{fmt(s['stlb_misses_pki'])} | {fmt(s['walks_pki'])} | {fmt(s['false_positive_share'])} |"
            )
    return "\n".join(rows) + f'\n\nMachine: one socket of {cores} cores, `os.coherence = "linux"`.\n'


def syscall_table(out: list[dict]) -> str:
    """Each recording's most frequent system calls per operation."""
    rows = [
        (
            "| recording | instructions / op: all threads (after the first) | by role: instructions (system calls) / op "
            "| loads+stores / op | most frequent system calls / op |"
        ),
        "| --- | --- | --- | --- | --- |",
    ]
    seen = set()
    for p in out:
        for s in p["sides"]:
            if "recorded_syscalls_per_op" not in s or s["label"] in seen:
                continue
            seen.add(s["label"])
            top = ", ".join(f"{k} {fmt(v, 3)}" for k, v in list(s["recorded_syscalls_per_op_by_call"].items())[:8])
            roles = "; ".join(
                f"{role} ({r['threads']}, by {r['by']}): {fmt(r['instructions'], 0)} ({fmt(r['syscalls'])})"
                for role, r in s["roles"].items()
            )
            rows.append(
                f"| `{s['label']}` | {fmt(s['recorded_instructions_per_op'], 0)} "
                f"({fmt(s['recorded_instructions_per_op_after_first_thread'], 0)}) | {roles or '—'} | "
                f"{fmt(s['recorded_loads_stores_per_op'], 0)} | {top} |"
            )
    return "\n".join(rows) + "\n"


def marginal_table(margins: dict[str, dict]) -> str:
    rows = [
        (
            "| recording | operations (short, long) | instructions / op: all threads; by role | loads+stores / op "
            "| system calls / op: all (most frequent) |"
        ),
        "| --- | --- | --- | --- | --- |",
    ]
    for name, m in margins.items():
        roles = "; ".join(f"{role} (by {r['by']}): {fmt(r['instructions'], 0)}" for role, r in m["roles"].items())
        top = ", ".join(f"{k} {fmt(v, 3)}" for k, v in sorted(m["calls"].items(), key=lambda kv: -kv[1])[:6])
        rows.append(
            f"| `{name}` | {m['ops'][0]:,}, {m['ops'][1]:,} | {fmt(m['all']['instructions'], 0)}"
            f"{'; ' + roles if roles else ''} | {fmt(m['all']['loads_stores'], 0)} | "
            f"{fmt(m['all']['syscalls'])} ({top}) |"
        )
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recordings", default="out/recordings", help="make recordings' directory (default: %(default)s)")
    ap.add_argument("--out", default="out/generators", help="where the table and JSON go (default: %(default)s)")
    ap.add_argument(
        "--cores", type=int, default=2, help="cores of the one socket (default: %(default)s, as the recordings')"
    )
    ap.add_argument("--only", nargs="*", help="pairings to run (by the start of their name)")
    ap.add_argument(
        "--long",
        help="recordings of the same servers under larger loads (record/recordings.py --load-scale N --out DIR): "
        "the work per operation by difference",
    )
    args = ap.parse_args(argv)
    recordings = Path(args.recordings).resolve()
    results_path = recordings / "results.json"
    results = {r["name"]: r for r in json.loads(results_path.read_text())} if results_path.exists() else {}
    out_dir = Path(args.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    replayed: dict[str, dict] = {}
    out = []
    for p in pairings():
        if args.only and not any(p.name.startswith(o) for o in args.only):
            continue
        print(f"== {p.name}", flush=True)
        sides = []
        for name in p.recordings:
            if name not in replayed:
                replayed[name] = recording_side(name, recordings, results, args.cores)
            sides.append(replayed[name])
        for g in p.generators:
            try:
                sides.append(generator_side(g, args.cores))
            except Exception as e:  # noqa: BLE001 (a failed run is a row of the table)
                sides.append({"label": g.label, "error": f"{type(e).__name__}: {e}"})
        for s in sides:
            print(
                f"   {s['label']}: "
                + (
                    s["error"]
                    if "error" in s
                    else f"{s['instructions_per_op']:,.0f} instr/op, {s['ipis_per_op']:.3f} IPIs/op, "
                    f"{s['page_faults_per_op']:.2f} faults/op"
                ),
                flush=True,
            )
        out.append({"name": p.name, "unit": p.unit, "sides": sides})
    margins = {}
    if args.long:
        for name in sorted(
            {n for p in out for s in p["sides"] if "recorded_syscalls_per_op" in s for n in [s["label"]]}
        ):
            m = marginal(name, recordings, Path(args.long).resolve())
            if m is not None:
                margins[name] = m
    (out_dir / "generators.json").write_text(json.dumps({"pairings": out, "by_difference": margins}, indent=1))
    md = table(out, args.cores) + "\n" + syscall_table(out)
    if margins:
        md += "\nBy difference of two loads (`--long`):\n\n" + marginal_table(margins)
    (out_dir / "generators.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
