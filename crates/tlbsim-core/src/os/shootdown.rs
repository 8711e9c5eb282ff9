//! The TLB flush protocol and its timing (DiDi §V-A's anatomy; docs/LINUX_BASELINE.md): a
//! page-table change asks the coherence policy for targets and a delivery path, flushes
//! the initiator, then reaches each target by
//!
//! - IPI: the initiator pays a send per target; each interrupt arrives after the delivery
//!   latency (same or cross socket) and is taken when the target's clock reaches it; the
//!   target pays interrupt entry/exit, its flush and the ack (the ack contends on the
//!   shared flush datum, growing with the number of targets); the initiator spins until the
//!   last ack;
//! - a hardware message (`Delivery::Message`): the same queue and timing, but applied
//!   without an interrupt, at the policy's latency and per-target cost, and acked back to
//!   the initiator, which waits;
//! - deferred (`Delivery::Deferred`): queued on the target and applied at its next timer
//!   tick or context switch; the initiator goes on at once;
//! - free: applied now at no cost (the oracle).
//!
//! A plan may give targets paths of their own (`FlushPlan::delivery_of`): one synchronous
//! path mixed with deferred and free targets (`start_mixed`).
//!
//! What the change frees (frames, page-table pages) is released when the last target has
//! applied the request, and the checker then marks every translation still cached that
//! disagrees with the page table.

use super::{Cause, Gather, Os, PolicyTlb, Req};
use crate::coherence::{Coherence, CoreView, Delivery, FlushPlan, FlushReason, FlushRequest, LocalFlush, OsView};
use crate::fasthash::FastMap as HashMap;
use crate::machine::CLOCK_SHIFT;
use crate::types::{CoreId, Pfn, Vpn};
use std::rc::Rc;

/// A request on its way to a core: an IPI or a hardware message.
#[derive(Clone, Copy, Debug)]
pub(super) struct Irq {
    pub arrival: u64,
    pub shootdown: usize,
    /// Index of this core among the request's targets (for per-target pages).
    pub target: usize,
    /// A hardware message (no interrupt), not an IPI.
    pub message: bool,
    /// Serviced on arrival even inside a kernel path with interrupts disabled (hardware:
    /// RAR's microcode, a broadcast, a PTLBI message), where an IPI waits for the path's end.
    pub masked_ok: bool,
}

pub(super) struct Shootdown {
    pub req: Req,
    /// The page table's leaf entries of `req.pages` when the request was made (to tell a
    /// target that held a stale entry from a false positive).
    pub leaves: Rc<Vec<Option<u64>>>,
    /// Per target, the pages it flushes (`None`: all of `req.pages`).
    pub pages_of: Vec<Option<Rc<Vec<Vpn>>>>,
    /// Cores that flushed all of the request's pages (the checker need not look at them).
    pub flushed: Vec<usize>,
    pub initiator: usize,
    pub acks_left: u32,
    /// Of `acks_left`, the targets reached synchronously (IPI, message, broadcast): the
    /// initiator waits for these only. Fewer than `acks_left` when the plan also defers.
    pub sync_left: u32,
    pub targets: u32,
    pub last_ack: u64,
    pub send_end: u64,
    /// The initiator waits for the acks (IPI, message), or not (deferred).
    pub waits: bool,
    /// Cycles the final ack takes back to the initiator after the last target's (a
    /// message's return trip).
    pub ack_return: u64,
    /// What a target of a hardware message pays (no interrupt).
    pub message_target_cycles: u64,
    pub frames: Vec<(Pfn, u32)>,
    pub tables: Vec<u32>,
    pub done: bool,
    /// A global request: the recycling axis' sequence number, and the frames whose leaving
    /// their context sent it (`InFlight::frames_in_transit`).
    pub recycling_seq: u64,
    pub frames_in_transit: Vec<Pfn>,
}

/// The flush requests in flight and what depends on them.
pub(crate) struct InFlight {
    /// Every request by index (a core's deferred queue and interrupts name them); done
    /// ones at the end are popped.
    records: Vec<Shootdown>,
    /// (address space, page) → how many flush requests not yet done include the page
    /// (the checker leaves such pages to the latest request; `complete`).
    pages: HashMap<(u32, u64), u32>,
    /// Frame → its tracking word before it left its recycling context, while the global
    /// request that leaving sent is in flight (`flush_global_for`).
    frames_in_transit: HashMap<u64, u64>,
    /// Per core: a global request it sent and waits for (its record, its recycling
    /// sequence number), which a frame leaving its context joins (mm/frames.rs
    /// `settle_claims`).
    global: Vec<Option<(usize, u64)>>,
}

impl InFlight {
    pub(crate) fn new(cores: usize) -> InFlight {
        InFlight { records: Vec::new(), pages: HashMap::default(), frames_in_transit: HashMap::default(), global: vec![None; cores] }
    }

    /// Request `sd`.
    pub(super) fn record(&self, sd: usize) -> &Shootdown {
        &self.records[sd]
    }

    /// Whether a request not yet done includes page `vpn` of address space `mm`.
    pub(crate) fn page_in_flight(&self, mm: u32, vpn: u64) -> bool {
        self.pages.contains_key(&(mm, vpn))
    }

    /// The tracking word `pfn` had before it left its recycling context, while the global
    /// request that leaving sent is in flight.
    pub(crate) fn word_in_transit(&self, pfn: Pfn) -> Option<u64> {
        self.frames_in_transit.get(&pfn.0).copied()
    }

    /// The global request `core` sent and waits for: (its record, its recycling sequence
    /// number), or (usize::MAX, 0).
    pub(crate) fn global_of(&self, core: usize) -> (usize, u64) {
        self.global[core].unwrap_or((usize::MAX, 0))
    }

    /// Frame `pfn` (tracking word `word` before) left its context and joins the global
    /// request `sd` in flight.
    pub(crate) fn join_global(&mut self, sd: usize, pfn: Pfn, word: u64) {
        self.frames_in_transit.insert(pfn.0, word);
        self.records[sd].frames_in_transit.push(pfn);
    }

    /// Page-table pages freed by requests not yet done (stats.json
    /// `page_table_pages_awaiting_flush`).
    pub(crate) fn tables_awaiting_flush(&self) -> usize {
        self.records.iter().filter(|s| !s.done).map(|s| s.tables.len()).sum()
    }
}

impl<P: Coherence> Os<P> {
    /// A page-table change of `pid` by `core` needs TLB coherence: run the protocol.
    /// Frames and tables in `gather` are freed when it completes. Returns true if the core
    /// must now wait for acks.
    pub(crate) fn flush(&mut self, core: usize, pid: u32, reason: FlushReason, full: bool, gather: Gather) -> bool {
        if gather.pages.is_empty() && gather.tables.is_empty() && !full {
            let Gather { frames, tables, .. } = gather;
            self.release(core, frames, tables);
            return false;
        }
        let p = &mut self.spaces[pid as usize];
        p.tlb_gen += 1;
        let new_gen = p.tlb_gen;
        self.start(core, pid, false, reason, full, new_gen, gather)
    }

    /// A global request (every address space, every core the policy names): e.g. a frame
    /// leaving its recycling context may be cached under any address space.
    pub(crate) fn flush_global(&mut self, core: usize, gather: Gather) -> bool {
        self.flush_global_for(core, gather, Vec::new())
    }

    /// A global request sent because `transit` (frame, tracking word before) left their
    /// recycling context: until it completes, a core still caching one of them reads the
    /// data of the context it left (its new owner waits for the request), and the checker
    /// judges such a use by the old word.
    pub(crate) fn flush_global_for(&mut self, core: usize, gather: Gather, transit: Vec<(Pfn, u64)>) -> bool {
        let seq = if self.settings.recycling_on() { self.recycling.on_global_shootdown() } else { 0 };
        let sd = self.shootdowns.records.len();
        let mut frames = Vec::with_capacity(transit.len());
        for (f, w) in transit {
            self.shootdowns.frames_in_transit.insert(f.0, w);
            frames.push(f);
        }
        let waits = self.start(core, u32::MAX, true, FlushReason::Policy, true, 0, gather);
        // `start` pushed the record at `sd`; with free delivery it is already complete.
        match self.shootdowns.records.get_mut(sd) {
            Some(s) if !s.done => {
                s.recycling_seq = seq;
                s.frames_in_transit = frames;
                if seq != 0 && s.waits {
                    self.shootdowns.global[core] = Some((sd, seq));
                }
            }
            _ => self.global_done(seq, &frames),
        }
        waits
    }

    fn global_done(&mut self, seq: u64, frames: &[Pfn]) {
        if self.settings.recycling_on() {
            self.recycling.on_global_shootdown_done(seq);
        }
        for f in frames {
            self.shootdowns.frames_in_transit.remove(&f.0);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn start(&mut self, core: usize, pid: u32, global: bool, reason: FlushReason, full: bool, new_gen: u64, gather: Gather) -> bool {
        let Gather { pages, old_ptes, frames, tables } = gather;
        let page_cache_pages = old_ptes
            .iter()
            .filter(|&&p| p & crate::page_table::PTE_PRESENT != 0)
            .filter(|&&p| {
                let pfn = crate::page_table::pte_pfn(p);
                self.m.mem.desc(pfn).kind == crate::memory::FrameKind::Data && self.m.mem.mapping(pfn) != 0
            })
            .count() as u32;
        let req = FlushRequest {
            page_cache_pages,
            initiator: CoreId(core as u32),
            mm: pid,
            global,
            pages,
            old_ptes,
            frames: frames.iter().map(|&(f, _)| f).collect(),
            reason,
            freed_tables: !tables.is_empty(),
            full,
            new_gen,
        };
        let ncores = self.cores.len();
        // Which TLBs hold a translation the change made stale: only the simulator knows;
        // computed only for a policy that asks (the oracle).
        let holders: Vec<bool> = if !self.policy.wants_holders() {
            vec![false; ncores]
        } else if global {
            vec![true; ncores]
        } else {
            let current = self.current_leaves(pid, &req.pages);
            // A core whose page-walk caches point to a table being freed holds a stale
            // translation too.
            (0..ncores)
                .map(|c| self.holds_stale_with(c, pid, &req.pages, &current) || tables.iter().any(|&t| self.m.cores[c].tlbs.holds_pwc_to(t, None)))
                .collect()
        };
        let views: Vec<CoreView> = (0..ncores).map(|c| self.core_view(c)).collect();
        let mut plan = FlushPlan::default();
        let cpumask = if global { vec![true; ncores] } else { self.spaces[pid as usize].cpumask.clone() };
        let now = self.clock(core);
        self.policy.plan(&OsView { cores: &views, cpumask: &cpumask, holders: &holders, flush_ceiling: self.settings.ceiling(), now }, &req, &mut plan);
        plan.pages_of.resize(plan.targets.len(), None);
        plan.delivery_of.resize(plan.targets.len(), None);
        if !global {
            // Cores of the mask that the request skips because they are lazy (idle, or in a
            // kernel thread, with the mm borrowed): they catch up when they next switch to
            // it (FPR §II's lazy shootdowns of threads asleep in I/O).
            for (c, v) in views.iter().enumerate() {
                if c != core && cpumask[c] && v.lazy && !plan.targets.iter().any(|t| t.0 as usize == c) {
                    self.stats[c].shootdowns_deferred_lazy += 1;
                }
            }
        }
        let req = Rc::new(req);
        // The initiator flushes itself (flush_tlb_func run locally) when it runs the mm, or
        // when the policy names it (it may hold the mm's entries under another PCID).
        let me = views[core];
        let mut own_pages = None;
        let named = match plan.targets.iter().position(|t| t.0 as usize == core) {
            Some(i) => {
                plan.targets.remove(i);
                plan.delivery_of.remove(i);
                own_pages = plan.pages_of.remove(i);
                true
            }
            None => false,
        };
        let mut flushed = Vec::new();
        if named || global || me.loaded_mm == Some(pid) {
            let action = self.policy.on_deliver(CoreId(core as u32), &me, &req, self.settings.ceiling());
            let pages: &[Vpn] = own_pages.as_deref().unwrap_or(&req.pages);
            if self.apply_local(core, &req, pages, action, &mut crate::tlb::hierarchy::NoTlbListener) && own_pages.is_none() {
                flushed.push(core);
            }
        }
        let leaves = Rc::new(if global { Vec::new() } else { self.current_leaves(pid, &req.pages) });
        let n = plan.targets.len() as u32;
        if n > 0 {
            self.stats[core].shootdowns_sent += 1;
            self.stats[core].shootdowns_sent_by_reason[req.reason as usize] += 1;
            let h = &mut self.stats[core].targets_hist;
            let b = (n as usize).min(h.len() - 1);
            h[b] += 1;
        }
        let sd = self.shootdowns.records.len();
        if !req.global {
            for &v in &req.pages {
                *self.shootdowns.pages.entry((req.mm, v.0)).or_insert(0) += 1;
            }
        }
        self.shootdowns.records.push(super::Shootdown {
            req,
            leaves,
            pages_of: plan.pages_of.drain(..).map(|p| p.map(Rc::new)).collect(),
            flushed,
            initiator: core,
            acks_left: n,
            sync_left: n,
            targets: n,
            last_ack: 0,
            send_end: 0,
            waits: false,
            ack_return: 0,
            message_target_cycles: 0,
            frames,
            tables,
            done: false,
            recycling_seq: 0,
            frames_in_transit: Vec::new(),
        });
        if plan.delivery_of.iter().any(|d| d.is_some_and(|d| Some(d) != plan.delivery)) {
            return self.start_mixed(core, sd, &plan);
        }
        let mut broadcast_no_sync = false;
        // Only an IPI needs the target's interrupts enabled: RAR's microcode, INVLPGB's and
        // TLBI's broadcasts and DiDi's PTLBI are applied by hardware on arrival, inside a
        // kernel path with interrupts off too (RAR_CTRL_IGNORE_IF; AMD APM "INVLPGB"; Arm
        // ARM D8.13 broadcast TLB maintenance; DiDi §IV "without interrupting the core").
        let masked_ok = !matches!(plan.delivery, Some(Delivery::Ipi));
        let (per_target_send, latency_of, message) = match plan.delivery {
            Some(Delivery::Ipi) if n > 0 => {
                let (same, cross) = (self.settings.costs().ipi_delivery_same_socket, self.settings.costs().ipi_delivery_cross_socket);
                self.stats[core].shootdown_ipis_sent += n as u64;
                (self.settings.costs().ipi_send, Some((same, cross)), false)
            }
            Some(Delivery::RemoteAction { service_cycles, status_cycles, wait }) if n > 0 => {
                broadcast_no_sync = !wait;
                // The APIC signal costs what an IPI's send and delivery cost.
                self.shootdowns.records[sd].ack_return = status_cycles;
                self.shootdowns.records[sd].message_target_cycles = service_cycles;
                let c = self.settings.costs();
                (c.ipi_send, Some((c.ipi_delivery_same_socket, c.ipi_delivery_cross_socket)), true)
            }
            Some(Delivery::Message { latency, initiator_cycles, target_cycles }) if n > 0 => {
                self.shootdowns.records[sd].ack_return = latency;
                self.shootdowns.records[sd].message_target_cycles = target_cycles;
                (initiator_cycles, Some((latency, latency)), true)
            }
            Some(Delivery::Broadcast { issue_cycles, latency, sync_cycles, tlbsync }) => {
                // INVLPGB: the initiator issues its instructions, then each core of the
                // machine receives the invalidation `latency` later; TLBSYNC waits for the
                // last and costs `sync_cycles`.
                self.charge(core, issue_cycles);
                self.stats[core].shootdown_cycles_initiator_send += issue_cycles;
                if n == 0 {
                    if tlbsync {
                        self.charge(core, latency + sync_cycles);
                    }
                    (0, None, false)
                } else {
                    self.shootdowns.records[sd].ack_return = sync_cycles;
                    broadcast_no_sync = !tlbsync;
                    (0, Some((latency, latency)), true)
                }
            }
            Some(Delivery::Deferred) if n > 0 => {
                // Queued on each target; the initiator goes on.
                for (k, t) in plan.targets.iter().enumerate() {
                    let t = t.0 as usize;
                    self.stats[t].shootdowns_deferred_received += 1;
                    self.cores[t].deferred.push((sd, k));
                    self.mark_dirty(t);
                }
                // The lazy window starts now: the checker marks what the targets still
                // cache, and judges each use in the window (`in_lazy_window`).
                if self.settings.checker() && !self.shootdowns.records[sd].req.global {
                    let (mm, pages, flushed) = {
                        let s = &self.shootdowns.records[sd];
                        (s.req.mm, s.req.pages.clone(), s.flushed.clone())
                    };
                    self.mark_stale(mm, &pages, &[], &flushed);
                }
                return false;
            }
            _ => (0, None, false),
        };
        match latency_of {
            Some(latency) => {
                let targets = plan.targets.iter().enumerate().map(|(k, t)| (k, t.0 as usize));
                self.send_in_order(core, sd, targets, n, per_target_send, latency, message, masked_ok);
                if broadcast_no_sync {
                    // No TLBSYNC, or no wait for RAR's status bytes (unsafe on purpose): the
                    // initiator goes on and frees what the change released while the
                    // invalidations are still on their way.
                    self.shootdowns.records[sd].waits = false;
                    self.cores[core].waiting -= 1;
                    let s = &mut self.shootdowns.records[sd];
                    let (frames, tables) = (std::mem::take(&mut s.frames), std::mem::take(&mut s.tables));
                    // The protocol is over as far as the initiator knows: the checker marks
                    // what the cores still cache, as when a request completes.
                    if self.settings.checker() && !s.req.global {
                        let (mm, pages, flushed) = (s.req.mm, s.req.pages.clone(), s.flushed.clone());
                        self.mark_stale(mm, &pages, &tables, &flushed);
                    }
                    self.release(core, frames, tables);
                    return false;
                }
                true
            }
            None => {
                // Free delivery (or nobody to reach): every target flushes now, at no cost.
                for (k, t) in plan.targets.clone().into_iter().enumerate() {
                    self.deliver(t.0 as usize, sd, k);
                }
                self.complete(sd);
                false
            }
        }
    }

    /// A plan whose targets take different paths (`FlushPlan::delivery_of`, e.g. a Python
    /// policy that interrupts the cores running the address space and defers the rest):
    /// the synchronous targets (one path, IPIs or hardware messages) are sent to in target
    /// order with the same timing as a plan of that path alone, and the initiator waits for
    /// their acks only; deferred targets queue the request for their next tick or context
    /// switch; free targets flush now. What the request frees is released when every target
    /// has applied it, the deferred ones included. Returns whether the initiator waits.
    fn start_mixed(&mut self, core: usize, sd: usize, plan: &FlushPlan) -> bool {
        let via: Vec<Delivery> =
            (0..plan.targets.len()).map(|k| plan.delivery_of.get(k).copied().flatten().or(plan.delivery).unwrap_or(Delivery::Free)).collect();
        assert!(
            !via.iter().any(|d| matches!(d, Delivery::Broadcast { .. } | Delivery::RemoteAction { .. })),
            "a broadcast reaches every core and a remote action uses the shared payload: a plan cannot mix either with other paths"
        );
        let is_sync = |d: &Delivery| matches!(d, Delivery::Ipi | Delivery::Message { .. });
        let sync_path = via.iter().copied().find(is_sync);
        assert!(via.iter().filter(|d| is_sync(d)).all(|d| Some(*d) == sync_path), "a plan mixes at most one synchronous path (IPI or message)");
        let n_sync = via.iter().filter(|d| is_sync(d)).count() as u32;
        self.shootdowns.records[sd].sync_left = n_sync;
        // Deferred targets: queued, and the lazy window starts now on them only (the
        // synchronous targets are judged when the request completes, as in a plan of
        // their path alone).
        let mut deferred_to = Vec::new();
        for (k, (t, d)) in plan.targets.iter().zip(&via).enumerate() {
            if *d == Delivery::Deferred {
                let t = t.0 as usize;
                self.stats[t].shootdowns_deferred_received += 1;
                self.cores[t].deferred.push((sd, k));
                self.mark_dirty(t);
                deferred_to.push(t);
            }
        }
        if !deferred_to.is_empty() && self.settings.checker() && !self.shootdowns.records[sd].req.global {
            let s = &self.shootdowns.records[sd];
            let (mm, pages) = (s.req.mm, s.req.pages.clone());
            let mut skip: Vec<usize> = (0..self.cores.len()).filter(|c| !deferred_to.contains(c)).collect();
            skip.extend(s.flushed.iter().copied());
            self.mark_stale(mm, &pages, &[], &skip);
        }
        let waits = match sync_path {
            Some(path) => {
                let (send, same, cross, message) = match path {
                    Delivery::Message { latency, initiator_cycles, target_cycles } => {
                        self.shootdowns.records[sd].ack_return = latency;
                        self.shootdowns.records[sd].message_target_cycles = target_cycles;
                        (initiator_cycles, latency, latency, true)
                    }
                    _ => {
                        self.stats[core].shootdown_ipis_sent += n_sync as u64;
                        let c = self.settings.costs();
                        (c.ipi_send, c.ipi_delivery_same_socket, c.ipi_delivery_cross_socket, false)
                    }
                };
                let targets = plan.targets.iter().zip(&via).enumerate().filter(|(_, (_, d))| is_sync(d)).map(|(k, (t, _))| (k, t.0 as usize));
                // A hardware message is applied inside kernel paths too (as in `start`).
                self.send_in_order(core, sd, targets, n_sync, send, (same, cross), message, message);
                true
            }
            None => false,
        };
        for (k, (t, d)) in plan.targets.iter().zip(&via).enumerate() {
            if *d == Delivery::Free {
                self.deliver(t.0 as usize, sd, k);
                let now = self.clock(core);
                self.ack(sd, now, false);
            }
        }
        waits
    }

    /// Send request `sd` from `core` to `n` targets (each: its index among the request's
    /// targets, its core) one after another, `per_target_send` cycles of the initiator's
    /// each; each arrives `same` or `cross` cycles (its socket against the initiator's)
    /// after its send. The initiator then waits for their acks.
    #[allow(clippy::too_many_arguments)]
    fn send_in_order(
        &mut self,
        core: usize,
        sd: usize,
        targets: impl Iterator<Item = (usize, usize)>,
        n: u32,
        per_target_send: u64,
        (same, cross): (u64, u64),
        message: bool,
        masked_ok: bool,
    ) {
        let start = self.clock(core);
        let send = per_target_send * n as u64;
        self.charge(core, send);
        self.stats[core].shootdown_cycles_initiator_send += send;
        let send_end = self.clock(core);
        let s = &mut self.shootdowns.records[sd];
        s.send_end = send_end;
        s.last_ack = send_end;
        s.waits = true;
        self.cores[core].waiting += 1;
        self.cores[core].wait_counted_from = self.cores[core].wait_counted_from.max(send_end);
        let my_socket = self.m.cores[core].socket;
        for (sent, (k, t)) in targets.enumerate() {
            let delivery = if self.m.cores[t].socket == my_socket { same } else { cross };
            let arrival = start + per_target_send * (sent as u64 + 1) + delivery;
            // Pending interrupts are kept in arrival order.
            let q = &mut self.cores[t].pending;
            let at = q.partition_point(|i| i.arrival <= arrival);
            q.insert(at, Irq { arrival, shootdown: sd, target: k, message, masked_ok });
            self.mark_dirty(t);
        }
    }

    /// Request `sd` reaches `core` (its `target`-th target): the policy decides, the core
    /// flushes; counts a false positive if the core held no stale translation of the pages
    /// it was asked to flush.
    pub(super) fn deliver(&mut self, core: usize, sd: usize, target: usize) {
        let s = &self.shootdowns.records[sd];
        let (req, leaves) = (s.req.clone(), s.leaves.clone());
        let subset = s.pages_of.get(target).cloned().flatten();
        let view = self.core_view(core);
        let action = self.policy.on_deliver(CoreId(core as u32), &view, &req, self.settings.ceiling());
        let pages: &[Vpn] = subset.as_deref().map_or(&req.pages, |v| v.as_slice());
        // The leaves of the subset's pages, for the false-positive test.
        let sub_leaves: Vec<Option<u64>> = match &subset {
            None => leaves.to_vec(),
            Some(sub) => sub.iter().map(|v| req.pages.iter().position(|p| p == v).and_then(|i| leaves.get(i).copied().flatten())).collect(),
        };
        let mut held = req.global;
        let mut seen = super::checker::StaleSeen { pages, leaves: &sub_leaves, held: false };
        if !req.global && action != LocalFlush::Pages {
            held = self.holds_stale_with(core, req.mm, pages, &sub_leaves);
        }
        let all = self.apply_local(core, &req, pages, action, &mut seen);
        held |= seen.held;
        if all && subset.is_none() {
            self.shootdowns.records[sd].flushed.push(core);
        }
        if !held {
            self.stats[core].false_positive_targets += 1;
        }
    }

    /// Carry out a core's decision about request `req` for `pages`. Returns whether the core
    /// flushed the pages. `removed` sees the entries a per-page flush removes.
    fn apply_local<L: crate::tlb::hierarchy::TlbListener>(
        &mut self,
        core: usize,
        req: &FlushRequest,
        pages: &[Vpn],
        action: LocalFlush,
        removed: &mut L,
    ) -> bool {
        let pid = req.mm;
        match action {
            LocalFlush::Nothing => false,
            LocalFlush::Pages if !req.global => {
                if let Some(tag) = self.tag_on(core, pid) {
                    let mut pl = PolicyTlb { policy: &mut self.policy, fx: &mut self.fx };
                    self.m.cores[core].tlbs.invalidate_pages(pages, Some(tag), &mut super::Both(removed, &mut pl));
                }
                if pages.is_empty() && req.freed_tables {
                    // No page to INVLPG, but the page-walk caches may point to the freed
                    // tables (a recycling axis skipped every page's flush).
                    self.m.cores[core].tlbs.flush_pwc();
                }
                let n = pages.len() as u64;
                self.stats[core].pages_flushed += n;
                self.charge(core, self.settings.costs().invlpg * n);
                self.catch_up(core, pid, req.new_gen);
                self.apply_effects();
                true
            }
            LocalFlush::Pages | LocalFlush::Full if req.global => {
                self.full_flush_all(core, Cause::Shootdown);
                true
            }
            LocalFlush::Full | LocalFlush::Pages => {
                let cause = if req.full || req.pages.len() as u64 <= self.settings.ceiling() as u64 { Cause::Shootdown } else { Cause::Ceiling };
                self.full_flush_mm(core, pid, cause);
                self.catch_up(core, pid, req.new_gen);
                true
            }
            LocalFlush::Broadcast { all, .. } if all || req.global => {
                self.full_flush_all(core, Cause::Shootdown);
                true
            }
            LocalFlush::Broadcast { final_only, ceiling, .. } => {
                // INVLPGB by PCID and range: whatever this core runs, the address space's
                // tag loses the pages. A tag that missed a generation (the model's per-CPU
                // slots stand in for the global ASID) is flushed whole.
                let Some(tag) = self.tag_on(core, pid) else {
                    // No tag of the address space here (a CR3-tagged TLB whose tag table
                    // evicted it): no TLB entry to drop, but the walk caches, which the
                    // model does not tag, may still point to the tables this request freed;
                    // INVLPGB without FINAL_ONLY drops them (found by `tlbsim fuzz --policy
                    // linux-invlpgb --tagging cr3 --seed 1298 --scenarios 1`).
                    if req.freed_tables && !final_only {
                        self.m.cores[core].tlbs.flush_pwc();
                    }
                    return false;
                };
                let over = pages.len() as u64 > ceiling as u64;
                let next = self.cores[core].pcid.iter().find(|&&(p, _)| p == pid).is_some_and(|&(_, g)| g + 1 >= req.new_gen);
                if req.full || over || !next {
                    self.full_flush_mm(core, pid, if over && !req.full { Cause::Ceiling } else { Cause::Shootdown });
                    return true;
                }
                let mut pl = PolicyTlb { policy: &mut self.policy, fx: &mut self.fx };
                let tlbs = &mut self.m.cores[core].tlbs;
                if final_only {
                    tlbs.invalidate_leaves(pages, Some(tag), &mut super::Both(removed, &mut pl));
                } else {
                    tlbs.invalidate_pages(pages, Some(tag), &mut super::Both(removed, &mut pl));
                    if pages.is_empty() && req.freed_tables {
                        tlbs.flush_pwc();
                    }
                }
                self.stats[core].pages_flushed += pages.len() as u64;
                self.catch_up(core, pid, req.new_gen);
                self.apply_effects();
                true
            }
            LocalFlush::LeaveMask => {
                if !req.global {
                    self.spaces[pid as usize].cpumask[core] = false;
                }
                false
            }
            LocalFlush::DropLazyMm => {
                // switch_mm to init_mm: the borrowed mm's entries go.
                match self.cores[core].loaded_mm {
                    Some(loaded) if req.global => self.drop_lazy_mm(core, loaded),
                    None if req.global => self.full_flush_all(core, Cause::Shootdown),
                    _ => self.drop_lazy_mm(core, pid),
                }
                true
            }
        }
    }

    /// A kernel path of `core` ran from `start` to now. With interrupts taken at arrival,
    /// the paths of one engine step are joined: an interrupt that arrived during any of them
    /// (or between them: the core would have taken it at once) counts as taken at arrival.
    pub(super) fn set_kernel_span(&mut self, core: usize, start: u64) {
        let now = self.clock(core);
        let c = &mut self.cores[core];
        let (from, to) = c.kernel_span;
        let joined = self.settings.kernel_interrupts_at_arrival() && to > c.step_start && from <= start;
        c.kernel_span = (if joined { from } else { start }, now);
    }

    /// Take every interrupt (and hardware message) already due on a running core.
    pub(super) fn take_due_interrupts(&mut self, core: usize) {
        while let Some(irq) = self.cores[core].pending.front().copied() {
            if irq.arrival > self.clock(core) {
                break;
            }
            self.cores[core].pending.pop_front();
            self.handle_irq(core, irq);
        }
    }

    fn handle_irq(&mut self, core: usize, irq: Irq) {
        let sd = irq.shootdown;
        let start = self.clock(core);
        let (kernel_from, kernel_to) = self.cores[core].kernel_span;
        let in_kernel = irq.arrival >= kernel_from && irq.arrival < kernel_to && start >= kernel_to;
        // Taken inside the kernel path: acknowledged as of its arrival. The flush is applied
        // now, before the core's next user access, which is what its TLB would have seen.
        // Arrived within the computation the core is still at the end of (`Leap`): taken as
        // of its arrival (or of the end of the interrupt taken before it), the computation
        // pushed back by the handler.
        let leap = self.live_leap(core).filter(|l| irq.arrival < l.end_raw >> CLOCK_SHIFT);
        let in_kernel_at_arrival = in_kernel && (irq.masked_ok || self.settings.kernel_interrupts_at_arrival());
        let taken_at = if in_kernel_at_arrival { Some(irq.arrival) } else { leap.map(|l| irq.arrival.max(l.from)) };
        if in_kernel && !in_kernel_at_arrival {
            self.stats[core].shootdowns_taken_on_kernel_exit += 1;
        }
        let targets = self.shootdowns.records[sd].targets as u64;
        if irq.message {
            self.stats[core].shootdown_messages_received += 1;
            self.charge(core, self.shootdowns.records[sd].message_target_cycles);
        } else {
            self.stats[core].shootdown_ipis_received += 1;
            self.charge(
                core,
                self.settings.costs().interrupt + self.settings.costs().ack + self.settings.costs().ack_contention_per_target * targets.saturating_sub(1),
            );
        }
        self.deliver(core, sd, irq.target);
        let spent = self.clock(core) - start;
        self.stats[core].shootdown_cycles_target += spent;
        let done_at = taken_at.map_or(self.clock(core), |at| at + spent);
        if let Some(l) = leap {
            let end_raw = self.m.cores[core].clock;
            self.cores[core].leap = Some(super::Leap { end_raw, from: done_at, floor: l.floor.max(done_at), ..l });
        }
        self.ack(sd, done_at, true);
    }

    /// Target of `sd` done at `done_at`; `sync`: one the initiator waits for (reached by an
    /// interrupt or a message, not deferred).
    fn ack(&mut self, sd: usize, done_at: u64, sync: bool) {
        let s = &mut self.shootdowns.records[sd];
        s.acks_left -= 1;
        if sync {
            s.sync_left -= 1;
            s.last_ack = s.last_ack.max(done_at);
        }
        if sync && s.sync_left == 0 && s.waits {
            s.waits = false;
            {
                let initiator = s.initiator;
                let (last, send_end) = (s.last_ack + s.ack_return, s.send_end);
                // The initiator spun from the end of its sends to the last ack (interrupts it
                // took meanwhile included), counted once where requests overlap.
                let resume = self.clock(initiator).max(last);
                let from = self.cores[initiator].wait_counted_from.max(send_end);
                self.stats[initiator].shootdown_cycles_initiator_wait += resume.saturating_sub(from);
                self.cores[initiator].wait_counted_from = resume;
                self.set_clock(initiator, resume);
                self.cores[initiator].waiting -= 1;
                if self.cores[initiator].waiting == 0 {
                    self.sched.note_initiator_resumed();
                    self.on_initiator_resumed(initiator, resume);
                }
            }
        }
        if self.shootdowns.records[sd].acks_left == 0 {
            self.complete(sd);
        }
    }

    /// Apply the requests deferred to `core` (its tick or context switch).
    pub(super) fn apply_deferred(&mut self, core: usize) {
        if self.cores[core].deferred.is_empty() {
            return;
        }
        let list = std::mem::take(&mut self.cores[core].deferred);
        for (sd, target) in list {
            let start = self.clock(core);
            self.deliver(core, sd, target);
            self.stats[core].shootdown_cycles_target += self.clock(core) - start;
            let now = self.clock(core);
            self.ack(sd, now, false);
        }
    }

    /// The protocol is over: free what the change released and let the checker mark every
    /// translation still cached that disagrees with the page table.
    fn complete(&mut self, sd: usize) {
        let s = &mut self.shootdowns.records[sd];
        s.done = true;
        let frames = std::mem::take(&mut s.frames);
        let tables = std::mem::take(&mut s.tables);
        let req = s.req.clone();
        let flushed = std::mem::take(&mut s.flushed);
        let initiator = s.initiator;
        let (seq, transit) = (s.recycling_seq, std::mem::take(&mut s.frames_in_transit));
        if req.global {
            if self.shootdowns.global[initiator].is_some_and(|(i, _)| i == sd) {
                self.shootdowns.global[initiator] = None;
            }
            self.global_done(seq, &transit);
        } else {
            for v in &req.pages {
                if let std::collections::hash_map::Entry::Occupied(mut e) = self.shootdowns.pages.entry((req.mm, v.0)) {
                    *e.get_mut() -= 1;
                    if *e.get() == 0 {
                        e.remove();
                    }
                }
            }
        }
        if self.settings.checker() {
            if req.global {
                self.mark_stale_everywhere(&flushed);
            } else {
                // A page that a later change of the same address space is still flushing
                // is left to that protocol: the page table already shows its new state,
                // which cores may legitimately not have caught up with yet.
                // (`pages_in_flight` counts the pages of the requests not yet done; this
                // one's were taken out above.)
                let in_flight = |p: &Vpn| self.shootdowns.pages.contains_key(&(req.mm, p.0));
                if !req.pages.iter().any(in_flight) {
                    self.mark_stale(req.mm, &req.pages, &tables, &flushed);
                } else {
                    let pages: Vec<Vpn> = req.pages.iter().copied().filter(|p| !in_flight(p)).collect();
                    self.mark_stale(req.mm, &pages, &tables, &flushed);
                }
            }
        }
        self.release(initiator, frames, tables);
        // Completed records are dropped from the tail so the vector stays short.
        while self.shootdowns.records.last().is_some_and(|s| s.done) {
            self.shootdowns.records.pop();
        }
    }

    /// Free frames and page-table pages on `core`'s lists.
    pub(crate) fn release(&mut self, core: usize, frames: Vec<(Pfn, u32)>, tables: Vec<u32>) {
        self.lru_release(core, &frames);
        for (pfn, order) in frames {
            self.free_frame(core, pfn, order);
        }
        self.m.pt.release_tables(&mut self.m.mem, &tables);
    }
}
