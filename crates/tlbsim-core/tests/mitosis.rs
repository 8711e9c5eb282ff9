//! Mitosis (placement/mitosis.rs): every replica translates like a single tree through
//! random map / write / unmap / migrate sequences, A/D bits OR-ed and cleared everywhere,
//! each socket's cores walk their own replica, and no table page outlives its process.

use serde_json::json;
use tlbsim_core::config::Config;
use tlbsim_core::memory::{node_of, PhysMem};
use tlbsim_core::page_table::{make_pte, pte_pfn, PageTables, PTE_ACCESSED, PTE_DIRTY, PTE_PRESENT, PTE_USER, PTE_WRITABLE};
use tlbsim_core::placement::mitosis::{MigrationFree, Mitosis, MitosisParams, ReplicaSet};
use tlbsim_core::placement::native::{Native, Placement};
use tlbsim_core::placement::{PageTableBackend, PtCtx, PtOptions};
use tlbsim_core::rng::SplitMix64;
use tlbsim_core::types::{NodeId, PageSize, Pfn};

const SOCKETS: u32 = 4;
const MM: u32 = 1;
const LEVELS: u32 = 4;
/// A few 1 GiB regions far apart, so upper levels get several pages.
const BASES: [u64; 3] = [0x0000_4000_0000, 0x7f00_0000_0000, 0x0100_4000_0000];

struct World {
    pt: PageTables,
    mem: PhysMem,
}

impl World {
    fn new() -> World {
        World { pt: PageTables::new(), mem: PhysMem::new(SOCKETS, 64) }
    }
    fn ctx(&mut self) -> PtCtx<'_> {
        PtCtx { pt: &mut self.pt, mem: &mut self.mem, levels: LEVELS }
    }
}

fn va_of(rng: &mut SplitMix64) -> u64 {
    BASES[rng.below(BASES.len() as u64) as usize] + rng.below(4096) * 4096
}

const AD: u64 = PTE_ACCESSED | PTE_DIRTY;

/// Random map, write (protection and A/D changes), unmap with table freeing and migration,
/// against the native backend: every replica's own walk gives the reference's leaf (A/D
/// aside), the OR-ed lookup gives the reference's A/D, and replica tables sit on their
/// socket.
#[test]
fn every_replica_translates_like_a_single_tree() {
    for (seed, free) in [(1u64, MigrationFree::Eager), (2, MigrationFree::Lazy), (3, MigrationFree::Eager)] {
        let mut rng = SplitMix64::new(seed);
        let params = MitosisParams { replicas: ReplicaSet::Sockets(vec![0, 2]), reserve_pages: 8, migration_free: free };
        let mut mitosis = Mitosis::new(&params, SOCKETS).unwrap();
        let mut native = Native::new(Placement::FirstTouch, SOCKETS);
        let (mut w, mut r) = (World::new(), World::new());
        let mut root = mitosis.create(&mut w.ctx(), MM, 0, &PtOptions::default()).unwrap();
        let rroot = native.create(&mut r.ctx(), MM, 0, &PtOptions::default()).unwrap();
        let mut mapped: Vec<u64> = Vec::new();
        let mut pending_free = Vec::new();
        for step in 0..3000 {
            match rng.below(10) {
                0..=4 => {
                    let va = va_of(&mut rng);
                    let pfn = Pfn(rng.below(1 << 20));
                    let socket = rng.below(SOCKETS as u64) as u32;
                    let a = mitosis.map(&mut w.ctx(), MM, root, va, pfn, PageSize::Size4K, PTE_WRITABLE | PTE_USER, socket).unwrap();
                    let b = native.map(&mut r.ctx(), MM, rroot, va, pfn, PageSize::Size4K, PTE_WRITABLE | PTE_USER, socket).unwrap();
                    assert_eq!(a, b, "old entry at step {step}");
                    mapped.push(va);
                }
                5..=6 if !mapped.is_empty() => {
                    // A walker on one replica sets A/D there only; the OS then rewrites.
                    let va = mapped[rng.below(mapped.len() as u64) as usize];
                    let roots = mitosis.trees(MM, root);
                    let walked = roots[rng.below(roots.len() as u64) as usize];
                    if let Some(l) = w.pt.lookup(walked, LEVELS, va) {
                        *w.pt.entry_mut(l.slot, l.index) |= PTE_ACCESSED;
                        let rl = r.pt.lookup(rroot, LEVELS, va).unwrap();
                        *r.pt.entry_mut(rl.slot, rl.index) |= PTE_ACCESSED;
                    }
                    let leaf = mitosis.lookup(&w.pt, MM, root, LEVELS, va);
                    let rleaf = native.lookup(&r.pt, MM, rroot, LEVELS, va);
                    assert_eq!(leaf.map(|l| l.pte), rleaf.map(|l| l.pte), "OR-ed lookup at step {step}");
                    if let (Some(l), Some(rl)) = (leaf, rleaf) {
                        let new = (l.pte ^ PTE_WRITABLE) & !PTE_ACCESSED;
                        let a = mitosis.write(&mut w.ctx(), MM, va, &l, new);
                        let b = native.write(&mut r.ctx(), MM, va, &rl, new);
                        assert_eq!(a, b, "old entry of a write at step {step}");
                        for t in mitosis.trees(MM, root) {
                            assert_eq!(w.pt.lookup(t, LEVELS, va).unwrap().pte & AD, 0, "A cleared in every replica");
                        }
                    }
                }
                7 if !mapped.is_empty() => {
                    // munmap of a 2 MiB window: zap its leaves, free tables nothing uses.
                    let va = mapped[rng.below(mapped.len() as u64) as usize] & !((2 << 20) - 1);
                    let end = va + (2 << 20);
                    for &m in mapped.iter().filter(|&&m| m >= va && m < end) {
                        if let Some(l) = mitosis.lookup(&w.pt, MM, root, LEVELS, m) {
                            mitosis.write(&mut w.ctx(), MM, m, &l, 0);
                        }
                        if let Some(l) = native.lookup(&r.pt, MM, rroot, LEVELS, m) {
                            native.write(&mut r.ctx(), MM, m, &l, 0);
                        }
                    }
                    mapped.retain(|&m| m < va || m >= end);
                    let live = mapped.clone();
                    let in_use = |lo: u64, hi: u64| live.iter().any(|&m| m >= lo && m < hi);
                    let freed = mitosis.free_tables(&mut w.ctx(), MM, root, va, end, &in_use);
                    let rfreed = native.free_tables(&mut r.ctx(), MM, rroot, va, end, &in_use);
                    assert_eq!(freed.len(), rfreed.len() * mitosis.trees(MM, root).len(), "every replica frees its copy");
                    w.pt.release_tables(&mut w.mem, &freed);
                    r.pt.release_tables(&mut r.mem, &rfreed);
                }
                8 => {
                    // The process moves to a socket; only that socket stays in use.
                    let to = rng.below(SOCKETS as u64) as u32;
                    let m = mitosis.on_migrate(&mut w.ctx(), MM, to, &|s, _| s == to).unwrap();
                    if let Some(p) = m.primary {
                        root = p;
                    }
                    pending_free.extend(m.freed);
                    assert_eq!(mitosis.root_for(MM, root, to) == root, mitosis.trees(MM, root).len() == 1 || node_of(w.pt.pfn_of(root)) == NodeId(to));
                }
                _ => {
                    w.pt.release_tables(&mut w.mem, &pending_free);
                    pending_free.clear();
                }
            }
            if step % 50 == 0 {
                let trees = mitosis.trees(MM, root);
                for &va in mapped.iter().take(64) {
                    let want = r.pt.lookup(rroot, LEVELS, va).map(|l| l.pte & !AD);
                    for &t in &trees {
                        assert_eq!(w.pt.lookup(t, LEVELS, va).map(|l| l.pte & !AD), want, "replica {t} at step {step}, va {va:#x}");
                    }
                }
                for s in 0..SOCKETS {
                    let t = mitosis.root_for(MM, root, s);
                    if trees.len() > 1 && trees.contains(&t) && t != root {
                        assert_eq!(node_of(w.pt.pfn_of(t)), NodeId(s), "socket {s} loads its own replica");
                    }
                }
            }
        }
        assert!(mitosis.stats_json()["replica_entry_writes"].as_u64().unwrap() > 0);
    }
}

/// A leaf written through the ring reads back identical in every copy, and a leaf's
/// replica pages are each on their own socket.
#[test]
fn all_sockets_replicate_on_their_own_nodes() {
    let params = MitosisParams { replicas: ReplicaSet::Named("all".into()), ..Default::default() };
    let mut mitosis = Mitosis::new(&params, SOCKETS).unwrap();
    let mut w = World::new();
    let root = mitosis.create(&mut w.ctx(), MM, 1, &PtOptions::default()).unwrap();
    assert_eq!(node_of(w.pt.pfn_of(root)), NodeId(1), "the creating socket's replica is primary");
    let va = 0x7f00_1234_5000;
    mitosis.map(&mut w.ctx(), MM, root, va, Pfn(99), PageSize::Size4K, PTE_USER, 3).unwrap();
    let trees = mitosis.trees(MM, root);
    assert_eq!(trees.len(), 4);
    // Each socket's tree: all four levels on that socket, leaf identical.
    for s in 0..SOCKETS {
        let t = mitosis.root_for(MM, root, s);
        let mut slot = t;
        for level in (1..=LEVELS).rev() {
            assert_eq!(node_of(w.pt.pfn_of(slot)), NodeId(s), "level {level} of socket {s}'s replica");
            if level > 1 {
                slot = w.pt.child_slot(slot, tlbsim_core::page_table::level_index(va, level));
            }
        }
        let l = w.pt.lookup(t, LEVELS, va).unwrap();
        assert_eq!(l.pte, make_pte(Pfn(99), PTE_USER | PTE_PRESENT));
        assert_eq!(pte_pfn(l.pte), Pfn(99));
    }
    // Four levels, four copies: 16 table pages, 12 of them replicas.
    assert_eq!(w.pt.live_tables(), 16);
    assert_eq!(mitosis.stats_json()["replica_tables_allocated"], json!(12));
}

fn run(v: serde_json::Value) -> serde_json::Value {
    let cfg = Config::resolve(v, &[], std::path::Path::new(".")).unwrap();
    tlbsim_core::simulate(&cfg).unwrap()
}

/// Thread 0 on socket 0 touches a region first; threads on sockets 1-3 then read it.
fn shared_reader(placement: &str, extra: serde_json::Value) -> serde_json::Value {
    let readers: Vec<serde_json::Value> = (1..4)
        .map(|s| {
            json!({"name": format!("r{s}"), "core": s * 2, "program": [
                {"op": "compute", "cycles": 40_000_000},
                {"op": "access", "region": "heap", "count": 20_000, "pattern": "random"},
                {"op": "exit"}]})
        })
        .collect();
    let mut threads = vec![json!({"name": "init", "core": 0, "program": [
        {"op": "access", "region": "heap", "count": 1024, "mode": "write", "stride": 4096},
        {"op": "compute", "cycles": 4_000_000}, {"op": "exit"}]})];
    threads.extend(readers);
    let mut cfg = json!({
        "machine": {"sockets": 4, "cores_per_socket": 2, "memory": {"node_mib": 256}, "pt_cache": {"entries": 0}},
        "os": {"pt_placement": placement},
        "sim": {"ptdump": true},
        "workload": {"kind": "scenario", "scenario": {"process": [{"name": "p", "region": [{"name": "heap", "bytes": 4 << 20}], "thread": threads}]}},
    });
    if let Some(o) = extra.as_object() {
        for (k, v) in o {
            cfg["os"][k] = v.clone();
        }
    }
    run(cfg)
}

#[test]
fn each_socket_walks_its_own_replica_and_nothing_leaks() {
    let linux = shared_reader("first-touch", json!({}));
    let mitosis = shared_reader("mitosis", json!({}));
    let remote = |s: &serde_json::Value| s["totals"]["pt_accesses_remote"].as_u64().unwrap();
    assert!(remote(&linux) > 1000, "first-touch: the readers walk socket 0's tables ({})", remote(&linux));
    assert_eq!(remote(&mitosis), 0, "Mitosis: every walk reads the local replica");
    // Replicas cost memory while the process lives: 4 copies of every table page.
    let peak = |s: &serde_json::Value| s["totals"]["page_table_pages_peak"].as_u64().unwrap();
    assert_eq!(peak(&mitosis), 4 * peak(&linux));
    // After exit only the roots remain (one per copy), besides tables whose freeing flush
    // was still in flight when the run ended: no table page leaks.
    let left = |s: &serde_json::Value| s["totals"]["page_table_pages"].as_u64().unwrap() - s["totals"]["page_table_pages_awaiting_flush"].as_u64().unwrap();
    assert_eq!(left(&linux), 1);
    assert_eq!(left(&mitosis), 4);
    // The dump (taken at exit) sees socket 0's tables pointing at socket 0 data only under
    // first-touch, and every socket's leaf PTEs local under Mitosis.
    let dump = &linux["page_table_dump"]["sockets"];
    assert!(dump[1]["leaf_ptes_remote_fraction"].as_f64().unwrap() > 0.99);
    for s in 0..4 {
        assert_eq!(mitosis["page_table_dump"]["sockets"][s]["leaf_ptes_remote_fraction"], json!(0.0));
        assert!(mitosis["page_table_dump"]["sockets"][s]["levels"][3]["pages"].as_u64().unwrap() >= 2, "a leaf page per socket");
    }
}

/// Mitosis §5.5: a process moved to another socket gets a replica there; eagerly the old
/// copy is freed (its walks turn local, one copy remains), lazily it is kept.
#[test]
fn a_migrated_process_takes_its_page_tables_along() {
    let mover = |free: &str| {
        run(json!({
            "machine": {"sockets": 2, "cores_per_socket": 2, "memory": {"node_mib": 256}, "pt_cache": {"entries": 0}},
            "os": {"pt_placement": "mitosis", "mitosis": {"replicas": "none", "migration_free": free}},
            "workload": {"kind": "scenario", "scenario": {"process": [{"name": "p", "region": [{"name": "heap", "bytes": 64 << 20}], "thread": [
                {"name": "t", "core": 0, "program": [
                    {"op": "access", "region": "heap", "count": 16384, "mode": "write", "stride": 4096},
                    {"op": "migrate-thread", "core": 2},
                    {"op": "access", "region": "heap", "count": 50_000, "pattern": "random"},
                    {"op": "exit"}]}]}]}},
        }))
    };
    let native = run(json!({
        "machine": {"sockets": 2, "cores_per_socket": 2, "memory": {"node_mib": 256}, "pt_cache": {"entries": 0}},
        "workload": {"kind": "scenario", "scenario": {"process": [{"name": "p", "region": [{"name": "heap", "bytes": 64 << 20}], "thread": [
            {"name": "t", "core": 0, "program": [
                {"op": "access", "region": "heap", "count": 16384, "mode": "write", "stride": 4096},
                {"op": "migrate-thread", "core": 2},
                {"op": "access", "region": "heap", "count": 50_000, "pattern": "random"},
                {"op": "exit"}]}]}]}},
    }));
    let eager = mover("eager");
    let lazy = mover("lazy");
    let pt = |s: &serde_json::Value, k: &str| s["totals"]["page_tables"][k].as_u64().unwrap();
    assert_eq!(pt(&eager, "migration_replicas"), 1);
    assert_eq!(pt(&eager, "replicas_freed"), 1);
    assert_eq!(pt(&lazy, "replicas_freed"), 0);
    let remote = |s: &serde_json::Value| s["totals"]["pt_accesses_remote"].as_u64().unwrap();
    assert!(remote(&native) > 10_000, "without Mitosis the tables stay behind ({})", remote(&native));
    assert!(remote(&eager) < remote(&native) / 10, "eager: {} vs {}", remote(&eager), remote(&native));
    assert!(remote(&lazy) < remote(&native) / 10);
    // Eagerly one copy is left (its root), lazily two.
    let left = |s: &serde_json::Value| s["totals"]["page_table_pages"].as_u64().unwrap() - s["totals"]["page_table_pages_awaiting_flush"].as_u64().unwrap();
    assert_eq!(left(&eager), 1);
    assert_eq!(left(&lazy), 2);
}

/// Per-process masks (`PtOptions::replica_sockets`) against the native backend: three
/// address spaces of one backend, masked to socket 1 only, to all sockets, and left on the
/// system-wide mask ([0, 2]); through random maps and writes every copy of each translates
/// like a single tree, and each keeps its copies on its own mask's sockets only.
#[test]
fn per_process_masks_translate_like_a_single_tree() {
    let params = MitosisParams { replicas: ReplicaSet::Sockets(vec![0, 2]), reserve_pages: 8, migration_free: MigrationFree::Eager };
    let mut mitosis = Mitosis::new(&params, SOCKETS).unwrap();
    let mut native = Native::new(Placement::FirstTouch, SOCKETS);
    let (mut w, mut r) = (World::new(), World::new());
    // (mm, options, sockets its tables may live on, copies)
    let spaces: [(u32, PtOptions, Vec<u32>, usize); 4] = [
        (1, PtOptions { replica_sockets: Some(vec![1]) }, vec![1], 1),
        (2, PtOptions { replica_sockets: Some((0..SOCKETS).collect()) }, (0..SOCKETS).collect(), 4),
        (3, PtOptions::default(), vec![0, 2], 2),
        (4, PtOptions { replica_sockets: Some(vec![]) }, (0..SOCKETS).collect(), 1),
    ];
    let mut roots = Vec::new();
    for (mm, opts, _, copies) in &spaces {
        let root = mitosis.create(&mut w.ctx(), *mm, 3, opts).unwrap();
        let rroot = native.create(&mut r.ctx(), *mm, 3, &PtOptions::default()).unwrap();
        assert_eq!(mitosis.trees(*mm, root).len(), *copies, "mm {mm}: copies");
        roots.push((root, rroot));
    }
    let mut rng = SplitMix64::new(7);
    let mut mapped: Vec<Vec<u64>> = vec![Vec::new(); spaces.len()];
    for step in 0..4000 {
        let i = rng.below(spaces.len() as u64) as usize;
        let mm = spaces[i].0;
        let (root, rroot) = roots[i];
        if rng.below(4) > 0 || mapped[i].is_empty() {
            let va = va_of(&mut rng);
            let pfn = Pfn(rng.below(1 << 20));
            let socket = rng.below(SOCKETS as u64) as u32;
            let a = mitosis.map(&mut w.ctx(), mm, root, va, pfn, PageSize::Size4K, PTE_WRITABLE | PTE_USER, socket).unwrap();
            let b = native.map(&mut r.ctx(), mm, rroot, va, pfn, PageSize::Size4K, PTE_WRITABLE | PTE_USER, socket).unwrap();
            assert_eq!(a, b, "old entry at step {step}");
            mapped[i].push(va);
        } else {
            let va = mapped[i][rng.below(mapped[i].len() as u64) as usize];
            let l = mitosis.lookup(&w.pt, mm, root, LEVELS, va).unwrap();
            let rl = native.lookup(&r.pt, mm, rroot, LEVELS, va).unwrap();
            let new = l.pte ^ PTE_WRITABLE;
            assert_eq!(mitosis.write(&mut w.ctx(), mm, va, &l, new), native.write(&mut r.ctx(), mm, va, &rl, new));
        }
    }
    for (i, (mm, _, allowed, copies)) in spaces.iter().enumerate() {
        let (root, rroot) = roots[i];
        let trees = mitosis.trees(*mm, root);
        assert_eq!(trees.len(), *copies);
        for &va in &mapped[i] {
            let want = r.pt.lookup(rroot, LEVELS, va).map(|l| l.pte & !AD);
            for &t in &trees {
                assert_eq!(w.pt.lookup(t, LEVELS, va).map(|l| l.pte & !AD), want, "mm {mm}, replica {t}, va {va:#x}");
            }
        }
        // Every table page of every copy on a socket of the mask (a "none" mask: first
        // touch, any socket); a replica's pages all on the socket whose cores load it.
        for &t in &trees {
            let mut pages = Vec::new();
            collect(&w.pt, t, LEVELS, &mut pages);
            let nodes: std::collections::BTreeSet<u32> = pages.iter().map(|&p| node_of(w.pt.pfn_of(p)).0).collect();
            assert!(nodes.iter().all(|n| allowed.contains(n)), "mm {mm}: tables on {nodes:?}, mask {allowed:?}");
            if *copies > 1 {
                assert_eq!(nodes.len(), 1, "mm {mm}: a replica lives on one socket");
            }
        }
    }
    let pages = |mm: u32, root: u32| {
        let mut n = 0;
        for t in mitosis.trees(mm, root) {
            let mut v = Vec::new();
            collect(&w.pt, t, LEVELS, &mut v);
            n += v.len();
        }
        n
    };
    // mm 2 (all sockets) holds four copies of what mm 1 (socket 1) holds one of, for the
    // same kind of mapping: a replica per socket, every socket's copy complete.
    let one = pages(1, roots[0].0);
    assert!(one > 4);
    for s in 0..SOCKETS {
        let t = mitosis.root_for(2, roots[1].0, s);
        assert_eq!(node_of(w.pt.pfn_of(t)), NodeId(s), "socket {s} loads its own copy of mm 2");
    }
    assert_eq!(mitosis.stats_json()["address_spaces_with_own_mask"], json!(3));
}

/// Every table page of the tree under `slot`.
fn collect(pt: &PageTables, slot: u32, level: u32, out: &mut Vec<u32>) {
    out.push(slot);
    if level == 1 {
        return;
    }
    for index in 0..512 {
        let e = pt.entry(slot, index);
        if e & PTE_PRESENT != 0 && e & tlbsim_core::page_table::PTE_HUGE == 0 {
            collect(pt, pt.child_slot(slot, index), level - 1, out);
        }
    }
}

/// Table pages per socket in a `page_table_dump`.
fn dump_pages(dump: &serde_json::Value) -> Vec<u64> {
    dump["sockets"].as_array().unwrap().iter().map(|s| s["levels"].as_array().unwrap().iter().map(|l| l["pages"].as_u64().unwrap()).sum()).collect()
}

/// Two processes on four sockets under Mitosis: `pinned` masked to socket 0 (its fork
/// child inherits the mask), `spread` replicated on all; each touches its heap from every
/// socket. The system-wide mask is "all".
fn two_masks(sim: serde_json::Value) -> serde_json::Value {
    // Thread `s` runs on socket s and first touches the heap's 8 MiB quarter s.
    let touch = |name: &str, core: u32| {
        json!({"name": name, "core": core, "program": [
            {"op": "access", "region": "heap", "count": 2048, "mode": "write", "stride": 4096, "offset": (core as u64 / 2) * (8 << 20), "len": 8 << 20},
            {"op": "count"},
            {"op": "access", "region": "heap", "count": 20_000, "pattern": "random"},
            {"op": "count"},
            {"op": "exit"}]})
    };
    let mut pinned_threads: Vec<serde_json::Value> = (0..4).map(|s| touch(&format!("p{s}"), s * 2)).collect();
    pinned_threads[0]["program"].as_array_mut().unwrap().insert(
        2,
        json!({"op": "fork", "core": 3, "program": [{"op": "access", "region": "heap", "count": 4096, "mode": "write", "stride": 4096}, {"op": "exit"}]}),
    );
    run(json!({
        "machine": {"sockets": 4, "cores_per_socket": 2, "memory": {"node_mib": 512}, "pt_cache": {"entries": 0}},
        "os": {"pt_placement": "mitosis"},
        "sim": sim,
        "workload": {"kind": "scenario", "scenario": {"process": [
            {"name": "pinned", "mitosis_replicas": [0], "region": [{"name": "heap", "bytes": 32 << 20}], "thread": pinned_threads},
            {"name": "spread", "mitosis_replicas": "all", "region": [{"name": "heap", "bytes": 32 << 20}],
             "thread": (0..4).map(|s| touch(&format!("s{s}"), s * 2 + 1)).collect::<Vec<_>>()},
        ]}},
    }))
}

/// Issue 14: a process masked to socket 0 has its page tables on socket 0 only (its
/// forked child too), one replicated on "all" a full copy on every socket; walks of the
/// masked process from other sockets are remote, the replicated one's local; no stale
/// translation is used anywhere.
#[test]
fn a_process_mask_replicates_only_on_its_sockets() {
    let pinned = two_masks(json!({"ptdump_at_op": 2, "ptdump_thread": "p1"}));
    let spread = two_masks(json!({"ptdump_at_op": 2, "ptdump_thread": "s1"}));
    let at_exit = two_masks(json!({"ptdump": true}));
    for s in [&pinned, &spread, &at_exit] {
        assert_eq!(s["totals"]["violations_security"], json!(0));
        assert_eq!(s["totals"]["violations_consistency"], json!(0));
        assert_eq!(s["totals"]["page_tables"]["address_spaces_with_own_mask"], json!(3), "two processes and the fork child");
        assert_eq!(s["totals"]["page_tables"]["replicated_address_spaces"], json!(1));
    }
    let (p, sp) = (&pinned["page_table_dump"], &spread["page_table_dump"]);
    assert_eq!(p["taken"], json!(true));
    assert_eq!(p["process"], json!("pinned"));
    assert_eq!(sp["process"], json!("spread"));
    let pp = dump_pages(p);
    assert!(pp[0] > 4 && pp[1..] == [0, 0, 0], "the masked process: socket 0 only ({pp:?})");
    // 32 MiB touched from every socket: every socket's leaf PTEs sit on socket 0.
    assert_eq!(p["sockets"][0]["leaf_ptes_remote_fraction"], json!(0.0));
    assert_eq!(p["sockets"][1]["leaf_ptes_remote_fraction"], json!(1.0));
    let spp = dump_pages(sp);
    assert!(spp[0] > 4 && spp.iter().all(|&n| n == spp[0]), "the replicated process: a full copy per socket ({spp:?})");
    assert!(sp["sockets"].as_array().unwrap().iter().all(|s| s["leaf_ptes_remote_fraction"] == json!(0.0)));
    // At exit all three address spaces: the masked two on socket 0, so sockets 1-3 hold
    // only the replicated process's copies.
    let e = &at_exit["page_table_dump"];
    assert_eq!(e["address_spaces"], json!(3));
    let ep = dump_pages(e);
    assert!(ep[0] > ep[1] && ep[1] == ep[2] && ep[2] == ep[3], "{ep:?}");
}

fn try_run(v: serde_json::Value) -> tlbsim_core::error::Result<serde_json::Value> {
    let cfg = Config::resolve(v, &[], std::path::Path::new("."))?;
    tlbsim_core::simulate(&cfg)
}

/// A process whose page tables grow: its thread maps and populates a new 4 MiB every
/// operation (two leaf tables each), 12 operations; a reader thread of the same process
/// named first.
fn growing(sim: serde_json::Value) -> tlbsim_core::error::Result<serde_json::Value> {
    try_run(json!({
        "machine": {"sockets": 2, "cores_per_socket": 2, "memory": {"node_mib": 256}},
        "os": {"pt_placement": "mitosis"},
        "sim": sim,
        "workload": {"kind": "scenario", "scenario": {"process": [
            {"name": "idle", "thread": [{"name": "first", "core": 3, "program": [{"op": "compute", "cycles": 1000}, {"op": "count"}, {"op": "exit"}]}]},
            {"name": "grower", "thread": [{"name": "grow", "core": 0, "program": [
                {"op": "loop", "count": 12, "body": [
                    {"op": "mmap", "region": "chunk", "bytes": 4 << 20, "populate": true},
                    {"op": "count"}]},
                {"op": "exit"}]}]},
        ]}},
    }))
}

fn leaf_pages(dump: &serde_json::Value) -> u64 {
    dump["sockets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let levels = s["levels"].as_array().unwrap();
            assert_eq!(levels.last().unwrap()["level"], json!(1));
            levels.last().unwrap()["pages"].as_u64().unwrap()
        })
        .sum()
}

/// Issue 14: `sim.ptdump_at_op` takes the dump when the thread completes that operation, of
/// its process only: early on the growing process has fewer leaf tables than at exit, and
/// the run still goes on to its end.
#[test]
fn a_dump_at_an_early_op_sees_the_tables_so_far() {
    let early = growing(json!({"ptdump_at_op": 2, "ptdump_thread": "grow"})).unwrap();
    let late = growing(json!({"ptdump_at_op": 12, "ptdump_thread": "grow"})).unwrap();
    let exit = growing(json!({"ptdump": true})).unwrap();
    let plain = growing(json!({})).unwrap();
    let (e, l, x) = (&early["page_table_dump"], &late["page_table_dump"], &exit["page_table_dump"]);
    assert_eq!(e["taken"], json!(true));
    assert_eq!((e["at_op"].clone(), e["thread"].clone(), e["process"].clone(), e["pid"].clone()), (json!(2), json!("grow"), json!("grower"), json!(1)));
    assert_eq!(e["address_spaces"], json!(1));
    assert!(e["cycle"].as_u64().unwrap() < l["cycle"].as_u64().unwrap());
    assert!(x.get("taken").is_none(), "the dump at exit keeps its fields");
    assert_eq!(x["address_spaces"], json!(2));
    // Two replicas (mask "all" on 2 sockets), 2 leaf tables per 4 MiB chunk each.
    let (le, ll, lx) = (leaf_pages(e), leaf_pages(l), leaf_pages(x));
    assert!((2 * 4..=2 * 6).contains(&le), "after 2 chunks: {le}");
    assert!(ll >= 2 * 24, "after 12 chunks: {ll}");
    assert_eq!(ll, lx, "the last operation sees what exit sees");
    assert!(le < lx);
    assert_ne!(e["sockets"], x["sockets"]);
    // The run went on to the end: the same simulation as without a dump.
    for s in [&early, &late, &exit] {
        assert_eq!(s["per_thread"], plain["per_thread"]);
        assert_eq!(s["totals"]["cycles"], plain["totals"]["cycles"]);
    }
    // Default thread: the workload's first one ("first", of process "idle").
    let first = growing(json!({"ptdump_at_op": 1})).unwrap();
    assert_eq!(first["page_table_dump"]["thread"], json!("first"));
    assert_eq!(first["page_table_dump"]["process"], json!("idle"));
    assert_eq!(leaf_pages(&first["page_table_dump"]), 0);
}

/// A thread that never reaches the operation leaves a dump that says so; a bad thread
/// name, a thread without an operation count, or a trace run are config errors naming the
/// key.
#[test]
fn a_dump_at_op_beyond_the_end_or_of_a_bad_thread_is_reported() {
    let never = growing(json!({"ptdump_at_op": 13, "ptdump_thread": "grow"})).unwrap();
    let d = &never["page_table_dump"];
    assert_eq!(d["taken"], json!(false));
    assert_eq!(d["address_spaces"], json!(0));
    let msg = d["message"].as_str().unwrap();
    assert!(msg.contains("\"grow\" completed 12 operation(s), fewer than sim.ptdump_at_op = 13"), "{msg}");
    let key_of = |e: tlbsim_core::error::Error| match e {
        tlbsim_core::error::Error::Config { key, message } => (key, message),
        e => panic!("not a config error: {e}"),
    };
    let (key, message) = key_of(growing(json!({"ptdump_at_op": 1, "ptdump_thread": "nope"})).unwrap_err());
    assert_eq!(key, "sim.ptdump_thread");
    assert!(message.contains("\"nope\"") && message.contains("\"grow\""), "{message}");
    let (key, _) = key_of(growing(json!({"ptdump_thread": "grow"})).unwrap_err());
    assert_eq!(key, "sim.ptdump_thread");
    let (key, _) = key_of(try_run(json!({"sim": {"ptdump_at_op": 1}, "workload": {"kind": "synthetic", "accesses": 10}})).unwrap_err());
    assert_eq!(key, "sim.ptdump_at_op");
}

/// A process mask naming a socket the machine lacks is a config error naming the key.
#[test]
fn a_process_mask_out_of_range_names_its_key() {
    let err = try_run(json!({
        "machine": {"sockets": 2, "cores_per_socket": 1},
        "os": {"pt_placement": "mitosis"},
        "workload": {"kind": "scenario", "scenario": {"process": [
            {"name": "a", "thread": [{"name": "t", "program": [{"op": "exit"}]}]},
            {"name": "b", "mitosis_replicas": [0, 2], "thread": [{"name": "t", "program": [{"op": "exit"}]}]}]}},
    }))
    .unwrap_err();
    match err {
        tlbsim_core::error::Error::Config { key, message } => {
            assert_eq!(key, "workload.scenario.process[1].mitosis_replicas");
            assert!(message.contains("socket 2 does not exist"), "{message}");
        }
        e => panic!("{e}"),
    }
}
