//! One set-associative TLB-like structure (x86 TLB levels, page-walk caches): the general
//! form, for every shape, policy and quota. `level::TlbLevel`, `walk_cache::WalkCache` and
//! `line_cache::LineCache` use it where their lean forms do not apply.
//!
//! Follows the x86 TLB organisation of docs/ARCHITECTURE.md "TLBs (per core)": `entries` entries in
//! `entries / ways` sets; the set is picked from the low bits of the virtual page number
//! expressed in units of the entry's page size (`ways == entries` is fully associative,
//! `ways == 1` direct mapped). Replacement: true LRU, tree pseudo-LRU, FIFO, or random
//! (seeded). Service-level-aware victim selection follows the tag paper §4: a VM at or over
//! its allocation evicts its own least recently used entry, otherwise the victim is taken
//! from a VM that is over its allocation.
//!
//! Simplified: a structure has no notion of time of its own; latency is charged by the
//! caller. Quotas are counted over the whole structure, but (as hardware must) the victim
//! is chosen within the set the new entry maps to; when that set holds no entry of the
//! wanted service level the normal replacement policy decides.
//!
//! Implementation (this is the simulator's hot path): each way has a `u64` match key
//! (vpn in page-size units, size, global bit, tag; see `KEY_*` below) in one flat vector,
//! so a set scan is two integer compares per way (exact tag, global); payloads, recency
//! stamps, FIFO stamps and PLRU bits live in parallel flat vectors. A one-entry last-hit
//! memo answers a repeated lookup of the same page without a scan, and updates the
//! replacement state exactly as the scan would. Scans of common associativities (1, 2, 4,
//! 6, 8, 12 ways) are unrolled and branch-free; 16-way sets keep a 16-bit fingerprint per
//! way and compare all 16 with one SSE2 step before reading any full key; sets wider than
//! 16 ways (large fully associative structures) find a key through a hash index. LRU sets
//! of 8 or 16 ways keep their ways in recency order in one word per set, so the victim is
//! read, not searched for. Nothing allocates after `new`.
//!
//! Choices the spec leaves open (also in the doc comment of [`Tlb`]): a non-global entry
//! outranks a global one of the same page on lookup; a global entry is identified by its
//! page alone; FIFO age survives an overwrite in place; the lowest invalid way fills first;
//! `insert_with_quota` takes "least recently used" from the recency every policy keeps.

use crate::rng::SplitMix64;
use crate::types::{PageSize, Pfn, Vpn};

/// Entry flag bits (`TlbEntry::flags`).
pub const FLAG_WRITABLE: u8 = 1 << 0;
pub const FLAG_USER: u8 = 1 << 1;
/// Global (x86 G bit): matches every tag, survives flushes that keep global entries.
pub const FLAG_GLOBAL: u8 = 1 << 2;
/// The entry was filled by a write, or a write has hit it since (the PTE's D bit is set).
pub const FLAG_DIRTY: u8 = 1 << 3;
/// The stale-translation checker's mark: a page-table change made this entry stale and the
/// coherence protocol finished without removing it; using it is a violation.
pub const FLAG_STALE: u8 = 1 << 4;

/// The entry flags a walk fills from a leaf page-table entry.
#[inline]
pub fn flags_of_pte(pte: u64) -> u8 {
    use crate::page_table::{PTE_DIRTY, PTE_USER, PTE_WRITABLE};
    let mut flags = 0;
    if pte & PTE_WRITABLE != 0 {
        flags |= FLAG_WRITABLE;
    }
    if pte & PTE_USER != 0 {
        flags |= FLAG_USER;
    }
    if pte & PTE_DIRTY != 0 {
        flags |= FLAG_DIRTY;
    }
    flags
}

/// A cached translation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlbEntry {
    /// First 4 KiB VPN of the page (aligned to `size`).
    pub vpn: Vpn,
    /// First 4 KiB frame of the page.
    pub pfn: Pfn,
    pub size: PageSize,
    /// Address-space tag: PCID (12 bits), VM id (domain tagging) or VASI (CR3 tagging);
    /// 0 when the TLB is untagged.
    pub tag: u16,
    /// Service level (tag paper §4), used only for victim selection, never for lookup.
    pub sl: u8,
    pub flags: u8,
}

pub use crate::types::Replacement;

/// Shape of one structure, as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct TlbGeometry {
    pub entries: u32,
    pub ways: u32,
    pub replacement: Replacement,
}

/// Match-key layout (one `u64` per way, so a set scan is a few integer compares):
///
/// ```text
///   63 ........ 19 | 18 17 | 16 | 15 ..... 0
///   vpn in units   | size  | G  | tag (0 if G)
///   of the page    |       |    |
/// ```
///
/// Global entries are keyed with G set and tag 0, so a lookup compares each way against
/// two keys: the exact one (tag = the caller's tag) and the global one.
const KEY_TAG_BITS: u32 = 16;
pub(crate) const KEY_GLOBAL_BIT: u64 = 1 << 16;
pub(crate) const KEY_SIZE_SHIFT: u32 = 17;
const KEY_VPN_SHIFT: u32 = 19;
/// VPN (in page-size units) bits kept in a key. Only a 4 KiB VPN can be wider (a full 64-bit
/// address shifted by 12 has 52 bits); dropping bits 45..51 cannot alias two canonical
/// addresses, because for 48-bit (57-bit) virtual addresses VPN bits 35..51 (44..51) are
/// copies of one sign bit, so two canonical VPNs that agree on bits 0..44 agree everywhere.
const KEY_VPN_MASK: u64 = (1 << (64 - KEY_VPN_SHIFT)) - 1;
/// Key of an invalid way. Its size field is 3, which no page size has, so no real key
/// (and no query key) ever equals it.
const INVALID: u64 = u64::MAX;

/// Sets with more ways than this (large fully associative structures) are scanned through
/// 16-bit key fingerprints first.
const WIDE_WAYS: usize = 16;
const INDEX_EMPTY: u32 = u32::MAX;

/// A 16-bit fold of a key's page-and-size bits (not the tag or global bit, so that the
/// exact and the global query keys of a page share it). Two different pages of a set share
/// a fingerprint rarely; the full key is always checked.
#[inline(always)]
pub(crate) fn fingerprint(key: u64) -> u16 {
    let x = key >> KEY_SIZE_SHIFT;
    (x ^ (x >> 16) ^ (x >> 32)) as u16
}

/// Whether key `k` is a non-global entry's with `tag` (the low 17 bits are the G bit and the
/// tag; an invalid way's key has G set, so it never is).
#[inline(always)]
pub(crate) fn key_is_tag(k: u64, tag: u16) -> bool {
    k & (KEY_GLOBAL_BIT | ((1 << KEY_TAG_BITS) - 1)) == tag as u64
}

#[inline(always)]
pub(crate) fn key_base(vpn: Vpn, size: PageSize) -> (u64, u64) {
    let units = vpn.0 >> size.shift_4k();
    let base = ((units & KEY_VPN_MASK) << KEY_VPN_SHIFT) | ((size as u64) << KEY_SIZE_SHIFT);
    (base, units)
}

#[inline(always)]
pub(crate) fn entry_key(e: &TlbEntry) -> (u64, u64) {
    let (base, units) = key_base(e.vpn, e.size);
    let key = if e.flags & FLAG_GLOBAL != 0 { base | KEY_GLOBAL_BIT } else { base | e.tag as u64 };
    (key, units)
}

/// The entry an empty way holds (never read as an entry: its key says the way is empty).
pub(crate) const NO_ENTRY: TlbEntry = TlbEntry { vpn: Vpn(0), pfn: Pfn(0), size: PageSize::Size4K, tag: 0, sl: 0, flags: 0 };

/// A set-associative structure. See the module comment.
///
/// Semantics worth knowing (the doc comments of the methods are the contract):
/// * At most one entry per *key*: a non-global entry is keyed by (vpn, size, tag), a
///   global one by (vpn, size) alone — inserting a global entry overwrites a global entry of
///   the same page whatever tag it was stored with. A global and a non-global entry of the
///   same page may coexist (x86 calls that a software error); a lookup then returns the
///   non-global entry with the caller's tag, if any, else the global one.
/// * A victim is chosen only when the set has no invalid way; the lowest-numbered invalid
///   way is filled first.
/// * Every policy keeps each set's recency (hits, inserts and in-place overwrites make a
///   way most recently used: per-way stamps, or for LRU sets of 8 or 16 ways the same
///   order in one word); it is what `insert_with_quota` means by "least recently used"
///   whatever the policy. FIFO age is set when an entry is placed in a way and is
///   *not* reset by an in-place overwrite of the same key (the refill of a translation that
///   is still cached does not make it a new arrival). Random draws from its generator only
///   when it must evict.
pub struct Tlb {
    geometry: TlbGeometry,
    /// `entries == 0`: storage is one permanently invalid way so that `lookup` needs no
    /// special case; inserts do nothing.
    disabled: bool,
    ways: usize,
    set_mask: usize,
    keys: Vec<u64>,
    /// Sets of more than `WIDE_WAYS` ways (searched through `index`).
    wide: bool,
    /// Sets of `WIDE_WAYS` ways or more: a 16-bit fingerprint of each way's key (see
    /// `fingerprint`), compared first. Empty otherwise.
    fps: Vec<u16>,
    /// Wide sets are searched through a key → way index first: the software stand-in for
    /// the hardware's parallel tag compare, one or two probes where the fingerprint scan
    /// reads every way. Open addressing with linear probing over `keys`, load factor at
    /// most 1/4; empty when the sets are narrow.
    index: Vec<u32>,
    index_shift: u32,
    slots: Vec<TlbEntry>,
    /// Recency stamp per way (all policies).
    recency: Vec<u64>,
    /// Insertion stamp per way (FIFO only).
    inserted: Vec<u64>,
    fifo: bool,
    /// A fully associative wide LRU structure that evicts often also keeps its touches in
    /// order, (way, stamp) per touch, oldest first from `lru_head`: the least recently used
    /// way is the first entry whose stamp is still the way's recency (a later touch of a
    /// way makes its earlier entries stale). The victim is then found in amortised O(1)
    /// instead of a minimum over every way. The queue is built from the stamps at a victim
    /// query and kept up while evictions keep coming; after 4 × ways touches without one
    /// (a hit-heavy phase) it is dropped, so hits pay one flag test.
    lru_queue: Vec<(u32, u64)>,
    lru_head: usize,
    lru_queue_on: bool,
    lru_queue_live: bool,
    touches_since_victim: usize,
    /// Tree-PLRU bits, `plru_words` words per set; node n (1-based heap order, children 2n
    /// and 2n+1, leaves ways..2*ways) is bit n; 1 = the next victim is in the right subtree.
    plru: Vec<u64>,
    plru_words: usize,
    /// log2(ways) (used where ways are a power of two: PLRU and `lru_order`).
    ways_log2: u32,
    /// LRU sets of 8 or 16 ways: per set, the ways in recency order as 4-bit fields, least
    /// recently used in the low field, most recently used in field `ways - 1`. It orders
    /// the ways exactly as recency stamps would (every touch moves the way to the top), so
    /// the victim is the low field instead of a minimum over stamps, and these structures
    /// keep no stamps (`recency` is empty). Empty otherwise.
    lru_order: Vec<u64>,
    /// A touch also updates PLRU bits or `lru_order`.
    touch_more: bool,
    /// PLRU with at most 64 ways: per way, (path mask, path value); see `plru_paths`.
    plru_path: Vec<(u64, u64)>,
    clock: u64,
    rng: SplitMix64,
    valid: u32,
    /// Valid global entries (lookups skip the global compare while there are none).
    globals: u32,
    /// Valid entries per page size (`invalidate_page` skips sizes with none).
    size_count: [u32; 3],
    sl_count: [u32; 256],
    /// Last hit: the query key (exact-tag key) it answered and the way. Checked against the
    /// way's live key, so invalidation and eviction need not clear it; an insert of a new
    /// key resets it (a new non-global entry may now outrank a global one it pointed at).
    memo_query: u64,
    memo_way: usize,
    /// The exact key of the last lookup that scanned its set and missed, while the
    /// structure has not changed since (any placement or removal clears it): an insert of
    /// that key, the usual next step after a miss, knows no way holds it without a scan.
    missed: u64,
}

impl Tlb {
    /// A new, empty structure. `entries` must be a multiple of `ways`, the set count a
    /// power of two, and for `Plru` the ways a power of two; otherwise `Err` with a message
    /// saying which and what is allowed. `entries == 0` is valid: a structure that never
    /// hits and never holds anything. `seed` feeds `Random` replacement.
    pub fn new(geometry: &TlbGeometry, seed: u64) -> Result<Tlb, String> {
        let entries = geometry.entries;
        let ways = geometry.ways;
        let disabled = entries == 0;
        if !disabled {
            if ways == 0 {
                return Err(format!(
                    "ways is 0: the associativity must be at least 1 (1 = direct mapped, \
                     {entries} = fully associative)"
                ));
            }
            if ways > entries {
                return Err(format!(
                    "ways ({ways}) must not exceed entries ({entries}); ways == entries is \
                     fully associative"
                ));
            }
            if !entries.is_multiple_of(ways) {
                return Err(format!("entries ({entries}) must be a multiple of ways ({ways})"));
            }
            let sets = entries / ways;
            if !sets.is_power_of_two() {
                return Err(format!(
                    "entries/ways = {sets} sets: the number of sets must be a power of two \
                     (1, 2, 4, ...)"
                ));
            }
            if geometry.replacement == Replacement::Plru && !ways.is_power_of_two() {
                return Err(format!(
                    "plru needs a power-of-two number of ways, got {ways} (use lru, fifo or \
                     random for other associativities)"
                ));
            }
        }
        let (sets, ways) = if disabled { (1usize, 1usize) } else { ((entries / ways) as usize, ways as usize) };
        let n = sets * ways;
        let plru_words = if geometry.replacement == Replacement::Plru { ways.div_ceil(64) } else { 0 };
        let lru_order_on = !disabled && geometry.replacement == Replacement::Lru && (ways == 8 || ways == 16);
        let mut tlb = Tlb {
            geometry: geometry.clone(),
            disabled,
            ways,
            set_mask: sets - 1,
            keys: vec![INVALID; n],
            wide: ways > WIDE_WAYS,
            index: if ways > WIDE_WAYS { vec![INDEX_EMPTY; (4 * n).next_power_of_two()] } else { Vec::new() },
            index_shift: 64 - (4 * n).next_power_of_two().trailing_zeros(),
            fps: if ways >= WIDE_WAYS { vec![0; n] } else { Vec::new() },
            slots: vec![NO_ENTRY; n],
            // A recency-order word (below) replaces the stamps.
            recency: if lru_order_on { Vec::new() } else { vec![0; n] },
            inserted: if geometry.replacement == Replacement::Fifo { vec![0; n] } else { Vec::new() },
            fifo: geometry.replacement == Replacement::Fifo,
            lru_queue: Vec::new(),
            lru_head: 0,
            lru_queue_live: false,
            touches_since_victim: 0,
            lru_queue_on: !disabled && sets == 1 && ways > WIDE_WAYS && geometry.replacement == Replacement::Lru,
            plru: vec![0; sets * plru_words],
            plru_words,
            ways_log2: ways.trailing_zeros(),
            lru_order: if lru_order_on {
                // Never-touched ways cannot be in a full set, so their initial order is moot.
                vec![(0..ways as u64).fold(0, |o, w| o | (w << (4 * w))); sets]
            } else {
                Vec::new()
            },
            touch_more: false,
            plru_path: if plru_words == 1 { plru_paths(ways) } else { Vec::new() },
            clock: 0,
            rng: SplitMix64::new(seed),
            valid: 0,
            globals: 0,
            size_count: [0; 3],
            sl_count: [0; 256],
            memo_query: INVALID,
            memo_way: 0,
            missed: INVALID,
        };
        tlb.touch_more = tlb.plru_words != 0 || !tlb.lru_order.is_empty();
        Ok(tlb)
    }

    pub fn geometry(&self) -> &TlbGeometry {
        &self.geometry
    }

    /// Number of sets (1 for `entries == 0`).
    pub fn sets(&self) -> usize {
        self.set_mask + 1
    }

    /// Look up the page of `size` that starts at `vpn` (already aligned) for address-space
    /// `tag`. A valid entry matches if vpn and size match and either its tag equals `tag` or
    /// it is global. On a hit the replacement state is updated (LRU recency, PLRU bits) and
    /// a copy of the entry is returned. Hot path: no allocation.
    #[inline(never)]
    pub fn lookup(&mut self, vpn: Vpn, size: PageSize, tag: u16) -> Option<TlbEntry> {
        self.lookup_way(vpn, size, tag).map(|w| self.slots[w])
    }

    /// Whether the structure holds any page of `size` (inline, so that the 2 MiB and 1 GiB
    /// probes of a 4 KiB workload cost no call: `lookup` would miss).
    #[inline(always)]
    pub fn holds(&self, size: PageSize) -> bool {
        self.size_count[size as usize] != 0
    }

    /// As `lookup`, saying only whether it hit (a line cache has no payload to return).
    #[inline(never)]
    pub fn lookup_hit(&mut self, vpn: Vpn, size: PageSize, tag: u16) -> bool {
        self.lookup_way(vpn, size, tag).is_some()
    }

    /// `lookup`'s way (absolute), replacement state updated.
    #[inline(always)]
    fn lookup_way(&mut self, vpn: Vpn, size: PageSize, tag: u16) -> Option<usize> {
        let (base, units) = key_base(vpn, size);
        let exact = base | tag as u64;
        let global = base | KEY_GLOBAL_BIT;
        if exact == self.memo_query {
            let w = self.memo_way;
            let k = self.keys[w];
            if k == exact || k == global {
                self.touch(w);
                return Some(w);
            }
        }
        let start = (units as usize & self.set_mask) * self.ways;
        let Some(w) = self.find_in_set(start, exact, global) else {
            self.missed = exact;
            return None;
        };
        self.memo_query = exact;
        self.memo_way = w;
        self.touch(w);
        Some(w)
    }

    /// Ask the host CPU to bring in the lines a lookup of this page will read (a hint: no
    /// simulated state changes). The engine issues it a few accesses ahead on miss-heavy
    /// streams, so the host's cache misses on large structures overlap.
    #[inline]
    pub fn prefetch(&self, vpn: Vpn, size: PageSize, tag: u16) {
        if self.disabled {
            return;
        }
        let (base, units) = key_base(vpn, size);
        let start = (units as usize & self.set_mask) * self.ways;
        if self.wide {
            crate::prefetch::read(&self.index[self.index_home(base | tag as u64)]);
        } else if self.ways == WIDE_WAYS {
            crate::prefetch::read(&self.fps[start]);
        } else {
            crate::prefetch::read(&self.keys[start]);
        }
        if self.lru_order.is_empty() {
            crate::prefetch::read(&self.recency[start]);
        }
    }

    /// As `lookup` but without touching replacement state.
    pub fn probe(&self, vpn: Vpn, size: PageSize, tag: u16) -> Option<TlbEntry> {
        let (base, units) = key_base(vpn, size);
        let start = (units as usize & self.set_mask) * self.ways;
        self.find_in_set(start, base | tag as u64, base | KEY_GLOBAL_BIT).map(|w| self.slots[w])
    }

    /// Set the dirty flag of a present entry (a write hit an entry filled by a read).
    pub fn mark_dirty(&mut self, vpn: Vpn, size: PageSize, tag: u16) {
        let (base, units) = key_base(vpn, size);
        let start = (units as usize & self.set_mask) * self.ways;
        if let Some(w) = self.find_in_set(start, base | tag as u64, base | KEY_GLOBAL_BIT) {
            self.slots[w].flags |= FLAG_DIRTY;
        }
    }

    /// Insert `entry`. If an entry with the same vpn, size and tag is present it is
    /// overwritten in place (and made most recently used) and `None` is returned. Otherwise
    /// an invalid way of the set is used if any, else a victim chosen by the replacement
    /// policy; the displaced valid entry is returned so that the caller can tell listeners.
    ///
    /// "Same tag" for a global entry means "also global" (see the type's comment).
    #[inline]
    pub fn insert(&mut self, entry: TlbEntry) -> Option<TlbEntry> {
        self.insert_choosing(entry, |t, start| t.policy_victim(start))
    }

    /// As `insert`, with service-level quotas (tag paper §4): `quota[sl]` is the number of
    /// entries service level `sl` is allotted (levels beyond the slice are unlimited).
    /// Among valid entries of the set: if the count of entries with `entry.sl` in the
    /// whole structure is at or over its quota, the victim is the least recently used
    /// entry of the set with that sl; otherwise the least recently used entry of the set
    /// whose sl is over its quota. When the set has no such entry, or a way is invalid,
    /// the normal rule applies.
    ///
    /// "Over its quota" for another level means strictly more entries than allotted (the
    /// paper: "a domain which has exceeded its allotment"); "least recently used" is by
    /// the recency kept for every replacement policy (stamps, or the recency-order word).
    pub fn insert_with_quota(&mut self, entry: TlbEntry, quota: &[u32]) -> Option<TlbEntry> {
        self.insert_choosing(entry, |t, start| {
            let q = |sl: u8| quota.get(sl as usize).copied().unwrap_or(u32::MAX);
            let own = entry.sl;
            let w = if t.sl_count[own as usize] >= q(own) {
                t.lru_where(start, |e| e.sl == own)
            } else {
                let counts = &t.sl_count;
                t.lru_where(start, |e| counts[e.sl as usize] > q(e.sl))
            };
            w.unwrap_or_else(|| t.policy_victim(start))
        })
    }

    /// [`Tlb::insert`], or [`Tlb::insert_with_quota`] when `quota` is not empty. Out of line:
    /// the lean forms of `level`, `walk_cache` and `line_cache` call it behind their own
    /// code, which inlined it would make save every register.
    #[inline(never)]
    pub(crate) fn insert_honouring(&mut self, entry: TlbEntry, quota: &[u32]) -> Option<TlbEntry> {
        if quota.is_empty() {
            self.insert(entry)
        } else {
            self.insert_with_quota(entry, quota)
        }
    }

    /// Insert, with `victim(self, set start)` choosing the way to replace in a full set.
    #[inline(always)]
    fn insert_choosing(&mut self, entry: TlbEntry, victim: impl FnOnce(&mut Self, usize) -> usize) -> Option<TlbEntry> {
        if self.disabled {
            return None;
        }
        let (key, start) = self.prepare(&entry);
        match self.scan_for_insert(start, key) {
            Slot::Same(w) => {
                self.overwrite(w, entry);
                None
            }
            Slot::Free(w) => {
                self.place(w, key, entry);
                None
            }
            Slot::Full => {
                let w = start + victim(self, start);
                let old = self.slots[w];
                self.place(w, key, entry);
                Some(old)
            }
        }
    }

    /// Invalidate every entry (of any size) whose page contains 4 KiB page `vpn`; only
    /// those with tag `tag` if `Some` (global entries are also removed, as INVLPG does),
    /// every tag if `None`. Calls `removed` on each invalidated entry; returns how many.
    pub fn invalidate_page(&mut self, vpn: Vpn, tag: Option<u16>, removed: &mut dyn FnMut(&TlbEntry)) -> u32 {
        self.visit_page(vpn, tag, &mut |tlb, w| {
            removed(&tlb.slots[w]);
            tlb.remove(w);
        })
    }

    /// Set `flag` on every entry `invalidate_page` would remove for which `pred` holds;
    /// returns how many (with `flag = 0`: counts them, changing nothing).
    pub fn mark_page_if(&mut self, vpn: Vpn, tag: Option<u16>, flag: u8, pred: &dyn Fn(&TlbEntry) -> bool) -> u32 {
        let mut n = 0;
        self.visit_page(vpn, tag, &mut |tlb, w| {
            if pred(&tlb.slots[w]) {
                tlb.slots[w].flags |= flag;
                n += 1;
            }
        });
        n
    }

    /// Call `action` on the way of every entry (of any size) whose page contains 4 KiB page
    /// `vpn`, with tag `tag` (or global) if `Some`, any tag if `None`; returns how many.
    fn visit_page(&mut self, vpn: Vpn, tag: Option<u16>, action: &mut dyn FnMut(&mut Tlb, usize)) -> u32 {
        if self.disabled {
            return 0;
        }
        let mut n = 0;
        for size in PageSize::ALL {
            if self.size_count[size as usize] == 0 {
                continue;
            }
            let (base, units) = key_base(vpn.align(size), size);
            let start = (units as usize & self.set_mask) * self.ways;
            let page = base >> KEY_SIZE_SHIFT;
            let mut consider = |tlb: &mut Tlb, w: usize| {
                let k = tlb.keys[w];
                if k == INVALID || (k >> KEY_SIZE_SHIFT) != page {
                    return;
                }
                let hit = match tag {
                    None => true,
                    Some(t) => k & KEY_GLOBAL_BIT != 0 || (k as u16) == t,
                };
                if hit {
                    action(tlb, w);
                    n += 1;
                }
            };
            if self.wide {
                // The fingerprint ignores tag and global bit: every entry of the page is a
                // candidate.
                let f = fingerprint(base);
                for c in (start..start + self.ways).step_by(64) {
                    let end = (c + 64).min(start + self.ways);
                    let mut m = fp_mask(&self.fps[c..end], f);
                    while m != 0 {
                        let w = c + m.trailing_zeros() as usize;
                        m &= m - 1;
                        consider(self, w);
                    }
                }
            } else {
                for w in start..start + self.ways {
                    consider(self, w);
                }
            }
        }
        n
    }

    /// Invalidate every non-global entry with `tag`; returns how many.
    pub fn invalidate_tag(&mut self, tag: u16, removed: &mut dyn FnMut(&TlbEntry)) -> u32 {
        if self.valid == 0 {
            return 0;
        }
        let mut n = 0;
        for w in 0..self.keys.len() {
            let k = self.keys[w];
            if key_is_tag(k, tag) {
                removed(&self.slots[w]);
                self.remove(w);
                n += 1;
            }
        }
        n
    }

    /// Invalidate everything (or everything but global entries); returns how many.
    pub fn flush(&mut self, keep_global: bool, removed: &mut dyn FnMut(&TlbEntry)) -> u32 {
        if self.valid == self.globals && (keep_global || self.valid == 0) {
            return 0;
        }
        let mut n = 0;
        for w in 0..self.keys.len() {
            let k = self.keys[w];
            if k == INVALID || (keep_global && k & KEY_GLOBAL_BIT != 0) {
                continue;
            }
            removed(&self.slots[w]);
            self.remove(w);
            n += 1;
        }
        n
    }

    /// Set `flag` on every valid entry for which `pred` holds; returns how many.
    pub fn mark_where(&mut self, pred: impl Fn(&TlbEntry) -> bool, flag: u8) -> u32 {
        let mut n = 0;
        for w in 0..self.keys.len() {
            if self.keys[w] != INVALID && pred(&self.slots[w]) {
                self.slots[w].flags |= flag;
                n += 1;
            }
        }
        n
    }

    /// Number of valid entries.
    pub fn occupancy(&self) -> u32 {
        self.valid
    }

    /// Number of valid entries with service level `sl`.
    pub fn occupancy_of_sl(&self, sl: u8) -> u32 {
        self.sl_count[sl as usize]
    }

    /// Every valid entry, in storage order (set by set, way by way).
    pub fn entries(&self) -> impl Iterator<Item = &TlbEntry> + '_ {
        self.keys.iter().zip(self.slots.iter()).filter(|(k, _)| **k != INVALID).map(|(_, e)| e)
    }

    /// Every valid entry with its (set, way) position, in storage order.
    pub fn entries_with_position(&self) -> impl Iterator<Item = (usize, usize, &TlbEntry)> + '_ {
        let ways = self.ways;
        self.keys.iter().zip(self.slots.iter()).enumerate().filter(|(_, (k, _))| **k != INVALID).map(move |(i, (_, e))| (i / ways, i % ways, e))
    }

    // ---- private helpers ----

    /// The way (absolute index) that answers a query: the exact-key way if any, else the
    /// global-key way if any.
    #[inline(always)]
    fn find_in_set(&self, start: usize, exact: u64, global: u64) -> Option<usize> {
        if self.wide {
            return match self.index_find(exact) {
                Some(w) => Some(w),
                None if self.globals > 0 => self.index_find(global),
                None => None,
            };
        }
        if self.ways == WIDE_WAYS {
            return self.find_by_fingerprint(start, exact, global);
        }
        let keys = &self.keys[start..start + self.ways];
        if let Some(w) = find_key(keys, exact) {
            return Some(start + w);
        }
        if self.globals == 0 {
            return None;
        }
        find_key(keys, global).map(|w| start + w)
    }

    /// `find_in_set` for 16-way sets: the 16 fingerprints (one SSE2 compare) name the
    /// candidates, usually none or one, and only those keys are read.
    #[inline(always)]
    fn find_by_fingerprint(&self, start: usize, exact: u64, global: u64) -> Option<usize> {
        let fps: &[u16; WIDE_WAYS] = self.fps[start..start + WIDE_WAYS].try_into().expect("set length");
        let mut m = fp_mask(fps, fingerprint(exact));
        let mut found_global = None;
        while m != 0 {
            let w = start + m.trailing_zeros() as usize;
            m &= m - 1;
            let k = self.keys[w];
            if k == exact {
                return Some(w);
            }
            if k == global {
                found_global = Some(w);
            }
        }
        found_global
    }

    /// Make way `w` (absolute) most recently used.
    #[inline(always)]
    fn touch(&mut self, w: usize) {
        self.clock += 1;
        // One test on the common path (stamps alone). PLRU keeps stamps too (quotas' "least
        // recently used"); a recency-order word replaces them.
        if !self.touch_more {
            self.recency[w] = self.clock;
        } else if self.plru_words != 0 {
            self.recency[w] = self.clock;
            self.plru_touch(w);
        } else {
            self.order_touch(w);
        }
        if self.lru_queue_live {
            self.lru_queue.push((w as u32, self.clock));
            self.touches_since_victim += 1;
            if self.touches_since_victim > 4 * self.ways {
                self.lru_queue_live = false;
            }
        }
    }

    /// Rebuild the touch queue from the recency stamps: each way once, oldest first.
    #[cold]
    fn rebuild_lru_queue(&mut self) {
        self.lru_queue.clear();
        self.lru_head = 0;
        self.lru_queue.extend(self.recency.iter().enumerate().map(|(w, &s)| (w as u32, s)));
        self.lru_queue.sort_unstable_by_key(|&(_, s)| s);
        self.lru_queue_live = true;
    }

    /// The least recently used way of a full, fully associative set, from the queue.
    #[inline]
    fn lru_queue_victim(&mut self) -> usize {
        self.touches_since_victim = 0;
        if !self.lru_queue_live || self.lru_queue.len() - self.lru_head > 8 * self.ways {
            self.rebuild_lru_queue();
        } else if self.lru_head > 4 * self.ways {
            // Reclaim the consumed front (no allocation: the buffer is reused).
            self.lru_queue.drain(..self.lru_head);
            self.lru_head = 0;
        }
        while let Some(&(w, stamp)) = self.lru_queue.get(self.lru_head) {
            self.lru_head += 1;
            if self.recency[w as usize] == stamp {
                return w as usize;
            }
        }
        // Unreachable while every touch is queued; the scan is the definition anyway.
        lru_way(&self.recency)
    }

    /// Move way `w` (absolute) to the top of its set's recency order.
    #[inline(always)]
    fn order_touch(&mut self, w: usize) {
        let set = w >> self.ways_log2;
        let way = (w & (self.ways - 1)) as u64;
        self.lru_order[set] = order_touch(self.lru_order[set], way, self.ways as u32);
    }

    #[inline(always)]
    fn plru_touch(&mut self, w: usize) {
        // Ways are a power of two here: set and way by shift and mask, no division.
        let set = w >> self.ways_log2;
        let way = w & (self.ways - 1);
        if self.plru_words == 1 {
            // Up to 64 ways: one precomputed (path mask, path value) per way.
            let (mask, value) = self.plru_path[way];
            let b = &mut self.plru[set];
            *b = (*b & !mask) | value;
            return;
        }
        let base = set * self.plru_words;
        let mut n = self.ways + way;
        while n > 1 {
            let p = n >> 1;
            let (word, bit) = (base + (p >> 6), 1u64 << (p & 63));
            // Coming from the left child (n even): the next victim is on the right.
            let right = 0u64.wrapping_sub(((n & 1) ^ 1) as u64);
            self.plru[word] = (self.plru[word] & !bit) | (bit & right);
            n = p;
        }
    }

    fn plru_victim(&self, start: usize) -> usize {
        let set = start >> self.ways_log2;
        let bits = &self.plru[set * self.plru_words..(set + 1) * self.plru_words];
        let mut n = 1;
        while n < self.ways {
            let b = (bits[n >> 6] >> (n & 63)) & 1;
            n = 2 * n + b as usize;
        }
        n - self.ways
    }

    /// Key and set start of an entry about to be inserted.
    #[inline(always)]
    fn prepare(&self, entry: &TlbEntry) -> (u64, usize) {
        debug_assert_eq!(entry.vpn, entry.vpn.align(entry.size), "TLB entry vpn not aligned to its size");
        let (key, units) = entry_key(entry);
        (key, (units as usize & self.set_mask) * self.ways)
    }

    #[inline(always)]
    fn scan_for_insert(&self, start: usize, key: u64) -> Slot {
        let keys = &self.keys[start..start + self.ways];
        let same = if key == self.missed {
            None
        } else if self.wide {
            // An exact query for `key` finds exactly the way holding `key` (for a global key
            // the "exact" and "global" keys coincide).
            self.index_find(key).map(|w| w - start)
        } else {
            find_key(keys, key)
        };
        if let Some(w) = same {
            return Slot::Same(start + w);
        }
        // A full structure (the steady state) has no invalid way to look for.
        if self.valid as usize == self.keys.len() {
            return Slot::Full;
        }
        match find_key(keys, INVALID) {
            Some(w) => Slot::Free(start + w),
            None => Slot::Full,
        }
    }

    /// Victim way (relative to the set) in a full set, by the replacement policy.
    #[inline(always)]
    fn policy_victim(&mut self, start: usize) -> usize {
        // The recency-order word (the L2 TLB's and the PWCs' common case) needs no call.
        if !self.lru_order.is_empty() {
            return (self.lru_order[start >> self.ways_log2] & 15) as usize;
        }
        self.policy_victim_other(start)
    }

    #[inline(never)]
    fn policy_victim_other(&mut self, start: usize) -> usize {
        match self.geometry.replacement {
            Replacement::Lru if self.lru_queue_on => self.lru_queue_victim(),
            Replacement::Lru => lru_way(&self.recency[start..start + self.ways]),
            Replacement::Fifo => argmin(&self.inserted[start..start + self.ways]),
            Replacement::Plru => self.plru_victim(start),
            Replacement::Random => self.rng.below(self.ways as u64) as usize,
        }
    }

    /// Least recently used valid way of the set (relative) whose entry satisfies `pred`.
    fn lru_where(&self, start: usize, pred: impl Fn(&TlbEntry) -> bool) -> Option<usize> {
        if !self.lru_order.is_empty() {
            // Up the recency order from the least recently used way.
            let order = self.lru_order[start >> self.ways_log2];
            return (0..self.ways).map(|p| ((order >> (4 * p)) & 15) as usize).find(|&w| self.keys[start + w] != INVALID && pred(&self.slots[start + w]));
        }
        let mut best: Option<(u64, usize)> = None;
        for w in 0..self.ways {
            let i = start + w;
            if self.keys[i] != INVALID && pred(&self.slots[i]) && best.is_none_or(|(s, _)| self.recency[i] < s) {
                best = Some((self.recency[i], w));
            }
        }
        best.map(|(_, w)| w)
    }

    /// Same key already present at `w`: overwrite in place, most recently used.
    fn overwrite(&mut self, w: usize, entry: TlbEntry) {
        let old_sl = self.slots[w].sl;
        self.sl_count[old_sl as usize] -= 1;
        self.sl_count[entry.sl as usize] += 1;
        self.slots[w] = entry;
        self.touch(w);
    }

    /// Put a new key into way `w` (invalid, or a victim whose entry is dropped here).
    #[inline(always)]
    fn place(&mut self, w: usize, key: u64, entry: TlbEntry) {
        let old = self.keys[w];
        if old != INVALID {
            self.sl_count[self.slots[w].sl as usize] -= 1;
            self.size_count[self.slots[w].size as usize] -= 1;
            self.globals -= (old & KEY_GLOBAL_BIT != 0) as u32;
            if self.wide {
                self.index_remove(old, w);
            }
        } else {
            self.valid += 1;
        }
        self.sl_count[entry.sl as usize] += 1;
        self.size_count[entry.size as usize] += 1;
        self.globals += (key & KEY_GLOBAL_BIT != 0) as u32;
        self.keys[w] = key;
        self.missed = INVALID;
        self.index_insert(key, w);
        if !self.fps.is_empty() {
            self.fps[w] = fingerprint(key);
        }
        self.slots[w] = entry;
        self.touch(w);
        if self.fifo {
            self.inserted[w] = self.clock;
        }
        if key & KEY_GLOBAL_BIT == 0 {
            self.memo_query = key;
            self.memo_way = w;
        } else {
            self.memo_query = INVALID;
        }
    }

    fn remove(&mut self, w: usize) {
        debug_assert_ne!(self.keys[w], INVALID);
        self.globals -= (self.keys[w] & KEY_GLOBAL_BIT != 0) as u32;
        self.size_count[self.slots[w].size as usize] -= 1;
        self.index_remove(self.keys[w], w);
        self.keys[w] = INVALID;
        self.missed = INVALID;
        self.valid -= 1;
        self.sl_count[self.slots[w].sl as usize] -= 1;
    }
}

impl Tlb {
    #[inline(always)]
    fn index_home(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.index_shift) as usize
    }

    /// The way holding `key`, through the index.
    #[inline(always)]
    fn index_find(&self, key: u64) -> Option<usize> {
        let mask = self.index.len() - 1;
        let mut i = self.index_home(key);
        loop {
            let w = self.index[i];
            if w == INDEX_EMPTY {
                return None;
            }
            if self.keys[w as usize] == key {
                return Some(w as usize);
            }
            i = (i + 1) & mask;
        }
    }

    #[inline]
    fn index_insert(&mut self, key: u64, w: usize) {
        if self.index.is_empty() {
            return;
        }
        let mask = self.index.len() - 1;
        let mut i = self.index_home(key);
        while self.index[i] != INDEX_EMPTY {
            i = (i + 1) & mask;
        }
        self.index[i] = w as u32;
    }

    /// Remove way `w` (holding `key`, still in `keys`) from the index, by backward-shift
    /// deletion so that no probe chain is broken.
    #[inline]
    fn index_remove(&mut self, key: u64, w: usize) {
        if self.index.is_empty() {
            return;
        }
        let mask = self.index.len() - 1;
        let mut i = self.index_home(key);
        while self.index[i] != w as u32 {
            debug_assert_ne!(self.index[i], INDEX_EMPTY, "way {w} missing from the index");
            i = (i + 1) & mask;
        }
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let moved = self.index[j];
            if moved == INDEX_EMPTY {
                self.index[i] = INDEX_EMPTY;
                return;
            }
            let home = self.index_home(self.keys[moved as usize]);
            // The entry at j may fill the hole at i unless its home lies cyclically in (i, j].
            let stays = if i <= j { i < home && home <= j } else { i < home || home <= j };
            if !stays {
                self.index[i] = moved;
                i = j;
            }
        }
    }
}

enum Slot {
    Same(usize),
    Free(usize),
    Full,
}

#[inline]
fn argmin(v: &[u64]) -> usize {
    let (mut best, mut at) = (u64::MAX, 0);
    for (i, &x) in v.iter().enumerate() {
        let lt = x < best;
        best = if lt { x } else { best };
        at = if lt { i } else { at };
    }
    at
}

/// Position of the smallest stamp (stamps are distinct). Up to 128 ways, a branch-free min
/// over (stamp << 7 | way) (stamps count touches and stay far below 2^57).
#[inline(always)]
pub(crate) fn lru_way(stamps: &[u64]) -> usize {
    if stamps.len() > 128 {
        return argmin(stamps);
    }
    // The common associativities as fixed-length arrays, so that the min unrolls into
    // compares and conditional moves.
    match stamps.len() {
        2 => lru_min(fixed::<2>(stamps)),
        4 => lru_min(fixed::<4>(stamps)),
        8 => lru_min(fixed::<8>(stamps)),
        16 => lru_min(fixed::<16>(stamps)),
        _ => lru_min(stamps),
    }
}

#[inline(always)]
fn fixed<const N: usize>(stamps: &[u64]) -> &[u64; N] {
    stamps.try_into().expect("set length")
}

/// The way of the smallest (stamp << 7 | way) of a set (never empty).
#[inline(always)]
fn lru_min(stamps: &[u64]) -> usize {
    let mut m = stamps[0] << 7;
    for (i, &s) in stamps.iter().enumerate().skip(1) {
        m = m.min((s << 7) | i as u64);
    }
    (m & 127) as usize
}

/// Position of `k` in `keys` (a set's keys; keys in a set are unique). The scan is
/// specialised for the common associativities so that it compiles to a few unrolled,
/// branch-free compares: the matching way is at a random position, and an early-exit loop
/// would mispredict on most lookups. Other sizes scan 8 ways at a time.
#[inline(always)]
pub(crate) fn find_key(keys: &[u64], k: u64) -> Option<usize> {
    match keys.len() {
        1 => find_n::<1>(keys, k),
        2 => find_n::<2>(keys, k),
        4 => find_n::<4>(keys, k),
        6 => find_n::<6>(keys, k),
        8 => find_n::<8>(keys, k),
        12 => find_n::<12>(keys, k),
        16 => find_n::<16>(keys, k),
        _ => find_any(keys, k),
    }
}

#[inline(always)]
fn find_n<const N: usize>(keys: &[u64], k: u64) -> Option<usize> {
    let keys: &[u64; N] = keys.try_into().expect("set length");
    let mut m = 0u32;
    for (i, &x) in keys.iter().enumerate() {
        m |= ((x == k) as u32) << i;
    }
    if m != 0 {
        Some(m.trailing_zeros() as usize)
    } else {
        None
    }
}

/// `order` (a set's ways in recency order, 4 bits each, least recently used lowest, the
/// most recently used in field `ways - 1`) with `way` moved to the top.
#[inline(always)]
pub(crate) fn order_touch(order: u64, way: u64, ways: u32) -> u64 {
    // The field holding `way`: the lowest zero field of order ^ (way in every field). Ways
    // appear once each, in the low `ways` fields, so the lowest flagged field is exact (a
    // borrow can only flag fields above a true zero).
    const ONES: u64 = 0x1111_1111_1111_1111;
    let x = order ^ way.wrapping_mul(ONES);
    let zero = x.wrapping_sub(ONES) & !x & (ONES << 3);
    let shift = zero.trailing_zeros() & !3;
    let below = order & ((1u64 << shift) - 1);
    // Two shifts: the field is at most the 16th (shift 60), where one shift by 64 would
    // overflow.
    let above = (order >> shift >> 4) << shift;
    let top = 4 * (ways - 1);
    below | (above & ((1u64 << top) - 1)) | (way << top)
}

/// Bit mask of the positions in `fps` (at most 64) equal to `f`.
#[inline(always)]
pub(crate) fn fp_mask(fps: &[u16], f: u16) -> u64 {
    let mut m = 0u64;
    let mut base = 0;
    #[cfg(target_arch = "x86_64")]
    {
        // SSE2 (always present on x86_64): 16 fingerprints per step.
        use std::arch::x86_64::{__m128i, _mm_cmpeq_epi16, _mm_loadu_si128, _mm_movemask_epi8, _mm_packs_epi16, _mm_set1_epi16};
        let mut chunks = fps.chunks_exact(16);
        // SAFETY: SSE2 is part of the x86_64 baseline, so the intrinsics are available on
        // every x86_64 CPU; each chunk is 16 u16s (32 bytes) and the two 16-byte loads are
        // unaligned loads inside it.
        unsafe {
            let needle = _mm_set1_epi16(f as i16);
            for c in &mut chunks {
                let p = c.as_ptr() as *const __m128i;
                let (lo, hi) = (_mm_loadu_si128(p), _mm_loadu_si128(p.add(1)));
                // Equal lanes -> 0xFFFF -> packed to 0xFF -> one mask bit per fingerprint.
                let eq = _mm_packs_epi16(_mm_cmpeq_epi16(lo, needle), _mm_cmpeq_epi16(hi, needle));
                m |= (_mm_movemask_epi8(eq) as u32 as u64) << base;
                base += 16;
            }
        }
    }
    for (i, &x) in fps[base..].iter().enumerate() {
        m |= ((x == f) as u64) << (base + i);
    }
    m
}

#[inline]
fn find_any(keys: &[u64], k: u64) -> Option<usize> {
    let mut chunks = keys.chunks_exact(8);
    let mut base = 0;
    for c in &mut chunks {
        if let Some(w) = find_n::<8>(c, k) {
            return Some(base + w);
        }
        base += 8;
    }
    chunks.remainder().iter().position(|&x| x == k).map(|w| base + w)
}

/// For each way of a `ways`-way (power of two, at most 64) tree-PLRU set: the mask of the
/// tree nodes on its path and the values an access to it writes there.
fn plru_paths(ways: usize) -> Vec<(u64, u64)> {
    (0..ways)
        .map(|w| {
            let (mut mask, mut value) = (0u64, 0u64);
            let mut n = ways + w;
            while n > 1 {
                let p = n >> 1;
                mask |= 1 << p;
                if n & 1 == 0 {
                    value |= 1 << p;
                }
                n = p;
            }
            (mask, value)
        })
        .collect()
}
