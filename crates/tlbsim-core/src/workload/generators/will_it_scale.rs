//! `workload.kind = "will-it-scale"`: will-it-scale's TLB-flush tests
//! (github.com/antonblanchard/will-it-scale, `tests/tlb_flush1.c`, `tlb_flush2.c`,
//! `tlb_flush3.c`), the benchmark of the INVLPGB series' cover letters (Rik van Riel, 2025;
//! ../shared/research/modern_invalidation.md §3).
//!
//! Each task's loop, as the tests write it:
//!
//! ```c
//! while (1) {
//!     addr = mmap(NULL, SIZE, PROT_READ|PROT_WRITE, FLAGS, fd, 0);
//!     for (i = 0; i < SIZE; i += pgsize) {
//!         *(addr + i) = 1;                               // a write fault
//!         madvise(addr + i, pgsize, MADV_DONTNEED);      // zap one page: a TLB flush
//!         assert(*(addr + i) == 0);                      // a read fault
//!         (*iteration)++;
//!     }
//!     munmap(addr, SIZE);
//! }
//! ```
//!
//! - `tlb_flush1`: a private mapping of a 128 MiB file of the task's own (`mkstemp`,
//!   `ftruncate`): the write copies the page-cache page, the read maps the page-cache page.
//! - `tlb_flush2`: 1 MiB of private anonymous memory: the write faults a zeroed page in,
//!   the read maps the zero page.
//! - `tlb_flush3`: a shared mapping of a 128 MiB file of the task's own: write and read map
//!   the page-cache page (it keeps the 1 the write stored).
//!
//! `mode = "threads"`: the tasks are threads of one process (every madvise shoots down the
//! other tasks' CPUs); `"processes"`: one process per task (no remote flush). Tasks are
//! pinned one per CPU, as will-it-scale binds them. One operation is one iteration.
//!
//! Simplified: the tests' `assert` and the loop's own instructions are not charged (a
//! handful of instructions beside two faults and a system call).

use crate::config::Config;
use crate::error::{Error, Result};
use crate::workload::builder::{anon, check_range, file_map, threads_or_cores, Builder, PAGE};
use crate::workload::program::{AccessMode, Op, Pattern, Workload};

crate::params! {
    /// `workload.kind = "will-it-scale"`.
    pub struct WillItScaleParams {
        /// The test: `tlb_flush1` (private file mapping), `tlb_flush2` (private anonymous
        /// memory) or `tlb_flush3` (shared file mapping).
        pub test: String = "tlb_flush2".to_string(),
        /// `threads` (tasks share one address space) or `processes`.
        pub mode: String = "threads".to_string(),
        /// Tasks, one per CPU from CPU 0 (0: one per CPU of the machine).
        pub threads: u32 = 0,
        /// Iterations (one page written, zapped and read again) per task.
        pub ops: u64 = 2000,
    }
}

/// The tests' mapping sizes: `FILESIZE` (128 MiB) of tlb_flush1 and 3, `MEMORYSIZE`
/// (1 MiB) of tlb_flush2.
const FILE_BYTES: u64 = 128 << 20;
const ANON_BYTES: u64 = 1 << 20;

pub(super) fn will_it_scale(cfg: &Config, w: &WillItScaleParams) -> Result<Workload> {
    const TESTS: [&str; 3] = ["tlb_flush1", "tlb_flush2", "tlb_flush3"];
    let test = w.test.as_str();
    if !TESTS.contains(&test) {
        let tests: Vec<String> = TESTS.iter().map(|t| format!("{t:?}")).collect();
        return Err(Error::config("workload.test", format!("{test:?} is not a will-it-scale test: use one of {}", tests.join(", "))));
    }
    let threads_mode = match w.mode.as_str() {
        "threads" => true,
        "processes" => false,
        other => return Err(Error::config("workload.mode", format!("{other:?}: use \"threads\" or \"processes\""))),
    };
    let tasks = threads_or_cores(cfg, w.threads);
    check_range("workload.threads", tasks as u64, 1, cfg.cores() as u64)?;
    check_range("workload.ops", w.ops, 1, 1 << 32)?;
    let bytes = if test == "tlb_flush2" { ANON_BYTES } else { FILE_BYTES };
    let pages = bytes / PAGE;

    let mut b = Builder::default();
    let root = b.group("root", 0);
    // Slot 0: the mapping; slot 1: the page the loop is at.
    let (mapping, page) = (0, 1);
    let access = |mode| Op::Access { slot: page, pattern: Pattern::Sequential, mode, count: 1, offset: 0, len: 0, stride: PAGE };
    let program = |b: &mut Builder, file: Option<u32>| {
        let spec = match file {
            Some(f) => file_map(f, 0, bytes, test == "tlb_flush3", true),
            None => anon(bytes, true),
        };
        let mut ops = Vec::new();
        for k in 0..w.ops {
            let i = k % pages;
            if i == 0 {
                if k > 0 {
                    ops.push(Op::Munmap { slot: mapping });
                }
                ops.push(Op::Mmap { slot: mapping, spec });
            }
            ops.extend([
                Op::SubRange { slot: page, of: mapping, offset: i * PAGE, len: PAGE },
                access(AccessMode::Write),
                Op::MadviseDontneed { slot: page },
                access(AccessMode::Read),
                Op::CountOp,
            ]);
        }
        ops.extend([Op::Munmap { slot: mapping }, Op::Exit]);
        b.program(ops)
    };
    // Each task maps a file of its own (mkstemp per task), so each has its program;
    // tlb_flush2's tasks share one.
    let shared = (test == "tlb_flush2").then(|| program(&mut b, None));
    let process = threads_mode.then(|| b.process(test, root, vec![]));
    for t in 0..tasks {
        let prog = match shared {
            Some(p) => p,
            None => {
                let f = b.file(&format!("willitscale.{t}"), pages);
                program(&mut b, Some(f))
            }
        };
        let p = process.unwrap_or_else(|| b.process(&format!("{test}.{t}"), root, vec![]));
        b.thread(p, &format!("task{t}"), "task", Some(t), prog, false);
    }
    Ok(b.finish())
}
