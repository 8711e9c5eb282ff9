"""Hooks of the ``didi`` paper of ``tlbsim reproduce``: its metrics.

``targets_per_shootdown``: cores a flush request reached (by IPI or by PTLBI message) per
request that reached any; ``false_positive_share``: of those, the share that held nothing
stale (stats.json's ``false_positive_targets``: a true holder whose entry the change does
not make stale, e.g. a read-only entry of a page mprotect makes writable, counts here too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _reached(t: Mapping[str, Any]) -> float:
    return float(t.get("shootdown_ipis_received", 0)) + float(t.get("shootdown_messages_received", 0))


def targets_per_shootdown(stats: Mapping[str, Any]) -> float | None:
    t = stats["totals"]
    sent = float(t.get("shootdowns_sent", 0))
    return _reached(t) / sent if sent > 0 else None


def false_positive_share(stats: Mapping[str, Any]) -> float | None:
    t = stats["totals"]
    reached = _reached(t)
    return float(t.get("false_positive_targets", 0)) / reached if reached > 0 else None


def _per(stats: Mapping[str, Any], key: str, per: str) -> float | None:
    t = stats["totals"]
    n = float(t.get(per, 0))
    return float(t.get(key, 0)) / n if n > 0 else None


def send_cycles_per_shootdown(stats: Mapping[str, Any]) -> float | None:
    """DiDi §V-B "Send IPI": the initiator's cycles choosing targets and sending, per
    shootdown sent."""
    return _per(stats, "shootdown_cycles_initiator_send", "shootdowns_sent")


def wait_cycles_per_shootdown(stats: Mapping[str, Any]) -> float | None:
    """DiDi §V-B "Wait for Ack": the initiator's cycles from its last send to its last ack,
    per shootdown sent."""
    return _per(stats, "shootdown_cycles_initiator_wait", "shootdowns_sent")


def handler_cycles_per_ipi(stats: Mapping[str, Any]) -> float | None:
    """DiDi §V-B "Execute Handler" on a slave: target cycles per shootdown IPI taken
    (interrupt entry and exit, the ack with its contention, the flush)."""
    return _per(stats, "shootdown_cycles_target", "shootdown_ipis_received")


def shootdowns_per_second(stats: Mapping[str, Any]) -> float | None:
    """DiDi §V-C: shootdowns sent per simulated second."""
    seconds = float(stats["run"].get("seconds", 0))
    return float(stats["totals"].get("shootdowns_sent", 0)) / seconds if seconds > 0 else None


def shootdown_cycles_per_shootdown(stats: Mapping[str, Any]) -> float | None:
    """DiDi Fig. 9's cost of one shootdown, all cores together: the initiator's send and
    wait plus every target's handling (IPI handler or PTLBI invalidation), per shootdown
    sent."""
    sent = float(stats["totals"].get("shootdowns_sent", 0))
    return _shootdown_cycles(stats) / sent if sent > 0 else None


def _shootdown_cycles(stats: Mapping[str, Any]) -> float:
    """Every core's cycles in shootdowns: the initiators' send and wait, the targets'."""
    t = stats["totals"]
    keys = ("shootdown_cycles_initiator_send", "shootdown_cycles_initiator_wait", "shootdown_cycles_target")
    return sum(float(t.get(k, 0)) for k in keys)


def speed(stats: Mapping[str, Any]) -> float | None:
    """Runs per 10^9 cycles (1 / makespan): relative to another run of the same work, its
    speedup (DiDi Fig. 11)."""
    makespan = float(stats["run"].get("makespan_cycles", 0))
    return 1e9 / makespan if makespan > 0 else None


METRICS = {
    "targets_per_shootdown": targets_per_shootdown,
    "shootdown_cycles_per_shootdown": shootdown_cycles_per_shootdown,
    "speed": speed,
    "false_positive_share": false_positive_share,
    "send_cycles_per_shootdown": send_cycles_per_shootdown,
    "wait_cycles_per_shootdown": wait_cycles_per_shootdown,
    "handler_cycles_per_ipi": handler_cycles_per_ipi,
    "shootdowns_per_second": shootdowns_per_second,
}


# --------------------------------------------------------------------------- §V-E projection

#: Core counts the projection reports (the issue: including 16, 64 and 128).
PROJECTED_CORES = [16, 32, 64, 128, 256]


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares line y = a + b x."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else 0.0
    return my - b * mx, b


def _components(stats: Mapping[str, Any]) -> dict[str, float] | None:
    """S, T_slave, T_initiator (cycles) and F (shootdowns per cycle of one core) of a run."""
    t = stats["totals"]
    sent = float(t.get("shootdowns_sent", 0))
    makespan = float(stats["run"]["makespan_cycles"])
    if sent <= 0 or makespan <= 0:
        return None
    reached = _reached(t)
    return {
        "S": reached / sent,
        "T_slave": float(t.get("shootdown_cycles_target", 0)) / reached if reached > 0 else 0.0,
        "T_initiator": (
            float(t.get("shootdown_cycles_initiator_send", 0)) + float(t.get("shootdown_cycles_initiator_wait", 0))
        )
        / sent,
        "F": sent / makespan,
    }


def projection(runs: Mapping[str, Any]) -> dict[str, Any]:
    """DiDi §V-E: Cycles_shootdown(p) = S(p) x T_slave(p) + T_initiator(p), each a linear
    fit in the core count p over the simulated runs, and F(p) likewise; the fraction of all
    cycles lost is Cycles_shootdown x F / p (F in shootdowns per cycle, the machine having p
    cores' cycles)."""
    out: dict[str, Any] = {
        "cores": PROJECTED_CORES,
        "model": "DiDi §V-E, linear fits over the simulated core counts",
        "fits": {},
    }
    for policy in ("linux", "didi"):
        points: dict[str, list[tuple[float, float]]] = {"S": [], "T_slave": [], "T_initiator": [], "F": []}
        for r in runs.get("projection", []):
            if r.params.get("os.coherence") != policy:
                continue
            c = _components(r.stats)
            if c is None:
                continue
            p = float(r.params["machine.cores_per_socket"])
            for k, v in c.items():
                points[k].append((p, v))
        if not points["S"]:
            out[f"{policy}_cycles_lost_fraction"] = [None for _ in PROJECTED_CORES]
            continue
        fits = {k: _fit([x for x, _ in v], [y for _, y in v]) for k, v in points.items()}
        out["fits"][policy] = {k: {"intercept": a, "slope": b, "points": points[k]} for k, (a, b) in fits.items()}

        def at(k: str, p: float) -> float:
            a, b = fits[k]  # noqa: B023 - called only within this iteration
            return max(0.0, a + b * p)

        out[f"{policy}_cycles_lost_fraction"] = [
            min(1.0, (at("S", p) * at("T_slave", p) + at("T_initiator", p)) * at("F", p) / p) for p in PROJECTED_CORES
        ]
    return out


def fig11(runs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """DiDi Fig. 11 from the fig11 and fig11stm sweeps: per benchmark and core count,
    Linux's and DiDi's makespans (mean over seeds), the speedup, and the cycles spent in
    shootdowns."""
    acc: dict[tuple[str, int, str], list[tuple[float, float]]] = {}
    for r in [*runs.get("fig11", []), *runs.get("fig11stm", [])]:
        name = r.params.get("workload.test") or r.params.get("workload.kind")
        key = (str(name), int(r.params["machine.cores_per_socket"]), str(r.params["os.coherence"]))
        acc.setdefault(key, []).append((float(r.stats["run"]["makespan_cycles"]), _shootdown_cycles(r.stats)))

    def mean(xs: list[tuple[float, float]], i: int) -> float:
        return sum(x[i] for x in xs) / len(xs)

    rows = []
    for kind, cores in sorted({(k, c) for k, c, _ in acc}):
        lin, did = acc.get((kind, cores, "linux")), acc.get((kind, cores, "didi"))
        if not lin or not did:
            continue
        lin_makespan, did_makespan = mean(lin, 0), mean(did, 0)
        rows.append(
            {
                "workload": kind,
                "cores": cores,
                "linux_makespan_cycles": lin_makespan,
                "didi_makespan_cycles": did_makespan,
                "speedup": lin_makespan / did_makespan if did_makespan > 0 else None,
                "linux_shootdown_cycles": mean(lin, 1),
                "didi_shootdown_cycles": mean(did, 1),
            }
        )
    return rows


def outputs(runs: Mapping[str, Any], out: Any, quick: bool) -> None:
    """Write DIR/projection.json and DIR/fig11.json, and print both tables."""
    import json
    from pathlib import Path

    rows = fig11(runs)
    if rows:
        Path(out, "fig11.json").write_text(json.dumps(rows, indent=2) + "\n")
        print("Fig. 11: speedup of DiDi over Linux (makespan), cycles spent in shootdowns (all cores)")
        print(f"  {'workload':<14} {'cores':>5} {'speedup':>8} {'linux Mcyc':>11} {'didi Mcyc':>10}")
        for r in rows:
            sp = f"{r['speedup']:8.3f}" if r["speedup"] is not None else f"{'n/a':>8}"
            print(
                f"  {r['workload']:<14} {r['cores']:>5} {sp} {r['linux_shootdown_cycles'] / 1e6:11.2f} {r['didi_shootdown_cycles'] / 1e6:10.2f}"
            )

    proj = projection(runs)
    Path(out, "projection.json").write_text(json.dumps(proj, indent=2) + "\n")
    print("§V-E projection: fraction of all cycles lost to TLB shootdowns")
    print(f"  {'cores':>6} {'linux':>10} {'didi':>10}")
    for i, p in enumerate(proj["cores"]):
        lv, dv = proj["linux_cycles_lost_fraction"][i], proj["didi_cycles_lost_fraction"][i]
        fmt = lambda v: f"{v:10.4f}" if v is not None else f"{'n/a':>10}"
        print(f"  {p:>6} {fmt(lv)} {fmt(dv)}")
