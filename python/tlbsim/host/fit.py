"""The fits of ``tlbsim calibrate``: pure functions from measurements to machine numbers.

Nothing here runs a benchmark or reads a file, so every function can be tested on
synthetic measurements with known answers (``python/tests/test_calibrate.py``).

* **TLB reach.** A chase over P pages misses a TLB of E entries on a fraction ``m(P)`` of
  its reads that is 0 for P <= E and grows beyond: ``1 - E/P`` for independent random
  reads (or random replacement), 1 at once for a cyclic chase through an LRU TLB. The
  measured curve (ns per access, or a perf counter per access) is fitted as
  ``base + sum_k (s_k * [P > E_k] + h_k * (1 - E_k/P)+) + g * ln(P/E_last)+``: per knee a
  step and a hinge part (non-negative; their sum is the cost per miss), and a slow growth
  past the last knee (page-table lines leaving the data caches). The knees E_k are found
  by a search over candidate sizes, the amplitudes by non-negative least squares.
* **Kernel costs.** Each no-shootdown pattern's time per operation is a sum of ``[costs]``
  entries (``OPERATION_COSTS``: how many syscalls, faults, zeroed pages ... one operation
  is in the simulator's OS model). The patterns fix only some combinations of the costs;
  the fit moves the defaults (scaled to the measured speed) as little as possible, in
  relative terms, to match every measured time (a minimum-norm least-squares solution),
  and reports which costs the measurements determine alone.
* **Shootdown costs.** The initiator's cost per IPI from the time per operation with a
  spinning sibling minus that with a sleeping (or no) sibling, divided by the IPIs per
  operation; the receiver's cost per IPI from the sibling's lost spin rate.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# ---------------------------------------------------------------------------------------
# numerics


def nnls(a: np.ndarray, b: np.ndarray, free: Sequence[int] = (), max_iter: int = 200) -> np.ndarray:
    """min ||a x - b|| with x >= 0 except the columns in ``free`` (Lawson-Hanson active set;
    a free column is split into a positive and a negative part)."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    free = list(free)
    if free:
        a = np.hstack([a, -a[:, free]])
    _, n = a.shape
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    w = a.T @ (b - a @ x)
    tol = 1e-10 * max(1.0, float(np.abs(a).max(initial=0.0))) * max(1.0, float(np.abs(b).max(initial=0.0)))
    for _ in range(max_iter):
        if passive.all() or (w[~passive] <= tol).all():
            break
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            alpha = float(np.min(x[neg] / (x[neg] - z[neg])))
            x = x + alpha * (z - x)
            passive &= x > 1e-12
            x[~passive] = 0.0
        w = a.T @ (b - a @ x)
    if free:
        k = len(free)
        base = x[: n - k].copy()
        base[free] -= x[n - k :]
        return base
    return x


# ---------------------------------------------------------------------------------------
# TLB reach


def miss_rate(pages: np.ndarray | Sequence[float], entries: float) -> np.ndarray:
    """Misses per read of random reads over ``pages`` pages with a fully associative
    ``entries``-entry TLB: ``1 - E/P`` beyond the reach, 0 within it."""
    p = np.asarray(pages, dtype=float)
    return np.clip(1.0 - entries / p, 0.0, None)


@dataclass
class Knee:
    """One TLB level seen in a reach curve."""

    entries: float  # the knee: the largest array (in pages) the level still holds
    cost: float  # added per access once every access misses this level (curve's unit)
    step_share: float  # share of that cost appearing at once past the knee (0 = 1-E/P)
    between: tuple[float, float] = (0.0, 0.0)  # the measured sizes on either side


@dataclass
class ReachFit:
    base: float  # the curve's level below the first knee
    knees: list[Knee]
    growth: float  # added per e-fold of pages past the last knee
    rms: float  # residual root mean square
    points: int

    def predict(self, pages: np.ndarray | Sequence[float]) -> np.ndarray:
        p = np.asarray(pages, dtype=float)
        y = np.full(p.shape, self.base)
        for k in self.knees:
            y += k.cost * (k.step_share * (p > k.entries) + (1 - k.step_share) * miss_rate(p, k.entries))
        if self.knees:
            y += self.growth * np.log(np.maximum(p / self.knees[-1].entries, 1.0))
        return y


def _columns(p: np.ndarray, knees: Sequence[float], growth: bool) -> np.ndarray:
    cols = [np.ones_like(p)]
    for e in knees:
        cols += [(p > e).astype(float), miss_rate(p, e)]
    if growth and knees:
        cols.append(np.log(np.maximum(p / knees[-1], 1.0)))
    return np.column_stack(cols)


def _solve(
    p: np.ndarray, y: np.ndarray, knees: Sequence[float], growth: bool, w: np.ndarray | None = None
) -> tuple[float, np.ndarray]:
    a = _columns(p, knees, growth)
    if w is not None:
        a, y = a * w[:, None], y * w
    x = np.linalg.lstsq(a, y, rcond=None)[0]
    if (x[1:] < 0).any():  # the unconstrained fit is usually non-negative already
        x = nnls(a, y, free=[0])
    r = a @ x - y
    return float(r @ r), x


def median_filter(values: Sequence[float] | np.ndarray, width: int = 3) -> np.ndarray:
    """Running median over ``width`` neighbouring sizes: removes a single disturbed
    measurement (another program ran during it) and keeps a step where it is."""
    y = np.asarray(values, dtype=float)
    h = width // 2
    return np.array([np.median(y[max(0, i - h) : i + h + 1]) for i in range(len(y))])


def _steps(x: np.ndarray, n: int) -> float:
    return float(sum(x[1 + 2 * k] for k in range(n)))


def _candidates(p: np.ndarray, per_gap: int) -> np.ndarray:
    """Candidate knees: the measured sizes and ``per_gap`` geometric steps between
    neighbours (a knee between two measured sizes)."""
    u = np.unique(p)
    out = [u]
    for lo, hi in itertools.pairwise(u):
        out.append(lo * (hi / lo) ** (np.arange(1, per_gap + 1) / (per_gap + 1)))
    return np.unique(np.concatenate(out))


def fit_reach(
    pages: Sequence[float],
    values: Sequence[float] | np.ndarray,
    n_knees: int = 2,
    *,
    growth: bool = True,
    min_ratio: float = 2.0,
    min_points_between: int = 1,
    min_points_outside: int = 3,
    relative: bool = False,
) -> ReachFit:
    """Fit ``n_knees`` (1 or 2) knees to a reach curve (see the module docstring).

    Knees are searched among the measured sizes and sizes between them; two knees must be
    at least ``min_ratio`` apart with ``min_points_between`` measured sizes between them,
    and ``min_points_outside`` measured sizes below the first and above the last knee (a
    level is only known where it was measured).
    The search is on a coarse grid first, then each knee on a fine grid around its best
    coarse value with the other knee held.

    ``relative``: weigh each residual by ``1 / (|y| + 5% of max |y|)``, so that a small
    first knee (an L2 TLB hit, a few ns) counts against the noise of the large values
    past the second (walks, tens of ns).
    """
    p = np.asarray(pages, dtype=float)
    y = np.asarray(values, dtype=float)
    order = np.argsort(p)
    p, y = p[order], y[order]
    w = 1.0 / (np.abs(y) + 0.05 * max(float(np.abs(y).max(initial=0.0)), 1e-300)) if relative else None
    if n_knees not in (1, 2):
        raise ValueError("n_knees must be 1 or 2")
    if len(p) < 3 * n_knees + 1:
        raise ValueError(f"need at least {3 * n_knees + 1} points to fit {n_knees} knee(s), got {len(p)}")

    # A knee at or above the largest size cannot be seen; at or below the smallest, neither.
    def outside_ok(ks: Sequence[float]) -> bool:
        return bool((p <= ks[0]).sum() >= min_points_outside and (p > ks[-1]).sum() >= min_points_outside)

    coarse = p[:-1]
    best: tuple[float, tuple[float, ...]] = (math.inf, ())
    if n_knees == 1:
        for e in coarse:
            if not outside_ok([e]):
                continue
            sse, _ = _solve(p, y, [e], growth, w)
            if sse < best[0]:
                best = (sse, (e,))
    else:
        for i, e1 in enumerate(coarse):
            for e2 in coarse[i + 1 :]:
                if e2 < min_ratio * e1 or ((p > e1) & (p <= e2)).sum() < min_points_between:
                    continue
                if not outside_ok([e1, e2]):
                    continue
                sse, _ = _solve(p, y, [e1, e2], growth, w)
                if sse < best[0]:
                    best = (sse, (e1, e2))
    if not best[1]:
        raise ValueError(
            f"no {'pair of knees' if n_knees == 2 else 'knee'} fits: the sizes do not span "
            f"{n_knees + 1} levels with {min_points_outside} sizes beyond the outer knees"
        )
    knees = list(best[1])
    fine = _candidates(p, 24)
    # Between two measured sizes a step and a hinge can trade off: several knees fit
    # (almost) equally well. Among fits within `tie` of the best, keep the one with the
    # least step: the 1 - E/P shape, which places the knee exactly when the data has it.
    yw = y if w is None else y * w
    tie = 1e-9 * float(yw @ yw) + 1e-12
    # coordinate descent: refining one knee can move the other's best value
    for k in [i for _ in range(3) for i in range(len(knees))]:
        # from two measured sizes below the coarse knee to the first one above it
        below, above = p[p < knees[k]], p[p > knees[k]]
        lo = below[-2] if below.size >= 2 else p[0]
        hi = above[0] if above.size else p[-1]
        trials = []
        for e in fine[(fine >= lo) & (fine < hi) & (fine < p[-1])]:
            trial = knees.copy()
            trial[k] = float(e)
            if (len(trial) == 2 and trial[1] < min_ratio * trial[0]) or not outside_ok(trial):
                continue
            sse, x = _solve(p, y, trial, growth, w)
            trials.append((sse, _steps(x, len(trial)), tuple(trial)))
        if trials:
            low = min(t[0] for t in trials)
            if low < best[0] + tie:
                pick = min((t for t in trials if t[0] <= low + tie), key=lambda t: t[1])
                best = (pick[0], pick[2])
        knees = list(best[1])
    _, x = _solve(p, y, knees, growth, w)
    r = _columns(p, knees, growth) @ x - y
    sse = float(r @ r)
    out = []
    for k, e in enumerate(knees):
        s, h = float(x[1 + 2 * k]), float(x[2 + 2 * k])
        lo = p[p <= e].max(initial=p[0])
        hi = p[p > e].min(initial=p[-1])
        share = s / (s + h) if s + h > 0 else 0.0
        out.append(Knee(entries=float(e), cost=s + h, step_share=share, between=(float(lo), float(hi))))
    g = float(x[1 + 2 * len(knees)]) if growth else 0.0
    return ReachFit(base=float(x[0]), knees=out, growth=g, rms=math.sqrt(sse / len(p)), points=len(p))


def crossing_point(
    pages: Sequence[float], values: Sequence[float], f: ReachFit, k: int, fraction: float = 0.5
) -> float | None:
    """Where the curve has risen by ``fraction`` of knee ``k``'s jump above the level before
    it (interpolated in log pages), searching from the knee to the next one; None if it
    never gets there. The jump is the measured plateau before the next knee (the median
    of the last three sizes below it), or for the last knee the fitted cost."""
    p = np.asarray(pages, dtype=float)
    y = np.asarray(values, dtype=float)
    order = np.argsort(p)
    p, y = p[order], y[order]
    knee = f.knees[k]
    before = f.base + sum(j.cost for j in f.knees[:k])
    stop = f.knees[k + 1].entries if k + 1 < len(f.knees) else p[-1]
    plateau = y[(p > knee.entries) & (p <= stop)][-3:]
    jump = float(np.median(plateau)) - before if k + 1 < len(f.knees) and plateau.size else knee.cost
    target = before + fraction * jump
    lo = p[p <= knee.entries]
    if not lo.size:
        return None
    i = int(np.searchsorted(p, lo[-1]))
    while i + 1 < len(p) and p[i + 1] <= stop:
        if y[i + 1] >= target:
            if y[i] >= target:
                return float(p[i])
            t = (target - y[i]) / (y[i + 1] - y[i])
            return float(math.exp(math.log(p[i]) + t * (math.log(p[i + 1]) - math.log(p[i]))))
        i += 1
    return None


def knee_size(
    pages: Sequence[float], values: Sequence[float], f: ReachFit, k: int, ramp: float = 2.2
) -> tuple[float, str]:
    """The size of the TLB behind knee ``k``, and how it was read off the curve.

    Random reads through a fully associative TLB of E entries miss at ``1 - E/P``: a
    quarter of the cost arrives at 1.33E, half at 2E, three quarters at 4E, and the fitted
    knee is E. A cyclic chase
    (the benchmark's) through a set-associative TLB misses over a short range around E
    instead: early in its fuller sets, late in its emptier ones; there E is where half the
    cost has arrived. The quartiles tell them apart (1 - E/P: the third at 3 times the
    first): within ``ramp`` times, the half point; otherwise (or if the curve never gets
    that far) the fitted knee."""
    onset = (f.knees[k].entries, "the fitted onset (misses growing as 1 - E/P)")
    if k == len(f.knees) - 1 and f.knees[k].step_share < 0.5:
        # past the last knee the curve keeps creeping up (page-table lines leaving the
        # caches): no plateau to take quartiles of; the fit saw a 1 - E/P rise
        return onset
    q1 = crossing_point(pages, values, f, k, 0.25)
    half = crossing_point(pages, values, f, k, 0.5)
    q3 = crossing_point(pages, values, f, k, 0.75)
    if q1 is not None and half is not None and q3 is not None and q3 < ramp * q1:
        return half, "half of the misses arrived (within a short range: a set-associative TLB or LRU)"
    return onset


def knee_sweep(
    knee: float, *, below: float = 0.75, above: float = 1.35, step: float = 0.03, minimum: int = 2
) -> list[int]:
    """Array sizes (pages) to measure around a knee: from ``below`` to ``above`` times it,
    in relative steps of ``step``, always including the knee itself."""
    sizes = {max(minimum, round(knee))}
    x = knee * below
    while x <= knee * above:
        sizes.add(max(minimum, round(x)))
        x *= 1 + step
    return sorted(sizes)


def geometric_sizes(lo: int, hi: int, per_doubling: int) -> list[int]:
    """Sizes from ``lo`` to ``hi`` pages, ``per_doubling`` geometric steps per doubling."""
    out: list[int] = []
    k = 0
    while True:
        v = round(lo * 2 ** (k / per_doubling))
        if v > hi:
            break
        if not out or v > out[-1]:
            out.append(v)
        k += 1
    return out


_NICE = sorted({m << s for m in (1, 3) for s in range(24)})


def snap_entries(measured: float, tolerance: float = 0.12) -> tuple[int, bool]:
    """A TLB's entry count from its measured knee: the nearest ``2^k`` or ``3 * 2^k`` (the
    sizes a power-of-two set count with 1, 2, 3, 4, 6, 8, 12, 16 ... ways gives) when
    within ``tolerance`` of it, else the measurement rounded. Returns (entries, snapped)."""
    nearest = min(_NICE, key=lambda n: abs(math.log(n / measured)))
    if abs(nearest - measured) <= tolerance * nearest:
        return nearest, True
    return max(1, round(measured)), False


def fit_geometry(entries: int, ways: int) -> tuple[int, int]:
    """A simulable geometry (power-of-two set count) keeping ``entries``: the same rule as
    ``tlbsim-core``'s ``config::host::fit_geometry``."""
    ways = max(1, min(ways, entries))
    sets = entries // ways
    if entries % ways == 0 and sets & (sets - 1) == 0:
        return entries, ways
    sets = 1 << (max(1, entries // ways).bit_length() - 1)
    ways = -(-entries // sets)
    return sets * ways, ways


# ---------------------------------------------------------------------------------------
# kernel operation costs

# How many of each [costs] entry one operation of a pattern costs in the OS model (the
# pattern's operation without any shootdown: run with a sleeping sibling or alone).
# Sources: the operations of bench/shootdown.c, as docs/LINUX_BASELINE.md describes them.
COW_ROUND = 4096  # bench/shootdown.c COW_PAGES: a fork and a fresh region every 4096 ops
OPERATION_COSTS: dict[str, dict[str, float]] = {
    # mmap (syscall + mmap), write fault (page_fault + zero_page), munmap (syscall + vma_op
    # + per_page)
    "munmap-4k": {"syscall": 2, "mmap": 1, "page_fault": 1, "zero_page": 1, "vma_op": 1, "per_page": 1},
    "munmap-64": {"syscall": 2, "mmap": 1, "page_fault": 64, "zero_page": 64, "vma_op": 1, "per_page": 64},
    # two mprotect calls, each changing one PTE; the write after RO->RW does not fault
    # (the PTE is made writable again for an exclusive anonymous page)
    "mprotect-toggle": {"syscall": 2, "vma_op": 2, "per_page": 2},
    # write fault, then madvise(MADV_DONTNEED) of the page
    "dontneed": {"syscall": 1, "vma_op": 1, "per_page": 1, "page_fault": 1, "zero_page": 1},
    # the COW fault (page_fault + copy_page); per 4096 operations a new region (mmap, 4096
    # zero-fill faults), a fork (fork + fork_per_page each), and the end of the last one
    # (munmap of 4096 pages here, and the child's exit zapping its 4096 PTEs on this CPU)
    "cow": {
        "page_fault": 1 + 1,
        "copy_page": 1,
        "zero_page": 1,
        "per_page": 2,
        "fork_per_page": 1,
        "fork": 1 / COW_ROUND,
        "syscall": 3 / COW_ROUND,
        "mmap": 1 / COW_ROUND,
        "vma_op": 1 / COW_ROUND,
    },
    # mmap of a page-cache page (no zeroing), read fault, munmap
    "file-read": {"syscall": 2, "mmap": 1, "page_fault": 1, "vma_op": 1, "per_page": 1},
}

# Shootdown-free patterns and the operation they measure.
BASELINES: dict[str, str] = {
    "munmap-4k-alone": "munmap-4k",
    "munmap-4k-sleep": "munmap-4k",
    "munmap-64-sleep": "munmap-64",
    "mprotect-toggle-sleep": "mprotect-toggle",
    "cow-sleep": "cow",
    "file-read-sleep": "file-read",
}

# Patterns with a spinning sibling and their no-shootdown counterparts.
SHOOTDOWN_PAIRS: dict[str, tuple[str, ...]] = {
    "munmap-4k": ("munmap-4k-sleep", "munmap-4k-alone"),
    "munmap-64": ("munmap-64-sleep",),
    "mprotect-toggle": ("mprotect-toggle-sleep",),
    "cow": ("cow-sleep",),
    "file-read": ("file-read-sleep",),
}

# Patterns whose IPIs flush single pages (INVLPG); munmap-64 flushes everything (64 pages
# exceed the flush ceiling of 33).
SINGLE_PAGE_FLUSH = ("munmap-4k", "mprotect-toggle", "dontneed", "cow", "file-read")


def operation_of(pattern: str) -> str:
    """The operation a pattern repeats (``munmap-4k-sleep`` -> ``munmap-4k``)."""
    if pattern == "two-processes":
        return "munmap-4k"
    for suffix in ("-sleep", "-alone"):
        if pattern.endswith(suffix):
            return pattern[: -len(suffix)]
    return pattern


def predict_op_cycles(operation: str, costs: Mapping[str, float]) -> float:
    """Cycles one operation costs in the OS model, without shootdowns."""
    return float(sum(n * costs[c] for c, n in OPERATION_COSTS[operation].items()))


@dataclass
class CostFit:
    costs: dict[str, float]  # fitted cycles per cost
    scale: float  # measured / default-model time, median over the patterns
    determined: dict[str, bool]  # the measurements fix this cost alone
    at_floor: list[str]  # held at the floor: the unconstrained fit wanted less
    used: dict[str, list[str]]  # cost -> patterns whose operation includes it
    residuals: dict[str, float]  # pattern -> (model - measured) / measured
    patterns: list[str] = field(default_factory=list)


def fit_kernel_costs(
    cycles_per_op: Mapping[str, float],
    defaults: Mapping[str, float],
    *,
    floor_fraction: float = 0.1,
) -> CostFit:
    """Fit the kernel-operation costs to the no-shootdown patterns' cycles per operation.

    ``cycles_per_op``: pattern (a key of ``BASELINES``) -> measured cycles per operation.
    The unknowns are the costs the patterns' operations use. With ``d`` the defaults and
    ``s`` the median ratio of measured to default-model time, the costs are
    ``x = s*d*(1+u)`` with ``u`` the minimum-norm solution of the relative equations
    ``(A x)_r / t_r = 1``: costs the measurements determine come out exactly (with
    consistent data), the rest keep the defaults' proportions. A cost pushed below
    ``floor_fraction * s * d`` is held there and the rest refitted.
    """
    rows = [(p, BASELINES[p]) for p in cycles_per_op if p in BASELINES and cycles_per_op[p] > 0]
    if not rows:
        raise ValueError("no measured no-shootdown pattern to fit the kernel costs to")
    names = sorted({c for _, op in rows for c in OPERATION_COSTS[op]})
    d = np.array([float(defaults[c]) for c in names])
    a = np.array([[OPERATION_COSTS[op].get(c, 0.0) for c in names] for _, op in rows])
    t = np.array([float(cycles_per_op[p]) for p, _ in rows])
    scale = float(np.median(t / (a @ d)))
    prior = scale * d
    w = a / t[:, None]  # relative equations: (w x) = 1
    held: dict[int, float] = {}
    for _ in range(len(names)):
        free = [i for i in range(len(names)) if i not in held]
        fixed = np.zeros(len(names))
        for i, v in held.items():
            fixed[i] = v
        rhs = 1.0 - w @ fixed - w[:, free] @ prior[free]
        m = w[:, free] * prior[free]
        u = np.linalg.pinv(m) @ rhs
        x = fixed.copy()
        x[free] = prior[free] * (1 + u)
        low = [i for i in free if x[i] < floor_fraction * prior[i] - 1e-9]
        if not low:
            break
        # hold the one furthest below its floor, then refit
        i = min(low, key=lambda j: x[j] / prior[j])
        held[i] = floor_fraction * prior[i]
    free = [i for i in range(len(names)) if i not in held]
    m = w[:, free]
    proj = np.linalg.pinv(m) @ m if free else np.zeros((0, 0))
    determined = {}
    for k, i in enumerate(free):
        e = np.zeros(len(free))
        e[k] = 1.0
        determined[names[i]] = bool(np.linalg.norm(proj @ e - e) < 1e-6)
    for i in held:
        determined[names[i]] = False
    model = a @ x
    return CostFit(
        costs={c: float(v) for c, v in zip(names, x)},
        scale=scale,
        determined=determined,
        at_floor=[names[i] for i in sorted(held)],
        used={c: [p for p, op in rows if OPERATION_COSTS[op].get(c, 0)] for c in names},
        residuals={p: float((model[r] - t[r]) / t[r]) for r, (p, _) in enumerate(rows)},
        patterns=[p for p, _ in rows],
    )


@dataclass
class ShootdownFit:
    initiator_cycles: float | None  # per IPI: time the sender loses
    receiver_cycles: float | None  # per IPI: time the receiving CPU loses
    initiator_by_pattern: dict[str, float]  # the single-page pairs the median is over
    receiver_by_pattern: dict[str, float]  # the single-page patterns the median is over
    why_not: dict[str, str]  # quantity -> why it could not be fitted
    receiver_full_flush: dict[str, float] = field(default_factory=dict)  # munmap-64, reported only


def _median(xs: Iterable[float]) -> float | None:
    v = sorted(xs)
    if not v:
        return None
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def fit_shootdown_costs(
    measured: Mapping[str, Mapping[str, Any]],
    frequency_ghz: float,
    *,
    min_ipis_per_op: float = 0.5,
) -> ShootdownFit:
    """Initiator and receiver cycles per shootdown IPI.

    ``measured``: pattern -> {"ops_per_second": float, "ipis_per_op": float | None,
    "sibling_cpu_lost": float | None (fraction of the spinning sibling's spin rate lost
    while the operations ran)}. Initiator: ``(1/ops_s(spin) - 1/ops_s(base)) / ipis``
    for each pair of ``SHOOTDOWN_PAIRS`` (every base of a pair), median over the pairs
    flushing single pages. Receiver: ``lost / (ipis * ops_s(spin))``, median over the
    single-page patterns. Patterns with fewer than ``min_ipis_per_op`` IPIs per operation
    (a busy KVM host flushes preempted vCPUs without an IPI) are left out.
    """
    init: dict[str, float] = {}
    recv: dict[str, float] = {}
    why: dict[str, str] = {}
    for spin, bases in SHOOTDOWN_PAIRS.items():
        s = measured.get(spin)
        if not s or not s.get("ops_per_second"):
            continue
        ipis = s.get("ipis_per_op")
        if ipis is None or ipis < min_ipis_per_op:
            continue
        for base in bases:
            b = measured.get(base)
            if b and b.get("ops_per_second"):
                dt = 1 / s["ops_per_second"] - 1 / b["ops_per_second"]
                init[f"{spin} - {base}"] = dt / ipis * frequency_ghz * 1e9
    for spin in (*SINGLE_PAGE_FLUSH, "munmap-64"):
        s = measured.get(spin)
        if not s or not s.get("ops_per_second") or s.get("sibling_cpu_lost") is None:
            continue
        ipis = s.get("ipis_per_op")
        if ipis is None or ipis < min_ipis_per_op:
            continue
        recv[spin] = s["sibling_cpu_lost"] / (ipis * s["ops_per_second"]) * frequency_ghz * 1e9
    init = {k: v for k, v in init.items() if k.split(" - ")[0] in SINGLE_PAGE_FLUSH}
    full = {k: v for k, v in recv.items() if k not in SINGLE_PAGE_FLUSH}
    recv = {k: v for k, v in recv.items() if k in SINGLE_PAGE_FLUSH}
    i = _median(init.values())
    r = _median(recv.values())
    if i is None:
        why["initiator"] = f"no pattern pair with a measured IPI count of at least {min_ipis_per_op} per operation"
    if r is None:
        why["receiver"] = "no spinning-sibling pattern with its spin rate and IPI count measured"
    return ShootdownFit(i, r, init, recv, why, full)


def split_shootdown_costs(
    initiator: float | None,
    receiver: float | None,
    defaults: Mapping[str, float],
    *,
    floor_fraction: float = 0.1,
) -> dict[str, tuple[float, str]]:
    """The [costs] entries the two per-IPI figures fix, each with how it was derived.

    In the OS model a target pays ``interrupt + invlpg + ack`` per single-page shootdown,
    and the initiator pays ``ipi_send + ipi_delivery_same_socket`` and then waits for that
    handler. So ``interrupt = receiver - invlpg - ack`` (those two at their defaults:
    not separable here), and ``ipi_send + ipi_delivery_same_socket = initiator - receiver``,
    split in the defaults' ratio. A result below ``floor_fraction`` of its default is held
    there and says so.
    """
    out: dict[str, tuple[float, str]] = {}
    if receiver is not None:
        v = receiver - defaults["invlpg"] - defaults["ack"]
        floor = floor_fraction * defaults["interrupt"]
        how = "receiver's cost per IPI minus invlpg and ack (defaults)"
        if v < floor:
            v, how = floor, how + f"; held at {floor_fraction:g}x the default (the fit gave {v:.0f})"
        out["interrupt"] = (v, how)
    if initiator is not None and receiver is not None:
        total = initiator - receiver
        d_send, d_del = defaults["ipi_send"], defaults["ipi_delivery_same_socket"]
        floor = floor_fraction * (d_send + d_del)
        how = "initiator's minus receiver's cost per IPI, split in the defaults' ratio"
        if total < floor:
            how += f"; held at {floor_fraction:g}x the defaults (the fit gave {total:.0f})"
            total = floor
        out["ipi_send"] = (total * d_send / (d_send + d_del), how)
        out["ipi_delivery_same_socket"] = (total * d_del / (d_send + d_del), how)
        ratio = defaults["ipi_delivery_cross_socket"] / d_del
        out["ipi_delivery_cross_socket"] = (
            out["ipi_delivery_same_socket"][0] * ratio,
            f"not measured (one socket): {ratio:g}x the same-socket delivery, the defaults' ratio",
        )
    return out


def lost_fraction(idle: Sequence[float], busy: Sequence[float]) -> float | None:
    """Median over repetitions of ``1 - busy/idle`` (spin rates), clipped to [0, 1]."""
    fr = [min(1.0, max(0.0, 1 - b / i)) for i, b in zip(idle, busy) if i > 0]
    return _median(fr)


# ---------------------------------------------------------------------------------------
# LLC from a cache-line latency curve (issue 10, item 3)


@dataclass
class LlcFit:
    """The last cache knee of a line-chase latency curve, or why there is none.

    ``llc_bytes``/``latency_ns`` are None when not measured; ``why`` then says why."""

    llc_bytes: int | None
    latency_ns: float | None
    beyond_ns: float | None = None
    why: str | None = None


def fit_llc(
    footprints: Sequence[float],
    ns: Sequence[float],
    *,
    jump: float = 1.6,
    flat: float = 0.25,
    min_plateau: int = 2,
    min_memory_ns: float = 40.0,
) -> LlcFit:
    """The LLC from a pointer chase over random cyclic permutations of 64-byte lines.

    Latency is flat inside a cache level and rises over roughly one doubling past its
    size. The LLC is the last level: scanning the (median-smoothed) curve from the
    largest footprint down, the memory plateau is the run of points within ``flat``
    (relative) of the largest footprint's latency; the point before it must be at most
    ``1/jump`` of it (a knee of at least ``jump``x, memory vs LLC is 3-10x on real
    machines), and the points below it down to the previous rise form the LLC plateau
    (at least ``min_plateau`` points within ``flat`` of each other). The LLC size is
    the largest footprint still on that plateau (rounded down to a power of two by
    the caller if wanted). Anything else is "not measured" with the reason."""
    p = np.asarray(footprints, dtype=float)
    y = np.asarray(ns, dtype=float)
    if p.shape != y.shape or p.ndim != 1:
        return LlcFit(None, None, why="footprints and latencies differ in length")
    if len(p) < 2 * min_plateau + 1:
        return LlcFit(None, None, why=f"only {len(p)} points (need {2 * min_plateau + 1})")
    if not (np.isfinite(y).all() and (y > 0).all()) or not (np.diff(p) > 0).all():
        return LlcFit(None, None, why="latencies must be positive and footprints increasing")
    # the memory plateau from the raw points (the median filter flattens the curve's end)
    if abs(y[-1] - y[-2]) > flat * y[-1]:
        return LlcFit(
            None,
            None,
            why="latency still rising at the largest footprint (no memory plateau: measure larger footprints)",
        )
    s = median_filter(y, 3)
    top = s[-1]
    i = len(s) - 1
    while i > 0 and abs(s[i - 1] - top) <= flat * top:
        i -= 1
    # s[i:] is the memory plateau (or, if it reaches the start, no knee at all)
    if i == 0:
        return LlcFit(
            None,
            None,
            why="no rise in latency over the measured footprints (all within %.0f%% of the largest)" % (100 * flat),
        )
    if len(s) - i < min_plateau:
        return LlcFit(
            None,
            None,
            why="latency still rising at the largest footprint (no memory plateau: measure larger footprints)",
        )
    # walk down through the rise to the LLC plateau's top
    j = i - 1
    while j > 0 and s[j - 1] < s[j] and (s[j] - s[j - 1]) > flat * s[j - 1]:
        j -= 1
    k = j
    while k > 0 and abs(s[k - 1] - s[j]) <= flat * s[j]:
        k -= 1
    plateau = s[k : j + 1]
    if len(plateau) < min_plateau:
        return LlcFit(
            None, None, why=f"no flat stretch before the last rise (the LLC plateau has {len(plateau)} point(s))"
        )
    lat = float(np.median(y[k : j + 1]))
    # DRAM load-to-use latency is >= ~50 ns on current x86 servers and desktops (e.g.
    # Intel MLC idle latencies 70-120 ns); a top plateau below 40 ns is a cache level,
    # i.e. the footprints stopped short of memory and the knee found would be L2's.
    if top < min_memory_ns:
        return LlcFit(
            None,
            None,
            why=f"largest footprints at {top:.1f} ns < {min_memory_ns:.0f} ns: still in a "
            "cache, not memory (measure larger footprints)",
        )
    if top < jump * lat:
        return LlcFit(None, None, why=f"last rise {top / lat:.2f}x < {jump:.2f}x: not a cache-to-memory knee")
    return LlcFit(int(p[j]), lat, float(np.median(y[i:])))


def llc_round(measured: float, ways: int, line: int = 64) -> int:
    """A cache size near ``measured`` whose sets (size / line / ways) are a power of two:
    the largest such size not above ``measured`` (the chase's knee is the largest
    footprint that still fits, so the cache is at least that; rounding down keeps a
    simulated LLC no larger than the one measured). Raises ValueError on bad input."""
    if ways < 1 or line < 1 or not math.isfinite(measured) or measured < line * ways:
        raise ValueError(f"llc_round: need measured >= line*ways > 0, got {measured}, {ways}, {line}")
    sets = 1 << math.floor(math.log2(measured / (line * ways)))
    return sets * line * ways


# ---------------------------------------------------------------------------------------
# TLB knees from the raw reach curve, fitted jointly with the data caches (issue 18)


@dataclass(frozen=True)
class DataCache:
    """A data-cache level the reach chase's lines pass through (sysfs cpu0/cache)."""

    level: int
    size_bytes: int
    ways: int
    line: int = 64

    @property
    def sets(self) -> int:
        return max(1, self.size_bytes // (self.line * max(1, self.ways)))


def cache_miss_fraction(pages: np.ndarray | Sequence[float], cache: DataCache) -> np.ndarray:
    """Misses per read of a cyclic chase over ``pages`` lines (one per page, on a line
    chosen by a hash, so the lines land in random sets) through an LRU cache of S sets x
    W ways: a set holding more than W of the chain's lines misses on all of them, so the
    fraction missed is P(X >= W) for X ~ Poisson(P/S) (the size-biased count of the set
    a random line lands in). Rises from well below the capacity S*W, unlike 1 - C/P."""
    p = np.asarray(pages, dtype=float)
    return _poisson_tail(p / cache.sets, max(1, cache.ways))


def _poisson_tail(lam: np.ndarray, w: int) -> np.ndarray:
    """P(Poisson(lam) >= w) = 1 - sum_{j<w} e^-lam lam^j / j!"""
    term = np.exp(-lam)
    below = term.copy()
    for j in range(1, w):
        term = term * lam / j
        below = below + term
    return np.clip(1.0 - below, 0.0, 1.0)


@dataclass
class TlbKnee:
    """One TLB level found in the raw reach curve, with how sure the fit is of it."""

    level: str  # "l1" or "l2"
    entries: float  # the fitted capacity E (where the fitted misses begin)
    cost: float  # per access once every access misses this level (curve's unit)
    step_share: float
    interval: tuple[float, float]  # knee positions that fit within the noise (4 sigma^2)
    significance: float  # (SSE without this knee - SSE) / sigma^2
    confidence: str  # "high", "medium" or "low"
    estimator: str
    between: tuple[float, float] = (0.0, 0.0)


@dataclass
class TlbCurveFit:
    base: float
    knees: list[TlbKnee]
    caches: list[
        dict[str, float | str]
    ]  # {"level", "capacity_pages", "cost"} per data-cache term, then the other knees
    rms: float
    sigma: float  # residual scale of the (weighted) fit
    points: int


# Per knee, the shapes a TLB of capacity E gives a cyclic chase: all misses at once past E
# (LRU, fully associative or sets filled evenly), 1 - E/P (random replacement), and the
# ramp of sets filled at random (a hashed index): a W-way set overflows from well below E,
# half the pages missing near E (``cache_miss_fraction`` with S = E/W sets), for W = 8, 16.
KNEE_SHAPES = 4
_RAMP_WAYS = (8, 16)


def _knee_columns(p: np.ndarray, e: float) -> list[np.ndarray]:
    # the ramps: P / (E / W) pages per set
    return [(p > e).astype(float), miss_rate(p, e)] + [_poisson_tail(p * ways / e, ways) for ways in _RAMP_WAYS]


def _tlb_columns(p: np.ndarray, knees: Sequence[float], cache_cols: np.ndarray) -> np.ndarray:
    cols = [np.ones_like(p)]
    for e in knees:
        cols += _knee_columns(p, e)
    return np.hstack([np.column_stack(cols), cache_cols])


def _tlb_solve(
    p: np.ndarray, y: np.ndarray, w: np.ndarray, knees: Sequence[float], cache_cols: np.ndarray
) -> tuple[float, np.ndarray]:
    a = _tlb_columns(p, knees, cache_cols) * w[:, None]
    yw = y * w
    x = np.linalg.lstsq(a, yw, rcond=None)[0]
    if (x[1:] < 0).any():
        x = nnls(a, yw, free=[0])
    r = a @ x - yw
    return float(r @ r), x


def fit_tlb_knees(
    pages: Sequence[float],
    values: Sequence[float],
    caches: Sequence[DataCache] = (),
    *,
    l1_range: tuple[float, float] = (8, 1024),
    l2_min_ratio: float = 4.0,
    max_knees: int = 6,
    min_ratio: float = 1.4,
    min_significance: float = 9.0,
    min_points_outside: int = 2,
    cache_window: tuple[float, float] = (0.4, 1.4),
    weight_floor: float = 0.05,
) -> TlbCurveFit:
    """The L1 and L2 TLB knees of a raw reach curve (ns per access of the one-line-per-page
    chase on 4 KiB pages), fitted jointly with what else raises that curve: the data
    caches the chase's lines overflow (one term per level in ``caches``, its shape
    ``cache_miss_fraction`` at the level's known size, only its cost fitted) and further
    knees past the TLBs (page-table lines leaving the caches; under a hypervisor, the
    nested walk's host entries), which are fitted but are not TLB levels.

    ``y = base + sum_knees (s*[P>E] + h*(1-E/P)+ + r8*ramp8_E(P) + r16*ramp16_E(P))
    + sum_cache c*miss(P)`` (``_knee_columns``), every amplitude non-negative, residuals weighted relatively (the first knee is a few ns, the walks
    tens). Knees are added one at a time, each where it lowers the error most, while it
    lowers it by at least ``min_significance`` sigma^2 (at most ``max_knees``), and all are
    refined by coordinate descent. A knee within ``cache_window`` times a data cache's
    capacity (in pages) is that cache's. Of the others, the L1 knee is the first in
    ``l1_range``; the L2 knee the first at least ``l2_min_ratio`` times beyond it.

    Each TLB knee comes with the interval of positions whose fit is within 4 sigma^2 of
    the best (the others held), its significance (how much worse the fit is without it,
    in sigma^2), and a confidence: high (significance >= 25, the interval within a factor
    1.5 and no other rise within 2x), medium (>= 9 and within 3x), low otherwise. The size
    reported is the fitted capacity E of each knee. ``weight_floor``: residuals are weighted by
    ``1 / (y + weight_floor * max y)`` (relative, without letting the smallest values rule).
    """
    p = np.asarray(pages, dtype=float)
    y = np.asarray(values, dtype=float)
    order = np.argsort(p)
    p, y = p[order], y[order]
    if len(p) < 10:
        raise ValueError(f"need at least 10 sizes to fit TLB knees, got {len(p)}")
    # one disturbed size (another program ran) must not become a knee
    y = median_filter(y, 3)
    # timing noise is relative (a disturbed chase is some percent slower at any size), and
    # the curve spans 1 ns to hundreds: weigh each residual by 1/y (floor: the curve's base)
    w = 1.0 / (np.abs(y) + weight_floor * max(float(np.abs(y).max(initial=0.0)), 1e-300))
    used = [c for c in caches if p[0] < c.sets * c.ways < p[-1] * 4]
    cache_cols = np.column_stack([cache_miss_fraction(p, c) for c in used]) if used else np.zeros((len(p), 0))
    sizes = np.unique(p)[:-1]
    fine = _candidates(p, 12)
    fine = fine[fine < p[-1]]

    def allowed(ks: Sequence[float]) -> bool:
        s = sorted(ks)
        if (p <= s[0]).sum() < min_points_outside or (p > s[-1]).sum() < min_points_outside:
            return False
        return all(b >= min_ratio * a for a, b in itertools.pairwise(s))

    def solve(ks: Sequence[float]) -> tuple[float, np.ndarray]:
        return _tlb_solve(p, y, w, sorted(ks), cache_cols)

    def profile(knees: list[float], k: int, below: int, above: int) -> list[tuple[float, float]]:
        """(error, position) of knee k moved over the fine grid, from ``below`` measured
        sizes under it to ``above`` over it, staying between its neighbours."""
        lo = knees[k - 1] if k else 0.0
        hi = knees[k + 1] if k + 1 < len(knees) else math.inf
        under, over = p[p < knees[k]], p[p > knees[k]]
        lo = max(lo, under[-below] if under.size >= below else 0.0)
        hi = min(hi, over[above - 1] if over.size >= above else math.inf)
        trials = ([*knees[:k], float(c), *knees[k + 1 :]] for c in fine[(fine > lo) & (fine < hi)])
        return [(solve(t)[0], t[k]) for t in trials if allowed(t)]

    knees: list[float] = []
    sse, _ = solve([])
    while len(knees) < max_knees:
        trials = [(solve(knees + [float(e)])[0], float(e)) for e in sizes if allowed(knees + [float(e)])]
        if not trials:
            break
        new_sse, e = min(trials)
        dof = max(1, len(p) - (1 + KNEE_SHAPES * (len(knees) + 1) + cache_cols.shape[1]))
        if (sse - new_sse) / max(new_sse / dof, 1e-300) < min_significance:
            break
        knees = sorted(knees + [e])
        sse = new_sse
        for _ in range(2):  # coordinate descent on the fine grid, each knee between its neighbours
            for k in range(len(knees)):
                prof = profile(knees, k, 3, 2)
                if prof:
                    # between two measured sizes several positions fit alike: the geometric
                    # middle of those (the knee is somewhere there; this bounds the error)
                    low = min(s_ for s_, _ in prof)
                    tie = 1e-6 * low + 1e-12 * float((y * w) @ (y * w))
                    alike = [c_ for s_, c_ in prof if s_ <= low + tie]
                    middle = math.sqrt(min(alike) * max(alike))
                    c_best = min(alike, key=lambda c_: abs(math.log(c_ / middle)))
                    s_best = next(s_ for s_, c_ in prof if c_ == c_best)
                    if s_best <= sse + tie:
                        knees[k], sse = c_best, s_best
    if not knees:
        raise ValueError("no knee in the reach curve stands out of its noise")
    sse, x = solve(knees)
    dof = max(1, len(p) - len(x) - len(knees))
    sigma2 = max(sse / dof, 1e-300)
    r_raw = _tlb_columns(p, knees, cache_cols) @ x - y
    nk = 1 + KNEE_SHAPES * len(knees)
    amps = [x[1 + KNEE_SHAPES * k : 1 + KNEE_SHAPES * (k + 1)] for k in range(len(knees))]
    costs = [float(a.sum()) for a in amps]
    # the profiles at the final positions (the coordinate descent's were taken before the
    # other knees last moved)
    profiles = {k: profile(knees, k, 4, 3) for k in range(len(knees))}

    # A rise at a data cache's capacity (in pages: one line per page) is that cache's, even
    # where its fitted shape missed it: an LRU-like model of a pseudo-LRU cache rises late.
    def at_cache(e: float) -> bool:
        return any(cache_window[0] * c.sets * c.ways <= e <= cache_window[1] * c.sets * c.ways for c in used)

    def describe(k: int, level: str) -> TlbKnee:
        e = knees[k]
        near = [c for s_, c in profiles.get(k, []) if s_ - sse <= 4 * sigma2] or [e]
        interval = (float(min(near)), float(max(near)))
        sse_without, _ = solve(knees[:k] + knees[k + 1 :])
        significance = (sse_without - sse) / sigma2
        ratio = interval[1] / interval[0]
        confidence = (
            "high" if significance >= 25 and ratio <= 1.5 else "medium" if significance >= 9 and ratio <= 3 else "low"
        )
        how = "the fitted capacity (a step, 1 - E/P or a random-set ramp at E)"
        # another rise within a factor 2 (not a data cache's): the misses arrive in two
        # steps, and which one is this TLB's is a guess
        near = [o for j, o in enumerate(knees) if j != k and not at_cache(o) and max(o, e) / min(o, e) < 2.0]
        if near and confidence == "high":
            confidence = "medium"
        if near:
            how += f"; another rise at {near[0]:.0f} pages, within 2x: which is this level's is ambiguous"
        lo = p[p <= e].max(initial=p[0])
        hi = p[p > e].min(initial=p[-1])
        return TlbKnee(
            level=level,
            entries=float(e),
            cost=costs[k],
            step_share=float(amps[k][0]) / costs[k] if costs[k] > 0 else 0.0,
            interval=interval,
            significance=float(significance),
            confidence=confidence,
            estimator=how,
            between=(float(lo), float(hi)),
        )

    chosen: dict[int, str] = {}
    tlb = [k for k, e in enumerate(knees) if not at_cache(e)]
    i1 = next((k for k in tlb if l1_range[0] <= knees[k] <= l1_range[1]), None)
    if i1 is not None:
        chosen[i1] = "l1"
        i2 = next((k for k in tlb if k > i1 and knees[k] >= l2_min_ratio * knees[i1]), None)
        if i2 is not None:
            chosen[i2] = "l2"
    others = [
        {"level": "data cache" if at_cache(e) else "beyond", "onset": float(e), "cost": costs[k]}
        for k, e in enumerate(knees)
        if k not in chosen
    ]
    cache_terms: list[dict[str, float | str]] = [
        {"level": c.level, "capacity_pages": float(c.sets * c.ways), "cost": float(x[nk + i])}
        for i, c in enumerate(used)
    ]
    return TlbCurveFit(
        base=float(x[0]),
        knees=[describe(k, level) for k, level in chosen.items()],
        caches=cache_terms + others,
        rms=float(math.sqrt(float(r_raw @ r_raw) / len(p))),
        sigma=math.sqrt(sigma2),
        points=len(p),
    )
