//! Tests of `tlb::set_assoc::Tlb` against a simple, obviously-correct reference model, plus
//! targeted tests of mixed page sizes, global entries, geometry errors and the fast path.
//!
//! The reference model keeps, per set, a `Vec<Option<TlbEntry>>` of ways, an explicit LRU
//! list (least recent first), an explicit FIFO queue (oldest first) and an explicit pointer
//! tree for tree-PLRU. It shares no code with the structure under test.

use proptest::prelude::*;
use std::collections::VecDeque;
use tlbsim_core::tlb::set_assoc::{Replacement, Tlb, TlbEntry, TlbGeometry, FLAG_DIRTY, FLAG_GLOBAL, FLAG_USER, FLAG_WRITABLE};
use tlbsim_core::types::{PageSize, Pfn, Vpn};

// ---------------------------------------------------------------------------------------
// Reference model
// ---------------------------------------------------------------------------------------

/// Tree-PLRU as an explicit binary tree of nodes; each inner node says which subtree the
/// next victim comes from.
#[derive(Clone, Debug)]
enum PlruTree {
    Leaf(usize),
    Node { victim_right: bool, mid: usize, left: Box<PlruTree>, right: Box<PlruTree> },
}

impl PlruTree {
    fn build(lo: usize, hi: usize) -> PlruTree {
        if hi - lo == 1 {
            PlruTree::Leaf(lo)
        } else {
            let mid = (lo + hi) / 2;
            PlruTree::Node { victim_right: false, mid, left: Box::new(PlruTree::build(lo, mid)), right: Box::new(PlruTree::build(mid, hi)) }
        }
    }
    /// An access to `way`: every node on its path points away from it.
    fn touch(&mut self, way: usize) {
        if let PlruTree::Node { victim_right, mid, left, right } = self {
            if way < *mid {
                *victim_right = true;
                left.touch(way);
            } else {
                *victim_right = false;
                right.touch(way);
            }
        }
    }
    fn victim(&self) -> usize {
        match self {
            PlruTree::Leaf(w) => *w,
            PlruTree::Node { victim_right, left, right, .. } => {
                if *victim_right {
                    right.victim()
                } else {
                    left.victim()
                }
            }
        }
    }
}

fn is_global(e: &TlbEntry) -> bool {
    e.flags & FLAG_GLOBAL != 0
}

/// Does `e` answer a lookup of (vpn, size, tag)?
fn matches_exact(e: &TlbEntry, vpn: Vpn, size: PageSize, tag: u16) -> bool {
    e.vpn == vpn && e.size == size && !is_global(e) && e.tag == tag
}
fn matches_global(e: &TlbEntry, vpn: Vpn, size: PageSize) -> bool {
    e.vpn == vpn && e.size == size && is_global(e)
}
/// Same identity for `insert`'s overwrite rule (global entries are identified by page).
fn same_key(a: &TlbEntry, b: &TlbEntry) -> bool {
    a.vpn == b.vpn && a.size == b.size && is_global(a) == is_global(b) && (is_global(a) || a.tag == b.tag)
}

struct RefTlb {
    policy: Replacement,
    ways: usize,
    sets: Vec<Vec<Option<TlbEntry>>>,
    /// Per set: ways holding an entry, least recently used first.
    lru: Vec<Vec<usize>>,
    /// Per set: ways holding an entry, oldest insertion first.
    fifo: Vec<VecDeque<usize>>,
    plru: Vec<PlruTree>,
}

impl RefTlb {
    fn new(g: &TlbGeometry) -> RefTlb {
        let (nsets, ways) = if g.entries == 0 { (0, 0) } else { ((g.entries / g.ways) as usize, g.ways as usize) };
        RefTlb {
            policy: g.replacement,
            ways,
            sets: vec![vec![None; ways]; nsets],
            lru: vec![Vec::new(); nsets],
            fifo: vec![VecDeque::new(); nsets],
            plru: (0..nsets).map(|_| PlruTree::build(0, ways)).collect(),
        }
    }

    fn set_of(&self, vpn: Vpn, size: PageSize) -> usize {
        ((vpn.0 / size.pages_4k()) % self.sets.len() as u64) as usize
    }

    fn find(&self, vpn: Vpn, size: PageSize, tag: u16) -> Option<(usize, usize)> {
        if self.sets.is_empty() {
            return None;
        }
        let s = self.set_of(vpn, size);
        let ways = &self.sets[s];
        let exact = ways.iter().position(|e| e.is_some_and(|e| matches_exact(&e, vpn, size, tag)));
        let global = ways.iter().position(|e| e.is_some_and(|e| matches_global(&e, vpn, size)));
        exact.or(global).map(|w| (s, w))
    }

    fn touch(&mut self, s: usize, w: usize) {
        self.lru[s].retain(|&x| x != w);
        self.lru[s].push(w);
        self.plru[s].touch(w);
    }

    fn lookup(&mut self, vpn: Vpn, size: PageSize, tag: u16) -> Option<TlbEntry> {
        let (s, w) = self.find(vpn, size, tag)?;
        self.touch(s, w);
        self.sets[s][w]
    }

    fn probe(&self, vpn: Vpn, size: PageSize, tag: u16) -> Option<TlbEntry> {
        self.find(vpn, size, tag).and_then(|(s, w)| self.sets[s][w])
    }

    fn mark_dirty(&mut self, vpn: Vpn, size: PageSize, tag: u16) {
        if let Some((s, w)) = self.find(vpn, size, tag) {
            self.sets[s][w].as_mut().unwrap().flags |= FLAG_DIRTY;
        }
    }

    fn remove(&mut self, s: usize, w: usize) -> TlbEntry {
        self.lru[s].retain(|&x| x != w);
        self.fifo[s].retain(|&x| x != w);
        self.sets[s][w].take().unwrap()
    }

    fn place(&mut self, s: usize, w: usize, e: TlbEntry) {
        assert!(self.sets[s][w].is_none());
        self.sets[s][w] = Some(e);
        self.fifo[s].push_back(w);
        self.touch(s, w);
    }

    fn policy_victim(&self, s: usize) -> usize {
        match self.policy {
            Replacement::Lru => self.lru[s][0],
            Replacement::Fifo => self.fifo[s][0],
            Replacement::Plru => self.plru[s].victim(),
            Replacement::Random => panic!("random: victim must be told"),
        }
    }

    /// Insert. `told`: for Random, the way the structure under test evicted (if any).
    fn insert_impl(&mut self, e: TlbEntry, quota: Option<&[u32]>, told: Option<usize>) -> Option<TlbEntry> {
        if self.sets.is_empty() {
            return None;
        }
        let s = self.set_of(e.vpn, e.size);
        if let Some(w) = self.sets[s].iter().position(|x| x.is_some_and(|x| same_key(&x, &e))) {
            self.sets[s][w] = Some(e);
            self.touch(s, w);
            return None;
        }
        if let Some(w) = self.sets[s].iter().position(|x| x.is_none()) {
            self.place(s, w, e);
            return None;
        }
        let mut victim = None;
        if let Some(quota) = quota {
            let q = |sl: u8| quota.get(sl as usize).copied().unwrap_or(u32::MAX);
            let count = |sl: u8| self.occupancy_of_sl(sl);
            let lru_order = &self.lru[s];
            let set = &self.sets[s];
            victim = if count(e.sl) >= q(e.sl) {
                lru_order.iter().copied().find(|&w| set[w].unwrap().sl == e.sl)
            } else {
                lru_order.iter().copied().find(|&w| {
                    let sl = set[w].unwrap().sl;
                    count(sl) > q(sl)
                })
            };
        }
        let w = match (victim, self.policy) {
            (Some(w), _) => {
                if let Some(t) = told {
                    assert_eq!(t, w, "quota victim differs");
                }
                w
            }
            (None, Replacement::Random) => told.expect("random evicted nothing from a full set"),
            (None, _) => self.policy_victim(s),
        };
        let old = self.remove(s, w);
        self.place(s, w, e);
        Some(old)
    }

    fn invalidate_page(&mut self, vpn: Vpn, tag: Option<u16>) -> Vec<TlbEntry> {
        let mut out = vec![];
        for s in 0..self.sets.len() {
            for w in 0..self.ways {
                if let Some(e) = self.sets[s][w] {
                    let contains = vpn.align(e.size) == e.vpn;
                    let tag_ok = match tag {
                        None => true,
                        Some(t) => is_global(&e) || e.tag == t,
                    };
                    if contains && tag_ok {
                        out.push(self.remove(s, w));
                    }
                }
            }
        }
        out
    }

    fn invalidate_where(&mut self, pred: impl Fn(&TlbEntry) -> bool) -> Vec<TlbEntry> {
        let mut out = vec![];
        for s in 0..self.sets.len() {
            for w in 0..self.ways {
                if self.sets[s][w].is_some_and(|e| pred(&e)) {
                    out.push(self.remove(s, w));
                }
            }
        }
        out
    }

    fn contents(&self) -> Vec<(usize, usize, TlbEntry)> {
        let mut v = vec![];
        for (s, set) in self.sets.iter().enumerate() {
            for (w, e) in set.iter().enumerate() {
                if let Some(e) = e {
                    v.push((s, w, *e));
                }
            }
        }
        v
    }

    fn occupancy_of_sl(&self, sl: u8) -> u32 {
        self.sets.iter().flatten().filter(|e| e.is_some_and(|e| e.sl == sl)).count() as u32
    }

    /// The way of set-of-`e` that holds `old` (to learn Random's choice).
    fn way_holding(&self, e: &TlbEntry, old: &TlbEntry) -> usize {
        let s = self.set_of(e.vpn, e.size);
        self.sets[s].iter().position(|x| x.as_ref() == Some(old)).expect("evicted entry not in the model's set")
    }
}

// ---------------------------------------------------------------------------------------
// Operations and their generation
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Lookup(Vpn, PageSize, u16),
    /// Repeat the previous lookup (exercises the last-hit memo).
    Again,
    Probe(Vpn, PageSize, u16),
    MarkDirty(Vpn, PageSize, u16),
    Insert(TlbEntry),
    /// Re-insert (same key) the n-th present entry (mod occupancy) with a new pfn, flags
    /// and sl: an overwrite in place; with quotas if `Some`.
    Refill(usize, u64, u8, Option<Vec<u32>>),
    InsertQuota(TlbEntry, Vec<u32>),
    InvalidatePage(Vpn, Option<u16>),
    InvalidateTag(u16),
    Flush(bool),
}

/// 4 KiB pages in a few 2 MiB regions, two of them inside the second 1 GiB page, so that
/// pages of every size overlap and share sets; and 4 KiB pages `k * 0x10001`, whose keys all
/// have the same 16-bit fingerprint (wide sets compare fingerprints first).
fn page() -> impl Strategy<Value = (Vpn, PageSize)> {
    let regions = (
        prop_oneof![Just(0u64), Just(1), Just(2), Just(3), Just(512), Just(513)],
        0u64..48,
        prop_oneof![6 => Just(PageSize::Size4K), 3 => Just(PageSize::Size2M), 1 => Just(PageSize::Size1G)],
    )
        .prop_map(|(region, idx, size)| (Vpn(region * 512 + idx).align(size), size));
    let colliding = (0u64..16).prop_map(|k| (Vpn(k * 0x10001), PageSize::Size4K));
    prop_oneof![9 => regions, 1 => colliding]
}

fn tag() -> impl Strategy<Value = u16> {
    prop_oneof![4 => 0u16..4, 1 => Just(u16::MAX)]
}

fn entry() -> impl Strategy<Value = TlbEntry> {
    (page(), tag(), 0u8..4, any::<u8>(), 0u64..1000).prop_map(|((vpn, size), tag, sl, f, pfn)| {
        let mut flags = f & (FLAG_WRITABLE | FLAG_USER | FLAG_DIRTY);
        if f & 0xE0 == 0xE0 {
            flags |= FLAG_GLOBAL; // 1 in 8
        }
        TlbEntry { vpn, pfn: Pfn(pfn << size.shift_4k()), size, tag, sl, flags }
    })
}

fn op(max_quota: u32) -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (page(), tag()).prop_map(|((v, s), t)| Op::Lookup(v, s, t)),
        4 => Just(Op::Again),
        2 => (page(), tag()).prop_map(|((v, s), t)| Op::Probe(v, s, t)),
        1 => (page(), tag()).prop_map(|((v, s), t)| Op::MarkDirty(v, s, t)),
        8 => entry().prop_map(Op::Insert),
        4 => (entry(), prop::collection::vec(0..=max_quota, 0..5)).prop_map(|(e, q)| Op::InsertQuota(e, q)),
        3 => (any::<usize>(), 0u64..1000, 0u8..4, prop::option::of(prop::collection::vec(0..=max_quota, 0..5)))
            .prop_map(|(n, p, sl, q)| Op::Refill(n, p, sl, q)),
        2 => (0u64..2048 + 262144, prop::option::of(tag()))
            .prop_map(|(v, t)| Op::InvalidatePage(Vpn(v % 2048 + if v >= 2048 { 262144 } else { 0 }), t)),
        1 => tag().prop_map(Op::InvalidateTag),
        1 => any::<bool>().prop_map(Op::Flush),
    ]
}

/// Geometries: direct mapped, 2- to 16-way, fully associative; 0 to 128 entries.
const GEOMETRIES: &[(u32, u32)] = &[
    (0, 1),
    (1, 1),
    (4, 1),
    (16, 1),
    (4, 2),
    (16, 2),
    (64, 2),
    (4, 4),
    (16, 4),
    (64, 4),
    (16, 16),
    // Several 8- and 16-way sets: the recency-order word and the fingerprint scan of each.
    (32, 8),
    (64, 16),
    (64, 64),
    (96, 96),
    // Every specialised scan width, the 8-wide chunked scan with a remainder, and tree-PLRU
    // with more than 64 ways (several words of tree bits per set).
    (24, 6),
    (8, 8),
    (48, 12),
    (40, 10),
    (20, 20),
    (128, 128),
];

fn geometry(policy: Replacement) -> impl Strategy<Value = TlbGeometry> {
    let list: Vec<TlbGeometry> = GEOMETRIES
        .iter()
        .filter(|(e, w)| policy != Replacement::Plru || *e == 0 || w.is_power_of_two())
        .map(|&(entries, ways)| TlbGeometry { entries, ways, replacement: policy })
        .collect();
    prop::sample::select(list)
}

fn sort_key(e: &TlbEntry) -> (u64, u8, u16, u8, u64, u8) {
    (e.vpn.0, e.size as u8, e.tag, e.flags, e.pfn.0, e.sl)
}
fn sorted(mut v: Vec<TlbEntry>) -> Vec<TlbEntry> {
    v.sort_by_key(sort_key);
    v
}

fn check_contents(tlb: &Tlb, model: &RefTlb) {
    let got: Vec<(usize, usize, TlbEntry)> = tlb.entries_with_position().map(|(s, w, e)| (s, w, *e)).collect();
    assert_eq!(got, model.contents(), "contents differ");
    let plain: Vec<TlbEntry> = tlb.entries().copied().collect();
    assert_eq!(plain, model.contents().into_iter().map(|x| x.2).collect::<Vec<_>>());
    assert_eq!(tlb.occupancy() as usize, plain.len());
    for sl in 0..5 {
        assert_eq!(tlb.occupancy_of_sl(sl), model.occupancy_of_sl(sl), "occupancy of sl {sl}");
    }
}

/// Apply `ops` to both and compare after every step. For Random the model is told the
/// structure's victim (and checks it was allowed to evict at all).
fn run_against_model(g: &TlbGeometry, seed: u64, ops: &[Op]) -> Vec<String> {
    let mut tlb = Tlb::new(g, seed).unwrap();
    let mut model = RefTlb::new(g);
    let mut last: Option<(Vpn, PageSize, u16)> = None;
    let mut trace = vec![];
    let random = g.replacement == Replacement::Random;
    for op in ops {
        let line = match op {
            Op::Lookup(..) | Op::Again => {
                let q = match op {
                    Op::Lookup(v, s, t) => Some((*v, *s, *t)),
                    _ => last,
                };
                let Some((v, s, t)) = q else { continue };
                last = Some((v, s, t));
                let a = tlb.lookup(v, s, t);
                let b = model.lookup(v, s, t);
                assert_eq!(a, b, "lookup {v:?} {s:?} tag {t}");
                format!("lookup {a:?}")
            }
            Op::Probe(v, s, t) => {
                let a = tlb.probe(*v, *s, *t);
                assert_eq!(a, model.probe(*v, *s, *t), "probe");
                format!("probe {a:?}")
            }
            Op::MarkDirty(v, s, t) => {
                tlb.mark_dirty(*v, *s, *t);
                model.mark_dirty(*v, *s, *t);
                "dirty".into()
            }
            Op::Insert(e) | Op::InsertQuota(e, _) => {
                let quota = match op {
                    Op::InsertQuota(_, q) => Some(q.as_slice()),
                    _ => None,
                };
                let full_before = !model.sets.is_empty() && {
                    let s = model.set_of(e.vpn, e.size);
                    model.sets[s].iter().all(|x| x.is_some()) && !model.sets[s].iter().any(|x| x.is_some_and(|x| same_key(&x, e)))
                };
                let a = match quota {
                    Some(q) => tlb.insert_with_quota(*e, q),
                    None => tlb.insert(*e),
                };
                // Evicts exactly when the set is full and the key is new.
                assert_eq!(a.is_some(), full_before, "evicted {a:?} with full_before={full_before}");
                let told = a.map(|old| model.way_holding(e, &old));
                let b = model.insert_impl(*e, quota, if random { told } else { None });
                assert_eq!(a, b, "insert {e:?} quota {quota:?}");
                format!("insert {a:?}")
            }
            Op::Refill(n, pfn, sl, quota) => {
                let present: Vec<TlbEntry> = tlb.entries().copied().collect();
                if present.is_empty() {
                    continue;
                }
                let old = present[n % present.len()];
                let e = TlbEntry { pfn: Pfn(pfn << old.size.shift_4k()), sl: *sl, flags: old.flags ^ FLAG_DIRTY, ..old };
                let a = match quota {
                    Some(q) => tlb.insert_with_quota(e, q),
                    None => tlb.insert(e),
                };
                assert_eq!(a, None, "overwrite in place evicted");
                assert_eq!(model.insert_impl(e, quota.as_deref(), None), None);
                "refill".into()
            }
            Op::InvalidatePage(v, t) => {
                let mut got = vec![];
                let n = tlb.invalidate_page(*v, *t, &mut |e| got.push(*e));
                assert_eq!(n as usize, got.len());
                assert_eq!(sorted(got), sorted(model.invalidate_page(*v, *t)), "invalidate_page");
                format!("invpage {n}")
            }
            Op::InvalidateTag(t) => {
                let mut got = vec![];
                let n = tlb.invalidate_tag(*t, &mut |e| got.push(*e));
                assert_eq!(n as usize, got.len());
                let want = model.invalidate_where(|e| !is_global(e) && e.tag == *t);
                assert_eq!(got, want, "invalidate_tag");
                format!("invtag {n}")
            }
            Op::Flush(keep) => {
                let mut got = vec![];
                let n = tlb.flush(*keep, &mut |e| got.push(*e));
                assert_eq!(n as usize, got.len());
                let want = model.invalidate_where(|e| !(*keep && is_global(e)));
                assert_eq!(got, want, "flush");
                format!("flush {n}")
            }
        };
        check_contents(&tlb, &model);
        trace.push(line);
    }
    trace
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(40), 1..400)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn lru_matches_reference(g in geometry(Replacement::Lru), ops in ops()) {
        run_against_model(&g, 1, &ops);
    }

    #[test]
    fn fifo_matches_reference(g in geometry(Replacement::Fifo), ops in ops()) {
        run_against_model(&g, 1, &ops);
    }

    #[test]
    fn plru_matches_reference(g in geometry(Replacement::Plru), ops in ops()) {
        run_against_model(&g, 1, &ops);
    }

    /// Random: evicts only from a full set, contents match a model told each victim, and
    /// the same seed gives the same sequence.
    #[test]
    fn random_invariants(g in geometry(Replacement::Random), seed in any::<u64>(), ops in ops()) {
        let a = run_against_model(&g, seed, &ops);
        let b = run_against_model(&g, seed, &ops);
        prop_assert_eq!(a, b);
    }
}

// ---------------------------------------------------------------------------------------
// Targeted tests
// ---------------------------------------------------------------------------------------

fn geom(entries: u32, ways: u32, replacement: Replacement) -> TlbGeometry {
    TlbGeometry { entries, ways, replacement }
}

fn e4k(vpn: u64, tag: u16) -> TlbEntry {
    TlbEntry { vpn: Vpn(vpn), pfn: Pfn(vpn + 1000), size: PageSize::Size4K, tag, sl: 0, flags: 0 }
}

fn nop() -> impl FnMut(&TlbEntry) {
    |_| {}
}

#[test]
fn geometry_errors_say_what_is_wrong() {
    let err = |e, w, r| Tlb::new(&geom(e, w, r), 0).err().unwrap();
    assert_eq!(err(100, 8, Replacement::Lru), "entries (100) must be a multiple of ways (8)");
    assert!(err(24, 8, Replacement::Lru).starts_with("entries/ways = 3 sets: the number of sets must be a power of two"));
    assert!(err(48, 6, Replacement::Plru).starts_with("plru needs a power-of-two number of ways, got 6"));
    assert!(err(8, 0, Replacement::Lru).contains("ways is 0"));
    assert!(err(8, 16, Replacement::Lru).contains("must not exceed"));
    // Valid shapes.
    for (e, w, r) in [
        (1536, 12, Replacement::Lru),
        (96, 96, Replacement::Fifo),
        (96, 6, Replacement::Random),
        (64, 64, Replacement::Plru),
        (128, 128, Replacement::Plru),
        (0, 0, Replacement::Plru),
        (0, 6, Replacement::Plru),
    ] {
        let t = Tlb::new(&geom(e, w, r), 0).unwrap();
        assert_eq!(t.geometry(), &geom(e, w, r));
    }
}

#[test]
fn zero_entries_never_holds_anything() {
    let mut t = Tlb::new(&geom(0, 4, Replacement::Lru), 0).unwrap();
    assert_eq!(t.insert(e4k(5, 0)), None);
    assert_eq!(t.insert_with_quota(e4k(5, 0), &[0]), None);
    assert_eq!(t.lookup(Vpn(5), PageSize::Size4K, 0), None);
    assert_eq!(t.lookup(Vpn(5), PageSize::Size4K, 0), None);
    assert_eq!(t.probe(Vpn(5), PageSize::Size4K, 0), None);
    assert_eq!(t.occupancy(), 0);
    assert_eq!(t.entries().count(), 0);
    assert_eq!(t.flush(false, &mut nop()), 0);
    assert_eq!(t.invalidate_page(Vpn(5), None, &mut nop()), 0);
}

#[test]
fn mixed_page_sizes_in_one_structure() {
    // A unified L2: 4 KiB and 2 MiB entries side by side.
    let mut t = Tlb::new(&geom(64, 4, Replacement::Lru), 0).unwrap();
    let huge = TlbEntry { vpn: Vpn(1024), pfn: Pfn(4096), size: PageSize::Size2M, tag: 3, sl: 0, flags: 0 };
    t.insert(huge);
    t.insert(e4k(1024, 3)); // same first 4K page, different size: a separate entry
    t.insert(e4k(5, 3));
    assert_eq!(t.occupancy(), 3);
    assert_eq!(t.lookup(Vpn(1024), PageSize::Size2M, 3), Some(huge));
    assert_eq!(t.lookup(Vpn(1024), PageSize::Size4K, 3), Some(e4k(1024, 3)));
    // A 4K vpn inside the 2M page, other tag: nothing removed.
    assert_eq!(t.invalidate_page(Vpn(1024 + 300), Some(4), &mut nop()), 0);
    // Same tag: the 2M entry goes, the 4K entry at 1024 (a different 4K page) stays.
    let mut removed = vec![];
    assert_eq!(t.invalidate_page(Vpn(1024 + 300), Some(3), &mut |e| removed.push(*e)), 1);
    assert_eq!(removed, vec![huge]);
    assert_eq!(t.lookup(Vpn(1024), PageSize::Size2M, 3), None);
    assert_eq!(t.lookup(Vpn(1024), PageSize::Size4K, 3), Some(e4k(1024, 3)));
    // A 1G page is removed by any 4K page inside it, for every tag with `None`.
    let giga = TlbEntry { vpn: Vpn(1 << 18), pfn: Pfn(0), size: PageSize::Size1G, tag: 9, sl: 0, flags: 0 };
    t.insert(giga);
    assert_eq!(t.invalidate_page(Vpn((1 << 18) + 123_456), None, &mut nop()), 1);
    assert_eq!(t.occupancy(), 2);
}

#[test]
fn global_entries() {
    let mut t = Tlb::new(&geom(16, 4, Replacement::Lru), 0).unwrap();
    let g = TlbEntry { flags: FLAG_GLOBAL, ..e4k(7, 1) };
    t.insert(g);
    t.insert(e4k(8, 1));
    for tag in [0, 1, 2, 4095, u16::MAX] {
        assert_eq!(t.lookup(Vpn(7), PageSize::Size4K, tag), Some(g), "tag {tag}");
        assert_eq!(t.probe(Vpn(7), PageSize::Size4K, tag), Some(g));
    }
    // Survives invalidate_tag (even of its own stored tag) and flush(keep_global).
    assert_eq!(t.invalidate_tag(1, &mut nop()), 1);
    assert_eq!(t.flush(true, &mut nop()), 0);
    assert_eq!(t.lookup(Vpn(7), PageSize::Size4K, 5), Some(g));
    // A global insert for the same page overwrites it whatever the stored tag.
    let g2 = TlbEntry { tag: 2, pfn: Pfn(77), ..g };
    assert_eq!(t.insert(g2), None);
    assert_eq!(t.occupancy(), 1);
    // A non-global entry of the same page outranks it for its own tag.
    t.insert(e4k(7, 3));
    assert_eq!(t.lookup(Vpn(7), PageSize::Size4K, 3), Some(e4k(7, 3)));
    assert_eq!(t.lookup(Vpn(7), PageSize::Size4K, 4), Some(g2));
    // INVLPG with a tag removes the global entry too.
    assert_eq!(t.invalidate_page(Vpn(7), Some(4), &mut nop()), 1);
    assert_eq!(t.lookup(Vpn(7), PageSize::Size4K, 4), None);
    t.insert(g2);
    assert_eq!(t.flush(false, &mut nop()), 2);
    assert_eq!(t.lookup(Vpn(7), PageSize::Size4K, 4), None);
    assert_eq!(t.occupancy(), 0);
}

#[test]
fn memo_follows_global_then_local() {
    // The last-hit memo must not keep answering with a global entry once a non-global
    // entry for the same query is inserted, nor with an invalidated entry.
    let mut t = Tlb::new(&geom(4, 4, Replacement::Lru), 0).unwrap();
    let g = TlbEntry { flags: FLAG_GLOBAL, ..e4k(7, 0) };
    t.insert(g);
    assert_eq!(t.lookup(Vpn(7), PageSize::Size4K, 2), Some(g));
    assert_eq!(t.lookup(Vpn(7), PageSize::Size4K, 2), Some(g));
    t.insert(e4k(7, 2));
    assert_eq!(t.lookup(Vpn(7), PageSize::Size4K, 2), Some(e4k(7, 2)));
    t.invalidate_tag(2, &mut nop());
    assert_eq!(t.lookup(Vpn(7), PageSize::Size4K, 2), Some(g));
    t.flush(false, &mut nop());
    assert_eq!(t.lookup(Vpn(7), PageSize::Size4K, 2), None);
}

#[test]
fn replacement_order_with_repeated_hits() {
    // 2-way direct set: repeated hits on A (memo path) keep A most recent.
    let mut t = Tlb::new(&geom(2, 2, Replacement::Lru), 0).unwrap();
    t.insert(e4k(1, 0));
    t.insert(e4k(2, 0));
    for _ in 0..3 {
        assert!(t.lookup(Vpn(1), PageSize::Size4K, 0).is_some());
    }
    assert_eq!(t.insert(e4k(3, 0)), Some(e4k(2, 0)));
    // A memo hit must touch: A looked up, B overwritten in place (B most recent), A hit
    // again through the memo (A most recent) -> B is the victim.
    let mut t = Tlb::new(&geom(2, 2, Replacement::Lru), 0).unwrap();
    t.insert(e4k(1, 0));
    t.insert(e4k(2, 0));
    assert!(t.lookup(Vpn(1), PageSize::Size4K, 0).is_some());
    assert_eq!(t.insert(e4k(2, 0)), None);
    assert!(t.lookup(Vpn(1), PageSize::Size4K, 0).is_some());
    assert_eq!(t.insert(e4k(3, 0)), Some(e4k(2, 0)));
    // FIFO: the same pattern evicts the oldest, hits notwithstanding; an overwrite in place
    // does not make an entry young again.
    let mut f = Tlb::new(&geom(2, 2, Replacement::Fifo), 0).unwrap();
    f.insert(e4k(1, 0));
    f.insert(e4k(2, 0));
    f.lookup(Vpn(1), PageSize::Size4K, 0);
    assert_eq!(f.insert(e4k(1, 0)), None);
    assert_eq!(f.insert(e4k(3, 0)), Some(e4k(1, 0)));
}

#[test]
fn plru_tree_4way() {
    let mut t = Tlb::new(&geom(4, 4, Replacement::Plru), 0).unwrap();
    for v in 0..4 {
        t.insert(e4k(v, 0));
    }
    // Fill order 0,1,2,3 leaves the tree pointing at way 0.
    assert_eq!(t.insert(e4k(10, 0)), Some(e4k(0, 0)));
    // Ways now 10,1,2,3; the touch of way 0 points the root right, the left node at way 1.
    // A hit on way 2 points the root back left, where the left node still says way 1.
    t.lookup(Vpn(2), PageSize::Size4K, 0);
    assert_eq!(t.insert(e4k(11, 0)), Some(e4k(1, 0)));
}

#[test]
fn quota_victim_selection() {
    // Fully associative 4 entries, LRU. sl 0 allotted 1 entry, sl 1 allotted 3.
    let mut t = Tlb::new(&geom(4, 4, Replacement::Lru), 0).unwrap();
    let e = |v: u64, sl: u8| TlbEntry { sl, ..e4k(v, sl as u16) };
    let quota = [1, 3];
    for (v, sl) in [(1, 0), (2, 0), (3, 0), (4, 1)] {
        assert_eq!(t.insert_with_quota(e(v, sl), &quota), None);
    }
    assert_eq!(t.occupancy_of_sl(0), 3);
    // sl 1 is under its quota: the victim is the LRU entry of an over-quota level (sl 0).
    assert_eq!(t.insert_with_quota(e(5, 1), &quota), Some(e(1, 0)));
    // Make (4, sl 1) the plain-LRU victim; sl 0 is at/over its quota, so it must evict its
    // own LRU entry (2) instead.
    t.lookup(Vpn(2), PageSize::Size4K, 0);
    t.lookup(Vpn(3), PageSize::Size4K, 0);
    assert_eq!(t.insert_with_quota(e(6, 0), &quota), Some(e(2, 0)));
    // Levels past the slice are unlimited: sl 2 under quota takes from over-quota sl 0.
    assert_eq!(t.occupancy_of_sl(0), 2);
    assert_eq!(t.insert_with_quota(e(7, 2), &quota), Some(e(3, 0)));
    assert_eq!(t.occupancy_of_sl(0), 1);
    assert_eq!(t.occupancy_of_sl(1), 2);
    assert_eq!(t.occupancy_of_sl(2), 1);
    // Nobody over quota (sl 0: 1/1, sl 1: 2/3, sl 2 unlimited) and sl 1 under: plain LRU.
    assert_eq!(t.insert_with_quota(e(8, 1), &quota), Some(e(4, 1)));
}

#[test]
fn random_fills_invalid_ways_first_and_is_seeded() {
    let g = geom(8, 8, Replacement::Random);
    let run = |seed| {
        let mut t = Tlb::new(&g, seed).unwrap();
        let mut out = vec![];
        for v in 0..8 {
            assert_eq!(t.insert(e4k(v, 0)), None);
        }
        t.invalidate_page(Vpn(3), None, &mut nop());
        assert_eq!(t.insert(e4k(100, 0)), None);
        for v in 200..264 {
            out.push(t.insert(e4k(v, 0)).unwrap().vpn.0);
        }
        out
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43));
}

#[test]
fn lru_victim_in_a_wide_set() {
    // 64-way LRU: the victim can be any way, including the high ones.
    for hot in [0u64, 31, 32, 40, 63] {
        let mut t = Tlb::new(&geom(64, 64, Replacement::Lru), 0).unwrap();
        for v in 0..64 {
            t.insert(e4k(v, 0));
        }
        for v in 0..64 {
            if v != hot {
                t.lookup(Vpn(v), PageSize::Size4K, 0);
            }
        }
        assert_eq!(t.insert(e4k(100, 0)), Some(e4k(hot, 0)));
        assert_eq!(t.entries_with_position().find(|x| x.2.vpn == Vpn(100)).unwrap().1, hot as usize);
    }
}

#[test]
fn wide_set_fingerprint_collisions() {
    // 16 pages whose keys share one fingerprint, in a 64-way fully associative structure.
    let mut t = Tlb::new(&geom(64, 64, Replacement::Lru), 0).unwrap();
    let g = TlbEntry { flags: FLAG_GLOBAL, ..e4k(0x10001 * 3, 0) };
    t.insert(g);
    for k in 0..16 {
        if k != 3 {
            t.insert(e4k(k * 0x10001, 1));
        }
    }
    for k in 0..16 {
        let got = t.lookup(Vpn(k * 0x10001), PageSize::Size4K, 1).unwrap();
        assert_eq!(got.vpn, Vpn(k * 0x10001));
        assert_eq!(got.flags & FLAG_GLOBAL != 0, k == 3);
    }
    assert_eq!(t.lookup(Vpn(0x10001 * 5), PageSize::Size4K, 2), None);
    t.insert(e4k(0x10001 * 3, 1)); // non-global outranks the global entry for tag 1
    assert_eq!(t.lookup(Vpn(0x10001 * 3), PageSize::Size4K, 1), Some(e4k(0x10001 * 3, 1)));
    assert_eq!(t.lookup(Vpn(0x10001 * 3), PageSize::Size4K, 7), Some(g));
    assert_eq!(t.insert(e4k(0x10001 * 7, 1)), None); // overwrite in place
    assert_eq!(t.occupancy(), 17);
}

#[test]
fn canonical_kernel_and_user_pages_do_not_alias() {
    let mut t = Tlb::new(&geom(16, 16, Replacement::Lru), 0).unwrap();
    let user = Vpn::of_va(0x0000_7fff_ffff_f000);
    let kernel = Vpn::of_va(0xffff_ffff_ffff_f000);
    let kernel57 = Vpn::of_va(0xff00_0000_0000_0000);
    let user57 = Vpn::of_va(0x00ff_ffff_ffff_f000);
    for v in [user, kernel, kernel57, user57] {
        t.insert(TlbEntry { vpn: v, pfn: Pfn(v.0 & 0xffff), ..e4k(0, 0) });
    }
    assert_eq!(t.occupancy(), 4);
    for v in [user, kernel, kernel57, user57] {
        assert_eq!(t.lookup(v, PageSize::Size4K, 0).unwrap().vpn, v);
    }
}

/// The touch queue of wide fully associative LRU structures is dropped during hit-only
/// phases and rebuilt at the next eviction: victims must stay exactly LRU across such
/// phase changes.
#[test]
fn wide_lru_victims_stay_exact_across_hit_and_miss_phases() {
    use tlbsim_core::rng::SplitMix64;
    let mut t = Tlb::new(&TlbGeometry { entries: 48, ways: 48, replacement: Replacement::Lru }, 0).unwrap();
    let mut order: Vec<u64> = Vec::new(); // least recently used first
    let mut rng = SplitMix64::new(9);
    let mut next = 0u64;
    let touch = |order: &mut Vec<u64>, v: u64| {
        order.retain(|&x| x != v);
        order.push(v);
    };
    for phase in 0..40 {
        let hit_phase = phase % 2 == 1;
        let steps = if hit_phase { 500 } else { 60 };
        for _ in 0..steps {
            if hit_phase && !order.is_empty() {
                let v = order[rng.below(order.len() as u64) as usize];
                assert!(t.lookup(Vpn(v), PageSize::Size4K, 0).is_some());
                touch(&mut order, v);
            } else {
                let v = next;
                next += 1;
                let e = TlbEntry { vpn: Vpn(v), pfn: Pfn(v), size: PageSize::Size4K, tag: 0, sl: 0, flags: 0 };
                let evicted = t.insert(e).map(|x| x.vpn.0);
                let expected = if order.len() == 48 { Some(order.remove(0)) } else { None };
                assert_eq!(evicted, expected, "phase {phase}");
                touch(&mut order, v);
            }
        }
    }
}
