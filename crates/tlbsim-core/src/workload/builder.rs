//! Building OS-mode workloads ([`super::program::Workload`]): [`Builder`] collects groups,
//! files, processes, threads and programs; the helpers make the mappings every generator,
//! scenario test and fuzz case uses ([`anon`], [`file_map`] and the [`MapSpec`] modifiers)
//! and the loops of the IR ([`times`], [`forever`], [`touch_pages`]); the readers take the
//! flat `[workload]` keys with a generator's default (`threads`, `ops`, ...).

use super::program::{AccessMode, Backing, FileSpec, GroupSpec, MapSpec, Op, Pattern, ProcessSpec, ThreadSpec, Workload};
use crate::config::Config;
use crate::error::{Error, Result};

/// The page size the generators lay their regions out in.
pub const PAGE: u64 = 4096;

/// Collects groups, files, processes and programs; `finish` counts the slots.
#[derive(Default)]
pub struct Builder {
    pub w: Workload,
}

impl Builder {
    /// A memory group with a limit of `limit_pages` (0 = none); its index.
    pub fn group(&mut self, name: &str, limit_pages: u64) -> usize {
        self.w.groups.push(GroupSpec { name: name.into(), limit_pages });
        self.w.groups.len() - 1
    }

    /// A page-cache file of `pages` pages; its index.
    pub fn file(&mut self, name: &str, pages: u64) -> u32 {
        self.w.files.push(FileSpec { name: name.into(), pages });
        (self.w.files.len() - 1) as u32
    }

    /// A program; its index.
    pub fn program(&mut self, ops: Vec<Op>) -> usize {
        self.w.programs.push(ops);
        self.w.programs.len() - 1
    }

    /// A process in `group` with `regions` mapped at start; its index.
    pub fn process(&mut self, name: &str, group: usize, regions: Vec<MapSpec>) -> usize {
        self.w.processes.push(ProcessSpec { name: name.into(), group, regions, threads: Vec::new(), page_tables: Default::default() });
        self.w.processes.len() - 1
    }

    /// A thread of `process` running `program` (pinned to `core`, or placed by the scheduler).
    pub fn thread(&mut self, process: usize, name: &str, class: &str, core: Option<u32>, program: usize, daemon: bool) {
        self.w.processes[process].threads.push(ThreadSpec { name: name.into(), class: class.into(), core, program, daemon });
    }

    /// The workload, its slot count the most regions or slots any process or program uses.
    pub fn finish(mut self) -> Workload {
        let regions = self.w.processes.iter().map(|p| p.regions.len()).max().unwrap_or(0);
        let used = self.w.programs.iter().flatten().filter_map(Op::slot).map(|s| s + 1).max().unwrap_or(0);
        self.w.slots = regions.max(used);
        let pointers = self.w.programs.iter().flatten().filter_map(|op| match op {
            Op::Malloc { ptr, .. } | Op::Free { ptr } | Op::Realloc { ptr, .. } | Op::UsePtr { ptr, .. } => Some(ptr + 1),
            _ => None,
        });
        self.w.pointers = self.w.pointers.max(pointers.max().unwrap_or(0));
        self.w
    }
}

/// A private anonymous mapping of `bytes` (read-only unless `writable`), faulted in on use.
pub fn anon(bytes: u64, writable: bool) -> MapSpec {
    MapSpec { recyclable: false, fixed: false, bytes, backing: Backing::Anonymous, shared: false, populate: false, writable }
}

/// A mapping of `bytes` of file `file` from its page `offset_pages`, MAP_SHARED if `shared`
/// (else MAP_PRIVATE), read-only unless `writable`, faulted in on use.
pub fn file_map(file: u32, offset_pages: u64, bytes: u64, shared: bool, writable: bool) -> MapSpec {
    MapSpec { recyclable: false, fixed: false, bytes, backing: Backing::File { file, offset_pages }, shared, populate: false, writable }
}

impl MapSpec {
    /// This mapping with MAP_POPULATE (every page faulted in at mmap time).
    pub fn populated(self) -> MapSpec {
        self.with_populate(true)
    }

    /// This mapping with MAP_POPULATE set to `populate`.
    pub fn with_populate(mut self, populate: bool) -> MapSpec {
        self.populate = populate;
        self
    }

    /// This mapping with its frames recyclable within their context without a flush
    /// ([`MapSpec::recyclable`]: MAP_FPR).
    pub fn recyclable(mut self) -> MapSpec {
        self.recyclable = true;
        self
    }
}

/// One access to the first byte of each of the region's first `pages` pages.
pub fn touch_pages(slot: usize, mode: AccessMode, pages: u64) -> Op {
    Op::Access { slot, pattern: Pattern::Sequential, mode, count: pages, offset: 0, len: pages * PAGE, stride: PAGE }
}

/// `body` repeated `count` times, in the flat loop form (`Loop { count: 0 }` would be
/// forever, so zero repetitions are no operations at all).
pub fn times(count: u64, body: Vec<Op>) -> Vec<Op> {
    match count {
        0 => Vec::new(),
        1 => body,
        _ if body.is_empty() => Vec::new(),
        _ => {
            let mut v = Vec::with_capacity(body.len() + 1);
            v.push(Op::Loop { count, body: body.len() });
            v.extend(body);
            v
        }
    }
}

/// `body` repeated forever (daemon threads only).
pub fn forever(body: Vec<Op>) -> Vec<Op> {
    let mut v = vec![Op::Loop { count: 0, body: body.len() }];
    v.extend(body);
    v
}

/// A kind's `threads`, or one per core when it is 0.
pub(crate) fn threads_or_cores(cfg: &Config, threads: u32) -> u32 {
    if threads == 0 {
        cfg.cores()
    } else {
        threads
    }
}

/// A kind's `memory_limit_mib`, or half its working set (`region_bytes`), rounded up, when
/// it is 0.
pub(crate) fn memory_limit_mib_or_half(memory_limit_mib: u64, region_bytes: u64) -> Result<u64> {
    let mib = if memory_limit_mib == 0 { (region_bytes / 2).div_ceil(1 << 20).max(1) } else { memory_limit_mib };
    check_range("workload.memory_limit_mib", mib, 1, 1 << 30)?;
    Ok(mib)
}

/// `v` within `lo..=hi`, or a config error naming `key`.
pub(crate) fn check_range(key: &str, v: u64, lo: u64, hi: u64) -> Result<()> {
    if v < lo || v > hi {
        return Err(Error::config(key, format!("{v} is out of range: allowed {lo} to {hi}")));
    }
    Ok(())
}
