//! Page-table backends: where page-table pages live and how the OS writes them (DESIGN.md
//! "Page tables", "Axes and their hooks"; Mitosis §3 and §5 for why it is an axis).
//!
//! A backend owns the policy that places every page-table page (the root included) on a
//! NUMA node, and every write of a page-table entry: the OS model's PTE-write layer
//! (`os/pte.rs`) and trace mode's first-touch faults go through it, so a backend that keeps
//! several copies of the tree (Mitosis' replicas) sees every change, and reads return the
//! accessed and dirty bits OR-ed over its copies. A core loads the root [`PageTableBackend::root_for`]
//! its socket; the hardware walker then reads that tree directly (no backend call on the
//! access path).
//!
//! One file per backend; [`build`] selects one by `os.pt_placement` (the registry: one
//! line per backend in [`NAMES`] and `build`).

pub mod native;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::memory::PhysMem;
use crate::page_table::{Leaf, PageTables};
use crate::types::{PageSize, Pfn};

/// Backends `os.pt_placement` accepts (`fixed:N` names a node).
pub const NAMES: &[&str] = &["first-touch", "interleave", "fixed:N"];

/// The page tables and frames a backend works on, and the tree depth.
pub struct PtCtx<'a> {
    pub pt: &'a mut PageTables,
    pub mem: &'a mut PhysMem,
    pub levels: u32,
}

pub trait PageTableBackend {
    /// The address space `mm` is created by a core of `socket`: allocate its root table.
    /// Returns the primary root's arena slot (the tree the OS walks in software).
    fn create(&mut self, ctx: &mut PtCtx<'_>, mm: u32, socket: u32) -> Result<u32>;

    /// Root a core of `socket` loads (CR3) for `mm` whose primary root is `primary`.
    fn root_for(&self, _mm: u32, primary: u32, _socket: u32) -> u32 {
        primary
    }

    /// Map `va` (aligned to `size`) to `pfn` with `flags` in `mm` (primary root `root`),
    /// for a fault or system call on a core of `socket`; missing tables are allocated
    /// where the backend places them. Returns the previous leaf entry (0 if none).
    #[allow(clippy::too_many_arguments)]
    fn map(&mut self, ctx: &mut PtCtx<'_>, mm: u32, root: u32, va: u64, pfn: Pfn, size: PageSize, flags: u64, socket: u32) -> Result<u64>;

    /// Write leaf entry `leaf` (found by [`PageTableBackend::lookup`] on the primary tree) of
    /// `va` in `mm` to `new`; returns the old entry with A/D OR-ed over every copy.
    fn write(&mut self, ctx: &mut PtCtx<'_>, mm: u32, va: u64, leaf: &Leaf, new: u64) -> u64;

    /// The leaf entry mapping `va` in `mm` (primary root `root`), its A/D bits OR-ed over
    /// every copy.
    fn lookup(&self, pt: &PageTables, mm: u32, root: u32, levels: u32, va: u64) -> Option<Leaf>;

    /// After `[start, end)` was unmapped from `mm`: unlink every table page whose range
    /// lies in no mapping (`in_use(lo, hi)`), in every copy. Returns the slots to free after
    /// the TLB flush (page-walk caches may still point to them).
    fn free_tables(&mut self, ctx: &mut PtCtx<'_>, mm: u32, root: u32, start: u64, end: u64, in_use: &dyn Fn(u64, u64) -> bool) -> Vec<u32>;

    /// A thread of `mm` now runs on a core of `socket` (the process migrated).
    fn on_migrate(&mut self, _ctx: &mut PtCtx<'_>, _mm: u32, _socket: u32) -> Result<()> {
        Ok(())
    }

    /// Backend statistics (`totals.page_tables` in stats.json).
    fn stats_json(&self) -> serde_json::Value {
        serde_json::json!({})
    }
}

/// The backend `os.pt_placement` names.
pub fn build(cfg: &Config) -> Result<Box<dyn PageTableBackend>> {
    Ok(Box::new(native::Native::new(native::Placement::parse("os.pt_placement", &cfg.os.pt_placement, cfg.machine.sockets)?, cfg.machine.sockets)))
}

/// Check `os.pt_placement` (config validation).
pub fn check(cfg: &Config) -> Result<()> {
    build(cfg).map(|_| ()).map_err(|e| match e {
        Error::Config { key, message } => Error::Config { key, message },
        e => e,
    })
}
