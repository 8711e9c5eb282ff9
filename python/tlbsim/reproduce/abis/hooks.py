"""Hooks of the ``abis`` paper of ``tlbsim reproduce``: its metrics.

``remote_targets_per_shootdown``: remote cores a shootdown reached, per shootdown sent
(ABIS §5.3: "a shootdown is sent on average to 10 remote cores in ABIS, and to 18 cores
using baseline Linux").
``shootdowns_per_second``, ``page_faults_per_second``, ``page_faults_per_shootdown``: §5.4's
PARSEC rates ("dedup triggers 33k shutdowns and 370k page faults per second").
``shootdowns_per_request``: shootdowns sent per request the Apache workers served (ABIS
§5.2: in the baseline "the amount of sent TLB shootdowns becomes almost identical to the
number of requests that Apache serves").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def remote_targets_per_shootdown(stats: Mapping[str, Any]) -> float | None:
    t = stats["totals"]
    sent = float(t.get("shootdowns_sent", 0))
    return float(t.get("shootdown_ipis_received", 0)) / sent if sent > 0 else None


def _per_second(stats: Mapping[str, Any], total: str) -> float | None:
    seconds = float(stats["run"].get("seconds") or 0)
    return float(stats["totals"].get(total, 0)) / seconds if seconds > 0 else None


def shootdowns_per_second(stats: Mapping[str, Any]) -> float | None:
    """Shootdowns sent per second of the run (Fig. 8's rates above the bars)."""
    return _per_second(stats, "shootdowns_sent")


def page_faults_per_second(stats: Mapping[str, Any]) -> float | None:
    """Page faults per second of the run (§5.4: "dedup triggers ... 370k page faults per second")."""
    return _per_second(stats, "page_faults")


def page_faults_per_shootdown(stats: Mapping[str, Any]) -> float | None:
    """Page faults per shootdown sent: the two §5.4 rates' ratio, which does not depend on
    how long the program computes."""
    sent = float(stats["totals"].get("shootdowns_sent", 0))
    return float(stats["totals"].get("page_faults", 0)) / sent if sent > 0 else None


def shootdowns_per_request(stats: Mapping[str, Any]) -> float | None:
    served = float(stats.get("per_class", {}).get("worker", {}).get("ops_completed", 0))
    return float(stats["totals"].get("shootdowns_sent", 0)) / served if served > 0 else None


METRICS = {
    "remote_targets_per_shootdown": remote_targets_per_shootdown,
    "shootdowns_per_second": shootdowns_per_second,
    "page_faults_per_second": page_faults_per_second,
    "page_faults_per_shootdown": page_faults_per_shootdown,
    "shootdowns_per_request": shootdowns_per_request,
}
