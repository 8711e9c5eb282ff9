//! Page-table backends: where page-table pages live and how the OS writes them (docs/ARCHITECTURE.md
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
//! One file per backend, one registry line each ([`crate::registry!`] below); `os.pt_placement`
//! selects one, and `[placement.<name>]` holds its parameters.

pub mod mitosis;
pub mod native;

use crate::config::Config;
use crate::error::Result;
use crate::memory::PhysMem;
use crate::page_table::{Leaf, PageTables};
use crate::types::{PageSize, Pfn};

crate::registry! {
    what: "a page-table placement", select: "os.pt_placement", table: "placement", bound: Backend;
    "first-touch" => native::Native, "one tree per process, each table page on the node of the core that allocates it (Linux's default)";
    "interleave" => native::Native, "one tree per process, table pages round-robin over the nodes";
    "fixed:N" => native::Native, "one tree per process, every table page on node N (Mitosis' remote-table setups)";
    "mitosis" => mitosis::Mitosis, "Mitosis (ASPLOS 2020): per-socket replicas kept eagerly consistent, A/D bits OR-ed over them";
}

/// A registered backend: its `[placement.<name>]` parameters and its constructor (`spec`
/// is the `os.pt_placement` value, e.g. `fixed:1`).
pub trait Backend: PageTableBackend + crate::registry::Plugin + Sized + 'static {
    fn build(cfg: &Config, spec: &str, params: Self::Params) -> Result<Self>;
}

/// The registry name of an `os.pt_placement` value (`fixed:1` is entry `fixed:N`).
fn entry_name(spec: &str) -> &str {
    if spec.starts_with("fixed:") {
        "fixed:N"
    } else {
        spec
    }
}

/// What a process migration did to the page tables ([`PageTableBackend::on_migrate`]).
#[derive(Debug, Default)]
pub struct Migration {
    /// The new primary root, when the old primary was freed.
    pub primary: Option<u32>,
    /// Table pages unlinked (a replica freed): free them after a TLB flush of the process.
    pub freed: Vec<u32>,
}

pub use crate::workload::program::{PtOptionKeys, PtOptions};

/// The page tables and frames a backend works on, and the tree depth.
pub struct PtCtx<'a> {
    pub pt: &'a mut PageTables,
    pub mem: &'a mut PhysMem,
    pub levels: u32,
}

pub trait PageTableBackend {
    /// The address space `mm` is created by a core of `socket`, with the process's
    /// per-process options `opts`: allocate its root table. Returns the primary root's
    /// arena slot (the tree the OS walks in software).
    fn create(&mut self, ctx: &mut PtCtx<'_>, mm: u32, socket: u32, opts: &PtOptions) -> Result<u32>;

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

    /// Every tree of `mm` (primary root `primary`): the roots of its copies.
    fn trees(&self, _mm: u32, primary: u32) -> Vec<u32> {
        vec![primary]
    }

    /// A thread of `mm` was moved to a core of `socket`; `in_use(s, root)` says whether the
    /// tree at `root`, the copy of socket `s`, is still used (a thread of `mm` runs on `s`,
    /// or a core has `root` loaded).
    fn on_migrate(&mut self, _ctx: &mut PtCtx<'_>, _mm: u32, _socket: u32, _in_use: &dyn Fn(u32, u32) -> bool) -> Result<Migration> {
        Ok(Migration::default())
    }

    /// Entries written in copies beyond the first since the last call, as (table frame,
    /// entry index): the engine charges and clears them. `None`: the backend keeps one copy.
    fn replica_writes(&mut self) -> Option<&mut Vec<(Pfn, u32)>> {
        None
    }

    /// Backend statistics (`totals.page_tables` in stats.json).
    fn stats_json(&self) -> serde_json::Value {
        serde_json::json!({})
    }
}

/// The backend `os.pt_placement` names, with its `[placement.<name>]` parameters.
pub fn build(cfg: &Config) -> Result<Box<dyn PageTableBackend>> {
    struct Build<'a>(&'a Config);
    impl Visit for Build<'_> {
        type Output = Result<Box<dyn PageTableBackend>>;
        fn visit<T: Backend>(self, name: &'static str) -> Self::Output {
            let params = crate::registry::parse::<T::Params>("placement", name, self.0.placement.get(name))?;
            Ok(Box::new(T::build(self.0, &self.0.os.pt_placement, params)?))
        }
    }
    visit(entry_name(&cfg.os.pt_placement), Build(cfg))?
}

/// Check `os.pt_placement` and every `[placement.<name>]` table.
pub fn check(cfg: &Config) -> Result<()> {
    check_params(&cfg.placement)?;
    build(cfg).map(|_| ())
}

/// Where page-table pages and their pointers live (Mitosis Fig. 3 and Fig. 4): per node and
/// level, table pages and the nodes their valid entries point to (child tables, or data
/// frames for leaf entries); per socket, the leaf entries a walker of that socket reads
/// and how many of them sit in table pages on another node. Filled by [`PtDump::add`] with
/// each address space's trees (`tlbsim ptdump`, `sim.ptdump`).
#[derive(Clone, Debug, Default)]
pub struct PtDump {
    levels: u32,
    nodes: usize,
    /// [node][level - 1]: table pages.
    pages: Vec<Vec<u64>>,
    /// [node][level - 1][target node]: valid entries pointing there.
    pointers: Vec<Vec<Vec<u64>>>,
    /// Per walking socket: leaf entries, and those in a table page on another node.
    leaf_entries: Vec<u64>,
    leaf_entries_remote: Vec<u64>,
    /// Address spaces added.
    pub address_spaces: u64,
}

impl PtDump {
    pub fn new(nodes: u32, levels: u32) -> PtDump {
        let n = nodes as usize;
        PtDump {
            levels,
            nodes: n,
            pages: vec![vec![0; levels as usize]; n],
            pointers: vec![vec![vec![0; n]; levels as usize]; n],
            leaf_entries: vec![0; n],
            leaf_entries_remote: vec![0; n],
            address_spaces: 0,
        }
    }

    /// Add address space `mm` (primary root `primary`): every copy's pages once, and the
    /// tree each socket loads for the leaf counts.
    pub fn add(&mut self, pt: &PageTables, backend: &dyn PageTableBackend, mm: u32, primary: u32) {
        self.address_spaces += 1;
        for root in backend.trees(mm, primary) {
            self.count_pages(pt, root, self.levels);
        }
        for s in 0..self.nodes {
            let root = backend.root_for(mm, primary, s as u32);
            self.count_leaves(pt, root, self.levels, s);
        }
    }

    fn count_pages(&mut self, pt: &PageTables, slot: u32, level: u32) {
        let node = crate::memory::node_of(pt.pfn_of(slot)).0 as usize;
        let l = level as usize - 1;
        self.pages[node][l] += 1;
        for index in 0..crate::types::PT_ENTRIES {
            let e = pt.entry(slot, index);
            if e & crate::page_table::PTE_PRESENT == 0 {
                continue;
            }
            if level > 1 && e & crate::page_table::PTE_HUGE == 0 {
                let child = pt.child_slot(slot, index);
                let to = crate::memory::node_of(pt.pfn_of(child)).0 as usize;
                self.pointers[node][l][to] += 1;
                self.count_pages(pt, child, level - 1);
            } else {
                let to = crate::memory::node_of(crate::page_table::pte_pfn(e)).0 as usize;
                self.pointers[node][l][to.min(self.nodes - 1)] += 1;
            }
        }
    }

    fn count_leaves(&mut self, pt: &PageTables, slot: u32, level: u32, socket: usize) {
        let remote = crate::memory::node_of(pt.pfn_of(slot)).0 as usize != socket;
        for index in 0..crate::types::PT_ENTRIES {
            let e = pt.entry(slot, index);
            if e & crate::page_table::PTE_PRESENT == 0 {
                continue;
            }
            if level > 1 && e & crate::page_table::PTE_HUGE == 0 {
                self.count_leaves(pt, pt.child_slot(slot, index), level - 1, socket);
            } else {
                self.leaf_entries[socket] += 1;
                if remote {
                    self.leaf_entries_remote[socket] += 1;
                }
            }
        }
    }

    pub fn json(&self) -> serde_json::Value {
        let sockets: Vec<serde_json::Value> = (0..self.nodes)
            .map(|s| {
                let levels: Vec<serde_json::Value> = (1..=self.levels as usize)
                    .rev()
                    .map(|l| {
                        let to = &self.pointers[s][l - 1];
                        let local = to[s];
                        let all: u64 = to.iter().sum();
                        serde_json::json!({
                            "level": l,
                            "pages": self.pages[s][l - 1],
                            "local_pointers": local,
                            "remote_pointers": all - local,
                            "pointers_to": to,
                        })
                    })
                    .collect();
                let leaves = self.leaf_entries[s];
                serde_json::json!({
                    "socket": s,
                    "levels": levels,
                    "leaf_ptes": leaves,
                    "leaf_ptes_remote_fraction": if leaves == 0 { 0.0 } else { self.leaf_entries_remote[s] as f64 / leaves as f64 },
                })
            })
            .collect();
        serde_json::json!({"address_spaces": self.address_spaces, "sockets": sockets})
    }
}
