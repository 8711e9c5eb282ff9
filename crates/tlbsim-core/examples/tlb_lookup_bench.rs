//! Micro benchmark of `Tlb::lookup` (plus `insert` on a miss, as a TLB level is used).
//!
//!     cargo run --release -p tlbsim-core --example tlb_lookup_bench
//!
//! Streams are generated up front so that only the structure is timed. Rates are given
//! per second of this thread's CPU time (Linux `/proc/thread-self/schedstat`), which is
//! what matters on a shared machine, and per second of wall time.

use std::hint::black_box;
use std::time::Instant;
use tlbsim_core::rng::SplitMix64;
use tlbsim_core::tlb::set_assoc::{Replacement, Tlb, TlbEntry, TlbGeometry};
use tlbsim_core::types::{PageSize, Pfn, Vpn};

/// Nanoseconds this thread has spent on a CPU (Linux), if known.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn run(
    name: &str,
    entries: u32,
    ways: u32,
    replacement: Replacement,
    stream: &[u64],
    total: usize,
) {
    let g = TlbGeometry {
        entries,
        ways,
        replacement,
    };
    let mut tlb = Tlb::new(&g, 1).unwrap();
    let passes = total.div_ceil(stream.len());
    let mut hits = 0u64;
    let c0 = thread_cpu_ns();
    let t0 = Instant::now();
    for _ in 0..passes {
        for &v in stream {
            let vpn = Vpn(v);
            if tlb.lookup(vpn, PageSize::Size4K, 1).is_some() {
                hits += 1;
            } else {
                let e = TlbEntry {
                    vpn,
                    pfn: Pfn(v ^ 0x5555),
                    size: PageSize::Size4K,
                    tag: 1,
                    sl: 0,
                    flags: 0,
                };
                black_box(tlb.insert(e));
            }
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = match (c0, thread_cpu_ns()) {
        (Some(a), Some(b)) => (b - a) as f64 * 1e-9,
        _ => wall,
    };
    let n = (passes * stream.len()) as f64;
    println!(
        "{name:<44} {:>6.1} M/s cpu ({:>5.2} ns)  {:>6.1} M/s wall  hits {:>5.1}%",
        n / cpu / 1e6,
        cpu / n * 1e9,
        n / wall / 1e6,
        100.0 * hits as f64 / n
    );
}

fn main() {
    let total: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000_000);
    let mut rng = SplitMix64::new(12345);
    let n = 1 << 20;
    // Hit-heavy: uniform over 60 pages (fits a 64-entry 4-way TLB: 16 sets of 4), a new
    // page on every access, so the last-hit memo never helps.
    let hot: Vec<u64> = (0..n).map(|_| rng.below(60)).collect();
    // Hit-heavy with page locality: each page accessed 1..8 times in a row (memo path).
    let mut runs = Vec::with_capacity(n);
    while runs.len() < n {
        let p = rng.below(60);
        for _ in 0..1 + rng.below(8) {
            runs.push(p);
        }
    }
    // Random over 16384 pages: mostly misses in a 1536-entry structure.
    let wide: Vec<u64> = (0..n).map(|_| rng.below(16384)).collect();
    // Random over 1400 pages: mostly hits in a 1536-entry 12-way structure.
    let wide_hot: Vec<u64> = (0..n).map(|_| rng.below(1400)).collect();

    run(
        "64e 4-way LRU, hot 60 pages",
        64,
        4,
        Replacement::Lru,
        &hot,
        total,
    );
    run(
        "64e 4-way LRU, hot 60 pages, runs of 1-8",
        64,
        4,
        Replacement::Lru,
        &runs,
        total,
    );
    run(
        "64e 4-way PLRU, hot 60 pages",
        64,
        4,
        Replacement::Plru,
        &hot,
        total,
    );
    run(
        "1536e 12-way LRU, random over 16384 pages",
        1536,
        12,
        Replacement::Lru,
        &wide,
        total,
    );
    run(
        "1536e 12-way LRU, random over 1400 pages",
        1536,
        12,
        Replacement::Lru,
        &wide_hot,
        total,
    );
    run(
        "64e fully assoc FIFO, hot 60 pages",
        64,
        64,
        Replacement::Fifo,
        &hot,
        total,
    );
}
