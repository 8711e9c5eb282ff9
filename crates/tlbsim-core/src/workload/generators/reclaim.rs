//! `workload.kind = "reclaim"`: ABIS §5.3, PBZIP2 (`-r -5`) compressing the Linux 4.4 tar
//! in a container whose memory limit makes reclaim invalidate long-lived idle mappings.
//! Modelled: pbzip2 1.1's producer, compressor threads (500k BWT blocks, bzip2's work
//! area) and writer, with their buffers as anonymous mappings. Simplified: per-byte work
//! is `compute_cycles` per BWT block; the output file's page cache is not modelled
//! ([`reclaim`]).

use crate::config::Config;
use crate::error::Result;
use crate::workload::builder::{anon, check_range, file_map, memory_limit_mib_or_half, threads_or_cores, Builder, PAGE};
use crate::workload::program::{AccessMode, Op, Pattern, Workload};

crate::params! {
    /// `workload.kind = "reclaim"`.
    pub struct ReclaimParams {
        /// Compressor threads; 0 = one per core.
        pub threads: u32 = 0,
        /// Bytes of the file compressed.
        pub region_bytes: u64 = 64 << 20,
        /// Bytes between consecutive accesses of a sequential pass.
        pub stride: u64 = 64,
        /// The memory group's limit in MiB, which reclaim enforces; 0 = half of
        /// `region_bytes`, rounded up.
        pub memory_limit_mib: u64 = 0,
        /// Cycles of compressing one block.
        pub compute_cycles: u64 = 150_000_000,
    }
}

/// PBZIP2's BWT block size: "500k block size" (ABIS §5.3, `-5`), bzip2's k = 1,000 bytes.
const PBZIP2_BLOCK: u64 = 500_000;

/// ABIS §5.3: PBZIP2 compresses a file (the Linux 4.4 tar), "configured ... to read the
/// input file into RAM and split it between processors using 500k block size" (pbzip2 `-r
/// -5`), in a container whose memory limit (300 MB) "causes the invalidation of long-lived
/// idle mappings as inactive memory is reclaimed". Here: one process in a memory group of
/// `memory_limit_mib` (default half the input; ABIS: 300 MB for the ~630 MB tar
/// **[inferred]** size of linux-4.4.tar). What pbzip2 1.1 does with `-r` (its main()):
/// the file block is the input divided by the number of compressor threads
/// (`blockSize = InFileSize / numCPU`), and bzip2 compresses each file block in BWT blocks
/// of 500k.
/// - The producer (class "read", pbzip2's main thread) reads the `region_bytes` bytes of the
///   file through a private read-only mapping, one file block at a time, into a buffer of
///   its own (a `new char[blockSize]`, far above glibc's mmap threshold: an anonymous
///   mapping), and queues it. Then it unmaps the file (the page-cache pages stay, unmapped,
///   for reclaim to drop without a flush) and exits (pbzip2's main thread waits in join).
/// - `threads` compressor threads (default one per core, unpinned, class "compress") each
///   sleep until their file block is queued (pbzip2's consumers wait on the FIFO), so most
///   of them are off their cores while the producer reads. Compressor t takes blocks t,
///   t + threads, ... (one, unless the division left a remainder). Per 500k BWT block it
///   reads the input (a swapped-out page comes back by a fault), works in its bzip2 work
///   area (400k + 8 × 500k, bzip2's documented compression memory; written whole before
///   the first, as bzip2 fills its arrays before it reads them) with `500k / 64` random
///   reads and writes **[inferred]**, computes `compute_cycles` (default 150,000,000
///   **[inferred]**: bzip2's ~300 cycles per byte; the engine runs it as a few leaps, so
///   it is no longer scaled down, as it was, 30×, until session 17), and writes the compressed data (1/7 of the input
///   **[inferred]**, a kernel tar's bzip2 ratio) into the block's output buffer. Then it
///   hands the output to the writer and frees the input block (munmap).
/// - The writer (class "write", pbzip2's fileWriter) takes the outputs in order, sleeping
///   until the next one is ready, reads each out (its write() to the output file) and frees
///   it (munmap). Only the compressed bytes are mapped: the rest of bzip2's bound
///   (block × 1.01 + 600) is never touched.
/// One operation = one file block read or written, or one 500k BWT block compressed; `ops`
/// is not used. Not modelled: the output file's page cache.
pub(super) fn reclaim(cfg: &Config, w: &ReclaimParams) -> Result<Workload> {
    // The 500k BWT blocks are unrolled (each reads its own offset): 64 GiB is 137,439.
    check_range("workload.region_bytes", w.region_bytes, PAGE, 1 << 36)?;
    check_range("workload.stride", w.stride, 1, 1 << 30)?;
    let threads = threads_or_cores(cfg, w.threads) as u64;
    let cycles = w.compute_cycles;
    let limit_mib = memory_limit_mib_or_half(w.memory_limit_mib, w.region_bytes)?;
    let input = w.region_bytes;
    let block_size = (input / threads).max(1);
    let blocks = input.div_ceil(block_size);
    let work = 400_000 + 8 * PBZIP2_BLOCK;
    let block_len = |block: u64| block_size.min(input - block * block_size);
    let out_len = |block: u64| block_len(block).div_ceil(7);
    let mut b = Builder::default();
    b.group("root", 0);
    let group = b.group("pbzip2", limit_mib * 256);
    let file = b.file("linux-4.4.tar", input.div_ceil(PAGE));
    let (file_slot, work_base) = (0, 1);
    let block_base = work_base + threads as usize;
    let output_base = block_base + blocks as usize;
    let mut regions = vec![file_map(file, 0, input, false, false)];
    regions.extend((0..threads).map(|_| anon(work, true)));
    regions.extend((0..blocks).map(|block| anon(block_len(block), true)));
    regions.extend((0..blocks).map(|block| anon(out_len(block), true)));
    let process = b.process("pbzip2", group, regions);
    let seq = |slot: usize, mode: AccessMode, offset: u64, len: u64| Op::Access {
        slot,
        pattern: Pattern::Sequential,
        mode,
        count: len.div_ceil(w.stride),
        offset,
        len,
        stride: w.stride,
    };
    // Tokens: `block` = its input is queued; `blocks + block` = its output is ready.
    let (queued, compressed) = (|block: u64| block as u32, |block: u64| (blocks + block) as u32);
    let mut read = Vec::new();
    for block in 0..blocks {
        let len = block_len(block);
        read.push(seq(file_slot, AccessMode::Read, block * block_size, len));
        read.push(seq(block_base + block as usize, AccessMode::Write, 0, len));
        read.push(Op::Post { token: queued(block) });
        read.push(Op::CountOp);
    }
    read.push(Op::Munmap { slot: file_slot });
    read.push(Op::Exit);
    let reader = b.program(read);
    b.thread(process, "read", "read", None, reader, false);
    let mut write = Vec::new();
    for block in 0..blocks {
        let slot = output_base + block as usize;
        write.extend([Op::Sleep { token: compressed(block), count: 1 }, seq(slot, AccessMode::Read, 0, out_len(block)), Op::Munmap { slot }, Op::CountOp]);
    }
    write.push(Op::Exit);
    let writer = b.program(write);
    b.thread(process, "write", "write", None, writer, false);
    for t in 0..threads {
        let work_slot = work_base + t as usize;
        let mut prog = Vec::new();
        for block in (t..blocks).step_by(threads as usize) {
            prog.push(Op::Sleep { token: queued(block), count: 1 });
            if block == t {
                prog.push(seq(work_slot, AccessMode::Write, 0, work));
            }
            let (len, block_slot, out_slot) = (block_len(block), block_base + block as usize, output_base + block as usize);
            let mut at = 0;
            while at < len {
                let piece = PBZIP2_BLOCK.min(len - at);
                let (out_at, out_piece) = (at / 7, piece.div_ceil(7).min(out_len(block) - at / 7));
                prog.push(seq(block_slot, AccessMode::Read, at, piece));
                prog.push(Op::Access {
                    slot: work_slot,
                    pattern: Pattern::Random,
                    mode: AccessMode::Mixed(0.5),
                    count: piece / 64,
                    offset: 0,
                    len: 0,
                    stride: 8,
                });
                prog.push(Op::Compute { cycles });
                if out_piece > 0 {
                    prog.push(seq(out_slot, AccessMode::Write, out_at, out_piece));
                }
                prog.push(Op::CountOp);
                at += piece;
            }
            prog.push(Op::Post { token: compressed(block) });
            prog.push(Op::Munmap { slot: block_slot });
        }
        prog.push(Op::Exit);
        let prog = b.program(prog);
        b.thread(process, &format!("compress{t}"), "compress", None, prog, false);
    }
    b.w.tokens = 2 * blocks as u32;
    Ok(b.finish())
}
