//! The one error type the simulator returns. Every failure a user can cause (a bad config,
//! a bad trace) is one of these, never a panic.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A config value is wrong; `key` is the dotted path (`machine.tlb.l1d.ways`).
    #[error("config: {key}: {message}")]
    Config { key: String, message: String },
    #[error("trace: {0}")]
    Trace(#[from] TraceError),
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    /// The simulation itself failed (an internal invariant broke); a bug in tlbsim.
    #[error("simulation: {0}")]
    Sim(String),
}

impl Error {
    pub fn config(key: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Config { key: key.into(), message: message.into() }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A trace that cannot be read: where (line or byte offset) and why.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: line {line}: {message}")]
    Line { path: PathBuf, line: u64, message: String },
    #[error("{path}: byte offset {offset}: {message}")]
    Offset { path: PathBuf, offset: u64, message: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// A record that decodes but cannot be taken (e.g. counts whose sum passes 2^64):
    /// `event` counts the records from the first, 1-based.
    #[error("{path}: event {event}: {message}")]
    Event { path: PathBuf, event: u64, message: String },
}
