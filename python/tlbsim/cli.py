"""The ``tlbsim`` command: run, config, sweep, collect, report, bench, convert, demo,
calibrate, validate, reproduce.

User errors (tlbsim errors, OS errors) print ``tlbsim: error: <message>`` and exit 2.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tlbsim
from tlbsim.progress import ProgressBar, StatusLine, rate_line
from tlbsim.summary import host_note, summary_table

EXIT_USAGE = 2


def _override(text: str) -> str:
    key, sep, _ = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected dotted.key=value, got {text!r}")
    return text


def _run_watched(config: Path | None, overrides: list[str], show: bool) -> tuple[tlbsim.Result, bool]:
    """Run in a worker thread so that this one can draw the progress line and take Ctrl-C:
    the first Ctrl-C stops the run at its next check and keeps the stats so far (partial);
    returns (result, interrupted)."""
    import threading
    import time

    control = tlbsim.RunControl()
    box: dict[str, Any] = {}

    # The main thread polls an Event's flag and sleeps: a Ctrl-C that interrupts join() can
    # leave the thread looking finished while it still runs, and a KeyboardInterrupt that
    # lands inside Event.wait() between a lock's acquire and the `with` block that releases
    # it could leave the Event's lock held (CPython issue 29988), blocking the worker's
    # finished.set(). is_set() takes no lock; time.sleep() is safe to interrupt.
    finished = threading.Event()

    def work() -> None:
        try:
            box["result"] = tlbsim.run(config, overrides=overrides, control=control)
        except BaseException as err:  # noqa: BLE001 - re-raised in the main thread
            box["error"] = err
        finally:
            finished.set()

    worker = threading.Thread(target=work, name="tlbsim-run", daemon=True)
    start = time.monotonic()
    worker.start()
    interrupted = False
    line = StatusLine()
    next_draw = start
    while not finished.is_set():
        try:
            time.sleep(0.02)
            if show and not finished.is_set() and time.monotonic() >= next_draw:
                next_draw = time.monotonic() + 0.25
                done, total, unit = control.progress()
                line.show(rate_line(done, total, unit, time.monotonic() - start))
        except KeyboardInterrupt:
            if interrupted:
                raise
            interrupted = True
            control.stop()
            sys.stderr.write(
                "\ninterrupted: stopping at the next check, keeping the stats so far (Ctrl-C again to abandon them)\n"
            )
    line.clear()
    if "error" in box:
        raise box["error"]
    return box["result"], interrupted


def _difference(mine: Any, theirs: Any, key: str = "") -> str | None:
    """The first dotted key at which two configs differ, with both values."""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        for k in sorted(set(mine) | set(theirs)):
            found = _difference(mine.get(k), theirs.get(k), f"{key}.{k}" if key else k)
            if found:
                return found
        return None
    if mine == theirs:
        return None

    def shown(v: Any) -> str:
        text = json.dumps(v)
        return text if len(text) <= 60 else text[:57] + "..."

    return f"{key or 'the config'}: {shown(mine)} here, {shown(theirs)} there"


def _refuse_other_run(out: Path, config: Path | None, overrides: list[str], policy: str | None = None) -> None:
    """Refuse to write over a folder holding a different run (its config.json differs from
    this run's effective config), before running. The same config again is allowed: runs
    are deterministic, so it rewrites the same results (or completes an interrupted run)."""
    previous = out / "config.json"
    if not previous.is_file():
        return
    try:
        theirs = json.loads(previous.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        theirs = None
    mine = tlbsim.resolve(config, overrides=overrides)
    if policy is not None:
        mine["os"]["coherence"] = policy  # what a Python policy's run records there
    where = _difference(mine, theirs)
    if where is None:
        return
    raise FileExistsError(
        errno.EEXIST,
        f"holds a different run (config.json differs at {where}): choose another --out folder, "
        "or pass --force to overwrite it",
        str(out),
    )


def _cmd_run(args: argparse.Namespace) -> int:
    config = Path(args.config) if args.config else None
    out = Path(args.out) if args.out else Path("out") / (config.stem if config else "run")
    overrides = list(args.set or [])
    python_policy = None
    if args.policy and ":" in args.policy:
        from tlbsim.policy import add_policy_folders, load_policy

        # As `tlbsim fuzz` does: a module in the working directory or beside the config.
        add_policy_folders(os.getcwd(), *([config.resolve().parent] if config else []))
        try:
            python_policy = load_policy(args.policy)()
        except (ImportError, AttributeError, TypeError, ValueError) as err:
            raise tlbsim.ConfigError(f"--policy {args.policy}: {err}") from None
    elif args.policy:
        overrides.append(f"os.coherence={args.policy}")
    if not args.force:
        label = f"{type(python_policy).__module__}:{type(python_policy).__qualname__}" if python_policy else None
        _refuse_other_run(out, config, overrides, label)
    show = sys.stderr.isatty() and not args.quiet
    if python_policy is not None:
        # A Python policy's run takes no RunControl: no progress line, Ctrl-C abandons it.
        result, interrupted = tlbsim.run(config, overrides=overrides, policy=python_policy), False
    else:
        result, interrupted = _run_watched(config, overrides, show)
    result.save(out)
    note = host_note(result.config)
    if note:
        print(textwrap.fill(note, width=100) + "\n")
    print(summary_table(result.stats))
    partial = bool(result.stats.get("run", {}).get("partial"))
    if partial:
        print(
            "\nPARTIAL: the run was interrupted; these are the stats up to that point "
            "(stats.json has run.partial = true)"
        )
    print(f"\nwrote {out / 'config.json'}\n      {out / 'stats.json'}")
    return 130 if interrupted else 0


def ptdump_table(dump: dict[str, Any]) -> str:
    """Mitosis Fig. 3 as text: per level (rows, root first) and socket (columns), table
    pages, then [pointers to socket 0, 1, ...] and the share pointing off the socket; last,
    Fig. 4's share of remote leaf PTEs a walker on each socket reads."""
    sockets = dump["sockets"]
    head = "level " + "".join(f"{'socket ' + str(s['socket']):>32}" for s in sockets)
    lines = [head]
    for i, level in enumerate(sockets[0]["levels"] if sockets else []):
        cells = []
        for s in sockets:
            lv = s["levels"][i]
            total = lv["local_pointers"] + lv["remote_pointers"]
            share = 100.0 * lv["remote_pointers"] / total if total else 0.0
            cells.append(f"{lv['pages']} {lv['pointers_to']} ({share:.0f}%)")
        lines.append(f"L{level['level']:<5}" + "".join(f"{c:>32}" for c in cells))
    lines.append(
        "remote leaf PTEs "
        + "  ".join(f"socket {s['socket']}: {100.0 * s['leaf_ptes_remote_fraction']:.1f}%" for s in sockets)
    )
    return "\n".join(lines)


def _cmd_ptdump(args: argparse.Namespace) -> int:
    config = Path(args.config) if args.config else None
    show = sys.stderr.isatty() and not args.json
    overrides = (args.set or []) + ["sim.ptdump=true"]
    if args.thread is not None and args.at_op is None:
        raise tlbsim.TlbsimError("--thread names the thread whose operations --at-op counts: give --at-op N too")
    if args.at_op is not None:
        if args.at_op < 1:
            raise tlbsim.TlbsimError(f"--at-op {args.at_op}: operations are counted from 1")
        overrides.append(f"sim.ptdump_at_op={args.at_op}")
        if args.thread is not None:
            overrides.append(f"sim.ptdump_thread={json.dumps(args.thread)}")
    result, interrupted = _run_watched(config, overrides, show)
    dump = result.stats.get("page_table_dump")
    if dump is None:
        raise tlbsim.TlbsimError("the run produced no page_table_dump")
    at_op = "at_op" in dump
    if at_op and not dump.get("taken"):
        # The thread never completed operation N: no dump (exit status 2).
        raise tlbsim.TlbsimError(dump.get("message", "no page-table dump was taken"))
    if args.json:
        out: dict[str, Any] = {"sockets": dump["sockets"]}
        if at_op:
            out.update({k: dump[k] for k in ("at_op", "thread", "process", "pid", "cycle")})
        print(json.dumps(out))
    elif at_op:
        print(
            f"page tables of process {dump['process']!r} (pid {dump['pid']}) when thread "
            f"{dump['thread']!r} completed operation {dump['at_op']} (cycle {dump['cycle']:,})"
        )
        print(ptdump_table(dump))
    else:
        print(f"page tables of {dump['address_spaces']} address space(s), each as its last thread exited")
        print(ptdump_table(dump))
    return 130 if interrupted else 0


def _cmd_config(args: argparse.Namespace) -> int:
    from tlbsim import _tlbsim

    if args.reference:
        from tlbsim import reference

        if args.config or args.set or args.json:
            print("tlbsim: error: --reference takes no CONFIG.toml, --set or --json", file=sys.stderr)
            return 2
        try:
            print(reference.reference(), end="")
        except (reference.MissingDoc, FileNotFoundError) as err:
            print(f"tlbsim: error: {err}", file=sys.stderr)
            return 1
        return 0
    config = Path(args.config) if args.config else None
    effective = tlbsim.resolve(config, overrides=args.set or [])
    if args.json:
        print(json.dumps(effective, indent=2))
    else:
        print(_tlbsim.config_toml(json.dumps(effective)), end="")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from tlbsim import catalogue as cat

    try:
        if args.name:
            e = cat.entry(args.section, args.name)
            print(json.dumps(e, indent=2) if args.json else cat.format_entry(args.section, e))
        elif args.section:
            s = cat.section(args.section)
            print(json.dumps(s, indent=2) if args.json else cat.format_section(args.section, s))
        else:
            everything = cat.catalogue()
            if args.json:
                print(json.dumps(everything, indent=2))
            else:
                print("\n\n".join(cat.format_section(name, s) for name, s in everything.items()))
                print("\ntlbsim list SECTION NAME: an entry's parameters, with kinds, defaults and meaning")
    except cat.UnknownEntry as err:
        print(f"tlbsim: error: {err}", file=sys.stderr)
        return 2
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from tlbsim import sweep as sweep_module

    def started(total: int, skipped: int) -> None:
        print(f"{total} runs: {skipped} already finished, {total - skipped} to run", flush=True)

    summary = sweep_module.sweep(
        args.spec,
        args.out,
        jobs=args.jobs,
        cluster=args.cluster,
        progress=args.progress or sys.stderr.isatty(),
        on_start=started,
    )
    print(
        f"done: total {summary.total}, skipped {summary.skipped}, ran {summary.ran}; results in {summary.out / 'runs'}"
    )
    return 0


def _cmd_collect(args: argparse.Namespace) -> int:
    from tlbsim.store import collect

    paths = collect(args.dir)
    for path in paths:
        print(f"wrote {path}")
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


# (key, label, unit scale, unit, higher is better)
_BENCH_FIGURES = [
    ("l1_hit_stream_per_s", "L1-hit stream", 1e6, "M accesses/s", True),
    ("walk_stream_per_s", "page-walk stream", 1e6, "M accesses/s", True),
    ("null_loop_per_s", "null loop", 1e6, "M accesses/s", True),
    ("l1_hit_over_null", "L1-hit / null loop", 1, "", True),
    ("multicore_events_per_s", "64-core apache", 1e6, "M events/s", True),
    ("first_touch_per_s", "first touch (1 TiB)", 1e6, "M faults/s", True),
    ("host_bytes_per_touched_page", "host bytes / touched page", 1, "B", False),
    ("champsim_trace_over_decompression", "ChampSim .xz / xz -d alone", 1, "x", False),
    ("champsim_trace_instructions_per_s", "ChampSim .xz end to end", 1e6, "M instructions/s", True),
]


def _cmd_bench(args: argparse.Namespace) -> int:
    report = tlbsim.bench(args.accesses, args.memory_model, args.replicas, args.policy)
    if args.json:
        print(json.dumps(report))
        return 0
    before: dict[str, object] | None = None
    if args.compare:
        with open(args.compare, encoding="utf-8") as f:
            before = json.load(f)
    print(f"accesses per stream      {report['accesses']:,}")
    for key, label, scale, unit, higher in _BENCH_FIGURES:
        value = report.get(key)
        if value is None:
            print(f"{label:<28} {'n/a':>10}")
            continue
        line = f"{label:<28} {value / scale:10.3f} {unit}"
        if before is not None and isinstance(before.get(key), (int, float)) and before[key]:
            old = float(before[key])  # type: ignore[arg-type]
            change = value / old - 1
            better = change >= 0 if higher else change <= 0
            line += f"   (before {old / scale:.3f}: {change:+.1%}{'' if better or abs(change) < 0.005 else ', worse'})"
        print(line)
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    report = tlbsim.convert(args.input, args.output, input_format=args.input_format)
    print(f"wrote {args.output}")
    for key, value in report.items():
        print(f"  {key}: {value}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from tlbsim.demo import main as demo_main

    return demo_main(args.out, args.jobs)


def _cmd_report(args: argparse.Namespace) -> int:
    from tlbsim.report import report  # matplotlib is imported only for this command

    summary = report(args.dir, args.out)
    print(summary)
    print(f"\nopen {summary.index}")
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from tlbsim.host import calibrate

    result = calibrate.calibrate(args.out, quick=args.quick, progress=args.progress or None)
    print(calibrate.summary(result))
    print(f"\nwrote {result.toml_path}\n      {result.json_path}\n({result.elapsed:.0f} s)")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from tlbsim.host import validate

    report = validate.validate(
        args.preset,
        measurements=args.measurements,
        quick=args.quick,
        out=args.out,
        progress=args.progress or None,
    )
    print(validate.format_table(report))
    print(f"\nwrote {report.json_path}\n      {report.png_path}")
    return 0 if report.passed else 1


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from tlbsim import reproduce

    if args.list:
        for name in reproduce.papers():
            paper = reproduce.load_paper(name)
            print(f"{name:<12} {paper.title} ({len(paper.claims)} claims)")
        return 0
    if not args.paper:
        print("tlbsim: error: name a paper (tlbsim reproduce --list names them)", file=sys.stderr)
        return EXIT_USAGE

    if args.paper == "all" and not Path("all").is_dir():
        return _reproduce_all(args)

    def started(sweep: str, total: int, skipped: int) -> None:
        print(f"sweep {sweep}: {total} runs: {skipped} already finished, {total - skipped} to run", flush=True)

    result = reproduce.reproduce(
        args.paper,
        args.out,
        quick=args.quick,
        jobs=args.jobs,
        progress=args.progress or None,
        on_sweep=started,
        cluster=args.cluster,
    )
    print(reproduce.format_table(result))
    print(f"\nwrote {result.claims_path}\n      {result.index_path}")
    return 0


def _reproduce_all(args: argparse.Namespace) -> int:
    """``tlbsim reproduce all``: every paper, then one index over them."""
    from tlbsim import reproduce

    def started(paper: str, sweep: str, total: int, skipped: int) -> None:
        print(f"{paper}: sweep {sweep}: {total} runs: {skipped} already finished, {total - skipped} to run", flush=True)

    result = reproduce.reproduce_all(
        args.out,
        quick=args.quick,
        jobs=args.jobs,
        progress=args.progress or None,
        on_sweep=started,
        cluster=args.cluster,
    )
    for p in result.papers:
        if p["error"]:
            print(f"  {p['paper']:<12} failed: {p['error']}")
        else:
            c = p["counts"]
            print(f"  {p['paper']:<12} {c['agree']} agree, {c['disagree']} disagree, {c['n/a']} n/a")
    print(f"\nwrote {result.json_path}\n      {result.index_path}")
    return 1 if result.failed else 0


def _cmd_fuzz(args: argparse.Namespace) -> int:
    from tlbsim.fuzz import fuzz

    if ":" in args.policy and os.getcwd() not in sys.path:
        # A policy written in Python, "module:Class", importable from here.
        sys.path.insert(0, os.getcwd())

    bar = ProgressBar(
        args.scenarios,
        desc=f"fuzz {args.policy}",
        unit="scenario",
        enabled=args.progress or (sys.stderr.isatty() and not args.json),
    )

    def progress(done: int, total: int) -> None:
        bar.advance_to(done)

    try:
        report = fuzz(
            args.policy,
            scenarios=args.scenarios,
            seed=args.seed,
            tagging=args.tagging,
            overrides=args.set or [],
            progress=progress,
        )
    finally:
        bar.close()
    out = report.to_dict()
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(
            f"policy {report.policy}, tagging {out['tagging']}: {report.scenarios} scenarios, "
            f"{report.shootdowns_sent} shootdowns sent"
        )
        print(
            f"scenarios with violations: {report.scenarios_with_violations} "
            f"(security {report.violations_security}, consistency {report.violations_consistency})"
        )
        if report.first_failure:
            f = report.first_failure
            print(f"first failing scenario: #{f['scenario']} (seed {f['seed']}, tagging {f['tagging']})")
            for v in f["violations"][:3]:
                if v.get("freed_table"):
                    print(
                        f"  {v['kind']} violation: lazy core {v['core']} still reaches freed page table "
                        f"(frame {v['old_pfn']}) of process {v['process']} through its walk caches at cycle "
                        f"{v['cycle']} (a speculative walk may use it)"
                    )
                    continue
                print(
                    f"  {v['kind']} violation: core {v['core']} used vpn {v['vpn']:#x} -> old frame "
                    f"{v['old_pfn']} (now {v['new_pfn']}) at cycle {v['cycle']}"
                )
            print(f"replay: {f['command']}")
    return 1 if report.scenarios_with_violations else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tlbsim", description="Simulate address translation: TLBs, page walks, shootdowns."
    )
    parser.add_argument("--version", action="version", version=f"tlbsim {tlbsim.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="run one simulation from a TOML config")
    p.add_argument("config", metavar="CONFIG.toml", nargs="?", help="default: the built-in defaults")
    p.add_argument(
        "--set",
        action="append",
        type=_override,
        metavar="KEY=VALUE",
        help="override one config key (dotted, e.g. machine.tlb.l1d.entries=64); repeatable",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="output folder (default: out/<config stem>); a folder holding a run of another config is refused",
    )
    p.add_argument(
        "--force", action="store_true", help="overwrite the output folder even if it holds a run of another config"
    )
    p.add_argument(
        "--policy",
        metavar="POLICY",
        help="coherence policy: a built-in name (os.coherence) or a policy written in Python, module:Class "
        "(found in the working directory or the config's folder)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress line (it is drawn only on a terminal anyway)")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser(
        "ptdump",
        help="run a workload and print where its page-table pages and their pointers live (Mitosis Fig. 3 and 4)",
    )
    p.add_argument("config", metavar="CONFIG.toml", nargs="?", help="default: the built-in defaults")
    p.add_argument(
        "--set", action="append", type=_override, metavar="KEY=VALUE", help="override one config key; repeatable"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='one JSON object: {"sockets": [{"socket", "levels": [{"level", "pages", '
        '"local_pointers", "remote_pointers", "pointers_to"}], "leaf_ptes", '
        '"leaf_ptes_remote_fraction"}]}; with --at-op also "at_op", "thread", '
        '"process", "pid" and "cycle" (when the dump was taken)',
    )
    p.add_argument(
        "--at-op",
        type=int,
        metavar="N",
        help="OS mode: dump the page tables of one process when its thread (--thread) "
        'completes its Nth operation (the workload\'s { op = "count" }), instead of '
        "every process as it exits; the run still goes on to its end "
        "(sets sim.ptdump_at_op). A thread that never completes N operations: "
        "error, exit status 2",
    )
    p.add_argument(
        "--thread",
        metavar="NAME",
        help="the thread --at-op counts, by its name in the workload (the first of that "
        "name); default: the workload's first thread (sets sim.ptdump_thread)",
    )
    p.set_defaults(func=_cmd_ptdump)

    p = sub.add_parser(
        "list",
        help="what can be simulated: policies, workloads, presets, recycling, placements, hypervisors, papers",
        description="List the registries' entries with one-line descriptions; with a NAME, that entry's "
        "parameters (kind, default, meaning).",
    )
    p.add_argument(
        "section",
        nargs="?",
        metavar="SECTION",
        help="policies, workloads, presets, recycling, placements, hypervisors or papers (default: all)",
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="one entry: its parameters")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser(
        "config",
        help="print the effective config (every key with its value) without running",
        description="Print the effective config as TOML that `tlbsim run` reads back (--json: as JSON).",
    )
    p.add_argument("config", metavar="CONFIG.toml", nargs="?", help="default: built-in defaults")
    p.add_argument("--json", action="store_true", help="print JSON instead of TOML")
    p.add_argument(
        "--set", action="append", type=_override, metavar="KEY=VALUE", help="override one config key; repeatable"
    )
    p.add_argument(
        "--reference",
        action="store_true",
        help="print the reference of every key (type, default, meaning) as Markdown: docs/CONFIGURATION.md",
    )
    p.set_defaults(func=_cmd_config)

    p = sub.add_parser(
        "sweep",
        help="run every combination of a sweep spec (resumable)",
        description=(
            "Run every run of a sweep spec (TOML: base, seeds, [grid], [zip]). The spec is "
            "validated before any run starts. Each run is written to DIR/runs/<id>/ "
            "(config.json, params.json, stats.json last); runs whose stats.json exists are "
            "skipped, so an interrupted sweep resumes where it stopped."
        ),
    )
    p.add_argument("spec", metavar="SPEC.toml")
    p.add_argument(
        "--jobs",
        type=_positive,
        metavar="N",
        help="simulations in parallel on this machine (default: number of CPUs)",
    )
    p.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="run on a Dask distributed scheduler (e.g. tcp://host:8786); needs pip install 'tlbsim[cluster]'",
    )
    p.add_argument("--out", metavar="DIR", help="output folder (default: out/<spec stem>)")
    p.add_argument(
        "--progress",
        action="store_true",
        help="show the progress bar even when stderr is not a terminal",
    )
    p.set_defaults(func=_cmd_sweep)

    p = sub.add_parser(
        "collect",
        help="gather a sweep's runs into Parquet tables",
        description="Write DIR/results.parquet (one row per finished run), "
        "DIR/results_per_core.parquet (one row per run and core) and "
        "DIR/results_per_thread.parquet (one row per run and simulated thread, "
        "OS-mode runs).",
    )
    p.add_argument("dir", metavar="DIR", help="a sweep output folder")
    p.set_defaults(func=_cmd_collect)

    p = sub.add_parser("bench", help="measure simulated accesses per second")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--accesses",
        type=int,
        default=tlbsim.api.DEFAULT_BENCH_ACCESSES,
        metavar="N",
        help="accesses per stream (default: %(default)s)",
    )
    p.add_argument("--compare", metavar="FILE", help="print each figure beside a saved `tlbsim bench --json` output")
    p.add_argument(
        "--replicas",
        type=_positive,
        default=1,
        metavar="N",
        help="page-table copies for the L1-hit and walk streams: N sockets, Mitosis "
        "replicating on each (default: 1, one socket)",
    )
    p.add_argument(
        "--policy",
        default="linux",
        metavar="NAME",
        help="os.coherence of the 64-core apache run: what a policy's hooks cost (default: %(default)s)",
    )
    p.add_argument(
        "--memory-model",
        choices=["flat", "cache"],
        default="flat",
        help="machine.memory.model of the access streams and the multicore run (default: %(default)s)",
    )
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("convert", help="convert a trace to tlbsim's native format")
    p.add_argument("input", metavar="INPUT")
    p.add_argument(
        "--from",
        dest="input_format",
        required=True,
        choices=["lackey", "champsim", "native"],
        help="format of INPUT",
    )
    p.add_argument("output", metavar="OUTPUT")
    p.set_defaults(func=_cmd_convert)

    p = sub.add_parser(
        "record",
        help="record a program under QEMU user mode into a native trace (tlbsim record -- CMD)",
    )
    p.add_argument("--out", default="recording.tlbsim", metavar="FILE", help="trace to write (default: %(default)s)")
    p.add_argument(
        "--fetches",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="record every instruction fetch (else one count per basic block)",
    )
    p.add_argument(
        "--info", metavar="FILE", help="print a recording's threads, events and instruction counts instead of recording"
    )
    p.add_argument(
        "--compare",
        action="store_true",
        help="also run CMD natively counting the kernel's TLB-shootdown IPIs "
        "(/proc/interrupts), replay the recording and print both",
    )
    p.add_argument(
        "--coherence",
        default="linux",
        metavar="POLICY",
        help="with --compare: the replay's os.coherence (default: %(default)s)",
    )
    p.add_argument(
        "--cores",
        type=int,
        default=None,
        metavar="N",
        help="with --compare: the replay's cores (default: this machine's CPUs)",
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")
    p.set_defaults(func=_cmd_record)

    p = sub.add_parser("demo", help="the default sweep, a summary table and the report (resumes)")
    p.add_argument("--out", metavar="DIR", default="out/demo", help="default: %(default)s")
    p.add_argument("--jobs", type=_positive, metavar="N", help="parallel runs (default: CPUs)")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("report", help="figures (PNG, PDF) and one HTML page from a sweep's results")
    p.add_argument("dir", metavar="DIR", help="a sweep folder (holding runs/)")
    p.add_argument("--out", metavar="OUT", help="output folder (default: DIR/report)")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser(
        "calibrate",
        help="measure this host's kernel and TLBs; write a machine preset",
        description=(
            "Build and run the native benchmarks of bench/ (shootdown patterns, TLB-reach "
            "curve, FPR's munmap cases) on this host and write a machine preset with the "
            "fitted geometry and [costs], each number with a comment naming its "
            "measurement, plus the measurements as JSON next to it. Runs from a checkout "
            "of the repository (needs gcc)."
        ),
    )
    p.add_argument("--quick", action="store_true", help="fewer and shorter runs: under 2 minutes")
    p.add_argument(
        "--out",
        metavar="FILE",
        default="host-calibrated.toml",
        help="the preset (default: %(default)s); the JSON goes to FILE with .json",
    )
    p.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    p.set_defaults(func=_cmd_calibrate)

    p = sub.add_parser(
        "validate",
        help="the shootdown patterns and TLB reach, real against simulated",
        description=(
            "Run the shootdown patterns and the TLB-reach sizes in the simulator with a "
            "calibrated preset and print them beside the host's measurements (IPIs per "
            "operation, throughput relative to munmap-4k-alone, TLB-reach knees) with a "
            "pass/fail column; write validate.json and validate.png. Exit status 1 when a "
            "row fails or could not be simulated."
        ),
    )
    p.add_argument(
        "--preset", metavar="FILE", default="host-calibrated.toml", help="the calibrated preset (default: %(default)s)"
    )
    p.add_argument(
        "--measurements",
        metavar="JSON",
        help="the host's measurements (default: the preset's .json from tlbsim calibrate; measured now when missing)",
    )
    p.add_argument("--quick", action="store_true", help="fewer simulated operations and sizes")
    p.add_argument("--out", metavar="DIR", default="out/validate", help="default: %(default)s")
    p.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser(
        "reproduce",
        help="a paper's claims beside the simulator's (claims.json, figures, index.html)",
        description=(
            "Run the sweeps of a paper shipped with tlbsim (or of a paper folder, see "
            "docs/REPRODUCE.md) and write DIR/claims.json (each claim the paper states beside "
            "ours, with a tolerance and a verdict), a figure per group of claims and "
            "DIR/index.html. Finished runs are not run again."
        ),
    )
    p.add_argument(
        "paper",
        metavar="PAPER",
        nargs="?",
        help="a paper (--list names them), a paper folder, or all: every paper and DIR/index.html over them",
    )
    p.add_argument("--list", action="store_true", help="name the papers available")
    p.add_argument(
        "--quick", action="store_true", help="the reduced sweeps (fewer seeds and operations): well under a minute"
    )
    p.add_argument("--jobs", type=_positive, metavar="N", help="parallel runs (default: CPUs)")
    p.add_argument("--out", metavar="DIR", help="output folder (default: out/reproduce/PAPER; all: out/reproduce)")
    p.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="run the sweeps on a Dask distributed scheduler (e.g. tcp://host:8786), as tlbsim sweep --cluster",
    )
    p.add_argument("--progress", action="store_true", help="show the progress bars even when stderr is not a terminal")
    p.set_defaults(func=_cmd_reproduce)

    p = sub.add_parser(
        "fuzz",
        help="random OS scenarios under a coherence policy: is it ever stale?",
        description=(
            "Run random OS scenarios (threads and processes sharing memory; mmap, munmap, "
            "mprotect, madvise, msync, fork, copy-on-write, page and thread migration, reclaim, "
            "THP; every tagging mode) under a coherence policy with the stale-translation "
            "checker on, and report the violations and the command that replays the first "
            "failing scenario. Exit status 1 when a violation was found."
        ),
    )
    p.add_argument(
        "--policy",
        required=True,
        metavar="NAME",
        help="os.coherence (tlbsim.coherence_policies()), or a policy written in Python: module:Class",
    )
    p.add_argument(
        "--tagging",
        metavar="MODE",
        choices=["none", "pcid", "domain", "cr3"],
        help="one tagging mode for every scenario (default: each draws one)",
    )
    p.add_argument(
        "--set",
        action="append",
        type=_override,
        metavar="KEY=VALUE",
        help="config override for every scenario (another axis, e.g. os.pt_placement=interleave)",
    )
    p.add_argument("--scenarios", type=_positive, default=1000, metavar="N", help="default: %(default)s")
    p.add_argument(
        "--seed", type=int, default=1, metavar="S", help="scenario i is generated from seed S+i (default: %(default)s)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    p.set_defaults(func=_cmd_fuzz)
    return parser


def _describe(err: BaseException) -> str:
    if isinstance(err, OSError) and not isinstance(err, tlbsim.TlbsimError) and err.strerror:
        return f"{err.filename}: {err.strerror}" if err.filename else err.strerror
    return str(err) or type(err).__name__


def _cmd_record(args: argparse.Namespace) -> int:
    from tlbsim import record as rec

    try:
        if args.info:
            print(rec.format_summary(rec.info(args.info)))
            return 0
        cmd = list(args.cmd)
        if cmd and cmd[0] == "--":
            cmd = cmd[1:]
        if args.compare:
            c = rec.compare(cmd, args.out, fetches=args.fetches, coherence=args.coherence, cores=args.cores)
            s = c["recording"]
        else:
            s = rec.record(cmd, args.out, fetches=args.fetches)
    except rec.RecordError as err:
        print(f"tlbsim: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    print(rec.format_summary(s))
    if args.compare:
        real = c["real_ipis_received"]
        print(
            f"TLB-shootdown IPIs received: real {'n/a (no TLB row in /proc/interrupts)' if real is None else f'{real:,}'}"
            f" (native run, {c['real_seconds']:.2f} s, exit code {c['real_exit_code']}); "
            f"simulated {c['simulated_ipis_received']:,} ({c['coherence']}, {c['cores']} cores, "
            f"{c['simulated_shootdowns']:,} shootdowns)"
        )
    ips = s["instructions"] / s["seconds"] if s["seconds"] > 0 else 0.0
    print(
        f"recorded in {s['seconds']:.2f} s ({ips:,.0f} instructions/s), {s['bytes']:,} bytes "
        f"({s['bytes'] / max(s['instructions'], 1):.3f} bytes/instruction); "
        f"program exit code {s['exit_code']}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except BrokenPipeError:  # output piped into e.g. `head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (tlbsim.TlbsimError, OSError, tlbsim.SpecError, ImportError) as err:
        print(f"tlbsim: error: {_describe(err)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
