//! Tag Manager Table and Current Context Register (tag paper §4, Fig. 1).
//!
//! The TMT is a small fully associative table of {CR3, SL, VASI}; the CCR caches the
//! running context's entry. A CR3 write with the CCR's own value is a *forced flush*; a
//! value found in the TMT is loaded into the CCR without a flush; a new value takes a free
//! slot (fresh VASI) without a flush, or, when the TMT is full, evicts a victim, reuses its
//! VASI and forces a *capacity flush*. Whenever the TLB is flushed the TMT is flushed too,
//! so after a flush it holds only the current context.
//!
//! Simplified: the paper leaves the TMT's replacement policy open; we evict the least
//! recently loaded entry (LRU over CR3 writes). TMT slot `i` always carries VASI `i`, so a
//! new context takes the lowest free VASI and a capacity flush reuses the victim's. The SL
//! given with a CR3 write is stored even when the CR3 is already in the TMT. The TMT does
//! not flush the TLB itself: the caller flushes it on `ForcedFlush` and `CapacityFlush`
//! and calls `flush_keep_current` whenever it flushes the TLB for another reason.

/// What a CR3 write did to the TLB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cr3WriteOutcome {
    /// Same CR3 as the CCR: flush TLB and TMT (hypervisor changed the current table).
    ForcedFlush,
    /// Found in the TMT: CCR loaded, no flush.
    Hit,
    /// Inserted into a free TMT slot: no flush.
    Inserted,
    /// TMT full: victim evicted, its VASI reused, TLB and TMT flushed.
    CapacityFlush,
}

/// One TMT slot. Slot `i` always carries VASI `i`: a free slot is a free VASI, and a
/// capacity flush that evicts the victim in slot `i` reuses VASI `i` for the new context.
#[derive(Clone, Copy, Debug)]
struct TmtSlot {
    valid: bool,
    cr3: u64,
    sl: u8,
    /// When this slot was last loaded into the CCR (LRU victim choice).
    loaded: u64,
}

/// The Tag Manager Table with its Current Context Register.
#[derive(Clone, Debug)]
pub struct Tmt {
    slots: Vec<TmtSlot>,
    /// CCR: the slot (= VASI) of the running context, `None` before the first CR3 write.
    ccr: Option<usize>,
    clock: u64,
}

impl Tmt {
    /// `entries` >= 1 slots; VASIs are 0..entries. Panics on 0 or more than 65536 (the
    /// config layer is expected to reject those with a message).
    pub fn new(entries: u32) -> Tmt {
        assert!(entries >= 1, "the TMT needs at least one entry, got 0");
        assert!(entries <= 1 << 16, "the TMT's VASIs are 16-bit TLB tags: at most 65536 entries, got {entries}");
        Tmt { slots: vec![TmtSlot { valid: false, cr3: 0, sl: 0, loaded: 0 }; entries as usize], ccr: None, clock: 0 }
    }

    /// Write `cr3` for a context of service level `sl`. After any outcome the CCR holds
    /// (cr3, sl, vasi). After a flush outcome the TMT holds only the current context.
    ///
    /// The `sl` given is stored (in the CCR and the context's TMT entry) on every outcome,
    /// so a context whose VM changed service level takes the new one.
    pub fn write_cr3(&mut self, cr3: u64, sl: u8) -> Cr3WriteOutcome {
        self.clock += 1;
        // The compare with the CCR and the TMT search happen in parallel in hardware.
        if let Some(cur) = self.ccr {
            if self.slots[cur].cr3 == cr3 {
                self.load(cur, cr3, sl);
                self.flush_keep_current();
                return Cr3WriteOutcome::ForcedFlush;
            }
        }
        if let Some(i) = self.slots.iter().position(|s| s.valid && s.cr3 == cr3) {
            self.load(i, cr3, sl);
            return Cr3WriteOutcome::Hit;
        }
        if let Some(i) = self.slots.iter().position(|s| !s.valid) {
            self.load(i, cr3, sl);
            return Cr3WriteOutcome::Inserted;
        }
        // Full: evict the least recently loaded context and reuse its VASI.
        let victim = (0..self.slots.len()).min_by_key(|&i| self.slots[i].loaded).unwrap_or(0);
        self.load(victim, cr3, sl);
        self.flush_keep_current();
        Cr3WriteOutcome::CapacityFlush
    }

    /// VASI of the current context (the tag new TLB entries get and lookups compare).
    /// 0 before the first CR3 write.
    pub fn current_vasi(&self) -> u16 {
        self.ccr.unwrap_or(0) as u16
    }

    /// Service level of the current context (0 before the first CR3 write).
    pub fn current_sl(&self) -> u8 {
        self.ccr.map_or(0, |i| self.slots[i].sl)
    }

    /// CR3 of the current context, `None` before the first CR3 write.
    pub fn current_cr3(&self) -> Option<u64> {
        self.ccr.map(|i| self.slots[i].cr3)
    }

    /// Flush the TMT keeping only the current context (called when the TLB is flushed for
    /// any other reason).
    pub fn flush_keep_current(&mut self) {
        for (i, s) in self.slots.iter_mut().enumerate() {
            if Some(i) != self.ccr {
                s.valid = false;
            }
        }
    }

    /// Number of valid TMT entries.
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.valid).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of slots (= number of distinct VASIs).
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Valid entries as (cr3, sl, vasi), in VASI order.
    pub fn contexts(&self) -> impl Iterator<Item = (u64, u8, u16)> + '_ {
        self.slots.iter().enumerate().filter(|(_, s)| s.valid).map(|(i, s)| (s.cr3, s.sl, i as u16))
    }

    /// VASI of `cr3` if it is in the TMT.
    pub fn vasi_of(&self, cr3: u64) -> Option<u16> {
        self.slots.iter().position(|s| s.valid && s.cr3 == cr3).map(|i| i as u16)
    }

    fn load(&mut self, i: usize, cr3: u64, sl: u8) {
        self.slots[i] = TmtSlot { valid: true, cr3, sl, loaded: self.clock };
        self.ccr = Some(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Cr3WriteOutcome::*;

    fn ctx(t: &Tmt) -> (Option<u64>, u8, u16) {
        (t.current_cr3(), t.current_sl(), t.current_vasi())
    }

    #[test]
    fn each_outcome() {
        let mut t = Tmt::new(4);
        assert!(t.is_empty());
        assert_eq!(t.write_cr3(0xA000, 1), Inserted);
        assert_eq!(ctx(&t), (Some(0xA000), 1, 0));
        assert_eq!(t.write_cr3(0xB000, 2), Inserted);
        assert_eq!(ctx(&t), (Some(0xB000), 2, 1));
        assert_eq!(t.len(), 2);
        // Back to A: a hit, no flush, A's VASI.
        assert_eq!(t.write_cr3(0xA000, 1), Hit);
        assert_eq!(ctx(&t), (Some(0xA000), 1, 0));
        assert_eq!(t.len(), 2);
        // Same CR3 again: forced flush; only A remains, with its VASI.
        assert_eq!(t.write_cr3(0xA000, 1), ForcedFlush);
        assert_eq!(ctx(&t), (Some(0xA000), 1, 0));
        assert_eq!(t.len(), 1);
        assert_eq!(t.vasi_of(0xB000), None);
        // B comes back as a new context in a free slot.
        assert_eq!(t.write_cr3(0xB000, 2), Inserted);
        assert_eq!(t.current_vasi(), 1);
    }

    #[test]
    fn capacity_flush_reuses_the_victims_vasi() {
        // The paper's configuration: 4 entries, 2-bit VASI.
        let mut t = Tmt::new(4);
        for (i, cr3) in [0x1000, 0x2000, 0x3000, 0x4000].into_iter().enumerate() {
            assert_eq!(t.write_cr3(cr3, 0), Inserted);
            assert_eq!(t.current_vasi(), i as u16);
        }
        assert_eq!(t.len(), 4);
        // Touch 0x1000 so that 0x2000 (VASI 1) is the least recently loaded.
        assert_eq!(t.write_cr3(0x1000, 0), Hit);
        assert_eq!(t.write_cr3(0x5000, 3), CapacityFlush);
        assert_eq!(ctx(&t), (Some(0x5000), 3, 1));
        // After the flush the TMT holds only the current context.
        assert_eq!(t.len(), 1);
        assert_eq!(t.contexts().collect::<Vec<_>>(), vec![(0x5000, 3, 1)]);
        // The freed slots are reused, lowest VASI first, without a flush.
        assert_eq!(t.write_cr3(0x1000, 0), Inserted);
        assert_eq!(t.current_vasi(), 0);
        assert_eq!(t.write_cr3(0x5000, 3), Hit);
        assert_eq!(t.current_vasi(), 1);
    }

    #[test]
    fn one_entry_tmt_flushes_on_every_switch() {
        let mut t = Tmt::new(1);
        assert_eq!(t.write_cr3(1, 0), Inserted);
        assert_eq!(t.write_cr3(2, 0), CapacityFlush);
        assert_eq!(t.write_cr3(1, 0), CapacityFlush);
        assert_eq!(t.write_cr3(1, 0), ForcedFlush);
        assert_eq!(t.current_vasi(), 0);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn flush_keep_current_and_sl_update() {
        let mut t = Tmt::new(4);
        t.flush_keep_current(); // before any write: nothing to keep
        assert!(t.is_empty());
        t.write_cr3(10, 0);
        t.write_cr3(20, 1);
        t.write_cr3(30, 2);
        t.flush_keep_current();
        assert_eq!(t.contexts().collect::<Vec<_>>(), vec![(30, 2, 2)]);
        // A context's service level follows the latest write.
        assert_eq!(t.write_cr3(10, 0), Inserted);
        assert_eq!(t.write_cr3(30, 3), Hit);
        assert_eq!(t.current_sl(), 3);
        assert_eq!(t.vasi_of(30), Some(2));
    }

    #[test]
    fn paper_configuration_invariants() {
        // Four entries: VASIs fit in 2 bits, the CCR's context is always in the TMT, VASIs
        // in the TMT are distinct, and the outcome counts add up.
        let mut t = Tmt::new(4);
        let mut rng = crate::rng::SplitMix64::new(7);
        let mut flushes = 0;
        for _ in 0..10_000 {
            let cr3 = 0x1000 * (1 + rng.below(7));
            let before = t.len();
            let out = t.write_cr3(cr3, (cr3 >> 12) as u8 % 4);
            assert!(t.current_vasi() < 4);
            assert_eq!(t.vasi_of(cr3), Some(t.current_vasi()));
            assert!(t.len() <= 4);
            match out {
                ForcedFlush | CapacityFlush => {
                    flushes += 1;
                    assert_eq!(t.len(), 1);
                }
                Inserted => assert_eq!(t.len(), before + 1),
                Hit => assert_eq!(t.len(), before),
            }
            if out == CapacityFlush {
                assert_eq!(before, 4);
            }
            let mut v: Vec<u16> = t.contexts().map(|c| c.2).collect();
            v.dedup();
            assert_eq!(v.len(), t.len());
        }
        assert!(flushes > 0);
    }
}
