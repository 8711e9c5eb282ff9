//! `workload.kind = "parsec-like"`: PARSEC 3.0 programs as they use memory (ABIS §5.4,
//! Fig. 8), so that their page faults and shootdowns come from what the program and its
//! allocator do, not from a rate. `workload.test` picks the program:
//!
//! - **`dedup`** (PARSEC's pthreads encoder, pkgs/kernels/dedup/src/encoder.c; the
//!   `-t threads` pipeline Fragment → FragmentRefine → Deduplicate → Compress → Reorder,
//!   one thread at each end and `threads` in each middle stage):
//!   - *Fragment* reads the input `region_bytes` (native: 672 MB) into buffers of
//!     MAXBUF = 128 MB (each a malloc above the mmap threshold: a mapping of its own, made
//!     when Fragment reaches it) and
//!     cuts them into coarse chunks ANCHOR_JUMP = 2 MB apart.
//!   - *Refine* reads each coarse chunk (Rabin fingerprints) and cuts it into fine chunks at
//!     anchors: a 32-byte window whose fingerprint has its low 12 bits clear (rabin.h's
//!     NWINDOW and RabinMask), so a fine chunk is 32 bytes plus a geometric length of mean
//!     4 KiB; one `chunk_t` (192 bytes) is malloc'd per fine chunk, in the refiner's arena.
//!   - *Deduplicate* reads each fine chunk (SHA-1) and looks it up in the hash table under
//!     its bucket's lock; a duplicate skips compression. The native input (a Fedora Core 6
//!     disc image) has runs of zero bytes, and a window of zeros has a zero fingerprint, so
//!     Refine cuts them into 32-byte chunks, all identical: all in one bucket, whose lock
//!     (a pthread mutex: `Op::Take`/`Op::Post`, a contended taker sleeps) every
//!     deduplicator meeting them takes (Clements, parsec-users, July 2011: about 200,000
//!     such chunks, "lock contention ... that severely limits the scalability").
//!   - *Compress* runs zlib's compress() on each unique chunk (sub_Compress): malloc of the
//!     output buffer (`n + n/512 + 12` bytes), deflateInit's five allocations (the state,
//!     5,936 bytes; window, prev, head and pending_buf, 64 KiB each, zlib 1.2.8 at level 6
//!     with memLevel 8), the compression (head is cleared whole, the window holds the input,
//!     prev 2 bytes per position, pending_buf the output and the symbol buffers), deflateEnd's
//!     frees in its order (pending_buf, head, prev, window, state), and realloc of the
//!     output to its compressed size. Then it drops its reference to the 128 MB buffer; the
//!     last one frees it (munmap).
//!   - *Reorder* writes the chunks out in input order (write_file: three write() calls a
//!     chunk, the last reading the compressed bytes or the SHA-1 of a duplicate) and frees
//!     each output buffer: a free into the compressing thread's arena, from another thread.
//!   - Every malloc and free is an operation the engine runs (`Op::Malloc`, `Op::Free`,
//!     `Op::Realloc`; os/alloc.rs over [`super::ptmalloc`]: one arena per thread, heap_trim
//!     giving back the top beyond 128 KiB with madvise(MADV_DONTNEED)), in the order the run
//!     makes them: the writer's frees land in each compressor's arena whenever the writer
//!     gets to them, between that compressor's own calls. So the shootdowns are heap trims,
//!     and the faults are the trimmed pages used again. `glibc` picks the library: "2.23"
//!     (the ABIS setup, `reproduce/abis`) or "2.36" (the default).
//!   - Pipeline order: the program's queues. Each stage has `ceil(threads / 4)` queues of up
//!     to MAX_THREADS_PER_QUEUE = 4 threads. Fragment sends coarse chunk `c` to refine queue
//!     `c % queues`; that queue's fine chunks go on in groups of 20 (ITEM_PER_FETCH and
//!     friends) to the same-numbered deduplication, compression and reorder queues. A queue's
//!     threads take its units in turn here (in the program, whichever thread asks first),
//!     and a thread with nothing to take sleeps (a completion token: `Op::Sleep`/`Op::Post`).
//!   - Until issue 46 item 6 the allocator ran when the programs were built, in an assumed
//!     order (a compressor's group `j + 2` compressed after the writer freed group `j`);
//!     that mode is gone: no paper's setup needs it.
//!   - One operation (`ops_completed`, per class): fragment, a coarse chunk handed out;
//!     refine, a coarse chunk cut; dedup, a group looked up; compress, a unique fine chunk
//!     compressed; reorder, a group written.
//!
//! CPU work between memory accesses, per byte: deflate at level 6, 114 cycles (lzbench's
//! published zlib 1.2.11 -6 figure, 35 MB/s on the Silesia corpus on a 4.0 GHz Core
//! i7-6700K); **[inferred]**: Rabin 6 (rabinseg's loop: two table lookups, shifts and
//! xors per byte), SHA-1 10 (OpenSSL's C code, about 300 MB/s at 3 GHz), write() 2, read()
//! of the input 1. Duplicate chunks: 20% **[inferred]**; compressed size: half
//! **[inferred]**. Sequential passes over data touch every `stride` bytes (default 64);
//! the allocator's buffers are touched once per page (their memset and fill cost is in
//! the cycles), so that the run stays affordable.
//!
//! Threads (dedup's `3 × threads + 2`, 98 at `-t 32`; canneal's): unpinned, placed
//! round-robin on every CPU of the machine and free to move wherever the scheduler puts
//! them (`os.balance = "linux"`: wake-up placement and newidle pulls, os/sched.rs). No CPU
//! set: ABIS §5.4 states none, and PARSEC's hooks library (pkgs/libs/hooks/src/hooks.c,
//! `__parsec_bench_begin`) calls sched_setaffinity only when `PARSEC_CPU_NUM` is set, and
//! then for a range of CPUs for the whole process.
//!
//! Simplified: the hash table and its locks; the output file's page cache; a group never
//! spans two coarse chunks (the program's send buffers fill across them).

use super::builder::{anon, check_range, times, Builder, PAGE};
use super::program::{AccessMode, Op, Pattern, Workload};
use super::ptmalloc::Glibc;
use crate::config::Config;
use crate::error::{Error, Result};

crate::params! {
    /// `workload.kind = "parsec-like"`.
    pub struct ParsecLikeParams {
        /// The program: `dedup` or `canneal`.
        pub test: String = String::new(),
        /// dedup: threads in each middle stage (`-t`); canneal: threads; 0 = 4.
        pub threads: u32 = 0,
        /// dedup: bytes of the input; canneal: bytes of the netlist's elements.
        pub region_bytes: u64 = 64 << 20,
        /// dedup: bytes between consecutive accesses when a stage reads a chunk.
        pub stride: u64 = 64,
        /// canneal: annealing steps; 0 = 5.
        pub ops: u64 = 0,
        /// dedup: the C library whose malloc runs, "2.23" (the ABIS paper's, Linux 4.5 era)
        /// or "2.36" (any 2.26 or later: heap_trim tests the trim threshold); "" = 2.36.
        pub glibc: String = String::new(),
    }
}

/// MAXBUF (dedupdef.h): the read buffer.
const READ_BUFFER: u64 = 128 << 20;
/// ANCHOR_JUMP (dedupdef.h): coarse chunks are this far apart.
const COARSE: u64 = 2 << 20;
/// rabin.h NWINDOW: the shortest fine chunk.
const WINDOW: u64 = 32;
/// 1 / P(anchor at a byte): RabinMask = 0xfff.
const MEAN_ANCHOR_GAP: f64 = 4096.0;
/// sizeof(chunk_t) on x86-64 with pthreads (header with mutex and condition variable, SHA-1,
/// two mbuffers, a reference, the sequence number), rounded.
const CHUNK_T: u64 = 192;
/// zlib 1.2.8 deflateInit2_ at level 6, windowBits 15, memLevel 8: sizeof(deflate_state),
/// then window (2 × 32 KiB), prev (32 Ki × 2 bytes), head (32 Ki × 2 bytes), pending_buf
/// (lit_bufsize 16 Ki × 4 bytes).
const DEFLATE_STATE: u64 = 5_936;
const DEFLATE_BUFFER: u64 = 64 << 10;
/// Where pending_buf's symbol buffers start (d_buf at lit_bufsize bytes, l_buf at 3 ×).
const D_BUF: u64 = 16 << 10;
const L_BUF: u64 = 48 << 10;

/// Cycles per byte: see the module header (deflate's from lzbench, the rest **[inferred]**).
const RABIN_CPB: u64 = 6;
const SHA1_CPB: u64 = 10;
const DEFLATE_CPB: u64 = 114;
const WRITE_CPB: u64 = 2;
const READ_CPB: u64 = 1;
/// Memset or copy of a buffer the model touches per page: 16 bytes per cycle.
const FILL_BYTES_PER_CYCLE: u64 = 16;
/// MAX_THREADS_PER_QUEUE (config.h): threads of a stage sharing one queue.
const PER_QUEUE: usize = 4;
/// ITEM_PER_FETCH, CHUNK_ANCHOR_PER_INSERT, ... (dedupdef.h): fine chunks move in groups of 20.
const GROUP: usize = 20;
/// A hash-table lookup (hashtable_search with its bucket's lock) **[inferred]**.
const LOOKUP_CYCLES: u64 = 300;
/// One small buffered write() to the page cache, about 1 µs at 2 GHz **[inferred]**.
const WRITE_CALL_CYCLES: u64 = 2_000;
/// Zero bytes in the native input (the Fedora Core 6 disc image): Clements (parsec-users,
/// July 2011) counts about 200,000 all-zero 32-byte chunks, 6.4 MB of 672 MB, in runs that
/// 60 KB chunks cut into about 80: runs of 64 KiB **[inferred]** making 0.95% of the input.
const ZERO_PER_100K: u64 = 950;
const ZERO_RUN: u64 = 64 << 10;
/// Duplicate share and compression ratio **[inferred]**.
const DUPLICATE_PERCENT: u64 = 20;
const COMPRESSED_PERCENT: u64 = 50;

pub fn parsec_like(cfg: &Config, w: &ParsecLikeParams) -> Result<Workload> {
    match w.test.as_str() {
        "dedup" => dedup(cfg, w),
        "canneal" => canneal(cfg, w),
        t => Err(Error::config("workload.test", format!("{t:?} is not a parsec-like program: use \"dedup\" or \"canneal\""))),
    }
}

/// Region slots of a dedup thread (its own table: the same slot means the same buffer
/// role in every thread) and the process's pointer names (workload/program.rs `Op::Malloc`).
struct Slots {
    n: usize,
    buffers: usize,
}

/// Slots: the read buffer, the output buffer, zlib's five, a chunk_t.
const SLOT_BUFFER: usize = 0;
const SLOT_OUT: usize = 1;
const SLOT_DEFLATE: usize = 2;
const SLOT_CHUNK_T: usize = 7;

impl Slots {
    /// Pointer of read buffer `b`.
    fn buffer(&self, b: usize) -> u32 {
        b as u32
    }
    /// Pointer of compressor `k`'s zlib allocation `i` (state, window, prev, head, pending).
    fn deflate(&self, k: usize, i: usize) -> u32 {
        (self.buffers + 5 * k + i) as u32
    }
    /// Pointer of the output of the `u`th unique chunk compressed (all compressors).
    fn out(&self, u: usize) -> u32 {
        (self.buffers + 5 * self.n + u) as u32
    }
}

/// One fine chunk: where it lies in its read buffer, and whether it is a duplicate.
#[derive(Clone, Copy)]
struct Fine {
    offset: u64,
    len: u64,
    duplicate: bool,
    /// Part of a run of zero bytes (module header).
    zero: bool,
}

/// A group of fine chunks of one coarse chunk, and the deduplicator and compressor (the
/// same index) that take it.
struct Group {
    coarse: usize,
    first: usize,
    len: usize,
    thread: usize,
}

fn dedup(cfg: &Config, w: &ParsecLikeParams) -> Result<Workload> {
    let n = if w.threads == 0 { 4 } else { w.threads as usize };
    let input = w.region_bytes / PAGE * PAGE;
    check_range("workload.region_bytes", input, COARSE, 1 << 36)?;
    check_range("workload.stride", w.stride, 1, 1 << 20)?;
    let stride = w.stride;
    let glibc = Glibc::parse("workload.glibc", &w.glibc)?;
    let buffers = input.div_ceil(READ_BUFFER) as usize;
    let coarse_chunks = input.div_ceil(COARSE) as usize;
    let slots = Slots { n, buffers };

    // Tokens: coarse chunks read (in order), and per thread of the middle stages its units
    // done.
    let fragmented = 0u32;
    let refined = |r: usize| 1 + r as u32;
    let deduped = |d: usize| 1 + (n + d) as u32;
    let compressed = |k: usize| 1 + (2 * n + k) as u32;
    // The hash-table bucket lock every all-zero chunk takes (a mutex: posted once, then
    // taken and posted back by each holder).
    let zero_bucket = 1 + 3 * n as u32;

    // Fine chunks of each coarse chunk, from the run's seed.
    let mut rng = crate::rng::SplitMix64::derive(cfg.seed, 0xded0_0000);
    let mut fine: Vec<Vec<Fine>> = Vec::with_capacity(coarse_chunks);
    // Runs of zero bytes: ZERO_RUN long, as many as make ZERO_PER_100K of the input, at
    // page-aligned places drawn from the seed (sorted; a run never crosses a coarse chunk).
    let runs = input * ZERO_PER_100K / 100_000 / ZERO_RUN;
    let mut zero_runs: Vec<u64> = (0..runs).map(|_| rng.below(input / PAGE) * PAGE).collect();
    zero_runs.sort_unstable();
    zero_runs.dedup();
    let mut next_run = 0;
    for c in 0..coarse_chunks {
        let start = c as u64 * COARSE;
        let end = (start + COARSE).min(input);
        let mut v = Vec::new();
        let mut at = start;
        while at < end {
            while next_run < zero_runs.len() && zero_runs[next_run] + ZERO_RUN <= at {
                next_run += 1;
            }
            if let Some(&run) = zero_runs.get(next_run).filter(|&&r| r <= at) {
                // A window of zeros has a zero fingerprint: an anchor every 32 bytes.
                let run_end = (run + ZERO_RUN).min(end);
                while at < run_end {
                    let len = WINDOW.min(run_end - at);
                    v.push(Fine { offset: at % READ_BUFFER, len, duplicate: true, zero: true });
                    at += len;
                }
                continue;
            }
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let gap = WINDOW + (-(1.0 - u).ln() * MEAN_ANCHOR_GAP) as u64;
            let mut len = gap.min(end - at);
            if let Some(&run) = zero_runs.get(next_run).filter(|&&r| r > at) {
                len = len.min(run - at);
            }
            let duplicate = rng.below(100) < DUPLICATE_PERCENT;
            v.push(Fine { offset: at % READ_BUFFER, len, duplicate, zero: false });
            at += len;
        }
        fine.push(v);
    }
    let buffer_of = |c: usize| (c as u64 * COARSE / READ_BUFFER) as usize;

    let pass = |slot: usize, mode: AccessMode, offset: u64, len: u64, stride: u64| Op::Access {
        slot,
        pattern: Pattern::Sequential,
        mode,
        count: len.div_ceil(stride).max(1),
        offset,
        len,
        stride,
    };
    // Write bytes [offset, offset + len) of a malloc'd buffer, once per page they span.
    let touch = |slot: usize, offset: u64, len: u64| Op::Access {
        slot,
        pattern: Pattern::Pages,
        mode: AccessMode::Write,
        count: 1,
        offset,
        len: len.max(1),
        stride: PAGE,
    };
    let compute = |cycles: u64| Op::Compute { cycles: cycles.max(1) };

    let mut fragment = Vec::new();
    let mut refine = vec![Vec::new(); n];
    let mut dedupe = vec![Vec::new(); n];
    let mut compress = vec![Vec::new(); n];
    let mut writer = Vec::new();

    // Fragment: read each buffer whole, then hand out its coarse chunks. (The bucket lock is
    // made free first: pthread_mutex_init.)
    fragment.push(Op::Post { token: zero_bucket });
    let buffer_len = |b: usize| (input - b as u64 * READ_BUFFER).min(READ_BUFFER);
    for b in 0..buffers {
        let len = buffer_len(b);
        // malloc(MAXBUF): above the mmap threshold, a mapping of its own.
        fragment.push(Op::Malloc { ptr: slots.buffer(b), bytes: len, slot: SLOT_BUFFER });
        fragment.push(pass(SLOT_BUFFER, AccessMode::Write, 0, len, stride));
        fragment.push(compute(len * READ_CPB));
        for _ in (b as u64 * READ_BUFFER / COARSE)..((b as u64 * READ_BUFFER + len).div_ceil(COARSE)) {
            fragment.push(Op::Post { token: fragmented });
            fragment.push(Op::CountOp);
        }
    }
    fragment.push(Op::Exit);

    // Work units and who does them (module header): coarse chunk c goes to refine queue
    // c % queues, taken by its refiners in turn; its fine chunks go on in groups of
    // `GROUP`, taken by that queue's deduplicators and compressors in turn.
    let queues = n.div_ceil(PER_QUEUE);
    let queue_threads = |q: usize| (q * PER_QUEUE)..((q + 1) * PER_QUEUE).min(n);
    let mut refiner_of = Vec::with_capacity(coarse_chunks);
    let mut groups: Vec<Group> = Vec::new();
    let mut turn_refine = vec![0usize; queues];
    let mut turn_group = vec![0usize; queues];
    for (c, chunks) in fine.iter().enumerate() {
        let q = c % queues;
        let ts: Vec<usize> = queue_threads(q).collect();
        refiner_of.push(ts[turn_refine[q] % ts.len()]);
        turn_refine[q] += 1;
        for (g, _) in chunks.chunks(GROUP).enumerate() {
            let t = ts[turn_group[q] % ts.len()];
            turn_group[q] += 1;
            groups.push(Group { coarse: c, first: g * GROUP, len: GROUP.min(chunks.len() - g * GROUP), thread: t });
        }
    }
    // Each thread's units in order, and a coarse chunk's place in its refiner's order.
    let mut refined_by: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut refine_place = Vec::with_capacity(coarse_chunks);
    for (c, &r) in refiner_of.iter().enumerate() {
        refine_place.push(refined_by[r].len());
        refined_by[r].push(c);
    }
    let mut grouped_by: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (g, group) in groups.iter().enumerate() {
        grouped_by[group.thread].push(g);
    }

    // Refine: whole coarse chunks; one chunk_t per fine chunk in the refiner's arena (never
    // freed here). Their pointer names follow the output buffers'.
    let unique: usize = fine.iter().flatten().filter(|f| !f.duplicate).count();
    let mut next_chunk_t = slots.out(unique);
    for r in 0..n {
        for &c in &refined_by[r] {
            let chunks = &fine[c];
            let start = c as u64 * COARSE % READ_BUFFER;
            let len: u64 = chunks.iter().map(|f| f.len).sum();
            let ops = &mut refine[r];
            ops.push(Op::Sleep { token: fragmented, count: c as u32 + 1 });
            ops.push(Op::UsePtr { slot: SLOT_BUFFER, ptr: slots.buffer(buffer_of(c)) });
            ops.push(pass(SLOT_BUFFER, AccessMode::Read, start, len, stride));
            ops.push(compute(len * RABIN_CPB));
            for _ in chunks {
                ops.push(Op::Malloc { ptr: next_chunk_t, bytes: CHUNK_T, slot: SLOT_CHUNK_T });
                ops.push(touch(SLOT_CHUNK_T, 0, CHUNK_T));
                next_chunk_t += 1;
            }
            ops.push(Op::Post { token: refined(r) });
            ops.push(Op::CountOp);
        }
        refine[r].push(Op::Exit);
    }
    // Deduplicate: groups, once their coarse chunk is refined.
    for d in 0..n {
        for &g in &grouped_by[d] {
            let group = &groups[g];
            let c = group.coarse;
            let ops = &mut dedupe[d];
            ops.push(Op::Sleep { token: refined(refiner_of[c]), count: refine_place[c] as u32 + 1 });
            let chunks = &fine[c][group.first..group.first + group.len];
            let len: u64 = chunks.iter().map(|f| f.len).sum();
            ops.push(Op::UsePtr { slot: SLOT_BUFFER, ptr: slots.buffer(buffer_of(c)) });
            ops.push(pass(SLOT_BUFFER, AccessMode::Read, chunks[0].offset, len, stride));
            // SHA-1 works in 64-byte blocks; each lookup holds its bucket's lock.
            let hashed: u64 = chunks.iter().map(|f| f.len.div_ceil(64) * 64).sum();
            ops.push(compute(hashed * SHA1_CPB + chunks.iter().filter(|f| !f.zero).count() as u64 * LOOKUP_CYCLES));
            for _ in chunks.iter().filter(|f| f.zero) {
                ops.push(Op::Take { token: zero_bucket });
                ops.push(compute(LOOKUP_CYCLES));
                ops.push(Op::Post { token: zero_bucket });
            }
            ops.push(Op::Post { token: deduped(d) });
            ops.push(Op::CountOp);
        }
        dedupe[d].push(Op::Exit);
    }

    // Compress, and the writer's frees, run by the engine's allocator (os/alloc.rs) in the
    // order the run makes them: the writer frees a group's outputs once its compressor has
    // posted it, whenever the writer gets there.
    let mut write_ops: Vec<Vec<Op>> = vec![Vec::new(); groups.len()];
    let mut last_group_of_buffer = vec![0usize; buffers];
    for (g, group) in groups.iter().enumerate() {
        last_group_of_buffer[buffer_of(group.coarse)] = g;
    }
    // Output pointers: the unique chunks in input order.
    let mut out_of: Vec<Vec<Option<u32>>> = Vec::with_capacity(coarse_chunks);
    let mut u = 0;
    for chunks in &fine {
        out_of.push(
            chunks
                .iter()
                .map(|f| {
                    (!f.duplicate).then(|| {
                        u += 1;
                        slots.out(u - 1)
                    })
                })
                .collect(),
        );
    }
    for k in 0..n {
        let mine = &grouped_by[k];
        for (j, &g) in mine.iter().enumerate() {
            let group = &groups[g];
            let c = group.coarse;
            let range = group.first..group.first + group.len;
            let ops = &mut compress[k];
            ops.push(Op::Sleep { token: deduped(k), count: j as u32 + 1 });
            ops.push(Op::UsePtr { slot: SLOT_BUFFER, ptr: slots.buffer(buffer_of(c)) });
            for (f, out) in fine[c][range.clone()].iter().zip(&out_of[c][range.clone()]) {
                let Some(out) = *out else { continue };
                let packed = (f.len * COMPRESSED_PERCENT / 100).max(1);
                let symbols = (f.len.min(D_BUF - 1) / 2).max(1);
                let [state, window, prev, head, pending] = [0, 1, 2, 3, 4].map(|i| SLOT_DEFLATE + i);
                ops.push(Op::Malloc { ptr: out, bytes: f.len + f.len / 512 + 12, slot: SLOT_OUT });
                for (i, bytes) in [DEFLATE_STATE, DEFLATE_BUFFER, DEFLATE_BUFFER, DEFLATE_BUFFER, DEFLATE_BUFFER].into_iter().enumerate() {
                    ops.push(Op::Malloc { ptr: slots.deflate(k, i), bytes, slot: SLOT_DEFLATE + i });
                }
                ops.push(touch(state, 0, DEFLATE_STATE));
                ops.push(touch(head, 0, DEFLATE_BUFFER));
                ops.push(pass(SLOT_BUFFER, AccessMode::Read, f.offset, f.len, stride));
                ops.push(touch(window, 0, f.len.min(DEFLATE_BUFFER)));
                ops.push(touch(prev, 0, (2 * f.len).min(DEFLATE_BUFFER)));
                ops.push(touch(pending, 0, packed.min(D_BUF)));
                ops.push(touch(pending, D_BUF, 2 * symbols));
                ops.push(touch(pending, L_BUF, symbols));
                ops.push(touch(SLOT_OUT, 0, packed));
                ops.push(compute(f.len * DEFLATE_CPB + (DEFLATE_STATE + DEFLATE_BUFFER + f.len) / FILL_BYTES_PER_CYCLE));
                // deflateEnd's order: pending_buf, head, prev, window, state.
                for i in [4, 3, 2, 1, 0] {
                    ops.push(Op::Free { ptr: slots.deflate(k, i) });
                }
                ops.push(Op::Realloc { ptr: out, bytes: packed });
                ops.push(Op::CountOp);
            }
            ops.push(Op::Post { token: compressed(k) });
            // The last reference to a read buffer goes with its last group: free (munmap)
            // once every compressor is past that buffer's groups.
            let b = buffer_of(c);
            if g == last_group_of_buffer[b] {
                for other in (0..n).filter(|&o| o != k) {
                    let done = grouped_by[other].iter().take_while(|&&x| buffer_of(groups[x].coarse) <= b).count();
                    if done > 0 {
                        ops.push(Op::Sleep { token: compressed(other), count: done as u32 });
                    }
                }
                ops.push(Op::Free { ptr: slots.buffer(b) });
            }
            // The writer's part for this group: once compressed, write and free each output.
            let w = &mut write_ops[g];
            w.push(Op::Sleep { token: compressed(k), count: j as u32 + 1 });
            let mut bytes = 0;
            for (f, out) in fine[c][range.clone()].iter().zip(&out_of[c][range]) {
                match *out {
                    Some(out) => {
                        let packed = (f.len * COMPRESSED_PERCENT / 100).max(1);
                        w.push(Op::UsePtr { slot: SLOT_OUT, ptr: out });
                        w.push(pass(SLOT_OUT, AccessMode::Read, 0, packed, stride));
                        w.push(Op::Free { ptr: out });
                        bytes += packed;
                    }
                    // A duplicate: its SHA-1 is written instead.
                    None => bytes += 20,
                }
            }
            // write_file: three write() calls a chunk (type, length, content).
            w.push(compute(bytes * WRITE_CPB + 3 * group.len as u64 * WRITE_CALL_CYCLES));
            w.push(Op::CountOp);
        }
    }
    for ops in write_ops {
        writer.extend(ops);
    }
    for ops in compress.iter_mut() {
        ops.push(Op::Exit);
    }
    writer.push(Op::Exit);

    let mut b = Builder::default();
    b.w.glibc = glibc;
    let root = b.group("root", 0);
    let process = b.process("dedup", root, Vec::new());
    let mut add = |name: String, class: &str, ops: Vec<Op>| {
        let program = b.program(ops);
        b.thread(process, &name, class, None, program, false);
    };
    add("fragment".into(), "fragment", fragment);
    for (t, ops) in refine.into_iter().enumerate() {
        add(format!("refine{t}"), "refine", ops);
    }
    for (t, ops) in dedupe.into_iter().enumerate() {
        add(format!("dedup{t}"), "dedup", ops);
    }
    for (t, ops) in compress.into_iter().enumerate() {
        add(format!("compress{t}"), "compress", ops);
    }
    add("reorder".into(), "reorder", writer);
    b.w.tokens = 2 + 3 * n as u32;
    Ok(b.finish())
}

// ---- canneal ----

/// Bytes of a netlist element over its structures (see `canneal`'s doc): the element in
/// `_elements` (88), its fan-in and fan-out arrays and the name map's node in the heap
/// (160), its location (8).
const CANNEAL_ELEMENT: u64 = 88;
const CANNEAL_HEAP_PER_ELEMENT: u64 = 160;
const CANNEAL_LOCATION: u64 = 8;
/// Elements the loader handles per batch of operations (only to keep programs short).
const CANNEAL_LOAD_BATCH: u64 = 1024;
/// Parsing one netlist line (ifstream >> name, type and fan-in names), cycles **[inferred]**.
const CANNEAL_PARSE_CYCLES: u64 = 3_000;
/// Name-map nodes read per element while loading (the std::map's lower levels; the upper
/// ones stay in the caches) **[inferred]**.
const CANNEAL_MAP_READS: u64 = 4;
/// Swaps per temperature step, over all threads (PARSEC's native run: `canneal 32 15000
/// 2000 2500000.nets 6000`).
const CANNEAL_SWAPS_PER_TEMP: u64 = 15_000;
/// Connections read per move (fan-in and fan-out of the two elements), **[inferred]** 5,
/// and the cost arithmetic per connection, 40 cycles **[inferred]**.
const CANNEAL_CONNECTIONS: u64 = 5;
const CANNEAL_COST_CYCLES: u64 = 40;

/// PARSEC's canneal (pkgs/kernels/canneal/src: netlist.cpp, annealer_thread.cpp) as it
/// uses memory:
/// - The netlist has `region_bytes / 256` elements (native: 2,500,000, so 640 MB). The main
///   thread loads it alone: `_elements` is one allocation of 88 bytes an element (a
///   mapping of its own, above the mmap threshold), each element's fan-in and fan-out
///   arrays and the name map's node grow the heap (160 bytes an element, written in
///   order), and each line's names are looked up in the map (`CANNEAL_MAP_READS` random
///   reads). Its pages are first-touched by that thread, so they sit on its node.
/// - Then `threads` annealers (native 32) each make `15000 / threads` moves per
///   temperature step and meet at a pthread barrier; one operation = one step of one
///   thread (the loader's: a batch of 1,024 elements loaded); `ops` = steps (native 6,000). A move (annealer_thread::Run): a random element,
///   its and its partner's connections (random reads of elements, their arrays and
///   locations), the cost arithmetic, and about one accepted swap in two (a write of two
///   elements' location pointers): per step these are issued as one batch of each kind.
/// - Nothing is allocated or freed while annealing: the shootdowns and most page faults of
///   a real run come from the kernel (AutoNUMA, `os.numa_balancing`), not the program.
/// Simplified: the annealers' reads and writes of one step are not interleaved; the
/// locations array is one region; the loader's map reads are uniform over the map's nodes.
fn canneal(_cfg: &Config, w: &ParsecLikeParams) -> Result<Workload> {
    let n = if w.threads == 0 { 4 } else { w.threads as u64 };
    check_range("workload.threads", n, 1, 1024)?;
    let per_element = CANNEAL_ELEMENT + CANNEAL_HEAP_PER_ELEMENT + CANNEAL_LOCATION;
    check_range("workload.region_bytes", w.region_bytes, CANNEAL_LOAD_BATCH * per_element, 1 << 40)?;
    let elements = w.region_bytes / per_element;
    let steps = if w.ops == 0 { 5 } else { w.ops };
    let page_up = |b: u64| b.div_ceil(PAGE) * PAGE;
    let region = |bytes: u64| anon(page_up(bytes), true);
    let (elems, heap, locs) = (0usize, 1usize, 2usize);
    let regions = vec![region(elements * CANNEAL_ELEMENT), region(elements * CANNEAL_HEAP_PER_ELEMENT), region(elements * CANNEAL_LOCATION)];
    let loaded = 0u32;
    let access = |slot: usize, pattern: Pattern, mode: AccessMode, count: u64, offset: u64, len: u64, stride: u64| Op::Access {
        slot,
        pattern,
        mode,
        count: count.max(1),
        offset,
        len,
        stride,
    };
    let line = 64;
    // The loader.
    let mut load = Vec::new();
    let mut done = 0;
    while done < elements {
        let batch = CANNEAL_LOAD_BATCH.min(elements - done);
        // Map lookups over the nodes made so far (the map grows with the heap).
        let map_len = page_up((done * CANNEAL_HEAP_PER_ELEMENT).max(PAGE));
        load.push(access(heap, Pattern::Random, AccessMode::Read, batch * CANNEAL_MAP_READS, 0, map_len, 8));
        let (e0, h0, l0) = (done * CANNEAL_ELEMENT, done * CANNEAL_HEAP_PER_ELEMENT, done * CANNEAL_LOCATION);
        load.push(access(elems, Pattern::Sequential, AccessMode::Write, batch * CANNEAL_ELEMENT / line, e0, batch * CANNEAL_ELEMENT, line));
        load.push(access(heap, Pattern::Sequential, AccessMode::Write, batch * CANNEAL_HEAP_PER_ELEMENT / line, h0, batch * CANNEAL_HEAP_PER_ELEMENT, line));
        load.push(access(locs, Pattern::Sequential, AccessMode::Write, batch * CANNEAL_LOCATION / line, l0, batch * CANNEAL_LOCATION, line));
        load.push(Op::Compute { cycles: batch * CANNEAL_PARSE_CYCLES });
        load.push(Op::CountOp);
        done += batch;
    }
    load.push(Op::Post { token: loaded });
    load.push(Op::Exit);

    // An annealer's temperature step.
    let moves = (CANNEAL_SWAPS_PER_TEMP / n).max(1);
    let step = vec![
        access(elems, Pattern::Random, AccessMode::Read, moves * (1 + CANNEAL_CONNECTIONS), 0, 0, 8),
        access(heap, Pattern::Random, AccessMode::Read, moves * 2, 0, 0, 8),
        access(locs, Pattern::Random, AccessMode::Read, moves * CANNEAL_CONNECTIONS, 0, 0, 8),
        Op::Compute { cycles: moves * CANNEAL_CONNECTIONS * CANNEAL_COST_CYCLES },
        access(elems, Pattern::Random, AccessMode::Write, moves, 0, 0, 8),
        Op::Barrier,
        Op::CountOp,
    ];
    let mut anneal = vec![Op::Sleep { token: loaded, count: 1 }];
    anneal.extend(times(steps, step));
    anneal.push(Op::Exit);

    let mut b = Builder::default();
    let root = b.group("root", 0);
    let process = b.process("canneal", root, regions);
    let (load, anneal) = (b.program(load), b.program(anneal));
    b.thread(process, "main", "load", None, load, false);
    for t in 0..n {
        b.thread(process, &format!("annealer{t}"), "anneal", None, anneal, false);
    }
    b.w.tokens = 1;
    Ok(b.finish())
}
