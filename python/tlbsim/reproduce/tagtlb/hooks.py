"""Hooks of the ``tagtlb`` paper of ``tlbsim reproduce``: its metrics.

The tag paper counts, per CPU, full TLB flushes by cause (its "flush profile": intra-VM and
inter-VM context switches, forced and capacity flushes) and MPTTI, TLB misses per 10,000
instructions retired, of each CPU's DTLB and ITLB and their average (Figs. 7-8), and per
domain (Figs. 9-10; stats.json's ``per_vm``).
"""

from __future__ import annotations

from typing import Any, Mapping

# context_switch_intra_vm and context_switch_inter_vm split context_switch.
_SPLIT = ("context_switch_intra_vm", "context_switch_inter_vm")


def _flushes(core: Mapping[str, Any]) -> float:
    by_cause = core.get("full_flushes_by_cause", {})
    return float(sum(v for k, v in by_cause.items() if k not in _SPLIT))


def cpu0_flushes(stats: Mapping[str, Any]) -> float:
    return _flushes(stats["per_core"][0])


def flushes(stats: Mapping[str, Any]) -> float:
    return _flushes(stats["totals"])


def intra_vm_share(stats: Mapping[str, Any]) -> float | None:
    """Intra-VM context-switch flushes, of all full flushes (both CPUs)."""
    total = flushes(stats)
    return float(stats["totals"]["full_flushes_by_cause"]["context_switch_intra_vm"]) / total if total else None


def _mptti(core: Mapping[str, Any], structure: str) -> float | None:
    instructions = float(core.get("instructions", 0))
    misses = core.get("per_structure", {}).get(structure, {}).get("misses")
    return float(misses) * 1e4 / instructions if instructions and misses is not None else None


def _average(stats: Mapping[str, Any], structure: str) -> float | None:
    values = [_mptti(c, structure) for c in stats["per_core"]]
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def dtlb_mptti(stats: Mapping[str, Any]) -> float | None:
    """The average of the CPUs' DTLB MPTTI (Fig. 7's "average")."""
    return _average(stats, "l1d")


def itlb_mptti(stats: Mapping[str, Any]) -> float | None:
    """The average of the CPUs' ITLB MPTTI (Fig. 8's "average")."""
    return _average(stats, "l1i")


def cpu1_dtlb_mptti(stats: Mapping[str, Any]) -> float | None:
    """CPU 1's DTLB MPTTI (Fig. 9's "average" of dom1 and dom2 on CPU 1 in 0012)."""
    return _mptti(stats["per_core"][1], "l1d")


METRICS = {
    "cpu0_flushes": cpu0_flushes,
    "flushes": flushes,
    "intra_vm_share": intra_vm_share,
    "dtlb_mptti": dtlb_mptti,
    "itlb_mptti": itlb_mptti,
    "cpu1_dtlb_mptti": cpu1_dtlb_mptti,
}
