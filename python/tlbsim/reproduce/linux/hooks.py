"""Hooks of the ``linux`` paper of ``tlbsim reproduce``: its metrics and its paper values.

The paper values are measured, not printed: ``reference(ctx)`` runs bench/shootdown (built
with gcc as ``make bench-native`` does, via :mod:`tlbsim.host.measure`) on this machine: each
pattern's median TLB-shootdown IPIs received per operation and operations per second, and
the busy-neighbour controls that ``tlbsim validate`` divides by for the patterns without a
spinning sibling. The real side of each claim is what :func:`tlbsim.host.validate.ipi_rows` and
:func:`tlbsim.host.validate.throughput_rows` make of those measurements, and the simulated side
:func:`tlbsim.host.patterns.pattern_result`, so reproduce and validate cannot drift apart.

Where the benchmark cannot run (not Linux, no C compiler, no bench/ sources, i.e. an
installed wheel, no ``TLB:`` row in /proc/interrupts, one CPU), or with
``TLBSIM_REPRODUCE_NATIVE=0``, the values come from ``measured.json`` beside this file:
measured on the workplace's machine, its date, CPU model and kernel recorded in it.
Regenerate it with ``python python/tlbsim/reproduce/linux/hooks.py`` on a quiet machine.

Simplified from ``tlbsim calibrate``: the shootdown patterns and their controls only, the
median of a few repetitions, and no waiting for a quiet machine (a busy one is reported as
a warning, and a preempted sibling's missing IPIs as a note on the claim).

A measurement is kept in the output folder (``reference/linux-native.json``) and reused by
the next run with at least as many operations, so a re-run measures nothing again.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tlbsim.host import fit, patterns, validate
from tlbsim.host import measure as native
from tlbsim.json_values import json_default
from tlbsim.progress import ProgressBar
from tlbsim.reproduce.paper import Reference, ReferenceContext

COMMITTED = Path(__file__).resolve().with_name("measured.json")
NATIVE_ENV = "TLBSIM_REPRODUCE_NATIVE"  # "0": never measure; use the committed values
CACHE_NAME = "linux-native.json"
# Operations per repetition: --quick as calibrate --quick's shootdown patterns divided by
# ten (a few seconds on 2 CPUs), the full run as calibrate --quick's (native.QUICK); munmap-64
# runs an eighth of them (native.OPS_DIVISOR). Three repetitions, the median counts (as
# calibrate).
QUICK_OPS = native.QUICK.shootdown_ops // 10
FULL_OPS = native.QUICK.shootdown_ops
REPS = native.QUICK.shootdown_reps


def _pattern_metric(field: str) -> Any:
    def metric(stats: Mapping[str, Any]) -> float | None:
        value = patterns.pattern_result(stats)[field]
        return None if value is None else float(value)

    metric.__name__ = field
    return metric


METRICS = {"ipis_per_op": _pattern_metric("ipis_per_op"), "ops_per_second": _pattern_metric("ops_per_second")}


# --------------------------------------------------------------------------- measuring


def native_unavailable() -> str | None:
    """Why bench/shootdown cannot measure here, or None when it can."""
    if os.environ.get(NATIVE_ENV, "1") == "0":
        return f"{NATIVE_ENV}=0"
    if platform.system() != "Linux":
        return f"not Linux ({platform.system()})"
    try:
        native.bench_sources()
    except native.CalibrateError:
        return "the benchmark's sources (bench/ of a tlbsim checkout) are not here"
    count, why = native.read_tlb_row(native.interrupts_path())
    if count is None:
        return why
    try:
        if len(os.sched_getaffinity(0)) < 2:
            return "one CPU: the sibling thread needs a second"
    except (AttributeError, OSError):
        pass
    return None


def _strip(records: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: {k: v for k, v in r.items() if k != "raw"} for name, r in records.items()}


def measure(ops: int, reps: int = REPS, progress: bool = False) -> dict[str, Any]:
    """Build and run bench/shootdown: every pattern, then the busy-neighbour controls of
    the patterns without a spinning sibling (``fit.BASELINES``), as tlbsim calibrate."""
    host = native.read_host()
    meter = native.LoadMeter()
    exe = native.build_benchmarks()["shootdown"]
    plan = dataclasses.replace(native.QUICK, shootdown_ops=ops, shootdown_reps=reps)
    names = [n for n, _ in native.list_patterns(exe)]
    controls_names = [p for p in fit.BASELINES if p in names]
    bar = ProgressBar(
        len(names) + len(controls_names), desc="bench/shootdown", unit="step", enabled=progress, leave=False
    )
    try:
        shoot = native.measure_shootdown(exe, plan, bar, names)
        controls = native.measure_shootdown(exe, plan, bar, controls_names, busy_neighbour=True)
    finally:
        bar.close()
    load = meter.result(host.cpus_online)
    warning = native.load_warning(load)
    return {
        "measured": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "host": {
            "model": host.model,
            "vendor": host.vendor,
            "kernel": host.kernel,
            "cpus_online": host.cpus_online,
            "hypervisor": host.hypervisor,
        },
        "command": f"bench/shootdown --ops {ops} --reps {reps} (munmap-64: ops / 8), "
        f"then --busy-neighbour {' '.join(controls_names)}",
        "ops": ops,
        "reps": reps,
        "load": load,
        "warnings": [warning] if warning else [],
        "shootdown_patterns": _strip(shoot),
        "shootdown_controls": _strip(controls),
    }


def describe(data: Mapping[str, Any]) -> str:
    h = data.get("host", {})
    vm = ", a virtual machine" if h.get("hypervisor") else ""
    return (
        f"bench/shootdown on {h.get('model', '?')}, Linux {h.get('kernel', '?')}, "
        f"{h.get('cpus_online', '?')} CPUs{vm}; median of {data.get('reps')} x {data.get('ops'):,} "
        f"operations, measured {data.get('measured', '?')}"
    )


def values(data: Mapping[str, Any]) -> tuple[dict[str, float | None], dict[str, str]]:
    """The paper values by claim reference (``<pattern>/ipis_per_op``,
    ``<pattern>/relative_throughput``) and a note where one is missing or suspect: the
    real side of validate's rows."""
    real = data.get("shootdown_patterns", {})
    out: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    for row in validate.ipi_rows(real, {}):
        key = f"{row.name}/ipis_per_op"
        out[key] = row.real
        rec = real.get(row.name, {})
        if row.status == validate.NA:
            note = row.note
        else:
            note = "; ".join(n for n in (validate.sibling_away_note(rec), rec.get("note", "")) if n)
        if note:
            notes[key] = f"measured: {note}"
    baseline = native.baseline_view(real, data.get("shootdown_controls"))
    for row in validate.throughput_rows(baseline, {}):
        key = f"{row.name.split(' / ')[0]}/relative_throughput"
        out[key] = row.real
        if row.status == validate.NA:
            notes[key] = f"measured: {row.note}"
    return out, notes


def reference(ctx: ReferenceContext) -> Reference:
    ops = QUICK_OPS if ctx.quick else FULL_OPS
    why = native_unavailable()
    cache = ctx.cache / CACHE_NAME
    data: dict[str, Any] | None = None
    source = ""
    if why is None and cache.is_file():
        try:
            kept = json.loads(cache.read_text())
            if int(kept.get("ops", 0)) >= ops and kept.get("shootdown_patterns"):
                data, source = kept, f"measured on this machine by an earlier run ({cache}): "
        except (OSError, ValueError):
            pass
    if why is None and data is None:
        try:
            data = measure(ops, REPS, ctx.progress)
            source = "measured now on this machine: "
            tmp = cache.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(data, indent=1, default=json_default) + "\n")
            tmp.replace(cache)
        except (native.CalibrateError, OSError) as err:
            why = f"the benchmark failed: {err}"
    if data is None:
        data = json.loads(COMMITTED.read_text())
        source = f"committed values ({COMMITTED.name}; measuring here is not possible: {why}): "
    vals, notes = values(data)
    # The loaded-machine warning is judged again from the load reading kept with every
    # measurement (fresh, kept from an earlier run, or committed), with load_warning's
    # thresholds (other work > 20% of the CPUs, steal > 10%, load average > 0.75 per CPU),
    # so a measurement stored without its warning still gets one (issue 49).
    load = data.get("load")
    loaded = native.load_warning(load) if isinstance(load, Mapping) else None
    stored = [w for w in data.get("warnings", []) if not w.startswith("the host was busy")]
    # calibrate's advice ("calibrate again ...") does not apply here; say how to measure again.
    warnings = [w.partition("; calibrate again")[0] for w in ([loaded] if loaded else []) + stored]
    if warnings and source.startswith(("measured now", "measured on this machine")):
        warnings.append(f"to measure again, delete {cache} and run this command again on a quiet machine")
    details = {k: v for k, v in data.items() if k not in ("shootdown_patterns", "shootdown_controls")}
    details["machine_loaded"] = None if not isinstance(load, Mapping) else loaded is not None
    return Reference(vals, source + describe(data), notes, warnings, details)


def main(argv: list[str] | None = None) -> int:
    """Measure on this machine and write measured.json (the committed fallback)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--ops", type=int, default=FULL_OPS, help="default: %(default)s")
    parser.add_argument("--reps", type=int, default=native.FULL.shootdown_reps, help="default: %(default)s")
    parser.add_argument("--out", type=Path, default=COMMITTED, help="default: measured.json beside this file")
    args = parser.parse_args(argv)
    why = native_unavailable()
    if why is not None:
        print(f"cannot measure here: {why}", file=sys.stderr)
        return 2
    data = measure(args.ops, args.reps, progress=sys.stderr.isatty())
    args.out.write_text(json.dumps(data, indent=1, default=json_default) + "\n")
    print(describe(data))
    for w in data["warnings"]:
        print(f"warning: {w}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
