//! FPR, fast page recycling ("Skip TLB flushes for reused pages within mmap's", §IV–§V;
//! MECHANISMS.md "FPR"), selected by `os.recycling = "fpr"` (parameters `[recycling.fpr]`).
//!
//! Modelled:
//! - `MAP_FPR` per mapping (`MapSpec::recyclable`: `recyclable = true` on a scenario
//!   mmap), or on every mmap of the program
//!   (`all_mmaps`, standing in for the paper's interception library, §IV-C3);
//! - a 64-bit tracking word per frame (§IV-C6): 2 flags (bit 63: always send a shootdown,
//!   set when two buddies of different contexts merge; bit 62 unused, as the paper leaves
//!   its meaning open), a 22-bit context ID (0: no recycling expected) and a 40-bit
//!   version; kept by the engine through the per-CPU lists and the buddy allocator,
//!   merged as §IV-C4 says ([`merge`]) and copied to both halves of a split;
//! - recycling contexts per mmap, per process (default), per process tree, per user
//!   (`context`, §IV-C2; the model has one user);
//! - munmap of a page in its mapping's context skips the remote shootdown (§IV-A); the
//!   initiator still invalidates its own entries;
//! - an allocation that takes a page out of its context (to a plain use or another
//!   context) sends a global shootdown, but only if the page's version equals the global
//!   shootdown counter (§IV-C5), which every global shootdown advances; a free records
//!   the counter in the page's version. The paper's kernel flushes synchronously; here a
//!   global request may still be in flight on other cores, so the comparison is with the
//!   last *completed* one, and an allocation covered by its own core's request in flight
//!   joins it (one shootdown per run of allocations, as in the paper);
//! - the per-process VA cursor (§IV-B): each mmap is placed below the last one, never
//!   reusing an address while stale entries may exist; `va_cursor = false` is the
//!   deliberately unsafe variant (Fig. 5a's ABA case, which `tlbsim fuzz` catches);
//!   MAP_FIXED sends a shootdown of the range;
//! - reclaim (§IV-B): pages in a recycling context are not evicted between the low and
//!   high watermarks; at the min watermark they go in one huge batch with one shootdown.
//!
//! Not in the paper, off by default (`recycle_tables`): with the cursor, a small mapping
//! soon lies alone in its 2 MiB region, so its munmap frees the page-table page (Linux's
//! free_pgtables) and that needs a flush of every core's page-walk caches, lazy cores
//! included, even when every page skips its own. The paper counts no shootdowns in case 2,
//! so its kernel did not send these; skipping them safely needs the same idea applied to
//! the tables: the freed table pages are kept (frame and arena slot) for the context's next
//! tables, so a stale page-walk-cache entry can only lead to a table of the same context.
//!
//! - page migration (§IV-C4): the target frame takes the source's context (a target
//!   leaving another context sends the shootdown); the source, freed after the
//!   migration's flush, keeps its context like any freed page.
//!
//! Simplified: a munmap skips the flush of a page only when the page's context is the
//! mapping's own (the paper's test is "ID ≠ 0"; with a page-cache page read by one
//! process's FPR mapping and mapped by another's, skipping for the second would let the
//! first recycle the frame under the second's stale entries, so the model asks for the
//! same context). Context IDs wrap at 2^22 - 1 (per-mmap contexts of very long runs). Fork
//! keeps per-tree and per-user contexts and gives the child its own per-process context
//! (the child's unmaps of the parent's pages are then not skipped); the paper's "one
//! shootdown, then new contexts" is not needed for safety here and not modelled.

use super::{AllocAction, AllocUse, Recycling};
use crate::error::Result;
use crate::types::CoreId;
use crate::workload::program::MapSpec;
use serde::{Deserialize, Serialize};

/// "Always send a shootdown for this region" (§IV-C4).
pub const FLAG_ALWAYS: u64 = 1 << 63;
const ID_SHIFT: u32 = 40;
const ID_BITS: u32 = 22;
const ID_MASK: u64 = (1 << ID_BITS) - 1;
const VERSION_MASK: u64 = (1 << ID_SHIFT) - 1;

/// Recycling-context ID of a tracking word.
pub fn context_of(word: u64) -> u32 {
    ((word >> ID_SHIFT) & ID_MASK) as u32
}

/// Version of a tracking word.
pub fn version_of(word: u64) -> u64 {
    word & VERSION_MASK
}

/// A tracking word.
pub fn word(flags: u64, context: u32, version: u64) -> u64 {
    flags | ((context as u64 & ID_MASK) << ID_SHIFT) | (version & VERSION_MASK)
}

/// Two free buddies merge (§IV-C4): one tracked → the merged block is tracked in its
/// context; both tracked with different IDs → "always shootdown", version the larger.
pub fn merge(a: u64, b: u64) -> u64 {
    let (ca, cb) = (context_of(a), context_of(b));
    let flags = (a | b) & FLAG_ALWAYS;
    let version = version_of(a).max(version_of(b));
    match (ca, cb) {
        (0, 0) => word(flags, 0, version),
        (c, 0) | (0, c) => word(flags, c, version),
        (x, y) if x == y => word(flags, x, version),
        (x, _) => word(FLAG_ALWAYS, x, version),
    }
}

/// Scope of a recycling context (§IV-C2).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ContextScope {
    /// One context per FPR mapping: recycling only through page-cache eviction.
    Mmap,
    /// One per process (the paper's default).
    Process,
    /// One per process and its children (fork tree).
    Tree,
    /// One for every process of the user (the model has one user).
    User,
}

crate::params! {
    /// `[recycling.fpr]`.
    pub struct FprParams {
        /// Every mmap of the workload gets MAP_FPR (the paper's interception library, §V).
        pub all_mmaps: bool = false,
        /// Recycling-context scope: `mmap`, `process` (default, §IV-C2's default), `tree`, `user`.
        pub context: ContextScope = ContextScope::Process,
        /// The per-process VA cursor against the ABA problem (§IV-B). false: the deliberately
        /// unsafe variant (mmap reuses addresses whose stale entries may live on).
        pub va_cursor: bool = true,
        /// Recycle page-table pages too (not in the paper; see the module comment): a munmap
        /// whose pages all skip their flush keeps the page-table pages it frees for the same
        /// context's next tables instead of flushing the page-walk caches of every core.
        pub recycle_tables: bool = false,
    }
}

impl crate::registry::ParamKind for ContextScope {
    const KIND: &'static str = "\"mmap\", \"process\", \"tree\" or \"user\"";
}

impl crate::registry::Plugin for Fpr {
    type Params = FprParams;
}

impl super::Scheme for Fpr {
    fn build(_cfg: &crate::config::Config, params: FprParams) -> Result<Fpr> {
        Fpr::new(params)
    }
}

#[derive(Default, Serialize)]
struct FprStats {
    /// munmaps whose remote shootdown was skipped entirely.
    munmap_flushes_skipped: u64,
    /// Pages whose remote flush a munmap skipped.
    munmap_pages_skipped: u64,
    /// Pages a munmap of an FPR mapping still flushed (not in the mapping's context).
    munmap_pages_flushed: u64,
    /// Allocations that took a page out of its context and sent a global shootdown.
    context_exit_flushes: u64,
    /// ... and those that did not need one (a global shootdown since the page's free).
    context_exit_flushes_skipped: u64,
    /// Allocations that got a page back in the context it was freed from.
    pages_recycled: u64,
    /// Pages evicted in min-watermark batches, and the shootdowns those batches sent.
    batch_evictions: u64,
    batch_eviction_shootdowns: u64,
    /// Page-table pages a munmap kept for the context instead of flushing (`recycle_tables`).
    tables_kept: u64,
    /// MAP_FIXED mappings that sent a shootdown of their range.
    fixed_mapping_flushes: u64,
    /// Global shootdowns (every cause): the counter the versions are compared with.
    global_shootdowns: u64,
}

pub struct Fpr {
    params: FprParams,
    /// The global shootdown counter (§IV-C5): global shootdowns started.
    counter: u64,
    /// The highest counter value whose shootdown every core has completed. A free records
    /// `counter`; the page needs a shootdown when it leaves its context unless one started
    /// after the free has completed. The paper's kernel flushes synchronously, so there the
    /// two counters are equal and the rule is its `version == counter`; here an allocation
    /// may run on another core while a global request is still in flight, and skipping on
    /// the strength of that request would let a core still caching the page read it after
    /// it changed hands.
    completed: u64,
    /// Per process: the address below which its next mmap goes (the cursor, §IV-B).
    cursor: Vec<u64>,
    /// Per-mmap contexts: the next ID, and each ID's process (for the checker).
    next_mmap_context: u32,
    mmap_context_owner: std::collections::HashMap<u32, u32>,
    stats: FprStats,
}

impl Fpr {
    pub fn new(params: FprParams) -> Result<Fpr> {
        Ok(Fpr {
            params,
            counter: 1,
            completed: 1,
            cursor: Vec::new(),
            next_mmap_context: 0,
            mmap_context_owner: Default::default(),
            stats: FprStats::default(),
        })
    }

    fn process_context(&self, pid: u32, family: u32) -> u32 {
        let id = match self.params.context {
            ContextScope::Process | ContextScope::Mmap => pid,
            ContextScope::Tree => family,
            ContextScope::User => 0,
        };
        (id % (ID_MASK as u32 - 1)) + 1
    }

    /// The global counter (tests).
    pub fn counter(&self) -> u64 {
        self.counter
    }
}

impl Recycling for Fpr {
    fn enabled(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "fpr"
    }

    fn mapping_context(&mut self, pid: u32, family: u32, spec: &MapSpec) -> u32 {
        if !(spec.recyclable || self.params.all_mmaps) {
            return 0;
        }
        if self.params.context == ContextScope::Mmap {
            self.next_mmap_context = self.next_mmap_context % (ID_MASK as u32 - 1) + 1;
            self.mmap_context_owner.insert(self.next_mmap_context, pid);
            return self.next_mmap_context;
        }
        self.process_context(pid, family)
    }

    fn fork_context(&mut self, context: u32, _parent: u32, child: u32, family: u32) -> u32 {
        match (context, self.params.context) {
            (0, _) => 0,
            (_, ContextScope::Process) => self.process_context(child, family),
            (c, _) => c,
        }
    }

    fn choose_mmap_va(&mut self, pid: u32, len: u64, default_va: u64, is_free: &dyn Fn(u64, u64) -> bool) -> u64 {
        if !self.params.va_cursor {
            return default_va;
        }
        let p = pid as usize;
        if self.cursor.len() <= p {
            self.cursor.resize(p + 1, u64::MAX);
        }
        // Top-down like Linux, but below the last mapping handed out: the highest free
        // range that ends at or below the cursor.
        let cursor = self.cursor[p];
        let va = if cursor == u64::MAX || default_va + len <= cursor {
            default_va
        } else {
            let mut top = cursor;
            loop {
                if top < len || top - len < (1 << 30) {
                    // The address space below the cursor is exhausted: wrap (the paper
                    // does not say; a run would need 2^35 mappings to get here).
                    break default_va;
                }
                let lo = top - len;
                if is_free(lo, top) {
                    break lo;
                }
                top -= 4096;
            }
        };
        self.cursor[p] = va;
        va
    }

    fn fixed_mapping_needs_flush(&mut self, _pid: u32, _va: u64, _len: u64) -> bool {
        self.stats.fixed_mapping_flushes += 1;
        true
    }

    fn skip_unmap_flush(&mut self, context: u32, word: u64) -> bool {
        context != 0 && context_of(word) == context && word & FLAG_ALWAYS == 0
    }

    fn table_reuse_key(&self, pid: u32, family: u32) -> u32 {
        if self.params.recycle_tables && self.params.context != ContextScope::Mmap {
            self.process_context(pid, family)
        } else {
            0
        }
    }

    fn on_tables_kept(&mut self, tables: u64) {
        self.stats.tables_kept += tables;
    }

    fn on_unmap(&mut self, skipped: u64, flushed: u64) {
        self.stats.munmap_pages_skipped += skipped;
        self.stats.munmap_pages_flushed += flushed;
        if skipped > 0 && flushed == 0 {
            self.stats.munmap_flushes_skipped += 1;
        }
    }

    fn on_alloc(&mut self, _core: CoreId, w: &mut u64, usage: AllocUse) -> AllocAction {
        let old = *w;
        let (ctx, always) = (context_of(old), old & FLAG_ALWAYS != 0);
        let leaves = always || (ctx != 0 && ctx != usage.context);
        let mut action = AllocAction::None;
        if leaves {
            if version_of(old) >= self.completed & VERSION_MASK {
                if usage.global_in_flight & VERSION_MASK > version_of(old) {
                    // This core's own global request, sent after the free, is still in
                    // flight: waiting for it is the shootdown (a run of allocations shoots
                    // down once, as in the paper's synchronous kernel).
                    self.stats.context_exit_flushes_skipped += 1;
                    action = AllocAction::JoinGlobal;
                } else {
                    self.stats.context_exit_flushes += 1;
                    action = AllocAction::GlobalShootdown;
                }
            } else {
                self.stats.context_exit_flushes_skipped += 1;
            }
        } else if ctx != 0 {
            self.stats.pages_recycled += 1;
        }
        // A page outside any context needs no word (its version means nothing).
        *w = if usage.context == 0 { 0 } else { word(0, usage.context, version_of(old)) };
        action
    }

    fn migration_context(&self, source: u64) -> u32 {
        // §IV-C4: a source page in recycling gives its context to the target.
        context_of(source)
    }

    fn on_free(&mut self, w: &mut u64) {
        if context_of(*w) != 0 || *w & FLAG_ALWAYS != 0 {
            *w = word(*w & FLAG_ALWAYS, context_of(*w), self.counter);
        }
    }

    fn on_global_shootdown(&mut self) -> u64 {
        self.counter += 1;
        self.stats.global_shootdowns += 1;
        self.counter
    }

    fn on_global_shootdown_done(&mut self, seq: u64) {
        self.completed = self.completed.max(seq);
    }

    fn merge_words(&self) -> fn(u64, u64) -> u64 {
        merge
    }

    fn reclaim_holds(&self, w: &u64) -> bool {
        context_of(*w) != 0
    }

    fn on_batch_eviction(&mut self, pages: u64, shootdowns: u64) {
        self.stats.batch_evictions += pages;
        self.stats.batch_eviction_shootdowns += shootdowns;
    }

    fn permits_stale_use(&self, pid: u32, family: u32, w: u64) -> bool {
        let ctx = context_of(w);
        if ctx == 0 {
            return false;
        }
        match self.params.context {
            ContextScope::Mmap => self.mmap_context_owner.get(&ctx) == Some(&pid),
            _ => ctx == self.process_context(pid, family),
        }
    }

    fn tracking_bytes_per_frame(&self) -> u64 {
        8
    }

    fn stats_json(&self) -> serde_json::Value {
        serde_json::to_value(&self.stats).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fpr() -> Fpr {
        Fpr::new(FprParams::default()).unwrap()
    }

    #[test]
    fn word_fields_round_trip() {
        let w = word(FLAG_ALWAYS, 0x2a_bcde, 0x12_3456_789a);
        assert_eq!(context_of(w), 0x2a_bcde);
        assert_eq!(version_of(w), 0x12_3456_789a);
        assert_ne!(w & FLAG_ALWAYS, 0);
        assert_eq!(context_of(word(0, 1 << 22, 0)), 0, "the ID is 22 bits");
    }

    #[test]
    fn merging_follows_section_iv_c4() {
        let a = word(0, 5, 10);
        assert_eq!(merge(a, 0), a, "one tracked buddy: the block is tracked in its context");
        assert_eq!(merge(0, a), a);
        assert_eq!(merge(a, word(0, 5, 12)), word(0, 5, 12), "same context: the newer version");
        let m = merge(a, word(0, 7, 3));
        assert_ne!(m & FLAG_ALWAYS, 0, "different contexts: always shoot down");
        assert_eq!(version_of(m), 10, "version the larger of the two");
        assert_eq!(merge(0, 0), 0);
    }

    #[test]
    fn an_allocation_leaving_its_context_shoots_down_iff_its_version_is_the_counter() {
        let mut f = fpr();
        let ctx = f.process_context(3, 3);
        // Freed at counter 1 by process 3's context.
        let mut w = word(0, ctx, 0);
        f.on_free(&mut w);
        assert_eq!(version_of(w), 1);
        // Recycled in the same context: no shootdown, counted.
        let mut same = w;
        assert_eq!(f.on_alloc(CoreId(0), &mut same, AllocUse { global_in_flight: 0, context: ctx }), AllocAction::None);
        assert_eq!(f.stats.pages_recycled, 1);
        // Leaving (a plain use): shootdown, since no global one happened since the free.
        let mut leave = w;
        assert_eq!(f.on_alloc(CoreId(0), &mut leave, AllocUse { global_in_flight: 0, context: 0 }), AllocAction::GlobalShootdown);
        assert_eq!(context_of(leave), 0);
        // While that shootdown is in flight, a second page freed before it still needs one
        // (a core may still cache it); once it has completed, it leaves free.
        let seq = f.on_global_shootdown();
        let mut in_flight = w;
        assert_eq!(f.on_alloc(CoreId(0), &mut in_flight, AllocUse { global_in_flight: 0, context: 0 }), AllocAction::GlobalShootdown);
        // ... unless it is the allocating core's own request, which it waits for anyway.
        let mut joins = w;
        assert_eq!(f.on_alloc(CoreId(0), &mut joins, AllocUse { global_in_flight: seq, context: 0 }), AllocAction::JoinGlobal);
        f.on_global_shootdown_done(seq);
        let mut other = w;
        assert_eq!(f.on_alloc(CoreId(0), &mut other, AllocUse { global_in_flight: 0, context: f.process_context(4, 4) }), AllocAction::None);
        assert_eq!(f.stats.context_exit_flushes, 2);
        assert_eq!(f.stats.context_exit_flushes_skipped, 2);
        // A page freed after the shootdown carries the new counter and needs one again.
        let mut later = word(0, ctx, 0);
        f.on_free(&mut later);
        assert_eq!(f.on_alloc(CoreId(0), &mut later, AllocUse { global_in_flight: 0, context: 0 }), AllocAction::GlobalShootdown);
        // "Always" pages shoot down even when allocated back into their own context.
        let mut always = word(FLAG_ALWAYS, ctx, f.counter());
        assert_eq!(f.on_alloc(CoreId(0), &mut always, AllocUse { global_in_flight: 0, context: ctx }), AllocAction::GlobalShootdown);
        // An untracked page never does.
        let mut plain = 0;
        assert_eq!(f.on_alloc(CoreId(0), &mut plain, AllocUse { global_in_flight: 0, context: ctx }), AllocAction::None);
        assert_eq!(context_of(plain), ctx);
    }

    #[test]
    fn munmap_skips_only_pages_of_the_mappings_own_context() {
        let mut f = fpr();
        assert!(f.skip_unmap_flush(4, word(0, 4, 1)));
        assert!(!f.skip_unmap_flush(4, word(0, 5, 1)), "another context's page");
        assert!(!f.skip_unmap_flush(0, word(0, 0, 1)), "a plain mapping");
        assert!(!f.skip_unmap_flush(4, word(FLAG_ALWAYS, 4, 1)));
    }

    #[test]
    fn the_cursor_never_hands_out_an_address_twice() {
        let mut f = fpr();
        let top = 0x7000_0000_0000u64;
        // Linux would return `top - len` every time (the range was unmapped again).
        let free = |lo: u64, hi: u64| hi <= top && lo < hi;
        let mut seen = std::collections::HashSet::new();
        for _ in 0..100 {
            let va = f.choose_mmap_va(0, 8192, top - 8192, &free);
            assert!(seen.insert(va), "address {va:#x} reused");
        }
        let mut unsafe_variant = Fpr::new(FprParams { va_cursor: false, ..Default::default() }).unwrap();
        assert_eq!(unsafe_variant.choose_mmap_va(0, 8192, top - 8192, &free), top - 8192);
        assert_eq!(unsafe_variant.choose_mmap_va(0, 8192, top - 8192, &free), top - 8192);
    }

    #[test]
    fn contexts_follow_their_scope() {
        let plain = crate::workload::builder::anon(4096, true);
        let spec = plain.recyclable();
        let mut f = fpr();
        assert_eq!(f.mapping_context(2, 1, &plain), 0);
        assert_eq!(f.mapping_context(2, 1, &spec), f.mapping_context(2, 1, &spec));
        assert_ne!(f.mapping_context(2, 1, &spec), f.mapping_context(3, 1, &spec));
        let mut tree = Fpr::new(FprParams { context: ContextScope::Tree, ..Default::default() }).unwrap();
        assert_eq!(tree.mapping_context(2, 1, &spec), tree.mapping_context(3, 1, &spec));
        let mut per_mmap = Fpr::new(FprParams { context: ContextScope::Mmap, ..Default::default() }).unwrap();
        let (a, b) = (per_mmap.mapping_context(2, 2, &spec), per_mmap.mapping_context(2, 2, &spec));
        assert_ne!(a, b);
        assert!(per_mmap.permits_stale_use(2, 2, word(0, a, 1)));
        assert!(!per_mmap.permits_stale_use(3, 3, word(0, a, 1)));
        let mut all = Fpr::new(FprParams { all_mmaps: true, ..Default::default() }).unwrap();
        assert_ne!(all.mapping_context(2, 2, &plain), 0, "all_mmaps flags every mapping");
    }

    /// FPR §IV-C4 on hand-built sequences: the tracking word survives the per-CPU list,
    /// merges with a free buddy's by the axis' rule, and a split copies it to both halves.
    #[test]
    fn tracking_word_follows_pcp_lists_merges_and_splits() {
        use crate::memory::{FrameKind, FrameWord, PhysMem};
        use crate::types::{NodeId, Pfn};
        let mut m = PhysMem::with_pcp(1, 4, 1, 1); // per-CPU lists of 1: the second free spills
        m.merge_tracking = merge;
        let a = m.alloc_order(NodeId(0), 0, FrameKind::Data, 1).unwrap();
        let b = m.alloc_order(NodeId(0), 0, FrameKind::Data, 1).unwrap();
        assert_eq!((a, b), (Pfn(0), Pfn(1)), "buddies");
        assert!(m.tracked_claims.is_empty(), "fresh frames are untracked");
        // Through the per-CPU list: same frame, same word back, and the claim is reported.
        m.set_word(a, FrameWord::Tracking, word(0, 7, 3));
        m.free_on(CoreId(0), a);
        assert_eq!(m.alloc_on(CoreId(0), NodeId(0), FrameKind::Data, 1).unwrap(), a);
        assert_eq!(m.word(a, FrameWord::Tracking), word(0, 7, 3));
        assert_eq!(m.tracked_claims, vec![(a, 0)]);
        m.tracked_claims.clear();
        // One tracked buddy merges with an untracked one: the block keeps the context.
        m.set_word(b, FrameWord::Tracking, 0);
        m.free(a);
        m.free(b);
        let block = m.alloc_order(NodeId(0), 1, FrameKind::Data, 1).unwrap();
        assert_eq!(block, Pfn(0));
        assert_eq!(context_of(m.word(Pfn(0), FrameWord::Tracking)), 7);
        assert_eq!(context_of(m.word(Pfn(1), FrameWord::Tracking)), 7, "a claimed block's frames all get its word");
        // Different contexts merge into "always shoot down", version the larger.
        m.set_word(Pfn(0), FrameWord::Tracking, word(0, 7, 3));
        m.set_word(Pfn(1), FrameWord::Tracking, word(0, 9, 5));
        m.free(Pfn(0));
        m.free(Pfn(1));
        // Split: taking one frame of the merged block leaves its buddy with a copy.
        let x = m.alloc_order(NodeId(0), 0, FrameKind::Data, 1).unwrap();
        let y = m.alloc_order(NodeId(0), 0, FrameKind::Data, 1).unwrap();
        for f in [x, y] {
            let w = m.word(f, FrameWord::Tracking);
            assert_ne!(w & FLAG_ALWAYS, 0);
            assert_eq!(version_of(w), 5);
        }
    }
}
