"""The host side of ``tlbsim calibrate`` and ``tlbsim validate``: build the native
benchmarks of ``bench/`` (gcc, the Makefile's flags) into ``target/native/`` when they are
missing or older than their sources, read the host (CPUs, caches, TLB row of
/proc/interrupts, hypervisor), run the benchmarks (the shootdown patterns, the TLB-reach
curve, FPR's munmap cases, mmap_lock threads vs processes) and reduce their JSON lines to
records. Anything this host cannot measure is recorded as "not measurable here" with the
reason.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import tlbsim
from tlbsim.host import fit, tlb_geometry
from tlbsim.progress import ProgressBar

BENCHMARKS = ("shootdown", "tlb_reach", "fpr_munmap", "munmap_lock", "wake_latency", "stream_bw")


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
    # /proc/cpuinfo "flags" that tlb_geometry.lookup reads (a generation's markers)
    cpu_flags: list[str] = field(default_factory=list)
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
        cpu_flags=[f for f in fields.get("flags", "").split() if f in tlb_geometry.FLAGS_READ],
        data_caches=sorted(data_caches, key=lambda c: c["level"]),
    )


# ---------------------------------------------------------------------------------------
# building and running the benchmarks


def bench_sources() -> Path:
    """bench/ of this checkout (``$TLBSIM_BENCH_DIR`` overrides)."""
    env = os.environ.get("TLBSIM_BENCH_DIR")
    src = Path(env) if env else Path(__file__).resolve().parents[3] / "bench"
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
            r = subprocess.run(cmd, check=False, capture_output=True, text=True)
            if r.returncode != 0:
                raise CalibrateError(f"building {name} failed ({' '.join(cmd)}):\n{r.stderr.strip()}")
        out[name] = exe
    return out


def _json_lines(cmd: Sequence[str], timeout: float) -> list[dict[str, Any]]:
    try:
        r = subprocess.run(list(cmd), check=False, capture_output=True, text=True, timeout=timeout)
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
        # Over all operations: the rate the throughput was measured at, which the cost fit uses.
        ipo = float(raw["ipis_per_op_median"])
        rec["shootdown_ipis_received_per_op"] = ipo
        rec["totals"] = {"shootdown_ipis_received": round(ipo * ops)}
        away = raw.get("sibling_away_fraction")
        if "ipis_per_op_sibling_present_median" in raw and away:
            # Per operation the spinning sibling was on its CPU for: what the kernel sends a
            # running sibling, the quantity the simulated pattern (a sibling always there) has.
            # An operation that found it away (another task on its CPU, or its vCPU preempted
            # by the host) gets no IPI and runs many times faster, so a sibling away 1% of the
            # time misses ~10% of the operations (bench/shootdown.c).
            rec["shootdown_ipis_received_per_op_sibling_present"] = float(raw["ipis_per_op_sibling_present_median"])
            rec["sibling_away_fraction"] = sorted(away)[len(away) // 2]
        present = rec.get("shootdown_ipis_received_per_op_sibling_present", ipo)
        if expected is not None:
            rec["expected_ipis_per_op"] = expected
            if present < 0.9 * expected:
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
    progress: ProgressBar | None = None,
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
    caches in ``caches`` (sysfs: level, size, ways) by :func:`tlbsim.host.fit.fit_tlb_knees`,
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
                reach_fit = fit.fit_reach(
                    list(curve), fit.median_filter(list(curve.values())), 1, growth=False, relative=True
                )
            except ValueError:
                continue
            knee = reach_fit.knees[0]
            prev = next((d for d in knees if d["level"] == name), None)
            entry = {
                "level": name,
                "entries": knee.entries,
                "cost_ns": prev["cost_ns"] if prev else None,
                "step_share": knee.step_share,
                "between": list(knee.between),
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
        llc_fit = fit.fit_llc([r["bytes"] for r in dense], [r["ns_per_access"] for r in dense])
        if llc_fit.why is None:
            assert llc_fit.llc_bytes is not None  # fit_llc gives a size whenever it gives no reason
            out.llc_bytes, out.llc_ns = llc_fit.llc_bytes, llc_fit.latency_ns
            out.llc_source = (
                f"tlb_reach --dense on 2 MiB pages: the last knee of ns per read over "
                f"{dense[0]['bytes'] >> 10} KiB..{dense[-1]['bytes'] >> 20} MiB; "
                f"{llc_fit.latency_ns:.1f} ns up to {llc_fit.llc_bytes >> 10} KiB, "
                f"{llc_fit.beyond_ns:.1f} ns beyond"
            )
        else:
            out.not_measurable["llc"] = f"not measured: {llc_fit.why}"
    else:
        why = (
            ("no transparent huge pages" + (f" (enabled = {thp})" if thp else ""))
            if not dense
            else f"only {len(dense)} dense footprints"
        )
        out.not_measurable["llc"] = f"not measured: {why}"
    return out


def measure_reach(
    exe: Path, plan: Plan, host: Host, control_limit: int, progress: ProgressBar | None = None
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
    documented = tlb_geometry.lookup(host.vendor, host.family, host.model_number, host.cpu_flags)
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
    threads: list[dict[str, Any]] = []
    for role in ("io", "compute", "mixed"):
        for rate in raw.get(f"{role}_ops_per_second_per_thread", []):
            threads.append(
                {"thread": len(threads), "role": role, "ops_completed": round(rate * secs), "ops_per_second": rate}
            )
    rec["per_thread"] = threads
    if "shootdown_ipis_per_second" in raw:
        rec["totals"] = {"shootdown_ipis_received": round(raw["shootdown_ipis_per_second"] * secs)}
    return rec


def measure_fpr(exe: Path, plan: Plan, cpus: int, progress: ProgressBar | None = None) -> list[dict[str, Any]]:
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


def measure_munmap_lock(exe: Path, plan: Plan, cpus: int, progress: ProgressBar | None = None) -> list[dict[str, Any]]:
    """bench/munmap_lock: 1 and 2 workers looping mmap -> write -> munmap, as threads of one
    process (one mmap_lock) and as processes (one each). Needs 2 CPUs; else no records."""
    rows: list[dict[str, Any]] = []
    if cpus >= 2:
        rows = _json_lines([str(exe), "--seconds", str(plan.fpr_seconds)], timeout=600)
    if progress:
        progress.step("munmap_lock threads/procs")
    return rows


def measure_wake_latency(exe: Path, plan: Plan, cpus: int, progress: ProgressBar | None = None) -> list[dict[str, Any]]:
    """bench/wake_latency: the futex wake-to-run latency of a thread whose CPU idled for
    2 to 500 µs, and the waker's time in FUTEX_WAKE. Needs 2 CPUs; else no records."""
    rows: list[dict[str, Any]] = []
    if cpus >= 2:
        samples = 100 if plan.name == "quick" else 400
        # From about where KVM's halt-polling ends to well past it: the exit grows with the
        # idle time (machine.idle.exit_curve).
        rows = _json_lines([str(exe), "--gaps", "2,5,10,20,50,100,200,500", "--samples", str(samples)], timeout=600)
    if progress:
        progress.step("wake latency")
    return rows


def idle_poll_ns() -> tuple[float, str]:
    """How long an idle CPU polls before it halts, from the cpuidle driver: haltpoll's
    ``guest_halt_poll_ns`` on a KVM guest; otherwise 0 (the poll state is chosen only for
    idle periods shorter than C1's target residency, a few µs)."""
    driver = Path("/sys/devices/system/cpu/cpuidle/current_driver")
    try:
        name = driver.read_text().strip()
    except OSError:
        return 0.0, "no cpuidle driver readable: assumed to halt at once"
    if name == "haltpoll":
        try:
            ns = float(Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns").read_text())
            return ns, f"cpuidle driver haltpoll, guest_halt_poll_ns = {ns:.0f}"
        except (OSError, ValueError):
            return 0.0, "cpuidle driver haltpoll, guest_halt_poll_ns unreadable: 0 assumed"
    return 0.0, f"cpuidle driver {name}: it polls only below C1's target residency, taken as 0"


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
