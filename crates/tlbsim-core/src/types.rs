//! Strong address and time types. Bare integers are easy to mix up (a VPN passed where a
//! PFN was meant compiles fine); these newtypes make such mistakes type errors.

use serde::{Deserialize, Serialize};

/// Bits of a 4 KiB page offset.
pub const PAGE_SHIFT: u32 = 12;
/// Entries in one x86-64 page-table page (4 KiB / 8 bytes).
pub const PT_ENTRIES: usize = 512;

/// Virtual page number, always in units of 4 KiB pages (a 2 MiB page's VPN is that of its
/// first 4 KiB page), so that one number space serves every page size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct Vpn(pub u64);

/// Physical frame number, in units of 4 KiB frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct Pfn(pub u64);

/// A core (hardware thread) of the simulated machine, numbered socket-major.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct CoreId(pub u32);

/// A NUMA node; in this model one node per socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct NodeId(pub u32);

/// Simulated processor cycles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct Cycles(pub u64);

impl std::ops::Add for Cycles {
    type Output = Cycles;
    #[inline]
    fn add(self, o: Cycles) -> Cycles {
        Cycles(self.0 + o.0)
    }
}
impl std::ops::AddAssign for Cycles {
    #[inline]
    fn add_assign(&mut self, o: Cycles) {
        self.0 += o.0
    }
}

impl Vpn {
    #[inline]
    pub fn of_va(va: u64) -> Vpn {
        Vpn(va >> PAGE_SHIFT)
    }
    /// The VPN of the first 4 KiB page of the `size` page that holds this one.
    #[inline]
    pub fn align(self, size: PageSize) -> Vpn {
        Vpn(self.0 & !(size.pages_4k() - 1))
    }
}

/// x86-64 page sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PageSize {
    Size4K = 0,
    Size2M = 1,
    Size1G = 2,
}

impl PageSize {
    pub const ALL: [PageSize; 3] = [PageSize::Size4K, PageSize::Size2M, PageSize::Size1G];
    /// How many 4 KiB pages one page of this size covers.
    #[inline]
    pub const fn pages_4k(self) -> u64 {
        match self {
            PageSize::Size4K => 1,
            PageSize::Size2M => 512,
            PageSize::Size1G => 512 * 512,
        }
    }
    /// log2 of `pages_4k`.
    #[inline]
    pub const fn shift_4k(self) -> u32 {
        match self {
            PageSize::Size4K => 0,
            PageSize::Size2M => 9,
            PageSize::Size1G => 18,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            PageSize::Size4K => "4k",
            PageSize::Size2M => "2m",
            PageSize::Size1G => "1g",
        }
    }
}

/// What a memory access does. `Modify` is one access that reads and writes (lackey's `M`):
/// one translation, with write permission needed and the dirty bit set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AccessKind {
    Fetch = 0,
    Load = 1,
    Store = 2,
    Modify = 3,
}

impl AccessKind {
    #[inline]
    pub fn is_write(self) -> bool {
        matches!(self, AccessKind::Store | AccessKind::Modify)
    }
    #[inline]
    pub fn is_fetch(self) -> bool {
        matches!(self, AccessKind::Fetch)
    }
}

// ----- Config vocabulary: values the config document names, used by the modules that
// implement them (so that config imports none of those modules). -----

/// Replacement policy of a TLB structure or cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Replacement {
    Lru,
    Plru,
    Fifo,
    Random,
}

/// Trace input formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceFormat {
    Lackey,
    Champsim,
    Native,
}

/// What `machine.tlb.partition_goal` asks of the `utility` controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PartitionGoal {
    #[default]
    MinMeanMptti,
    MpttiCeiling,
}

/// `machine.tlb.partition_controller`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PartitionController {
    /// No quotas, whatever `sl_quota_fraction` says (an unpartitioned TLB, for comparison).
    None,
    /// `sl_quota_fraction` for the whole run (tag paper §4).
    #[default]
    Static,
    Utility,
}

/// A set of sockets as a config writes it: `"all"`, `"none"` or a list (which sockets
/// hold a copy of the page tables: `[placement.mitosis] replicas`, a process's
/// `page_tables.replica_sockets`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum ReplicaSet {
    /// `"all"` or `"none"`.
    Named(String),
    /// A list of sockets.
    Sockets(Vec<u32>),
}

impl ReplicaSet {
    /// The mask as a sorted list of sockets (empty: none), checked against a machine of
    /// `sockets` sockets; errors name `key`.
    pub fn sockets(&self, key: &str, sockets: u32) -> crate::error::Result<Vec<u32>> {
        match self {
            ReplicaSet::Named(s) if s == "all" => Ok((0..sockets).collect()),
            ReplicaSet::Named(s) if s == "none" => Ok(Vec::new()),
            ReplicaSet::Named(s) => Err(crate::error::Error::config(key, format!("{s:?}: use \"all\", \"none\" or a list of sockets"))),
            ReplicaSet::Sockets(list) => {
                let mut v = list.clone();
                v.sort_unstable();
                v.dedup();
                if let Some(&bad) = v.iter().find(|&&s| s >= sockets) {
                    return Err(crate::error::Error::config(
                        key,
                        format!("socket {bad} does not exist (the machine has {sockets} sockets, 0..{})", sockets - 1),
                    ));
                }
                Ok(v)
            }
        }
    }
}
