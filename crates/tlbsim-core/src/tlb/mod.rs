//! TLB structures.
//!
//! `set_assoc` is the one storage structure every TLB level is built from; `walk_cache`
//! holds the page-walk caches' entries (a `set_assoc` structure where the shape needs
//! one); `line_cache` holds lines (the page-table-line cache, model "cache"'s
//! caches); `tmt` is the tag paper's Tag Manager Table; `hierarchy` puts them together
//! into one core's translation hardware; `partition` is the `utility` controller of
//! service-level quotas.

pub mod hierarchy;
pub mod line_cache;
pub mod partition;
pub mod set_assoc;
pub mod tmt;
pub mod walk_cache;

pub use line_cache::LineCache;
pub use set_assoc::{Replacement, Tlb, TlbEntry, TlbGeometry};
pub use walk_cache::WalkCache;
