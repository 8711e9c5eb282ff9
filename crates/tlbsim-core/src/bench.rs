//! `tlbsim bench`: simulated accesses per second on this machine.

use serde::Serialize;

#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Accesses per stream.
    pub accesses: u64,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions { accesses: 20_000_000 }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    pub l1_hit_stream_per_s: f64,
    pub walk_stream_per_s: f64,
    pub null_loop_per_s: f64,
    /// l1_hit_stream_per_s / null_loop_per_s
    pub l1_hit_over_null: f64,
    pub accesses: u64,
}

pub fn run_bench(opts: &BenchOptions) -> crate::Result<BenchReport> {
    let _ = opts;
    todo!()
}
