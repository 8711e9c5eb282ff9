//! TLB structures.
//!
//! `set_assoc` is the general storage structure; `level` holds a TLB level's entries and
//! `walk_cache` the page-walk caches' (each a `set_assoc` structure where the shape needs
//! one); `line_cache` holds lines (the page-table-line cache, model "cache"'s
//! caches); `tmt` is the tag paper's Tag Manager Table; `hierarchy` puts them together
//! into one core's translation hardware; `partition` is the `utility` controller of
//! service-level quotas.

pub mod hierarchy;
pub mod level;
pub mod line_cache;
pub mod partition;
pub mod set_assoc;
pub mod tmt;
pub mod walk_cache;

pub use level::TlbLevel;
pub use line_cache::LineCache;
pub use set_assoc::{Replacement, Tlb, TlbEntry, TlbGeometry};
pub use walk_cache::WalkCache;
