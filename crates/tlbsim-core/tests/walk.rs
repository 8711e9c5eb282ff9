//! The walker on hand-built placements: latency, local/remote counts, caches, A/D bits.

use serde_json::json;
use std::path::Path;
use tlbsim_core::config::Config;
use tlbsim_core::memory::PhysMem;
use tlbsim_core::page_table::*;
use tlbsim_core::stats::CoreStats;
use tlbsim_core::tlb::hierarchy::TlbHierarchy;
use tlbsim_core::tlb::{LineCache, Replacement, TlbGeometry};
use tlbsim_core::types::{CoreId, NodeId, PageSize, Pfn};
use tlbsim_core::walk::{walk, WalkListener, WalkMemory, WalkOutcome};

struct Recorder(Vec<u64>);
impl WalkListener for Recorder {
    fn accessed_set(&mut self, _: CoreId, _: u32, va: u64) {
        self.0.push(va);
    }
}

const VA: u64 = 0x7f12_3456_7000;
const LAT: [u32; 2] = [280, 580];

/// Root on node 0, every lower table on node 1, one 4 KiB page mapped at VA.
fn setup(pwc: bool) -> (PhysMem, PageTables, u32, TlbHierarchy) {
    let mut mem = PhysMem::new(2, 64);
    let mut pt = PageTables::new();
    let root = pt.alloc_table(&mut mem, NodeId(0), 1).unwrap();
    pt.map(&mut mem, root, 4, VA, Pfn(99), PageSize::Size4K, PTE_WRITABLE | PTE_USER, 1, &mut || NodeId(1)).unwrap();
    let mut ov = vec![];
    if !pwc {
        ov = vec!["machine.tlb.pwc_pml4.entries=0".into(), "machine.tlb.pwc_pdpt.entries=0".into(), "machine.tlb.pwc_pd.entries=0".into()];
    }
    let cfg = Config::resolve(json!({}), &ov, Path::new(".")).unwrap();
    let tlbs = TlbHierarchy::new(CoreId(0), &cfg.machine.tlb, 1).unwrap();
    (mem, pt, root, tlbs)
}

#[test]
fn remote_lower_levels_cost_remote_latency() {
    let (_mem, mut pt, root, mut tlbs) = setup(false);
    let mut stats = CoreStats::default();
    let mut memsys = WalkMemory { pt_cache: None, pt_cache_latency: 40, node_latency: &LAT, socket: 0, mem: None, core: 0, now: 0 };
    let mut rec = Recorder(vec![]);
    let (out, cycles) = walk(&mut pt, &mut tlbs, &mut memsys, root, 4, VA + 8, false, &mut stats, &mut rec);
    let WalkOutcome::Mapped { pte, size } = out else { panic!("{out:?}") };
    assert_eq!((pte_pfn(pte), size), (Pfn(99), PageSize::Size4K));
    assert_eq!(cycles, 280 + 3 * 580);
    assert_eq!((stats.pt_accesses_local, stats.pt_accesses_remote), (1, 3));
    assert_eq!(stats.walk_cycles, cycles);
    // A set in memory, D not (a read); the transition reported once.
    let leaf = pt.lookup(root, 4, VA).unwrap();
    assert!(leaf.pte & PTE_ACCESSED != 0 && leaf.pte & PTE_DIRTY == 0);
    assert_eq!(rec.0, vec![VA + 8]);
    // From socket 1 the same walk is 1 remote + 3 local.
    let lat1 = [580, 280];
    let mut memsys = WalkMemory { pt_cache: None, pt_cache_latency: 40, node_latency: &lat1, socket: 1, mem: None, core: 0, now: 0 };
    let mut stats = CoreStats::default();
    let (_, cycles) = walk(&mut pt, &mut tlbs, &mut memsys, root, 4, VA, true, &mut stats, &mut rec);
    assert_eq!(cycles, 580 + 3 * 280);
    assert_eq!((stats.pt_accesses_local, stats.pt_accesses_remote), (3, 1));
    // Already accessed: no second report. Now dirty.
    assert_eq!(rec.0.len(), 1);
    assert!(pt.lookup(root, 4, VA).unwrap().pte & PTE_DIRTY != 0);
    assert_eq!(stats.dirty_bits_set, 1);
}

#[test]
fn page_walk_caches_skip_levels() {
    let (_mem, mut pt, root, mut tlbs) = setup(true);
    let mut memsys = WalkMemory { pt_cache: None, pt_cache_latency: 40, node_latency: &LAT, socket: 0, mem: None, core: 0, now: 0 };
    let mut stats = CoreStats::default();
    let (_, first) = walk(&mut pt, &mut tlbs, &mut memsys, root, 4, VA, false, &mut stats, &mut Recorder(vec![]));
    assert_eq!(stats.pwc_hits, 0);
    let (_, second) = walk(&mut pt, &mut tlbs, &mut memsys, root, 4, VA, false, &mut stats, &mut Recorder(vec![]));
    // The PD-entry cache holds the path: only the leaf table is read (remote), plus 1 cycle
    // of PWC lookup.
    assert_eq!(stats.pwc_hits, 1);
    assert_eq!(second, 1 + 580);
    assert!(first > second);
    assert_eq!(stats.pt_accesses_remote, 3 + 1);
}

#[test]
fn page_table_line_cache_serves_repeat_reads() {
    let (_mem, mut pt, root, mut tlbs) = setup(false);
    let mut cache = LineCache::new(&TlbGeometry { entries: 64, ways: 16, replacement: Replacement::Lru }, 0).unwrap();
    let mut memsys = WalkMemory { pt_cache: Some(&mut cache), pt_cache_latency: 40, node_latency: &LAT, socket: 0, mem: None, core: 0, now: 0 };
    let mut stats = CoreStats::default();
    walk(&mut pt, &mut tlbs, &mut memsys, root, 4, VA, false, &mut stats, &mut Recorder(vec![]));
    let (_, cycles) = walk(&mut pt, &mut tlbs, &mut memsys, root, 4, VA, false, &mut stats, &mut Recorder(vec![]));
    assert_eq!(cycles, 4 * 40);
    assert_eq!(stats.pt_cache_hits, 4);
    assert_eq!(stats.pt_accesses_local + stats.pt_accesses_remote, 4);
}

#[test]
fn huge_pages_walk_three_levels_and_faults_are_reported() {
    let mut mem = PhysMem::new(1, 64);
    let mut pt = PageTables::new();
    let root = pt.alloc_table(&mut mem, NodeId(0), 1).unwrap();
    let va = 0x4000_0000;
    pt.map(&mut mem, root, 4, va, Pfn(512), PageSize::Size2M, 0, 1, &mut || NodeId(0)).unwrap();
    let cfg = Config::resolve(
        json!({}),
        &["machine.tlb.pwc_pd.entries=0".into(), "machine.tlb.pwc_pdpt.entries=0".into(), "machine.tlb.pwc_pml4.entries=0".into()],
        Path::new("."),
    )
    .unwrap();
    let mut tlbs = TlbHierarchy::new(CoreId(0), &cfg.machine.tlb, 1).unwrap();
    let lat = [280];
    let mut memsys = WalkMemory { pt_cache: None, pt_cache_latency: 40, node_latency: &lat, socket: 0, mem: None, core: 0, now: 0 };
    let mut stats = CoreStats::default();
    let (out, cycles) = walk(&mut pt, &mut tlbs, &mut memsys, root, 4, va + 0x1234, false, &mut stats, &mut Recorder(vec![]));
    assert_eq!(out, WalkOutcome::Mapped { pte: pt.lookup(root, 4, va).unwrap().pte, size: PageSize::Size2M });
    assert_eq!(cycles, 3 * 280);
    // Read-only page: a write faults with the page present.
    let (out, _) = walk(&mut pt, &mut tlbs, &mut memsys, root, 4, va, true, &mut stats, &mut Recorder(vec![]));
    assert_eq!(out, WalkOutcome::Fault { present: true });
    let (out, _) = walk(&mut pt, &mut tlbs, &mut memsys, root, 4, 0x1000, false, &mut stats, &mut Recorder(vec![]));
    assert_eq!(out, WalkOutcome::Fault { present: false });
}

/// ABIS §7's walker quirks: a dirty-bit walk (the entry is cached, only D is missing) sets A
/// too only with `quirk_dirty_sets_accessed`; the walk before a write fault on a read-only
/// PTE sets A only with `quirk_faulting_walk_sets_accessed`.
#[test]
fn section_7_quirks_decide_which_walks_set_the_accessed_bit() {
    for quirk in [false, true] {
        let (_mem, mut pt, root, mut tlbs) = setup(false);
        tlbs.quirk_dirty_sets_accessed = quirk;
        let mut stats = CoreStats::default();
        let mut memsys = WalkMemory { pt_cache: None, pt_cache_latency: 40, node_latency: &LAT, socket: 0, mem: None, core: 0, now: 0 };
        let mut rec = Recorder(vec![]);
        tlbs.dirty_walk = true;
        let (out, _) = walk(&mut pt, &mut tlbs, &mut memsys, root, 4, VA, true, &mut stats, &mut rec);
        tlbs.dirty_walk = false;
        assert!(matches!(out, WalkOutcome::Mapped { .. }));
        let pte = pt.lookup(root, 4, VA).unwrap().pte;
        assert!(pte & PTE_DIRTY != 0);
        assert_eq!(pte & PTE_ACCESSED != 0, quirk, "dirty quirk {quirk}");
        assert_eq!(rec.0.len(), quirk as usize);
        // An ordinary write walk sets both either way.
        let (_mem, mut pt, root, mut tlbs) = setup(false);
        tlbs.quirk_dirty_sets_accessed = quirk;
        walk(&mut pt, &mut tlbs, &mut memsys, root, 4, VA, true, &mut stats, &mut rec);
        assert!(pt.lookup(root, 4, VA).unwrap().pte & PTE_ACCESSED != 0);
    }
    for quirk in [false, true] {
        let mut mem = PhysMem::new(2, 64);
        let mut pt = PageTables::new();
        let root = pt.alloc_table(&mut mem, NodeId(0), 1).unwrap();
        pt.map(&mut mem, root, 4, VA, Pfn(99), PageSize::Size4K, PTE_USER, 1, &mut || NodeId(0)).unwrap();
        let cfg = Config::resolve(json!({}), &[], Path::new(".")).unwrap();
        let mut tlbs = TlbHierarchy::new(CoreId(0), &cfg.machine.tlb, 1).unwrap();
        tlbs.quirk_faulting_walk_sets_accessed = quirk;
        let mut stats = CoreStats::default();
        let mut memsys = WalkMemory { pt_cache: None, pt_cache_latency: 40, node_latency: &LAT, socket: 0, mem: None, core: 0, now: 0 };
        let mut rec = Recorder(vec![]);
        let (out, _) = walk(&mut pt, &mut tlbs, &mut memsys, root, 4, VA, true, &mut stats, &mut rec);
        assert!(matches!(out, WalkOutcome::Fault { present: true }));
        assert_eq!(pt.lookup(root, 4, VA).unwrap().pte & PTE_ACCESSED != 0, quirk, "faulting-walk quirk {quirk}");
    }
}
