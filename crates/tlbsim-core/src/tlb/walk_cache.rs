//! A page-walk cache: Intel's paging-structure caches (PML4E, PDPTE and PDE caches; SDM
//! vol. 3 §4.10.3, docs/ARCHITECTURE.md "TLBs (per core)"). An entry names the next table of a walk
//! for a virtual-address prefix and a tag; a walk starts below the deepest one that hits.
//!
//! Modelled: what a [`Tlb`] of the same geometry does with the entries a walk puts in it.
//! Those are all alike: keyed by (prefix, tag), never global, one page size, service level
//! 0, their flags only the checker's stale mark; and only a `Tlb` with service-level quotas
//! (a hierarchy with a partition controller) treats two of them differently by their level.
//!
//! Implementation: a walk cache of up to 8 ways with LRU replacement and no quotas (every
//! default and preset) keeps a key, a recency stamp and the entry per way, and nothing else
//! (a `Tlb` also keeps counts per page size, service level and global bit, fingerprints, an
//! index, a last-hit memo, and flags for the other policies, all on every operation). Any
//! other shape or policy, or a hierarchy with quotas, is a `Tlb`. Both give the same hits,
//! victims and entries in the same order (the `walk_cache_matches_tlb` test).

use super::set_assoc::{find_key, key_base, key_is_tag, lru_way, Replacement, Tlb, TlbEntry, TlbGeometry, FLAG_GLOBAL, NO_ENTRY};
use crate::types::{PageSize, Vpn};

/// Key of an empty way (as in `Tlb`: no real key has all bits set).
const INVALID: u64 = u64::MAX;
/// Most ways the lean form takes (its set scans are `find_key`'s unrolled compares).
const LEAN_MAX_WAYS: usize = 8;

pub struct WalkCache {
    imp: Imp,
}

// An explicit tag (as `level::Imp`): cheaper to test than a variant hidden in a spare
// value of one of `Tlb`'s fields.
#[repr(u8)]
enum Imp {
    Lean(LeanWalkCache),
    /// Boxed: a `Tlb` is over ten times the lean form's size, and rarer.
    General(Box<Tlb>),
}

struct LeanWalkCache {
    ways: usize,
    set_mask: usize,
    keys: Vec<u64>,
    /// Per way: the `clock` of its last touch (insert, overwrite or hit).
    stamps: Vec<u64>,
    slots: Vec<TlbEntry>,
    clock: u64,
    valid: u32,
    /// The key of the last lookup that missed, while no entry has been placed or removed
    /// since (as `level::LeanLevel`): the insert a walk makes after a miss skips the scan
    /// for that key.
    missed: u64,
}

impl WalkCache {
    /// A walk cache of `geometry` (the same rules and messages as [`Tlb::new`]);
    /// `quotas_possible`: the hierarchy may give it service-level quotas, which only the
    /// general form keeps.
    pub fn new(geometry: &TlbGeometry, seed: u64, quotas_possible: bool) -> Result<WalkCache, String> {
        // The general structure checks the geometry, whatever the form, so that errors read
        // the same.
        let general = Tlb::new(geometry, seed)?;
        let (entries, ways) = (geometry.entries as usize, geometry.ways as usize);
        let lean = !quotas_possible && geometry.replacement == Replacement::Lru && entries > 0 && ways <= LEAN_MAX_WAYS;
        if !lean {
            return Ok(WalkCache { imp: Imp::General(Box::new(general)) });
        }
        Ok(WalkCache {
            imp: Imp::Lean(LeanWalkCache {
                ways,
                set_mask: entries / ways - 1,
                keys: vec![INVALID; entries],
                stamps: vec![0; entries],
                slots: vec![NO_ENTRY; entries],
                clock: 0,
                valid: 0,
                missed: INVALID,
            }),
        })
    }

    /// The entry for prefix `vpn` (a 4 KiB-sized key: the virtual address shifted by the
    /// bits the cached table level covers) and `tag`, made most recently used.
    #[inline]
    pub fn lookup(&mut self, vpn: Vpn, tag: u16) -> Option<TlbEntry> {
        match &mut self.imp {
            Imp::Lean(c) => c.lookup(vpn, tag),
            Imp::General(t) => t.lookup(vpn, PageSize::Size4K, tag),
        }
    }

    /// Insert `entry` (as [`Tlb::insert`], or [`Tlb::insert_with_quota`] when `quota` is
    /// not empty); returns the entry it displaced.
    #[inline]
    pub fn insert(&mut self, entry: TlbEntry, quota: &[u32]) -> Option<TlbEntry> {
        match &mut self.imp {
            Imp::Lean(c) => {
                // The lean form exists only where no quota can be set (`new`).
                debug_assert!(quota.is_empty(), "quotas on a lean walk cache");
                c.insert(entry)
            }
            Imp::General(t) => t.insert_honouring(entry, quota),
        }
    }

    /// As [`Tlb::flush`].
    pub fn flush(&mut self, keep_global: bool, removed: &mut dyn FnMut(&TlbEntry)) -> u32 {
        match &mut self.imp {
            // No global entries: keeping them keeps nothing.
            Imp::Lean(c) => c.remove_where(|_| true, removed),
            Imp::General(t) => t.flush(keep_global, removed),
        }
    }

    /// As [`Tlb::invalidate_tag`].
    pub fn invalidate_tag(&mut self, tag: u16, removed: &mut dyn FnMut(&TlbEntry)) -> u32 {
        match &mut self.imp {
            Imp::Lean(c) => c.remove_where(|k| key_is_tag(k, tag), removed),
            Imp::General(t) => t.invalidate_tag(tag, removed),
        }
    }

    /// As [`Tlb::mark_where`].
    pub fn mark_where(&mut self, pred: impl Fn(&TlbEntry) -> bool, flag: u8) -> u32 {
        match &mut self.imp {
            Imp::Lean(c) => {
                let mut n = 0;
                for w in 0..c.keys.len() {
                    if c.keys[w] != INVALID && pred(&c.slots[w]) {
                        c.slots[w].flags |= flag;
                        n += 1;
                    }
                }
                n
            }
            Imp::General(t) => t.mark_where(pred, flag),
        }
    }

    /// Whether an entry satisfies `pred`.
    pub fn any(&self, pred: impl Fn(&TlbEntry) -> bool) -> bool {
        match &self.imp {
            Imp::Lean(c) => c.keys.iter().zip(&c.slots).any(|(&k, e)| k != INVALID && pred(e)),
            Imp::General(t) => t.entries().any(pred),
        }
    }

    /// Every entry, in storage order (set by set, way by way), as [`Tlb::entries`].
    pub fn entries(&self) -> Vec<TlbEntry> {
        match &self.imp {
            Imp::Lean(c) => c.keys.iter().zip(&c.slots).filter(|(&k, _)| k != INVALID).map(|(_, e)| *e).collect(),
            Imp::General(t) => t.entries().copied().collect(),
        }
    }

    /// Entries held.
    pub fn occupancy(&self) -> u32 {
        match &self.imp {
            Imp::Lean(c) => c.valid,
            Imp::General(t) => t.occupancy(),
        }
    }
}

impl LeanWalkCache {
    #[inline(always)]
    fn key_and_start(&self, vpn: Vpn, tag: u16) -> (u64, usize) {
        let (base, units) = key_base(vpn, PageSize::Size4K);
        (base | tag as u64, (units as usize & self.set_mask) * self.ways)
    }

    #[inline(always)]
    fn touch(&mut self, w: usize) {
        self.clock += 1;
        self.stamps[w] = self.clock;
    }

    #[inline]
    fn lookup(&mut self, vpn: Vpn, tag: u16) -> Option<TlbEntry> {
        let (key, start) = self.key_and_start(vpn, tag);
        let Some(w) = find_key(&self.keys[start..start + self.ways], key) else {
            self.missed = key;
            return None;
        };
        let w = start + w;
        self.touch(w);
        Some(self.slots[w])
    }

    #[inline]
    fn insert(&mut self, entry: TlbEntry) -> Option<TlbEntry> {
        debug_assert!(entry.size == PageSize::Size4K && entry.flags & FLAG_GLOBAL == 0 && entry.sl == 0, "not a walk-cache entry: {entry:?}");
        let (key, start) = self.key_and_start(entry.vpn, entry.tag);
        let set = start..start + self.ways;
        // The same key: overwritten in place, most recently used.
        if key != self.missed {
            if let Some(w) = find_key(&self.keys[set.clone()], key) {
                self.slots[start + w] = entry;
                self.touch(start + w);
                return None;
            }
        }
        self.missed = INVALID;
        // Else the lowest empty way, else the least recently used one.
        let free = if self.valid as usize == self.keys.len() { None } else { find_key(&self.keys[set.clone()], INVALID) };
        let (w, old) = match free {
            Some(w) => {
                self.valid += 1;
                (start + w, None)
            }
            None => {
                let w = start + lru_way(&self.stamps[set]);
                (w, Some(self.slots[w]))
            }
        };
        self.keys[w] = key;
        self.slots[w] = entry;
        self.touch(w);
        old
    }

    /// Remove every entry whose key satisfies `pred`, in storage order; returns how many.
    fn remove_where(&mut self, pred: impl Fn(u64) -> bool, removed: &mut dyn FnMut(&TlbEntry)) -> u32 {
        if self.valid == 0 {
            return 0;
        }
        self.missed = INVALID;
        let mut n = 0;
        for w in 0..self.keys.len() {
            let k = self.keys[w];
            if k != INVALID && pred(k) {
                removed(&self.slots[w]);
                self.keys[w] = INVALID;
                self.valid -= 1;
                n += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use crate::tlb::set_assoc::FLAG_STALE;
    use crate::types::Pfn;

    /// Random walk-cache traffic (lookups, inserts over a few prefixes and tags, stale
    /// marks, tag invalidations, flushes) on the lean form and on a `Tlb` of the same
    /// geometry: the same hits and entries returned, the same victims, the same entries
    /// removed in the same order, the same contents.
    #[test]
    fn walk_cache_matches_tlb() {
        for (entries, ways) in [(2, 2), (4, 4), (32, 4), (16, 2), (8, 8), (24, 6), (1, 1), (16, 1)] {
            for seed in 0..10u64 {
                let g = TlbGeometry { entries, ways, replacement: Replacement::Lru };
                let mut lean = WalkCache::new(&g, seed, false).unwrap();
                assert!(matches!(lean.imp, Imp::Lean(_)), "{entries}x{ways}: the lean form");
                let mut tlb = Tlb::new(&g, seed).unwrap();
                let mut rng = SplitMix64::new(seed);
                let prefixes = 3 * entries as u64;
                // Half the inserts are of the key last looked up, as a walk inserts what
                // its lookup missed (the lean form then skips the scan for that key).
                let mut last_lookup = (Vpn(0), 0u16);
                for step in 0..5000 {
                    let mut vpn = Vpn(rng.below(prefixes));
                    let mut tag = rng.below(3) as u16;
                    let at = format!("{entries}x{ways} seed {seed} step {step}");
                    match rng.below(100) {
                        0..=49 => {
                            last_lookup = (vpn, tag);
                            assert_eq!(lean.lookup(vpn, tag), tlb.lookup(vpn, PageSize::Size4K, tag), "{at}: lookup");
                        }
                        50..=89 => {
                            if rng.below(2) == 0 {
                                (vpn, tag) = last_lookup;
                            }
                            let e = TlbEntry { vpn, pfn: Pfn(rng.below(1000)), size: PageSize::Size4K, tag, sl: 0, flags: 0 };
                            assert_eq!(lean.insert(e, &[]), tlb.insert(e), "{at}: insert");
                        }
                        90..=94 => {
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
                    assert_eq!(lean.entries(), tlb.entries().copied().collect::<Vec<_>>(), "{at}: contents");
                    assert_eq!(lean.occupancy(), tlb.occupancy(), "{at}: occupancy");
                }
            }
        }
    }

    #[test]
    fn other_shapes_and_quotas_are_the_general_structure() {
        let lru = |entries, ways| TlbGeometry { entries, ways, replacement: Replacement::Lru };
        assert!(matches!(WalkCache::new(&lru(32, 4), 1, true).unwrap().imp, Imp::General(_)), "quotas");
        assert!(matches!(WalkCache::new(&lru(32, 16), 1, false).unwrap().imp, Imp::General(_)), "16 ways");
        assert!(matches!(WalkCache::new(&lru(0, 4), 1, false).unwrap().imp, Imp::General(_)), "absent");
        let plru = TlbGeometry { entries: 32, ways: 4, replacement: Replacement::Plru };
        assert!(matches!(WalkCache::new(&plru, 1, false).unwrap().imp, Imp::General(_)), "plru");
        let e = WalkCache::new(&lru(30, 4), 1, false).err().unwrap();
        assert_eq!(e, Tlb::new(&lru(30, 4), 1).err().unwrap(), "the same message as a Tlb");
    }
}
