//! Every integration test of the core, in one test binary. Each file here was its own
//! binary once, and a release build links each binary with thin LTO over the whole core:
//! about 55 s apiece on a 2-CPU machine, 26 of them, most of `make test`'s time on a fresh
//! machine. As modules of one binary they are linked once. Each file keeps its tests, its
//! doc comment and its path (the docs name them); run one file's tests with a filter:
//! `cargo nextest run --release -p tlbsim-core -E 'test(/^golden::/)'`, or
//! `cargo test --release -p tlbsim-core --test suite golden::`. nextest runs every test in
//! its own process, as before. A new test file is one more `mod` line here.

mod common;

mod abis;
mod affinity;
mod agreement;
mod architecture;
mod config;
mod control;
mod didi;
mod engine;
mod fpr;
mod fuzz_regressions;
mod golden;
mod hierarchy;
mod hooks;
mod interleave;
mod invlpgb;
mod latr;
mod load_balance;
mod locks;
mod lru_lock;
mod malloc;
mod memory;
mod mitosis;
mod numa_balancing;
mod oracle_cachegrind;
mod os_engine;
mod os_property;
mod parsec;
mod rar_arm;
mod recorded;
mod recorded_block;
mod recorded_prot;
mod recorded_spin;
mod registry;
mod storage;
mod tlb_structures;
mod trace_readers;
mod unsafe_hw;
mod vms;
mod wake_affine;
mod walk;
mod will_it_scale;
mod workload_build;
