//! Frame recycling: when a shootdown is needed for the frames an unmap releases (docs/ARCHITECTURE.md
//! "Axes and their hooks", the FPR row). Linux flushes at release; a recycling scheme may
//! skip that flush for pages that stay within a trusted *recycling context* and send it
//! instead at the allocation that takes a page out of its context. It is its own axis,
//! independent of the coherence policy (who and how), the page-table backend and the
//! tagging mode: any combination runs.
//!
//! The engine calls [`Recycling`] at a handful of kernel events, never per access, so a
//! boxed trait object serves; [`build`] is the registry (one line per scheme). The engine
//! keeps the per-frame tracking word (`FrameWord::Tracking`) through the per-CPU
//! lists and the buddy allocator, merging two free buddies' words with the scheme's
//! [`Recycling::merge_words`] and copying a block's word to both halves on a split.
//!
//! | hook | when |
//! |---|---|
//! | [`Recycling::mapping_context`], [`Recycling::fork_context`] | an mmap (or a VMA copied by fork) gets its context (0 = none) |
//! | [`Recycling::choose_mmap_va`] | placing an mmap (a cursor against the ABA problem; MAP_FIXED) |
//! | [`Recycling::skip_unmap_flush`] | munmap: whether a page's remote flush may be skipped |
//! | [`Recycling::table_reuse_key`] | munmap: whether freed page-table pages may be kept for the same key instead of flushed |
//! | [`Recycling::on_alloc`], [`Recycling::on_free`] | a frame leaves or enters the allocator |
//! | [`Recycling::on_global_shootdown`] | a global flush request was sent |
//! | [`Recycling::reclaim_holds`] | reclaim meets a page: keep it until the min watermark |
//! | [`Recycling::permits_stale_use`] | the checker met a use of a stale entry whose address is unmapped |

pub mod fpr;

use crate::config::Config;
use crate::error::Result;
use crate::types::CoreId;
use crate::workload::program::MapSpec;

/// What an allocation asks the engine to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocAction {
    /// Nothing: the page stays in (or enters) its context, or a global flush since its
    /// free has already removed every stale translation.
    None,
    /// Send a global shootdown before the page is used (it leaves its recycling context).
    GlobalShootdown,
    /// The global shootdown the allocating core has in flight (`AllocUse::global_in_flight`)
    /// covers the page: it waits for that one.
    JoinGlobal,
}

/// Who allocates a frame, for what (passed to [`Recycling::on_alloc`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocUse {
    /// Recycling context of the mapping the frame is for (0: none: anonymous memory of a
    /// plain mapping, a page table, a page-cache page read for a plain mapping ...).
    pub context: u32,
    /// Sequence number (`on_global_shootdown`) of a global request the allocating core sent
    /// and is still waiting for; 0: none.
    pub global_in_flight: u64,
}

pub trait Recycling {
    /// Whether the scheme does anything (false: the engine skips every hook).
    fn enabled(&self) -> bool;

    /// Name under `totals` in stats.json.
    fn name(&self) -> &'static str;

    /// Context of a new mapping of process `pid` (fork family `family`); 0 = not recycled.
    fn mapping_context(&mut self, _pid: u32, _family: u32, _spec: &MapSpec) -> u32 {
        0
    }

    /// Context of a VMA fork copies from `parent` into `child` (its context was `context`).
    fn fork_context(&mut self, _context: u32, _parent: u32, _child: u32, _family: u32) -> u32 {
        0
    }

    /// The address of a new `len`-byte mapping of `pid`: `default_va` is Linux's top-down
    /// choice, `is_free(lo, hi)` says whether `[lo, hi)` is unmapped and not held.
    fn choose_mmap_va(&mut self, _pid: u32, _len: u64, default_va: u64, _is_free: &dyn Fn(u64, u64) -> bool) -> u64 {
        default_va
    }

    /// A MAP_FIXED mapping of `[va, va+len)` in `pid`: true = flush the range's
    /// translations on every core of the address space first (stale entries of an earlier
    /// mapping there may survive a skipped flush).
    fn fixed_mapping_needs_flush(&mut self, _pid: u32, _va: u64, _len: u64) -> bool {
        false
    }

    /// munmap of a page mapped by a VMA of context `context`, frame tracking word `word`:
    /// true = no remote flush for it (the initiator still invalidates its own entry).
    fn skip_unmap_flush(&mut self, _context: u32, _word: u64) -> bool {
        false
    }

    /// Key under which the page-table pages a munmap frees may be kept for reuse by
    /// process `pid` (fork family `family`) instead of being flushed and freed (0: never).
    fn table_reuse_key(&self, _pid: u32, _family: u32) -> u32 {
        0
    }

    /// A munmap kept `tables` freed page-table pages for reuse instead of flushing.
    fn on_tables_kept(&mut self, _tables: u64) {}

    /// A munmap skipped the remote flush of `skipped` pages and sent one for `flushed`.
    fn on_unmap(&mut self, _skipped: u64, _flushed: u64) {}

    /// A frame whose tracking word is `word` is allocated for `usage` on `core`.
    fn on_alloc(&mut self, _core: CoreId, _word: &mut u64, _usage: AllocUse) -> AllocAction {
        AllocAction::None
    }

    /// The context a page migration's target frame takes, the source's tracking word being
    /// `source` (the target takes the source's place; 0: a plain use).
    fn migration_context(&self, _source: u64) -> u32 {
        0
    }

    /// A frame goes back to the allocator (after any flush its unmap sent).
    fn on_free(&mut self, _word: &mut u64) {}

    /// The engine sends a global flush request (every core flushes everything): its
    /// sequence number, given back to `on_global_shootdown_done` once every core has
    /// flushed.
    fn on_global_shootdown(&mut self) -> u64 {
        0
    }

    /// Every core has flushed for the global request numbered `seq`.
    fn on_global_shootdown_done(&mut self, _seq: u64) {}

    /// The word of a free block merged from two free buddies whose words are `a` and `b`.
    fn merge_words(&self) -> fn(u64, u64) -> u64 {
        |a, _| a
    }

    /// Reclaim between its low and high watermark met a page with tracking word `word`:
    /// true = leave it on the LRU (it is evicted only at the min watermark, in one batch).
    fn reclaim_holds(&self, _word: &u64) -> bool {
        false
    }

    /// Reclaim at the min watermark evicted `pages` held pages in one batch, sending
    /// `shootdowns` flushes for them.
    fn on_batch_eviction(&mut self, _pages: u64, _shootdowns: u64) {}

    /// The checker met a use by `pid` (fork family `family`) of a stale translation whose
    /// virtual page is no longer mapped, to a frame whose tracking word is `word`: true if
    /// the scheme's guarantees allow it (a program that would have had a SIGSEGV may read
    /// its own recycled data; FPR §IV-B).
    fn permits_stale_use(&self, _pid: u32, _family: u32, _word: u64) -> bool {
        false
    }

    /// Bytes of tracking state per frame (for `tracking_bytes`).
    fn tracking_bytes_per_frame(&self) -> u64 {
        0
    }

    /// Statistics (`totals.<name>`).
    fn stats_json(&self) -> serde_json::Value {
        serde_json::json!({})
    }
}

/// No recycling: Linux's flush at release.
pub struct NoRecycling;

impl Recycling for NoRecycling {
    fn enabled(&self) -> bool {
        false
    }
    fn name(&self) -> &'static str {
        "recycling"
    }
}

impl crate::registry::Plugin for NoRecycling {
    type Params = crate::registry::NoParams;
}

impl Scheme for NoRecycling {
    fn build(_cfg: &Config, _params: crate::registry::NoParams) -> Result<NoRecycling> {
        Ok(NoRecycling)
    }
}

crate::registry! {
    what: "a recycling scheme", select: "os.recycling", table: "recycling", bound: Scheme;
    "none" => NoRecycling, "Linux: a released frame is flushed from every TLB that may hold it before it is reused";
    "fpr" => fpr::Fpr, "FPR, fast page recycling: frames recycled within their context skip the flush, paid when they leave it";
}

/// A registered scheme: its `[recycling.<name>]` parameters and its constructor.
pub trait Scheme: Recycling + crate::registry::Plugin + Sized + 'static {
    fn build(cfg: &Config, params: Self::Params) -> Result<Self>;
}

/// The scheme `os.recycling` names, with its `[recycling.<name>]` parameters. The engine
/// calls it at kernel events only, so a boxed trait object serves.
pub fn build(cfg: &Config) -> Result<Box<dyn Recycling>> {
    struct Build<'a>(&'a Config);
    impl Visit for Build<'_> {
        type Output = Result<Box<dyn Recycling>>;
        fn visit<T: Scheme>(self, name: &'static str) -> Self::Output {
            let params = crate::registry::parse::<T::Params>("recycling", name, self.0.recycling.get(name))?;
            Ok(Box::new(T::build(self.0, params)?))
        }
    }
    visit(&cfg.os.recycling, Build(cfg))?
}

/// Check `os.recycling` and every `[recycling.<name>]` table.
pub fn check(cfg: &Config) -> Result<()> {
    check_name(&cfg.os.recycling)?;
    check_params(&cfg.recycling)
}
