"""An instructively wrong TLB-coherence policy: Linux's protocol without its one rule for
freed page tables.

Linux skips CPUs in lazy-TLB mode (idle, or a kernel thread borrowing the address space):
they run no user code, and catch up on the flushes they missed when they switch back. But
when a flush frees page-table pages, ``native_flush_tlb_multi`` sends the IPI to every CPU
of ``mm_cpumask``, lazy ones included (``info->freed_tables``), and a lazy CPU answers by
switching to ``init_mm``. The reason is the hardware: a CPU may walk the page table loaded
in its CR3, and fill its paging-structure caches, speculatively at any time, so a lazy CPU
whose walk caches still point to a freed table may read, and cache, whatever that frame
holds next (x86 Linux now frees page tables after an RCU grace period for the same reason).

This policy drops that rule: lazy CPUs are skipped even when tables are freed. No user
access ever uses a stale translation here, so only the checker's speculative-walk rule
(docs/OS_MODEL.md "The checker") catches it::

    $ tlbsim fuzz --policy examples.policies.skip_lazy_on_table_free:SkipLazyOnTableFree --scenarios 300
    policy examples.policies.skip_lazy_on_table_free:SkipLazyOnTableFree, tagging every mode: 300 scenarios, ...
    scenarios with violations: 134 (security 513, consistency 0)
    first failing scenario: #0 (seed 1, tagging domain)
      security violation: lazy core 3 still reaches freed page table (frame 66) of process 0 through
      its walk caches at cycle 240906 (a speculative walk may use it)

Before the checker had that rule, this policy passed every scenario tried (2,000 in one
run, 6,000 in another).
"""

from __future__ import annotations

import tlbsim


class SkipLazyOnTableFree(tlbsim.Policy):
    def plan(self, view: tlbsim.policy.View, request: tlbsim.policy.Request) -> list[int]:
        return [
            core
            for core, c in enumerate(view.cores)
            if core != request.initiator
            and (request.global_ or (view.cpumask[core] and not c.lazy and c.loaded_mm == request.mm))
        ]
