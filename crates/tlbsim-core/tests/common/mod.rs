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
    Workload {
        processes: vec![ProcessSpec {
            name: "p".into(),
            group: 0,
            regions: vec![region],
            threads: vec![
                ThreadSpec { name: "remap".into(), class: "remap".into(), core: Some(0), program: 0, daemon: false },
                ThreadSpec { name: "reader".into(), class: "reader".into(), core: Some(1), program: 1, daemon: true },
            ],
            page_tables: Default::default(),
        }],
        programs: vec![remap, reader],
        slots: 1,
        ..Default::default()
    }
}
