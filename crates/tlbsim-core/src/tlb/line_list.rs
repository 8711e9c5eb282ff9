//! [`super::line_cache::LineCache`]'s form for LRU caches of associativities other than 8
//! and 16, up to [`LIST_MAX_WAYS`] ways (mitosis-4s's 35-way and abis-haswell-2s's 30-way
//! L3): a tag and a fingerprint per way, the set's recency order as a circular list of way
//! numbers through a sentinel (as `level.rs`'s 96-way L1), and a fill count per set, so
//! that neither a hit's relink nor a miss's victim scans the set.

use super::line_cache::{fingerprint, INVALID, KEY_MASK};
use super::set_assoc::fp_mask;

/// The most ways [`ListLines`] holds; a wider LRU cache is a `Tlb` (its index suits fully
/// associative structures of hundreds of ways).
pub(super) const LIST_MAX_WAYS: usize = 64;

/// LRU, any other number of ways up to [`LIST_MAX_WAYS`].
pub(super) struct ListLines {
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

impl ListLines {
    pub(super) fn new(sets: usize, ways: usize) -> ListLines {
        // Every set's list in ascending order from the least recently used end: ways
        // never touched stay there in that order below every touched one, so a set that
        // is not full fills its lowest empty way, as `Tlb` does.
        let (links, sentinel) = (ways + 1, ways as u8);
        let next = (0..sets * links).map(|i| if i % links == ways { 0 } else { (i % links + 1) as u8 }).collect();
        let prev = (0..sets * links).map(|i| if i % links == 0 { sentinel } else { (i % links - 1) as u8 }).collect();
        ListLines { ways, set_mask: sets - 1, keys: vec![INVALID; sets * ways], fps: vec![0; sets * ways], next, prev, filled: vec![0; sets], valid: 0 }
    }

    pub(super) fn valid(&self) -> u32 {
        self.valid
    }

    /// Ask the host CPU to bring in `key`'s set (a hint: nothing changes).
    #[inline]
    pub(super) fn prefetch(&self, key: u64) {
        let set = key as usize & self.set_mask;
        crate::prefetch::read(&self.fps[set * self.ways]);
        crate::prefetch::read(&self.next[set * (self.ways + 1)]);
    }

    /// Out of line: these caches are large and missed often, so the call is cheap beside
    /// the host cache misses of the set's lines, and the lean form's callers keep their
    /// small frame.
    #[inline(never)]
    pub(super) fn access(&mut self, key: u64) -> bool {
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
