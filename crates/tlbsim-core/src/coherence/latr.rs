//! `latr`: lazy translation coherence (Kumar, Maass, Kashyap, Veselý, Yan, Kim,
//! Bhattacharjee, Min: "LATR: Lazy Translation Coherence", ASPLOS 2018).
//!
//! LATR's rules, as modelled here:
//! - A free operation (munmap) does not interrupt anyone: the invalidation is queued as a
//!   "LATR state" on every core of the address space's `mm_cpumask` (Linux's target set)
//!   and each core applies it itself at its next scheduler tick or context switch (the
//!   engine's `Delivery::Deferred`); the initiator goes on at once (LATR §4.1).
//! - Until every core has swept, neither the virtual range nor the frames are reused: the
//!   unmapped range is held back from mmap ([`Coherence::on_range_unmapped`]) and released
//!   once every core has ticked twice past the hold (an epoch counter over the cores'
//!   ticks, LATR §4.2's "lazy reclamation" of virtual addresses); the frames and
//!   page-table pages of the request are freed by the engine when the last core applied
//!   it. A stale translation may be used in that window only while its virtual address
//!   and frame are not reused, which the checker verifies rather than excuses.
//! - Everything else stays synchronous, as LATR keeps it: permission changes (mprotect,
//!   msync's write-protect, copy-on-write, fork), madvise(MADV_DONTNEED) (the VMA stays,
//!   so the next touch maps a new frame at the same address at once, and LATR's rule
//!   cannot hold), page migration and reclaim (the page goes on living elsewhere), and
//!   global requests: Linux's IPIs.
//!
//! Simplified: LATR's per-core state array has a fixed size (64 entries) and falls back
//! to an IPI when full; the model's queue is unbounded (the engine's deferred list), so
//! that fallback is not modelled. LATR delays the reference drop of every page a lazy
//! munmap unmaps; the engine drops references when it zaps and holds only the frames the
//! munmap frees, so a munmap that leaves an anonymous page mapped elsewhere (copy-on-write
//! sharing after fork, the zero page) is done synchronously here
//! (`synchronous_requests.munmap`): otherwise that page could be freed by its other user
//! while a core still caches it (`tlbsim fuzz` found exactly that). Page-cache pages are
//! unmapped lazily; reclaim could free one inside the window (LATR's held reference would
//! prevent it): the checker would report that use as a security violation. The sweep is at the policy's tick (`tick_interval`,
//! default 1 ms at 3 GHz: the scheduler tick of a HZ=1000 kernel, LATR's setting,
//! assumed) or a context switch, whichever comes first.
//!
//! `latr-early-reuse` is deliberately unsafe: it does not hold the unmapped range back, so
//! mmap may hand the address out again while another core still caches the old
//! translation; `tlbsim fuzz` must catch it.

use super::{
    linux_on_deliver, linux_targets, Coherence, CoreView, Delivery, Effect, Effects, FlushPlan, FlushReason, FlushRequest, LocalFlush, OsView, Policy,
};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::types::CoreId;

crate::params! {
    /// `[coherence.latr]` (and `[coherence.latr-early-reuse]`).
    pub struct LatrParams {
        /// Cycles between two sweeps of a core (its scheduler tick). Default 3,000,000: 1 ms at
        /// 3 GHz, a HZ=1000 kernel's tick (LATR's evaluation kernel; assumed).
        pub tick_interval: u64 = 3_000_000,
    }
}

/// `SAFE = false`: the deliberately unsafe `latr-early-reuse`.
pub struct Latr<const SAFE: bool> {
    params: LatrParams,
    cores: usize,
    /// Sweep epochs: an epoch ends when every core has ticked since it began.
    epoch: u64,
    ticked: Vec<bool>,
    not_yet_ticked: usize,
    /// Ranges held back: (mm, start, end, epoch at the hold).
    held: Vec<(u32, u64, u64, u64)>,
    lazy_requests: u64,
    synchronous_requests: [u64; FlushReason::NAMES.len()],
    ranges_held: u64,
    ranges_released: u64,
    peak_ranges_held: u64,
}

const REASONS: [(FlushReason, &str); FlushReason::NAMES.len()] = [
    (FlushReason::Munmap, "munmap"),
    (FlushReason::Mprotect, "mprotect"),
    (FlushReason::MadviseDontneed, "madvise"),
    (FlushReason::Msync, "msync"),
    (FlushReason::CopyOnWrite, "copy_on_write"),
    (FlushReason::Fork, "fork"),
    (FlushReason::Migration, "migration"),
    (FlushReason::Reclaim, "reclaim"),
    (FlushReason::NumaHint, "numa_hint"),
    (FlushReason::Policy, "policy"),
];

impl<const SAFE: bool> crate::registry::Plugin for Latr<SAFE> {
    type Params = LatrParams;
}

impl<const SAFE: bool> Policy for Latr<SAFE> {
    fn build(cfg: &Config, params: LatrParams) -> Result<Self> {
        if params.tick_interval == 0 {
            let name = if SAFE { "latr" } else { "latr-early-reuse" };
            return Err(Error::config(format!("coherence.{name}.tick_interval"), "must be at least 1 cycle"));
        }
        let cores = cfg.cores() as usize;
        Ok(Latr {
            params,
            cores,
            epoch: 0,
            ticked: vec![false; cores],
            not_yet_ticked: cores,
            held: Vec::new(),
            lazy_requests: 0,
            synchronous_requests: [0; FlushReason::NAMES.len()],
            ranges_held: 0,
            ranges_released: 0,
            peak_ranges_held: 0,
        })
    }
}

impl<const SAFE: bool> Coherence for Latr<SAFE> {
    fn tick_interval(&self) -> Option<u64> {
        Some(self.params.tick_interval)
    }

    fn plan(&mut self, view: &OsView<'_>, req: &FlushRequest, plan: &mut FlushPlan) {
        linux_targets(view, req, plan);
        // Lazy only when every page the munmap unmapped is either freed by it (the frames
        // are then the request's, held until the last sweep) or a page-cache page (its
        // data stays valid in the page cache). A page still mapped elsewhere (copy-on-write
        // sharing after fork, the zero page) could be freed by its other user's own path
        // meanwhile (see "Simplified").
        // Counted page by page: a recycling axis (FPR) may free frames of pages it took out
        // of the request (they stay in their context), so the request's frames need not
        // be its pages'.
        let lazy = req.reason == FlushReason::Munmap && !req.global && {
            let freed: crate::fasthash::FastSet<u64> = req.frames.iter().map(|f| f.0).collect();
            let present = req.old_ptes.iter().filter(|&&p| p & crate::page_table::PTE_PRESENT != 0);
            let (mut pages, mut theirs) = (0, 0);
            for &p in present {
                pages += 1;
                theirs += freed.contains(&crate::page_table::pte_pfn(p).0) as usize;
            }
            pages == theirs + req.page_cache_pages as usize
        };
        if lazy {
            self.lazy_requests += 1;
            plan.delivery = Some(Delivery::Deferred);
        } else {
            let i = REASONS.iter().position(|(r, _)| *r == req.reason).unwrap_or(REASONS.len() - 1);
            self.synchronous_requests[i] += 1;
            plan.delivery = Some(Delivery::Ipi);
        }
    }

    fn on_deliver(&mut self, _core: CoreId, me: &CoreView, req: &FlushRequest, flush_ceiling: u32) -> LocalFlush {
        linux_on_deliver(me, req, flush_ceiling)
    }

    fn on_switch(&mut self, _core: CoreId, slot_gen: Option<u64>, mm_gen: u64) -> bool {
        slot_gen != Some(mm_gen)
    }

    fn on_range_unmapped(&mut self, _core: CoreId, mm: u32, start: u64, end: u64, _fx: &mut Effects) -> bool {
        if !SAFE {
            return false;
        }
        self.held.push((mm, start, end, self.epoch));
        self.ranges_held += 1;
        self.peak_ranges_held = self.peak_ranges_held.max(self.held.len() as u64);
        true
    }

    fn on_tick(&mut self, core: CoreId, _now: u64, fx: &mut Effects) {
        // Ranges held during epoch e: every core has ticked after the hold once epoch e + 2
        // has begun (epoch e + 1 began after the hold and has ended since).
        let epoch = self.epoch;
        let before = self.held.len();
        // Held in epoch order: only the oldest can be due.
        if self.held.first().is_some_and(|&(_, _, _, at)| at + 2 <= epoch) {
            self.held.retain(|&(mm, start, end, at)| {
                let release = at + 2 <= epoch;
                if release {
                    fx.push(Effect::ReleaseRange { mm, start, end });
                }
                !release
            });
        }
        self.ranges_released += (before - self.held.len()) as u64;
        let c = core.0 as usize;
        if c < self.cores && !self.ticked[c] {
            self.ticked[c] = true;
            self.not_yet_ticked -= 1;
            if self.not_yet_ticked == 0 {
                self.epoch += 1;
                self.ticked.iter_mut().for_each(|t| *t = false);
                self.not_yet_ticked = self.cores;
            }
        }
    }

    fn stats_json(&self) -> serde_json::Value {
        let sync: serde_json::Map<String, serde_json::Value> =
            REASONS.iter().zip(self.synchronous_requests).map(|((_, n), v)| ((*n).into(), serde_json::json!(v))).collect();
        serde_json::json!({
            "lazy_requests": self.lazy_requests,
            "synchronous_requests": sync,
            "sweep_epochs": self.epoch,
            "ranges_held": self.ranges_held,
            "ranges_released": self.ranges_released,
            "peak_ranges_held": self.peak_ranges_held,
        })
    }
}
