//! Memory management of the OS model: mmap placement, page faults (anonymous zero-fill
//! with the shared zero page, transparent huge pages with fallback, page-cache pages with
//! fault-around, copy-on-write, swap-in), the system calls that change page tables
//! (munmap, mprotect, madvise(MADV_DONTNEED), msync, fork, exit, NUMA page migration),
//! reverse mapping, per-group accounting and kswapd-style reclaim.
//!
//! Each path follows the Linux function named in its comment (mm/mmap.c, mm/memory.c,
//! mm/mprotect.c, mm/madvise.c, mm/msync.c + mm/rmap.c page_mkclean, kernel/fork.c
//! dup_mmap, mm/migrate.c, mm/vmscan.c) at the level of which PTEs change, which frames
//! come and go through which lists, and which TLB flush request results.
//!
//! Simplified: msync's page_mkclean flushes per page in Linux; here one batched request
//! covers the pages an msync cleans. Reclaim skips huge pages. A page-cache miss stalls
//! the core for `costs.read_page`, except in a demand fault on a storage device whose
//! reads sleep (`machine.storage`: the SSDs), where the thread blocks for it.
//!
//! One file per path: `fault.rs` (demand faults), `fork.rs` (fork, copy-on-write, exit),
//! `mmap.rs` (mmap, munmap, zap), `protect.rs` (madvise, mprotect, msync), `steps.rs`
//! (munmap, mprotect and madvise one page-table page at a time), `migrate.rs`,
//! `rmap.rs`, `reclaim.rs`, and `frames.rs` (allocating and freeing frames); this file
//! holds what they share.

mod fault;
mod fork;
mod frames;
mod migrate;
mod mmap;
mod protect;
mod reclaim;
mod rmap;
mod steps;

pub(crate) use reclaim::MemGroups;
pub(crate) use steps::{RangeCall, RangeKind};

use crate::coherence::Coherence;
use crate::error::{Error, Result};
use crate::memory::FrameKind;
use crate::os::{Os, Vma};
use crate::page_table::{PTE_DIRTY, PTE_USER, PTE_WRITABLE};
use crate::types::{NodeId, PageSize, Pfn};

pub(super) const PAGE: u64 = 4096;
pub(super) const HUGE: u64 = 2 << 20;
/// End of x86-64's 47-bit user address space (TASK_SIZE_MAX, rounded).
const USER_TOP: u64 = 1 << 47;

impl<P: Coherence> Os<P> {
    /// Node a new data frame comes from for a fault on `core`.
    fn data_node(&mut self, core: usize) -> NodeId {
        let nodes = self.m.mem.nodes();
        self.settings.data_placement().node(self.m.cores[core].socket, nodes, &mut self.interleave_next)
    }

    fn vma_at(&self, pid: u32, va: u64) -> Option<(u64, Vma)> {
        let (&start, vma) = self.spaces[pid as usize].vmas.range(..=va).next_back()?;
        (va < vma.end).then(|| (start, vma.clone()))
    }

    /// Map one page in `pid`'s tree, page-table pages placed by `os.pt_placement`.
    #[allow(clippy::too_many_arguments)]
    fn map_page(&mut self, core: usize, pid: u32, va: u64, pfn: Pfn, size: PageSize, writable: bool, dirty: bool) -> Result<()> {
        // A PTE never maps a free frame (checked in release builds too: a frame freed
        // under a fault would be handed out again while mapped, its map count reset).
        if self.m.mem.desc(pfn).kind == FrameKind::Free {
            return Err(Error::Sim(format!("process {pid}: mapping {va:#x} to frame {:#x}, which is free", pfn.0)));
        }
        let mut flags = PTE_USER;
        if writable {
            flags |= PTE_WRITABLE;
        }
        if dirty {
            flags |= PTE_DIRTY;
        }
        self.pte_map(core, pid, va, pfn, size, flags)?;
        if let Some(mapped) = self.fault_mapped.as_mut() {
            mapped.push(va);
        }
        if Some(pfn) != self.zero_page {
            let count = self.m.mem.mapcount(pfn);
            self.m.mem.set_mapcount(pfn, count + 1);
        }
        Ok(())
    }
}

/// Owner recorded for page-cache frames (they belong to a file, not a process).
pub(crate) const PAGE_CACHE_OWNER: u32 = u32::MAX - 1;
