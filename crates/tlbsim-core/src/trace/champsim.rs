//! ChampSim traces: a stream of 64-byte `input_instr` records, little-endian,
//! uncompressed or compressed with xz, gzip or zstd (detected from the magic bytes).
//!
//! ```text
//! offset size field
//!      0    8 u64 ip
//!      8    1 u8  is_branch
//!      9    1 u8  branch_taken
//!     10    2 u8  destination_registers[2]
//!     12    4 u8  source_registers[4]
//!     16   16 u64 destination_memory[2]
//!     32   32 u64 source_memory[4]
//! ```
//!
//! Each record becomes `Access{Fetch, ip, size 4}`, then one `Load` (size 8) per nonzero
//! `source_memory` entry, then one `Store` (size 8) per nonzero `destination_memory`
//! entry, in array order. A trailing partial record is an error naming the byte offset
//! (in the decompressed stream) where it starts.

use super::input::{self, Compression, Window};
use super::{TraceError, TraceEvent, TraceSource};
use crate::types::AccessKind;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Size of one ChampSim `input_instr` record.
pub const RECORD_SIZE: usize = 64;
/// Size recorded for an instruction fetch.
pub const FETCH_SIZE: u16 = 4;
/// Size recorded for a data access.
pub const DATA_SIZE: u16 = 8;
/// Most events one record can produce (fetch + 4 loads + 2 stores).
pub const MAX_EVENTS_PER_RECORD: usize = 7;

const WINDOW: usize = RECORD_SIZE * 16384;

const NOTHING: TraceEvent = TraceEvent::Instructions { n: 0 };

/// Reader of a ChampSim trace.
pub struct ChampsimReader {
    win: Window,
    pending: [TraceEvent; MAX_EVENTS_PER_RECORD],
    pending_pos: usize,
    pending_len: usize,
    records: u64,
    done: bool,
    failed: Option<TraceError>,
}

impl ChampsimReader {
    /// Open a ChampSim trace file (plain, xz, gzip or zstd).
    pub fn open(path: &Path) -> Result<ChampsimReader, TraceError> {
        let (src, c) = input::open_path(path)?;
        Ok(ChampsimReader::with_source(src, c, path.to_path_buf()))
    }

    /// Read a ChampSim trace from any reader (compression detected from its first bytes);
    /// `name` is used in error messages.
    pub fn from_reader<R: Read + Send + 'static>(r: R, name: impl Into<PathBuf>) -> Result<ChampsimReader, TraceError> {
        let name = name.into();
        let (src, c) = input::wrap_reader(r, &name)?;
        Ok(ChampsimReader::with_source(src, c, name))
    }

    fn with_source(src: Box<dyn Read + Send>, c: Compression, path: PathBuf) -> ChampsimReader {
        ChampsimReader {
            win: Window::new(src, c, path, WINDOW),
            pending: [NOTHING; MAX_EVENTS_PER_RECORD],
            pending_pos: 0,
            pending_len: 0,
            records: 0,
            done: false,
            failed: None,
        }
    }

    /// Records decoded so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Compression detected on the input.
    pub fn compression(&self) -> Compression {
        self.win.compression
    }

    fn fill(&mut self, out: &mut Vec<TraceEvent>, max: usize) -> Result<(), TraceError> {
        while out.len() < max {
            if self.pending_pos < self.pending_len {
                let take = (self.pending_len - self.pending_pos).min(max - out.len());
                out.extend_from_slice(self.pending.get(self.pending_pos..self.pending_pos + take).unwrap_or(&[]));
                self.pending_pos += take;
                continue;
            }
            if self.win.avail() < RECORD_SIZE {
                if !self.win.eof {
                    self.win.refill();
                    continue;
                }
                if let Some(e) = self.win.take_error() {
                    let path = self.win.path.clone();
                    return Err(match self.win.compression {
                        Compression::None => TraceError::Io { path, source: e },
                        _ => TraceError::Offset { path, offset: self.win.base.wrapping_add(self.win.end as u64), message: self.win.error_message(&e) },
                    });
                }
                if self.win.avail() == 0 {
                    self.done = true;
                    break;
                }
                return Err(TraceError::Offset {
                    path: self.win.path.clone(),
                    offset: self.win.offset(),
                    message: format!("truncated record: the trace ends {} bytes into a {RECORD_SIZE}-byte record", self.win.avail()),
                });
            }
            // Decode as many whole records as fit in the window and the batch.
            let buf = self.win.buf.get(..self.win.end).unwrap_or(&[]);
            let mut pos = self.win.pos;
            let mut events = [NOTHING; MAX_EVENTS_PER_RECORD];
            while out.len() < max {
                let Some(rec) = buf.get(pos..pos + RECORD_SIZE) else {
                    break;
                };
                let n = decode_record(rec, &mut events);
                pos += RECORD_SIZE;
                self.records += 1;
                let take = n.min(max - out.len());
                out.extend_from_slice(events.get(..take).unwrap_or(&[]));
                if take < n {
                    self.pending = events;
                    self.pending_pos = take;
                    self.pending_len = n;
                    break;
                }
            }
            self.win.pos = pos;
        }
        Ok(())
    }
}

#[inline(always)]
fn le64(rec: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = rec.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

/// Decode one 64-byte record into `events`; returns how many were written.
#[inline(always)]
fn decode_record(rec: &[u8], events: &mut [TraceEvent; MAX_EVENTS_PER_RECORD]) -> usize {
    events[0] = TraceEvent::Access { va: le64(rec, 0), kind: AccessKind::Fetch, size: FETCH_SIZE };
    let mut n = 1;
    for k in 0..4 {
        let va = le64(rec, 32 + 8 * k);
        if va != 0 {
            events[n] = TraceEvent::Access { va, kind: AccessKind::Load, size: DATA_SIZE };
            n += 1;
        }
    }
    for k in 0..2 {
        let va = le64(rec, 16 + 8 * k);
        if va != 0 {
            events[n] = TraceEvent::Access { va, kind: AccessKind::Store, size: DATA_SIZE };
            n += 1;
        }
    }
    n
}

impl TraceSource for ChampsimReader {
    fn next_batch(&mut self, out: &mut Vec<TraceEvent>, max: usize) -> Result<usize, TraceError> {
        // `fill` needs `&mut self`, so the failure slot travels outside it and back.
        let mut failed = self.failed.take();
        let done = self.done;
        let r = input::next_batch(out, &mut failed, done, |out| self.fill(out, max));
        self.failed = failed;
        r
    }
}
