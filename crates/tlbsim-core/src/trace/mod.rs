//! Trace inputs: Valgrind lackey text, ChampSim binary traces and tlbsim's native format.
//!
//! Every reader turns its input into the same stream of `TraceEvent`s, read in batches so
//! that the engine pays one dynamic call per batch, not per access. A reader never panics on
//! bad input: it returns a `TraceError` naming the file and the line (text formats) or byte
//! offset (binary formats, offset in the decompressed stream) where the input went wrong.

pub mod champsim;
pub mod lackey;
pub mod native;

use crate::types::AccessKind;
use std::path::{Path, PathBuf};

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
}

/// Input formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceFormat {
    Lackey,
    Champsim,
    Native,
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: line {line}: {message}")]
    Line { path: PathBuf, line: u64, message: String },
    #[error("{path}: byte offset {offset}: {message}")]
    Offset { path: PathBuf, offset: u64, message: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// A source of trace events.
pub trait TraceSource: Send {
    /// Clear `out` and append up to `max` events. Returns `Ok(0)` at the end of the trace.
    fn next_batch(&mut self, out: &mut Vec<TraceEvent>, max: usize) -> Result<usize, TraceError>;
}

/// Open `path` as `format`. Compression is detected from the content (gzip, xz, zstd
/// magic numbers), not the file name.
pub fn open(path: &Path, format: TraceFormat) -> Result<Box<dyn TraceSource>, TraceError> {
    let _ = (path, format);
    todo!()
}
