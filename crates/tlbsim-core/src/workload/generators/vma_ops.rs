//! `workload.kind = "vma-ops"`: Mitosis §8.3.2 (Table 5), repeated mmap (MAP_POPULATE),
//! mprotect or munmap of a region (`test = "mmap" | "mprotect" | "munmap"`), each call's
//! kernel cycles in `totals.syscalls_by_call`. Modelled: one thread on core 0 repeating the
//! call; nothing else runs.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::workload::builder::{anon, check_range, times, Builder, PAGE};
use crate::workload::program::{Op, Workload};

crate::params! {
    /// `workload.kind = "vma-ops"`.
    pub struct VmaOpsParams {
        /// The call repeated: `mmap`, `mprotect` or `munmap`.
        pub test: String = String::new(),
        /// Bytes of the region.
        pub region_bytes: u64 = 64 << 20,
        /// Calls.
        pub ops: u64 = 20,
    }
}

/// Mitosis §8.3.2 (Table 5): one thread (core 0) repeats a VMA operation on a region of
/// `region_bytes` with MAP_POPULATE, `ops` times (default 20). `mmap`:
/// mmap(populate) then munmap; `munmap`: the same pair (the munmap is the measured call);
/// `mprotect`: the region is mapped and populated once, then made read-only and writable
/// again. Each call's kernel cycles are in `totals.syscalls_by_call`.
pub(super) fn vma_ops(_cfg: &Config, w: &VmaOpsParams) -> Result<Workload> {
    const TESTS: [&str; 3] = ["mmap", "mprotect", "munmap"];
    let test = w.test.as_str();
    if !TESTS.contains(&test) {
        let tests: Vec<String> = TESTS.iter().map(|t| format!("{t:?}")).collect();
        return Err(Error::config("workload.test", format!("{test:?} is not a vma-ops test: use one of {}", tests.join(", "))));
    }
    let bytes = w.region_bytes;
    check_range("workload.region_bytes", bytes, PAGE, 1 << 40)?;
    let ops = w.ops;
    let slot = 0;
    let populated = anon(bytes, true).populated();
    let mut b = Builder::default();
    let root = b.group("root", 0);
    let process = b.process("vma-ops", root, vec![]);
    let prog = match test {
        "mprotect" => [
            vec![Op::Mmap { slot, spec: populated }],
            times(ops, vec![Op::Mprotect { slot, writable: false }, Op::Mprotect { slot, writable: true }, Op::CountOp]),
            vec![Op::Exit],
        ]
        .concat(),
        _ => [times(ops, vec![Op::Mmap { slot, spec: populated }, Op::Munmap { slot }, Op::CountOp]), vec![Op::Exit]].concat(),
    };
    let prog = b.program(prog);
    b.thread(process, test, test, Some(0), prog, false);
    Ok(b.finish())
}
