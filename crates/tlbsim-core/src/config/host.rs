//! The `host` preset: this machine's TLB geometry as CPUID reports it at run time.
//!
//! Intel: leaf 0x18 (deterministic address translation parameters). AMD: leaves
//! 0x8000_0005 / 0x8000_0006 (L1 and L2 TLB identifiers). Where CPUID has no answer
//! (other vendors, other architectures, a hypervisor that hides the leaves, as on this
//! workplace's KVM guests, whose leaf 0x18 reads all zeros), the built-in defaults stand;
//! those are this workplace's measured numbers (see `presets::builtin_machine`). CPUID can
//! also be wrong under virtualisation (here it has reported a 128-entry L2 DTLB where the
//! measured one holds 4096): `tlbsim calibrate` measures instead. The effective config
//! records the numbers actually used, so a `host` run can be repeated on any machine.

use serde_json::{json, Map, Value};

/// One TLB reported by CPUID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportedTlb {
    pub level: u8,
    /// 'd' data/load, 'i' instruction, 'u' unified
    pub kind: char,
    pub page_4k: bool,
    pub page_2m: bool,
    pub page_1g: bool,
    pub entries: u32,
    pub ways: u32,
}

pub fn host_tree() -> Value {
    let cores = std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1);
    let mut tlb = Map::new();
    for t in read_cpuid() {
        let name = match (t.level, t.kind) {
            (1, 'd') if t.page_4k => "l1d",
            (1, 'd') if t.page_2m => "l1d_2m",
            (1, 'd') if t.page_1g => "l1d_1g",
            (1, 'i') if t.page_4k => "l1i",
            (2, 'd' | 'u') if t.page_4k => "l2",
            _ => continue,
        };
        if tlb.contains_key(name) || t.entries == 0 {
            continue;
        }
        let (entries, ways) = fit_geometry(t.entries, t.ways);
        tlb.insert(name.into(), json!({"entries": entries, "ways": ways}));
    }
    json!({"sockets": 1, "cores_per_socket": cores, "tlb": tlb})
}

/// Make a reported geometry simulable: the set count must be a power of two, so a
/// structure whose sets are not (say 2048 entries, 12 ways) keeps its entries and takes the
/// nearest power-of-two set count below.
pub fn fit_geometry(entries: u32, ways: u32) -> (u32, u32) {
    let ways = ways.clamp(1, entries);
    if entries.is_multiple_of(ways) && (entries / ways).is_power_of_two() {
        return (entries, ways);
    }
    let sets = 1u32 << (31 - (entries / ways).max(1).leading_zeros());
    let ways = entries.div_ceil(sets);
    (sets * ways, ways)
}

#[cfg(target_arch = "x86_64")]
#[allow(unused_unsafe)]
fn cpuid(leaf: u32, sub: u32) -> [u32; 4] {
    // SAFETY: CPUID exists on every x86_64 processor.
    let r = unsafe { std::arch::x86_64::__cpuid_count(leaf, sub) };
    [r.eax, r.ebx, r.ecx, r.edx]
}

#[cfg(target_arch = "x86_64")]
pub fn read_cpuid() -> Vec<ReportedTlb> {
    let v = cpuid(0, 0);
    let mut vendor = [0u8; 12];
    vendor[0..4].copy_from_slice(&v[1].to_le_bytes());
    vendor[4..8].copy_from_slice(&v[3].to_le_bytes());
    vendor[8..12].copy_from_slice(&v[2].to_le_bytes());
    let max_leaf = v[0];
    match &vendor {
        b"GenuineIntel" if max_leaf >= 0x18 => intel_leaf_18(),
        b"AuthenticAMD" | b"HygonGenuine" => amd_leaves(),
        _ => Vec::new(),
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub fn read_cpuid() -> Vec<ReportedTlb> {
    Vec::new()
}

#[cfg(target_arch = "x86_64")]
fn intel_leaf_18() -> Vec<ReportedTlb> {
    let max_sub = cpuid(0x18, 0)[0];
    (0..=max_sub.min(64)).filter_map(|s| decode_intel_18(cpuid(0x18, s))).collect()
}

/// Decode one subleaf of Intel CPUID leaf 0x18 (SDM vol. 2A, CPUID).
pub fn decode_intel_18(r: [u32; 4]) -> Option<ReportedTlb> {
    let [_, ebx, ecx, edx] = r;
    let kind = match edx & 0x1f {
        1 | 4 => 'd',
        2 => 'i',
        3 => 'u',
        _ => return None,
    };
    let ways = if edx & (1 << 8) != 0 { 0 } else { ebx >> 16 };
    let sets = ecx;
    let entries = if ways == 0 { sets } else { ways * sets };
    Some(ReportedTlb {
        level: ((edx >> 5) & 7) as u8,
        kind,
        page_4k: ebx & 1 != 0,
        page_2m: ebx & 2 != 0,
        page_1g: ebx & 8 != 0,
        entries,
        ways: if ways == 0 { entries } else { ways },
    })
}

#[cfg(target_arch = "x86_64")]
fn amd_leaves() -> Vec<ReportedTlb> {
    if cpuid(0x8000_0000, 0)[0] < 0x8000_0006 {
        return Vec::new();
    }
    decode_amd(cpuid(0x8000_0005, 0), cpuid(0x8000_0006, 0))
}

/// Decode AMD leaves 0x8000_0005 (L1) and 0x8000_0006 (L2), 4 KiB and 2 MiB TLBs
/// (AMD APM vol. 3, CPUID).
pub fn decode_amd(l1: [u32; 4], l2: [u32; 4]) -> Vec<ReportedTlb> {
    let l1_ways = |a: u32, n: u32| if a == 0xff { n } else { a };
    let l2_ways = |code: u32, n: u32| match code {
        1 => 1,
        2 => 2,
        3 => 3,
        4 => 4,
        5 => 6,
        6 => 8,
        8 => 16,
        0xa => 32,
        0xb => 48,
        0xc => 64,
        0xd => 96,
        0xe => 128,
        0xf => n,
        _ => 0,
    };
    let mut out = Vec::new();
    let mut push = |level, kind, big: bool, entries: u32, ways: u32| {
        if entries > 0 && ways > 0 {
            out.push(ReportedTlb { level, kind, page_4k: !big, page_2m: big, page_1g: false, entries, ways });
        }
    };
    for (reg, big) in [(l1[1], false), (l1[0], true)] {
        let (de, da) = ((reg >> 16) & 0xff, reg >> 24);
        let (ie, ia) = (reg & 0xff, (reg >> 8) & 0xff);
        push(1, 'd', big, de, l1_ways(da, de));
        push(1, 'i', big, ie, l1_ways(ia, ie));
    }
    for (reg, big) in [(l2[1], false), (l2[0], true)] {
        let (de, da) = ((reg >> 16) & 0xfff, reg >> 28);
        push(2, 'd', big, de, l2_ways(da, de));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_keeps_valid_and_repairs_invalid() {
        assert_eq!(fit_geometry(96, 96), (96, 96));
        assert_eq!(fit_geometry(1536, 12), (1536, 12));
        assert_eq!(fit_geometry(2048, 12), (2048, 16));
    }

    #[test]
    fn amd_decoding() {
        // L1: 4K DTLB 96 entries fully assoc (0xff), ITLB 64 fully assoc.
        let l1 = [0, (0xff << 24) | (96 << 16) | (0xff << 8) | 64, 0, 0];
        // L2: 4K DTLB 2048 entries 16-way (code 8); the field is 12 bits wide.
        let l2 = [0, (8 << 28) | (2048 << 16), 0, 0];
        let t = decode_amd(l1, l2);
        assert!(t.contains(&ReportedTlb { level: 1, kind: 'd', page_4k: true, page_2m: false, page_1g: false, entries: 96, ways: 96 }));
        assert!(t.contains(&ReportedTlb { level: 2, kind: 'd', page_4k: true, page_2m: false, page_1g: false, entries: 2048, ways: 16 }));
    }

    #[test]
    fn intel_decoding() {
        // STLB: unified (3), level 2, 4K+2M, 12 ways, 128 sets.
        let r = [0, (12 << 16) | 0b11, 128, 3 | (2 << 5)];
        let t = decode_intel_18(r).unwrap();
        assert_eq!((t.level, t.kind, t.entries, t.ways, t.page_2m), (2, 'u', 1536, 12, true));
        assert_eq!(decode_intel_18([0, 0, 0, 0]), None);
    }
}
