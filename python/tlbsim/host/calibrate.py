"""``tlbsim calibrate``: measure this host with the native benchmarks of ``bench/`` and write
a machine preset, ``host-calibrated.toml``, and the measurements, ``host-calibrated.json``.

Steps: build the benchmarks (gcc, the Makefile's flags) into ``target/native/`` when they
are missing or older than their sources; run the thirteen shootdown patterns, the TLB-reach
curve (coarse, then finer around each knee it finds) and FPR's munmap cases; fit (pure
functions in :mod:`tlbsim.host.fit`); write the preset, each number with a comment naming the
measurement it came from. Anything this host cannot measure (no ``TLB:`` row, perf
refused, one CPU, no transparent huge pages) is reported as "not measurable here" with
the reason, and the preset keeps the default for it.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

import tlbsim
from tlbsim.host import fit, tlb_geometry
from tlbsim.host.measure import (
    FULL,
    QUICK,
    CalibrateError,
    Host,
    LoadMeter,
    Plan,
    baseline_view,
    build_benchmarks,
    idle_poll_ns,
    list_patterns,
    load_warning,
    measure_fpr,
    measure_munmap_lock,
    measure_reach,
    measure_shootdown,
    measure_wake_latency,
    read_host,
)
from tlbsim.host.patterns import pattern_overrides, pattern_result
from tlbsim.json_values import json_default
from tlbsim.progress import ProgressBar

DEFAULT_OUT = Path("host-calibrated.toml")

# ---------------------------------------------------------------------------------------
# the preset


@dataclass
class Entry:
    key: str
    value: Any  # None: written as a comment only (not measured)
    comment: str


def cache_entry(cache_model: bool, key: str, value: Any, comment: str) -> Entry:
    """A key of the cache memory model: set under ``machine.memory.model = "cache"``, else
    a comment that gives the value (the flat model refuses the key, as it cannot matter)."""
    if cache_model:
        return Entry(key, value, comment)
    return Entry(
        key,
        None,
        f'{tlbsim.toml_literal(value)}, {comment} (set it with machine.memory.model = "cache"; '
        "under the flat model it cannot matter)",
    )


def _cycles(ns: float, ghz: float) -> float:
    return ns * ghz


def _cpuid_level(host_machine: Mapping[str, Any], none_machine: Mapping[str, Any], level: str) -> tuple[int, int, str]:
    h = host_machine["tlb"][level]
    n = none_machine["tlb"][level]
    if (h["entries"], h["ways"]) != (n["entries"], n["ways"]):
        return h["entries"], h["ways"], f"CPUID reports {h['entries']} entries, {h['ways']} ways"
    return (
        h["entries"],
        h["ways"],
        (f"CPUID (preset host) reports nothing beyond the built-in default {h['entries']} entries, {h['ways']} ways"),
    )


def ways_for(entries: int, preferred: int) -> int | None:
    """The way count nearest ``preferred`` (within 4x) giving ``entries`` a power-of-two
    set count, or None."""
    preferred = max(1, preferred)
    options = [
        w
        for w in range(max(1, preferred // 4), min(entries, preferred * 4) + 1)
        if entries % w == 0 and (entries // w) & (entries // w - 1) == 0
    ]
    if not options:
        return None
    return min(options, key=lambda w: (abs(math.log(w / preferred)), -w))


def tlb_entries(
    knees: Sequence[Mapping[str, Any]],
    host_machine: Mapping[str, Any],
    none_machine: Mapping[str, Any],
    documented: tlb_geometry.Geometry | None = None,
    flags: list[str] | None = None,
    from_documented: list[str] | None = None,
) -> list[Entry]:
    """machine.tlb.l1d / l2 entries and ways: the measured knee where the fit is of high
    confidence, or of medium confidence and agreeing with the vendor's documented size
    (``documented``); otherwise the documented size, or CPUID (preset host) where there is
    none. Either way a disagreement is flagged (``flags`` gets a line, the key's comment
    says it): which is right is for the user to look at, not for calibrate to decide
    silently. ``from_documented`` gets the levels ("l1", "l2") taken from the table."""
    out: list[Entry] = []
    by = {k["level"]: k for k in knees}
    for level in ("l1d", "l2"):
        c_entries, c_ways, c_text = _cpuid_level(host_machine, none_machine, level)
        lvl = "l1" if level == "l1d" else "l2"
        doc_entries = tlb_geometry.documented_entries(documented, lvl) if documented else None
        doc_ways = (documented.l1_ways if lvl == "l1" else documented.l2_ways) if documented else None
        doc_text = (
            (f"documented for {documented.microarchitecture}: {doc_entries} entries ({documented.source})")
            if documented
            else ""
        )
        k = by.get(lvl)
        # trust a measurement against the documented size only when the fit is sure of it
        conf = (k or {}).get("confidence")
        disagrees = (
            k is not None and doc_entries is not None and not tlb_geometry.agreement(k["entries"], doc_entries)[0]
        )
        weak = k is not None and (conf == "low" or (conf == "medium" and disagrees))
        if k is None or (weak and documented):
            why = (
                f"the reach fit's knee is of {conf} confidence "
                f"({k['entries']:.0f} pages, plausible {k['interval'][0]:.0f}..{k['interval'][1]:.0f}"
                + (f"; {k['estimator'].split('; ', 1)[1]}" if "; " in k.get("estimator", "") else "")
                + ")"
                + (", and disagrees with the documented size" if disagrees else "")
                if k is not None
                else "not measured here"
            )
            if documented and doc_entries is not None:
                # fully associative (ways 0) is one set of all the entries
                e, ways = fit.fit_geometry(doc_entries, doc_entries if doc_ways == 0 else int(doc_ways or c_ways))
                if from_documented is not None:
                    from_documented.append(lvl)
                out.append(Entry(f"machine.tlb.{level}.entries", e, f"{why}; {doc_text}"))
                out.append(
                    Entry(
                        f"machine.tlb.{level}.ways", ways, "documented" + (" (fully associative)" if ways == e else "")
                    )
                )
                if flags is not None and k is not None:
                    flags.append(f"{lvl.upper()} TLB: {why}; the documented {doc_entries} is used")
            else:
                out.append(Entry(f"machine.tlb.{level}.entries", c_entries, f"{why}; {c_text}"))
                out.append(Entry(f"machine.tlb.{level}.ways", c_ways, "as above"))
            continue
        conf = k.get("confidence")
        iv = k.get("interval")
        how = (
            f"measured: tlb_reach knee at {k['entries']:.0f} pages"
            + (f" ({conf} confidence; positions {iv[0]:.0f}..{iv[1]:.0f} fit within the noise)" if conf and iv else "")
            + f"; fitted on {k['source']}"
        )
        confirms = documented is not None and doc_entries is not None and not disagrees
        if confirms:
            # The knee confirms the documented size, which is exact where rounding to the
            # sizes a power-of-two set count gives is a guess (Zen 4's L1 DTLB: a knee at
            # 71 pages would round to 64, the documented size is 72, fully associative).
            entries = int(doc_entries)  # type: ignore[arg-type]
            how += "; the documented size, which the knee confirms"
        else:
            entries, snapped = fit.snap_entries(k["entries"])
            how += "; nearest 2^k or 3*2^k" if snapped else "; no 2^k or 3*2^k within 12%"
        if documented and doc_entries is not None:
            ok, phrase = tlb_geometry.agreement(k["entries"], doc_entries)
            how += f"; {phrase} for {documented.microarchitecture}"
            if not ok and flags is not None:
                flags.append(
                    f"{lvl.upper()} TLB: measured {k['entries']:.0f} pages, which {phrase} "
                    f"({documented.microarchitecture}, {documented.source}); the measurement is used"
                )
        elif entries == c_entries:
            how += f"; {c_text}: they agree"
        else:
            how += f"; {c_text}: the measurement wins"
        pref_ways = doc_ways if doc_ways else c_ways
        if level == "l1d" and (doc_ways == 0 or (doc_ways is None and entries != c_entries)):
            ways, wtext = (
                entries,
                (
                    "fully associative: "
                    + (
                        "documented"
                        if doc_ways == 0
                        else "not measurable from a reach curve, assumed (the L1 DTLB holding every "
                        "page of an array up to its size, as a fully associative one does)"
                    )
                ),
            )
        else:
            w = ways_for(entries, pref_ways)
            if w is None:
                measured = entries
                entries, w = fit.fit_geometry(entries, pref_ways)
                how += f"; {entries} with {w} ways: the simulable geometry (power-of-two sets) nearest {measured}"
            ways = w
            src_w = "documented" if doc_ways else "CPUID's"
            wtext = "not measurable from a reach curve: " + (
                f"{src_w} {pref_ways}"
                if ways == pref_ways
                else f"nearest to {src_w} {pref_ways} giving a power-of-two set count"
            )
        out.append(Entry(f"machine.tlb.{level}.entries", entries, how))
        out.append(Entry(f"machine.tlb.{level}.ways", ways, wtext))
    return out


def curve_entries(scalar_key: str, scalar_how: str, curve: Sequence[Sequence[float]], curve_how: str) -> list[Entry]:
    """A `machine.idle` number replaced by its curve by idle time (`<name>_ns` ->
    `<name>_curve`): the number as a comment (beside a curve it would be refused), then the
    curve from bench/wake_latency."""
    curve_key = scalar_key.removesuffix("_ns") + "_curve"
    return [
        Entry(scalar_key, None, f"replaced by {curve_key}: {scalar_how}"),
        Entry(curve_key, curve, f"bench/wake_latency: {curve_how}"),
    ]


def idle_entries(wake: Sequence[Mapping[str, Any]], ghz: float, defaults: Mapping[str, Any]) -> list[Entry]:
    """``machine.idle`` from bench/wake_latency's rows: at the shortest idle gap, the wake-to-
    run latency less the modelled context switch is the exit latency, and the waker's time in
    FUTEX_WAKE less the modelled system call its reschedule IPI."""
    poll, poll_why = idle_poll_ns()
    out = [Entry("machine.idle.poll_ns", poll, poll_why)]
    rows = sorted((r for r in wake if r.get("median_ns")), key=lambda r: float(r["gap_us"]))
    if not rows:
        why = "not measurable here: bench/wake_latency needs 2 CPUs"
        out += [Entry("machine.idle.exit_ns", None, why), Entry("machine.idle.wake_ipi_ns", None, why)]
        return out
    r = rows[0]
    switch_ns = float(defaults["costs"]["context_switch"]) / ghz
    syscall_ns = float(defaults["costs"]["syscall"]) / ghz
    exit_ns = max(0.0, float(r["median_ns"]) - switch_ns)
    ipi_ns = max(0.0, float(r.get("waker_median_ns", 0.0)) - syscall_ns)
    others = ", ".join(f"{x['median_ns'] / 1000:.1f} µs after {x['gap_us']} µs" for x in rows[1:])
    how = (
        f"bench/wake_latency: wake-to-run {r['median_ns'] / 1000:.1f} µs (median) after {r['gap_us']} µs idle, "
        f"less the modelled context switch ({switch_ns / 1000:.1f} µs)" + (f"; {others}" if others else "")
    )
    gaps = [float(x["gap_us"]) for x in rows]
    if all(x.get("p10_ns") and x.get("p90_ns") for x in rows) and len(set(gaps)) == len(gaps):
        # The whole distribution by idle time: each wake draws from it (the spread keeps a
        # woken thread from landing at the same point of its waker's loop every time).
        def less_switch(ns: Any) -> float:
            return round(max(0.0, float(ns) - switch_ns))

        curve = [
            [
                round(float(x["gap_us"]) * 1000),
                less_switch(x["p10_ns"]),
                less_switch(x["median_ns"]),
                less_switch(x["p90_ns"]),
            ]
            for x in rows
        ]
        for point in curve:  # p10 <= median <= p90 (medians and percentiles of one sample set)
            point[1] = min(point[1], point[2])
            point[3] = max(point[3], point[2])
        out += curve_entries(
            "machine.idle.exit_ns",
            how,
            curve,
            "[idle ns, p10, median, p90] of the wake-to-run latency after each idle gap, "
            f"less the modelled context switch ({switch_ns / 1000:.1f} µs)",
        )
    else:
        out.append(Entry("machine.idle.exit_ns", round(exit_ns), how))
    ipi_how = (
        f"bench/wake_latency: the waker's FUTEX_WAKE took {r.get('waker_median_ns', 0) / 1000:.1f} µs (median), "
        f"less the modelled system call ({syscall_ns / 1000:.2f} µs)"
    )
    if all(x.get("waker_median_ns") is not None for x in rows) and len(set(gaps)) == len(gaps) and len(rows) > 1:
        # The waker's cost by the woken CPU's idle time (on a KVM guest the IPI's exit waits
        # for the host to wake the halted vCPU, longer after a longer halt).
        ipi_curve = [
            [round(float(x["gap_us"]) * 1000), round(max(0.0, float(x["waker_median_ns"]) - syscall_ns))] for x in rows
        ]
        out += curve_entries(
            "machine.idle.wake_ipi_ns",
            ipi_how,
            ipi_curve,
            "[idle ns, waker ns]: the waker's FUTEX_WAKE (median) after each idle gap, "
            f"less the modelled system call ({syscall_ns / 1000:.2f} µs)",
        )
    else:
        out.append(Entry("machine.idle.wake_ipi_ns", round(ipi_ns), ipi_how))
    return out


def build_preset(
    host: Host,
    shoot: Mapping[str, Mapping[str, Any]],
    reach: Mapping[str, Any] | None,
    defaults: Mapping[str, Any],
    host_cfg: Mapping[str, Any],
    controls: Mapping[str, Mapping[str, Any]] | None = None,
    wake: Sequence[Mapping[str, Any]] | None = None,
) -> tuple[list[Entry], dict[str, Any], dict[str, list[str]]]:
    """The preset's entries (in file order), the fit's details for the JSON, and comment
    lines heading some tables. ``controls``: the patterns without a spinning sibling run
    with a busy neighbour; where given, the fits use them instead.

    ``defaults``: ``tlbsim.resolve({})`` (preset none); ``host_cfg``: with preset host.
    """
    ghz = host.frequency_ghz
    entries: list[Entry] = [
        Entry("machine.preset", "none", "start from the built-in defaults; every key below replaces one"),
        Entry("machine.sockets", host.sockets, host.sockets_source),
        Entry(
            "machine.cores_per_socket",
            host.cores_per_socket,
            f"{host.cpus_online} online CPUs / {host.sockets} socket(s) (a hyperthread counts as a core)",
        ),
        Entry("machine.frequency_ghz", ghz, f"{host.frequency_source}; turns every measured ns below into cycles"),
    ]
    entries += idle_entries(wake or [], ghz, defaults)
    details: dict[str, Any] = {}
    notes: dict[str, list[str]] = {}

    # -- TLB reach: geometry and latencies
    m = defaults["machine"]
    an = (reach or {}).get("analysis") or {}
    knees = an.get("knees", [])
    documented = tlb_geometry.lookup(host.vendor, host.family, host.model_number, host.cpu_flags)
    flags: list[str] = []
    from_documented: list[str] = []
    entries += tlb_entries(knees, host_cfg["machine"], m, documented, flags, from_documented)
    details["tlb_geometry"] = {
        "documented": asdict(documented) if documented else None,
        "cpu": {"vendor": host.vendor, "family": host.family, "model": host.model_number},
        "flags": flags,
        "from_documented": from_documented,
    }
    by = {k["level"]: k for k in knees}
    l1 = by.get("l1")
    if l1 and l1.get("cost_ns") is not None:
        # int here, float in the cost loops below: one name for "the value of this entry"
        v: float = max(1, round(_cycles(l1["cost_ns"], ghz)))
        entries.append(
            Entry(
                "machine.tlb.l2.latency",
                v,
                f"measured: tlb_reach, {l1['cost_ns']:.2f} ns per access added past the L1 knee "
                f"(an L1 miss that hits the L2 TLB) x {ghz} GHz",
            )
        )
    else:
        entries.append(
            Entry(
                "machine.tlb.l2.latency",
                None,
                "not measured here: " + "; ".join(an.get("not_measurable", {}).values() or ["no L1 knee"]),
            )
        )
    l2 = by.get("l2")
    if l2 and l2.get("cost_ns") is not None:
        pwc = m["tlb"]["pwc_pd"]["latency"]
        walk = _cycles(l2["cost_ns"], ghz)
        v = max(1, round(walk - pwc))
        entries.append(
            Entry(
                "machine.pt_cache.latency",
                v,
                f"measured: tlb_reach, {l2['cost_ns']:.2f} ns per access added past the L2 knee "
                f"(a walk whose page-table lines are in the data caches) x {ghz} GHz, minus the "
                f"PD walk-cache lookup ({pwc})",
            )
        )
    else:
        entries.append(Entry("machine.pt_cache.latency", None, "not measured here: no L2 knee with a level"))
    if an.get("memory_ns") is not None:
        v = max(1, round(_cycles(an["memory_ns"], ghz)))
        ratio = m["memory"]["remote_latency"] / m["memory"]["local_latency"]
        entries.append(Entry("machine.memory.local_latency", v, f"measured: {an['memory_source']}; x {ghz} GHz"))
        entries.append(
            Entry(
                "machine.memory.remote_latency",
                round(v * ratio),
                f"not measured (one NUMA node measured): {ratio:.2f}x local, the defaults' ratio",
            )
        )
    else:
        entries.append(
            Entry(
                "machine.memory.local_latency",
                None,
                an.get("not_measurable", {}).get("memory_latency", "not measured here"),
            )
        )
    # The preset keeps the flat memory model of the defaults, under which the cache keys
    # cannot take effect and are refused (config/silent.rs): their values go in comments,
    # ready to be set beside machine.memory.model = "cache".
    cache_model = m["memory"].get("model") == "cache"
    if an.get("llc_bytes"):
        ways = m["memory"]["llc_ways"]
        size = fit.llc_round(an["llc_bytes"], ways)
        measured = "measured: " if an.get("llc_ns") is not None else ""
        entries.append(
            cache_entry(
                cache_model,
                "machine.memory.llc_bytes",
                size,
                f"{measured}{an['llc_source']}; rounded down to {ways} ways x a power-of-two number of 64-byte sets",
            )
        )
        if an.get("llc_ns") is not None:
            entries.append(
                cache_entry(
                    cache_model,
                    "machine.memory.llc_latency",
                    max(1, round(_cycles(an["llc_ns"], ghz))),
                    f"measured: the plateau before the LLC knee, {an['llc_ns']:.1f} ns x {ghz} GHz",
                )
            )
        else:
            entries.append(
                Entry(
                    "machine.memory.llc_latency",
                    None,
                    "not measured here: no LLC plateau in the line chase (see llc_bytes)",
                )
            )
    else:
        entries.append(
            Entry("machine.memory.llc_bytes", None, an.get("not_measurable", {}).get("llc", "not measured here"))
        )

    # -- kernel operation costs
    dcost = defaults["costs"]
    with_controls = any(r.get("ops_per_second") for r in (controls or {}).values())
    shoot = baseline_view(shoot, controls)
    per_op: dict[str, float] = {}
    for p in fit.BASELINES:
        r = shoot.get(p, {})
        if r.get("ops_per_second"):
            per_op[p] = ghz * 1e9 / r["ops_per_second"]
    fitted: dict[str, tuple[float, str]] = {}
    if per_op:
        kf = fit.fit_kernel_costs(per_op, dcost)
        details["kernel_costs"] = asdict(kf)
        clock = next((shoot[p].get("throughput_clock") for p in kf.patterns), None) or "wall clock"
        notes["costs"] = [
            "Kernel operations: fitted to the cycles per operation of the patterns without shootdowns",
            "(bench/shootdown.c, operations per second of "
            + clock
            + ", x frequency_ghz"
            + ("; the other CPU" if with_controls else "):"),
            *(
                ["kept busy by a spinning process, as in the spinning-sibling patterns: --busy-neighbour):"]
                if with_controls
                else []
            ),
            "  " + ", ".join(f"{p} {shoot[p]['ops_per_second']:,.0f}" for p in kf.patterns),
            f"each a sum of the costs below (tlbsim.host.fit.OPERATION_COSTS). Defaults x {kf.scale:.2f} (this host's",
            "median speed), moved as little as the measured sums need; model minus measured per pattern:",
            "  " + ", ".join(f"{p} {100 * r:+.0f}%" for p, r in kf.residuals.items()),
        ]
        for c, v in kf.costs.items():
            users = ", ".join(kf.used[c])
            if c in kf.at_floor:
                how = (
                    f"fitted ({users}), held at its floor, 0.1 x the scaled default: the least-squares fit wanted less"
                )
            elif kf.determined.get(c):
                how = f"fitted: fixed by {users}"
            else:
                how = f"fitted: {users} measure it only in sums with other costs"
            fitted[c] = (v, how)
    else:
        details["kernel_costs"] = {"not_measurable": "no no-shootdown pattern was measured"}

    # -- shootdown costs
    sm = {
        p: {
            "ops_per_second": r.get("ops_per_second"),
            "ipis_per_op": r.get("shootdown_ipis_received_per_op"),
            "sibling_cpu_lost": r.get("sibling_cpu_lost"),
        }
        for p, r in shoot.items()
    }
    sf = fit.fit_shootdown_costs(sm, ghz)
    details["shootdown_costs"] = asdict(sf)
    split = fit.split_shootdown_costs(sf.initiator_cycles, sf.receiver_cycles, dcost)
    if sf.receiver_cycles is not None or sf.initiator_cycles is not None:
        notes.setdefault("costs", []).extend(
            [
                "Shootdowns (patterns with a spinning sibling, single-page flushes):",
                (
                    f"  receiver {sf.receiver_cycles:.0f} cycles per IPI: the sibling's spin rate lost, per IPI, median over "
                    + ", ".join(sf.receiver_by_pattern)
                )
                if sf.receiver_cycles is not None
                else "  receiver: not measured",
                (
                    f"  initiator {sf.initiator_cycles:.0f} cycles per IPI: time per operation with a spinning minus a "
                    "sleeping or absent sibling"
                    + (" (the other CPU kept busy)" if with_controls else "")
                    + ", per IPI, median over "
                    + ", ".join(sf.initiator_by_pattern)
                )
                if sf.initiator_cycles is not None
                else "  initiator: not measured",
            ]
        )
    for c, (v, how) in split.items():
        fitted[c] = (v, ("measured: " + how) if c != "ipi_delivery_cross_socket" else how)
    why_shoot = "; ".join(sf.why_not.values())
    if not host.tlb_row:
        why_shoot = f"no IPI count ({host.tlb_row_why})" + (f"; {why_shoot}" if why_shoot else "")
    order = list(dcost)
    for c in order:
        if c in fitted:
            v, how = fitted[c]
            entries.append(Entry(f"costs.{c}", max(1, round(v)), how))
        elif c in ("interrupt", "ipi_send", "ipi_delivery_same_socket", "ipi_delivery_cross_socket"):
            entries.append(Entry(f"costs.{c}", None, f"not measurable here: {why_shoot}; default {dcost[c]} stands"))
        else:
            entries.append(Entry(f"costs.{c}", None, f"not measured by these benchmarks; default {dcost[c]} stands"))
    return entries, details, notes


# ---------------------------------------------------------------------------------------
# shootdown costs in a closed loop (issue 18, item 2)

# The patterns the shootdown costs are fitted on; the other spinning-sibling patterns are
# held out for `tlbsim validate` to check (munmap-64 flushes everything, dontneed and cow
# and file-read reach the flush through other kernel paths, two-processes none at all).
CLOSED_LOOP_FIT = ("munmap-4k", "mprotect-toggle")
CLOSED_LOOP_REFERENCE = "munmap-4k-alone"
# Physical bounds, in cycles: an interrupt costs at least an IDT entry and exit (~200 cycles
# on bare metal) and a KVM guest's virtual IPI round trip is a few microseconds; 40,000
# cycles (16 us at 2.5 GHz) is beyond any of them. The sender's part likewise.
INTERRUPT_BOUNDS = (200.0, 40_000.0)
SENDER_BOUNDS = (100.0, 40_000.0)
RECEIVER_WEIGHT = 0.25  # the measured receiver cost is a prior, not a target: KVM inflates it


def _relative(ops: Mapping[str, float], name: str) -> float | None:
    ref = ops.get(CLOSED_LOOP_REFERENCE)
    v = ops.get(name)
    return v / ref if v and ref else None


def closed_loop_error(
    real_rel: Mapping[str, float],
    sim_rel: Mapping[str, float | None],
    receiver_model: float | None = None,
    receiver_measured: float | None = None,
) -> float:
    """Sum of squared log ratios of simulated to measured relative throughput over the
    fitting patterns, plus ``RECEIVER_WEIGHT`` times that of the receiver's cost per IPI."""
    err = 0.0
    for name, rv in real_rel.items():
        sv = sim_rel.get(name)
        err += math.log(sv / rv) ** 2 if sv and rv else 100.0
    if receiver_model and receiver_measured:
        err += RECEIVER_WEIGHT * math.log(receiver_model / receiver_measured) ** 2
    return err


def fit_costs_closed_loop(
    simulate: Callable[[Mapping[str, float]], Mapping[str, float]],
    real_ops: Mapping[str, float],
    defaults: Mapping[str, float],
    *,
    receiver_measured: float | None = None,
    seed: tuple[float, float] | None = None,
    grid: int = 11,
) -> dict[str, Any]:
    """Choose ``interrupt`` and the sender's ``ipi_send + ipi_delivery_same_socket`` (split
    in the defaults' ratio) by simulating the fitting patterns and minimizing
    :func:`closed_loop_error` within the physical bounds: a log grid over the bounds, then
    two finer grids around the best point. ``simulate(costs)`` returns ops/s of
    ``CLOSED_LOOP_REFERENCE`` and each of ``CLOSED_LOOP_FIT`` with those ``[costs]``
    overrides; ``real_ops`` the measured ones. ``seed`` (the open-loop formulas' values)
    is evaluated too and reported."""
    real_rel = {n: r for n in CLOSED_LOOP_FIT if (r := _relative(real_ops, n))}
    if not real_rel:
        raise ValueError(
            "no fitting pattern measured with its reference "
            f"({', '.join(CLOSED_LOOP_FIT)} over {CLOSED_LOOP_REFERENCE})"
        )
    d_send, d_del = defaults["ipi_send"], defaults["ipi_delivery_same_socket"]
    fixed = defaults["invlpg"] + defaults["ack"]
    cache: dict[tuple[float, float], tuple[float, dict[str, float | None]]] = {}

    def costs_of(i: float, t: float) -> dict[str, float]:
        return {
            "interrupt": round(i),
            "ipi_send": round(t * d_send / (d_send + d_del)),
            "ipi_delivery_same_socket": round(t * d_del / (d_send + d_del)),
        }

    def evaluate(i: float, t: float) -> float:
        key = (round(i), round(t))
        if key not in cache:
            ops = simulate(costs_of(i, t))
            sim_rel = {n: _relative(ops, n) for n in real_rel}
            cache[key] = (closed_loop_error(real_rel, sim_rel, i + fixed, receiver_measured), sim_rel)
        return cache[key][0]

    lo_i, hi_i = (math.log(b) for b in INTERRUPT_BOUNDS)
    lo_t, hi_t = (math.log(b) for b in SENDER_BOUNDS)
    centre = ((lo_i + hi_i) / 2, (lo_t + hi_t) / 2)
    span = ((hi_i - lo_i) / 2, (hi_t - lo_t) / 2)
    best = (math.inf, 0.0, 0.0)
    for _ in range(3):
        for a in np.linspace(-1, 1, grid):
            for b in np.linspace(-1, 1, grid):
                li = min(hi_i, max(lo_i, centre[0] + a * span[0]))
                lt = min(hi_t, max(lo_t, centre[1] + b * span[1]))
                e = evaluate(math.exp(li), math.exp(lt))
                if e < best[0]:
                    best = (e, li, lt)
        centre = (best[1], best[2])
        span = (span[0] * 2.5 / (grid - 1), span[1] * 2.5 / (grid - 1))
    i, t = math.exp(best[1]), math.exp(best[2])
    result: dict[str, Any] = {
        "fit_patterns": list(real_rel),
        "reference": CLOSED_LOOP_REFERENCE,
        "real_relative": real_rel,
        "sim_relative": cache[(round(i), round(t))][1],
        "error": best[0],
        "costs": costs_of(i, t),
        "evaluations": len(cache),
        "bounds": {"interrupt": INTERRUPT_BOUNDS, "ipi_send + ipi_delivery_same_socket": SENDER_BOUNDS},
        "at_bound": [
            n
            for n, v, (lo, hi) in (("interrupt", i, INTERRUPT_BOUNDS), ("sender", t, SENDER_BOUNDS))
            if v <= lo * 1.01 or v >= hi * 0.99
        ],
    }
    if seed is not None:
        si = min(INTERRUPT_BOUNDS[1], max(INTERRUPT_BOUNDS[0], seed[0]))
        st = min(SENDER_BOUNDS[1], max(SENDER_BOUNDS[0], seed[1]))
        result["seed"] = {
            "costs": costs_of(si, st),
            "error": evaluate(si, st),
            "sim_relative": cache[(round(si), round(st))][1],
        }
    return result


def closed_loop_on_preset(
    preset: Path,
    real: Mapping[str, Mapping[str, Any]],
    defaults: Mapping[str, float],
    receiver_measured: float | None,
    seed: tuple[float, float] | None,
    ops: int = 1_000,
) -> dict[str, Any]:
    """:func:`fit_costs_closed_loop` with the simulator on ``preset`` (the shootdown
    patterns as ``tlbsim validate`` runs them)."""

    def simulate(costs: Mapping[str, float]) -> dict[str, float]:
        out = {}
        for name in (CLOSED_LOOP_REFERENCE, *CLOSED_LOOP_FIT):
            over = {**pattern_overrides(name, ops), **{f"costs.{k}": v for k, v in costs.items()}}
            r = tlbsim.run(preset, overrides=over)
            out[name] = float(pattern_result(r.stats)["ops_per_second"])
        return out

    real_ops = {n: float(r["ops_per_second"]) for n, r in real.items() if r.get("ops_per_second")}
    return fit_costs_closed_loop(simulate, real_ops, defaults, receiver_measured=receiver_measured, seed=seed)


def closed_loop_costs(
    preset: Path,
    entries: list[Entry],
    shoot: Mapping[str, Mapping[str, Any]],
    controls: Mapping[str, Mapping[str, Any]] | None,
    host: Host,
    details: Mapping[str, Any],
    dcost: Mapping[str, float],
) -> dict[str, Any] | None:
    """The closed loop on the written ``preset``, when the fitting patterns were measured
    with their IPIs: replaces the shootdown-cost ``entries`` (in place) with its costs and
    returns its record, or ``{"error": ...}`` (the formulas' costs stand), or None (not
    measurable)."""
    base = baseline_view(shoot, controls)
    if not (
        all(base.get(n, {}).get("ops_per_second") for n in (CLOSED_LOOP_REFERENCE, *CLOSED_LOOP_FIT))
        and host.tlb_row
        and all((shoot.get(n, {}).get("shootdown_ipis_received_per_op") or 0) >= 0.5 for n in CLOSED_LOOP_FIT)
    ):
        return None
    values = {e.key: e.value for e in entries}
    seed = None
    if values.get("costs.interrupt") is not None and values.get("costs.ipi_send") is not None:
        seed = (
            float(values["costs.interrupt"]),
            float(values["costs.ipi_send"]) + float(values["costs.ipi_delivery_same_socket"]),
        )
    receiver = (details.get("shootdown_costs") or {}).get("receiver_cycles")
    try:
        loop = closed_loop_on_preset(
            preset, {n: base[n] for n in (CLOSED_LOOP_REFERENCE, *CLOSED_LOOP_FIT)}, dcost, receiver, seed
        )
    except (tlbsim.TlbsimError, ValueError, KeyError) as err:  # keep the formulas' costs, say why
        return {"error": f"the closed loop could not run: {err}"}
    held = [p for p in (*fit.SINGLE_PAGE_FLUSH, "munmap-64", "two-processes") if p not in CLOSED_LOOP_FIT]
    loop["check_patterns"] = held
    rel = ", ".join(
        f"{n} {loop['real_relative'][n]:.3f} (simulated {loop['sim_relative'][n]:.3f})" for n in loop["fit_patterns"]
    )
    seed_text = (
        (
            f"; the open-loop formulas gave {loop['seed']['costs']['interrupt']} / "
            f"{loop['seed']['costs']['ipi_send'] + loop['seed']['costs']['ipi_delivery_same_socket']} "
            f"(error {loop['seed']['error']:.3f})"
        )
        if "seed" in loop
        else ""
    )
    how = (
        f"fitted in a closed loop: simulated {', '.join(loop['fit_patterns'])} over {CLOSED_LOOP_REFERENCE} "
        f"until they match the measured {rel}; log-error {loop['error']:.3f}{seed_text}; held out for "
        f"validate: {', '.join(held)}"
    )
    if loop["at_bound"]:
        how += f"; AT ITS PHYSICAL BOUND: {', '.join(loop['at_bound'])}"
    ratio = dcost["ipi_delivery_cross_socket"] / dcost["ipi_delivery_same_socket"]
    new_values = {
        **loop["costs"],
        "ipi_delivery_cross_socket": round(loop["costs"]["ipi_delivery_same_socket"] * ratio),
    }
    for i, e in enumerate(entries):
        c = e.key.removeprefix("costs.")
        if e.key.startswith("costs.") and c in new_values:
            comment = (
                how
                if c != "ipi_delivery_cross_socket"
                else f"not measured (one socket): {ratio:g}x the closed-loop same-socket delivery, the defaults' ratio"
            )
            entries[i] = Entry(e.key, max(1, int(new_values[c])), comment)
    return loop


def render_toml(
    entries: Sequence[Entry], header: Sequence[str], notes: Mapping[str, Sequence[str]] | None = None
) -> str:
    """The preset as TOML: one table per section, each key with its comment; ``notes``
    are comment lines at the head of a table."""
    lines = [f"# {h}" if h else "#" for h in header]
    sections: dict[str, list[Entry]] = {}
    for e in entries:
        table, _, key = e.key.rpartition(".")
        sections.setdefault(table, []).append(e)
    for table, items in sections.items():
        lines += ["", f"[{table}]"]
        lines += [f"# {n}" for n in (notes or {}).get(table, [])]
        for e in items:
            key = e.key.rpartition(".")[2]
            if e.value is None:
                lines.append(f"# {key}: {e.comment}")
            else:
                lines.append(f"{key} = {tlbsim.toml_literal(e.value)}  # {e.comment}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------
# the command


@dataclass
class CalibrationResult:
    toml_path: Path
    json_path: Path
    elapsed: float
    entries: list[Entry]
    data: dict[str, Any]


def calibrate(
    out: str | os.PathLike[str] = DEFAULT_OUT,
    *,
    quick: bool = False,
    progress: bool | None = None,
    plan: Plan | None = None,
) -> CalibrationResult:
    """Build and run the benchmarks, fit, write ``out`` (TOML) and ``out`` with ``.json``."""
    t0 = time.monotonic()
    meter = LoadMeter()
    plan = plan or (QUICK if quick else FULL)
    out = Path(out)
    progress = sys.stderr.isatty() if progress is None else progress
    host = read_host()
    exes = build_benchmarks()
    defaults = tlbsim.resolve({})
    host_cfg = tlbsim.resolve({"machine": {"preset": "host"}})
    control_limit = int(host_cfg["machine"]["tlb"]["l1d_2m"]["entries"]) * 512
    patterns = [n for n, _ in list_patterns(exes["shootdown"])]
    control_patterns = [p for p in fit.BASELINES if p in patterns] if host.cpus_allowed >= 2 else []
    cpus = min(host.cpus_allowed, 8)
    coarse = len(fit.geometric_sizes(plan.reach_min_pages, plan.reach_max_pages, plan.reach_per_doubling))
    bar = ProgressBar(
        len(patterns) + len(control_patterns) + math.ceil(coarse / 8) + 5 * cpus + 2,
        desc="calibrate",
        unit="step",
        enabled=progress,
        leave=False,
    )
    try:
        shoot = measure_shootdown(exes["shootdown"], plan, bar, patterns)
        controls = (
            measure_shootdown(exes["shootdown"], plan, bar, control_patterns, busy_neighbour=True)
            if control_patterns
            else {}
        )
        reach = measure_reach(exes["tlb_reach"], plan, host, control_limit, bar)
        fpr_rows = measure_fpr(exes["fpr_munmap"], plan, cpus, bar)
        lock_rows = measure_munmap_lock(exes["munmap_lock"], plan, cpus, bar)
        wake_rows = measure_wake_latency(exes["wake_latency"], plan, cpus, bar)
    finally:
        bar.close()
    load = meter.result(host.cpus_online)
    warning = load_warning(load)
    entries, details, notes = build_preset(host, shoot, reach, defaults, host_cfg, controls, wake_rows)
    elapsed = time.monotonic() - t0
    json_path = out.with_suffix(".json")
    header = [
        f"{out.name}: this host's machine and costs, measured by `tlbsim calibrate{' --quick' if quick else ''}`",
        f"host: {host.hostname}, {host.model} ({host.vendor}), Linux {host.kernel}, {host.cpus_online} CPUs"
        + (", a virtual machine" if host.hypervisor else ""),
        (
            f"{_dt.datetime.now().astimezone().isoformat(timespec='seconds')}, tlbsim {tlbsim.__version__}, "
            f"{elapsed:.0f} s; the measurements are in {json_path.name}"
        ),
        "Each number says which measurement it came from; keys written as comments were not",
        "measured here and keep their defaults. Use it as a base config:",
        f'  tlbsim run {out.name} --set workload.kind=...     or, in a sweep spec, base = "{out.name}"',
    ]
    if warning:
        header.append(f"WARNING: {warning}.")
    text = render_toml(entries, header, notes)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)

    def write_json() -> dict[str, Any]:
        # Written before the preset is checked, so that no measurement is lost to a failure.
        data = {
            "tlbsim_version": tlbsim.__version__,
            "created": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "mode": plan.name,
            "plan": asdict(plan),
            "elapsed_seconds": elapsed,
            "host": asdict(host),
            "load": load,
            "warnings": [warning] if warning else [],
            "flags": list(details.get("tlb_geometry", {}).get("flags", [])),
            "shootdown_patterns": shoot,
            "shootdown_controls": controls,
            "tlb_reach": reach,
            "fpr_munmap": fpr_rows,
            "munmap_lock": lock_rows,
            "wake_latency": wake_rows,
            "fit": details,
            "preset": {e.key: e.value for e in entries if e.value is not None},
            "preset_comments": {e.key: e.comment for e in entries},
        }
        json_path.write_text(json.dumps(data, indent=1, default=json_default) + "\n")
        return data

    write_json()
    try:
        tlbsim.resolve(out)
    except tlbsim.ConfigError as err:  # a bug here, not the user's: say so plainly
        raise CalibrateError(f"the preset written to {out} does not load: {err}") from err
    # the shootdown costs, fitted again in a closed loop: simulate the fitting patterns
    # with candidate costs until their relative throughput matches the measured one
    loop = closed_loop_costs(out, entries, shoot, controls, host, details, defaults["costs"])
    if loop is not None:
        details["closed_loop"] = loop
        notes.setdefault("costs", []).append(
            f"Shootdown costs: the formulas' values stand; {loop['error']}."
            if isinstance(loop.get("error"), str)  # a fitted loop's "error" is its log-error
            else f"Shootdown costs: the closed loop replaced the formulas' values ({loop['evaluations']} simulated points)."
        )
        out.write_text(render_toml(entries, header, notes))
        tlbsim.resolve(out)
    data = write_json()
    return CalibrationResult(out, json_path, elapsed, entries, data)


def summary(result: CalibrationResult) -> str:
    """The fitted numbers, one a line, for the terminal."""
    lines = []
    width = max(len(e.key) for e in result.entries)
    for e in result.entries:
        if e.value is None:
            continue
        lines.append(f"{e.key:<{width}}  {e.value!s:>8}  {e.comment[:110]}")
    nm = [f"{e.key}: {e.comment}" for e in result.entries if e.value is None and "not measurable here" in e.comment]
    host = result.data["host"]
    if not host["tlb_row"]:
        nm.insert(0, f"shootdown IPIs: not measurable here: {host['tlb_row_why']}")
    for p, r in result.data["shootdown_patterns"].items():
        if "not_measurable" in r:
            nm.append(f"{p}: not measurable here: {r['not_measurable']}")
    perf = result.data["tlb_reach"].get("perf", "")
    if perf != "counted":
        nm.append(f"TLB miss counters: {perf}")
    for k, v in result.data["tlb_reach"]["analysis"].get("not_measurable", {}).items():
        nm.append(f"{k}: {v}")
    if nm:
        lines += ["", "not measurable here:"] + [f"  {x}" for x in nm]
    for f in result.data.get("flags", []):
        lines += ["", f"flag: {f}"]
    for w in result.data.get("warnings", []):
        lines += ["", f"warning: {w}"]
    return "\n".join(lines)
