"""``tlbsim calibrate``: measure this host with the native benchmarks of ``bench/`` and write
a machine preset, ``host-calibrated.toml``, and the measurements, ``host-calibrated.json``.

Steps: build the benchmarks (gcc, the Makefile's flags) into ``target/native/`` when they
are missing or older than their sources; run the thirteen shootdown patterns, the TLB-reach
curve (coarse, then finer around each knee it finds) and FPR's munmap cases; fit (pure
functions in :mod:`tlbsim.fit`); write the preset, each number with a comment naming the
measurement it came from. Anything this host cannot measure (no ``TLB:`` row, perf
refused, one CPU, no transparent huge pages) is reported as "not measurable here" with
the reason, and the preset keeps the default for it.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import tlbsim
from tlbsim import fit, tlb_geometry

BENCHMARKS = ("shootdown", "tlb_reach", "fpr_munmap", "munmap_lock")
DEFAULT_OUT = Path("host-calibrated.toml")


class CalibrateError(tlbsim.TlbsimError):
    """The benchmarks could not be built or run (the message says why)."""


@dataclass(frozen=True)
class Plan:
    """How much to measure."""

    name: str
    shootdown_ops: int
    shootdown_reps: int
    reach_per_doubling: int  # coarse sweep: geometric steps per doubling of the array
    reach_min_pages: int
    reach_max_pages: int
    reach_accesses: int
    reach_reps: int  # timed chases per size; the fastest counts
    knee_step: float  # relative step of the sweeps around each knee
    fpr_seconds: float
    memory_bytes: int  # the dense chase for memory latency (at least 4x the LLC)
    knee_passes: int = 2  # times each size around a candidate knee is measured (median)


QUICK = Plan("quick", 20_000, 3, 4, 16, 1 << 16, 200_000, 5, 0.03, 0.25, 512 << 20, 2)
FULL = Plan("full", 100_000, 5, 6, 16, 1 << 20, 1_000_000, 7, 0.015, 1.0, 2 << 30, 3)

# Patterns whose operation costs far more than one page's: fewer operations per run.
OPS_DIVISOR = {"munmap-64": 8, "munmap-64-sleep": 8}


# ---------------------------------------------------------------------------------------
# the host


@dataclass
class Host:
    hostname: str
    kernel: str
    vendor: str
    model: str
    cpus_online: int
    cpus_allowed: int
    sockets: int
    cores_per_socket: int
    sockets_source: str
    frequency_ghz: float
    frequency_source: str
    thp: str | None  # the selected mode of transparent huge pages, None if unknown
    tlb_row: bool
    tlb_row_why: str  # why not, when tlb_row is False
    hypervisor: bool
    llc_bytes: int | None = None  # the last-level cache of CPU 0 (sysfs), None if unknown
    family: int | None = None  # /proc/cpuinfo "cpu family" (for tlb_geometry.lookup)
    model_number: int | None = None  # /proc/cpuinfo "model"
    data_caches: list[dict[str, int]] = field(default_factory=list)  # {"level", "size", "ways"}, sysfs cpu0


def interrupts_path(proc: Path = Path("/proc")) -> Path:
    """``$TLBSIM_PROC_INTERRUPTS`` (the benchmarks honour it too) or /proc/interrupts."""
    env = os.environ.get("TLBSIM_PROC_INTERRUPTS")
    return Path(env) if env else proc / "interrupts"


def read_tlb_row(path: Path) -> tuple[int | None, str]:
    """(TLB-shootdown IPIs received so far, summed over CPUs, or None; why not)."""
    try:
        text = path.read_text()
    except OSError as err:
        return None, f"cannot read {path}: {err.strerror or err}"
    for line in text.splitlines():
        head, _, rest = line.strip().partition(":")
        if head == "TLB":
            total = 0
            for tok in rest.split():
                if not tok.isdigit():
                    break
                total += int(tok)
            return total, ""
    return None, f"no TLB row in {path}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _cpu_list(text: str | None) -> list[int]:
    out: list[int] = []
    for part in (text or "").strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def read_host(proc: Path = Path("/proc"), sys_root: Path = Path("/sys")) -> Host:
    """What the preset needs to know about this machine, from /proc and sysfs. Every
    field has a fallback, so this never fails."""
    cpuinfo = _read(proc / "cpuinfo") or ""
    fields: dict[str, str] = {}
    mhz: list[float] = []
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep:
            continue
        fields.setdefault(key, value.strip())
        if key == "cpu MHz":
            try:
                mhz.append(float(value))
            except ValueError:
                pass
    vendor = fields.get("vendor_id", "unknown")
    model = fields.get("model name", platform.processor() or "unknown")
    cpu_dir = sys_root / "devices/system/cpu"
    online = _cpu_list(_read(cpu_dir / "online")) or list(range(os.cpu_count() or 1))
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = len(online)
    packages = set()
    for c in online:
        pkg = _read(cpu_dir / f"cpu{c}/topology/physical_package_id")
        if pkg is not None and pkg.strip().lstrip("-").isdigit():
            packages.add(int(pkg))
    if packages:
        sockets, sockets_source = len(packages), "sysfs physical_package_id"
    else:
        sockets, sockets_source = 1, "assumed (sysfs topology unreadable)"
    cores = max(1, math.ceil(len(online) / sockets))

    freq, fsrc = 0.0, ""
    base = _read(cpu_dir / "cpu0/cpufreq/base_frequency")
    at = re.search(r"@\s*([0-9.]+)\s*GHz", model)
    if base and base.strip().isdigit():
        freq, fsrc = int(base) / 1e6, "sysfs cpufreq/base_frequency"
    elif at:
        freq, fsrc = float(at.group(1)), f'/proc/cpuinfo model name "{model}"'
    elif mhz:
        freq, fsrc = float(np.median(mhz)) / 1000, '/proc/cpuinfo "cpu MHz"'
    else:
        freq, fsrc = 3.0, "unknown here: the built-in default 3.0 (only converts ns to cycles)"
    freq = round(freq, 3)

    thp_text = _read(sys_root / "kernel/mm/transparent_hugepage/enabled")
    thp = None
    if thp_text:
        m = re.search(r"\[(\w+)\]", thp_text)
        thp = m.group(1) if m else thp_text.strip()
    count, why = read_tlb_row(interrupts_path(proc))
    llc, llc_level = None, 0
    data_caches: list[dict[str, int]] = []
    for index in sorted((cpu_dir / "cpu0/cache").glob("index*")):
        level, size = _read(index / "level"), _read(index / "size")
        m = re.fullmatch(r"(\d+)([KMG]?)", (size or "").strip())
        if not (level and level.strip().isdigit() and m):
            continue
        size_bytes = int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]
        if int(level) >= llc_level:
            llc_level, llc = int(level), size_bytes
        kind = (_read(index / "type") or "").strip()
        ways = (_read(index / "ways_of_associativity") or "").strip()
        if kind in ("Data", "Unified") and ways.isdigit():
            data_caches.append({"level": int(level), "size": size_bytes, "ways": int(ways)})

    def _int(key: str) -> int | None:
        v = fields.get(key, "")
        return int(v) if v.isdigit() else None

    return Host(
        hostname=platform.node(),
        kernel=platform.release(),
        vendor=vendor,
        model=model,
        cpus_online=len(online),
        cpus_allowed=allowed,
        sockets=sockets,
        cores_per_socket=cores,
        sockets_source=sockets_source,
        frequency_ghz=freq,
        frequency_source=fsrc,
        thp=thp,
        tlb_row=count is not None,
        tlb_row_why=why,
        hypervisor=" hypervisor" in f" {fields.get('flags', '')} ",
        llc_bytes=llc,
        family=_int("cpu family"),
        model_number=_int("model"),
        data_caches=sorted(data_caches, key=lambda c: c["level"]),
    )


# ---------------------------------------------------------------------------------------
# building and running the benchmarks


def bench_sources() -> Path:
    """bench/ of this checkout (``$TLBSIM_BENCH_DIR`` overrides)."""
    env = os.environ.get("TLBSIM_BENCH_DIR")
    src = Path(env) if env else Path(__file__).resolve().parents[2] / "bench"
    if not (src / "shootdown.c").is_file():
        raise CalibrateError(
            f"the native benchmarks' sources are not at {src}: tlbsim calibrate runs from a "
            "checkout of the tlbsim repository (or set TLBSIM_BENCH_DIR to its bench/ folder)"
        )
    return src


def build_benchmarks(src: Path | None = None, dest: Path | None = None, cc: str | None = None) -> dict[str, Path]:
    """Compile the benchmarks the way ``make bench-native`` does, into ``dest`` (default:
    ``target/native`` next to bench/, or ``~/.cache/tlbsim/native`` when that is not
    writable), skipping those newer than their sources."""
    src = src or bench_sources()
    if dest is None:
        dest = src.parent / "target" / "native"
        try:
            dest.mkdir(parents=True, exist_ok=True)
            if not os.access(dest, os.W_OK):
                raise PermissionError
        except OSError:
            dest = Path.home() / ".cache" / "tlbsim" / "native"
    dest.mkdir(parents=True, exist_ok=True)
    cc = cc or os.environ.get("CC") or "gcc"
    out: dict[str, Path] = {}
    for name in BENCHMARKS:
        exe = dest / name
        deps = [src / f"{name}.c", src / "proc_interrupts.h"]
        newest = max(d.stat().st_mtime for d in deps if d.exists())
        if not exe.exists() or exe.stat().st_mtime < newest:
            if shutil.which(cc) is None:
                raise CalibrateError(f"no C compiler ({cc}) to build the benchmarks in {src}")
            cmd = [cc, "-O2", "-Wall", "-Wextra", "-pthread", "-o", str(exe), str(src / f"{name}.c")]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise CalibrateError(f"building {name} failed ({' '.join(cmd)}):\n{r.stderr.strip()}")
        out[name] = exe
    return out


def _json_lines(cmd: Sequence[str], timeout: float) -> list[dict[str, Any]]:
    try:
        r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        raise CalibrateError(f"{Path(cmd[0]).name} took longer than {timeout:.0f} s") from err
    if r.returncode != 0:
        raise CalibrateError(f"{' '.join(cmd)} failed (status {r.returncode}): {r.stderr.strip()}")
    try:
        lines = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    except json.JSONDecodeError as err:
        raise CalibrateError(f"{' '.join(cmd)} printed something that is not JSON: {err}") from err
    if not lines:
        raise CalibrateError(f"{' '.join(cmd)} printed nothing")
    return lines


class _Progress:
    """A tqdm bar over the measurement steps (silent when disabled)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc="calibrate", unit="step", file=sys.stderr, leave=False)

    def step(self, what: str, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(what, refresh=False)
            self.bar.update(n)

    def add(self, n: int) -> None:
        if self.bar is not None:
            self.bar.total += n
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ---------------------------------------------------------------------------------------
# shootdown patterns


def expected_ipis(src: Path | None = None) -> dict[str, float]:
    """bench/patterns.toml's expected IPIs per operation (a quiet machine), by pattern."""
    import tomllib

    try:
        path = (src or bench_sources()) / "patterns.toml"
        return {p["name"]: float(p["expected_ipis_per_op"]) for p in tomllib.loads(path.read_text())["pattern"]}
    except (OSError, KeyError, ValueError, CalibrateError):
        return {}


def shootdown_record(raw: Mapping[str, Any], expected: float | None = None) -> dict[str, Any]:
    """One pattern's bench output in the simulator's stats schema where the quantity
    exists: ``per_thread[0]`` is the measuring thread (``ops_completed``,
    ``ops_per_second``), ``totals.shootdown_ipis_received`` the IPIs of the TLB row."""
    rec: dict[str, Any] = {"pattern": raw["pattern"], "sibling": raw["sibling"]}
    if "not_measurable" in raw:
        rec["not_measurable"] = raw["not_measurable"]
        return rec
    ops = int(raw["ops"])
    # Time the measuring thread was kept off its CPU by other programs does not count
    # (where the kernel has schedstat); the wall-clock rate is kept beside it.
    on_cpu = "ops_per_second_on_cpu_median" in raw
    rate = float(raw["ops_per_second_on_cpu_median" if on_cpu else "ops_per_second_median"])
    rec.update(
        ops=ops,
        reps=int(raw["reps"]),
        ops_per_second=rate,
        ops_per_second_wall=float(raw["ops_per_second_median"]),
        throughput_clock="on-CPU time (run-queue waits removed)" if on_cpu else "wall clock",
    )
    rec["per_thread"] = [{"thread": 0, "ops_completed": ops, "ops_per_second": rate}]
    if "ipis_per_op_median" in raw:
        ipo = float(raw["ipis_per_op_median"])
        rec["shootdown_ipis_received_per_op"] = ipo
        rec["totals"] = {"shootdown_ipis_received": round(ipo * ops)}
        if expected is not None:
            rec["expected_ipis_per_op"] = expected
            if ipo < 0.9 * expected:
                rec["note"] = (
                    "fewer IPIs than the kernel sends with the sibling running: it was preempted "
                    "(other work on its CPU, or the hypervisor's; KVM flushes a preempted vCPU "
                    "without an IPI)"
                )
    else:
        rec["ipis_not_measurable"] = raw.get("ipis_not_measurable", "no IPI count")
    if "sibling_spins_per_second_idle_on_cpu" in raw:
        rec["sibling_cpu_lost"] = fit.lost_fraction(
            raw["sibling_spins_per_second_idle_on_cpu"], raw["sibling_spins_per_second_on_cpu"]
        )
    elif "sibling_spins_per_second_idle" in raw:
        rec["sibling_cpu_lost"] = fit.lost_fraction(
            raw["sibling_spins_per_second_idle"], raw["sibling_spins_per_second"]
        )
    rec["raw"] = dict(raw)
    return rec


def list_patterns(exe: Path) -> list[tuple[str, str]]:
    r = subprocess.run([str(exe), "--list"], capture_output=True, text=True, check=True)
    return [tuple(line.split()[:2]) for line in r.stdout.splitlines() if line.strip()]  # type: ignore[misc]


def measure_shootdown(
    exe: Path,
    plan: Plan,
    progress: _Progress | None = None,
    patterns: Sequence[str] | None = None,
    busy_neighbour: bool = False,
) -> dict[str, dict[str, Any]]:
    """Each pattern (default: all), one bench run each. ``busy_neighbour``: with a process
    spinning on the other CPU (the control for the spinning-sibling patterns)."""
    out: dict[str, dict[str, Any]] = {}
    names = list(patterns) if patterns else [n for n, _ in list_patterns(exe)]
    expected = expected_ipis()
    for name in names:
        ops = max(1, plan.shootdown_ops // OPS_DIVISOR.get(name, 1))
        flags = ["--busy-neighbour"] if busy_neighbour else []
        (raw,) = _json_lines(
            [str(exe), "--ops", str(ops), "--reps", str(plan.shootdown_reps), *flags, name], timeout=600
        )
        out[name] = shootdown_record(raw, expected.get(name))
        if progress:
            progress.step(name + (" (busy neighbour)" if busy_neighbour else ""))
    return out


# ---------------------------------------------------------------------------------------
# TLB reach


@dataclass
class ReachAnalysis:
    """Knees and levels of the reach curve, in pages and ns, with where each came from."""

    curve: str  # which curve the knees were fitted on
    knees: list[dict[str, Any]] = field(default_factory=list)  # l1, l2 (entries, cost_ns, ...)
    memory_ns: float | None = None
    memory_source: str = ""
    not_measurable: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    rms_ns: float | None = None
    llc_bytes: int | None = None  # the last knee of the dense (every-line) chase, fit.fit_llc
    llc_ns: float | None = None  # the latency plateau before it
    llc_source: str = ""
    beyond: list[dict[str, Any]] = field(default_factory=list)  # the fit's data-cache terms and knees past the TLBs


def _valid_2m(r: Mapping[str, Any]) -> bool:
    kib = r.get("anon_huge_kib", -1)
    return kib is not None and kib * 1024 >= 0.5 * max(int(r["bytes"]), 2 << 20)


def reach_points(rows: Sequence[Mapping[str, Any]], vendor: str) -> list[dict[str, Any]]:
    """The bench's rows as points with a stats-schema part: ``totals.accesses`` always,
    ``totals.l1_tlb_misses`` (AMD) and ``totals.walks`` where perf counted them."""
    amd = vendor in ("AuthenticAMD", "HygonGenuine")
    out = []
    for r in rows:
        if "pages_4k" not in r:
            p = {"page_size": r.get("page_size"), "bytes": r.get("bytes"), "not_measurable": r.get("not_measurable")}
            out.append(p)
            continue
        n = int(r["accesses"])
        totals: dict[str, int] = {"accesses": n}
        if "dtlb_load_misses_per_access" in r:
            totals["walks"] = round(r["dtlb_load_misses_per_access"] * n)
            if amd:
                totals["l1_tlb_misses"] = round(r["dtlb_loads_per_access"] * n)
        out.append(
            {
                "page_size": r["page_size"],
                "pages": int(r["pages_4k"]),
                "bytes": int(r["bytes"]),
                "ns_per_access": float(r["ns_per_access"]),
                "anon_huge_kib": r.get("anon_huge_kib"),
                "totals": totals,
                **({"perf": r["perf"]} if "perf" in r else {}),
                **({"dense": True, "lines": int(r["lines"])} if r.get("dense") else {}),
            }
        )
    return out


def _median_by_pages(
    points: Sequence[Mapping[str, Any]],
    page_size: str,
    key: Callable[[Mapping[str, Any]], float | None],
    only: Callable[[Mapping[str, Any]], bool] = lambda r: True,
) -> dict[int, float]:
    acc: dict[int, list[float]] = {}
    for r in points:
        if r.get("page_size") != page_size or "pages" not in r or r.get("dense") or not only(r):
            continue
        v = key(r)
        if v is not None:
            acc.setdefault(int(r["pages"]), []).append(v)
    return {p: float(np.median(v)) for p, v in sorted(acc.items())}


def analyse_reach(
    points: Sequence[Mapping[str, Any]],
    *,
    perf: bool,
    vendor: str,
    thp: str | None,
    control_limit: int,
    llc_bytes: int | None = None,
    caches: Sequence[Mapping[str, int]] | None = None,
) -> ReachAnalysis:
    """Knees (L1, L2) and levels from the reach points.

    The knees come from the raw 4 KiB curve (ns per access), fitted jointly with the data
    caches in ``caches`` (sysfs: level, size, ways) by :func:`tlbsim.fit.fit_tlb_knees`,
    each with a confidence. The 2 MiB curve is fitted too, only to say whether it is
    translation-free (in a guest whose host maps its memory with 4 KiB pages it is not).
    Where perf counts walks, the L2 knee is fitted on walks per access instead (and on
    AMD the L1 knee on L1 DTLB misses per access). ``control_limit`` is unused (kept for
    callers).

    Memory latency: the dense chases (every line of the array, 2 MiB pages), the largest
    minus the smallest, where the largest is at least twice ``llc_bytes``.
    """
    ns4 = _median_by_pages(points, "4k", lambda r: r["ns_per_access"])
    ns2 = _median_by_pages(points, "2m", lambda r: r["ns_per_access"], _valid_2m)
    any2 = [r for r in points if r.get("page_size") == "2m" and "pages" in r]
    out = ReachAnalysis(curve="")
    if not ns4:
        out.not_measurable["tlb_reach"] = "no 4 KiB reach point was measured"
        return out
    if any2 and not ns2:
        out.notes.append("2 MiB arrays got no huge pages (AnonHugePages 0)")
    # The knees: the raw 4 KiB curve, fitted jointly with the data caches the chase's lines
    # overflow (their sizes from sysfs) and what lies past the TLBs. (Differencing against
    # the 2 MiB curve, as before, fails in a guest whose memory the host maps with 4 KiB
    # pages: the 2 MiB arrays then miss the TLBs as the 4 KiB ones do.)
    knees: list[dict[str, Any]] = []
    split = False  # the 2 MiB pages are translated as 4 KiB ones (a guest on 4 KiB host pages)
    dcs = [fit.DataCache(int(c["level"]), int(c["size"]), int(c["ways"])) for c in (caches or [])]
    if len(ns4) >= 10:
        try:
            f = fit.fit_tlb_knees(list(ns4), list(ns4.values()), dcs)
            out.curve = "ns per access, 4 KiB pages, fitted jointly with the data caches" + (
                " (" + ", ".join(f"L{c.level} {c.size_bytes >> 10} KiB" for c in dcs) + ")"
                if dcs
                else " (none known: sysfs gave no cache sizes)"
            )
            out.rms_ns = f.rms
            out.beyond = f.caches
            for k in f.knees:
                knees.append(
                    {
                        "level": k.level,
                        "entries": k.entries,
                        "cost_ns": k.cost,
                        "step_share": k.step_share,
                        "between": list(k.between),
                        "interval": list(k.interval),
                        "significance": k.significance,
                        "confidence": k.confidence,
                        "source": "ns per access, 4 KiB pages (fitted with the data caches)",
                        "estimator": k.estimator,
                    }
                )
        except ValueError as err:
            out.notes.append(f"knee fit failed: {err}")
        if ns2 and len(ns2) >= 10:
            try:
                f2 = fit.fit_tlb_knees(list(ns2), list(ns2.values()), dcs)
                # the same L1 knee in both curves: the 2 MiB arrays miss the 4 KiB-entry TLB too
                l1_4k = next((k["entries"] for k in knees if k["level"] == "l1"), None)
                l1_2m = next((k for k in f2.knees if k.level == "l1" and k.confidence != "low"), None)
                if l1_2m is not None and l1_4k is not None and abs(l1_2m.entries / l1_4k - 1) <= 0.25:
                    split = True
                    out.notes.append(
                        f"the 2 MiB-page curve has a TLB knee too (near {l1_2m.entries:.0f} pages): its huge pages "
                        "are translated as 4 KiB ones (a virtual machine whose memory the host maps with 4 KiB "
                        "pages), so it cannot serve as a translation-free control"
                    )
            except ValueError:
                pass
    else:
        out.not_measurable["tlb_knees_ns"] = f"not measurable here: only {len(ns4)} sizes measured"
    if perf:
        amd = vendor in ("AuthenticAMD", "HygonGenuine")
        walks = _median_by_pages(
            points, "4k", lambda r: r["totals"].get("walks", None) and r["totals"]["walks"] / r["totals"]["accesses"]
        )
        curves = [("l2", walks, "walks per access (perf dTLB-load-misses)")]
        if amd:
            l1 = _median_by_pages(
                points,
                "4k",
                lambda r: (
                    r["totals"].get("l1_tlb_misses", None) and r["totals"]["l1_tlb_misses"] / r["totals"]["accesses"]
                ),
            )
            curves.insert(0, ("l1", l1, "L1 DTLB misses per access (perf dTLB-loads, AMD)"))
        for name, curve, what in curves:
            if len(curve) < 8:
                continue
            try:
                f = fit.fit_reach(list(curve), fit.median_filter(list(curve.values())), 1, growth=False, relative=True)
            except ValueError:
                continue
            k = f.knees[0]
            prev = next((d for d in knees if d["level"] == name), None)
            entry = {
                "level": name,
                "entries": k.entries,
                "cost_ns": prev["cost_ns"] if prev else None,
                "step_share": k.step_share,
                "between": list(k.between),
                "source": what,
            }
            knees = [d for d in knees if d["level"] != name] + [entry]
    out.knees = sorted(knees, key=lambda d: d["level"])
    dense = sorted((r for r in points if r.get("dense") and "pages" in r and _valid_2m(r)), key=lambda r: r["bytes"])
    if len(dense) >= 2 and dense[-1]["bytes"] >= 2 * (llc_bytes or 0) and dense[-1]["bytes"] >= 64 << 20:
        hi, lo = dense[-1], dense[0]
        out.memory_ns = hi["ns_per_access"] - lo["ns_per_access"]
        llc = f", {hi['bytes'] / llc_bytes:.1f}x the {llc_bytes >> 20} MiB last-level cache" if llc_bytes else ""
        out.memory_source = (
            f"tlb_reach --dense: every line of a {hi['bytes'] >> 20} MiB array on 2 MiB pages in random order{llc}, "
            f"{hi['ns_per_access']:.1f} ns per read, minus {lo['ns_per_access']:.1f} ns for a "
            f"{lo['bytes'] >> 10} KiB one (L1 hits)"
        )
        if split:
            out.memory_source += (
                "; this includes page walks: here the 2 MiB pages are translated as 4 KiB ones (see the notes)"
            )
    else:
        why = (
            ("no transparent huge pages" + (f" (enabled = {thp})" if thp else ""))
            if not dense
            else "the dense array was not larger than twice the last-level cache"
        )
        out.not_measurable["memory_latency"] = f"not measurable here: {why}"
    # LLC: the last knee of the dense curve (16 KiB .. >= 256 MiB in x2 steps)
    if split and llc_bytes:
        # past the L2 TLB's reach the line chase walks too: its last knee is not the LLC's
        out.llc_bytes, out.llc_ns = llc_bytes, None
        out.llc_source = (
            "sysfs cpu0 cache (the dense chase cannot measure it here: its 2 MiB pages are "
            "translated as 4 KiB ones, so it misses the TLB before it leaves the cache)"
        )
    elif len(dense) >= 5:
        llc = fit.fit_llc([r["bytes"] for r in dense], [r["ns_per_access"] for r in dense])
        if llc.why is None:
            out.llc_bytes, out.llc_ns = llc.llc_bytes, llc.latency_ns
            out.llc_source = (
                f"tlb_reach --dense on 2 MiB pages: the last knee of ns per read over "
                f"{dense[0]['bytes'] >> 10} KiB..{dense[-1]['bytes'] >> 20} MiB; "
                f"{llc.latency_ns:.1f} ns up to {llc.llc_bytes >> 10} KiB, "
                f"{llc.beyond_ns:.1f} ns beyond"
            )
        else:
            out.not_measurable["llc"] = f"not measured: {llc.why}"
    else:
        why = (
            ("no transparent huge pages" + (f" (enabled = {thp})" if thp else ""))
            if not dense
            else f"only {len(dense)} dense footprints"
        )
        out.not_measurable["llc"] = f"not measured: {why}"
    return out


def measure_reach(
    exe: Path, plan: Plan, host: Host, control_limit: int, progress: _Progress | None = None
) -> dict[str, Any]:
    """The coarse sweep, a fit, then sweeps around each knee found, and the final fit."""
    thp_ok = host.thp not in ("never",)
    max_pages = plan.reach_max_pages
    avail = _mem_available()
    if avail:
        max_pages = max(plan.reach_min_pages * 4, min(max_pages, avail // 4 // 4096))
    page_arg = "both" if thp_ok else "4k"
    head: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []

    def run(sizes: Sequence[int], chunk: int, label: str) -> None:
        for i in range(0, len(sizes), chunk):
            part = sizes[i : i + chunk]
            lines = _json_lines(
                [
                    str(exe),
                    "--pages",
                    page_arg,
                    "--accesses",
                    str(plan.reach_accesses),
                    "--reps",
                    str(plan.reach_reps),
                    "--sizes",
                    ",".join(map(str, part)),
                ],
                timeout=1800,
            )
            head.update(lines[0].get("host", {}))
            rows.extend(lines[1:])
            if progress:
                progress.step(f"{label} {part[0]}-{part[-1]} pages")

    coarse = fit.geometric_sizes(plan.reach_min_pages, max_pages, plan.reach_per_doubling)
    chunk = 8
    run(coarse, chunk, "reach")
    vendor = head.get("vendor", host.vendor)
    perf = bool(head.get("perf_dtlb"))
    first = analyse_reach(
        reach_points(rows, vendor),
        perf=perf,
        vendor=vendor,
        thp=host.thp,
        control_limit=control_limit,
        llc_bytes=host.llc_bytes,
        caches=host.data_caches,
    )
    refine: list[int] = []
    # densely around each candidate knee: those the coarse fit found, and where the vendor
    # documents this CPU's TLBs (sampling there cannot bias the fit: a knee that is not
    # there does not appear), each size measured `knee_passes` times (the median counts)
    documented = tlb_geometry.lookup(host.vendor, host.family, host.model_number)
    centres = [float(k["entries"]) for k in first.knees]
    if documented:
        centres += [float(documented.l1_entries), float(documented.l2_entries)]
    for c in centres:
        refine += fit.knee_sweep(c, below=0.7, above=1.4, step=plan.knee_step * 2)
        # the coarse sizes there too: a size measured in one run only can sit apart from
        # the rest (each run maps new physical pages), and the median of its runs counts
        refine += [s for s in coarse if 0.7 * c <= s <= 1.4 * c]
    refine = sorted({s for s in refine if s <= max_pages})
    if progress:
        progress.add(plan.knee_passes * math.ceil(len(refine) / chunk) + (1 if thp_ok else 0))
    for _ in range(plan.knee_passes if refine else 0):
        run(refine, chunk, "knees")
    if thp_ok:  # memory latency: every line of an array well beyond the last-level cache
        big = max(plan.memory_bytes, 4 * (host.llc_bytes or 0))
        if avail:
            big = min(big, avail // 4)
        # the line-latency curve for the LLC knee: 16 KiB (4 pages) doubling up to `big`
        dense_sizes = [4 << i for i in range(40) if (4 << i) * 4096 < big] + [big // 4096]
        lines = _json_lines(
            [
                str(exe),
                "--pages",
                "2m",
                "--dense",
                "--accesses",
                str(plan.reach_accesses),
                "--reps",
                str(plan.reach_reps),
                "--sizes",
                ",".join(map(str, dense_sizes)),
            ],
            timeout=1800,
        )
        rows.extend(lines[1:])
        if progress:
            progress.step("memory latency")
    points = reach_points(rows, vendor)
    final = analyse_reach(
        points,
        perf=perf,
        vendor=vendor,
        thp=host.thp,
        control_limit=control_limit,
        llc_bytes=host.llc_bytes,
        caches=host.data_caches,
    )
    if not thp_ok:
        final.not_measurable.setdefault("2m_pages", f"not measurable here: transparent huge pages are {host.thp}")
    perf_why = next((p["perf"] for p in points if "perf" in p), None)
    return {
        "host": head,
        "points": points,
        "analysis": asdict(final),
        "first_pass": asdict(first),
        "perf": "counted" if perf else (perf_why or "not measurable here"),
        "max_pages": max_pages,
    }


def _cpu_ticks(proc: Path = Path("/proc")) -> tuple[int, int, int] | None:
    """(all, idle + iowait, steal) ticks of every CPU so far, from /proc/stat."""
    for line in (_read(proc / "stat") or "").splitlines():
        f = line.split()
        if f and f[0] == "cpu":
            v = [int(x) for x in f[1:]]
            v += [0] * (8 - len(v))
            return sum(v[:8]), v[3] + v[4], v[7]
    return None


def _own_seconds() -> float:
    import resource

    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


class LoadMeter:
    """How busy the host was with other work while we measured: CPU time not ours (from
    /proc/stat minus our own and our children's rusage), the hypervisor's steal, and the
    load average when we started."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self.proc = proc
        text = _read(proc / "loadavg") or ""
        self.loadavg = float(text.split()[0]) if text.split() else None
        self.t0 = _cpu_ticks(proc)
        self.own0 = _own_seconds()

    def result(self, cpus: int) -> dict[str, Any]:
        t1 = _cpu_ticks(self.proc)
        out: dict[str, Any] = {"loadavg_at_start": self.loadavg, "cpus": cpus}
        if self.t0 and t1 and t1[0] > self.t0[0]:
            hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
            total = t1[0] - self.t0[0]
            busy = total - (t1[1] - self.t0[1])
            own = (_own_seconds() - self.own0) * hz
            out["other_work_fraction"] = round(max(0.0, (busy - own) / total), 3)
            out["steal_fraction"] = round((t1[2] - self.t0[2]) / total, 3)
        return out


def load_warning(load: Mapping[str, Any]) -> str | None:
    """A sentence when other work shared the CPUs enough to disturb the measurements."""
    parts = []
    if (load.get("other_work_fraction") or 0) > 0.2:
        parts.append(f"other work used {100 * load['other_work_fraction']:.0f}% of the CPUs")
    if (load.get("steal_fraction") or 0) > 0.1:
        parts.append(f"the hypervisor took {100 * load['steal_fraction']:.0f}% (steal)")
    la, cpus = load.get("loadavg_at_start"), load.get("cpus") or 1
    if la is not None and la > 0.75 * cpus:
        parts.append(f"the load average was {la:.1f} on {cpus} CPUs at the start")
    if not parts:
        return None
    return (
        "the host was busy while measuring (" + "; ".join(parts) + "): throughputs are low and a "
        "preempted sibling receives fewer IPIs; calibrate again on a quiet machine for the preset to trust"
    )


def _mem_available() -> int | None:
    text = _read(Path("/proc/meminfo")) or ""
    m = re.search(r"MemAvailable:\s+(\d+) kB", text)
    return int(m.group(1)) * 1024 if m else None


# ---------------------------------------------------------------------------------------
# FPR munmap cases


def fpr_record(raw: Mapping[str, Any]) -> dict[str, Any]:
    """One fpr_munmap run with a stats-schema part: ``per_thread`` (``role``,
    ``ops_completed``, ``ops_per_second``) and ``totals.shootdown_ipis_received``."""
    rec = dict(raw)
    secs = float(raw.get("seconds", 0))
    threads = []
    for role in ("io", "compute", "mixed"):
        for rate in raw.get(f"{role}_ops_per_second_per_thread", []):
            threads.append(
                {"thread": len(threads), "role": role, "ops_completed": round(rate * secs), "ops_per_second": rate}
            )
    rec["per_thread"] = threads
    if "shootdown_ipis_per_second" in raw:
        rec["totals"] = {"shootdown_ipis_received": round(raw["shootdown_ipis_per_second"] * secs)}
    return rec


def measure_fpr(exe: Path, plan: Plan, cpus: int, progress: _Progress | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for case in range(1, 6):
        for n in range(1, max(1, cpus) + 1):
            rows += [
                fpr_record(r)
                for r in _json_lines(
                    [str(exe), "--seconds", str(plan.fpr_seconds), "--case", str(case), "--threads", str(n)],
                    timeout=600,
                )
            ]
            if progress:
                progress.step(f"fpr case {case} x{n}")
    return rows


def measure_munmap_lock(exe: Path, plan: Plan, cpus: int, progress: _Progress | None = None) -> list[dict[str, Any]]:
    """bench/munmap_lock: 1 and 2 workers looping mmap -> write -> munmap, as threads of one
    process (one mmap_lock) and as processes (one each). Needs 2 CPUs; else no records."""
    rows: list[dict[str, Any]] = []
    if cpus >= 2:
        rows = _json_lines([str(exe), "--seconds", str(plan.fpr_seconds)], timeout=600)
    if progress:
        progress.step("munmap_lock threads/procs")
    return rows


# ---------------------------------------------------------------------------------------
# the preset


@dataclass
class Entry:
    key: str
    value: Any  # None: written as a comment only (not measured)
    comment: str


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
        entries, snapped = fit.snap_entries(k["entries"])
        conf = k.get("confidence")
        iv = k.get("interval")
        how = (
            f"measured: tlb_reach knee at {k['entries']:.0f} pages"
            + (f" ({conf} confidence; positions {iv[0]:.0f}..{iv[1]:.0f} fit within the noise)" if conf and iv else "")
            + f"; fitted on {k['source']}"
        )
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


def baseline_view(
    shoot: Mapping[str, Mapping[str, Any]], controls: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, Mapping[str, Any]]:
    """The patterns, with those without a spinning sibling replaced by their busy-neighbour
    control where it was measured: the fair comparison for the spinning-sibling patterns."""
    out = dict(shoot)
    for name, r in (controls or {}).items():
        if r.get("ops_per_second"):
            out[name] = r
    return out


def build_preset(
    host: Host,
    shoot: Mapping[str, Mapping[str, Any]],
    reach: Mapping[str, Any] | None,
    defaults: Mapping[str, Any],
    host_cfg: Mapping[str, Any],
    controls: Mapping[str, Mapping[str, Any]] | None = None,
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
    details: dict[str, Any] = {}
    notes: dict[str, list[str]] = {}

    # -- TLB reach: geometry and latencies
    m = defaults["machine"]
    an = (reach or {}).get("analysis") or {}
    knees = an.get("knees", [])
    documented = tlb_geometry.lookup(host.vendor, host.family, host.model_number)
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
        v = max(1, round(_cycles(l1["cost_ns"], ghz)))
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
    if an.get("llc_bytes"):
        ways = m["memory"]["llc_ways"]
        size = fit.llc_round(an["llc_bytes"], ways)
        measured = "measured: " if an.get("llc_ns") is not None else ""
        entries.append(
            Entry(
                "machine.memory.llc_bytes",
                size,
                f"{measured}{an['llc_source']}; rounded down to {ways} ways x a power-of-two number of 64-byte sets",
            )
        )
        if an.get("llc_ns") is not None:
            entries.append(
                Entry(
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
            f"each a sum of the costs below (tlbsim.fit.OPERATION_COSTS). Defaults x {kf.scale:.2f} (this host's",
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
    from tlbsim import validate as val

    def simulate(costs: Mapping[str, float]) -> dict[str, float]:
        out = {}
        for name in (CLOSED_LOOP_REFERENCE, *CLOSED_LOOP_FIT):
            over = {**val.pattern_overrides(name, ops), **{f"costs.{k}": v for k, v in costs.items()}}
            r = tlbsim.run(preset, overrides=over)
            out[name] = float(val.pattern_result(r.stats)["ops_per_second"])
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
    bar = _Progress(len(patterns) + len(control_patterns) + math.ceil(coarse / 8) + 5 * cpus + 1, progress)
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
    finally:
        bar.close()
    load = meter.result(host.cpus_online)
    warning = load_warning(load)
    entries, details, notes = build_preset(host, shoot, reach, defaults, host_cfg, controls)
    elapsed = time.monotonic() - t0
    json_path = out.with_suffix(".json")
    header = [
        f"{out.name}: this host's machine and costs, measured by `tlbsim calibrate{' --quick' if quick else ''}`",
        f"host: {host.hostname}, {host.model} ({host.vendor}), Linux {host.kernel}, {host.cpus_online} CPUs"
        + (", a virtual machine" if host.hypervisor else ""),
        f"{_dt.datetime.now().astimezone().isoformat(timespec='seconds')}, tlbsim {tlbsim.__version__}, "
        f"{elapsed:.0f} s; the measurements are in {json_path.name}",
        "Each number says which measurement it came from; keys written as comments were not",
        "measured here and keep their defaults. Use it as a base config:",
        f'  tlbsim run {out.name} --set workload.kind=...     or, in a sweep spec, base = "{out.name}"',
    ]
    if warning:
        header.append(f"WARNING: {warning}.")
    text = render_toml(entries, header, notes)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
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
            if "error" in loop
            else f"Shootdown costs: the closed loop replaced the formulas' values ({loop['evaluations']} simulated points)."
        )
        out.write_text(render_toml(entries, header, notes))
        tlbsim.resolve(out)
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
        "fit": details,
        "preset": {e.key: e.value for e in entries if e.value is not None},
        "preset_comments": {e.key: e.comment for e in entries},
    }
    json_path.write_text(json.dumps(data, indent=1, default=_json_default) + "\n")
    return CalibrationResult(out, json_path, elapsed, entries, data)


def _json_default(obj: object) -> object:
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


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
