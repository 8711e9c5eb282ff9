//! Building small native recordings by hand (the recorded-replay tests: recorded.rs,
//! recorded_spin.rs, recorded_block.rs): the events `tlbsim record`'s plugin writes.

use std::path::Path;
use tlbsim_core::trace::{NativeWriter, TraceEvent};
use tlbsim_core::types::AccessKind;

pub const MAIN: u32 = 100;
pub const WORKER: u32 = 101;
pub const HEAP: u64 = 0x7000_0000_0000;
pub const CODE: u64 = 0x40_0000;

pub fn syscall(nr: u16, args: &[u64], ret: i64) -> TraceEvent {
    let mut a = [0u64; 6];
    a[..args.len()].copy_from_slice(args);
    TraceEvent::Syscall { nr, nargs: args.len() as u8, args: a, ret }
}

pub fn load(va: u64) -> TraceEvent {
    TraceEvent::Access { va, kind: AccessKind::Load, size: 8 }
}

pub fn fetch(va: u64) -> TraceEvent {
    TraceEvent::Access { va, kind: AccessKind::Fetch, size: 4 }
}

pub fn on(tid: u32) -> TraceEvent {
    TraceEvent::Thread { tid }
}

pub fn write(path: &Path, ev: &[TraceEvent]) {
    let mut w = NativeWriter::new(std::fs::File::create(path).unwrap()).unwrap();
    w.write_batch(ev).unwrap();
    w.finish().unwrap();
}

pub fn store(va: u64) -> TraceEvent {
    TraceEvent::Access { va, kind: AccessKind::Store, size: 8 }
}
