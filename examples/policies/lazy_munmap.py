"""LATR's lazy munmap (Kumar et al., "LATR: Lazy Translation Coherence", ASPLOS 2018), written
in Python: the rules of the built-in ``latr`` policy (crates/tlbsim-core/src/coherence/latr.rs),
decided here instead.

- A munmap interrupts nobody: its invalidation is queued on every core of the address space's
  mask (Linux's targets) and applied at the core's next timer tick or context switch
  (``delivery = "deferred"``); the initiator goes on at once. The frames the munmap frees
  are released only when every target has applied it (the simulator holds them).
- Until every core has swept, the unmapped *virtual range* is not handed out again either:
  ``on_range_unmapped`` holds it back, and ``on_tick`` releases it once every core has ticked
  twice past the hold (an epoch ends when every core has ticked since it began: LATR §4.2's
  lazy reclamation of virtual addresses).
- Lazy only when every page the munmap unmapped is freed by it or is a page-cache page; a
  page still mapped elsewhere (copy-on-write after fork, the zero page) could be freed by its
  other user meanwhile, so that munmap, and every other change (mprotect, copy-on-write,
  migration, reclaim, ...), is Linux's synchronous IPI shootdown.

``LazyMunmapEarlyReuse`` drops the hold on the virtual range, as ``latr-early-reuse`` does:
mmap may hand the address out again while a core still caches the old translation, and
``tlbsim fuzz`` catches it::

    tlbsim fuzz --policy examples.policies.lazy_munmap:LazyMunmap --scenarios 300
    tlbsim fuzz --policy examples.policies.lazy_munmap:LazyMunmapEarlyReuse --scenarios 300

``MixedLazyMunmap`` shows a plan that mixes delivery paths within one request: a munmap IPIs
the cores that run the address space now (they could use its translations at once) and defers
to the others (lazy ones, or cores running another address space, that can use them only
after a context switch, which applies the deferred request first).
"""

from __future__ import annotations

import tlbsim
from tlbsim.policy import Plan, Request, View

PRESENT = 1  # the PTE's present bit


class LazyMunmap(tlbsim.Policy):
    #: The sweep runs at the scheduler tick: 1 ms at 3 GHz, a HZ=1000 kernel (LATR's; assumed).
    tick_interval = 3_000_000
    #: Hold unmapped ranges back until every core has swept (False: unsafe on purpose).
    hold_ranges = True

    def __init__(self) -> None:
        self.epoch = 0
        self.ticked: set[int] = set()
        self.held: list[tuple[int, int, int, int]] = []  # (mm, start, end, epoch at the hold)
        self.lazy_requests = 0
        self.ranges_held = 0

    def lazy(self, request: Request) -> bool:
        """Every present page of the munmap is either freed by it or a page-cache page."""
        if request.reason != "Munmap" or request.global_:
            return False
        freed = set(request.frames)
        present = [pte for pte in request.old_ptes if pte & PRESENT]
        theirs = sum(1 for pte in present if (pte >> 12) & ((1 << 40) - 1) in freed)
        return len(present) == theirs + request.page_cache_pages

    def plan(self, view: View, request: Request) -> Plan | list[int]:
        linux = super().plan(view, request)
        assert isinstance(linux, Plan)
        if not self.lazy(request):
            return linux
        self.lazy_requests += 1
        return Plan(targets=linux.targets, delivery="deferred")

    def on_range_unmapped(self, core: int, mm: int, start: int, end: int) -> bool:
        if not self.hold_ranges:
            return False
        self.held.append((mm, start, end, self.epoch))
        self.ranges_held += 1
        return True

    def on_tick(self, core: int, now: int) -> None:
        # A range held in epoch e: every core has ticked after the hold once epoch e + 2 began.
        keep = []
        for mm, start, end, at in self.held:
            if at + 2 <= self.epoch:
                self.release_range(mm, start, end)
            else:
                keep.append((mm, start, end, at))
        self.held = keep
        self.ticked.add(core)
        if len(self.ticked) >= self.machine_cores:
            self.epoch += 1
            self.ticked.clear()

    def stats(self) -> dict[str, int]:
        return {"lazy_requests": self.lazy_requests, "ranges_held": self.ranges_held, "sweep_epochs": self.epoch}


class LazyMunmapEarlyReuse(LazyMunmap):
    """Unsafe on purpose: the unmapped range may be reused before every core swept."""

    hold_ranges = False


class MixedLazyMunmap(LazyMunmap):
    """A lazy munmap IPIs the cores running the address space and defers to the rest."""

    def plan(self, view: View, request: Request) -> Plan | list[int]:
        out = super().plan(view, request)
        assert isinstance(out, Plan)
        if out.delivery != "deferred":
            return out
        running = [t for t in out.targets if view.cores[t].loaded_mm == request.mm and not view.cores[t].lazy]
        return Plan(targets=out.targets, delivery="deferred", delivery_of={t: "ipi" for t in running})
