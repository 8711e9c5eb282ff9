//! `none`: never flushes a remote TLB. Deliberately unsafe: it exists so that tests prove
//! the stale-translation checker catches what it must. The initiator still flushes its
//! own TLB (as every kernel does for the core that changed the page table), and context
//! switches flush only where the hardware forces it (untagged TLBs).

use super::{Coherence, CoreView, Delivery, FlushPlan, FlushRequest, LocalFlush, NoParams, OsView, Policy};
use crate::config::Config;
use crate::error::Result;
use crate::types::CoreId;

pub struct NoRemoteFlush;

impl crate::registry::Plugin for NoRemoteFlush {
    type Params = NoParams;
}

impl Policy for NoRemoteFlush {
    fn build(_cfg: &Config, _params: NoParams) -> Result<NoRemoteFlush> {
        Ok(NoRemoteFlush)
    }
}

impl Coherence for NoRemoteFlush {
    fn plan(&mut self, _view: &OsView<'_>, _req: &FlushRequest, plan: &mut FlushPlan) {
        plan.delivery = Some(Delivery::Ipi);
    }

    fn on_deliver(&mut self, _core: CoreId, _me: &CoreView, req: &FlushRequest, flush_ceiling: u32) -> LocalFlush {
        if req.full || req.pages.len() as u64 > flush_ceiling as u64 {
            LocalFlush::Full
        } else {
            LocalFlush::Pages
        }
    }

    fn on_switch(&mut self, _core: CoreId, _slot_gen: Option<u64>, _mm_gen: u64) -> bool {
        false
    }
}
