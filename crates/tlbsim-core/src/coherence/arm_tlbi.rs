//! `arm-tlbi`: arm64 Linux's TLB maintenance by broadcast TLBI (arch/arm64/include/asm/
//! tlbflush.h; notes and sources in ../shared/research/modern_invalidation.md §5).
//!
//! Modelled:
//! - No IPI, ever (Barry Song, commit 6bfef171d0d7: "tlb shootdown is done by hardware").
//!   A flush is `DSB ISHST; TLBI …IS per page; DSB ISH`: each inner-shareable TLBI is a DVM
//!   message to every core of the machine, whatever it runs (the engine's
//!   [`Delivery::Broadcast`]: every core, the initiator included, drops the pages of the
//!   address space's ASID), and the final DSB waits until every core has completed them.
//! - `__flush_tlb_range`: one `TLBI VAE1IS` per page, or `VALE1IS` (last level only: the
//!   page-walk caches survive) when no page table is freed (`tlb_flush()`: `last_level =
//!   !tlb->freed_tables`); over `MAX_DVM_OPS` = `PTRS_PER_PTE` = 512 pages, one
//!   `TLBI ASIDE1IS` for the whole address space (`flush_tlb_mm`). A global request is
//!   `TLBI VMALLE1IS`.
//! - The DSB's wait grows with the machine: the DVM messages reach every core's TLB over
//!   the mesh ("which is where the real bottleneck lies", Oliver Upton, 2023). It is
//!   `dsb_base_cycles + dsb_per_core_cycles × cores`; no public measurement exists, so
//!   both are parameters with stated, assumed defaults (sweep them).
//! - Reclaim's batched flush (`arch_tlbbatch_add_pending` / `arch_tlbbatch_flush`, commit
//!   43b3dfdd0455, Linux 6.5): the batch's TLBIs are issued without a DSB and one `DSB ISH`
//!   ends the batch. `batched_reclaim = false` is the kernel before it: every page's
//!   `ptep_clear_flush` waits for its own DSB.
//!
//! Simplified: arm64's ASIDs are global per process; the engine's per-CPU PCID slots stand
//! in for them (as in `linux-invlpgb`), so a core that evicted the process's slot flushes
//! when it loads it again. The range TLBI of FEAT_TLBIRANGE (`RVAE1IS`) is not modelled:
//! every page is its own TLBI, as on cores without it. The KPTI user TLBI
//! (`__tlbi_user`) is not issued: the model has no kernel/user page-table split.
//!
//! `arm-tlbi-final-only` (`SAFE = false`) is unsafe on purpose: `VALE1IS` (last level) even
//! when page tables are freed, so walk-cache entries keep pointing to the freed tables
//! (`tlbsim fuzz` catches it: tests/unsafe_hw.rs).

use super::{Coherence, CoreView, Delivery, FlushPlan, FlushReason, FlushRequest, LocalFlush, OsView, Policy};
use crate::config::{Config, CostsConfig};
use crate::error::{Error, Result};
use crate::types::CoreId;

/// `MAX_DVM_OPS` = `PTRS_PER_PTE` with 4 KiB pages: above it, one TLBI for the ASID.
pub const MAX_DVM_OPS: u32 = 512;

crate::params! {
    /// `[coherence.arm-tlbi]`: the costs of broadcast TLB maintenance.
    pub struct ArmTlbiParams {
        /// Cycles the initiator spends issuing one TLBI …IS. Default 30: assumed (no public measurement).
        pub tlbi_cycles: u64 = 30,
        /// Cycles from issue until every core has applied a TLBI. Default 600 (0.2 us at 3 GHz): assumed.
        pub dvm_latency_cycles: u64 = 600,
        /// The DSB ISH's fixed cost after the last TLBI completed. Default 100: assumed.
        pub dsb_base_cycles: u64 = 100,
        /// What each core of the machine adds to the DSB ISH's wait (its DVM message and
        /// completion over the mesh). Default 20: assumed (no public measurement; sweep it).
        pub dsb_per_core_cycles: u64 = 20,
        /// Reclaim's flush is one DSB for the whole batch (Linux 6.5+); false: one per page.
        pub batched_reclaim: bool = true,
    }
}

/// `SAFE = false`: the deliberately unsafe `arm-tlbi-final-only` (last-level TLBIs even
/// when page tables are freed).
pub struct ArmTlbi<const SAFE: bool = true> {
    params: ArmTlbiParams,
    cores: u64,
    flushes: u64,
    tlbis: u64,
    dsbs: u64,
    whole_asid: u64,
}

impl<const SAFE: bool> crate::registry::Plugin for ArmTlbi<SAFE> {
    type Params = ArmTlbiParams;
}

impl<const SAFE: bool> Policy for ArmTlbi<SAFE> {
    fn build(cfg: &Config, params: ArmTlbiParams) -> Result<Self> {
        if params.dvm_latency_cycles == 0 {
            let name = if SAFE { "arm-tlbi" } else { "arm-tlbi-final-only" };
            return Err(Error::config(format!("coherence.{name}.dvm_latency_cycles"), "must be at least 1 cycle"));
        }
        Ok(ArmTlbi { params, cores: cfg.cores() as u64, flushes: 0, tlbis: 0, dsbs: 0, whole_asid: 0 })
    }
}

impl<const SAFE: bool> ArmTlbi<SAFE> {
    fn dsb_cycles(&self) -> u64 {
        self.params.dsb_base_cycles + self.params.dsb_per_core_cycles * self.cores
    }
}

impl<const SAFE: bool> Coherence for ArmTlbi<SAFE> {
    fn min_latency(&self, _costs: &CostsConfig) -> Option<u64> {
        Some(self.params.dvm_latency_cycles)
    }

    fn plan(&mut self, view: &OsView<'_>, req: &FlushRequest, plan: &mut FlushPlan) {
        let pages = req.pages.len() as u64;
        let tlbis = if req.global || req.full || pages > MAX_DVM_OPS as u64 { 1 } else { pages.max(1) };
        // Without the batched reclaim flush, each page of the batch was its own
        // ptep_clear_flush: TLBI then DSB.
        let dsbs = if req.reason == FlushReason::Reclaim && !self.params.batched_reclaim { tlbis } else { 1 };
        self.flushes += 1;
        self.tlbis += tlbis;
        self.dsbs += dsbs;
        self.whole_asid += (tlbis == 1 && pages > 1) as u64;
        for c in 0..view.cores.len() {
            plan.push(CoreId(c as u32));
        }
        plan.delivery = Some(Delivery::Broadcast {
            issue_cycles: self.params.tlbi_cycles * tlbis,
            latency: self.params.dvm_latency_cycles,
            sync_cycles: self.dsb_cycles() * dsbs,
            tlbsync: true,
        });
    }

    fn on_deliver(&mut self, _core: CoreId, _me: &CoreView, req: &FlushRequest, _flush_ceiling: u32) -> LocalFlush {
        LocalFlush::Broadcast { final_only: !SAFE || !req.freed_tables, all: req.global, ceiling: MAX_DVM_OPS }
    }

    fn on_switch(&mut self, _core: CoreId, slot_gen: Option<u64>, mm_gen: u64) -> bool {
        slot_gen != Some(mm_gen)
    }

    fn stats_json(&self) -> serde_json::Value {
        serde_json::json!({"flushes": self.flushes, "tlbis": self.tlbis, "dsbs": self.dsbs, "whole_asid_flushes": self.whole_asid})
    }
}
