//! `cargo run --release -p tlbsim-core --example bench [ACCESSES] [all|walk|l1|ratio|touch] [flat|cache] [REPLICAS] [GIB]`:
//! the same benchmark as `tlbsim bench`, without Python (the third argument is
//! `machine.memory.model`, the fourth `tlbsim bench --replicas`, the fifth the walk
//! stream's region in GiB, 16 by default: 4 has a quarter of the set-up, for callgrind).
//! `ratio` times the L1-hit stream and the null loop ten times each, alternated, and prints
//! each pair and its ratio: the spread `tlbsim bench` reports the fastest of three of.
fn main() {
    let accesses = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20_000_000);
    let model = std::env::args().nth(3).unwrap_or_else(|| "flat".into());
    let replicas = std::env::args().nth(4).and_then(|a| a.parse().ok()).unwrap_or(1);
    if std::env::args().nth(2).as_deref() == Some("walk") {
        let gib: u64 = std::env::args().nth(5).and_then(|a| a.parse().ok()).unwrap_or(16);
        println!("{:?}", tlbsim_core::bench::walk_stream_over(accesses, &model, replicas, gib << 30).expect("bench"));
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("touch") {
        println!("{:?}", tlbsim_core::bench::first_touch(accesses).expect("bench"));
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("l1") {
        println!("{:?}", tlbsim_core::bench::l1_hit_stream(accesses, &model, replicas).expect("bench"));
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("ratio") {
        let (pairs, hit_rate) = tlbsim_core::bench::l1_hit_and_null_timings(accesses, &model, replicas, 10).expect("bench");
        for (l1, null) in pairs {
            println!("l1 {:.1} M/s  null {:.1} M/s  ratio {:.3}", l1 / 1e6, null / 1e6, l1 / null);
        }
        println!("L1 hit rate {hit_rate}");
        return;
    }
    let r =
        tlbsim_core::bench::run_bench(&tlbsim_core::bench::BenchOptions { accesses, memory_model: model, replicas, policy: "linux".into() }).expect("bench");
    println!("{}", serde_json::to_string_pretty(&r).unwrap());
}
