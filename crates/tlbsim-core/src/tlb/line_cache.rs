//! A cache of lines: the flat memory model's per-socket page-table-line cache (docs/ARCHITECTURE.md
//! "Page tables"; Mitosis §3 for why page-table lines in the last-level cache matter), and
//! model "cache"'s per-core private caches and per-socket last-level caches.
//!
//! Modelled: a set-associative array of line tags, looked up by every access and filled on
//! a miss, the set picked by the key's low bits; an empty way fills first (the lowest one),
//! else the configured replacement policy picks the victim. The callers ask one thing per
//! line ("did it hit?", the line then being present), so [`LineCache::access`] is that.
//!
//! Simplified (as everywhere in tlbsim's caches): no data, no dirty state, no coherence
//! between sockets' caches; latency is the caller's business.
//!
//! Implementation: a line needs only its tag and its place in the set's recency order, so
//! LRU caches of 8 or 16 ways (every default and preset) keep exactly that: a `u64` tag per
//! way, for 16 ways a 16-bit fingerprint per way compared all at once with SSE2, and one
//! word per set with the ways in recency order (`set_assoc::order_touch`). LRU caches of
//! other associativities up to 64 ways (mitosis-4s's 35-way L3) keep a tag and a
//! fingerprint per way, and the set's recency order as a circular list of way numbers, so
//! that a hit's relink and a miss's victim take no scan: the general structure's hash
//! index and stamps, which suit its fully associative TLBs, cost such a cache's runs most
//! of their time (a Mitosis Table 2 run with a STREAM co-runner: 86% in `Tlb` lookups,
//! index removals and victim choice; 316 s, and 59 s with the list). Any other shape or
//! policy is a [`Tlb`] holding lines. All give the same hits, misses and victims as a `Tlb`
//! of the same geometry (the `line_cache_matches_tlb` test).

use super::set_assoc::{fp_mask, order_touch, Replacement, Tlb, TlbEntry, TlbGeometry};
use crate::types::{PageSize, Pfn, Vpn};

/// Tag bits a line key keeps: as many as a TLB entry's key keeps of a 4 KiB VPN (45), so
/// that both implementations treat every key alike.
const KEY_MASK: u64 = (1 << 45) - 1;
const INVALID: u64 = u64::MAX;
const FP_WAYS: usize = 16;
/// The most ways [`ListLines`] holds; a wider LRU cache is a [`Tlb`] (its index suits
/// fully associative structures of hundreds of ways).
const LIST_MAX_WAYS: usize = 64;

pub struct LineCache {
    imp: Imp,
}

// An explicit tag (as `level::Imp`): cheaper to test than a variant hidden in a spare
// value of one of `Tlb`'s fields.
#[repr(u8)]
enum Imp {
    Lru(LruLines),
    List(ListLines),
    General(Tlb),
}

/// LRU, 8 or 16 ways.
struct LruLines {
    ways: usize,
    ways_log2: u32,
    set_mask: usize,
    keys: Vec<u64>,
    /// 16 ways: each way's `fingerprint` (stale for an empty way: the key decides).
    fps: Vec<u16>,
    /// Per set: the ways in recency order, least recently used in the low 4 bits.
    order: Vec<u64>,
    valid: u32,
}

/// LRU, any other number of ways up to [`LIST_MAX_WAYS`].
struct ListLines {
    ways: usize,
    set_mask: usize,
    keys: Vec<u64>,
    /// Each way's `fingerprint` (stale for an empty way: the key decides).
    fps: Vec<u16>,
    /// Per set, `ways + 1` links: way `w`'s next (more recently used) way, and at index
    /// `ways` the set's sentinel, whose next is the least recently used way.
    next: Vec<u8>,
    /// The same links the other way: at the sentinel, the most recently used way.
    prev: Vec<u8>,
    /// Per set, the ways filled (lines are never removed): small enough to stay in the
    /// host's cache, where reading the victim's key to see whether it was empty would miss.
    filled: Vec<u8>,
    valid: u32,
}

#[inline(always)]
fn fingerprint(key: u64) -> u16 {
    (key ^ (key >> 16) ^ (key >> 32)) as u16
}

impl LineCache {
    /// A cache of `geometry` (the same rules and messages as [`Tlb::new`]); `seed` feeds
    /// random replacement.
    pub fn new(geometry: &TlbGeometry, seed: u64) -> Result<LineCache, String> {
        let (entries, ways) = (geometry.entries as usize, geometry.ways as usize);
        let lean = geometry.replacement == Replacement::Lru
            && (ways == 8 || ways == FP_WAYS)
            && entries > 0
            && entries.is_multiple_of(ways)
            && (entries / ways).is_power_of_two();
        let list = geometry.replacement == Replacement::Lru
            && (1..=LIST_MAX_WAYS).contains(&ways)
            && entries.is_multiple_of(ways)
            && (entries / ways).is_power_of_two();
        if list && !lean {
            let sets = entries / ways;
            // Every set's list in ascending order from the least recently used end: ways
            // never touched stay there in that order below every touched one, so a set that
            // is not full fills its lowest empty way, as [`Tlb`] does.
            let (links, sentinel) = (ways + 1, ways as u8);
            let next = (0..sets * links).map(|i| if i % links == ways { 0 } else { (i % links + 1) as u8 }).collect();
            let prev = (0..sets * links).map(|i| if i % links == 0 { sentinel } else { (i % links - 1) as u8 }).collect();
            return Ok(LineCache {
                imp: Imp::List(ListLines {
                    ways,
                    set_mask: sets - 1,
                    keys: vec![INVALID; sets * ways],
                    fps: vec![0; sets * ways],
                    next,
                    prev,
                    filled: vec![0; sets],
                    valid: 0,
                }),
            });
        }
        if !lean {
            // The general structure, whose errors name what is wrong with the geometry.
            return Ok(LineCache { imp: Imp::General(Tlb::new(geometry, seed)?) });
        }
        let sets = entries / ways;
        let n = sets * ways;
        Ok(LineCache {
            imp: Imp::Lru(LruLines {
                ways,
                ways_log2: ways.trailing_zeros(),
                set_mask: sets - 1,
                keys: vec![INVALID; n],
                fps: if ways == FP_WAYS { vec![0; n] } else { Vec::new() },
                // Never-touched ways cannot be in a full set, so their initial order is moot.
                order: vec![(0..ways as u64).fold(0, |o, w| o | (w << (4 * w))); sets],
                valid: 0,
            }),
        })
    }

    /// Look up line `key`, making it most recently used; on a miss, fill it. Returns
    /// whether it hit.
    #[inline]
    pub fn access(&mut self, key: u64) -> bool {
        match &mut self.imp {
            Imp::Lru(c) => c.access(key),
            Imp::List(c) => c.access(key),
            Imp::General(t) => general_access(t, key),
        }
    }

    /// Ask the host CPU to bring in the set `key` maps to (a hint: nothing changes).
    #[inline]
    pub fn prefetch(&self, key: u64) {
        match &self.imp {
            Imp::Lru(c) => {
                let start = (key as usize & c.set_mask) << c.ways_log2;
                if c.fps.is_empty() {
                    crate::prefetch::read(&c.keys[start]);
                } else {
                    crate::prefetch::read(&c.fps[start]);
                }
            }
            Imp::List(c) => {
                let set = key as usize & c.set_mask;
                crate::prefetch::read(&c.fps[set * c.ways]);
                crate::prefetch::read(&c.next[set * (c.ways + 1)]);
            }
            Imp::General(t) => t.prefetch(Vpn(key), PageSize::Size4K, 0),
        }
    }

    /// Lines held.
    pub fn occupancy(&self) -> u32 {
        match &self.imp {
            Imp::Lru(c) => c.valid,
            Imp::List(c) => c.valid,
            Imp::General(t) => t.occupancy(),
        }
    }
}

/// `LineCache::access` on the general form. Out of line, so that the lean form's caller
/// keeps a small frame (the inlined `Tlb` insert made it save every register).
#[inline(never)]
fn general_access(t: &mut Tlb, key: u64) -> bool {
    let vpn = Vpn(key);
    if t.lookup_hit(vpn, PageSize::Size4K, 0) {
        return true;
    }
    t.insert(TlbEntry { vpn, pfn: Pfn(0), size: PageSize::Size4K, tag: 0, sl: 0, flags: 0 });
    false
}

impl ListLines {
    /// Out of line: these caches are large and missed often, so the call is cheap beside
    /// the host cache misses of the set's lines, and the lean form's callers keep their
    /// small frame.
    #[inline(never)]
    fn access(&mut self, key: u64) -> bool {
        let set = key as usize & self.set_mask;
        let start = set * self.ways;
        let links = set * (self.ways + 1);
        let tag = key & KEY_MASK;
        let fp = fingerprint(tag);
        let mut m = fp_mask(&self.fps[start..start + self.ways], fp);
        let mut hit = None;
        while m != 0 {
            let w = m.trailing_zeros() as usize;
            if self.keys[start + w] == tag {
                hit = Some(w);
                break;
            }
            m &= m - 1;
        }
        let next = &mut self.next[links..links + self.ways + 1];
        let prev = &mut self.prev[links..links + self.ways + 1];
        let sentinel = self.ways;
        let way = match hit {
            Some(w) => w,
            None => {
                let w = next[sentinel] as usize;
                if (self.filled[set] as usize) < self.ways {
                    debug_assert_eq!(w, self.filled[set] as usize, "the lowest empty way first");
                    self.filled[set] += 1;
                    self.valid += 1;
                }
                self.keys[start + w] = tag;
                self.fps[start + w] = fp;
                w
            }
        };
        // Unlink the way and put it most recently used, before the sentinel.
        let (p, n) = (prev[way] as usize, next[way] as usize);
        next[p] = n as u8;
        prev[n] = p as u8;
        let last = prev[sentinel] as usize;
        next[last] = way as u8;
        prev[way] = last as u8;
        next[way] = sentinel as u8;
        prev[sentinel] = way as u8;
        hit.is_some()
    }
}

impl LruLines {
    #[inline(always)]
    fn access(&mut self, key: u64) -> bool {
        let set = key as usize & self.set_mask;
        let start = set << self.ways_log2;
        let tag = key & KEY_MASK;
        let found = self.find(start, tag);
        let way = match found {
            Some(w) => w,
            None => self.fill(set, start, tag),
        };
        self.order[set] = order_touch(self.order[set], way as u64, self.ways as u32);
        found.is_some()
    }

    /// Put `tag` into the set at `start`: the lowest empty way, else the least recently
    /// used one. Returns the way (relative).
    ///
    /// Both are the low field of the set's recency order: a line is never removed, so the
    /// empty ways are the never-touched ones, which stay below every touched way in their
    /// initial (ascending) order.
    #[inline]
    fn fill(&mut self, set: usize, start: usize, tag: u64) -> usize {
        let way = (self.order[set] & 15) as usize;
        #[cfg(debug_assertions)]
        if let Some(empty) = self.keys[start..start + self.ways].iter().position(|&k| k == INVALID) {
            assert_eq!(way, empty, "the lowest empty way first");
        }
        self.valid += (self.keys[start + way] == INVALID) as u32;
        self.keys[start + way] = tag;
        if !self.fps.is_empty() {
            self.fps[start + way] = fingerprint(tag);
        }
        way
    }

    /// The way (relative) holding `tag` in the set at `start`.
    #[inline(always)]
    fn find(&self, start: usize, tag: u64) -> Option<usize> {
        if self.fps.is_empty() {
            return self.keys[start..start + self.ways].iter().position(|&k| k == tag);
        }
        let fps: &[u16; FP_WAYS] = self.fps[start..start + FP_WAYS].try_into().expect("set length");
        let mut m = fp_mask(fps, fingerprint(tag));
        while m != 0 {
            let w = m.trailing_zeros() as usize;
            if self.keys[start + w] == tag {
                return Some(w);
            }
            m &= m - 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    /// Against a `Tlb` of the same geometry, over streams with reuse at several distances:
    /// the same hit or miss on every access, the same occupancy at the end.
    #[test]
    fn line_cache_matches_tlb() {
        for (entries, ways, replacement) in [
            (64, 8, Replacement::Lru),
            (256, 16, Replacement::Lru),
            (16, 16, Replacement::Lru),
            (8, 8, Replacement::Lru),
            (64, 4, Replacement::Lru),
            (64, 16, Replacement::Fifo),
            (60, 30, Replacement::Lru),
            (35 * 16, 35, Replacement::Lru),
            (12 * 4, 12, Replacement::Lru),
            (64, 64, Replacement::Lru),
            (2, 1, Replacement::Lru),
            (65 * 2, 65, Replacement::Lru),
        ] {
            let g = TlbGeometry { entries, ways, replacement };
            let mut lines = LineCache::new(&g, 7).unwrap();
            let mut tlb = Tlb::new(&g, 7).unwrap();
            let mut rng = SplitMix64::new(entries as u64 * 31 + ways as u64);
            for i in 0..20_000u64 {
                // Mostly a working set near the capacity, sometimes far keys (above 2^45
                // too: both keep the same 45 bits).
                let key = match rng.below(10) {
                    0 => rng.next_u64(),
                    1..=3 => rng.below(entries as u64 * 4),
                    _ => rng.below(entries as u64 + entries as u64 / 2),
                };
                let vpn = Vpn(key);
                let want = tlb.lookup_hit(vpn, PageSize::Size4K, 0);
                if !want {
                    tlb.insert(TlbEntry { vpn, pfn: Pfn(0), size: PageSize::Size4K, tag: 0, sl: 0, flags: 0 });
                }
                assert_eq!(lines.access(key), want, "{entries}e {ways}-way {replacement:?}, access {i}, key {key:#x}");
            }
            assert_eq!(lines.occupancy(), tlb.occupancy());
        }
    }

    #[test]
    fn bad_geometry_is_the_tlb_message() {
        let g = TlbGeometry { entries: 24, ways: 8, replacement: Replacement::Lru };
        assert!(LineCache::new(&g, 0).err().unwrap().contains("number of sets must be a power of two"));
    }
}
