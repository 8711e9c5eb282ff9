//! `template`: the smallest complete coherence policy, to copy when you start a new one
//! (docs/NEW_POLICY.md walks from here to `tlbsim fuzz` and a sweep against `linux` and
//! `oracle`). It takes Linux's decisions, spelled out, and counts what it saw, so that
//! each hook shows where its call comes from. It is not registered: copy this file to
//! `coherence/<yours>.rs`, rename the type, and add one line to the `policies!` registry
//! in `coherence/mod.rs`.
//!
//! Every hook has a default in the `Coherence` trait; delete the ones you do not need (the
//! per-access ones — `on_tlb_insert`, `on_tlb_evict`, `on_accessed_set` — cost nothing when
//! left at their defaults, because the engine is monomorphised for your type).

use super::{linux_on_deliver, Coherence, CoreView, Cr3Load, Delivery, Effects, FlushPlan, FlushRequest, FullFlushCause, LocalFlush, OsView, Policy};
use crate::config::Config;
use crate::error::Result;
use crate::tlb::TlbEntry;
use crate::types::{CoreId, Pfn};

crate::params! {
    /// `[coherence.<name>]`: every parameter with its default and where the default comes from.
    /// Unknown keys are errors that name the key (`deny_unknown_fields`).
    pub struct TemplateParams {
        /// Linux's `tlb_single_page_flush_ceiling` is `os.flush_ceiling`; a policy of its own
        /// would put its knobs here (this one: whether to skip lazy cores, as Linux does).
        pub skip_lazy_cores: bool = true,
    }
}

#[derive(Default)]
pub struct Template {
    params: TemplateParams,
    /// Counted for `stats_json` (stats.json `totals.coherence`).
    requests: u64,
    targets: u64,
    tlb_inserts: u64,
    full_flushes: u64,
}

impl crate::registry::Plugin for Template {
    type Params = TemplateParams;
}

impl Policy for Template {
    /// Built once per run, from the resolved config and this policy's parameters.
    fn build(_cfg: &Config, params: TemplateParams) -> Result<Self> {
        Ok(Template { params, ..Default::default() })
    }
}

impl Coherence for Template {
    /// A page-table change of `req.mm` needs coherence: choose the cores to reach and how.
    /// `view.cores` is every core's kernel state, `view.cpumask` the address space's
    /// `mm_cpumask`. Push targets with `plan.push(core)` (or `push_pages(core, pages)` for a
    /// subset), and set the delivery path: `Ipi` (interrupts, the initiator waits for acks),
    /// `Message { .. }` (hardware, no interrupt), `Deferred` (at the target's next tick or
    /// context switch), `Free` (instant, at no cost: only for bounds like the oracle).
    fn plan(&mut self, view: &OsView<'_>, req: &FlushRequest, plan: &mut FlushPlan) {
        self.requests += 1;
        for (i, c) in view.cores.iter().enumerate() {
            let core = CoreId(i as u32);
            if core == req.initiator || !(req.global || view.cpumask[i]) {
                continue;
            }
            // A lazy core (idle, mm borrowed) can be skipped: it catches up at its next
            // switch (`on_switch` below sees its tag behind). Freed page tables must reach
            // it anyway (its page-walk caches may point into them).
            let skip = self.params.skip_lazy_cores && c.lazy && !req.freed_tables;
            if !skip && (req.global || req.freed_tables || c.loaded_mm == Some(req.mm)) {
                plan.push(core);
            }
        }
        self.targets += plan.targets.len() as u64;
        plan.delivery = Some(Delivery::Ipi);
    }

    /// The request reached `core` (also called for the initiator itself): nothing, the
    /// pages, a full flush, leave the mask (the core runs another mm now), or drop a
    /// borrowed mm (a lazy core).
    fn on_deliver(&mut self, _core: CoreId, me: &CoreView, req: &FlushRequest, flush_ceiling: u32) -> LocalFlush {
        linux_on_deliver(me, req, flush_ceiling)
    }

    /// `core` loads an address space into a tag that last held it at generation
    /// `slot_gen` (`None`: it held another one): flush the tag unless it has caught up.
    fn on_switch(&mut self, _core: CoreId, slot_gen: Option<u64>, mm_gen: u64) -> bool {
        slot_gen != Some(mm_gen)
    }

    /// Per access (every TLB fill of every core): keep it cheap, or delete it.
    fn on_tlb_insert(&mut self, _core: CoreId, _structure: usize, _entry: &TlbEntry, _fx: &mut Effects) {
        self.tlb_inserts += 1;
    }

    /// A core flushed an address space (`Some(mm)`) or everything, and why.
    fn on_full_flush(&mut self, _core: CoreId, _mm: Option<u32>, _cause: FullFlushCause, _fx: &mut Effects) {
        self.full_flushes += 1;
    }

    /// Every CR3 write: from/to address space, the tag, whether old entries were kept.
    fn on_cr3_load(&mut self, _core: CoreId, _load: &Cr3Load, _fx: &mut Effects) {}

    /// A data frame leaves the allocator; its `technique_word` survived the free lists.
    fn on_frame_alloc(&mut self, _core: CoreId, _pfn: Pfn, _technique_word: &mut u64, _usage: super::FrameUse, _fx: &mut Effects) {}

    /// What stats.json shows under `totals.coherence`.
    fn stats_json(&self) -> serde_json::Value {
        serde_json::json!({
            "requests": self.requests,
            "targets": self.targets,
            "tlb_inserts": self.tlb_inserts,
            "full_flushes": self.full_flushes,
        })
    }
}
