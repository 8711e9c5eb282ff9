//! `linux`: the x86 shootdown protocol of Linux 6.x (arch/x86/mm/tlb.c, mm/mmu_gather.c;
//! docs/LINUX_BASELINE.md; DiDi §V-A; ABIS §2.3).
//!
//! Modelled: targets are the CPUs in the address space's `mm_cpumask` other than the
//! initiator; a CPU in lazy-TLB mode (idle, or a kernel thread borrowing the mm) is
//! skipped and catches up when it switches back (its PCID slot's generation is behind),
//! except when page-table pages are freed, when every CPU in the mask is sent the IPI
//! (`native_flush_tlb_multi`'s `freed_tables` case); a CPU that has since loaded another
//! mm is skipped (it flushes at its next switch to this mm) unless tables are freed, and
//! when reached it leaves the mask; a target whose PCID slot already caught up with the
//! request's generation does nothing; a request of more than `tlb_single_page_flush_ceiling`
//! pages (33) is a full flush; a request that is not the next generation for a CPU is a full
//! flush there. Delivery is by synchronous IPI (the OS model times it).
//!
//! Simplified: the once-a-second `mm_cpumask` trim is not modelled (CPUs leave the mask when
//! a flush reaches them after they switched away); the paravirtual remote flush of KVM
//! guests (docs/LINUX_BASELINE.md) is not modelled.

use super::{linux_on_deliver, linux_targets, Coherence, CoreView, Delivery, FlushPlan, FlushRequest, LocalFlush, NoParams, OsView, Policy};
use crate::config::Config;
use crate::error::Result;
use crate::types::CoreId;

pub struct Linux;

impl crate::registry::Plugin for Linux {
    type Params = NoParams;
}

impl Policy for Linux {
    fn build(_cfg: &Config, _params: NoParams) -> Result<Linux> {
        Ok(Linux)
    }
}

impl Coherence for Linux {
    fn plan(&mut self, view: &OsView<'_>, req: &FlushRequest, plan: &mut FlushPlan) {
        plan.delivery = Some(Delivery::Ipi);
        // should_flush_tlb(): lazy CPUs and CPUs running another mm are skipped, unless
        // page tables are being freed (then on_each_cpu_mask to the whole mask).
        linux_targets(view, req, plan);
    }

    fn on_deliver(&mut self, _core: CoreId, me: &CoreView, req: &FlushRequest, flush_ceiling: u32) -> LocalFlush {
        linux_on_deliver(me, req, flush_ceiling)
    }

    fn on_switch(&mut self, _core: CoreId, slot_gen: Option<u64>, mm_gen: u64) -> bool {
        // switch_mm_irqs_off(): reuse the PCID slot without a flush only if it holds this
        // mm at its current generation.
        slot_gen != Some(mm_gen)
    }
}
