//! The walk stream's speed of light: the model work of `bench`'s walk stream (stream ii:
//! random 8-byte loads over 16 GiB, nearly every one a page walk) and nothing else, each
//! structure written for its one geometry at compile time. It bounds what a redesign of
//! `tlb/` could reach on this host; it is not the simulator, and no test depends on it.
//!
//! Per access, with the default machine's geometries (config/presets.rs): L1 DTLB 96
//! entries fully associative LRU; L2 4096 entries 16-way LRU; page-walk caches PML4 2
//! (fully associative), PDPT 4 (fully associative), PD 32 4-way, all LRU, the deepest hit
//! deciding where the walk starts; one page-table-line cache access (32,768 lines, 16-way
//! LRU) per level read; the leaf PTE read from a 32 MiB table, its accessed bit tested;
//! the leaf PTE of the access 12 ahead prefetched, as the engine does; fills of the walk
//! caches, L2 and L1. LRU is exact. Left out, as the simulator has them: tags, global
//! entries, page sizes other than 4 KiB, service-level quotas, listeners, statistics
//! beyond hit counts, the event loop.
//!
//! L1 variants: `hashdl` (a 128-bucket hash with doubly linked u8 chains and a circular
//! intrusive LRU list: an eviction is a rotation of the list head), `hash128`/`hash256`
//! (the same with chains walked by branches), `scan` (SSE2 compares of 96 16-bit
//! fingerprints). 16-way sets: 16-bit fingerprints compared with SSE2 and a 16 × 4-bit
//! recency-order word, so the victim is read, not searched for.
//!
//! Usage: `cargo run --release -p tlbsim-core --example walk_floor -- [N=2000000] [REPS=5]
//! [hashdl|hash128|hash256|scan|all] [thp|nothp]`; instructions per access:
//! `valgrind --tool=callgrind --toggle-collect='*timed*' target/release/examples/walk_floor
//! 200000 1` (Ir / N). Measured on this project's 2-vCPU AMD EPYC guest (2026-11-27):
//! `hashdl` 21–45 M accesses/s, 284 instructions per access, against 2.7–4.4 M/s and
//! 1,996 for `examples/bench 2000000 walk` in the same minutes.

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    eprintln!("walk_floor uses SSE2 intrinsics: x86_64 only");
}

#[cfg(target_arch = "x86_64")]
fn main() {
    imp::main()
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use core::arch::x86_64::*;
    use std::time::Instant;

    const BASE: u64 = 0x10_0000_0000;
    const PAGES: usize = 1 << 22; // 16 GiB / 4 KiB
    const PD_ENTRIES: usize = PAGES / 512; // 8192
    const PDPT_ENTRIES: usize = PD_ENTRIES / 512; // 16
    const PREFETCH_DIST: usize = 12;
    const INVALID: u64 = u64::MAX;

    // Simulated physical frames of the tables.
    const PML4_FRAME: u64 = 0x1000;
    const PDPT_FRAME: u64 = 0x2000;
    const PD_FRAME0: u64 = 0x3000; // PD table t at 0x3000 + t
    const LEAF_FRAME0: u64 = 0x100000; // leaf table t at 0x100000 + t
    const DATA_FRAME0: u64 = 0x4000000;

    const P_BIT: u64 = 1;

    extern "C" {
        fn madvise(addr: *mut core::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    const MADV_HUGEPAGE: i32 = 14;
    static USE_THP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    /// Leaked, 2 MiB-aligned allocation; madvise(MADV_HUGEPAGE) if enabled.
    fn alloc_big<T: Copy>(n: usize, init: impl Fn(usize) -> T) -> &'static mut [T] {
        let bytes = (n * core::mem::size_of::<T>()).max(1);
        let bytes = (bytes + (2 << 20) - 1) & !((2 << 20) - 1);
        let layout = std::alloc::Layout::from_size_align(bytes, 2 << 20).unwrap();
        unsafe {
            let p = std::alloc::alloc(layout) as *mut T;
            assert!(!p.is_null());
            if USE_THP.load(std::sync::atomic::Ordering::Relaxed) {
                let r = madvise(p as *mut _, bytes, MADV_HUGEPAGE);
                assert_eq!(r, 0);
            }
            for i in 0..n {
                p.add(i).write(init(i));
            }
            core::slice::from_raw_parts_mut(p, n)
        }
    }
    const A_BIT: u64 = 1 << 5;

    // ---------------------------------------------------------------------------
    // Recency-order word: nibble i = way at recency position i (0 = MRU).
    // ---------------------------------------------------------------------------
    const NIB1: u64 = 0x1111_1111_1111_1111;
    const NIB8: u64 = 0x8888_8888_8888_8888;

    /// Move way `w` to the MRU position.
    #[inline(always)]
    fn order_touch<const MRU: bool>(o: u64, w: u64) -> u64 {
        if MRU_CHECK && MRU && (o & 0xF) == w {
            return o;
        }
        let x = o ^ w.wrapping_mul(NIB1);
        // lowest zero nibble of x (exact for the lowest one); t != 0 since w is present
        let t = x.wrapping_sub(NIB1) & !x & NIB8;
        let tz = unsafe { core::num::NonZeroU64::new_unchecked(t) }.trailing_zeros(); // 4p+3
        let m = (2u64 << tz).wrapping_sub(1); // positions 0..=p
        (o & !m) | ((o << 4) & m) | w
    }
    const MRU_CHECK: bool = true;

    const ORDER_INIT: u64 = 0xFEDC_BA98_7654_3210;

    // ---------------------------------------------------------------------------
    // 16-way set-associative LRU, 16-bit fingerprints (2 SSE2 compares + packs)
    // ---------------------------------------------------------------------------
    #[repr(C, align(64))]
    #[derive(Clone, Copy)]
    struct MetaW {
        fp: [u16; 16],
        order: u64,
        _pad: [u64; 3],
    }

    pub struct Assoc16W<const SETS: usize> {
        meta: &'static mut [MetaW],
        keys: &'static mut [[u64; 16]],
    }

    impl<const SETS: usize> Assoc16W<SETS> {
        const SHIFT: u32 = SETS.trailing_zeros();
        fn new() -> Self {
            assert!(SETS.is_power_of_two());
            Self { meta: alloc_big(SETS, |_| MetaW { fp: [0xFFFF; 16], order: ORDER_INIT, _pad: [0; 3] }), keys: alloc_big(SETS, |_| [INVALID; 16]) }
        }
        #[inline(always)]
        fn split(key: u64) -> (usize, u16) {
            ((key as usize) & (SETS - 1), (key >> Self::SHIFT) as u16)
        }
        #[inline(always)]
        fn find(&self, s: usize, fp: u16, key: u64) -> Option<usize> {
            unsafe {
                let m = self.meta.get_unchecked(s);
                let p = m.fp.as_ptr() as *const __m128i;
                let f = _mm_set1_epi16(fp as i16);
                let a = _mm_cmpeq_epi16(_mm_load_si128(p), f);
                let b = _mm_cmpeq_epi16(_mm_load_si128(p.add(1)), f);
                let mut mask = _mm_movemask_epi8(_mm_packs_epi16(a, b)) as u32;
                let ks = self.keys.get_unchecked(s);
                while mask != 0 {
                    let w = mask.trailing_zeros() as usize;
                    if *ks.get_unchecked(w) == key {
                        return Some(w);
                    }
                    mask &= mask - 1;
                }
                None
            }
        }
        /// Look up (a hit becomes most recently used); returns the set, fingerprint and hit.
        #[inline(always)]
        fn probe<const MRU: bool>(&mut self, key: u64) -> (usize, u16, bool) {
            let (s, fp) = Self::split(key);
            let found = self.find(s, fp, key);
            if let Some(w) = found {
                let m = unsafe { self.meta.get_unchecked_mut(s) };
                m.order = order_touch::<MRU>(m.order, w as u64);
            }
            (s, fp, found.is_some())
        }
        #[inline(always)]
        fn lookup<const MRU: bool>(&mut self, key: u64) -> bool {
            self.probe::<MRU>(key).2
        }
        #[inline(always)]
        fn fill(&mut self, s: usize, fp: u16, key: u64) {
            unsafe {
                let m = self.meta.get_unchecked_mut(s);
                let v = (m.order >> 60) as usize;
                m.order = (m.order << 4) | v as u64;
                *m.fp.get_unchecked_mut(v) = fp;
                *self.keys.get_unchecked_mut(s).get_unchecked_mut(v) = key;
            }
        }
        #[inline(always)]
        fn insert(&mut self, key: u64) {
            let (s, fp) = Self::split(key);
            self.fill(s, fp, key);
        }
        /// look up; on miss fill. Returns hit.
        #[inline(always)]
        fn access<const MRU: bool>(&mut self, key: u64) -> bool {
            let (s, fp, hit) = self.probe::<MRU>(key);
            if !hit {
                self.fill(s, fp, key);
            }
            hit
        }
    }

    type Assoc16<const S: usize> = Assoc16W<S>;

    // ---------------------------------------------------------------------------
    // Small set-associative LRU (page-walk caches): scalar key compare.
    // ---------------------------------------------------------------------------
    pub struct Small<const SETS: usize, const WAYS: usize> {
        keys: [[u64; WAYS]; SETS],
        order: [u64; SETS],
    }

    impl<const SETS: usize, const WAYS: usize> Small<SETS, WAYS> {
        const MASK: u64 = if WAYS == 16 { u64::MAX } else { (1u64 << (4 * WAYS)) - 1 };
        fn new() -> Self {
            assert!(SETS.is_power_of_two() && WAYS <= 16);
            Self { keys: [[INVALID; WAYS]; SETS], order: [ORDER_INIT & Self::MASK; SETS] }
        }
        #[inline(always)]
        fn lookup<const MRU: bool>(&mut self, key: u64) -> bool {
            let s = (key as usize) & (SETS - 1);
            let ks = &self.keys[s];
            for w in 0..WAYS {
                if ks[w] == key {
                    self.order[s] = order_touch::<MRU>(self.order[s], w as u64);
                    return true;
                }
            }
            false
        }
        #[inline(always)]
        fn insert(&mut self, key: u64) {
            let s = (key as usize) & (SETS - 1);
            let o = self.order[s];
            let v = (o >> (4 * (WAYS - 1))) & 0xF;
            self.order[s] = ((o << 4) & Self::MASK) | v;
            unsafe { *self.keys.get_unchecked_mut(s).get_unchecked_mut(v as usize) = key };
        }
    }

    // ---------------------------------------------------------------------------
    // L1 DTLB: 96 entries, fully associative, true LRU.
    // ---------------------------------------------------------------------------
    pub trait L1 {
        const NAME: &'static str;
        fn new() -> Self;
        fn lookup(&mut self, vpn: u64) -> bool;
        /// insert (caller guarantees vpn absent); evicts LRU.
        fn insert(&mut self, vpn: u64);
    }

    const L1N: usize = 96;
    const NIL: u8 = 0xFF;

    /// Circular intrusive doubly-linked LRU list over u8 indices. head = MRU,
    /// prev[head] = LRU.  Evict+insert is a rotation: head = prev[head].
    #[derive(Clone)]
    struct LruList {
        prev: [u8; L1N],
        next: [u8; L1N],
        head: u8,
    }
    impl LruList {
        fn new() -> Self {
            let mut prev = [0u8; L1N];
            let mut next = [0u8; L1N];
            for i in 0..L1N {
                next[i] = ((i + 1) % L1N) as u8;
                prev[i] = ((i + L1N - 1) % L1N) as u8;
            }
            Self { prev, next, head: 0 }
        }
        #[inline(always)]
        fn victim(&self) -> usize {
            unsafe { *self.prev.get_unchecked(self.head as usize) as usize }
        }
        /// victim becomes MRU (it is the tail, so this is a rotation)
        #[inline(always)]
        fn rotate_to(&mut self, v: usize) {
            self.head = v as u8;
        }
        #[inline(always)]
        fn touch(&mut self, e: usize) {
            let h = self.head as usize;
            if e == h {
                return;
            }
            unsafe {
                let n = *self.next.get_unchecked(e) as usize;
                let p = *self.prev.get_unchecked(e) as usize;
                *self.next.get_unchecked_mut(p) = n as u8;
                *self.prev.get_unchecked_mut(n) = p as u8;
                let t = *self.prev.get_unchecked(h) as usize;
                *self.next.get_unchecked_mut(t) = e as u8;
                *self.prev.get_unchecked_mut(e) = t as u8;
                *self.next.get_unchecked_mut(e) = h as u8;
                *self.prev.get_unchecked_mut(h) = e as u8;
            }
            self.head = e as u8;
        }
    }

    #[inline(always)]
    fn mix(vpn: u64) -> u64 {
        vpn.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    /// Variant A: SIMD scan of 96 16-bit fingerprints.
    #[repr(C, align(64))]
    pub struct L1Scan {
        fp: [u16; L1N],
        keys: [u64; L1N],
        lru: LruList,
    }
    impl L1 for L1Scan {
        const NAME: &'static str = "scan";
        fn new() -> Self {
            Self { fp: [0; L1N], keys: [INVALID; L1N], lru: LruList::new() }
        }
        #[inline(always)]
        fn lookup(&mut self, vpn: u64) -> bool {
            let fp = (mix(vpn) >> 48) as u16;
            unsafe {
                let p = self.fp.as_ptr() as *const __m128i;
                let f = _mm_set1_epi16(fp as i16);
                let mut any = _mm_cmpeq_epi16(_mm_load_si128(p), f);
                for i in 1..L1N / 8 {
                    any = _mm_or_si128(any, _mm_cmpeq_epi16(_mm_load_si128(p.add(i)), f));
                }
                if _mm_movemask_epi8(any) == 0 {
                    return false;
                }
                self.lookup_slow(p, f, vpn)
            }
        }
        #[inline(always)]
        fn insert(&mut self, vpn: u64) {
            let v = self.lru.victim();
            unsafe {
                *self.keys.get_unchecked_mut(v) = vpn;
                let fp = (mix(vpn) >> 48) as u16;
                *self.fp.get_unchecked_mut(v) = fp;
            }
            self.lru.rotate_to(v);
        }
    }
    impl L1Scan {
        #[inline(never)]
        #[cold]
        unsafe fn lookup_slow(&mut self, p: *const __m128i, f: __m128i, vpn: u64) -> bool {
            for i in 0..L1N / 8 {
                let mut m = (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_load_si128(p.add(i)), f)) as u32) & 0x5555;
                while m != 0 {
                    let e = i * 8 + (m.trailing_zeros() as usize) / 2;
                    if self.keys[e] == vpn {
                        self.lru.touch(e);
                        return true;
                    }
                    m &= m - 1;
                }
            }
            false
        }
    }

    /// Variant B: chained hash index (B buckets, singly linked u8 chains).
    pub struct L1Hash<const B: usize> {
        heads: [u8; B],
        chain: [u8; L1N],
        keys: [u64; L1N],
        lru: LruList,
    }
    impl<const B: usize> L1Hash<B> {
        const SH: u32 = 64 - B.trailing_zeros();
        #[inline(always)]
        fn bucket(vpn: u64) -> usize {
            (mix(vpn) >> Self::SH) as usize
        }
    }
    impl<const B: usize> L1 for L1Hash<B> {
        const NAME: &'static str = if B == 128 { "hash128" } else { "hash256" };
        fn new() -> Self {
            assert!(B.is_power_of_two() && B <= 256);
            Self { heads: [NIL; B], chain: [NIL; L1N], keys: [INVALID; L1N], lru: LruList::new() }
        }
        #[inline(always)]
        fn lookup(&mut self, vpn: u64) -> bool {
            let found = find_in_chain(&self.keys, &self.chain, self.heads[Self::bucket(vpn)], vpn);
            found.map(|e| self.lru.touch(e)).is_some()
        }
        #[inline(always)]
        fn insert(&mut self, vpn: u64) {
            let v = self.lru.victim();
            unsafe {
                let old = *self.keys.get_unchecked(v);
                if old != INVALID {
                    // unlink v from its chain
                    let ob = Self::bucket(old);
                    let mut cur = *self.heads.get_unchecked(ob);
                    if cur as usize == v {
                        *self.heads.get_unchecked_mut(ob) = *self.chain.get_unchecked(v);
                    } else {
                        loop {
                            let nx = *self.chain.get_unchecked(cur as usize);
                            if nx as usize == v {
                                *self.chain.get_unchecked_mut(cur as usize) = *self.chain.get_unchecked(v);
                                break;
                            }
                            cur = nx;
                        }
                    }
                }
                *self.keys.get_unchecked_mut(v) = vpn;
                let b = Self::bucket(vpn);
                *self.chain.get_unchecked_mut(v) = *self.heads.get_unchecked(b);
                *self.heads.get_unchecked_mut(b) = v as u8;
            }
            self.lru.rotate_to(v);
        }
    }

    /// Follow a u8-linked hash chain from `first` (NIL ends it) to the entry holding `vpn`.
    #[inline(always)]
    fn find_in_chain(keys: &[u64], next: &[u8], first: u8, vpn: u64) -> Option<usize> {
        let mut e = first;
        while e != NIL {
            if keys[e as usize] == vpn {
                return Some(e as usize);
            }
            e = next[e as usize];
        }
        None
    }

    /// Variant C: chained hash with doubly-linked u8 chains in one node space:
    /// nodes 0..96 = entries, 96..96+B = bucket heads, 255 = NIL (a dummy slot,
    /// so unconditional writes through NIL are harmless). Lookup checks the first
    /// two chain positions without branching; unlink is branch-free.
    #[repr(C, align(64))]
    pub struct L1HashDL<const B: usize> {
        keys: [u64; 256], // keys[NIL] = INVALID, keys[bucket heads] = INVALID
        cnext: [u8; 256],
        cprev: [u8; 256],
        lru: LruList,
    }
    impl<const B: usize> L1HashDL<B> {
        const SH: u32 = 64 - B.trailing_zeros();
        #[inline(always)]
        fn head_node(vpn: u64) -> usize {
            L1N + (mix(vpn) >> Self::SH) as usize
        }
    }
    impl<const B: usize> L1 for L1HashDL<B> {
        const NAME: &'static str = "hashdl";
        fn new() -> Self {
            assert!(B.is_power_of_two() && L1N + B < 255);
            Self { keys: [INVALID; 256], cnext: [NIL; 256], cprev: [NIL; 256], lru: LruList::new() }
        }
        #[inline(always)]
        fn lookup(&mut self, vpn: u64) -> bool {
            unsafe {
                let e1 = *self.cnext.get_unchecked(Self::head_node(vpn)) as usize;
                let e2 = *self.cnext.get_unchecked(e1) as usize;
                let h1 = *self.keys.get_unchecked(e1) == vpn;
                let h2 = *self.keys.get_unchecked(e2) == vpn;
                if h1 | h2 {
                    self.lru.touch(if h1 { e1 } else { e2 });
                    return true;
                }
                let found = find_in_chain(&self.keys, &self.cnext, *self.cnext.get_unchecked(e2), vpn);
                found.map(|e| self.lru.touch(e)).is_some()
            }
        }
        #[inline(always)]
        fn insert(&mut self, vpn: u64) {
            let v = self.lru.victim();
            unsafe {
                // unlink (branch-free; an unlinked/invalid entry has prev = next = NIL)
                let p = *self.cprev.get_unchecked(v) as usize;
                let n = *self.cnext.get_unchecked(v) as usize;
                *self.cnext.get_unchecked_mut(p) = n as u8;
                *self.cprev.get_unchecked_mut(n) = p as u8;
                // link at head of new bucket
                let h = Self::head_node(vpn);
                let f = *self.cnext.get_unchecked(h) as usize;
                *self.cnext.get_unchecked_mut(v) = f as u8;
                *self.cprev.get_unchecked_mut(v) = h as u8;
                *self.cprev.get_unchecked_mut(f) = v as u8;
                *self.cnext.get_unchecked_mut(h) = v as u8;
                *self.keys.get_unchecked_mut(v) = vpn;
                // keep the dummy NIL slot clean
                *self.cnext.get_unchecked_mut(NIL as usize) = NIL;
            }
            self.lru.rotate_to(v);
        }
    }

    // ---------------------------------------------------------------------------
    // The simulator core
    // ---------------------------------------------------------------------------
    #[derive(Default, Debug, Clone)]
    struct Counters {
        accesses: u64,
        l1_hit: u64,
        l2_hit: u64,
        walks: u64,
        pdc_hit: u64,
        pdpt_probe: u64,
        pdpt_hit: u64,
        pml4_probe: u64,
        pml4_hit: u64,
        reads: [u64; 5],    // by level 1..4
        line_hit: [u64; 5], // by level 1..4
        a_sets: u64,
        not_present: u64,
    }

    pub struct Sim<L: L1> {
        l1: L,
        l2: Assoc16<256>,
        pdc: Small<8, 4>,
        pdptc: Small<1, 4>,
        pml4c: Small<1, 2>,
        lines: Assoc16<2048>,
        leaf: &'static mut [u64; PAGES],
        pd: &'static mut [u64; PD_ENTRIES],
        pdpt: [u64; PDPT_ENTRIES],
        pml4: [u64; 1],
        c: Counters,
    }

    impl<L: L1> Sim<L> {
        fn new() -> Self {
            let leaf = alloc_big(PAGES, |i| ((DATA_FRAME0 + i as u64) << 12) | P_BIT);
            let pd = alloc_big(PD_ENTRIES, |i| ((LEAF_FRAME0 + i as u64) << 12) | P_BIT);
            let mut pdpt = [0u64; PDPT_ENTRIES];
            for (i, e) in pdpt.iter_mut().enumerate() {
                *e = ((PD_FRAME0 + i as u64) << 12) | P_BIT;
            }
            Self {
                l1: L::new(),
                l2: Assoc16::new(),
                pdc: Small::new(),
                pdptc: Small::new(),
                pml4c: Small::new(),
                lines: Assoc16::new(),
                leaf: leaf.try_into().unwrap(),
                pd: pd.try_into().unwrap(),
                pdpt,
                pml4: [(PDPT_FRAME << 12) | P_BIT],
                c: Counters::default(),
            }
        }

        /// read one page-table entry (present test, A-bit set-if-clear) and
        /// access the page-table line cache for its physical line.
        #[inline(always)]
        fn pte<const MRU: bool>(lines: &mut Assoc16<2048>, c: &mut Counters, e: &mut u64, paddr: u64, level: usize) {
            let v = *e;
            if v & P_BIT == 0 {
                c.not_present += 1;
            }
            if v & A_BIT == 0 {
                *e = v | A_BIT;
                c.a_sets += 1;
            }
            if lines.access::<MRU>(paddr >> 6) {
                c.line_hit[level] += 1;
            }
        }

        #[inline(always)]
        fn access(&mut self, va: u64, pf_va: u64) {
            let pi = ((pf_va.wrapping_sub(BASE)) >> 12) as usize & (PAGES - 1);
            unsafe { _mm_prefetch::<_MM_HINT_T0>(self.leaf.as_ptr().add(pi) as *const i8) };
            let vpn = va >> 12;
            if self.l1.lookup(vpn) {
                self.c.l1_hit += 1;
                return;
            }
            if self.l2.lookup::<false>(vpn) {
                self.c.l2_hit += 1;
                self.l1.insert(vpn);
                return;
            }
            let off = va.wrapping_sub(BASE);
            let pd_key = va >> 21;
            let pdpt_key = va >> 30;
            let pml4_key = va >> 39;
            // deepest hit decides the start level (1 = leaf only ... 4 = full walk)
            let start;
            let mut fill_pdpt = false;
            let mut fill_pml4 = false;
            if self.pdc.lookup::<false>(pd_key) {
                self.c.pdc_hit += 1;
                start = 1;
            } else {
                if self.pdptc.lookup::<false>(pdpt_key) {
                    self.c.pdpt_hit += 1;
                    start = 2;
                } else {
                    fill_pdpt = true;
                    if self.pml4c.lookup::<true>(pml4_key) {
                        self.c.pml4_hit += 1;
                        start = 3;
                    } else {
                        fill_pml4 = true;
                        start = 4;
                    }
                }
            }
            let lines = &mut self.lines;
            let c = &mut self.c;
            if start >= 4 {
                Self::pte::<true>(lines, c, &mut self.pml4[0], PML4_FRAME << 12, 4);
            }
            if start >= 3 {
                let i = (off >> 30) as usize & (PDPT_ENTRIES - 1);
                Self::pte::<true>(lines, c, &mut self.pdpt[i], (PDPT_FRAME << 12) + i as u64 * 8, 3);
            }
            if start >= 2 {
                let i = (off >> 21) as usize & (PD_ENTRIES - 1);
                Self::pte::<false>(lines, c, &mut self.pd[i], (PD_FRAME0 << 12) + i as u64 * 8, 2);
            }
            {
                let i = (off >> 12) as usize & (PAGES - 1);
                Self::pte::<false>(lines, c, &mut self.leaf[i], (LEAF_FRAME0 << 12) + i as u64 * 8, 1);
            }
            if start >= 2 {
                self.pdc.insert(pd_key);
            }
            if fill_pdpt {
                self.pdptc.insert(pdpt_key);
            }
            if fill_pml4 {
                self.pml4c.insert(pml4_key);
            }
            self.l2.insert(vpn);
            self.l1.insert(vpn);
        }
    }

    #[inline(never)]
    fn warm<L: L1>(sim: &mut Sim<L>) {
        for p in 0..PAGES as u64 {
            let va = BASE + p * 4096;
            sim.access(va, va + (PREFETCH_DIST as u64) * 4096);
        }
    }

    #[inline(never)]
    fn timed<L: L1>(sim: &mut Sim<L>, stream: &[u64], n: usize) {
        let stream = &stream[..n + PREFETCH_DIST];
        for i in 0..n {
            sim.access(stream[i], stream[i + PREFETCH_DIST]);
        }
    }

    struct SplitMix64(u64);
    impl SplitMix64 {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }

    fn run<L: L1>(stream: &[u64], n: usize, reps: usize) {
        let mut sim: Box<Sim<L>> = Box::new(Sim::new());
        warm(&mut sim);
        let mut rates = Vec::new();
        let derive = |c: &mut Counters, n: u64| {
            c.accesses = n;
            c.walks = n - c.l1_hit - c.l2_hit;
            c.pdpt_probe = c.walks - c.pdc_hit;
            c.pml4_probe = c.pdpt_probe - c.pdpt_hit;
            c.reads[1] = c.walks;
            c.reads[2] = c.pdpt_probe;
            c.reads[3] = c.pml4_probe;
            c.reads[4] = c.pml4_probe - c.pml4_hit;
        };
        {
            let mut w = sim.c.clone();
            derive(&mut w, PAGES as u64);
            println!("[{}] warm: walks={} a_sets={}", L::NAME, w.walks, w.a_sets);
        }
        sim.c = Counters::default();
        for r in 0..reps {
            let t = Instant::now();
            timed(&mut sim, stream, n);
            let dt = t.elapsed().as_secs_f64();
            let rate = n as f64 / dt;
            rates.push(rate);
            println!("[{}] rep {}: {:.3} M accesses/s ({:.2} ns/access)", L::NAME, r, rate / 1e6, dt * 1e9 / n as f64);
        }
        derive(&mut sim.c, (n * reps) as u64);
        let c = &sim.c;
        let pct = |a: u64, b: u64| 100.0 * a as f64 / b.max(1) as f64;
        println!(
            "[{}] hit rates: L1 {:.3}%  L2 {:.3}% (of L1 misses)  PDc {:.3}% (of walks)  \
             PDPTc {:.3}% (of {} probes)  PML4c {:.3}% (of {} probes)",
            L::NAME,
            pct(c.l1_hit, c.accesses),
            pct(c.l2_hit, c.accesses - c.l1_hit),
            pct(c.pdc_hit, c.walks),
            pct(c.pdpt_hit, c.pdpt_probe),
            c.pdpt_probe,
            pct(c.pml4_hit, c.pml4_probe),
            c.pml4_probe
        );
        println!(
            "[{}] line cache: leaf {:.3}% of {}  PD {:.3}% of {}  PDPT {:.3}% of {}  PML4 {:.3}% of {}; \
             a_sets={} not_present={}",
            L::NAME,
            pct(c.line_hit[1], c.reads[1]),
            c.reads[1],
            pct(c.line_hit[2], c.reads[2]),
            c.reads[2],
            pct(c.line_hit[3], c.reads[3]),
            c.reads[3],
            pct(c.line_hit[4], c.reads[4]),
            c.reads[4],
            c.a_sets,
            c.not_present
        );
        let mut cks: u64 = 0;
        for v in [c.accesses, c.l1_hit, c.l2_hit, c.walks, c.pdc_hit, c.pdpt_hit, c.pml4_hit, c.line_hit[1], c.line_hit[2], c.line_hit[3], c.line_hit[4]] {
            cks = cks.wrapping_mul(1_000_003).wrapping_add(v);
        }
        if let Ok(sm) = std::fs::read_to_string("/proc/self/smaps_rollup") {
            for l in sm.lines().filter(|l| l.starts_with("AnonHugePages") || l.starts_with("Rss:")) {
                println!("[{}] {}", L::NAME, l.split_whitespace().collect::<Vec<_>>().join(" "));
            }
        }
        let mut s = rates.clone();
        s.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("[{}] checksum={:#x} median={:.3} M/s best={:.3} M/s", L::NAME, cks, s[s.len() / 2] / 1e6, s[s.len() - 1] / 1e6);
    }

    pub fn main() {
        let args: Vec<String> = std::env::args().collect();
        let n: usize = args.get(1).map(|s| s.parse().unwrap()).unwrap_or(2_000_000);
        let reps: usize = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(5);
        let variant = args.get(3).map(|s| s.as_str()).unwrap_or("hashdl");
        let thp = args.get(4).map(|s| s == "thp").unwrap_or(false);
        USE_THP.store(thp, std::sync::atomic::Ordering::Relaxed);
        println!("n={} reps={} variant={} thp={}", n, reps, variant, thp);

        let mut rng = SplitMix64(0x5EED_1234_ABCD_0001);
        let stream: Vec<u64> = (0..n + PREFETCH_DIST)
            .map(|_| {
                let r = rng.next();
                let page = r & (PAGES as u64 - 1);
                let off = ((r >> 32) & 0x1FF) * 8;
                BASE + page * 4096 + off
            })
            .collect();

        match variant {
            "scan" => run::<L1Scan>(&stream, n, reps),
            "hash128" => run::<L1Hash<128>>(&stream, n, reps),
            "hash256" => run::<L1Hash<256>>(&stream, n, reps),
            "hashdl" => run::<L1HashDL<128>>(&stream, n, reps),
            "all" => {
                run::<L1HashDL<128>>(&stream, n, reps);
                run::<L1Scan>(&stream, n, reps);
                run::<L1Hash<128>>(&stream, n, reps);
                run::<L1Hash<256>>(&stream, n, reps);
            }
            _ => panic!("unknown variant"),
        }
    }
}
