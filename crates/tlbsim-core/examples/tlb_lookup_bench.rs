//! Micro benchmark of `Tlb::lookup` (plus `insert` on a miss, as a TLB level is used).
//!
//!     cargo run --release -p tlbsim-core --example tlb_lookup_bench [lookups per case] [filter]
//!
//! (`filter`: run only the cases whose name contains it.)
//!
//! Streams are generated up front so that only the structure is timed. Rates are per
//! second of this thread's CPU time (Linux `/proc/thread-self/schedstat`; wall time
//! elsewhere), best of three repetitions, because the machine may be shared.

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

/// One timed pass over `stream` `passes` times; returns (seconds, hits).
fn time_once(tlb: &mut Tlb, stream: &[u64], passes: usize) -> (f64, u64) {
    let mut hits = 0u64;
    let c0 = thread_cpu_ns();
    let t0 = Instant::now();
    for _ in 0..passes {
        for &v in stream {
            let vpn = Vpn(v);
            if tlb.lookup(vpn, PageSize::Size4K, 1).is_some() {
                hits += 1;
            } else {
                let pfn = Pfn(v ^ 0x5555);
                let e = TlbEntry { vpn, pfn, size: PageSize::Size4K, tag: 1, sl: 0, flags: 0 };
                black_box(tlb.insert(e));
            }
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let secs = match (c0, thread_cpu_ns()) {
        (Some(a), Some(b)) => (b - a) as f64 * 1e-9,
        _ => wall,
    };
    (secs, hits)
}

fn run(name: &str, g: (u32, u32, Replacement), stream: &[u64], total: usize) {
    if let Some(f) = std::env::args().nth(2) {
        if !name.contains(&f) {
            return;
        }
    }
    let (entries, ways, replacement) = g;
    let mut tlb = Tlb::new(&TlbGeometry { entries, ways, replacement }, 1).unwrap();
    let passes = total.div_ceil(stream.len());
    time_once(&mut tlb, stream, 1); // warm up
    let (mut best, mut hits) = (f64::MAX, 0);
    for _ in 0..3 {
        let (s, h) = time_once(&mut tlb, stream, passes);
        best = best.min(s);
        hits = h;
    }
    let n = (passes * stream.len()) as f64;
    println!("{name:<48} {:>6.1} M lookups/s ({:>5.2} ns)  hits {:>5.1}%", n / best / 1e6, best / n * 1e9, 100.0 * hits as f64 / n);
}

fn main() {
    let total: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(50_000_000);
    let mut rng = SplitMix64::new(12345);
    let n = 1 << 20;
    let mut uniform = |pages: u64| -> Vec<u64> { (0..n).map(|_| rng.below(pages)).collect() };
    // Hit-heavy: uniform over 60 pages (fits a 64-entry 4-way TLB: 16 sets of 4), a new
    // page on every access, so the last-hit memo never helps.
    let hot = uniform(60);
    // Random over 16384 pages: mostly misses in a 1536-entry structure.
    let wide = uniform(16384);
    // Random over 1400 pages: mostly hits in a 1536-entry 12-way structure.
    let wide_hot = uniform(1400);
    // The tag paper's largest fully associative TLB.
    let fa_hot = uniform(1000);
    // Hit-heavy with page locality: each page accessed 1..8 times in a row (memo path).
    let mut rng = SplitMix64::new(54321);
    let mut runs = Vec::with_capacity(n);
    while runs.len() < n {
        let p = rng.below(60);
        for _ in 0..1 + rng.below(8) {
            runs.push(p);
        }
    }

    use Replacement::*;
    run("64e 4-way LRU, uniform over 60 pages", (64, 4, Lru), &hot, total);
    run("64e 4-way LRU, 60 pages in runs of 1-8", (64, 4, Lru), &runs, total);
    run("64e 4-way PLRU, uniform over 60 pages", (64, 4, Plru), &hot, total);
    // The default machine's structures on the walk stream: nearly every lookup misses and
    // inserts (the 96-entry fully associative L1, the 4096-entry 16-way L2).
    run("96e fully assoc LRU, uniform over 16384 pages", (96, 96, Lru), &wide, total);
    run("4096e 16-way LRU, uniform over 16384 pages", (4096, 16, Lru), &wide, total);
    run("1536e 12-way LRU, uniform over 16384 pages", (1536, 12, Lru), &wide, total);
    run("1536e 12-way LRU, uniform over 1400 pages", (1536, 12, Lru), &wide_hot, total);
    run("64e fully assoc FIFO, uniform over 60 pages", (64, 64, Fifo), &hot, total);
    run("1024e fully assoc FIFO, uniform over 1000 pages", (1024, 1024, Fifo), &fa_hot, total / 8);
}
