//! `workload.kind = "synthetic"`: a generated access stream per thread (random, sequential
//! or strided over a region), with instruction fetches from a small code loop.
//!
//! Deterministic: each thread draws from its own generator seeded by (seed, thread).

use crate::config::Config;
use crate::error::{Error, Result};
use crate::rng::SplitMix64;
use crate::trace::{TraceError, TraceEvent, TraceSource};
use crate::types::AccessKind;

/// Where synthetic data regions start (a typical x86-64 mmap area).
pub const DATA_BASE: u64 = 0x7f00_0000_0000;
/// Where the code loop lives (a typical non-PIE text address).
pub const CODE_BASE: u64 = 0x40_0000;
/// Bytes of code the loop executes, 4 pages.
const CODE_BYTES: u64 = 16 << 10;

crate::params! {
    /// `workload.kind = "synthetic"`.
    pub struct SyntheticParams {
        /// Threads (pinned to cores 0..threads), sharing one address space; 0 = one per core.
        pub threads: u32 = 0,
        /// `random`, `sequential` (8-byte steps) or `strided` (`stride`-byte steps).
        pub pattern: String = "random".into(),
        /// Bytes of the region each thread accesses.
        pub region_bytes: u64 = 64 << 20,
        /// Accesses per thread.
        pub accesses: u64 = 2_000_000,
        /// Bytes between consecutive accesses of a strided pass.
        pub stride: u64 = 64,
        /// Fraction of accesses that are stores.
        pub write_fraction: f64 = 0.3,
        /// Instructions per memory access (the rest are non-memory instructions).
        pub instructions_per_access: u32 = 3,
        /// Threads share one region (true) or each has its own (false).
        pub shared_region: bool = true,
    }
}

impl SyntheticParams {
    /// The threads that run (`threads = 0`: one per core).
    pub fn thread_count(&self, cfg: &Config) -> u32 {
        if self.threads == 0 {
            cfg.cores()
        } else {
            self.threads
        }
    }

    pub(crate) fn check(&self, cfg: &Config) -> Result<()> {
        let range = crate::workload::builder::check_range;
        range("workload.threads", self.threads as u64, 0, cfg.cores() as u64).map_err(|e| match e {
            Error::Config { key, message } => Error::Config { key, message: format!("{message} (one thread per core)") },
            e => e,
        })?;
        match self.pattern.as_str() {
            "random" | "sequential" | "strided" => {}
            p => return Err(Error::config("workload.pattern", format!("{p:?}: use \"random\", \"sequential\" or \"strided\""))),
        }
        range("workload.region_bytes", self.region_bytes, 4096, 1 << 47)?;
        range("workload.stride", self.stride, 1, 1 << 40)?;
        if !(0.0..=1.0).contains(&self.write_fraction) {
            return Err(Error::config("workload.write_fraction", format!("{}: must be 0.0 to 1.0", self.write_fraction)));
        }
        range("workload.instructions_per_access", self.instructions_per_access as u64, 1, 1 << 20)
    }
}

#[derive(Clone, Copy)]
enum Pattern {
    Random,
    Sequential,
}

pub struct Synthetic {
    rng: SplitMix64,
    pattern: Pattern,
    base: u64,
    /// Region size rounded down to the 8-byte access granularity.
    words: u64,
    stride: u64,
    offset: u64,
    remaining: u64,
    write_threshold: u64,
    instructions_per_access: u32,
    fetches: bool,
    pc: u64,
}

impl Synthetic {
    /// Thread `thread`'s stream; `fetches` as `workload.fetches`.
    pub fn new(w: &SyntheticParams, fetches: bool, seed: u64, thread: u32) -> Synthetic {
        let region = w.region_bytes;
        let base = if w.shared_region {
            DATA_BASE
        } else {
            // Threads' private regions, each aligned to 1 GiB so no two share a table page.
            DATA_BASE + thread as u64 * region.next_multiple_of(1 << 30)
        };
        let pattern = if w.pattern == "random" { Pattern::Random } else { Pattern::Sequential };
        let stride = if w.pattern == "sequential" { 8 } else { w.stride };
        Synthetic {
            rng: SplitMix64::derive(seed, 0x5157_0000 + thread as u64),
            pattern,
            base,
            words: (region / 8).max(1),
            stride,
            // Threads sharing a sequential region start at different places.
            offset: if w.shared_region { (thread as u64 * 4096 * 7) % region.max(1) } else { 0 },
            remaining: w.accesses,
            write_threshold: (w.write_fraction * u64::MAX as f64) as u64,
            instructions_per_access: w.instructions_per_access,
            fetches,
            pc: CODE_BASE,
        }
    }

    #[inline]
    fn fetch(&mut self, out: &mut Vec<TraceEvent>) {
        out.push(TraceEvent::Access { va: self.pc, kind: AccessKind::Fetch, size: 4 });
        self.pc += 4;
        if self.pc >= CODE_BASE + CODE_BYTES {
            self.pc = CODE_BASE;
        }
    }
}

impl TraceSource for Synthetic {
    fn next_batch(&mut self, out: &mut Vec<TraceEvent>, max: usize) -> Result<usize, TraceError> {
        out.clear();
        let per = if self.fetches { self.instructions_per_access as usize + 1 } else { 2 };
        while self.remaining > 0 && out.len() + per <= max.max(per) {
            self.remaining -= 1;
            if self.fetches {
                for _ in 0..self.instructions_per_access {
                    self.fetch(out);
                }
            } else {
                out.push(TraceEvent::Instructions { n: self.instructions_per_access as u64 });
            }
            let va = match self.pattern {
                Pattern::Random => self.base + self.rng.below(self.words) * 8,
                Pattern::Sequential => {
                    let va = self.base + self.offset;
                    self.offset = (self.offset + self.stride) % (self.words * 8);
                    va
                }
            };
            let kind = if self.rng.next_u64() < self.write_threshold { AccessKind::Store } else { AccessKind::Load };
            out.push(TraceEvent::Access { va, kind, size: 8 });
        }
        Ok(out.len())
    }
}
