//! One core's TLB hierarchy: lookup order, fills, and what each tagging mode does on a CR3
//! write (tag paper §4 for the CR3 tags).

use serde_json::json;
use std::path::Path;
use tlbsim_core::config::Config;
use tlbsim_core::tlb::hierarchy::{FlushCause, Found, NoTlbListener, TlbHierarchy, TlbListener, L1D_4K, L2};
use tlbsim_core::tlb::set_assoc::FLAG_GLOBAL;
use tlbsim_core::tlb::TlbEntry;
use tlbsim_core::types::{AccessKind, CoreId, PageSize, Pfn, Vpn};

fn hierarchy(tagging: &str) -> TlbHierarchy {
    let cfg = Config::resolve(json!({"machine": {"tlb": {"tagging": tagging}}}), &[], Path::new(".")).unwrap();
    TlbHierarchy::new(CoreId(0), &cfg.machine.tlb, 1).unwrap()
}

fn fill(h: &mut TlbHierarchy, vpn: u64, flags: u8) {
    let e = h.entry(Vpn(vpn), Pfn(vpn + 1000), PageSize::Size4K, flags);
    h.fill(e, AccessKind::Load, &mut NoTlbListener);
}

fn hit(h: &mut TlbHierarchy, vpn: u64) -> bool {
    !matches!(h.lookup(Vpn(vpn), AccessKind::Load, &mut NoTlbListener).0, Found::Miss)
}

#[test]
fn l2_hit_refills_l1() {
    let mut h = hierarchy("pcid");
    fill(&mut h, 5, 0);
    h.structs[L1D_4K].flush(false, &mut |_| {});
    let (found, _) = h.lookup(Vpn(5), AccessKind::Load, &mut NoTlbListener);
    assert!(matches!(found, Found::L2(e) if e.pfn == Pfn(1005)));
    assert!(matches!(h.lookup(Vpn(5), AccessKind::Load, &mut NoTlbListener).0, Found::L1(_)));
    assert_eq!(h.counters[L2].hits, 1);
}

#[test]
fn untagged_cr3_write_flushes_all_but_global() {
    let mut h = hierarchy("none");
    h.write_cr3(0x1000, 1, 0, &mut NoTlbListener);
    fill(&mut h, 1, 0);
    fill(&mut h, 2, FLAG_GLOBAL);
    assert_eq!(h.write_cr3(0x2000, 2, 0, &mut NoTlbListener), Some(FlushCause::ContextSwitch));
    assert!(!hit(&mut h, 1));
    assert!(hit(&mut h, 2), "global entries survive a CR3 write");
}

#[test]
fn pcid_keeps_each_address_space_apart() {
    let mut h = hierarchy("pcid");
    h.write_cr3(0x1000, 1, 0, &mut NoTlbListener);
    fill(&mut h, 7, 0);
    assert_eq!(h.write_cr3(0x2000, 2, 0, &mut NoTlbListener), None);
    assert!(!hit(&mut h, 7), "another PCID must not see the entry");
    h.write_cr3(0x1000, 1, 0, &mut NoTlbListener);
    assert!(hit(&mut h, 7), "the entry survived the switch away and back");
}

#[test]
fn domain_tags_survive_vm_switches_only() {
    let mut h = hierarchy("domain");
    h.write_cr3(0x1000, 0, 1, &mut NoTlbListener);
    fill(&mut h, 3, 0);
    // Another VM: new tag, no flush; back again: still there.
    assert_eq!(h.write_cr3(0x9000, 0, 2, &mut NoTlbListener), None);
    assert!(!hit(&mut h, 3));
    h.write_cr3(0x1000, 0, 1, &mut NoTlbListener);
    assert!(hit(&mut h, 3));
    // Another process of the same VM: flush.
    assert_eq!(h.write_cr3(0x2000, 0, 1, &mut NoTlbListener), Some(FlushCause::ContextSwitch));
    assert!(!hit(&mut h, 3));
}

#[test]
fn cr3_tags_forced_and_capacity_flushes() {
    let mut h = hierarchy("cr3"); // 4-entry TMT by default (tag paper §5)
    assert_eq!(h.write_cr3(0x1000, 0, 1, &mut NoTlbListener), None);
    fill(&mut h, 10, 0);
    // Intra-VM and inter-VM switches to new contexts: no flush while the TMT has room.
    for (cr3, vm) in [(0x2000, 1), (0x3000, 2), (0x4000, 2)] {
        assert_eq!(h.write_cr3(cr3, 0, vm, &mut NoTlbListener), None);
    }
    assert_eq!(h.write_cr3(0x1000, 0, 1, &mut NoTlbListener), None);
    assert!(hit(&mut h, 10), "CR3 tags keep the first context's entry across four switches");
    // Same CR3 again: forced flush.
    assert_eq!(h.write_cr3(0x1000, 0, 1, &mut NoTlbListener), Some(FlushCause::TagForced));
    assert!(!hit(&mut h, 10));
    // Five distinct contexts in a 4-entry TMT: a capacity flush.
    fill(&mut h, 11, 0);
    let mut causes = vec![];
    for cr3 in [0x2000, 0x3000, 0x4000, 0x5000] {
        causes.push(h.write_cr3(cr3, 0, 1, &mut NoTlbListener));
    }
    assert!(causes.contains(&Some(FlushCause::TagCapacity)), "{causes:?}");
}

struct Count(u32, u32);
impl TlbListener for Count {
    fn inserted(&mut self, _: CoreId, _: usize, _: &TlbEntry) {
        self.0 += 1;
    }
    fn evicted(&mut self, _: CoreId, _: usize, _: &TlbEntry) {
        self.1 += 1;
    }
}

#[test]
fn listener_sees_every_insert_and_eviction() {
    let cfg = Config::resolve(json!({"machine": {"tlb": {"l1d": {"entries": 4, "ways": 4}, "l2": {"entries": 0}}}}), &[], Path::new(".")).unwrap();
    let mut h = TlbHierarchy::new(CoreId(0), &cfg.machine.tlb, 1).unwrap();
    let mut c = Count(0, 0);
    for v in 0..10 {
        let e = h.entry(Vpn(v), Pfn(v), PageSize::Size4K, 0);
        h.fill(e, AccessKind::Load, &mut c);
    }
    assert_eq!((c.0, c.1), (10, 6));
    assert_eq!(h.counters[L1D_4K].evictions, 6);
    h.flush_all(false, &mut c);
    assert_eq!(c.1, 10, "a flush reports the 4 entries it removed");
}
