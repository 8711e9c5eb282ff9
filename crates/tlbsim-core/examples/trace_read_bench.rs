//! Trace reader throughput.
//!
//! ```text
//! cargo run --release -p tlbsim-core --example trace_read_bench [-- LINES]
//! ```
//!
//! Generates a synthetic lackey trace (default 5 M lines) in a temporary directory, gzips
//! it, converts it to the native format, writes a ChampSim trace of similar size, and
//! prints the read speed of each.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;
use tlbsim_core::trace::{self, TraceEvent, TraceFormat, DEFAULT_BATCH};

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn write_lackey(path: &Path, lines: u64) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, File::create(path)?);
    writeln!(w, "==4242== Lackey, an example Valgrind tool")?;
    let mut x = 0x2545_f491_4f6c_dd1d;
    let mut ip: u64 = 0x0040_1000;
    for _ in 0..lines {
        let r = xorshift(&mut x);
        match r % 100 {
            0..=59 => {
                ip = if r.is_multiple_of(97) { 0x0040_0000 + (r >> 40) % 0x10_0000 } else { ip + 1 + (r >> 8) % 7 };
                writeln!(w, "I  {:08x},{}", ip, 1 + (r >> 16) % 8)?;
            }
            60..=84 => writeln!(w, " L {:x},8", 0x001f_fef0_0000 + (r >> 20) % 0x100_0000)?,
            85..=94 => writeln!(w, " S {:x},8", 0x0060_0000 + (r >> 20) % 0x40_0000)?,
            _ => writeln!(w, " M {:x},4", 0x0060_0000 + (r >> 20) % 0x40_0000)?,
        }
    }
    writeln!(w, "==4242== Exit code: 0")?;
    w.flush()
}

fn write_champsim(path: &Path, records: u64) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let mut x = 0x1234_5678_9abc_def1;
    let mut ip: u64 = 0x0040_1000;
    for _ in 0..records {
        let r = xorshift(&mut x);
        ip += 1 + r % 7;
        let mut rec = [0u8; 64];
        rec[..8].copy_from_slice(&ip.to_le_bytes());
        if r.is_multiple_of(3) {
            rec[32..40].copy_from_slice(&(0x5555_0000_0000 + (r >> 20) % 0x100_0000).to_le_bytes());
        }
        if r.is_multiple_of(5) {
            rec[16..24].copy_from_slice(&(0x7ffd_0000_0000 + (r >> 24) % 0x10_0000).to_le_bytes());
        }
        w.write_all(&rec)?;
    }
    w.flush()
}

/// On-CPU time of this thread in seconds (Linux), to see through a busy machine.
fn cpu_time() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: f64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns / 1e9)
}

/// Read a whole trace; returns (events, wall seconds, CPU seconds).
fn time_read(path: &Path, fmt: TraceFormat) -> (u64, f64, f64) {
    let c = cpu_time();
    let t = Instant::now();
    let mut src = trace::open(path, fmt).expect("open");
    let mut batch: Vec<TraceEvent> = Vec::with_capacity(DEFAULT_BATCH);
    let mut n = 0u64;
    let mut sink = 0u64;
    loop {
        let k = src.next_batch(&mut batch, DEFAULT_BATCH).expect("read");
        if k == 0 {
            break;
        }
        n += k as u64;
        if let Some(TraceEvent::Access { va, .. }) = batch.last() {
            sink = sink.wrapping_add(*va);
        }
    }
    std::hint::black_box(sink);
    let wall = t.elapsed().as_secs_f64();
    let cpu = match (c, cpu_time()) {
        (Some(a), Some(b)) if b > a => b - a,
        _ => wall,
    };
    (n, wall, cpu)
}

fn size(p: &Path) -> f64 {
    std::fs::metadata(p).map(|m| m.len() as f64 / 1e6).unwrap_or(0.0)
}

fn main() {
    let lines: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5_000_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = dir.path().join("bench.lackey");
    let gz = dir.path().join("bench.lackey.gz");
    let nat = dir.path().join("bench.tlbt");
    let champ = dir.path().join("bench.champsim");

    let t = Instant::now();
    write_lackey(&plain, lines).expect("write lackey");
    {
        let mut enc = flate2::write::GzEncoder::new(BufWriter::new(File::create(&gz).expect("create")), flate2::Compression::new(6));
        std::io::copy(&mut File::open(&plain).expect("open"), &mut enc).expect("gzip");
        enc.finish().expect("gzip").flush().expect("flush");
    }
    let records = lines / 2;
    write_champsim(&champ, records).expect("write champsim");
    println!("generated {lines} lackey lines, {records} ChampSim records in {:.1} s", t.elapsed().as_secs_f64());

    let t = Instant::now();
    let rep = trace::native::convert(&plain, TraceFormat::Lackey, &nat).expect("convert");
    let conv = t.elapsed().as_secs_f64();
    println!("convert lackey -> native: {} events in {:.2} s ({:.1} M events/s)", rep.events, conv, rep.events as f64 / conv / 1e6);

    // Writer alone, into memory.
    let evs = {
        let mut src = trace::open(&plain, TraceFormat::Lackey).expect("open");
        trace::read_all(&mut *src).expect("read")
    };
    let t = Instant::now();
    let mut w = trace::NativeWriter::new(Vec::with_capacity(32 << 20)).expect("writer");
    w.write_batch(&evs).expect("write");
    let bytes = w.finish().expect("finish").len();
    let s = t.elapsed().as_secs_f64();
    println!("NativeWriter into memory: {} events, {:.1} MB, {:.2} s ({:.1} M events/s)", evs.len(), bytes as f64 / 1e6, s, evs.len() as f64 / s / 1e6);
    drop(evs);

    // Warm the page cache, then measure each three times and keep the best. The CPU-time
    // figure is what one core does undisturbed; wall time also counts waiting for a core.
    for (name, path, fmt, unit) in [
        ("lackey plain", &plain, TraceFormat::Lackey, "lines"),
        ("lackey gzip", &gz, TraceFormat::Lackey, "lines"),
        ("native zstd", &nat, TraceFormat::Native, "events"),
        ("champsim plain", &champ, TraceFormat::Champsim, "events"),
    ] {
        let _ = time_read(path, fmt);
        let (n, wall, cpu) = (0..3).map(|_| time_read(path, fmt)).fold((0, f64::MAX, f64::MAX), |a, b| (b.0, a.1.min(b.1), a.2.min(b.2)));
        println!(
            "{name:>15}: {:6.1} MB on disk, {n} events: {:6.1} M {unit}/s wall ({wall:.3} s), {:6.1} M/s CPU ({cpu:.3} s)",
            size(path),
            n as f64 / wall / 1e6,
            n as f64 / cpu / 1e6,
        );
    }
}
