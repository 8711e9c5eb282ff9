//! The native page-table backend: one tree per address space, each table page placed on a
//! node by a fixed rule (Mitosis §3.1 and §6.1's settings for the experiments without
//! replication): `first-touch` (the node of the socket whose core allocated it: Linux's
//! default), `interleave` (round-robin over the nodes) or `fixed:N` (Mitosis' "fix the
//! allocation of page-tables on a particular socket"). The root table follows the same
//! rule. Writes go to the one tree.

use super::{PageTableBackend, PtCtx, PtOptions};
use crate::error::Result;
use crate::page_table::{Leaf, PageTables};
use crate::types::{PageSize, Pfn};

pub use crate::config::Placement;

pub struct Native {
    placement: Placement,
    nodes: u32,
    /// Round-robin cursor of `interleave` (page tables only; data has its own).
    interleave_next: u32,
}

impl Native {
    pub fn new(placement: Placement, nodes: u32) -> Native {
        Native { placement, nodes, interleave_next: 0 }
    }
}

impl crate::registry::Plugin for Native {
    type Params = crate::registry::NoParams;
}

impl super::Backend for Native {
    fn build(cfg: &crate::config::Config, spec: &str, _params: crate::registry::NoParams) -> crate::error::Result<Native> {
        Ok(Native::new(Placement::parse("os.pt_placement", spec, cfg.machine.sockets)?, cfg.machine.sockets))
    }
}

impl PageTableBackend for Native {
    /// One tree per process: `opts.replica_sockets` does not apply (ignored).
    fn create(&mut self, ctx: &mut PtCtx<'_>, mm: u32, socket: u32, _opts: &PtOptions) -> Result<u32> {
        let node = self.placement.node(socket, self.nodes, &mut self.interleave_next);
        ctx.pt.alloc_table(ctx.mem, node, mm)
    }

    fn map(&mut self, ctx: &mut PtCtx<'_>, mm: u32, root: u32, va: u64, pfn: Pfn, size: PageSize, flags: u64, socket: u32) -> Result<u64> {
        let (placement, nodes) = (self.placement, self.nodes);
        let cursor = &mut self.interleave_next;
        let mut place = || placement.node(socket, nodes, cursor);
        ctx.pt.map(ctx.mem, root, ctx.levels, va, pfn, size, flags, mm, &mut place)
    }

    fn write(&mut self, ctx: &mut PtCtx<'_>, _mm: u32, _va: u64, leaf: &Leaf, new: u64) -> u64 {
        std::mem::replace(ctx.pt.entry_mut(leaf.slot, leaf.index), new)
    }

    fn lookup(&self, pt: &PageTables, _mm: u32, root: u32, levels: u32, va: u64) -> Option<Leaf> {
        pt.lookup(root, levels, va)
    }

    fn free_tables(&mut self, ctx: &mut PtCtx<'_>, _mm: u32, root: u32, start: u64, end: u64, in_use: &dyn Fn(u64, u64) -> bool) -> Vec<u32> {
        ctx.pt.free_tables(root, ctx.levels, start, end, in_use)
    }
}
