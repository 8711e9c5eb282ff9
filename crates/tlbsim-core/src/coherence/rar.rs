//! `rar`: Intel's Remote Action Request (Sapphire Rapids and later; Intel's RAR white paper
//! 341431 and the client datasheets' "Remote Action Request" section), as Rik van Riel's
//! Linux RFC (v1–v4, May–June 2025, `arch/x86/mm/rar.c`; not merged) uses it for TLB
//! flushes. Notes and sources: ../shared/research/modern_invalidation.md §4.
//!
//! Modelled:
//! - `smp_call_rar_many()`: the initiator takes a slot of the shared payload table, writes
//!   the payload (PCID, address, up to 63 pages) and each target's action byte, and signals
//!   the targets through the APIC (`APIC_DM_RAR`): per target, the IPI's send cost and
//!   delivery latency (`[costs]`). Each target's microcode performs the invalidation on
//!   arrival, even inside a kernel path with interrupts disabled (`RAR_CTRL_IGNORE_IF`): no
//!   interrupt entry, no handler, no ack on the shared flush datum, only `service_cycles`.
//!   The initiator spins on the targets' status bytes (the engine's
//!   [`Delivery::RemoteAction`]); the last read costs `status_cycles` after that target
//!   finished.
//! - Targets: the address space's `mm_cpumask` without the initiator, lazy CPUs included:
//!   microcode services them without waking a handler, and the RFC cannot reuse
//!   `should_flush_tlb()` because RAR flushes leave `tlb_gen` alone. A global request
//!   reaches every CPU.
//! - The invalidation is by PCID (INVPCID-style, type INVPG): the address space's entries go
//!   whatever the target runs; more than `RAR_INVLPG_MAX_PAGES` (63) pages becomes a
//!   whole-PCID invalidation; page-walk caches are dropped with the pages.
//!
//! Simplified: the RFC's global ASIDs (RAR builds on the INVLPGB series' global ASID space)
//! are the engine's per-CPU PCID slots, as in `linux-invlpgb`; a flushed slot counts as
//! caught up, so the RFC's extra context-switch flushes ("RAR flushes do not update the
//! tlb_gen") are not charged. Payload-slot contention (64 slots) is not modelled: each
//! initiator holds one slot while it waits, so it needs more than 64 initiators at once. No
//! public latency exists for the microcode's service or the status read: both are
//! parameters, marked assumed.
//!
//! `rar-no-wait` (`WAIT = false`) is unsafe on purpose: the initiator does not spin on the
//! status bytes and frees the request's frames and page tables at once, while the targets'
//! microcode has not yet applied it (`tlbsim fuzz` catches it: tests/unsafe_hw.rs).

use super::{Coherence, CoreView, Delivery, FlushPlan, FlushRequest, LocalFlush, OsView, Policy};
use crate::config::{Config, CostsConfig};
use crate::error::{Error, Result};
use crate::types::CoreId;

/// `RAR_INVLPG_MAX_PAGES`: the payload's 6-bit page count (rar.h).
pub const RAR_MAX_PAGES: u32 = 63;

crate::params! {
    /// `[coherence.rar]`: the costs of a Remote Action Request.
    pub struct RarParams {
        /// Cycles a target's microcode spends applying one request (no handler runs).
        /// Default 300: assumed (about one INVLPG per page of a short range plus the status
        /// write; no public measurement).
        pub service_cycles: u64 = 300,
        /// Cycles the initiator's read of the last target's status byte takes after that
        /// target wrote it: one cache-line transfer. Default 200: assumed (about 70 ns at
        /// 3 GHz, a cross-core line transfer on a Xeon; no RAR measurement).
        pub status_cycles: u64 = 200,
    }
}

/// `WAIT = false`: the deliberately unsafe `rar-no-wait` (the initiator does not wait for
/// the targets' status bytes before freeing what the request releases).
pub struct Rar<const WAIT: bool = true> {
    params: RarParams,
    requests: u64,
    whole_pcid: u64,
}

impl<const WAIT: bool> crate::registry::Plugin for Rar<WAIT> {
    type Params = RarParams;
}

impl<const WAIT: bool> Policy for Rar<WAIT> {
    fn build(_cfg: &Config, params: RarParams) -> Result<Self> {
        if params.service_cycles == 0 {
            let name = if WAIT { "rar" } else { "rar-no-wait" };
            return Err(Error::config(format!("coherence.{name}.service_cycles"), "must be at least 1 cycle"));
        }
        Ok(Rar { params, requests: 0, whole_pcid: 0 })
    }
}

impl<const WAIT: bool> Coherence for Rar<WAIT> {
    fn min_latency(&self, costs: &CostsConfig) -> Option<u64> {
        Some(costs.ipi_delivery_same_socket.min(costs.ipi_delivery_cross_socket).max(1))
    }

    fn plan(&mut self, view: &OsView<'_>, req: &FlushRequest, plan: &mut FlushPlan) {
        let me = req.initiator.0 as usize;
        for (c, &in_mask) in view.cpumask.iter().enumerate() {
            if c != me && (in_mask || req.global) {
                plan.push(CoreId(c as u32));
            }
        }
        if !plan.targets.is_empty() {
            self.requests += 1;
            self.whole_pcid += (req.full || req.pages.len() as u32 > RAR_MAX_PAGES) as u64;
        }
        plan.delivery = Some(Delivery::RemoteAction { service_cycles: self.params.service_cycles, status_cycles: self.params.status_cycles, wait: WAIT });
    }

    fn on_deliver(&mut self, core: CoreId, me: &CoreView, req: &FlushRequest, flush_ceiling: u32) -> LocalFlush {
        if req.global {
            return LocalFlush::Broadcast { final_only: false, all: true, ceiling: RAR_MAX_PAGES };
        }
        if core == req.initiator {
            // The initiator's own flush is flush_tlb_func(), Linux's local path.
            return super::linux_on_deliver(me, req, flush_ceiling);
        }
        LocalFlush::Broadcast { final_only: false, all: false, ceiling: RAR_MAX_PAGES }
    }

    fn on_switch(&mut self, _core: CoreId, slot_gen: Option<u64>, mm_gen: u64) -> bool {
        slot_gen != Some(mm_gen)
    }

    fn stats_json(&self) -> serde_json::Value {
        serde_json::json!({"rar_requests": self.requests, "whole_pcid_requests": self.whole_pcid})
    }
}
