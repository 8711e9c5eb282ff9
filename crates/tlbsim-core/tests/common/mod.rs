//! Workloads shared by several test files.

pub mod recording;

use tlbsim_core::workload::program::*;

/// Thread 0 (core 0) unmaps `region` (slot 0) and maps a new one like it, 50 times, writing
/// it each time; thread 1 (core 1, a daemon) keeps reading the address it was given. The
/// lazy-window and ABA cases of LATR and FPR.
pub fn remap_under_a_reader(region: MapSpec) -> Workload {
    let access = |write: bool| Op::Access {
        slot: 0,
        pattern: Pattern::Sequential,
        mode: if write { AccessMode::Write } else { AccessMode::Read },
        count: 1,
        offset: 0,
        len: 0,
        stride: 8,
    };
    let remap = vec![
        Op::Loop { count: 50, body: 5 },
        Op::Munmap { slot: 0 },
        Op::Mmap { slot: 0, spec: region },
        access(true),
        Op::Compute { cycles: 20_000 },
        Op::CountOp,
    ];
    let reader = vec![Op::Loop { count: 0, body: 2 }, access(false), Op::Compute { cycles: 500 }];
    Workload { slots: 1, ..two_pinned_threads(vec![region], ("remap", remap, false), ("reader", reader, true)) }
}

/// One process "p" with `regions` and two threads, each (name, program, daemon): the first
/// pinned to core 0, the second to core 1. Slots, tokens and pointers are the caller's to set.
pub fn two_pinned_threads(regions: Vec<MapSpec>, first: (&str, Vec<Op>, bool), second: (&str, Vec<Op>, bool)) -> Workload {
    let thread = |(name, daemon): (&str, bool), i: usize| ThreadSpec { name: name.into(), class: name.into(), core: Some(i as u32), program: i, daemon };
    Workload {
        processes: vec![ProcessSpec {
            name: "p".into(),
            group: 0,
            regions,
            threads: vec![thread((first.0, first.2), 0), thread((second.0, second.2), 1)],
            page_tables: Default::default(),
        }],
        programs: vec![first.1, second.1],
        ..Default::default()
    }
}
