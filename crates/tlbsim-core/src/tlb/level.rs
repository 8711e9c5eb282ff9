//! A TLB level (L1 data TLBs per page size, L1 instruction TLB, L2; docs/ARCHITECTURE.md "TLBs (per
//! core)").
//!
//! Modelled: exactly what a [`Tlb`] of the same geometry does: entries keyed by (page,
//! size, tag) or (page, size) for a global one, any page size, flags, service levels carried
//! in the entry, LRU replacement with the lowest empty way filled first.
//!
//! Implementation: a level with LRU replacement and no service-level quotas (a hierarchy
//! without a partition controller, or with no quota set: every default and preset but the
//! tag paper's) has one of two lean forms, chosen once at construction:
//! - 4 to 16 ways: per set, 16 keys and fingerprints (one SSE2 compare finds a page) and
//!   the ways in recency order in one word; per way the entry.
//! - one set of 17 to 255 ways (fully associative, as the default L1 DTLB's 96): per way
//!   its key, entry, next way in its hash bucket and neighbours in a recency list; a lookup
//!   follows one bucket's chain, a touch relinks the way to the list's front, the victim is
//!   its tail.
//!
//! Both also count entries per page size and global entries, and remember the last missed
//! key, and nothing else. A `Tlb` also keeps counts per service level, a last-hit memo, an
//! index or a touch queue, and flags for the other policies and shapes, all tested on every
//! operation. Any other shape or policy, or a level with quotas, is a `Tlb`. The forms give
//! the same hits, victims and entries in the same order (the `level_matches_tlb` test).
//!
//! Recency by order word or list where a `Tlb` keeps stamps: all are exact LRU and a victim
//! is chosen only in a full set, whose every way has been touched since it was filled, so
//! they name the same way.

use super::set_assoc::{
    entry_key, find_key, fingerprint, fp_mask, key_base, key_is_tag, order_touch, Replacement, Tlb, TlbEntry, TlbGeometry, FLAG_DIRTY, KEY_GLOBAL_BIT,
    KEY_SIZE_SHIFT, NO_ENTRY,
};
use crate::types::{PageSize, Vpn};

/// Key of an empty way (as in `Tlb`: no real key has all bits set).
const INVALID: u64 = u64::MAX;
/// Most ways the lean set form takes (its recency order is 4-bit fields of one word).
const LEAN_MAX_WAYS: usize = 16;
/// Fewest: its sets are 16 ways wide whatever the associativity (so that every scan has one
/// width), so a 2-way structure would take 8 times its size.
const LEAN_MIN_WAYS: usize = 4;
/// Most ways the lean fully associative form takes (its links are bytes, `NIL` excluded).
const FA_MAX_WAYS: usize = 255;
/// No way (end of a chain or of the recency list).
const NIL: u8 = u8::MAX;

pub struct TlbLevel {
    imp: Imp,
}

// An explicit tag: left to itself, the compiler hides the variant in a spare value of one
// of `Tlb`'s fields, and every call decodes it (some 15 host instructions per lookup).
#[repr(u8)]
enum Imp {
    Lean(LeanLevel),
    Fa(LeanFa),
    /// Not boxed: the hierarchy's lookup reads a level's page-size counts for every probe
    /// of a large page size, one load more through a box.
    General(Tlb),
}

struct LeanLevel {
    ways: usize,
    set_mask: usize,
    /// Per set, 16 ways whatever `ways` is (so that every scan is one fixed-width compare):
    /// ways from `ways` up hold `UNUSED`.
    sets: Vec<LeanSet>,
    slots: Vec<[TlbEntry; LEAN_MAX_WAYS]>,
    /// Entries the structure can hold (`ways` per set).
    capacity: u32,
    valid: u32,
    globals: u32,
    size_count: [u32; 3],
    /// The exact key of the last lookup that missed, while no entry has been placed or
    /// removed since: the insert that follows a miss knows its key is absent.
    missed: u64,
}

/// One set's keys, their fingerprints (`set_assoc::fingerprint`) and its ways in recency
/// order, 4 bits each, least recently used lowest (as `Tlb::lru_order`).
#[derive(Clone)]
struct LeanSet {
    keys: [u64; LEAN_MAX_WAYS],
    fps: [u16; LEAN_MAX_WAYS],
    order: u64,
}

/// Key of a way beyond the structure's associativity: like `INVALID`, its size field is 3,
/// so no query key equals it, and it is not `INVALID`, so no empty-way search finds it.
const UNUSED: u64 = u64::MAX - 1;

impl TlbLevel {
    /// A level of `geometry` (the same rules and messages as [`Tlb::new`]);
    /// `quotas_possible`: the hierarchy may give it service-level quotas, which only the
    /// general form keeps.
    pub fn new(geometry: &TlbGeometry, seed: u64, quotas_possible: bool) -> Result<TlbLevel, String> {
        // The general structure checks the geometry, whatever the form, so that errors read
        // the same.
        let general = Tlb::new(geometry, seed)?;
        let (entries, ways) = (geometry.entries as usize, geometry.ways as usize);
        let lru = !quotas_possible && geometry.replacement == Replacement::Lru && entries > 0;
        let lean = lru && (LEAN_MIN_WAYS..=LEAN_MAX_WAYS).contains(&ways);
        let lean_fa = lru && entries == ways && (LEAN_MAX_WAYS + 1..=FA_MAX_WAYS).contains(&ways);
        if lean_fa {
            return Ok(TlbLevel { imp: Imp::Fa(LeanFa::new(ways)) });
        }
        if !lean {
            return Ok(TlbLevel { imp: Imp::General(general) });
        }
        let sets = entries / ways;
        let keys = std::array::from_fn(|w| if w < ways { INVALID } else { UNUSED });
        Ok(TlbLevel {
            imp: Imp::Lean(LeanLevel {
                ways,
                set_mask: sets - 1,
                // Never-touched ways cannot be in a full set, so their initial order is moot.
                sets: vec![LeanSet { keys, fps: [0; LEAN_MAX_WAYS], order: (0..ways as u64).fold(0, |o, w| o | (w << (4 * w))) }; sets],
                slots: vec![[NO_ENTRY; LEAN_MAX_WAYS]; sets],
                capacity: entries as u32,
                valid: 0,
                globals: 0,
                size_count: [0; 3],
                missed: INVALID,
            }),
        })
    }

    /// As [`Tlb::lookup`].
    #[inline]
    pub fn lookup(&mut self, vpn: Vpn, size: PageSize, tag: u16) -> Option<TlbEntry> {
        match &mut self.imp {
            Imp::Lean(c) => c.lookup(vpn, size, tag),
            Imp::Fa(c) => c.lookup(vpn, size, tag),
            Imp::General(t) => t.lookup(vpn, size, tag),
        }
    }

    /// As [`Tlb::holds`].
    #[inline(always)]
    pub fn holds(&self, size: PageSize) -> bool {
        match &self.imp {
            Imp::Lean(c) => c.size_count[size as usize] != 0,
            Imp::Fa(c) => c.size_count[size as usize] != 0,
            Imp::General(t) => t.holds(size),
        }
    }

    /// As [`Tlb::prefetch`].
    #[inline]
    pub fn prefetch(&self, vpn: Vpn, size: PageSize, tag: u16) {
        match &self.imp {
            Imp::Lean(c) => crate::prefetch::read(&c.sets[c.set_of(key_base(vpn, size).1)].fps),
            // Small enough to stay in the host's cache.
            Imp::Fa(_) => {}
            Imp::General(t) => t.prefetch(vpn, size, tag),
        }
    }

    /// As [`Tlb::insert`], or [`Tlb::insert_with_quota`] when `quota` is not empty (for the
    /// tests, which compare displaced entries with a `Tlb`'s).
    #[cfg(test)]
    pub fn insert(&mut self, entry: TlbEntry, quota: &[u32]) -> Option<TlbEntry> {
        let mut old = None;
        self.insert_reporting(entry, quota, |v| old = Some(*v));
        old
    }

    /// As [`Tlb::insert`], or [`Tlb::insert_with_quota`] when `quota` is not empty, showing
    /// the displaced entry to `evicted` (before the new one is written) rather than
    /// returning it: a caller that only counts evictions passes a closure that does nothing,
    /// and the lean forms then never copy the entry out. Returns whether an entry was
    /// displaced.
    #[inline]
    pub fn insert_reporting(&mut self, entry: TlbEntry, quota: &[u32], evicted: impl FnOnce(&TlbEntry)) -> bool {
        // The lean forms exist only where no quota can be set (`new`).
        debug_assert!(quota.is_empty() || matches!(self.imp, Imp::General(_)), "quotas on a lean TLB level");
        match &mut self.imp {
            Imp::Lean(c) => c.insert(entry, evicted),
            Imp::Fa(c) => c.insert(entry, evicted),
            Imp::General(t) => match t.insert_honouring(entry, quota) {
                Some(v) => {
                    evicted(&v);
                    true
                }
                None => false,
            },
        }
    }

    /// As [`Tlb::mark_dirty`].
    pub fn mark_dirty(&mut self, vpn: Vpn, size: PageSize, tag: u16) {
        match &mut self.imp {
            Imp::Lean(c) => {
                let (base, units) = key_base(vpn, size);
                let set = c.set_of(units);
                if let Some(w) = c.find(set, base | tag as u64, base | KEY_GLOBAL_BIT) {
                    c.slots[set][w].flags |= FLAG_DIRTY;
                }
            }
            Imp::Fa(c) => {
                let (base, _) = key_base(vpn, size);
                if let Some(w) = c.find(base | tag as u64, base | KEY_GLOBAL_BIT) {
                    c.a.slots[ix(w)].flags |= FLAG_DIRTY;
                }
            }
            Imp::General(t) => t.mark_dirty(vpn, size, tag),
        }
    }

    /// As [`Tlb::invalidate_page`].
    pub fn invalidate_page(&mut self, vpn: Vpn, tag: Option<u16>, removed: &mut dyn FnMut(&TlbEntry)) -> u32 {
        match &mut self.imp {
            Imp::Lean(c) => c.visit_page(vpn, tag, &mut |c, set, w| {
                removed(&c.slots[set][w]);
                c.remove(set, w);
            }),
            Imp::Fa(c) => c.visit_page(vpn, tag, &mut |c, w| {
                removed(&c.a.slots[ix(w)]);
                c.remove(w);
            }),
            Imp::General(t) => t.invalidate_page(vpn, tag, removed),
        }
    }

    /// As [`Tlb::mark_page_if`].
    pub fn mark_page_if(&mut self, vpn: Vpn, tag: Option<u16>, flag: u8, pred: &dyn Fn(&TlbEntry) -> bool) -> u32 {
        match &mut self.imp {
            Imp::Lean(c) => {
                let mut n = 0;
                c.visit_page(vpn, tag, &mut |c, set, w| {
                    if pred(&c.slots[set][w]) {
                        c.slots[set][w].flags |= flag;
                        n += 1;
                    }
                });
                n
            }
            Imp::Fa(c) => {
                let mut n = 0;
                c.visit_page(vpn, tag, &mut |c, w| {
                    if pred(&c.a.slots[ix(w)]) {
                        c.a.slots[ix(w)].flags |= flag;
                        n += 1;
                    }
                });
                n
            }
            Imp::General(t) => t.mark_page_if(vpn, tag, flag, pred),
        }
    }

    /// As [`Tlb::invalidate_tag`].
    pub fn invalidate_tag(&mut self, tag: u16, removed: &mut dyn FnMut(&TlbEntry)) -> u32 {
        match &mut self.imp {
            Imp::Lean(c) => c.remove_where(|k| key_is_tag(k, tag), removed),
            Imp::Fa(c) => c.remove_where(|k| key_is_tag(k, tag), removed),
            Imp::General(t) => t.invalidate_tag(tag, removed),
        }
    }

    /// As [`Tlb::flush`].
    pub fn flush(&mut self, keep_global: bool, removed: &mut dyn FnMut(&TlbEntry)) -> u32 {
        match &mut self.imp {
            Imp::Lean(c) => c.remove_where(|k| !(keep_global && k & KEY_GLOBAL_BIT != 0), removed),
            Imp::Fa(c) => c.remove_where(|k| !(keep_global && k & KEY_GLOBAL_BIT != 0), removed),
            Imp::General(t) => t.flush(keep_global, removed),
        }
    }

    /// As [`Tlb::mark_where`].
    pub fn mark_where(&mut self, pred: impl Fn(&TlbEntry) -> bool, flag: u8) -> u32 {
        match &mut self.imp {
            Imp::Lean(c) => {
                let mut n = 0;
                for (set, slots) in c.sets.iter().zip(c.slots.iter_mut()) {
                    for w in 0..c.ways {
                        if set.keys[w] != INVALID && pred(&slots[w]) {
                            slots[w].flags |= flag;
                            n += 1;
                        }
                    }
                }
                n
            }
            Imp::Fa(c) => {
                let mut n = 0;
                for w in 0..c.ways {
                    if c.a.keys[w] != INVALID && pred(&c.a.slots[w]) {
                        c.a.slots[w].flags |= flag;
                        n += 1;
                    }
                }
                n
            }
            Imp::General(t) => t.mark_where(pred, flag),
        }
    }

    /// Every entry, in storage order (set by set, way by way), as [`Tlb::entries`].
    pub fn entries(&self) -> Vec<TlbEntry> {
        match &self.imp {
            Imp::Lean(c) => c.sets.iter().zip(&c.slots).flat_map(|(set, slots)| (0..c.ways).filter(|&w| set.keys[w] != INVALID).map(|w| slots[w])).collect(),
            Imp::Fa(c) => c.a.keys[..c.ways].iter().zip(&c.a.slots).filter(|(&k, _)| k != INVALID).map(|(_, e)| *e).collect(),
            Imp::General(t) => t.entries().copied().collect(),
        }
    }

    /// Entries held.
    pub fn occupancy(&self) -> u32 {
        match &self.imp {
            Imp::Lean(c) => c.valid,
            Imp::Fa(c) => c.valid,
            Imp::General(t) => t.occupancy(),
        }
    }
}

impl LeanLevel {
    /// The set of a page whose number in its size's units is `units`.
    #[inline(always)]
    fn set_of(&self, units: u64) -> usize {
        units as usize & self.set_mask
    }

    /// Make way `w` of `set` most recently used.
    #[inline(always)]
    fn touch(&mut self, set: usize, w: usize) {
        let s = &mut self.sets[set];
        s.order = order_touch(s.order, w as u64, self.ways as u32);
    }

    /// The ways of `set` whose key may be `key` (the fingerprint ignores tag and global bit:
    /// the exact and the global key of a page share it).
    #[inline(always)]
    fn candidates(&self, set: usize, key: u64) -> u64 {
        fp_mask(&self.sets[set].fps, fingerprint(key))
    }

    /// The way that answers a query: the exact-key way if any, else the global-key way.
    #[inline(always)]
    fn find(&self, set: usize, exact: u64, global: u64) -> Option<usize> {
        let mut m = self.candidates(set, exact);
        let keys = &self.sets[set].keys;
        let mut found_global = None;
        while m != 0 {
            let w = m.trailing_zeros() as usize & (LEAN_MAX_WAYS - 1);
            m &= m - 1;
            if keys[w] == exact {
                return Some(w);
            }
            if keys[w] == global {
                found_global = Some(w);
            }
        }
        found_global
    }

    /// The way of `set` holding exactly `key`.
    #[inline(always)]
    fn find_exact(&self, set: usize, key: u64) -> Option<usize> {
        self.find(set, key, key)
    }

    // Out of line, like `Tlb::lookup`: inlined into the engine's access loop (three probes
    // of L2 per access) it cost that loop more than the call.
    #[inline(never)]
    fn lookup(&mut self, vpn: Vpn, size: PageSize, tag: u16) -> Option<TlbEntry> {
        let (base, units) = key_base(vpn, size);
        let exact = base | tag as u64;
        let set = self.set_of(units);
        let Some(w) = self.find(set, exact, base | KEY_GLOBAL_BIT) else {
            self.missed = exact;
            return None;
        };
        self.touch(set, w);
        Some(self.slots[set][w])
    }

    #[inline(always)]
    fn insert(&mut self, entry: TlbEntry, evicted: impl FnOnce(&TlbEntry)) -> bool {
        let (key, units) = entry_key(&entry);
        let set = self.set_of(units);
        // The same key: overwritten in place, most recently used (same size and global bit,
        // so no count changes).
        if key != self.missed {
            if let Some(w) = self.find_exact(set, key) {
                self.slots[set][w] = entry;
                self.touch(set, w);
                return false;
            }
        }
        // Else the lowest empty way, else the least recently used one.
        let free = if self.valid == self.capacity { None } else { find_key(&self.sets[set].keys, INVALID) };
        let (w, displaced) = match free {
            Some(w) => {
                self.valid += 1;
                (w, false)
            }
            None => {
                let w = (self.sets[set].order & 15) as usize;
                let old = &self.slots[set][w];
                evicted(old);
                self.size_count[old.size as usize] -= 1;
                self.globals -= (self.sets[set].keys[w] & KEY_GLOBAL_BIT != 0) as u32;
                (w, true)
            }
        };
        self.size_count[entry.size as usize] += 1;
        self.globals += (key & KEY_GLOBAL_BIT != 0) as u32;
        let s = &mut self.sets[set];
        s.keys[w] = key;
        s.fps[w] = fingerprint(key);
        self.slots[set][w] = entry;
        self.missed = INVALID;
        self.touch(set, w);
        displaced
    }

    fn remove(&mut self, set: usize, w: usize) {
        let k = self.sets[set].keys[w];
        debug_assert_ne!(k, INVALID);
        self.globals -= (k & KEY_GLOBAL_BIT != 0) as u32;
        self.size_count[self.slots[set][w].size as usize] -= 1;
        self.sets[set].keys[w] = INVALID;
        self.missed = INVALID;
        self.valid -= 1;
    }

    /// Remove every entry whose key satisfies `pred`, in storage order; returns how many.
    fn remove_where(&mut self, pred: impl Fn(u64) -> bool, removed: &mut dyn FnMut(&TlbEntry)) -> u32 {
        if self.valid == 0 {
            return 0;
        }
        let mut n = 0;
        for set in 0..self.sets.len() {
            for w in 0..self.ways {
                let k = self.sets[set].keys[w];
                if k != INVALID && pred(k) {
                    removed(&self.slots[set][w]);
                    self.remove(set, w);
                    n += 1;
                }
            }
        }
        n
    }

    /// Call `action` on (set, way) of every entry (of any size) whose page contains 4 KiB
    /// page `vpn`, with tag `tag` (or global) if `Some`, any tag if `None`, sizes smallest
    /// first and ways in order (as `Tlb::visit_page`); returns how many.
    fn visit_page(&mut self, vpn: Vpn, tag: Option<u16>, action: &mut dyn FnMut(&mut LeanLevel, usize, usize)) -> u32 {
        let mut n = 0;
        for size in PageSize::ALL {
            if self.size_count[size as usize] == 0 {
                continue;
            }
            let (base, units) = key_base(vpn.align(size), size);
            let set = self.set_of(units);
            let page = base >> KEY_SIZE_SHIFT;
            for w in 0..self.ways {
                let k = self.sets[set].keys[w];
                if k == INVALID || (k >> KEY_SIZE_SHIFT) != page {
                    continue;
                }
                let hit = match tag {
                    None => true,
                    Some(t) => k & KEY_GLOBAL_BIT != 0 || (k as u16) == t,
                };
                if hit {
                    action(self, set, w);
                    n += 1;
                }
            }
        }
        n
    }
}

/// A fully associative level of 17 to 255 ways: per way its key, entry, the next way of its
/// hash bucket and its neighbours in recency order (a doubly linked list, most recently
/// used first), and a bitmap of empty ways. A lookup is a bucket's chain (one way,
/// usually); a touch relinks a way to the front of the list; the victim is its tail.
struct LeanFa {
    ways: usize,
    /// Fixed-size arrays indexed by a way number's byte, so that no access needs a bounds
    /// check; ways from `ways` up stay empty.
    a: Box<FaArrays>,
    bucket_shift: u32,
    /// Bit w set: way w is empty.
    free: [u64; 4],
    valid: u32,
    globals: u32,
    size_count: [u32; 3],
    /// As `LeanLevel::missed`.
    missed: u64,
}

struct FaArrays {
    keys: [u64; 256],
    slots: [TlbEntry; 256],
    /// Head way of each bucket's chain (`NIL`: empty); the first 2 × ways rounded up to a
    /// power of two are used.
    buckets: [u8; 512],
    /// Next way of the same bucket.
    chain: [u8; 256],
    /// Recency neighbours: `newer` towards the most recently used way, `older` towards the
    /// least. A circular list through the sentinel `HEAD` (no way is numbered 255):
    /// `older[HEAD]` is the most recently used way, `newer[HEAD]` the least (`HEAD` itself
    /// when empty), so that relinking a way takes no branch.
    newer: [u8; 256],
    older: [u8; 256],
}

/// The recency list's sentinel (`FaArrays::newer`): ways are numbered below FA_MAX_WAYS,
/// so none has its number.
const HEAD: usize = NIL as usize;
const _: () = assert!(FA_MAX_WAYS <= HEAD);

/// A way number as an index of the 256-entry arrays (a no-op on valid ways; it lets the
/// compiler drop the bounds check).
#[inline(always)]
fn ix(w: usize) -> usize {
    w & 0xFF
}

impl LeanFa {
    fn new(ways: usize) -> LeanFa {
        let buckets = (2 * ways).next_power_of_two();
        let mut free = [0u64; 4];
        for w in 0..ways {
            free[w >> 6] |= 1 << (w & 63);
        }
        LeanFa {
            ways,
            a: Box::new(FaArrays {
                keys: [INVALID; 256],
                slots: [NO_ENTRY; 256],
                buckets: [NIL; 512],
                chain: [NIL; 256],
                newer: [NIL; 256],
                older: [NIL; 256],
            }),
            bucket_shift: 64 - buckets.trailing_zeros(),
            free,
            valid: 0,
            globals: 0,
            size_count: [0; 3],
            missed: INVALID,
        }
    }

    #[inline(always)]
    fn bucket(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.bucket_shift) as usize & 511
    }

    /// The way holding exactly `key`.
    #[inline(always)]
    fn find_exact(&self, key: u64) -> Option<usize> {
        let mut w = self.a.buckets[self.bucket(key)];
        while w != NIL {
            if self.a.keys[ix(w as usize)] == key {
                return Some(w as usize);
            }
            w = self.a.chain[ix(w as usize)];
        }
        None
    }

    /// The way that answers a query: the exact-key way if any, else the global-key way.
    #[inline(always)]
    fn find(&self, exact: u64, global: u64) -> Option<usize> {
        match self.find_exact(exact) {
            Some(w) => Some(w),
            None if self.globals > 0 => self.find_exact(global),
            None => None,
        }
    }

    /// The most recently used way (`HEAD`: empty).
    #[inline(always)]
    fn mru(&self) -> usize {
        self.a.older[HEAD] as usize
    }

    /// The least recently used way (`HEAD`: empty).
    #[inline(always)]
    fn lru(&self) -> usize {
        self.a.newer[HEAD] as usize
    }

    #[inline(always)]
    fn unlink(&mut self, w: usize) {
        let (o, n) = (self.a.older[ix(w)], self.a.newer[ix(w)]);
        self.a.newer[ix(o as usize)] = n;
        self.a.older[ix(n as usize)] = o;
    }

    #[inline(always)]
    fn push_mru(&mut self, w: usize) {
        let mru = self.mru();
        self.a.older[ix(w)] = mru as u8;
        self.a.newer[ix(w)] = HEAD as u8;
        self.a.newer[ix(mru)] = w as u8;
        self.a.older[HEAD] = w as u8;
    }

    /// Make way `w` most recently used.
    #[inline(always)]
    fn touch(&mut self, w: usize) {
        if self.mru() != w {
            self.unlink(w);
            self.push_mru(w);
        }
    }

    /// Take way `w` (holding `key`) out of its bucket's chain.
    fn unchain(&mut self, w: usize, key: u64) {
        let b = self.bucket(key);
        let mut p = self.a.buckets[b];
        if p as usize == w {
            self.a.buckets[b] = self.a.chain[ix(w)];
            return;
        }
        loop {
            let n = self.a.chain[ix(p as usize)];
            debug_assert_ne!(n, NIL, "way {w} missing from its chain");
            if n as usize == w {
                self.a.chain[ix(p as usize)] = self.a.chain[ix(w)];
                return;
            }
            p = n;
        }
    }

    // Out of line for the same reason as `LeanLevel::lookup`.
    #[inline(never)]
    fn lookup(&mut self, vpn: Vpn, size: PageSize, tag: u16) -> Option<TlbEntry> {
        let (base, _) = key_base(vpn, size);
        let exact = base | tag as u64;
        let Some(w) = self.find(exact, base | KEY_GLOBAL_BIT) else {
            self.missed = exact;
            return None;
        };
        self.touch(w);
        Some(self.a.slots[ix(w)])
    }

    #[inline(always)]
    fn insert(&mut self, entry: TlbEntry, evicted: impl FnOnce(&TlbEntry)) -> bool {
        let (key, _) = entry_key(&entry);
        if key != self.missed {
            if let Some(w) = self.find_exact(key) {
                self.a.slots[ix(w)] = entry;
                self.touch(w);
                return false;
            }
        }
        // Else the lowest empty way, else the least recently used one.
        let (w, displaced) = if self.valid as usize == self.ways {
            let w = self.lru();
            let old = &self.a.slots[ix(w)];
            evicted(old);
            let old_key = self.a.keys[ix(w)];
            self.size_count[old.size as usize] -= 1;
            self.globals -= (old_key & KEY_GLOBAL_BIT != 0) as u32;
            self.unlink(w);
            self.unchain(w, old_key);
            (w, true)
        } else {
            let i = self.free.iter().position(|&f| f != 0).expect("an empty way");
            let w = (i << 6) | self.free[i].trailing_zeros() as usize;
            self.free[i] &= !(1 << (w & 63));
            self.valid += 1;
            (w, false)
        };
        self.size_count[entry.size as usize] += 1;
        self.globals += (key & KEY_GLOBAL_BIT != 0) as u32;
        self.a.keys[ix(w)] = key;
        self.a.slots[ix(w)] = entry;
        let b = self.bucket(key);
        self.a.chain[ix(w)] = self.a.buckets[b];
        self.a.buckets[b] = w as u8;
        self.push_mru(w);
        self.missed = INVALID;
        displaced
    }

    fn remove(&mut self, w: usize) {
        let k = self.a.keys[ix(w)];
        debug_assert_ne!(k, INVALID);
        self.globals -= (k & KEY_GLOBAL_BIT != 0) as u32;
        self.size_count[self.a.slots[ix(w)].size as usize] -= 1;
        self.unlink(w);
        self.unchain(w, k);
        self.a.keys[ix(w)] = INVALID;
        self.free[w >> 6] |= 1 << (w & 63);
        self.missed = INVALID;
        self.valid -= 1;
    }

    /// Remove every entry whose key satisfies `pred`, in storage order; returns how many.
    fn remove_where(&mut self, pred: impl Fn(u64) -> bool, removed: &mut dyn FnMut(&TlbEntry)) -> u32 {
        if self.valid == 0 {
            return 0;
        }
        let mut n = 0;
        for w in 0..self.ways {
            let k = self.a.keys[ix(w)];
            if k != INVALID && pred(k) {
                removed(&self.a.slots[ix(w)]);
                self.remove(w);
                n += 1;
            }
        }
        n
    }

    /// As `LeanLevel::visit_page` (ways in order).
    fn visit_page(&mut self, vpn: Vpn, tag: Option<u16>, action: &mut dyn FnMut(&mut LeanFa, usize)) -> u32 {
        let mut n = 0;
        for size in PageSize::ALL {
            if self.size_count[size as usize] == 0 {
                continue;
            }
            let (base, _) = key_base(vpn.align(size), size);
            match tag {
                // One tag: the page's entry with that tag and its global entry, found
                // through their chains, lower way first.
                Some(t) => {
                    let a = self.find_exact(base | t as u64);
                    let b = if self.globals > 0 { self.find_exact(base | KEY_GLOBAL_BIT) } else { None };
                    let (first, second) = match (a, b) {
                        (Some(a), Some(b)) if b < a => (Some(b), Some(a)),
                        (a, b) => (a, b),
                    };
                    for w in [first, second].into_iter().flatten() {
                        action(self, w);
                        n += 1;
                    }
                }
                None => {
                    let page = base >> KEY_SIZE_SHIFT;
                    for w in 0..self.ways {
                        let k = self.a.keys[ix(w)];
                        if k != INVALID && (k >> KEY_SIZE_SHIFT) == page {
                            action(self, w);
                            n += 1;
                        }
                    }
                }
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use crate::tlb::set_assoc::{FLAG_GLOBAL, FLAG_STALE};
    use crate::types::Pfn;

    /// Random TLB traffic (lookups and inserts of every page size over a few pages, tags
    /// and global entries; dirty and stale marks; page, tag and whole invalidations) on the
    /// lean form and on a `Tlb` of the same geometry: the same hits and entries returned,
    /// the same victims, the same entries removed in the same order, the same contents.
    #[test]
    fn level_matches_tlb() {
        let geometries = [(64, 16), (16, 16), (256, 16), (32, 4), (48, 12), (16, 8), (4, 4), (6, 6), (20, 5), (96, 96), (17, 17), (64, 64), (255, 255)];
        for (entries, ways) in geometries {
            for seed in 0..8u64 {
                let g = TlbGeometry { entries, ways, replacement: Replacement::Lru };
                let mut lean = TlbLevel::new(&g, seed, false).unwrap();
                assert!(matches!(lean.imp, Imp::Lean(_) | Imp::Fa(_)), "{entries}x{ways}: a lean form");
                let mut tlb = Tlb::new(&g, seed).unwrap();
                let mut rng = SplitMix64::new(seed);
                // 4 KiB pages over a few 2 MiB regions of two 1 GiB regions, so that sizes
                // overlap and sets collide.
                let pages = 4 * entries as u64;
                let page = |rng: &mut SplitMix64| Vpn(rng.below(2) << 18 | rng.below(3) << 9 | rng.below(pages.min(512)));
                for step in 0..6000 {
                    let size = match rng.below(10) {
                        0 => PageSize::Size1G,
                        1 | 2 => PageSize::Size2M,
                        _ => PageSize::Size4K,
                    };
                    let vpn = page(&mut rng);
                    let tag = rng.below(3) as u16;
                    let at = format!("{entries}x{ways} seed {seed} step {step}");
                    match rng.below(100) {
                        0..=39 => {
                            let v = vpn.align(size);
                            assert_eq!(lean.lookup(v, size, tag), tlb.lookup(v, size, tag), "{at}: lookup");
                        }
                        40..=79 => {
                            let flags = if rng.below(8) == 0 { FLAG_GLOBAL } else { 0 };
                            let e = TlbEntry { vpn: vpn.align(size), pfn: Pfn(rng.below(1000)), size, tag, sl: rng.below(3) as u8, flags };
                            assert_eq!(lean.insert(e, &[]), tlb.insert(e), "{at}: insert");
                        }
                        80..=83 => {
                            let v = vpn.align(size);
                            lean.mark_dirty(v, size, tag);
                            tlb.mark_dirty(v, size, tag);
                        }
                        84..=89 => {
                            let t = if rng.below(3) == 0 { None } else { Some(tag) };
                            let (mut a, mut b) = (Vec::new(), Vec::new());
                            assert_eq!(
                                lean.invalidate_page(vpn, t, &mut |e| a.push(*e)),
                                tlb.invalidate_page(vpn, t, &mut |e| b.push(*e)),
                                "{at}: invalidate_page"
                            );
                            assert_eq!(a, b, "{at}: removed by invalidate_page");
                        }
                        90..=92 => {
                            let t = if rng.below(3) == 0 { None } else { Some(tag) };
                            let p = rng.below(7);
                            let pred = |e: &TlbEntry| e.pfn.0 % 7 != p;
                            let flag = if rng.below(2) == 0 { 0 } else { FLAG_STALE };
                            assert_eq!(lean.mark_page_if(vpn, t, flag, &pred), tlb.mark_page_if(vpn, t, flag, &pred), "{at}: mark_page_if");
                        }
                        93..=94 => {
                            let p = rng.below(1000);
                            assert_eq!(
                                lean.mark_where(|e| e.pfn.0 % 7 == p % 7, FLAG_STALE),
                                tlb.mark_where(|e| e.pfn.0 % 7 == p % 7, FLAG_STALE),
                                "{at}: mark"
                            );
                        }
                        95..=97 => {
                            let (mut a, mut b) = (Vec::new(), Vec::new());
                            assert_eq!(lean.invalidate_tag(tag, &mut |e| a.push(*e)), tlb.invalidate_tag(tag, &mut |e| b.push(*e)), "{at}: invalidate_tag");
                            assert_eq!(a, b, "{at}: removed by invalidate_tag");
                        }
                        _ => {
                            let (mut a, mut b) = (Vec::new(), Vec::new());
                            let keep = rng.below(2) == 0;
                            assert_eq!(lean.flush(keep, &mut |e| a.push(*e)), tlb.flush(keep, &mut |e| b.push(*e)), "{at}: flush");
                            assert_eq!(a, b, "{at}: removed by flush");
                        }
                    }
                    for s in PageSize::ALL {
                        assert_eq!(lean.holds(s), tlb.holds(s), "{at}: holds {s:?}");
                    }
                    assert_eq!(lean.entries(), tlb.entries().copied().collect::<Vec<_>>(), "{at}: contents");
                    assert_eq!(lean.occupancy(), tlb.occupancy(), "{at}: occupancy");
                }
            }
        }
    }

    #[test]
    fn other_shapes_and_quotas_are_the_general_structure() {
        let lru = |entries, ways| TlbGeometry { entries, ways, replacement: Replacement::Lru };
        assert!(matches!(TlbLevel::new(&lru(64, 16), 1, true).unwrap().imp, Imp::General(_)), "quotas");
        assert!(matches!(TlbLevel::new(&lru(96, 96), 1, false).unwrap().imp, Imp::Fa(_)), "96 ways");
        assert!(matches!(TlbLevel::new(&lru(256, 256), 1, false).unwrap().imp, Imp::General(_)), "256 ways");
        assert!(matches!(TlbLevel::new(&lru(64, 32), 1, false).unwrap().imp, Imp::General(_)), "32 ways, 2 sets");
        assert!(matches!(TlbLevel::new(&lru(64, 2), 1, false).unwrap().imp, Imp::General(_)), "2 ways");
        assert!(matches!(TlbLevel::new(&lru(0, 4), 1, false).unwrap().imp, Imp::General(_)), "absent");
        for replacement in [Replacement::Plru, Replacement::Fifo, Replacement::Random] {
            let g = TlbGeometry { entries: 64, ways: 16, replacement };
            assert!(matches!(TlbLevel::new(&g, 1, false).unwrap().imp, Imp::General(_)), "{replacement:?}");
        }
        let e = TlbLevel::new(&lru(30, 4), 1, false).err().unwrap();
        assert_eq!(e, Tlb::new(&lru(30, 4), 1).err().unwrap(), "the same message as a Tlb");
    }
}
