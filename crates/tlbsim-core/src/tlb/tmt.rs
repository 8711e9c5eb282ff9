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
//! recently loaded entry (LRU over CR3 writes).

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

pub struct Tmt {
    // (implementation-defined private fields)
}

impl Tmt {
    /// `entries` >= 1 slots; VASIs are 0..entries.
    pub fn new(entries: u32) -> Tmt {
        let _ = entries;
        todo!()
    }
    /// Write `cr3` for a context of service level `sl`. After any outcome the CCR holds
    /// (cr3, sl, vasi). After a flush outcome the TMT holds only the current context.
    pub fn write_cr3(&mut self, cr3: u64, sl: u8) -> Cr3WriteOutcome {
        let _ = (cr3, sl);
        todo!()
    }
    /// VASI of the current context (the tag new TLB entries get and lookups compare).
    pub fn current_vasi(&self) -> u16 {
        todo!()
    }
    pub fn current_sl(&self) -> u8 {
        todo!()
    }
    /// Flush the TMT keeping only the current context (called when the TLB is flushed for
    /// any other reason).
    pub fn flush_keep_current(&mut self) {
        todo!()
    }
    pub fn len(&self) -> usize {
        todo!()
    }
}
