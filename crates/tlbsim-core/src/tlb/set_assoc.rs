//! One set-associative TLB-like structure (x86 TLB levels, page-walk caches).
//!
//! Follows the x86 TLB organisation of DESIGN.md "TLBs (per core)": `entries` entries in
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

use crate::types::{PageSize, Pfn, Vpn};
use serde::{Deserialize, Serialize};

/// Entry flag bits (`TlbEntry::flags`).
pub const FLAG_WRITABLE: u8 = 1 << 0;
pub const FLAG_USER: u8 = 1 << 1;
/// Global (x86 G bit): matches every tag, survives flushes that keep global entries.
pub const FLAG_GLOBAL: u8 = 1 << 2;
/// The entry was filled by a write, or a write has hit it since (the PTE's D bit is set).
pub const FLAG_DIRTY: u8 = 1 << 3;

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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Replacement {
    Lru,
    Plru,
    Fifo,
    Random,
}

/// Shape of one structure, as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct TlbGeometry {
    pub entries: u32,
    pub ways: u32,
    pub replacement: Replacement,
}

/// A set-associative structure. See the module comment.
pub struct Tlb {
    // (implementation-defined private fields)
}

impl Tlb {
    /// A new, empty structure. `entries` must be a multiple of `ways`, the set count a
    /// power of two, and for `Plru` the ways a power of two; otherwise `Err` with a message
    /// saying which and what is allowed. `entries == 0` is valid: a structure that never
    /// hits and never holds anything. `seed` feeds `Random` replacement.
    pub fn new(geometry: &TlbGeometry, seed: u64) -> Result<Tlb, String> {
        let _ = (geometry, seed);
        todo!()
    }

    pub fn geometry(&self) -> &TlbGeometry {
        todo!()
    }

    /// Look up the page of `size` that starts at `vpn` (already aligned) for address-space
    /// `tag`. A valid entry matches if vpn and size match and either its tag equals `tag` or
    /// it is global. On a hit the replacement state is updated (LRU recency, PLRU bits) and
    /// a copy of the entry is returned. Hot path: no allocation.
    #[inline]
    pub fn lookup(&mut self, vpn: Vpn, size: PageSize, tag: u16) -> Option<TlbEntry> {
        let _ = (vpn, size, tag);
        todo!()
    }

    /// As `lookup` but without touching replacement state.
    pub fn probe(&self, vpn: Vpn, size: PageSize, tag: u16) -> Option<TlbEntry> {
        let _ = (vpn, size, tag);
        todo!()
    }

    /// Set the dirty flag of a present entry (a write hit an entry filled by a read).
    pub fn mark_dirty(&mut self, vpn: Vpn, size: PageSize, tag: u16) {
        let _ = (vpn, size, tag);
        todo!()
    }

    /// Insert `entry`. If an entry with the same vpn, size and tag is present it is
    /// overwritten in place (and made most recently used) and `None` is returned. Otherwise
    /// an invalid way of the set is used if any, else a victim chosen by the replacement
    /// policy; the displaced valid entry is returned so that the caller can tell listeners.
    #[inline]
    pub fn insert(&mut self, entry: TlbEntry) -> Option<TlbEntry> {
        let _ = entry;
        todo!()
    }

    /// As `insert`, with service-level quotas (tag paper §4): `quota[sl]` is the number of
    /// entries service level `sl` is allotted (levels beyond the slice are unlimited).
    /// Among valid entries of the set: if the count of entries with `entry.sl` in the
    /// whole structure is at or over its quota, the victim is the least recently used
    /// entry of the set with that sl; otherwise the least recently used entry of the set
    /// whose sl is over its quota. When the set has no such entry, or a way is invalid,
    /// the normal rule applies.
    pub fn insert_with_quota(&mut self, entry: TlbEntry, quota: &[u32]) -> Option<TlbEntry> {
        let _ = (entry, quota);
        todo!()
    }

    /// Invalidate every entry (of any size) whose page contains 4 KiB page `vpn`; only
    /// those with tag `tag` if `Some` (global entries are also removed, as INVLPG does),
    /// every tag if `None`. Calls `removed` on each invalidated entry; returns how many.
    pub fn invalidate_page(
        &mut self,
        vpn: Vpn,
        tag: Option<u16>,
        removed: &mut dyn FnMut(&TlbEntry),
    ) -> u32 {
        let _ = (vpn, tag, removed);
        todo!()
    }

    /// Invalidate every non-global entry with `tag`; returns how many.
    pub fn invalidate_tag(&mut self, tag: u16, removed: &mut dyn FnMut(&TlbEntry)) -> u32 {
        let _ = (tag, removed);
        todo!()
    }

    /// Invalidate everything (or everything but global entries); returns how many.
    pub fn flush(&mut self, keep_global: bool, removed: &mut dyn FnMut(&TlbEntry)) -> u32 {
        let _ = (keep_global, removed);
        todo!()
    }

    /// Number of valid entries.
    pub fn occupancy(&self) -> u32 {
        todo!()
    }

    /// Number of valid entries with service level `sl`.
    pub fn occupancy_of_sl(&self, sl: u8) -> u32 {
        let _ = sl;
        todo!()
    }

    /// Every valid entry, in storage order (set by set, way by way).
    pub fn entries(&self) -> impl Iterator<Item = &TlbEntry> + '_ {
        std::iter::empty()
    }
}
