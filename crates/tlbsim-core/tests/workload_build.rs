//! Building OS-mode workloads: every generator and every shootdown pattern builds and
//! passes `Workload::check`; the scenario language compiles to the right flat programs and
//! slots; bad input is an error that names the key.

use serde_json::{json, Value};
use std::path::Path;
use tlbsim_core::config::{load_toml_file, Config};
use tlbsim_core::workload::generators::{shootdown_patterns_list, PatternOp, Sibling, KINDS};
use tlbsim_core::workload::program::{AccessMode, Backing, Op, Pattern, Workload};
use tlbsim_core::workload::{build, is_os_mode};
use tlbsim_core::Error;

fn resolve(tree: Value) -> Result<Config, Error> {
    Config::resolve(tree, &[], Path::new("."))
}

fn workload(tree: Value) -> Workload {
    let cfg = resolve(tree).unwrap_or_else(|e| panic!("{e}"));
    let w = build(&cfg).unwrap();
    w.check(cfg.cores()).unwrap();
    w
}

fn config_error(r: Result<Config, Error>) -> (String, String) {
    match r {
        Err(Error::Config { key, message }) => (key, message),
        Err(e) => panic!("expected a config error, got {e}"),
        Ok(_) => panic!("expected a config error, got a config"),
    }
}

fn toml_tree(text: &str) -> Value {
    serde_json::to_value(toml::from_str::<toml::Value>(text).unwrap()).unwrap()
}

/// `CountOp`s a program executes (None: it loops forever).
fn counted_ops(prog: &[Op]) -> Option<u64> {
    let (mut i, mut total) = (0, 0);
    while i < prog.len() {
        match prog[i] {
            Op::Loop { count, body } => {
                if count == 0 {
                    return None;
                }
                total += count * counted_ops(&prog[i + 1..=i + body])?;
                i += body + 1;
            }
            Op::CountOp => {
                total += 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    Some(total)
}

fn two_sockets(workload: Value) -> Value {
    json!({"machine": {"sockets": 2, "cores_per_socket": 2}, "workload": workload})
}

// ---- generators ----

#[test]
fn every_generator_builds_with_its_defaults() {
    let defaults = [
        json!({"kind": "shootdown-patterns", "pattern": "munmap-4k"}),
        json!({"kind": "fpr-munmap"}),
        json!({"kind": "fpr-evict"}),
        json!({"kind": "ycsb"}),
        json!({"kind": "apache"}),
        json!({"kind": "vmscale", "test": "cow-seq"}),
        json!({"kind": "reclaim"}),
        json!({"kind": "stm-mprotect"}),
        json!({"kind": "mitosis-bench", "test": "gups"}),
        json!({"kind": "vma-ops", "test": "mprotect"}),
        json!({"kind": "will-it-scale"}),
        json!({"kind": "mactest"}),
        json!({"kind": "cowsingle"}),
        json!({"kind": "cowmultiple"}),
        json!({"kind": "wordcount"}),
        json!({"kind": "vm-mix"}),
        json!({"kind": "parsec-like", "test": "dedup"}),
    ];
    assert_eq!(defaults.len(), KINDS.len());
    for (wl, kind) in defaults.into_iter().zip(KINDS) {
        assert_eq!(wl["kind"], *kind);
        assert!(is_os_mode(kind));
        for machine in [json!({}), json!({"sockets": 2, "cores_per_socket": 4})] {
            let w = workload(json!({"machine": machine, "workload": wl.clone()}));
            assert!(!w.processes.is_empty(), "{kind}");
            // Every non-daemon thread ends, and does some counted work.
            for t in w.processes.iter().flat_map(|p| &p.threads).filter(|t| !t.daemon) {
                let n = counted_ops(&w.programs[t.program]).unwrap_or_else(|| panic!("{kind}: {} never ends", t.name));
                assert!(n > 0, "{kind}: {} counts no operation", t.name);
            }
        }
    }
}

#[test]
fn a_tpcc_guest_is_tpcc_uvas_terminals_monitor_and_one_backend() {
    let w = workload(json!({"machine": {"preset": "tagtlb-p4"}, "workload": {"kind": "vm-mix", "test": "tpcc-vortex", "threads": 3, "ops": 9}}));
    let dom1: Vec<&str> = w.vms[1].processes.iter().map(|&p| w.processes[p].name.as_str()).collect();
    assert_eq!(dom1, ["dom1-postgres", "dom1-tm", "dom1-terminal0", "dom1-terminal1", "dom1-terminal2"]);
    let program = |name: &str| {
        let p = w.processes.iter().find(|p| p.name == name).unwrap();
        &w.programs[p.threads[0].program]
    };
    // 27 transactions (3 terminals x 9), a whole cycle of 25 and two more: 12 New-Orders
    // (57 statements), 12 Payments (11), one of each other type (21, 72, 4).
    let statements = 12 * 57 + 12 * 11 + 21 + 72 + 4;
    let backend = program("dom1-postgres");
    let takes = |prog: &[Op]| -> u64 {
        // Loops multiplied out: a statement's round trip sits in a loop of the transaction's statements.
        let mut n = 0;
        let mut i = 0;
        while i < prog.len() {
            if let Op::Loop { count, body } = prog[i] {
                n += count * prog[i + 1..=i + body].iter().filter(|o| matches!(o, Op::Take { .. })).count() as u64;
                i += body + 1;
            } else {
                n += matches!(prog[i], Op::Take { .. }) as u64;
                i += 1;
            }
        }
        n
    };
    assert_eq!(takes(backend), statements);
    // The monitor takes each terminal's request and each statement's reply.
    assert_eq!(takes(program("dom1-tm")), 27 + statements);
    // A log write (through dom0) per transaction that writes: New-Order, Payment, Delivery.
    assert_eq!(count(backend, |o| matches!(o, Op::Io { .. })), 12 + 12 + 1);
    assert_eq!(counted_ops(backend), Some(27));
    assert_eq!(counted_ops(program("dom1-terminal0")), Some(9));
}

#[test]
fn every_vmscale_test_builds() {
    for test in ["migrate", "cow-seq", "cow-rand", "mmap-read", "msync", "anon-read-seq"] {
        for threads in [0, 1, 3] {
            let w = workload(two_sockets(json!({"kind": "vmscale", "test": test, "threads": threads})));
            let tasks: usize = w.processes.iter().map(|p| p.threads.len()).sum();
            assert_eq!(tasks, if threads == 0 { 4 } else { threads as usize }, "{test}");
        }
    }
    // mmap-read runs in a limited group: half the working set by default.
    let w = workload(json!({"workload": {"kind": "vmscale", "test": "mmap-read", "region_bytes": 64 << 20}}));
    assert_eq!(w.groups[w.processes[0].group].limit_pages, 32 * 256);
    // migrate moves the region around the nodes, one counted operation per migration.
    let w = workload(two_sockets(json!({"kind": "vmscale", "test": "migrate", "ops": 5})));
    let migrator = &w.programs[w.processes[0].threads[0].program];
    assert_eq!(counted_ops(migrator), Some(5));
    assert!(migrator.iter().any(|op| matches!(op, Op::MigratePages { node: 1, .. })));
    assert!(migrator.iter().any(|op| matches!(op, Op::MigratePages { node: 0, .. })));
}

#[test]
fn fpr_munmap_cases_have_the_papers_thread_mix() {
    let classes = |case: u32| {
        let w = workload(json!({"machine": {"cores_per_socket": 4}, "workload": {"kind": "fpr-munmap", "case": case, "threads": 3, "compute_threads": 2}}));
        let count = |c: &str| w.processes[0].threads.iter().filter(|t| t.class == c).count();
        (count("io"), count("compute"), count("mixed"))
    };
    assert_eq!(classes(1), (3, 0, 0));
    assert_eq!(classes(2), (1, 3, 0));
    assert_eq!(classes(3), (3, 1, 0));
    assert_eq!(classes(4), (3, 2, 0));
    assert_eq!(classes(5), (0, 0, 3));
    // Compute threads are daemons; the I/O loop is mmap → one access → munmap.
    let w = workload(json!({"workload": {"kind": "fpr-munmap", "case": 2, "threads": 1, "ops": 7}}));
    let io = w.processes[0].threads.iter().find(|t| t.class == "io").unwrap();
    let compute = w.processes[0].threads.iter().find(|t| t.class == "compute").unwrap();
    assert!(compute.daemon && !io.daemon);
    let prog = &w.programs[io.program];
    assert_eq!(prog[0], Op::Loop { count: 7, body: 4 });
    assert!(matches!(prog[1], Op::Mmap { slot: 0, spec }
        if spec.backing == Backing::File { file: 0, offset_pages: 0 } && spec.shared && !spec.writable && spec.bytes == 4096));
    assert_eq!(
        prog[2..],
        [
            Op::Access { slot: 0, pattern: Pattern::Random, mode: AccessMode::Read, count: 1, offset: 0, len: 0, stride: 8 },
            Op::Munmap { slot: 0 },
            Op::CountOp,
            Op::Exit,
        ]
    );
    assert_eq!(counted_ops(&w.programs[compute.program]), None);
}

#[test]
fn apache_spreads_workers_over_processes() {
    let w = workload(json!({"machine": {"cores_per_socket": 4}, "workload": {"kind": "apache", "threads": 5, "processes": 2, "ops": 10}}));
    let per_process: Vec<usize> = w.processes.iter().map(|p| p.threads.len()).collect();
    assert_eq!(per_process, vec![2, 3]);
    for t in w.processes.iter().flat_map(|p| &p.threads) {
        assert_eq!(counted_ops(&w.programs[t.program]), Some(10));
        assert_eq!(t.core, None);
    }
    let prog = &w.programs[w.processes[0].threads[0].program];
    assert!(matches!(prog[1], Op::Mmap { .. }) && matches!(prog[3], Op::Munmap { .. }));
}

#[test]
fn apache_mpm_event_has_listeners_workers_and_a_load_generator_on_its_own_cores() {
    // 14 cores: wrk's 6 threads on the last 6, the 3 children (a listener and 25 workers
    // each) on the first 8.
    let w = workload(json!({"machine": {"sockets": 2, "cores_per_socket": 7}, "workload": {"kind": "apache", "test": "mpm_event", "ops": 100}}));
    assert_eq!(w.processes.len(), 4);
    assert_eq!(w.tokens, 12);
    for p in &w.processes[..3] {
        assert_eq!(p.threads.len(), 26);
        assert_eq!(p.threads.iter().filter(|t| t.class == "listener").count(), 1);
        assert!(p.threads.iter().all(|t| t.daemon && t.core.is_some_and(|c| c < 8)));
        let worker = &w.programs[p.threads[1].program];
        // Onto the server's set of cores (ABIS §5.2), then: idle, take a connection off the
        // queue, serve it with a mapping of the file.
        assert!(p.threads.iter().all(|t| w.programs[t.program][0] == Op::SetAffinity { set: 0 }));
        assert!(matches!(worker[2], Op::Post { .. }) && matches!(worker[3], Op::Take { .. }), "{worker:?}");
        assert_eq!(worker.iter().filter(|op| matches!(op, Op::Mmap { .. })).count(), 1);
        assert_eq!(worker.iter().filter(|op| matches!(op, Op::Munmap { .. })).count(), 1);
    }
    let wrk = &w.processes[3];
    let cores: Vec<u32> = wrk.threads.iter().map(|t| t.core.unwrap()).collect();
    assert_eq!(cores, vec![8, 9, 10, 11, 12, 13]);
    // "isolate each one on a set of cores": the server on cores 0-7, wrk on 8-13.
    assert_eq!(w.cpu_sets, vec![vec![0xff], vec![0x3f00]]);
    for t in &wrk.threads {
        assert!(!t.daemon);
        assert_eq!(w.programs[t.program][0], Op::SetAffinity { set: 1 });
        assert_eq!(counted_ops(&w.programs[t.program]), Some(100), "each wrk thread makes `ops` requests");
    }
}

#[test]
fn reclaim_runs_under_a_memory_limit_and_counts_blocks() {
    // pbzip2 -r: 4,000,000 bytes over 2 compressors are 2 file blocks of 2,000,000 bytes,
    // each compressed in 4 BWT blocks of 500,000.
    let w = workload(json!({"workload": {"kind": "reclaim", "threads": 2, "region_bytes": 4_000_000, "memory_limit_mib": 3}}));
    let p = &w.processes[0];
    assert_eq!(w.groups[p.group].limit_pages, 3 * 256);
    assert_eq!(p.threads.len(), 4);
    assert!(w.held_threads.is_empty());
    assert_eq!(w.tokens, 4);
    // The file, 2 work areas, 2 input buffers, 2 output buffers.
    assert_eq!(p.regions.len(), 1 + 2 + 2 + 2);
    let reader = &w.programs[p.threads[0].program];
    assert_eq!(counted_ops(reader), Some(2));
    assert_eq!(reader.iter().filter(|o| matches!(o, Op::Post { .. })).count(), 2);
    let writer = &w.programs[p.threads[1].program];
    assert_eq!(counted_ops(writer), Some(2));
    assert_eq!(writer.iter().filter(|o| matches!(o, Op::Munmap { slot } if *slot >= 5)).count(), 2);
    for (i, t) in p.threads[2..].iter().enumerate() {
        let prog = &w.programs[t.program];
        // Waits for its block, compresses it in 4 BWT blocks, hands the output on, frees it.
        assert!(matches!(prog[0], Op::Sleep { token, count: 1 } if token == i as u32));
        assert_eq!(counted_ops(prog), Some(4));
        assert_eq!(prog.iter().filter(|o| matches!(o, Op::Post { token } if *token == 2 + i as u32)).count(), 1);
        assert_eq!(prog.iter().filter(|o| matches!(o, Op::Munmap { slot } if *slot == 3 + i)).count(), 1);
    }
}

fn count(prog: &[Op], f: impl Fn(&Op) -> bool) -> usize {
    prog.iter().filter(|o| f(o)).count()
}

#[test]
fn ycsb_leveldb_opens_and_closes_tables_like_an_lru_table_cache() {
    // 8 tables of 2 MiB. A cache as large as the data: each table opened at most once per
    // thread, never closed by a read-only mix.
    let all =
        workload(json!({"workload": {"kind": "ycsb", "test": "leveldb", "ycsb": "c", "threads": 2, "ops": 200, "region_bytes": 16 << 20, "table_cache": 8}}));
    for t in &all.processes[0].threads {
        let prog = &all.programs[t.program];
        assert_eq!(counted_ops(prog), Some(200));
        let opened = count(prog, |o| matches!(o, Op::Mmap { spec, .. } if matches!(spec.backing, Backing::File { .. })));
        assert!(opened <= 8 && opened > 0, "{opened}");
        assert_eq!(count(prog, |o| matches!(o, Op::Munmap { .. })), 0);
        // Every table mapping is MAP_FPR, shared, read-only, one 2 MiB table.
        for o in prog {
            if let Op::Mmap { spec, .. } = o {
                if let Backing::File { offset_pages, .. } = spec.backing {
                    assert!(spec.recyclable && spec.shared && !spec.writable && spec.bytes == 2 << 20 && offset_pages % 512 == 0);
                }
            }
        }
    }
    // A cache of one table: a read of another table than the last closes it first.
    let one =
        workload(json!({"workload": {"kind": "ycsb", "test": "leveldb", "ycsb": "c", "threads": 1, "ops": 300, "region_bytes": 16 << 20, "table_cache": 1}}));
    let prog = &one.programs[one.processes[0].threads[0].program];
    let tables: Vec<u64> = prog
        .iter()
        .filter_map(|o| match o {
            Op::Mmap { spec, .. } => match spec.backing {
                Backing::File { offset_pages, .. } => Some(offset_pages / 512),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert!(tables.windows(2).all(|w| w[0] != w[1]), "a cached table was reopened");
    assert_eq!(count(prog, |o| matches!(o, Op::Munmap { .. })), tables.len() - 1);
    // About 7 in 8 reads miss a one-table cache of 8 tables.
    assert!((230..=290).contains(&tables.len()), "{}", tables.len());
}

#[test]
fn a_ycsb_leveldb_read_searches_the_memtable_then_the_index_block_then_one_data_block() {
    // YCSB-A (half updates) on one thread: reads after updates find a memtable to search.
    let w =
        workload(json!({"workload": {"kind": "ycsb", "test": "leveldb", "ycsb": "a", "threads": 1, "ops": 400, "region_bytes": 16 << 20, "table_cache": 8}}));
    let prog = &w.programs[w.processes[0].threads[0].program];
    let (mut reads, mut memtable_searches, mut writes) = (0, 0, 0u64);
    for o in prog {
        match *o {
            // The memtable (slot 0): a write's record, or a read's skiplist search of the
            // part filled so far, 1.5 log2(records) probes.
            Op::Access { slot: 0, mode: AccessMode::Write, .. } => writes += 1,
            Op::Access { slot: 0, mode: AccessMode::Read, count, offset, len, .. } => {
                memtable_searches += 1;
                assert_eq!((offset, len % 1024), (0, 0));
                let records = (len / 1024).max(2);
                assert!(len / 1024 <= writes && count == 3 * u64::from(records.ilog2()) / 2, "{count} probes of {records}");
            }
            // A table: 9 probes of the index block (its last 5 pages), then 18 lines of one
            // data block, within a page before the index.
            Op::Access { slot, pattern: Pattern::Random, count, offset, len, .. } if slot > 0 => {
                reads += 1;
                assert_eq!((count, offset, len), (9, 507 * 4096, 5 * 4096));
            }
            Op::Access { slot, pattern: Pattern::Sequential, count, offset, len, stride, .. } if slot > 0 => {
                assert_eq!((count, len, stride, offset % 4096), (18, 4096, 64, 0));
                assert!(offset < 507 * 4096);
            }
            _ => {}
        }
    }
    assert!((150..=250).contains(&reads), "{reads} reads of 400");
    // Every read after the first update searched the memtable.
    assert!(memtable_searches > 0 && memtable_searches <= reads, "{memtable_searches}");
}

#[test]
fn ycsb_leveldb_writes_fill_the_memtable_then_compact() {
    let w = workload(json!({"workload": {"kind": "ycsb", "test": "leveldb", "ycsb": "load", "threads": 4, "ops": 3000}}));
    for t in &w.processes[0].threads {
        let prog = &w.programs[t.program];
        // 4,096 records per memtable, a quarter per thread: 3,000 inserts flush twice.
        assert_eq!(count(prog, |o| matches!(o, Op::MadviseDontneed { slot: 0 })), 2);
        assert_eq!(count(prog, |o| matches!(o, Op::Access { slot: 0, mode: AccessMode::Write, .. })), 3000);
    }
    for (wl, bad) in [(json!({"kind": "ycsb", "ycsb": "e"}), "workload.ycsb"), (json!({"kind": "ycsb", "test": "rocksdb"}), "workload.test")] {
        match resolve(json!({"workload": wl})).and_then(|c| build(&c)) {
            Err(Error::Config { key, .. }) => assert_eq!(key, bad),
            other => panic!("{bad}: expected a config error, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn ycsb_lmdb_maps_one_file_once_under_a_memory_limit() {
    let w = workload(json!({"workload": {"kind": "ycsb", "test": "lmdb", "ycsb": "b", "threads": 2, "ops": 100, "region_bytes": 64 << 20}}));
    let p = &w.processes[0];
    assert_eq!(p.regions.len(), 1);
    assert!(p.regions[0].recyclable && p.regions[0].bytes == 64 << 20);
    // A quarter of the data fits.
    assert_eq!(w.groups[p.group].limit_pages, 16 * 256);
    for t in &p.threads {
        let prog = &w.programs[t.program];
        assert_eq!(count(prog, |o| matches!(o, Op::Mmap { .. } | Op::Munmap { .. })), 0);
        // Root, branch, leaf per request.
        assert_eq!(count(prog, |o| matches!(o, Op::Access { .. })), 300);
    }
}

#[test]
fn stm_protects_pages_around_transactions() {
    let w = workload(json!({"workload": {"kind": "stm-mprotect", "threads": 2, "ops": 100, "file_pages": 8}}));
    assert_eq!(w.slots, 16);
    for t in &w.processes[0].threads {
        let prog = &w.programs[t.program];
        assert_eq!(counted_ops(prog), Some(100));
        let protects = prog.iter().filter(|op| matches!(op, Op::Mprotect { .. })).count();
        assert!(protects > 0);
    }
}

// ---- shootdown patterns ----

#[test]
fn every_pattern_of_bench_patterns_toml_builds() {
    let patterns = shootdown_patterns_list();
    assert_eq!(patterns.len(), 13);
    for p in &patterns {
        for ops in [1, 1000, 5000] {
            let w = workload(json!({"workload": {"kind": "shootdown-patterns", "pattern": p.name, "ops": ops}}));
            let measure = &w.processes[0].threads[0];
            assert_eq!((measure.class.as_str(), measure.core, measure.daemon), ("measure", Some(0), false));
            assert_eq!(counted_ops(&w.programs[measure.program]), Some(ops), "{}", p.name);
            assert_eq!(w.programs[measure.program].last(), Some(&Op::Exit));
            let threads: Vec<_> = w.processes.iter().flat_map(|p| &p.threads).collect();
            match p.sibling {
                Sibling::None => assert_eq!(threads.len(), 1),
                Sibling::Spin | Sibling::Sleep => {
                    assert_eq!(w.processes.len(), 1);
                    let s = &w.processes[0].threads[1];
                    assert!(s.daemon && s.core == Some(1));
                    let forever = &w.programs[s.program];
                    assert_eq!(counted_ops(forever), None);
                    assert!(matches!(forever[1], Op::Compute { .. }) == (p.sibling == Sibling::Spin));
                }
                Sibling::Process => {
                    assert_eq!(w.processes.len(), 2);
                    let s = &w.processes[1].threads[0];
                    assert!(!s.daemon && s.core == Some(1) && s.program == measure.program);
                }
            }
        }
    }
    // The sibling needs a second core.
    let (key, _) = config_error(resolve(json!({"machine": {"cores_per_socket": 1}, "workload": {"kind": "shootdown-patterns", "pattern": "munmap-4k"}})));
    assert_eq!(key, "workload.pattern");
    resolve(json!({"machine": {"cores_per_socket": 1}, "workload": {"kind": "shootdown-patterns", "pattern": "munmap-4k-alone"}})).unwrap();
}

#[test]
fn shootdown_operations_are_those_of_shootdown_c() {
    let prog = |name: &str, ops: u64| {
        let w = workload(json!({"workload": {"kind": "shootdown-patterns", "pattern": name, "ops": ops}}));
        (w.programs[w.processes[0].threads[0].program].clone(), w)
    };
    let write_page =
        |page: u64| Op::Access { slot: 0, pattern: Pattern::Sequential, mode: AccessMode::Write, count: 1, offset: page * 4096, len: 4096, stride: 4096 };
    let (p, _) = prog("munmap-4k", 10);
    assert!(matches!(p[0], Op::Loop { count: 10, body: 4 }));
    assert!(matches!(p[1], Op::Mmap { slot: 0, spec } if spec.bytes == 4096 && spec.backing == Backing::Anonymous && !spec.shared));
    assert_eq!(p[2], write_page(0));
    assert_eq!(p[3..], [Op::Munmap { slot: 0 }, Op::CountOp, Op::Exit]);
    let (p, _) = prog("munmap-64", 10);
    assert!(matches!(p[2], Op::Access { count: 64, stride: 4096, mode: AccessMode::Write, .. }));
    let (p, _) = prog("mprotect-toggle", 10);
    assert_eq!(
        p[2..8],
        [
            Op::Loop { count: 10, body: 4 },
            Op::Mprotect { slot: 0, writable: false },
            Op::Mprotect { slot: 0, writable: true },
            write_page(0),
            Op::CountOp,
            Op::Munmap { slot: 0 },
        ]
    );
    let (p, _) = prog("dontneed", 10);
    assert_eq!(p[3..6], [write_page(0), Op::MadviseDontneed { slot: 0 }, Op::CountOp]);
    let (p, w) = prog("file-read-sleep", 10);
    assert!(matches!(p[1], Op::Mmap { spec, .. } if spec.shared && !spec.writable && spec.backing == Backing::File { file: 0, offset_pages: 0 }));
    assert_eq!(w.files[0].pages, 1);

    // cow: rounds of 4096 operations, each on a fresh region shared with a sleeping child.
    let cow = shootdown_patterns_list().into_iter().find(|p| p.name == "cow").unwrap();
    assert_eq!((cow.op, cow.pages), (PatternOp::Cow, 4096));
    let (p, w) = prog("cow", 2 * 4096 + 808);
    assert!(matches!(p[0], Op::Loop { count: 2, .. }));
    let forks: Vec<usize> = p
        .iter()
        .filter_map(|op| {
            if let Op::Fork { program, core } = op {
                assert_eq!(*core, Some(0));
                Some(*program)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(forks.len(), 2, "one fork in the looped full round, one in the partial round");
    assert!(forks.iter().all(|c| w.daemon_programs.contains(c)));
    assert_eq!(counted_ops(&w.programs[forks[0]]), None);
    // Operation i of a round writes page i; the region is populated before the fork.
    let first_round = &p[1..];
    assert!(matches!(first_round[0], Op::Mmap { spec, .. } if spec.bytes == 4096 * 4096 && !spec.shared));
    assert!(matches!(first_round[1], Op::Access { count: 4096, mode: AccessMode::Write, .. }));
    assert!(matches!(first_round[2], Op::Fork { .. }));
    assert_eq!(first_round[3], write_page(0));
    assert_eq!(first_round[5], write_page(1));
    assert_eq!(first_round[3 + 2 * 4095], write_page(4095));
}

// ---- parameter errors ----

#[test]
fn generator_parameter_errors_name_the_key() {
    let cases = [
        (json!({"workload": {"kind": "shootdown-patterns", "pattern": "nope"}}), "workload.pattern", "munmap-4k"),
        (json!({"workload": {"kind": "shootdown-patterns"}}), "workload.pattern", "not a shootdown pattern"),
        (json!({"workload": {"kind": "fpr-munmap", "case": 6}}), "workload.case", "1 to 5"),
        (json!({"workload": {"kind": "vmscale"}}), "workload.test", "cow-seq"),
        (json!({"workload": {"kind": "vmscale", "test": "migrate"}}), "machine.sockets", "2 or more sockets"),
        (json!({"workload": {"kind": "apache", "threads": 2, "processes": 3}}), "workload.processes", "each process needs a worker"),
        (json!({"workload": {"kind": "apache", "test": "prefork"}}), "workload.test", "mpm_event"),
        (json!({"machine": {"cores_per_socket": 6}, "workload": {"kind": "apache", "test": "mpm_event"}}), "workload.client_cores", "leaves none"),
        (
            json!({"machine": {"cores_per_socket": 8}, "workload": {"kind": "apache", "test": "mpm_event", "processes": 7}}),
            "workload.processes",
            "wrk's 6 threads",
        ),
        (json!({"workload": {"kind": "stm-mprotect", "file_pages": 1}}), "workload.file_pages", "out of range"),
        (json!({"workload": {"kind": "fpr-munmap", "threads": 5000}}), "workload.threads", "out of range"),
        (json!({"workload": {"kind": "nonsense"}}), "workload.kind", "\"stm-mprotect\""),
        (json!({"workload": {"kind": "scenario"}}), "workload.scenario", "needs a [workload.scenario] table"),
    ];
    for (tree, want_key, want_msg) in cases {
        let (key, message) = config_error(resolve(tree.clone()));
        assert_eq!(key, want_key, "{tree}: {message}");
        assert!(message.contains(want_msg), "{tree}: {message}");
    }
}

/// Each kind takes its own keys: a key of another kind is refused with the kinds that take
/// it, an unknown key with the kind's own keys, and the resolved table holds exactly the
/// kind's keys with their defaults.
#[test]
fn a_kind_takes_only_its_own_keys() {
    let (key, message) = config_error(resolve(json!({"workload": {"kind": "apache", "case": 2}})));
    assert_eq!(key, "workload.case");
    assert!(message.contains("not a key of workload kind \"apache\"") && message.contains("\"fpr-munmap\""), "{message}");
    let (key, message) = config_error(resolve(json!({"workload": {"kind": "cowsingle", "threads": 4}})));
    assert_eq!(key, "workload.threads");
    let takers = message.split("take it:").nth(1).unwrap_or_default();
    assert!(takers.contains("\"cowmultiple\"") && takers.contains("\"synthetic\"") && !takers.contains("\"cowsingle\""), "{message}");
    let (key, message) = config_error(resolve(json!({"workload": {"kind": "synthetic", "paths": ["a.trace"]}})));
    assert_eq!(key, "workload.paths");
    assert!(message.contains("\"trace\"") && message.contains("\"recorded\""), "{message}");
    let (key, message) = config_error(resolve(json!({"workload": {"kind": "mactest", "nonsense": 1}})));
    assert_eq!(key, "workload.nonsense");
    assert!(message.contains("unknown key") && message.contains("file_pages"), "{message}");
    // A value of the wrong type names the key.
    let (key, _) = config_error(resolve(json!({"workload": {"kind": "mactest", "ops": "many"}})));
    assert_eq!(key, "workload.ops");

    // The resolved table: the kind's keys, every default filled in, nothing else.
    let cfg = resolve(json!({"workload": {"kind": "cowsingle", "ops": 7}})).unwrap();
    let keys: Vec<&str> = cfg.workload.params.keys().map(String::as_str).collect();
    assert_eq!(keys, ["ops", "file_pages"]);
    assert_eq!(cfg.workload.params["ops"], json!(7));
    assert_eq!(cfg.workload.params["file_pages"], json!(16));
    let cfg = resolve(json!({"workload": {"kind": "synthetic"}})).unwrap();
    assert_eq!(cfg.workload.params["accesses"], json!(2_000_000));
    assert!(!cfg.workload.params.contains_key("ops"));
}

/// Every kind `workload.kind` accepts is in the registry with its documented parameters.
#[test]
fn every_kind_is_registered_with_documented_parameters() {
    let entries = tlbsim_core::workload::kind::entries();
    for name in ["trace", "synthetic", "scenario", "recorded"].iter().chain(KINDS) {
        let e = entries.iter().find(|e| e.name == *name).unwrap_or_else(|| panic!("{name} is not registered"));
        assert!(!e.summary.is_empty(), "{name}");
        for d in (e.params)() {
            assert!(!d.doc.trim().is_empty(), "{name}.{}: no documentation", d.key);
        }
        let defaults = (e.defaults)();
        assert_eq!(defaults.as_object().map(|m| m.len()), Some((e.params)().len()), "{name}");
    }
}

// ---- the scenario language ----

const SCENARIO: &str = r#"
[workload]
kind = "scenario"

[[workload.scenario.group]]
name = "small"
limit_mib = 8

[[workload.scenario.file]]
name = "data"
pages = 16

[[workload.scenario.process]]
name = "p"
group = "small"
region = [
  { name = "heap", bytes = 65536 },
  { name = "data", bytes = 8192, file = "data", offset_pages = 4, shared = true, writable = false },
]

[[workload.scenario.process.thread]]
name = "main"
class = "io"
core = 1
program = [
  { op = "mmap", region = "buf", bytes = 4096 },
  { op = "loop", count = 3, body = [
    { op = "access", region = "heap", pattern = "zipf", theta = 0.8, mode = "mixed", write_fraction = 0.25, count = 10 },
    { op = "loop", count = 2, body = [
      { op = "compute", cycles = 100 },
      { op = "count" },
    ] },
    { op = "access", region = "buf", pattern = "strided", stride = 128, mode = "write", count = 5, offset = 64, len = 1024 },
  ] },
  { op = "fork", core = 0, daemon = true, program = [
    { op = "mmap", region = "child-only", bytes = 8192 },
    { op = "loop", count = 0, body = [{ op = "access", region = "buf", count = 1 }, { op = "block", cycles = 1000 }] },
  ] },
  { op = "fork", program = [{ op = "access", region = "data", pattern = "random", count = 4 }, { op = "exit" }] },
  { op = "mprotect", region = "heap", writable = false },
  { op = "madvise", region = "heap", advice = "dontneed" },
  { op = "msync", region = "data" },
  { op = "migrate-thread", core = 0 },
  { op = "migrate-pages", region = "heap", node = 0 },
  { op = "munmap", region = "buf" },
  { op = "exit" },
]

[[workload.scenario.process.thread]]
name = "helper"
daemon = true
program = [{ op = "loop", count = 0, body = [{ op = "mmap", region = "other", bytes = 4096 }, { op = "munmap", region = "other" }] }]

[[workload.scenario.process]]
name = "q"
[[workload.scenario.process.thread]]
name = "solo"
program = [{ op = "count" }]
"#;

#[test]
fn scenario_compiles_to_flat_programs_and_slots() {
    let w = workload(toml_tree(SCENARIO));
    // Groups: root first, then the user's; files by name.
    assert_eq!(w.groups.iter().map(|g| (g.name.as_str(), g.limit_pages)).collect::<Vec<_>>(), vec![("root", 0), ("small", 8 * 256)]);
    assert_eq!((w.processes[0].group, w.processes[1].group), (1, 0));
    assert_eq!(w.files[0].pages, 16);
    let p = &w.processes[0];
    assert_eq!(p.regions[1].backing, Backing::File { file: 0, offset_pages: 4 });
    assert!(p.regions[1].shared && !p.regions[1].writable && p.regions[0].writable && !p.regions[0].shared);
    // Slots: heap, data (regions), then buf, child-only, other in first-mention order.
    assert_eq!(w.slots, 5);
    let main = &p.threads[0];
    assert_eq!((main.class.as_str(), main.core, main.daemon), ("io", Some(1), false));
    assert_eq!(p.threads[1].class, "helper", "the class defaults to the thread's name");
    let prog = &w.programs[main.program];
    assert_eq!(prog[0], Op::Mmap { slot: 2, spec: prog[0].clone().spec() });
    // Nested loops, flat: the outer body is 5 operations (access, inner loop header + 2, access).
    assert_eq!(prog[1], Op::Loop { count: 3, body: 5 });
    assert_eq!(prog[2], Op::Access { slot: 0, pattern: Pattern::Zipf { theta: 0.8 }, mode: AccessMode::Mixed(0.25), count: 10, offset: 0, len: 0, stride: 64 });
    assert_eq!(prog[3..6], [Op::Loop { count: 2, body: 2 }, Op::Compute { cycles: 100 }, Op::CountOp]);
    assert_eq!(prog[6], Op::Access { slot: 2, pattern: Pattern::Strided, mode: AccessMode::Write, count: 5, offset: 64, len: 1024, stride: 128 });
    assert_eq!(counted_ops(prog), Some(6));
    // Fork children: their own programs; the daemon one is listed as such.
    let Op::Fork { program: daemon_child, core: Some(0) } = prog[7] else { panic!("{:?}", prog[7]) };
    let Op::Fork { program: child, core: None } = prog[8] else { panic!("{:?}", prog[8]) };
    assert_eq!(w.daemon_programs, vec![daemon_child]);
    assert_eq!(w.programs[daemon_child][0], Op::Mmap { slot: 3, spec: w.programs[daemon_child][0].clone().spec() });
    assert_eq!(w.programs[daemon_child][1], Op::Loop { count: 0, body: 2 });
    assert!(matches!(w.programs[daemon_child][2], Op::Access { slot: 2, .. }), "the child sees the parent's buf");
    assert_eq!(w.programs[child][0], Op::Access { slot: 1, pattern: Pattern::Random, mode: AccessMode::Read, count: 4, offset: 0, len: 0, stride: 64 });
    assert_eq!(
        prog[9..],
        [
            Op::Mprotect { slot: 0, writable: false },
            Op::MadviseDontneed { slot: 0 },
            Op::Msync { slot: 1 },
            Op::MigrateThread { core: 0 },
            Op::MigratePages { slot: 0, node: 0 },
            Op::Munmap { slot: 2 },
            Op::Exit,
        ]
    );
    let helper = &w.programs[p.threads[1].program];
    assert!(matches!(helper[1], Op::Mmap { slot: 4, .. }));
    assert_eq!(w.programs[w.processes[1].threads[0].program], vec![Op::CountOp]);
}

trait Spec {
    fn spec(self) -> tlbsim_core::workload::program::MapSpec;
}

impl Spec for Op {
    fn spec(self) -> tlbsim_core::workload::program::MapSpec {
        match self {
            Op::Mmap { spec, .. } => spec,
            op => panic!("expected an mmap, got {op:?}"),
        }
    }
}

#[test]
fn scenario_round_trips_through_the_effective_config() {
    let cfg = resolve(toml_tree(SCENARIO)).unwrap();
    let again = resolve(cfg.to_json()).unwrap();
    assert_eq!(cfg, again);
    assert_eq!(build(&cfg).unwrap(), build(&again).unwrap());
}

#[test]
fn example_scenario_file_parses_and_compiles() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/scenario-example.toml");
    let tree = load_toml_file(&path).unwrap();
    let cfg = Config::resolve(tree, &[], path.parent().unwrap()).unwrap_or_else(|e| panic!("{e}"));
    let w = build(&cfg).unwrap();
    assert_eq!(w.processes.len(), 2);
    assert_eq!(w.daemon_programs.len(), 1);
}

/// A one-process scenario whose one thread runs `program` (TOML inline array).
fn one_thread(thread_extra: &str, program: &str) -> Value {
    toml_tree(&format!(
        r#"
[workload]
kind = "scenario"
[[workload.scenario.process]]
name = "p"
region = [{{ name = "heap", bytes = 4096 }}]
[[workload.scenario.process.thread]]
name = "a"
program = [{{ op = "count" }}]
[[workload.scenario.process.thread]]
name = "b"
{thread_extra}
program = {program}
"#
    ))
}

#[test]
fn scenario_errors_name_the_key() {
    let at = "workload.scenario.process[0].thread[1]";
    let cases: Vec<(Value, String, &str)> = vec![
        // Unknown keys, at any depth.
        (
            one_thread("", r#"[{ op = "count" }, { op = "count" }, { op = "access", region = "heap", count = 1, patern = "random" }]"#),
            format!("{at}.program[2].patern"),
            "unknown key",
        ),
        (one_thread("colour = 1", r#"[{ op = "count" }]"#), format!("{at}.colour"), "unknown key"),
        (
            one_thread("", r#"[{ op = "loop", count = 2, body = [{ op = "compute", cycles = 1, speed = 2 }] }]"#),
            format!("{at}.program[0].body[0].speed"),
            "unknown key",
        ),
        // Bad values.
        (
            one_thread("", r#"[{ op = "count" }, { op = "count" }, { op = "access", region = "heap", count = 1, pattern = "zigzag" }]"#),
            format!("{at}.program[2].pattern"),
            "zigzag",
        ),
        (one_thread("", r#"[{ op = "jump" }]"#), format!("{at}.program[0].op"), "jump"),
        (one_thread("", r#"[{ op = "access", region = "heap", count = -1 }]"#), format!("{at}.program[0].count"), ""),
        // A key the operation does not take; a key it needs.
        (one_thread("", r#"[{ op = "compute", cycles = 5, pattern = "random" }]"#), format!("{at}.program[0].pattern"), "not a key of op \"compute\""),
        (one_thread("", r#"[{ op = "compute" }]"#), format!("{at}.program[0].cycles"), "needs it"),
        (one_thread("", r#"[{ op = "access", region = "heap", count = 1, mode = "mixed" }]"#), format!("{at}.program[0].write_fraction"), "needs it"),
        // Unknown region names.
        (one_thread("", r#"[{ op = "access", region = "hepa", count = 1 }]"#), format!("{at}.program[0].region"), "unknown region \"hepa\""),
        (
            one_thread(
                "",
                r#"[{ op = "fork", program = [{ op = "mmap", region = "mine", bytes = 4096 }, { op = "exit" }] }, { op = "munmap", region = "mine" }]"#,
            ),
            format!("{at}.program[1].region"),
            "unknown region \"mine\"",
        ),
        // Loops forever only in daemons.
        (one_thread("", r#"[{ op = "loop", count = 0, body = [{ op = "count" }] }]"#), format!("{at}.program[0].count"), "daemon"),
        (
            one_thread("daemon = true", r#"[{ op = "fork", program = [{ op = "loop", count = 0, body = [{ op = "count" }] }] }]"#),
            format!("{at}.program[0].program[0].count"),
            "daemon",
        ),
        (one_thread("", r#"[{ op = "loop", count = 2, body = [] }]"#), format!("{at}.program[0].body"), "at least one"),
        // Cores and nodes that do not exist (the default machine: 2 cores, 1 node).
        (one_thread("core = 2", r#"[{ op = "count" }]"#), format!("{at}.core"), "core 2 does not exist"),
        (one_thread("", r#"[{ op = "migrate-thread", core = 7 }]"#), format!("{at}.program[0].core"), "core 7 does not exist"),
        (one_thread("", r#"[{ op = "fork", core = 9, program = [{ op = "exit" }] }]"#), format!("{at}.program[0].core"), "core 9"),
        (one_thread("", r#"[{ op = "migrate-pages", region = "heap", node = 1 }]"#), format!("{at}.program[0].node"), "node 1 does not exist"),
        // Files and groups.
        (one_thread("", r#"[{ op = "mmap", region = "f", bytes = 4096, file = "nofile" }]"#), format!("{at}.program[0].file"), "no file named"),
    ];
    for (tree, want_key, want_msg) in cases {
        let (key, message) = config_error(resolve(tree));
        assert_eq!(key, want_key, "{message}");
        assert!(message.contains(want_msg), "{key}: {message}");
    }
    let (key, msg) = config_error(resolve(toml_tree(
        "[workload]\nkind = \"scenario\"\n[[workload.scenario.process]]\nname = \"p\"\ngroup = \"g\"\n[[workload.scenario.process.thread]]\nname = \"t\"\nprogram = [{ op = \"count\" }]\n",
    )));
    assert_eq!((key.as_str(), msg.contains("no group named \"g\"")), ("workload.scenario.process[0].group", true));
    let (key, _) = config_error(resolve(toml_tree("[workload]\nkind = \"scenario\"\n[workload.scenario]\n")));
    assert_eq!(key, "workload.scenario.process");
    let (key, _) = config_error(resolve(toml_tree(
        "[workload]\nkind = \"scenario\"\n[[workload.scenario.file]]\nname = \"f\"\npages = 1\n[[workload.scenario.process]]\nname = \"p\"\nregion = [{ name = \"r\", bytes = 8192, file = \"f\" }]\n[[workload.scenario.process.thread]]\nname = \"t\"\nprogram = [{ op = \"count\" }]\n",
    )));
    assert_eq!(key, "workload.scenario.process[0].region[0].bytes");
}

/// Keys renamed out of the scenario language (`fpr` → `recyclable`, a process's
/// `mitosis_replicas` → `page_tables.replica_sockets`) are refused with an error that
/// names the old key and the new one; the new keys compile to the same workload fields.
#[test]
fn retired_scenario_keys_name_their_replacement() {
    let at = "workload.scenario.process[0].thread[1]";
    let (key, msg) = config_error(resolve(one_thread("", r#"[{ op = "mmap", region = "m", bytes = 4096, fpr = true }]"#)));
    assert_eq!(key, format!("{at}.program[0].fpr"), "{msg}");
    assert!(msg.contains("recyclable"), "{msg}");
    let region = |key: &str| {
        toml_tree(&format!(
            "[workload]\nkind = \"scenario\"\n[[workload.scenario.process]]\nname = \"p\"\nregion = [{{ name = \"r\", bytes = 4096, {key} = true }}]\n[[workload.scenario.process.thread]]\nname = \"t\"\nprogram = [{{ op = \"count\" }}]\n"
        ))
    };
    let (key, msg) = config_error(resolve(region("fpr")));
    assert_eq!(key, "workload.scenario.process[0].region[0].fpr", "{msg}");
    assert!(msg.contains("recyclable"), "{msg}");
    assert!(build(&resolve(region("recyclable")).unwrap()).unwrap().processes[0].regions[0].recyclable);
    let w = build(&resolve(one_thread("", r#"[{ op = "mmap", region = "m", bytes = 4096, recyclable = true }, { op = "count" }]"#)).unwrap()).unwrap();
    assert!(w.programs.iter().flatten().any(|op| matches!(op, Op::Mmap { spec, .. } if spec.recyclable)));
    let process = |extra: &str| {
        toml_tree(&format!(
            "[workload]\nkind = \"scenario\"\n[[workload.scenario.process]]\nname = \"p\"\n{extra}\n[[workload.scenario.process.thread]]\nname = \"t\"\nprogram = [{{ op = \"count\" }}]\n"
        ))
    };
    let (key, msg) = config_error(resolve(process("mitosis_replicas = [0]")));
    assert_eq!(key, "workload.scenario.process[0].mitosis_replicas", "{msg}");
    assert!(msg.contains("page_tables.replica_sockets"), "{msg}");
    let w = build(&resolve(process("page_tables = { replica_sockets = [0] }")).unwrap()).unwrap();
    assert_eq!(w.processes[0].page_tables.replica_sockets, Some(vec![0]));
    let (key, msg) = config_error(resolve(process("page_tables = { replicas = [0] }")));
    assert!(key.starts_with("workload.scenario.process[0].page_tables"), "{key}: {msg}");
}

#[test]
fn check_rejects_a_non_daemon_that_loops_forever() {
    let mut w = workload(json!({"workload": {"kind": "shootdown-patterns", "pattern": "munmap-4k"}}));
    let spin = w.processes[0].threads[1].program;
    w.processes[0].threads[1].daemon = false;
    assert!(w.check(2).unwrap_err().contains(&format!("program[{spin}].op[0]")));
    // A fork child not listed as a daemon must end too.
    let mut w = workload(json!({"workload": {"kind": "shootdown-patterns", "pattern": "cow-sleep", "ops": 3}}));
    w.daemon_programs.clear();
    assert!(w.check(2).unwrap_err().contains("never end"));
}

#[test]
fn every_stamp_program_builds_and_bad_names_are_refused() {
    for test in ["genome", "vacation", "labyrinth"] {
        let w = workload(json!({"machine": {"cores_per_socket": 4}, "workload": {"kind": "stm-mprotect", "test": test, "threads": 4}}));
        let threads: Vec<_> = w.processes.iter().flat_map(|p| &p.threads).collect();
        assert_eq!(threads.len(), 4, "{test}");
        for t in threads {
            let prog = &w.programs[t.program];
            // The parallel phase starts at a barrier, after thread 0's set-up.
            let first_barrier = prog.iter().position(|op| *op == Op::Barrier).unwrap_or_else(|| panic!("{test}: no barrier"));
            assert!(prog[..first_barrier].iter().all(|op| matches!(op, Op::Access { .. })), "{test}");
            assert!(prog.iter().any(|op| matches!(op, Op::Mprotect { writable: false, .. })), "{test}");
        }
    }
    let tree = json!({"workload": {"kind": "stm-mprotect", "test": "bayes"}});
    let err = match resolve(tree) {
        Err(e) => e.to_string(),
        Ok(cfg) => build(&cfg).unwrap_err().to_string(),
    };
    assert!(err.contains("workload.test") && err.contains("bayes"), "{err}");
}

#[test]
fn scenario_barrier_compiles_and_runs() {
    let text = r#"
[workload]
kind = "scenario"
[[workload.scenario.process]]
name = "p"
[[workload.scenario.process.thread]]
name = "a"
program = [{ op = "compute", cycles = 50000 }, { op = "barrier" }, { op = "count" }, { op = "exit" }]
[[workload.scenario.process.thread]]
name = "b"
program = [{ op = "barrier" }, { op = "count" }, { op = "exit" }]
"#;
    let tree = toml_tree(text);
    let w = workload(tree.clone());
    let b = &w.processes[0].threads[1];
    assert_eq!(w.programs[b.program][0], Op::Barrier);
    let stats = tlbsim_core::run(tree, &[], Path::new(".")).unwrap().stats;
    // b waited at the barrier for a's compute.
    assert!(stats["per_thread"][1]["end_cycle"].as_u64().unwrap() >= 50_000, "{}", stats["per_thread"]);
    let bad = toml_tree(&text.replace(r#"{ op = "barrier" }, { op = "count" }, { op = "exit" }]"#, r#"{ op = "barrier", count = 2 }]"#));
    let err = match resolve(bad) {
        Err(e) => e.to_string(),
        Ok(c) => build(&c).err().map(|e| e.to_string()).unwrap_or_default(),
    };
    assert!(err.contains("count"), "{err}");
}
