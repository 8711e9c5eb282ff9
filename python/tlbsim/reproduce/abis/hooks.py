"""Hooks of the ``abis`` paper of ``tlbsim reproduce``: its metrics.

``remote_targets_per_shootdown``: remote cores a shootdown reached, per shootdown sent
(ABIS §5.3: "a shootdown is sent on average to 10 remote cores in ABIS, and to 18 cores
using baseline Linux").
"""

from __future__ import annotations

from typing import Any, Mapping


def remote_targets_per_shootdown(stats: Mapping[str, Any]) -> float | None:
    t = stats["totals"]
    sent = float(t.get("shootdowns_sent", 0))
    return float(t.get("shootdown_ipis_received", 0)) / sent if sent > 0 else None


METRICS = {
    "remote_targets_per_shootdown": remote_targets_per_shootdown,
}
