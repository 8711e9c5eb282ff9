//! TLB structures.
//!
//! `set_assoc` is the one storage structure every TLB level, the page-walk caches and the
//! per-socket page-table-line cache are built from; `tmt` is the tag paper's Tag Manager
//! Table; `hierarchy` puts them together into one core's translation hardware;
//! `partition` is the `utility` controller of service-level quotas.

pub mod hierarchy;
pub mod partition;
pub mod set_assoc;
pub mod tmt;

pub use set_assoc::{Replacement, Tlb, TlbEntry, TlbGeometry};
