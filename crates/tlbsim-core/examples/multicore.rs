//! Profiling aid: `cargo run --release --example multicore -- CORES OPS [POLICY]` runs the
//! bench's multi-core stream (apache on didi-cmp) once under `os.coherence = POLICY`
//! (default linux) and prints events per second.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cores = args.first().map_or(64, |a| a.parse::<u32>().expect("CORES"));
    let ops = args.get(1).map_or(200, |a| a.parse::<u64>().expect("OPS"));
    let policy = args.get(2).map_or("linux", String::as_str);
    let (per_s, events) = tlbsim_core::bench::multicore(cores, ops, "flat", policy).unwrap();
    println!("{cores} cores, {ops} ops/thread, {policy}: {events} events, {:.2} M events/s", per_s / 1e6);
}
