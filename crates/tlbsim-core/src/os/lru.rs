//! The LRU lock: per-CPU LRU batches of new pages and the lruvec lock of each node that
//! draining them and freeing pages take (the lock the INVLPGB series' cover letter says the
//! contention of will-it-scale `tlb_flush2_threads` moved to, ../shared/research/
//! modern_invalidation.md §3; issue 48 item 5).
//!
//! Followed (mm/swap.c of Linux 6.x, read at github.com/torvalds/linux):
//! - `folio_add_lru` (from `folio_add_lru_vma` after a fault maps a new page) takes a
//!   reference and puts the folio in the CPU's `cpu_fbatches.lru_add` batch
//!   (`__folio_batch_add_and_move`); when `folio_batch_add` leaves no space, or the folio is
//!   large (`folio_may_be_lru_cached`), the batch is moved at once (`folio_batch_move_lru`).
//!   The batch holds `PAGEVEC_SIZE` = 31 folios (include/linux/pagevec.h, now
//!   folio_batch.h: "31 pointers + header align the folio_batch structure to a power of
//!   two"; 15 before Matthew Wilcox's "increase PAGEVEC_SIZE from 15 to 31", 2024, which
//!   the kernel test robot measured on will-it-scale in March 2024).
//! - `folio_batch_move_lru` adds the batch's folios to their lruvec under its `lru_lock`
//!   (relocking when the lruvec changes, `folio_lruvec_relock_irqsave`), unlocks, then
//!   `folios_put` drops the batch's references: a folio whose last reference that was (the
//!   page was unmapped while it waited in the batch) is freed, and `__page_cache_release`
//!   deletes it from the LRU under the lock again.
//! - `lru_add_drain` → `lru_add_drain_cpu` moves the CPU's batch. madvise(MADV_DONTNEED)
//!   calls it in `zap_page_range_single` before `tlb_gather_mmu`, munmap in the unmap path
//!   (`unmap_region` / `vms_clear_ptes` in mm/vma.c), exit in `exit_mmap`; Rik van Riel's
//!   "mm: remove unnecessary calls to lru_add_drain" (lkml 2024-12-19, the companion of the
//!   INVLPGB series, commit 3b248a9f3d5c and others in the mm tree's January 2025 merges)
//!   removed those calls ("not likely to be effective at anything but creating lock
//!   contention on the LRU locks"). `os.lru_drain_on_unmap` chooses the kernel.
//! - Freeing the unmapped pages after the TLB flush (`tlb_finish_mmu` →
//!   `free_pages_and_swap_cache` → `release_pages` → `folios_put_refs`) takes the lruvec
//!   lock, once per run of folios of one lruvec, for each folio that is on the LRU.
//!
//! Modelled: one batch per CPU; one lruvec lock per NUMA node (Linux has one per memcg and
//! node; the model's memory groups do not split it); the data frames of faults (anonymous,
//! page cache, copy-on-write, swap-in: `alloc_data`) go through the batch and join the
//! group's reclaim LRU only when it is drained (a page in a batch is not on the LRU, so
//! reclaim cannot meet it); the drain holds the lock for `costs.lru_lock_acquire` plus
//! `costs.lru_per_page` per folio (locks.rs `lruvec_section`); a page unmapped while in a
//! batch is added and deleted again at the drain (two acquisitions, as
//! `folio_batch_move_lru` then `folios_put` do); a page unmapped from the LRU is deleted
//! under the lock when the flush's frames are freed.
//!
//! Simplified: a frame unmapped while in a batch goes back to the page allocator when its
//! flush completes (Linux keeps it, referenced by the batch, until the drain frees it); the
//! drain in `free_pages_and_swap_cache` (also removed by the patch) is not modelled apart:
//! the madvise/munmap drain just before it has emptied the batch, and the system call maps
//! nothing meanwhile; huge pages (THP) and page tables bypass the LRU as before; reclaim's
//! isolation and putback, migration's putback, mark_page_accessed's activations and the
//! other per-CPU batches (`lru_move_tail`, `lru_deactivate`, `lru_lazyfree`,
//! `lru_activate`) take no lruvec lock here; `lru_add_drain_all` is not modelled.

use super::Os;
use crate::coherence::Coherence;
use crate::memory::{node_of, FrameWord};
use crate::types::Pfn;

/// `PAGEVEC_SIZE` (include/linux/pagevec.h, Linux 6.10 and later): folios per batch.
pub(crate) const BATCH_SIZE: usize = 31;

/// Bit of a frame's `LruStamp` word while the frame waits in a CPU's batch: the stamp it
/// will carry on the LRU is in the other bits.
const IN_BATCH: u64 = 1 << 63;
/// `LruStamp` of a frame on the LRU whose last PTE is gone and that is freed when its flush
/// completes: the free deletes it from the LRU under the lock. Never a stamp.
pub(crate) const LRU_FREEING: u64 = 1 << 62;

/// One CPU's `cpu_fbatches.lru_add`: a fixed array, so adding never allocates.
#[derive(Clone, Copy)]
pub(crate) struct LruBatch {
    /// Frame, the `LruStamp` word it was given when added, its memory group.
    entries: [(Pfn, u64, u32); BATCH_SIZE],
    len: usize,
}

impl Default for LruBatch {
    fn default() -> Self {
        LruBatch { entries: [(Pfn(0), 0, 0); BATCH_SIZE], len: 0 }
    }
}

impl LruBatch {
    /// Add a folio (`folio_batch_add`). True when the batch is now full and must be moved.
    pub(crate) fn add(&mut self, pfn: Pfn, word: u64, group: u32) -> bool {
        self.entries[self.len] = (pfn, word, group);
        self.len += 1;
        self.len == BATCH_SIZE
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The folios in the batch, oldest first.
    pub(crate) fn entries(&self) -> &[(Pfn, u64, u32)] {
        &self.entries[..self.len]
    }

    fn clear(&mut self) {
        self.len = 0;
    }
}

/// The per-CPU batches and their counters (stats.json `totals.locks.lru`).
#[derive(Default)]
pub(crate) struct Lru {
    batches: Vec<LruBatch>,
    /// Folios put in a batch.
    pub added: u64,
    /// Batches moved because they were full.
    pub drains_full: u64,
    /// Non-empty batches moved by `lru_add_drain` (madvise, munmap, exit).
    pub drains_unmap: u64,
    /// Folios whose last reference the drain dropped (unmapped while in the batch).
    pub freed_from_batch: u64,
    /// Folios deleted from the LRU when freed after an unmap.
    pub deleted_on_free: u64,
}

impl Lru {
    pub(crate) fn new(cores: usize) -> Lru {
        Lru { batches: vec![LruBatch::default(); cores], ..Default::default() }
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "batch_size": BATCH_SIZE,
            "folios_added": self.added,
            "drains_full": self.drains_full,
            "drains_unmap": self.drains_unmap,
            "freed_from_batch": self.freed_from_batch,
            "deleted_on_free": self.deleted_on_free,
        })
    }
}

impl<P: Coherence> Os<P> {
    /// `folio_add_lru`: the new data frame `pfn` of memory group `group` waits in `core`'s
    /// batch; a full batch is moved to the LRU.
    pub(super) fn lru_add(&mut self, core: usize, pfn: Pfn, group: usize) {
        let word = self.groups.next_stamp() | IN_BATCH;
        self.m.mem.set_word(pfn, FrameWord::LruStamp, word);
        self.lru.added += 1;
        if self.lru.batches[core].add(pfn, word, group as u32) {
            self.lru.drains_full += 1;
            self.lru_move_batch(core);
        }
    }

    /// `lru_add_drain` on `core`, from madvise(MADV_DONTNEED), munmap and exit, unless the
    /// kernel is the one without those calls (`os.lru_drain_on_unmap = false`).
    pub(super) fn lru_drain_on_unmap(&mut self, core: usize) {
        if self.settings.lru_drain_on_unmap() && self.lru.batches[core].len() > 0 {
            self.lru.drains_unmap += 1;
            self.lru_move_batch(core);
        }
    }

    /// `folio_batch_move_lru(fbatch, lru_add)`: every folio of `core`'s batch goes onto its
    /// node's LRU under the lruvec lock (one hold per run of one node); then `folios_put`
    /// frees those unmapped meanwhile, deleting them from the LRU under the lock again.
    fn lru_move_batch(&mut self, core: usize) {
        let batch = self.lru.batches[core];
        self.lru.batches[core].clear();
        let entries = batch.entries();
        self.lru_locked_runs(core, entries.iter().map(|e| e.0));
        let mut dead = [Pfn(0); BATCH_SIZE];
        let mut n = 0;
        for &(pfn, word, group) in entries {
            if self.m.mem.word(pfn, FrameWord::LruStamp) == word {
                let stamp = word & !IN_BATCH;
                self.m.mem.set_word(pfn, FrameWord::LruStamp, stamp);
                self.groups.lru_push(group as usize, pfn, stamp);
            } else {
                dead[n] = pfn;
                n += 1;
            }
        }
        if n > 0 {
            self.lru.freed_from_batch += n as u64;
            self.lru_locked_runs(core, dead[..n].iter().copied());
        }
    }

    /// The lruvec lock held by `core` over `frames` in order, taken again whenever the node
    /// changes (`folio_lruvec_relock_irqsave`).
    fn lru_locked_runs(&mut self, core: usize, frames: impl Iterator<Item = Pfn>) {
        let mut run: Option<(usize, u64)> = None;
        let mut runs = [(0usize, 0u64); BATCH_SIZE];
        let mut n = 0;
        for pfn in frames {
            let node = node_of(pfn).0 as usize;
            match run {
                Some((at, ref mut k)) if at == node => *k += 1,
                _ => {
                    if let Some(r) = run.take() {
                        if n < BATCH_SIZE {
                            runs[n] = r;
                            n += 1;
                        }
                    }
                    run = Some((node, 1));
                }
            }
        }
        if let Some(r) = run {
            if n < BATCH_SIZE {
                runs[n] = r;
                n += 1;
            }
        }
        for &(node, k) in &runs[..n] {
            self.lruvec_section(core, node, k);
        }
    }

    /// The last PTE of `pfn` is gone (zap): if it is on the LRU, the free after the flush
    /// deletes it under the lock; if it waits in a batch, the batch's drain will.
    pub(super) fn lru_unmapped(&mut self, pfn: Pfn) {
        let word = self.m.mem.word(pfn, FrameWord::LruStamp);
        let next = if word & IN_BATCH != 0 || word == 0 { 0 } else { LRU_FREEING };
        self.m.mem.set_word(pfn, FrameWord::LruStamp, next);
    }

    /// `release_pages` of the frames a flush freed, on `core`: those on the LRU leave it
    /// under their node's lruvec lock, one hold per run of one node.
    pub(super) fn lru_release(&mut self, core: usize, frames: &[(Pfn, u32)]) {
        let mut node_run: Option<(usize, u64)> = None;
        for &(pfn, order) in frames {
            if order != 0 || self.m.mem.word(pfn, FrameWord::LruStamp) != LRU_FREEING {
                continue;
            }
            self.lru.deleted_on_free += 1;
            let node = node_of(pfn).0 as usize;
            match node_run {
                Some((at, ref mut k)) if at == node => *k += 1,
                Some((at, k)) => {
                    self.lruvec_section(core, at, k);
                    node_run = Some((node, 1));
                }
                None => node_run = Some((node, 1)),
            }
        }
        if let Some((at, k)) = node_run {
            self.lruvec_section(core, at, k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_full_at_exactly_pagevec_size() {
        let mut b = LruBatch::default();
        for i in 0..BATCH_SIZE - 1 {
            assert!(!b.add(Pfn(i as u64), 1, 0), "not full after {} folios", i + 1);
        }
        assert!(b.add(Pfn(99), 1, 0), "full at the 31st folio");
        assert_eq!(b.len(), 31);
        assert_eq!(b.entries().last().unwrap().0, Pfn(99));
        b.clear();
        assert_eq!(b.len(), 0);
        assert!(!b.add(Pfn(1), 1, 0));
    }
}
