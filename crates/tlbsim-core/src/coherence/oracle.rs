//! `oracle`: the lower bound for every technique (docs/ARCHITECTURE.md "Axes and their hooks"). Exactly the cores whose
//! TLBs hold a translation the change made stale are reached, instantly and at no cost,
//! and they invalidate exactly the changed pages. No context-switch flush is ever needed
//! for coherence (stale entries were removed when they became stale).
//!
//! Not a real mechanism: it uses the simulator's knowledge of every TLB's contents.

use super::{Coherence, CoreView, Delivery, FlushPlan, FlushRequest, LocalFlush, NoParams, OsView, Policy};
use crate::config::Config;
use crate::error::Result;
use crate::types::CoreId;

pub struct Oracle;

impl crate::registry::Plugin for Oracle {
    type Params = NoParams;
}

impl Policy for Oracle {
    fn build(_cfg: &Config, _params: NoParams) -> Result<Oracle> {
        Ok(Oracle)
    }
}

impl Coherence for Oracle {
    fn wants_holders(&self) -> bool {
        true
    }

    fn plan(&mut self, view: &OsView<'_>, _req: &FlushRequest, plan: &mut FlushPlan) {
        plan.delivery = Some(Delivery::Free);
        // Every holder, the initiator included: it may hold the address space's entries
        // under a PCID while running another one (reclaim, exit).
        for (i, &holds) in view.holders.iter().enumerate() {
            if holds {
                plan.targets.push(CoreId(i as u32));
            }
        }
    }

    fn on_deliver(&mut self, _core: CoreId, _me: &CoreView, req: &FlushRequest, _ceiling: u32) -> LocalFlush {
        if req.global {
            return LocalFlush::Full;
        }
        LocalFlush::Pages
    }

    fn on_switch(&mut self, _core: CoreId, _slot_gen: Option<u64>, _mm_gen: u64) -> bool {
        false
    }
}
