//! Profiling aid: `cargo run --release --example multicore -- CORES OPS` runs the bench's
//! multi-core stream (apache on didi-cmp) once and prints events per second.
fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>().expect("CORES OPS"));
    let cores = args.next().unwrap_or(64) as u32;
    let ops = args.next().unwrap_or(200);
    let (per_s, events) = tlbsim_core::bench::multicore(cores, ops, "flat").unwrap();
    println!("{cores} cores, {ops} ops/thread: {events} events, {:.2} M events/s", per_s / 1e6);
}
