"""``tlbsim validate``: the host's measurements beside the simulator's, with a calibrated
preset, row by row with a pass/fail column.

Rows and tolerances:

* **IPIs per operation**, each of the thirteen shootdown patterns: pass when
  ``|sim - real| <= 0.05 * max(real, 1)`` (0.05 IPIs up to one per operation, 5% above).
* **Throughput relative to munmap-4k-alone**, each other pattern: pass when the simulated
  ratio is within a factor of 1.5 of the measured one (the costs are fitted on some of
  these patterns, the model is additive, and a shared machine's throughputs vary by tens
  of percent between runs). The patterns without a spinning sibling count as measured
  with the other CPU kept busy (``shootdown_controls`` of the calibrate JSON, where
  present), as it is in the spinning-sibling ones.
* **TLB-reach knees**, L1 and L2: the simulator runs a random synthetic workload over the
  same array sizes; the knee fitted to its L1 (L2) TLB misses per access must lie within
  15% of the host's knee.
* **mmap_lock**: fpr-munmap case 1 (I/O threads of one process looping mmap -> access ->
  munmap), per-thread ops/s with 2 threads over that with 1, real (calibrate's
  ``fpr_munmap`` runs) vs simulated (``os.locks`` on): pass within a factor of 1.5. The
  ratio cancels the host's speed and the fitted costs and keeps the serialization on
  mmap_lock (bench/munmap_lock.c shows it is the lock: 2 processes keep 1.0x).
* **mmap_lock, threads vs processes** (bench/munmap_lock): 1 and 2 workers looping
  mmap(4 KiB anonymous) -> write -> munmap, as threads of one process (one mmap_lock) and as
  single-threaded processes (one lock each); per-worker ops/s with 2 workers over that with
  1, real vs simulated (a scenario with the same program), within a factor of 1.5.

The simulated patterns use the preset as the base config with ``workload.kind =
"shootdown-patterns"``, ``workload.pattern``, ``workload.ops``, ``os.coherence = "linux"``
on 1 socket x 2 cores, and read ``totals.shootdown_ipis_received`` and the measuring
thread's ``per_thread[0].ops_completed`` / ``ops_per_second``. A run that fails becomes a
row "simulation failed: <error>". A quantity the host could not measure is "n/a" with the
reason and counts as neither pass nor fail.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import tlbsim
from tlbsim.host import fit, measure, tlb_geometry
from tlbsim.host.patterns import simulate_pattern
from tlbsim.json_values import json_default_or_str
from tlbsim.progress import ProgressBar

IPI_TOLERANCE = 0.05
THROUGHPUT_FACTOR = 1.5
KNEE_TOLERANCE = 0.15
REFERENCE = "munmap-4k-alone"
# mmap_lock rows: the same factor as the other throughput ratios (a ratio of two simulated
# throughputs against a ratio of two measured ones; the project's validation tolerance).
LOCK_FACTOR = THROUGHPUT_FACTOR

TOLERANCES = {
    "ipis_per_op": f"|sim - real| <= {IPI_TOLERANCE} x max(real, 1)",
    "relative_throughput": f"sim / real within a factor of {THROUGHPUT_FACTOR}",
    "tlb_knee": f"|sim - real| <= {KNEE_TOLERANCE:.0%} of real",
    "mmap_lock": f"2-thread / 1-thread per-thread ops/s, sim / real within a factor of {LOCK_FACTOR}",
}

PASS, FAIL, NA, ERROR = "pass", "FAIL", "n/a", "error"


@dataclass
class Row:
    section: str  # "ipis_per_op", "relative_throughput", "tlb_knee", "mmap_lock"
    name: str
    real: float | None
    sim: float | None
    status: str  # pass, FAIL, n/a, error
    note: str = ""
    role: str = "check"  # "check": held out from calibrate's fits (the verdict); "fit": fitted on it


@dataclass
class Report:
    rows: list[Row]
    preset: str
    measurements: str
    json_path: Path | None = None
    png_path: Path | None = None
    sim: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """The verdict: every held-out row passes (the rows calibrate fitted on are shown,
        not judged: they pass by construction)."""
        return all(r.status in (PASS, NA) for r in self.rows if r.role == "check")

    def counts(self, role: str = "check") -> dict[str, int]:
        out = {s: 0 for s in (PASS, FAIL, NA, ERROR)}
        for r in self.rows:
            if r.role == role:
                out[r.status] += 1
        return out


# ---------------------------------------------------------------------------------------
# simulation


def fpr_overrides(threads: int, ops: int) -> dict[str, object]:
    """fpr-munmap case 1 (N I/O threads of one process: one mmap_lock), as bench/fpr_munmap
    --case 1 --threads N runs it, on a 2-core machine like the validating host."""
    return {
        "workload.kind": "fpr-munmap",
        "workload.case": 1,
        "workload.threads": threads,
        "workload.ops": ops,
        "os.coherence": "linux",
        "machine.sockets": 1,
        "machine.cores_per_socket": 2,
    }


def io_rate(per_thread: Sequence[Mapping[str, Any]]) -> float | None:
    """Mean ops/s of the ``io`` threads of a stats-schema ``per_thread`` list, or None."""
    rates = [float(t["ops_per_second"]) for t in per_thread if t.get("role", "io") == "io" and t.get("ops_per_second")]
    return sum(rates) / len(rates) if rates else None


def simulate_fpr(preset: str | os.PathLike[str] | Mapping[str, Any], threads: int, ops: int) -> dict[str, Any]:
    """Per-I/O-thread ops/s of simulated fpr-munmap case 1, or ``{"error": ...}``."""
    try:
        result = tlbsim.run(preset, overrides=fpr_overrides(threads, ops))
        rate = io_rate(result.stats["per_thread"])
        return {"ops_per_second_per_thread": rate} if rate else {"error": "simulation failed: no I/O throughput"}
    except (tlbsim.TlbsimError, OSError) as err:
        return {"error": f"simulation failed: {err}"}
    except (KeyError, TypeError) as err:
        return {"error": f"simulation failed: its stats have no {err}"}


def real_fpr_rates(records: Sequence[Mapping[str, Any]]) -> dict[int, float]:
    """Per-I/O-thread ops/s of calibrate's fpr_munmap case-1 records, by thread count."""
    out: dict[int, float] = {}
    for r in records:
        rate = io_rate(r.get("per_thread", [])) if r.get("case") == 1 else None
        if rate and r.get("io_threads"):
            out[int(r["io_threads"])] = rate
    return out


def reach_overrides(pages: int, accesses: int) -> dict[str, object]:
    return {
        "machine.sockets": 1,
        "machine.cores_per_socket": 1,
        "workload.kind": "synthetic",
        "workload.pattern": "random",
        "workload.threads": 1,
        "workload.region_bytes": pages * 4096,
        "workload.accesses": accesses,
        "workload.fetches": False,
        "workload.write_fraction": 0.0,
        "os.thp": False,
    }


def simulate_reach_point(
    preset: str | os.PathLike[str] | Mapping[str, Any], pages: int, accesses: int
) -> dict[str, Any]:
    """L1 and L2 TLB misses per access of random reads over ``pages`` pages, without the
    first touch of each page (a compulsory miss at both levels)."""
    try:
        t = tlbsim.run(preset, overrides=reach_overrides(pages, accesses)).stats["totals"]
        n = t["accesses"] - pages
        return {
            "pages": pages,
            "accesses": t["accesses"],
            "l1_miss_per_access": max(0.0, (t["l1_tlb_misses"] - pages) / n),
            "l2_miss_per_access": max(0.0, (t["l2_tlb_misses"] - pages) / n),
        }
    except (tlbsim.TlbsimError, OSError, KeyError) as err:
        return {"pages": pages, "error": f"simulation failed: {err}"}


# ---------------------------------------------------------------------------------------
# rows (pure)


def sibling_away_note(rec: Mapping[str, Any]) -> str:
    """How many of a pattern's operations found the spinning sibling off its CPU (from
    ``measure.shootdown_record``), when 1% or more; else ""."""
    away = rec.get("sibling_away_fraction") or 0.0
    if away < 0.01:
        return ""
    return (
        f"the sibling was off its CPU for {100 * away:.0f}% of the operations (no IPI for those; "
        f"over all operations {rec['shootdown_ipis_received_per_op']:.3f} per operation)"
    )


def ipi_rows(real: Mapping[str, Mapping[str, Any]], sim: Mapping[str, Mapping[str, Any]]) -> list[Row]:
    rows = []
    for name, r in real.items():
        s = sim.get(name, {"error": "simulation failed: not run"})
        # The simulated sibling is always on its CPU: compare the operations the real one was on
        # its CPU for (where the bench could tell), and say how many found it away.
        rv = r.get("shootdown_ipis_received_per_op_sibling_present", r.get("shootdown_ipis_received_per_op"))
        away = sibling_away_note(r)
        sv = s.get("ipis_per_op")
        if "not_measurable" in r or rv is None:
            why = r.get("not_measurable") or r.get("ipis_not_measurable") or "not measured"
            rows.append(Row("ipis_per_op", name, None, sv, NA, f"not measurable here: {why}"))
        elif "error" in s or sv is None:
            rows.append(Row("ipis_per_op", name, rv, None, ERROR, s.get("error", "simulation failed: no value")))
        else:
            ok = abs(sv - rv) <= IPI_TOLERANCE * max(rv, 1.0)
            note = "; ".join(n for n in (away, "" if ok else r.get("note", "")) if n)
            rows.append(Row("ipis_per_op", name, rv, sv, PASS if ok else FAIL, note))
    return rows


def throughput_rows(
    real: Mapping[str, Mapping[str, Any]],
    sim: Mapping[str, Mapping[str, Any]],
    reference: str = REFERENCE,
    fitted: Sequence[str] = (),
) -> list[Row]:
    """Throughput relative to ``reference``; the patterns in ``fitted`` (calibrate fitted
    costs on them) are fitting rows, the rest held out."""
    rows = []
    ref_r = real.get(reference, {}).get("ops_per_second")
    ref_s = sim.get(reference, {}).get("ops_per_second")
    for name, r in real.items():
        if name == reference:
            continue
        s = sim.get(name, {"error": "simulation failed: not run"})
        label = f"{name} / {reference}"
        if not r.get("ops_per_second") or not ref_r:
            why = r.get("not_measurable") or real.get(reference, {}).get("not_measurable") or "not measured"
            rows.append(Row("relative_throughput", label, None, None, NA, f"not measurable here: {why}"))
            continue
        rv = r["ops_per_second"] / ref_r
        if "error" in s or not s.get("ops_per_second") or not ref_s:
            err = s.get("error") or sim.get(reference, {}).get("error") or "simulation failed: no throughput"
            rows.append(Row("relative_throughput", label, rv, None, ERROR, err))
            continue
        sv = s["ops_per_second"] / ref_s
        ok = 1 / THROUGHPUT_FACTOR <= sv / rv <= THROUGHPUT_FACTOR
        rows.append(
            Row(
                "relative_throughput",
                label,
                rv,
                sv,
                PASS if ok else FAIL,
                "fitted on: " + ("the kernel costs" if name in fit.BASELINES else "the shootdown costs")
                if name in fitted
                else "",
                "fit" if name in fitted else "check",
            )
        )
    return rows


def sim_knees(points: Sequence[Mapping[str, Any]]) -> tuple[dict[str, float], str]:
    """L1 and L2 knees of the simulated miss curves (one knee each, no growth term)."""
    good = [p for p in points if "error" not in p]
    if len(good) < 8:
        errors = sorted({p["error"] for p in points if "error" in p})
        return {}, errors[0] if errors else f"only {len(good)} simulated sizes"
    pages = [p["pages"] for p in good]
    out = {}
    for level, key in (("l1", "l1_miss_per_access"), ("l2", "l2_miss_per_access")):
        try:
            out[level] = fit.fit_reach(pages, [p[key] for p in good], 1, growth=False).knees[0].entries
        except ValueError:
            pass
    return out, ""


def knee_rows(
    real_knees: Sequence[Mapping[str, Any]],
    real_missing: Mapping[str, str],
    simulated: Mapping[str, float],
    sim_error: str,
    configured: Mapping[str, int],
    documented: Mapping[str, Any] | None = None,
    from_documented: Sequence[str] = (),
) -> list[Row]:
    """The simulated knees against the vendor's documented sizes (``documented``: a
    ``tlb_geometry.Geometry`` as a dict): the fit never uses them, so these rows are held
    out. Without a documented geometry the host's fitted knee is shown, as a fitting row
    (the preset was made from it). A level whose preset value was taken from the table
    (``from_documented``: the fit's knee was of low confidence) is a fitting row too."""
    rows = []
    by = {k["level"]: k for k in real_knees}
    for level, label in (("l1", "L1 DTLB knee (pages)"), ("l2", "L2 TLB knee (pages)")):
        k = by.get(level)
        cfg = configured.get(level)
        measured = (
            f"measured {k['entries']:.0f}" + (f" ({k['confidence']} confidence)" if k.get("confidence") else "")
            if k
            else "not measured"
        )
        if documented:
            ref = float(documented["l1_entries" if level == "l1" else "l2_entries"])
            note = f"documented for {documented['microarchitecture']}; {measured}; preset: {cfg} entries"
            role = "fit" if level in from_documented else "check"
        elif k is not None:
            ref = float(k["entries"])
            note = f"no documented geometry for this CPU: against the fitted knee; preset: {cfg} entries"
            role = "fit"
        else:
            why = "; ".join(real_missing.values()) or "no knee found in the reach curve"
            rows.append(
                Row(
                    "tlb_knee",
                    label,
                    None,
                    simulated.get(level),
                    NA,
                    why if why.startswith("not measurable") else f"not measurable here: {why}",
                )
            )
            continue
        if sim_error or level not in simulated:
            rows.append(Row("tlb_knee", label, ref, None, ERROR, sim_error or "no knee in the simulated curve", role))
            continue
        sv = float(simulated[level])
        ok = abs(sv - ref) <= KNEE_TOLERANCE * ref
        rows.append(Row("tlb_knee", label, ref, sv, PASS if ok else FAIL, note, role))
    return rows


# ---------------------------------------------------------------------------------------
def munmap_lock_scenario(mode: str, workers: int, ops: int) -> dict[str, Any]:
    """bench/munmap_lock as a scenario: `workers` workers looping mmap(4 KiB anonymous,
    private, writable) -> write one byte -> munmap, as threads of one process ("threads") or
    one process each ("procs"), pinned to cores 0.. like the benchmark."""
    program = [
        {
            "op": "loop",
            "count": ops,
            "body": [
                {"op": "mmap", "region": "page", "bytes": 4096, "writable": True},
                {"op": "access", "region": "page", "pattern": "sequential", "mode": "write", "count": 1},
                {"op": "munmap", "region": "page"},
                {"op": "count"},
            ],
        },
        {"op": "exit"},
    ]

    def thread(i: int) -> dict[str, Any]:
        return {"name": f"worker{i}", "class": "worker", "core": i, "program": program}

    if mode == "threads":
        processes = [{"name": "munmap_lock", "thread": [thread(i) for i in range(workers)]}]
    else:
        processes = [{"name": f"munmap_lock{i}", "thread": [thread(i)]} for i in range(workers)]
    return {"process": processes}


def simulate_munmap_lock(
    preset: str | os.PathLike[str] | Mapping[str, Any], mode: str, workers: int, ops: int
) -> dict[str, Any]:
    """Per-worker ops/s of the simulated munmap_lock scenario, or ``{"error": ...}``."""
    try:
        result = tlbsim.run(
            preset,
            overrides={
                "workload.kind": "scenario",
                "workload.scenario": munmap_lock_scenario(mode, workers, ops),
                "os.coherence": "linux",
                "machine.sockets": 1,
                "machine.cores_per_socket": 2,
            },
        )
        rates = [float(t["ops_per_second"]) for t in result.stats["per_thread"] if t.get("ops_per_second")]
        return (
            {"ops_per_second_per_worker": sum(rates) / len(rates)}
            if rates
            else {"error": "simulation failed: no worker throughput"}
        )
    except (tlbsim.TlbsimError, OSError) as err:
        return {"error": f"simulation failed: {err}"}
    except (KeyError, TypeError) as err:
        return {"error": f"simulation failed: its stats have no {err}"}


def real_munmap_lock_rates(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int], float]:
    """Per-worker ops/s of calibrate's munmap_lock records, by (mode, workers)."""
    out: dict[tuple[str, int], float] = {}
    for r in records:
        rate = r.get("ops_per_second_per_thread")
        if r.get("mode") in ("threads", "procs") and r.get("workers") and rate:
            out[(str(r["mode"]), int(r["workers"]))] = float(rate)
    return out


def munmap_lock_rows(
    real: Mapping[tuple[str, int], float], sim: Mapping[tuple[str, int], Mapping[str, Any]]
) -> list[Row]:
    """Per worker, 2 workers over 1, as threads of one process and as processes: the lock
    halves (or worse) the threads' rate and leaves the processes' alone."""
    rows = []
    for mode, what in (("threads", "threads of one process"), ("procs", "separate processes")):
        label = f"munmap_lock, {what}: per worker, 2 / 1"
        r1, r2 = real.get((mode, 1)), real.get((mode, 2))
        if not r1 or not r2:
            rows.append(
                Row(
                    "mmap_lock",
                    label,
                    None,
                    None,
                    NA,
                    "not measurable here: munmap_lock with 1 and 2 workers was not measured (needs 2 CPUs)",
                )
            )
            continue
        rv = r2 / r1
        s1, s2 = sim.get((mode, 1), {}), sim.get((mode, 2), {})
        v1, v2 = s1.get("ops_per_second_per_worker"), s2.get("ops_per_second_per_worker")
        if not v1 or not v2:
            rows.append(
                Row(
                    "mmap_lock",
                    label,
                    rv,
                    None,
                    ERROR,
                    s1.get("error") or s2.get("error") or "simulation failed: no value",
                )
            )
            continue
        sv = v2 / v1
        rows.append(Row("mmap_lock", label, rv, sv, PASS if 1 / LOCK_FACTOR <= sv / rv <= LOCK_FACTOR else FAIL))
    return rows


# output


SECTION_TITLES = {
    "ipis_per_op": "TLB-shootdown IPIs received per operation",
    "relative_throughput": f"operations per second relative to {REFERENCE}",
    "tlb_knee": "TLB reach: knees of the miss curves",
    "mmap_lock": "mmap_lock: threads of one process (fpr-munmap case 1)",
}


def lock_rows(real: Mapping[int, float], sim: Mapping[int, Mapping[str, Any]]) -> list[Row]:
    """mmap_lock: per-thread ops/s of fpr-munmap case 1 with 2 threads over that with 1.

    The ratio, not the rates: it cancels the host's speed (and the preset's fitted costs) and
    keeps what the lock does — two threads of one process serialize their mmap/munmap on
    mmap_lock (and each munmap waits under it for the other CPU's shootdown ack)."""
    label = "fpr-munmap case 1: per thread, 2 threads / 1 thread"
    if not real.get(1) or not real.get(2):
        return [
            Row(
                "mmap_lock",
                label,
                None,
                None,
                NA,
                "not measurable here: fpr_munmap case 1 with 1 and 2 threads was not measured (needs 2 CPUs)",
            )
        ]
    rv = real[2] / real[1]
    s1, s2 = sim.get(1, {}), sim.get(2, {})
    if (
        "error" in s1
        or "error" in s2
        or not s1.get("ops_per_second_per_thread")
        or not s2.get("ops_per_second_per_thread")
    ):
        return [
            Row(
                "mmap_lock", label, rv, None, ERROR, s1.get("error") or s2.get("error") or "simulation failed: no value"
            )
        ]
    sv = s2["ops_per_second_per_thread"] / s1["ops_per_second_per_thread"]
    ok = 1 / LOCK_FACTOR <= sv / rv <= LOCK_FACTOR
    return [Row("mmap_lock", label, rv, sv, PASS if ok else FAIL)]


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.3f}"


def format_table(report: Report) -> str:
    width = max([len(r.name) for r in report.rows] + [20])
    lines = [f"preset: {report.preset}", f"measurements: {report.measurements}"]
    for section, title in SECTION_TITLES.items():
        rows = [r for r in report.rows if r.section == section]
        if not rows:
            continue
        lines += [
            "",
            f"{title}  (pass: {TOLERANCES[section]})",
            f"  {'':<{width}}  {'real':>10}  {'simulated':>10}  result",
        ]
        previous = ""
        for r in rows:
            note = r.note
            if r.status == ERROR and note and note == previous:
                note = "(as above)"
            elif r.status == ERROR:
                previous = note
            note = f"  {note}" if note else ""
            status = r.status if r.role == "check" else f"({r.status}: fitted on)"
            lines.append(f"  {r.name:<{width}}  {_fmt(r.real):>10}  {_fmt(r.sim):>10}  {status}{note}")
    c = report.counts()
    f = report.counts("fit")
    lines += [
        "",
        (
            f"held out (the verdict): {c[PASS]} pass, {c[FAIL]} fail, {c[ERROR]} not simulated, "
            f"{c[NA]} not measurable here"
        ),
        (
            f"fitted on (shown, not judged): {f[PASS]} pass, {f[FAIL]} fail, {f[ERROR]} not simulated, "
            f"{f[NA]} not measurable here"
        ),
    ]
    return "\n".join(lines)


def plot(
    report: Report, reach: Mapping[str, Any] | None, path: Path, documented: Mapping[str, Any] | None = None
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(1, 3, figsize=(18, 5.5))
    for ax, section in zip(axes[:2], ("ipis_per_op", "relative_throughput")):
        rows = [r for r in report.rows if r.section == section]
        x = np.arange(len(rows))
        real = [r.real if r.real is not None else np.nan for r in rows]
        sim = [r.sim if r.sim is not None else np.nan for r in rows]
        # the rows calibrate fitted on are pale: only the others are the verdict
        alpha = [0.35 if r.role == "fit" else 1.0 for r in rows]
        for i in range(len(rows)):
            ax.bar(x[i] - 0.2, real[i], 0.4, color="C0", alpha=alpha[i])
            ax.bar(x[i] + 0.2, sim[i], 0.4, color="C1", alpha=alpha[i])
        legend = [Patch(color="C0", label="real (this host)"), Patch(color="C1", label="simulated")]
        if any(r.role == "fit" for r in rows):
            legend.append(Patch(color="grey", alpha=0.35, label="pale: fitted on (not judged)"))
        for i, r in enumerate(rows):
            if r.status in (FAIL, ERROR):
                ax.annotate("x" if r.status == FAIL else "?", (i, 0), ha="center", va="bottom", color="red")
        ax.set_xticks(x, [r.name.split(" / ")[0] for r in rows], rotation=60, ha="right", fontsize=8)
        ax.set_title(SECTION_TITLES[section], fontsize=10)
        ax.legend(handles=legend, fontsize=8)
    ax = axes[2]
    ax.set_title(SECTION_TITLES["tlb_knee"], fontsize=10)
    ax.set_xscale("log")
    ax.set_xlabel("array size (4 KiB pages)")
    handles = []
    if reach:
        pts = reach.get("points", [])

        def curve(size: str) -> dict[int, float]:
            runs: dict[int, list[float]] = {}
            for p in pts:
                if p.get("page_size") == size and "pages" in p and not p.get("dense"):
                    runs.setdefault(p["pages"], []).append(p["ns_per_access"])
            return {k: float(np.median(v)) for k, v in runs.items()}  # the median of a size's runs, as fitted

        p4, p2 = curve("4k"), curve("2m")
        xs = sorted(p4)
        if xs:
            handles += ax.plot(xs, [p4[p] for p in xs], ".-", ms=3, label="real: ns/access, 4 KiB pages")
        xs2 = sorted(p2)
        if xs2:
            handles += ax.plot(xs2, [p2[p] for p in xs2], ".-", ms=3, label="real: ns/access, 2 MiB pages")
        ax.set_yscale("log")
        ax.set_ylabel("ns per access")
        for k in reach.get("analysis", {}).get("knees", []):
            ax.axvline(k["entries"], color="grey", ls=":", lw=1)
        if documented:
            for key in ("l1_entries", "l2_entries"):
                ax.axvline(documented[key], color="red", ls="--", lw=0.8)
            handles.append(
                ax.plot([], [], color="red", ls="--", lw=0.8, label=f"documented ({documented['microarchitecture']})")[
                    0
                ]
            )
        handles.append(ax.plot([], [], color="grey", ls=":", lw=1, label="fitted knees")[0])
    sims = [p for p in report.sim.get("reach", []) if "error" not in p]
    if sims:
        ax2 = ax.twinx()
        xs = [p["pages"] for p in sims]
        handles += ax2.plot(xs, [p["l1_miss_per_access"] for p in sims], "--", label="sim: L1 misses/access")
        handles += ax2.plot(xs, [p["l2_miss_per_access"] for p in sims], "--", label="sim: L2 misses/access")
        ax2.set_ylabel("simulated misses per access")
        ax2.set_ylim(0, 1.05)
    if handles:
        ax.legend(handles=handles, fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------
# the command


def load_measurements(
    preset: Path, measurements: str | os.PathLike[str] | None, quick: bool, progress: bool
) -> tuple[dict[str, Any], str]:
    """The calibrate JSON (given, or next to the preset), or fresh quick measurements."""
    path = Path(measurements) if measurements else preset.with_suffix(".json")
    if path.is_file():
        return json.loads(path.read_text()), str(path)
    if measurements:
        raise FileNotFoundError(2, "measurements file not found", str(path))
    host = measure.read_host()
    exes = measure.build_benchmarks()
    host_cfg = tlbsim.resolve({"machine": {"preset": "host"}})
    limit = int(host_cfg["machine"]["tlb"]["l1d_2m"]["entries"]) * 512
    bar = ProgressBar(13 + 10, desc="calibrate", unit="step", enabled=progress, leave=False)
    try:
        shoot = measure.measure_shootdown(exes["shootdown"], measure.QUICK, bar)
        reach = measure.measure_reach(exes["tlb_reach"], measure.QUICK, host, limit, bar)
    finally:
        bar.close()
    return {"shootdown_patterns": shoot, "tlb_reach": reach, "host": asdict(host)}, "measured now (quick)"


def reach_sizes(knees: Sequence[Mapping[str, Any]], quick: bool) -> list[int]:
    top = max([int(k["entries"]) * 8 for k in knees] + [16384])
    sizes = set(fit.geometric_sizes(16, min(top, 1 << 17), 3 if quick else 6))
    for k in knees:
        sizes.update(fit.knee_sweep(k["entries"], below=0.7, above=1.5, step=0.06 if quick else 0.03))
    return sorted(sizes)


def validate(
    preset: str | os.PathLike[str] = "host-calibrated.toml",
    *,
    measurements: str | os.PathLike[str] | None = None,
    quick: bool = False,
    out: str | os.PathLike[str] = "out/validate",
    progress: bool | None = None,
) -> Report:
    preset = Path(preset)
    if not preset.exists():
        # The usual first try: `tlbsim validate` before any `tlbsim calibrate` in this folder.
        raise FileNotFoundError(
            errno.ENOENT,
            "no such calibrated preset: run `tlbsim calibrate` first (it writes "
            "host-calibrated.toml and its .json here), or give --preset FILE",
            str(preset),
        )
    tlbsim.resolve(preset)  # a broken preset is an error before anything runs
    progress = sys.stderr.isatty() if progress is None else progress
    data, source = load_measurements(preset, measurements, quick, progress)
    real = data.get("shootdown_patterns", {})
    reach = data.get("tlb_reach") or {}
    analysis = reach.get("analysis", {})
    knees = analysis.get("knees", [])
    cfg = tlbsim.resolve(preset)
    configured = {"l1": cfg["machine"]["tlb"]["l1d"]["entries"], "l2": cfg["machine"]["tlb"]["l2"]["entries"]}
    ops = 2_000 if quick else 10_000
    sizes = reach_sizes(knees or [{"entries": configured["l1"]}, {"entries": configured["l2"]}], quick)
    runs = len(real) + len(sizes)
    bar = ProgressBar(runs, desc="validate", unit="run", enabled=progress, leave=False)
    sim: dict[str, Any] = {"patterns": {}, "reach": []}
    try:
        for name in real:
            sim["patterns"][name] = simulate_pattern(preset, name, ops)
            bar.update()
        for p in sizes:
            sim["reach"].append(
                simulate_reach_point(preset, p, max(100_000, 40 * p) if not quick else max(50_000, 20 * p))
            )
            bar.update()
    finally:
        bar.close()
    simulated, sim_error = sim_knees(sim["reach"])
    sim["knees"] = simulated
    # Throughputs: the patterns without a spinning sibling as measured with the other CPU
    # kept busy (calibrate's controls), like the spinning-sibling ones: on a virtual machine
    # an idle vCPU changes the other's speed, which the simulator does not model.
    rows = ipi_rows(real, sim["patterns"])
    closed = (data.get("fit") or {}).get("closed_loop") or {}
    fitted = [*fit.BASELINES, *closed.get("fit_patterns", [])] if (data.get("fit") or {}) else []
    rows += throughput_rows(measure.baseline_view(real, data.get("shootdown_controls")), sim["patterns"], fitted=fitted)
    geometry = (data.get("fit") or {}).get("tlb_geometry") or {}
    documented = geometry.get("documented")
    if documented is None and "tlb_geometry" not in (data.get("fit") or {}):
        # measurements from before the table: look the host up now
        h = data.get("host") or {}
        g = tlb_geometry.lookup(h.get("vendor", ""), h.get("family"), h.get("model_number"), h.get("cpu_flags") or ())
        documented = asdict(g) if g else None
    rows += knee_rows(
        knees,
        analysis.get("not_measurable", {}),
        simulated,
        sim_error,
        configured,
        documented,
        geometry.get("from_documented", []),
    )
    real_fpr = real_fpr_rates(data.get("fpr_munmap") or [])
    sim["fpr_munmap"] = {n: simulate_fpr(preset, n, ops) for n in (1, 2)} if len(real_fpr) >= 2 else {}
    rows += lock_rows(real_fpr, sim["fpr_munmap"])
    real_lock = real_munmap_lock_rates(data.get("munmap_lock") or [])
    sim["munmap_lock"] = (
        {f"{m}-{n}": simulate_munmap_lock(preset, m, n, ops) for m in ("threads", "procs") for n in (1, 2)}
        if real_lock
        else {}
    )
    rows += munmap_lock_rows(
        real_lock, {(k.split("-")[0], int(k.split("-")[1])): v for k, v in sim["munmap_lock"].items()}
    )
    report = Report(rows, str(preset), source, sim=sim)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report.json_path = out / "validate.json"
    report.png_path = out / "validate.png"
    report.json_path.write_text(
        json.dumps(
            {
                "preset": report.preset,
                "measurements": source,
                "tolerances": TOLERANCES,
                "passed": report.passed,
                "counts": report.counts(),
                "counts_fitted_on": report.counts("fit"),
                "rows": [asdict(r) for r in rows],
                "simulated": sim,
                "real": {
                    "shootdown_patterns": {k: {kk: vv for kk, vv in v.items() if kk != "raw"} for k, v in real.items()},
                    "tlb_knees": knees,
                },
                "warnings": data.get("warnings", []),
            },
            indent=1,
            default=json_default_or_str,
        )
        + "\n"
    )
    plot(report, reach, report.png_path, documented)
    return report
