//! `workload.kind = "shootdown-patterns"`: the 13 micro-benchmarks of bench/patterns.toml,
//! one operation as bench/shootdown.c does it (the native benchmark that measures Linux's
//! shootdown IPIs per operation). The toml file is compiled in, so the native benchmark
//! and the simulator read the same list. Modelled: the measuring thread's operations
//! (munmap, mprotect toggle, MADV_DONTNEED, copy-on-write after fork, file read) and its
//! sibling (spinning, sleeping, absent or a second process). Simplified: where
//! shootdown.c ends each copy-on-write round's child, here it sleeps on (the IR cannot
//! wake it) ([`shootdown_patterns`]).

use super::{SLEEP_CYCLES, SPIN_CYCLES};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::workload::builder::{anon, check_range, file_map, forever, times, touch_pages, Builder, PAGE};
use crate::workload::program::{AccessMode, Op, Pattern, Workload};
use serde::Deserialize;

crate::params! {
    /// `workload.kind = "shootdown-patterns"`.
    pub struct ShootdownPatternsParams {
        /// The name of a pattern of bench/patterns.toml (e.g. `munmap-4k`).
        pub pattern: String = String::new(),
        /// Operations the measuring thread does.
        pub ops: u64 = 1_000,
    }
}

/// What one operation of a shootdown pattern does (patterns.toml `op`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PatternOp {
    Munmap,
    MprotectToggle,
    Dontneed,
    Cow,
    FileRead,
}

/// What the second thread does (patterns.toml `sibling`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Sibling {
    Spin,
    Sleep,
    None,
    Process,
}

/// One `[[pattern]]` of bench/patterns.toml.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ShootdownPattern {
    pub name: String,
    /// Prose, for people.
    pub operation: String,
    pub op: PatternOp,
    /// Pages of the operation's region.
    pub pages: u64,
    pub sibling: Sibling,
    /// TLB-shootdown IPIs per operation Linux shows (bench/shootdown measures it).
    pub expected_ipis_per_op: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatternFile {
    pattern: Vec<ShootdownPattern>,
}

/// bench/patterns.toml, compiled in: the one list of patterns for bench/shootdown.c and
/// this generator.
pub const PATTERNS_TOML: &str = include_str!("../../../../../bench/patterns.toml");

/// The patterns of bench/patterns.toml, in file order.
pub fn shootdown_patterns_list() -> Vec<ShootdownPattern> {
    toml::from_str::<PatternFile>(PATTERNS_TOML).expect("bench/patterns.toml parses (tests/workload_build.rs checks every pattern)").pattern
}

/// bench/shootdown.c: the measuring thread (pinned to core 0, class "measure") performs
/// `ops` operations (default 1,000), each followed by `CountOp`, and exits. The sibling
/// (core 1): "spin" = a daemon computing forever, "sleep" = a daemon blocked forever,
/// "none" = absent, "process" = a second single-threaded process (class "sibling", not a
/// daemon) running the same operations. One operation, by `op`:
/// - munmap: mmap `pages` pages anonymous private RW, write one byte of each, munmap;
/// - mprotect-toggle: (set-up: mmap and write the page) mprotect RO, mprotect RW, write;
/// - dontneed: (set-up: mmap and write the page) write, madvise(MADV_DONTNEED);
/// - cow: shootdown.c's rounds of `pages` (COW_PAGES) operations: mmap a `pages`-page
///   private region, write every page, fork a child that sleeps, then operation i writes
///   one byte to page i, breaking copy-on-write on a page the child shares; after the
///   round the region is unmapped. The child is a daemon pinned to core 0 (it inherits
///   the measuring thread's affinity); where shootdown.c ends each round's child, here it
///   sleeps on (the IR cannot wake it), holding its copy of the old region;
/// - file-read: (set-up: a `pages`-page file) mmap it shared read-only, read one byte of
///   each page, munmap.
///
/// Set-ups and tear-downs (munmap of the one page) are outside the counted operations, as
/// in shootdown.c.
pub(super) fn shootdown_patterns(cfg: &Config, w: &ShootdownPatternsParams) -> Result<Workload> {
    let patterns = shootdown_patterns_list();
    let Some(p) = patterns.iter().find(|p| p.name == w.pattern) else {
        let names: Vec<&str> = patterns.iter().map(|p| p.name.as_str()).collect();
        return Err(Error::config(
            "workload.pattern",
            format!("{:?} is not a shootdown pattern: use one of {} (bench/patterns.toml)", w.pattern, names.join(", ")),
        ));
    };
    if p.sibling != Sibling::None && cfg.cores() < 2 {
        return Err(Error::config("workload.pattern", format!("{:?} runs its sibling on core 1, but the machine has {} core", p.name, cfg.cores())));
    }
    check_range(&format!("bench/patterns.toml: {}: pages", p.name), p.pages, 1, 1 << 20)?;
    let ops = w.ops;
    let mut b = Builder::default();
    let root = b.group("root", 0);
    let bytes = p.pages * PAGE;
    let region = 0;
    let mut prog = Vec::new();
    match p.op {
        PatternOp::Munmap => {
            let one = vec![
                Op::Mmap { slot: region, spec: anon(bytes, true) },
                touch_pages(region, AccessMode::Write, p.pages),
                Op::Munmap { slot: region },
                Op::CountOp,
            ];
            prog.extend(times(ops, one));
        }
        PatternOp::MprotectToggle | PatternOp::Dontneed => {
            prog.push(Op::Mmap { slot: region, spec: anon(bytes, true) });
            prog.push(touch_pages(region, AccessMode::Write, p.pages));
            let one = if p.op == PatternOp::MprotectToggle {
                vec![
                    Op::Mprotect { slot: region, writable: false },
                    Op::Mprotect { slot: region, writable: true },
                    touch_pages(region, AccessMode::Write, p.pages),
                    Op::CountOp,
                ]
            } else {
                vec![touch_pages(region, AccessMode::Write, p.pages), Op::MadviseDontneed { slot: region }, Op::CountOp]
            };
            prog.extend(times(ops, one));
            prog.push(Op::Munmap { slot: region });
        }
        PatternOp::Cow => {
            let child = b.program(forever(vec![Op::Block { cycles: SLEEP_CYCLES }]));
            b.w.daemon_programs.push(child);
            let round = |n: u64| -> Vec<Op> {
                let mut r = vec![
                    Op::Mmap { slot: region, spec: anon(bytes, true) },
                    touch_pages(region, AccessMode::Write, p.pages),
                    Op::Fork { program: child, core: Some(0) },
                ];
                for i in 0..n {
                    r.push(Op::Access {
                        slot: region,
                        pattern: Pattern::Sequential,
                        mode: AccessMode::Write,
                        count: 1,
                        offset: i * PAGE,
                        len: PAGE,
                        stride: PAGE,
                    });
                    r.push(Op::CountOp);
                }
                r.push(Op::Munmap { slot: region });
                r
            };
            prog.extend(times(ops / p.pages, round(p.pages)));
            if !ops.is_multiple_of(p.pages) {
                prog.extend(round(ops % p.pages));
            }
        }
        PatternOp::FileRead => {
            let file = b.file("shootdown-file", p.pages);
            let one = vec![
                Op::Mmap { slot: region, spec: file_map(file, 0, bytes, true, false) },
                touch_pages(region, AccessMode::Read, p.pages),
                Op::Munmap { slot: region },
                Op::CountOp,
            ];
            prog.extend(times(ops, one));
        }
    }
    prog.push(Op::Exit);
    let measure = b.program(prog);
    let main = b.process("shootdown", root, vec![]);
    b.thread(main, "measure", "measure", Some(0), measure, false);
    match p.sibling {
        Sibling::Spin => {
            let spin = b.program(forever(vec![Op::Compute { cycles: SPIN_CYCLES }]));
            b.thread(main, "sibling", "spin", Some(1), spin, true);
        }
        Sibling::Sleep => {
            let sleep = b.program(forever(vec![Op::Block { cycles: SLEEP_CYCLES }]));
            b.thread(main, "sibling", "sleep", Some(1), sleep, true);
        }
        Sibling::None => {}
        Sibling::Process => {
            let other = b.process("sibling", root, vec![]);
            b.thread(other, "sibling", "sibling", Some(1), measure, false);
        }
    }
    Ok(b.finish())
}
