"""A safe, wasteful TLB-coherence policy: every flush request reaches every other core of
the machine, and each flushes the address space entirely.

Safe because no core can keep a stale entry past the end of the protocol: it does not
matter whether a core runs the address space, is lazy, or keeps its entries under a tag
(PCID, CR3 tags). Wasteful because most targets hold nothing (``false_positive_targets``)
and a full flush costs the misses that follow it.

What ``tlbsim fuzz`` says::

    $ tlbsim fuzz --policy examples.policies.flush_every_core:FlushEveryCore --scenarios 500
    policy examples.policies.flush_every_core:FlushEveryCore, tagging every mode: 500 scenarios, 27264 shootdowns sent
    scenarios with violations: 0 (security 0, consistency 0)

(or, from Python: ``tlbsim.fuzz(FlushEveryCore, scenarios=500).clean`` is True).
"""

from __future__ import annotations

import tlbsim


class FlushEveryCore(tlbsim.Policy):
    def plan(self, view: tlbsim.policy.View, request: tlbsim.policy.Request) -> list[int]:
        return [core for core in range(len(view.cores)) if core != request.initiator]

    def on_deliver(self, core: int, me: tlbsim.policy.CoreView, request: tlbsim.policy.Request) -> str:
        # Whatever this core runs, drop the request's address space (or everything).
        return "full"

    def on_switch(self, core: int, slot_gen: int | None, mm_gen: int) -> bool:
        return slot_gen != mm_gen
