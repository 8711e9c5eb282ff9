//! TLB structures.
//!
//! `set_assoc` is the one storage structure every TLB level and the page-walk caches are
//! built from; `line_cache` holds lines (the page-table-line cache, model "cache"'s
//! caches); `tmt` is the tag paper's Tag Manager Table; `hierarchy` puts them together
//! into one core's translation hardware; `partition` is the `utility` controller of
//! service-level quotas.

pub mod hierarchy;
pub mod line_cache;
pub mod partition;
pub mod set_assoc;
pub mod tmt;

pub use line_cache::LineCache;
pub use set_assoc::{Replacement, Tlb, TlbEntry, TlbGeometry};
