//! Trace inputs: Valgrind lackey text, ChampSim binary traces and tlbsim's native format.
//!
//! Every reader turns its input into the same stream of `TraceEvent`s, read in batches so
//! that the engine pays one dynamic call per batch, not per access. A reader never panics on
//! bad input: it returns a `TraceError` naming the file and the line (text formats) or byte
//! offset (binary formats, offset in the decompressed stream) where the input went wrong.

pub mod champsim;
mod input;
pub mod lackey;
pub mod native;
pub mod recorded;

pub use champsim::ChampsimReader;
pub use input::Compression;
pub use lackey::LackeyReader;
pub use native::{convert, ConvertReport, NativeReader, NativeWriter};

use crate::types::AccessKind;
use std::io::Read;
use std::path::Path;

/// A good batch size for `TraceSource::next_batch`.
pub const DEFAULT_BATCH: usize = 4096;

/// One event of a thread's trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceEvent {
    /// One memory access. An instruction fetch (`AccessKind::Fetch`) also counts one
    /// retired instruction.
    Access { va: u64, kind: AccessKind, size: u16 },
    /// `n` instructions retired that are not represented by fetch events (used by the
    /// native format when fetches were not recorded).
    Instructions { n: u64 },
    /// Native format only, reserved for the OS model: mmap of [start, start+len).
    Mmap { start: u64, len: u64, prot: u8, flags: u32 },
    /// Native format only: munmap of [start, start+len).
    Munmap { start: u64, len: u64 },
    /// Native format only: the following events belong to thread `tid`.
    Thread { tid: u32 },
    /// Native format v2 only (`tlbsim record`): a system call that changes the address
    /// space or the threads, x86-64 Linux number `nr`, its first `nargs` arguments and the
    /// kernel's result (negative errno on failure).
    Syscall { nr: u16, nargs: u8, args: [u64; 6], ret: i64 },
    /// Native format v2 only: device and inode of the file the next `Syscall` (an mmap)
    /// maps.
    File { dev: u64, ino: u64 },
}

pub use crate::types::TraceFormat;

pub use crate::error::TraceError;

/// A source of trace events.
pub trait TraceSource: Send {
    /// Clear `out` and append up to `max` events. Returns `Ok(0)` at the end of the trace.
    fn next_batch(&mut self, out: &mut Vec<TraceEvent>, max: usize) -> Result<usize, TraceError>;
}

/// Open `path` as `format`. Compression is detected from the content (gzip, xz, zstd
/// magic numbers), not the file name.
///
/// After an error, `next_batch` returns the same error again on every later call. When an
/// error is found part-way through a batch, the batch's good events are returned first
/// (`Ok(n)`) and the error on the next call.
pub fn open(path: &Path, format: TraceFormat) -> Result<Box<dyn TraceSource>, TraceError> {
    Ok(match format {
        TraceFormat::Lackey => Box::new(LackeyReader::open(path)?),
        TraceFormat::Champsim => Box::new(ChampsimReader::open(path)?),
        TraceFormat::Native => Box::new(NativeReader::open(path)?),
    })
}

/// Like [`open`], on any reader (e.g. bytes in memory); `name` is used in error messages.
pub fn open_reader<R: Read + Send + 'static>(r: R, name: &Path, format: TraceFormat) -> Result<Box<dyn TraceSource>, TraceError> {
    Ok(match format {
        TraceFormat::Lackey => Box::new(LackeyReader::from_reader(r, name)?),
        TraceFormat::Champsim => Box::new(ChampsimReader::from_reader(r, name)?),
        TraceFormat::Native => Box::new(NativeReader::from_reader(r, name)?),
    })
}

/// Read a whole source into memory (tests and small traces).
pub fn read_all(src: &mut dyn TraceSource) -> Result<Vec<TraceEvent>, TraceError> {
    let mut all = Vec::new();
    let mut batch = Vec::with_capacity(DEFAULT_BATCH);
    while src.next_batch(&mut batch, DEFAULT_BATCH)? > 0 {
        all.extend_from_slice(&batch);
    }
    Ok(all)
}
