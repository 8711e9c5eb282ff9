//! `workload.kind = "ycsb"`: FPR §V-B (Fig. 21), YCSB (load, a, b, c) on a LevelDB-like
//! (`test = "leveldb"`) or LMDB-like (`"lmdb"`) key-value store that reads its data
//! through mmap'd files, in a memory group small enough that reclaim evicts page-cache
//! pages. Modelled: LMDB's single memory map and B+tree walk; LevelDB's table cache of
//! mapped 2 MiB tables and its memtable. Simplified: LevelDB's one process-wide table
//! cache is a per-thread LRU of the same size (the IR's slots are per thread), and the
//! request mix and cache decisions are drawn when the workload is built ([`ycsb`]).

use crate::config::Config;
use crate::error::{Error, Result};
use crate::workload::builder::{anon, check_range, file_map, threads_or_cores, Builder, PAGE};
use crate::workload::program::{AccessMode, Op, Pattern, Workload};

crate::params! {
    /// `workload.kind = "ycsb"`.
    pub struct YcsbParams {
        /// The store: `leveldb` (the default when empty) or `lmdb`.
        pub test: String = String::new(),
        /// The YCSB workload: `load` (inserts only), `a` (50% reads, 50% updates), `b`
        /// (95/5) or `c` (reads only).
        pub ycsb: String = "c".into(),
        /// Client threads, pinned one per core; 0 = one per core.
        pub threads: u32 = 0,
        /// Bytes of the store's data.
        pub region_bytes: u64 = 64 << 20,
        /// The memory group's limit in MiB; 0 = a quarter of `region_bytes`, rounded up.
        pub memory_limit_mib: u64 = 0,
        /// leveldb: tables the table cache keeps open (mapped), over all threads; 0 = a
        /// quarter of the tables.
        pub table_cache: u64 = 0,
        /// Requests each thread makes.
        pub ops: u64 = 1_000,
        /// Cycles of a request's work besides its memory accesses.
        pub compute_cycles: u64 = 20_000,
    }
}

/// LevelDB's table size (`max_file_size`, 2 MiB by default): each table is a file of its own.
const LEVELDB_TABLE_PAGES: u64 = (2 << 20) / PAGE;
/// LevelDB's write buffer (4 MiB by default): the memtable, filled by inserts and updates,
/// then written out as a new table.
const LEVELDB_MEMTABLE_PAGES: u64 = (4 << 20) / PAGE;
/// Records per memtable: the write buffer over YCSB's default record (10 fields of 100
/// bytes, about 1 KiB).
const LEVELDB_RECORDS_PER_MEMTABLE: u64 = 4096;
/// LevelDB's data blocks hold about 4 KiB (`block_size`): a YCSB record of ~1 KiB with its
/// key makes blocks of 4 records, about 500 per 2 MiB table. The index block has one entry
/// per data block (`index_block_restart_interval` 1: its key, ~30 bytes, and the block's
/// handle) and ends the table: about 18 KiB, the table's last 5 pages.
const LEVELDB_INDEX_PAGES: u64 = 5;
/// A read's binary search of the index block (table/block.cc `Block::Iter::Seek`): one
/// probe per halving of its ~500 restart points.
const LEVELDB_INDEX_PROBES: u64 = 9;
/// Lines a read takes from its data block: the block's restart array and the entries
/// scanned to the key (about 2 of 4), then the 1,000-byte value copied out (16 lines).
const LEVELDB_DATA_BLOCK_LINES: u64 = 18;
/// An LMDB branch page holds about 100 keys (4 KiB pages, YCSB's 23-byte keys and their
/// page pointers) **[inferred]**: the levels above the leaves are the file's first 1/100.
const LMDB_FANOUT: u64 = 100;

/// FPR §V-B (Fig. 21): YCSB (`ycsb` = load, a, b, c) on a key-value store that reads its
/// data through mmap'd files, `test` = `leveldb` or `lmdb`. The store's data is
/// `region_bytes` (default 64 MiB) of files on `machine.storage`; the process runs in a
/// memory group of `memory_limit_mib` (default a quarter of the data **[inferred]**), so
/// page-cache pages are evicted by reclaim as in the paper's larger-than-memory runs. `threads` client threads
/// (default one per core, pinned, class "client") each do `ops` operations (default
/// 1,000); one operation = one YCSB request (a read, an update or an insert, drawn per
/// thread from the run's seed), followed by `compute_cycles` of the store's and client's
/// own work (default 20,000 **[inferred]**: key comparison, checksums, YCSB's bookkeeping).
/// Every file mmap passes MAP_FPR (FPR's interception library; it means nothing unless
/// the run sets `os.recycling = "fpr"`).
///
/// - `lmdb`: one file, mapped shared read-only once (LMDB's single memory map). A read
///   walks the B+tree: the root page, a branch page (the first 1/`LMDB_FANOUT` of the
///   file), a random leaf page. An update or insert walks the same path and writes the
///   leaf through `pwrite` (LMDB's default without MDB_WRITEMAP), which the model charges as
///   a second compute step: the page-cache page changes, no page-table entry does.
/// - `leveldb`: the data is `region_bytes / 2 MiB` tables, each a 2 MiB file. The table
///   cache (`table_cache` open tables, default half of them **[inferred]**: the paper
///   does not give its database's size) maps a table when it opens it and unmaps it when it
///   evicts it: the munmaps FPR skips. LevelDB's cache is one LRU for the process; here
///   each thread keeps an LRU of that size of its own mappings (the IR's region slots are
///   per thread), which keeps LevelDB's miss rate (1 - cache/tables for uniform requests)
///   but not its sharing of a table's mapping among threads. A read picks a
///   random table, opens it if it is not cached (evicting the least recently used), then
///   searches the memtable (about 1.5 log2(n) random entries of its filled part), the
///   table's index block (9 probes over its last 5 pages) and one random data block (18
///   lines: its entries scanned and the value copied out; the copy's destination, a heap
///   buffer always in the TLB, is not modelled). Until session 38 a read took one line of
///   the index and one of a data block: held against a recording of LevelDB under YCSB-B
///   (`make generators`), that was a tenth of the real program's TLB misses per
///   instruction. An update or
///   insert writes its record (about 1 KiB) into the memtable's arena (anonymous, 4 MiB),
///   filled in order; every
///   `LEVELDB_RECORDS_PER_MEMTABLE / threads` writes of a thread, the memtable is written
///   out and compacted **[inferred]**: the thread's memtable pages are dropped
///   (madvise(MADV_DONTNEED), the freed memtable) and its open tables are unmapped (the
///   compaction replaced them).
///
/// The table-cache LRU and the request mix are decided when the workload is built (the
/// intermediate representation has no branches), per thread, from the run's seed.
pub(super) fn ycsb(cfg: &Config, w: &YcsbParams) -> Result<Workload> {
    let test = if w.test.is_empty() { "leveldb" } else { w.test.as_str() };
    if test != "leveldb" && test != "lmdb" {
        return Err(Error::config("workload.test", format!("{test:?}: ycsb runs \"leveldb\" or \"lmdb\"")));
    }
    // Percent of requests that read (the rest update or insert).
    let read_percent = match w.ycsb.as_str() {
        "load" => 0,
        "a" => 50,
        "b" => 95,
        "c" => 100,
        m => return Err(Error::config("workload.ycsb", format!("{m:?}: use \"load\", \"a\", \"b\" or \"c\""))),
    };
    check_range("workload.region_bytes", w.region_bytes, 2 << 20, 1 << 40)?;
    let threads = threads_or_cores(cfg, w.threads);
    let (ops, cycles) = (w.ops, w.compute_cycles);
    let limit_mib = if w.memory_limit_mib == 0 { (w.region_bytes / 4).div_ceil(1 << 20).max(1) } else { w.memory_limit_mib };
    check_range("workload.memory_limit_mib", limit_mib, 1, 1 << 30)?;
    let mut b = Builder::default();
    b.group("root", 0);
    let group = b.group("ycsb", limit_mib * 256);
    let cores = cfg.cores();
    let pages = w.region_bytes.div_ceil(PAGE);
    let line = |slot: usize, offset: u64, len: u64, mode: AccessMode| Op::Access { slot, pattern: Pattern::Random, mode, count: 1, offset, len, stride: 8 };
    if test == "lmdb" {
        let file = b.file("data.mdb", pages);
        let branch_pages = (pages / LMDB_FANOUT).max(1);
        let process = b.process("lmdb", group, vec![file_map(file, 0, pages * PAGE, true, false).recyclable()]);
        for t in 0..threads {
            let mut rng = crate::rng::SplitMix64::derive(cfg.seed, 0x9c5b_0000 + t as u64);
            let mut prog = Vec::new();
            for _ in 0..ops {
                prog.push(line(0, 0, PAGE, AccessMode::Read));
                prog.push(line(0, PAGE, branch_pages * PAGE, AccessMode::Read));
                prog.push(line(0, 0, pages * PAGE, AccessMode::Read));
                prog.push(Op::Compute { cycles });
                if rng.below(100) >= read_percent {
                    prog.push(Op::Compute { cycles });
                }
                prog.push(Op::CountOp);
            }
            prog.push(Op::Exit);
            let program = b.program(prog);
            b.thread(process, &format!("client{t}"), "client", Some(t % cores), program, false);
        }
        return Ok(b.finish());
    }
    let tables = (pages / LEVELDB_TABLE_PAGES).max(1);
    let cache = if w.table_cache == 0 { (tables / 2).max(1) } else { w.table_cache };
    check_range("workload.table_cache", cache, 1, 1 << 20)?;
    let per_thread = cache.min(tables) as usize;
    let file = b.file("tables.ldb", tables * LEVELDB_TABLE_PAGES);
    // Slot 0: the memtable (each thread's own, as a stand-in for its share of the one
    // memtable); slots 1..=per_thread: the thread's open tables.
    let memtable = anon(LEVELDB_MEMTABLE_PAGES * PAGE, true);
    let process = b.process("leveldb", group, vec![]);
    let flush_every = (LEVELDB_RECORDS_PER_MEMTABLE / threads as u64).max(1);
    for t in 0..threads {
        let mut rng = crate::rng::SplitMix64::derive(cfg.seed, 0x1e7d_0000 + t as u64);
        let mut prog = vec![Op::Mmap { slot: 0, spec: memtable }];
        // The thread's table cache: (table, last use) per slot.
        let mut open: Vec<Option<(u64, u64)>> = vec![None; per_thread];
        let mut writes = 0u64;
        for op in 0..ops {
            if rng.below(100) < read_percent {
                let table = rng.below(tables);
                let slot = match open.iter().position(|s| s.is_some_and(|(tb, _)| tb == table)) {
                    Some(i) => i,
                    None => {
                        // Evict the least recently used (or take a free slot) and open.
                        let i = (0..per_thread).min_by_key(|&i| open[i].map_or(0, |(_, used)| used + 1)).unwrap_or(0);
                        if open[i].is_some() {
                            prog.push(Op::Munmap { slot: 1 + i });
                        }
                        let spec = file_map(file, table * LEVELDB_TABLE_PAGES, LEVELDB_TABLE_PAGES * PAGE, true, false).recyclable();
                        prog.push(Op::Mmap { slot: 1 + i, spec });
                        i
                    }
                };
                open[slot] = Some((table, op));
                // DBImpl::Get: the memtable first (a skiplist search, db/skiplist.h: with
                // branching 4, about 1.5 log2(n) nodes, each comparison reading the key of
                // a ~1 KiB entry allocated on its own), over the records of the one
                // memtable all threads fill (this thread's region stands for it).
                let filled = writes % flush_every;
                if filled > 0 {
                    let shared = (filled * threads as u64).max(2);
                    let probes = (3 * u64::from(shared.ilog2()) / 2).max(1);
                    prog.push(Op::Access {
                        slot: 0,
                        pattern: Pattern::Random,
                        mode: AccessMode::Read,
                        count: probes,
                        offset: 0,
                        len: filled * 1024,
                        stride: 8,
                    });
                }
                // Not there (a YCSB-B read of a record loaded, not updated): the table's
                // index block, then one data block (table/table.cc InternalGet).
                let index = LEVELDB_TABLE_PAGES - LEVELDB_INDEX_PAGES;
                prog.push(Op::Access {
                    slot: 1 + slot,
                    pattern: Pattern::Random,
                    mode: AccessMode::Read,
                    count: LEVELDB_INDEX_PROBES,
                    offset: index * PAGE,
                    len: LEVELDB_INDEX_PAGES * PAGE,
                    stride: 8,
                });
                let block = rng.below(index);
                prog.push(Op::Access {
                    slot: 1 + slot,
                    pattern: Pattern::Sequential,
                    mode: AccessMode::Read,
                    count: LEVELDB_DATA_BLOCK_LINES,
                    offset: block * PAGE,
                    len: PAGE,
                    stride: 64,
                });
            } else {
                // The record goes into the memtable's arena, filled in order (a skiplist
                // node of about 1 KiB each).
                let record = writes % flush_every;
                prog.push(line(0, record * 1024, 1024, AccessMode::Write));
                writes += 1;
                if writes.is_multiple_of(flush_every) {
                    prog.push(Op::MadviseDontneed { slot: 0 });
                    for (i, s) in open.iter_mut().enumerate() {
                        if s.take().is_some() {
                            prog.push(Op::Munmap { slot: 1 + i });
                        }
                    }
                }
            }
            prog.push(Op::Compute { cycles });
            prog.push(Op::CountOp);
        }
        prog.push(Op::Exit);
        let program = b.program(prog);
        b.thread(process, &format!("client{t}"), "client", Some(t % cores), program, false);
    }
    Ok(b.finish())
}
