"""An instructively wrong TLB-coherence policy: skip idle cores, without tracking what they
missed.

Linux also skips cores that are idle in lazy-TLB mode (they still have the address space
loaded, but run nothing that could use a user translation); it is safe there only because
each core remembers the ``tlb_gen`` it has caught up with and flushes when it switches back
to the address space (``on_switch`` sees ``slot_gen != mm_gen``). This policy keeps the first
half and drops the second: a core that was idle during a munmap or mprotect comes back to
the address space and keeps using the translations the change made stale.

What ``tlbsim fuzz`` says (a few scenarios are enough)::

    $ tlbsim fuzz --policy examples.policies.skip_idle_cores:SkipIdleCores --scenarios 300
    policy examples.policies.skip_idle_cores:SkipIdleCores, tagging every mode: 300 scenarios, ...
    scenarios with violations: 34 (security 1250, consistency 659)
    first failing scenario: #22 (seed 23, tagging domain)
      consistency violation: core 1 used vpn 0x7effffcd3 -> old frame 1 (now 1) at cycle 869380
    replay: tlbsim fuzz --policy examples.policies.skip_idle_cores:SkipIdleCores --scenarios 1 --seed 23

The violations are real: the core that came back uses a frame already given back to the
allocator or now another process's (security), or writes through a mapping made
read-only since (consistency: same frame, fewer rights now, as in the record above).
"""

from __future__ import annotations

import tlbsim


class SkipIdleCores(tlbsim.Policy):
    def plan(self, view: tlbsim.policy.View, request: tlbsim.policy.Request) -> list[int]:
        return [
            core
            for core, c in enumerate(view.cores)
            if core != request.initiator and view.cpumask[core] and c.loaded_mm == request.mm and not c.lazy
        ]

    def on_switch(self, core: int, slot_gen: int | None, mm_gen: int) -> bool:
        # The mistake: "we flush eagerly, so a core switching back is always current".
        return slot_gen is None
