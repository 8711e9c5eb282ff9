//! tlbsim's native trace format: compact, zstd-compressed, able to carry OS events.
//!
//! # Layout
//!
//! The file is one zstd stream (written with a content checksum). The reader also accepts
//! the same bytes uncompressed, or gzip/xz-compressed: compression is detected from the
//! magic number. Inside, after decompression:
//!
//! ```text
//! magic    8 bytes  "TLBSIM" 00 <version>      54 4c 42 53 49 4d 00 02 (version 2; 01 still read)
//! records  ...      tag byte + fields; varint = unsigned LEB128 (at most 10 bytes)
//! end      tag 0x7f + varint count              count = number of records before it;
//!                                               nothing may follow
//! ```
//!
//! | tag | event | fields |
//! |-----|-------|--------|
//! | `0b000s_sskk` (0x00..=0x1f) | `Access` | zigzag varint address delta; then varint size if `sss` = 0 |
//! | 0x20 | `Instructions{n}` | varint n |
//! | 0x21 | `Thread{tid}` | varint tid (≤ u32::MAX) |
//! | 0x22 | `Mmap{start,len,prot,flags}` | varint start, varint len, 1 byte prot, varint flags (≤ u32::MAX) |
//! | 0x23 | `Munmap{start,len}` | varint start, varint len |
//! | 0x24 | `Syscall{nr,nargs,args,ret}` (v2) | varint nr (≤ 65535), 1 byte nargs (≤ 6), nargs varint args, zigzag varint result |
//! | 0x25 | `File{dev,ino}` (v2) | varint dev, varint inode: identity of the file the next `Syscall` (an mmap) maps |
//! | 0x7f | end of trace | varint count |
//!
//! Version 2 (written by `tlbsim record`, see `record/tlbsim_record.c`) adds the `Syscall`
//! and `File` records: the calls that change an address space or the threads (`mmap`,
//! `munmap`, `mprotect`, `madvise`, `brk`, `mremap`, `msync`, `clone`/`fork`/`vfork`,
//! `exit`/`exit_group`, `sched_setaffinity`), with x86-64 Linux system-call numbers, their
//! arguments as the program passed them and the kernel's result (negative errno on
//! failure). A version-1 file is read as before; in it tags 0x24 and 0x25 are reserved.
//! The blocking calls (issue 47) are `Syscall` records of the same version, with extra
//! arguments after the call's own (older recordings have none of these numbers, and a
//! reader that does not know a number skips it):
//! - file I/O (`read` 0, `write` 1, `pread64` 17, `pwrite64` 18, `readv` 19, `writev` 20,
//!   `preadv` 295, `pwritev` 296) on a regular file: preceded by a `File` record, 4
//!   arguments (fd, buffer or iovec, count, the file offset the call started at), the
//!   result the bytes moved;
//! - a call that may end another thread's wait (`write`/`writev` of a non-regular file,
//!   `connect` 42, `sendto` 44, `sendmsg` 46, `shutdown` 48, `sendmmsg` 307): recorded as it
//!   enters (result 0), 4 arguments (its first three, CLOCK_MONOTONIC ns at entry);
//! - a blocking wait (`read`/`readv` of a non-regular file, `poll` 7, `select` 23, `accept`
//!   43, `recvfrom` 45, `recvmsg` 47, `epoll_wait` 232, `pselect6` 270, `ppoll` 271,
//!   `epoll_pwait` 281, `accept4` 288, `recvmmsg` 299, `epoll_pwait2` 441): recorded as it
//!   returns, 6 arguments (its first four, CLOCK_MONOTONIC ns at entry, ns blocked);
//! - `nanosleep` 35 (req, rem, requested ns, ns blocked) and `clock_nanosleep` 230 (clock,
//!   flags, req, rem, requested ns made relative, ns blocked).
//! A recording in progress has no end record: [`NativeReader::open_unfinished`] reads it,
//! taking the end of the stream at a record boundary as its end.
//!
//! Every other tag is reserved (an error). In an access tag, `kk` is the kind (0 Fetch,
//! 1 Load, 2 Store, 3 Modify) and `sss` the size: 1..=7 mean 1, 2, 4, 8, 16, 32, 64 bytes,
//! 0 means an explicit varint size (≤ 65535) follows the address.
//!
//! The address is delta-encoded against the previous access *of the same thread*
//! (`delta = va - prev` with wrapping arithmetic, then zigzag: `(d << 1) ^ (d >> 63)`).
//! Each thread's previous address starts at 0. Events before the first `Thread` record
//! belong to thread 0; a `Thread{tid}` record switches the current thread (and so the
//! delta base) until the next one.
//!
//! The end record makes a cut-short file (a writer that was never finished) detectable
//! even where the cut falls on a record boundary. Errors name the byte offset in the
//! decompressed stream: of the magic (0, or 7 for an unsupported version), of an unknown
//! tag byte, of a truncated or overlong varint, of a record cut by the end of the stream.

use super::input::{self, Compression, Window};
use super::{TraceError, TraceEvent, TraceFormat, TraceSource};
use crate::types::AccessKind;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// The first 7 bytes of a native trace; the 8th is the format version.
pub const MAGIC_PREFIX: [u8; 7] = *b"TLBSIM\0";
/// Format version written by this module (versions 1 and 2 are read).
pub const VERSION: u8 = 2;
/// The whole 8-byte magic of version `VERSION`.
pub const MAGIC: [u8; 8] = *b"TLBSIM\0\x02";
/// The 8-byte magic of version 1 (no `Syscall`/`File` records).
pub const MAGIC_V1: [u8; 8] = *b"TLBSIM\0\x01";

/// zstd level used by `NativeWriter::new`.
pub const DEFAULT_LEVEL: i32 = 3;

pub const TAG_INSTRUCTIONS: u8 = 0x20;
pub const TAG_THREAD: u8 = 0x21;
pub const TAG_MMAP: u8 = 0x22;
pub const TAG_MUNMAP: u8 = 0x23;
pub const TAG_SYSCALL: u8 = 0x24;
pub const TAG_FILE: u8 = 0x25;
/// Most arguments a `Syscall` record carries (x86-64 passes six in registers).
pub const MAX_SYSCALL_ARGS: usize = 6;
pub const TAG_END: u8 = 0x7f;

/// Longest possible record (an Mmap with overlong varints): the reader parses a record in
/// place once this many bytes are buffered (or the stream has ended).
const MAX_RECORD: usize = 1 + 10 + 1 + 10 * MAX_SYSCALL_ARGS + 10;
const WINDOW: usize = 1 << 20;
const WRITE_BUF: usize = 64 * 1024;

#[inline]
fn kind_code(k: AccessKind) -> u8 {
    match k {
        AccessKind::Fetch => 0,
        AccessKind::Load => 1,
        AccessKind::Store => 2,
        AccessKind::Modify => 3,
    }
}

#[inline]
fn kind_of(code: u8) -> AccessKind {
    match code & 3 {
        0 => AccessKind::Fetch,
        1 => AccessKind::Load,
        2 => AccessKind::Store,
        _ => AccessKind::Modify,
    }
}

#[inline]
fn size_code(size: u16) -> u8 {
    match size {
        1 => 1,
        2 => 2,
        4 => 3,
        8 => 4,
        16 => 5,
        32 => 6,
        64 => 7,
        _ => 0,
    }
}

#[inline]
fn zigzag(d: u64) -> u64 {
    (d << 1) ^ ((d as i64 >> 63) as u64)
}

#[inline]
fn unzigzag(z: u64) -> u64 {
    (z >> 1) ^ (z & 1).wrapping_neg()
}

#[inline]
fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Per-thread delta base, shared by writer and reader.
#[derive(Default)]
struct Threads {
    tid: u32,
    prev: u64,
    saved: HashMap<u32, u64>,
}

impl Threads {
    #[inline]
    fn switch(&mut self, tid: u32) {
        if tid != self.tid {
            self.saved.insert(self.tid, self.prev);
            self.prev = self.saved.get(&tid).copied().unwrap_or(0);
            self.tid = tid;
        }
    }
}

/// Writes a native trace through a zstd encoder. Call [`NativeWriter::finish`]: a writer
/// dropped without it leaves a trace that readers reject as truncated.
pub struct NativeWriter<W: Write> {
    enc: zstd::stream::write::Encoder<'static, W>,
    buf: Vec<u8>,
    threads: Threads,
    events: u64,
}

impl<W: Write> NativeWriter<W> {
    /// Start a trace on `w` at the default zstd level.
    pub fn new(w: W) -> io::Result<NativeWriter<W>> {
        NativeWriter::with_level(w, DEFAULT_LEVEL)
    }

    /// Start a trace on `w` at zstd level `level` (1..=22; higher is smaller and slower).
    pub fn with_level(w: W, level: i32) -> io::Result<NativeWriter<W>> {
        let mut enc = zstd::stream::write::Encoder::new(w, level)?;
        enc.include_checksum(true)?;
        let mut buf = Vec::with_capacity(WRITE_BUF + 64);
        buf.extend_from_slice(&MAGIC);
        Ok(NativeWriter { enc, buf, threads: Threads::default(), events: 0 })
    }

    /// Append one event.
    #[inline]
    pub fn write(&mut self, ev: &TraceEvent) -> io::Result<()> {
        let b = &mut self.buf;
        match *ev {
            TraceEvent::Access { va, kind, size } => {
                let sc = size_code(size);
                b.push((sc << 2) | kind_code(kind));
                put_varint(b, zigzag(va.wrapping_sub(self.threads.prev)));
                if sc == 0 {
                    put_varint(b, size as u64);
                }
                self.threads.prev = va;
            }
            TraceEvent::Instructions { n } => {
                b.push(TAG_INSTRUCTIONS);
                put_varint(b, n);
            }
            TraceEvent::Thread { tid } => {
                b.push(TAG_THREAD);
                put_varint(b, tid as u64);
                self.threads.switch(tid);
            }
            TraceEvent::Mmap { start, len, prot, flags } => {
                b.push(TAG_MMAP);
                put_varint(b, start);
                put_varint(b, len);
                b.push(prot);
                put_varint(b, flags as u64);
            }
            TraceEvent::Munmap { start, len } => {
                b.push(TAG_MUNMAP);
                put_varint(b, start);
                put_varint(b, len);
            }
            TraceEvent::Syscall { nr, nargs, args, ret } => {
                let n = (nargs as usize).min(MAX_SYSCALL_ARGS);
                b.push(TAG_SYSCALL);
                put_varint(b, nr as u64);
                b.push(n as u8);
                for a in args.iter().take(n) {
                    put_varint(b, *a);
                }
                put_varint(b, zigzag(ret as u64));
            }
            TraceEvent::File { dev, ino } => {
                b.push(TAG_FILE);
                put_varint(b, dev);
                put_varint(b, ino);
            }
        }
        self.events += 1;
        if self.buf.len() >= WRITE_BUF {
            self.enc.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Append a slice of events.
    pub fn write_batch(&mut self, evs: &[TraceEvent]) -> io::Result<()> {
        evs.iter().try_for_each(|e| self.write(e))
    }

    /// Events written so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Write the end record, finish the zstd stream and return the inner writer (not
    /// flushed: flush or sync it yourself if it buffers).
    pub fn finish(mut self) -> io::Result<W> {
        self.buf.push(TAG_END);
        put_varint(&mut self.buf, self.events);
        self.enc.write_all(&self.buf)?;
        self.buf.clear();
        self.enc.finish()
    }
}

/// Reader of a native trace.
pub struct NativeReader {
    win: Window,
    threads: Threads,
    /// Events (records other than the magic and end record) decoded so far.
    events: u64,
    started: bool,
    done: bool,
    failed: Option<TraceError>,
    /// Format version from the magic (1 or 2).
    version: u8,
    /// A recording in progress: the end of the stream at a record boundary ends the trace.
    unfinished: bool,
}

/// Why a record could not be decoded; `at` is the offset relative to the record start.
enum Bad {
    /// Ran out of bytes in the varint starting at `at`.
    TruncVarint {
        at: usize,
        what: &'static str,
    },
    /// Ran out of bytes for a single-byte field at `at`.
    Trunc {
        at: usize,
        what: &'static str,
    },
    Overlong {
        at: usize,
        what: &'static str,
    },
    Range {
        at: usize,
        what: &'static str,
        v: u64,
        max: u64,
    },
    Tag(u8),
}

/// Result of decoding one record.
enum Rec {
    Event(TraceEvent),
    End(u64),
}

#[inline(always)]
fn get_varint(b: &[u8], i: &mut usize, what: &'static str) -> Result<u64, Bad> {
    let at = *i;
    let mut v: u64 = 0;
    let mut shift: u32 = 0;
    loop {
        let Some(&byte) = b.get(*i) else {
            return Err(Bad::TruncVarint { at, what });
        };
        *i += 1;
        if shift == 63 && byte > 1 {
            return Err(Bad::Overlong { at, what });
        }
        v |= ((byte & 0x7f) as u64) << shift;
        if byte < 0x80 {
            return Ok(v);
        }
        shift += 7;
    }
}

#[inline(always)]
fn get_u32(b: &[u8], i: &mut usize, what: &'static str) -> Result<u32, Bad> {
    let at = *i;
    let v = get_varint(b, i, what)?;
    u32::try_from(v).map_err(|_| Bad::Range { at, what, v, max: u32::MAX as u64 })
}

/// Decode one record at the start of `b`; returns it and its length.
#[inline(always)]
fn decode(b: &[u8], threads: &mut Threads, version: u8) -> Result<(Rec, usize), Bad> {
    let tag = *b.first().ok_or(Bad::Trunc { at: 0, what: "tag" })?;
    let mut i = 1;
    let ev = match tag {
        0x00..=0x1f => {
            let z = get_varint(b, &mut i, "address delta")?;
            let sc = (tag >> 2) & 7;
            let size = if sc == 0 {
                let at = i;
                let s = get_varint(b, &mut i, "access size")?;
                u16::try_from(s).map_err(|_| Bad::Range { at, what: "access size", v: s, max: u16::MAX as u64 })?
            } else {
                1u16 << (sc - 1)
            };
            let va = threads.prev.wrapping_add(unzigzag(z));
            threads.prev = va;
            TraceEvent::Access { va, kind: kind_of(tag), size }
        }
        TAG_INSTRUCTIONS => TraceEvent::Instructions { n: get_varint(b, &mut i, "instruction count")? },
        TAG_THREAD => {
            let tid = get_u32(b, &mut i, "thread id")?;
            threads.switch(tid);
            TraceEvent::Thread { tid }
        }
        TAG_MMAP => {
            let start = get_varint(b, &mut i, "mmap start")?;
            let len = get_varint(b, &mut i, "mmap length")?;
            let prot = *b.get(i).ok_or(Bad::Trunc { at: i, what: "mmap prot byte" })?;
            i += 1;
            let flags = get_u32(b, &mut i, "mmap flags")?;
            TraceEvent::Mmap { start, len, prot, flags }
        }
        TAG_MUNMAP => {
            let start = get_varint(b, &mut i, "munmap start")?;
            let len = get_varint(b, &mut i, "munmap length")?;
            TraceEvent::Munmap { start, len }
        }
        TAG_SYSCALL if version >= 2 => {
            let at = i;
            let nr = get_varint(b, &mut i, "syscall number")?;
            let nr = u16::try_from(nr).map_err(|_| Bad::Range { at, what: "syscall number", v: nr, max: u16::MAX as u64 })?;
            let nargs = *b.get(i).ok_or(Bad::Trunc { at: i, what: "syscall argument count byte" })?;
            if nargs as usize > MAX_SYSCALL_ARGS {
                return Err(Bad::Range { at: i, what: "syscall argument count", v: nargs as u64, max: MAX_SYSCALL_ARGS as u64 });
            }
            i += 1;
            let mut args = [0u64; MAX_SYSCALL_ARGS];
            for a in args.iter_mut().take(nargs as usize) {
                *a = get_varint(b, &mut i, "syscall argument")?;
            }
            let ret = unzigzag(get_varint(b, &mut i, "syscall result")?) as i64;
            TraceEvent::Syscall { nr, nargs, args, ret }
        }
        TAG_FILE if version >= 2 => {
            let dev = get_varint(b, &mut i, "file device")?;
            let ino = get_varint(b, &mut i, "file inode")?;
            TraceEvent::File { dev, ino }
        }
        TAG_END => return Ok((Rec::End(get_varint(b, &mut i, "end record count")?), i)),
        t => return Err(Bad::Tag(t)),
    };
    Ok((Rec::Event(ev), i))
}

impl NativeReader {
    /// Open a native trace file.
    pub fn open(path: &Path) -> Result<NativeReader, TraceError> {
        let (src, c) = input::open_path(path)?;
        Ok(NativeReader::with_source(src, c, path.to_path_buf()))
    }

    /// Read a native trace from any reader; `name` is used in error messages.
    pub fn from_reader<R: Read + Send + 'static>(r: R, name: impl Into<PathBuf>) -> Result<NativeReader, TraceError> {
        let name = name.into();
        let (src, c) = input::wrap_reader(r, &name)?;
        Ok(NativeReader::with_source(src, c, name))
    }

    fn with_source(src: Box<dyn Read + Send>, c: Compression, path: PathBuf) -> NativeReader {
        NativeReader {
            win: Window::new(src, c, path, WINDOW),
            threads: Threads::default(),
            events: 0,
            started: false,
            done: false,
            failed: None,
            version: VERSION,
            unfinished: false,
        }
    }

    /// Open a recording that may have no end record yet (the raw output of the
    /// `tlbsim record` plugin): a stream ending at a record boundary ends the trace; a
    /// record cut short is still an error naming its offset.
    pub fn open_unfinished(path: &Path) -> Result<NativeReader, TraceError> {
        let mut r = NativeReader::open(path)?;
        r.unfinished = true;
        Ok(r)
    }

    /// Format version of the file (known once the first batch was read).
    pub fn version(&self) -> u8 {
        self.version
    }

    /// Events decoded so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Compression detected on the input.
    pub fn compression(&self) -> Compression {
        self.win.compression
    }

    fn err_at(&self, offset: u64, message: String) -> TraceError {
        TraceError::Offset { path: self.win.path.clone(), offset, message }
    }

    /// Make at least `n` bytes available unless the stream ends first.
    fn want(&mut self, n: usize) {
        while self.win.avail() < n && !self.win.eof {
            self.win.refill();
        }
    }

    /// The stream ended early because of a read/decompression error: report it.
    fn stream_error(&mut self) -> Option<TraceError> {
        let e = self.win.take_error()?;
        let path = self.win.path.clone();
        Some(match self.win.compression {
            Compression::None => TraceError::Io { path, source: e },
            _ => TraceError::Offset { path, offset: self.win.base.wrapping_add(self.win.end as u64), message: self.win.error_message(&e) },
        })
    }

    fn check_magic(&mut self) -> Result<(), TraceError> {
        self.want(MAGIC.len());
        let head = self.win.buf.get(self.win.pos..self.win.end).unwrap_or(&[]);
        let head = head.get(..MAGIC.len()).unwrap_or(head);
        if head.len() == MAGIC.len() && head.starts_with(&MAGIC_PREFIX) {
            let v = head.get(7).copied().unwrap_or(0);
            if v != 1 && v != VERSION {
                return Err(self.err_at(7, format!("unsupported native trace version {v} (this reader reads versions 1 and {VERSION})")));
            }
            self.version = v;
            self.win.pos += MAGIC.len();
            return Ok(());
        }
        let found = input::hex_bytes(head);
        if head.len() < MAGIC.len() {
            if let Some(e) = self.stream_error() {
                return Err(e);
            }
        }
        let what = match self.win.compression {
            Compression::None => String::new(),
            c => format!(" after {} decompression", c.name()),
        };
        Err(self.err_at(
            0,
            format!(
                "not a tlbsim native trace: expected magic \"TLBSIM\\0\" + version byte \
                 (54 4c 42 53 49 4d 00 {VERSION:02x}), found {found}{what}"
            ),
        ))
    }

    fn fill(&mut self, out: &mut Vec<TraceEvent>, max: usize) -> Result<(), TraceError> {
        if !self.started {
            self.check_magic()?;
            self.started = true;
        }
        while out.len() < max {
            if self.win.avail() < MAX_RECORD && !self.win.eof {
                self.win.refill();
                continue;
            }
            // Decode records in place while a whole record is surely buffered.
            let buf = self.win.buf.get(..self.win.end).unwrap_or(&[]);
            let (end, eof) = (self.win.end, self.win.eof);
            let mut pos = self.win.pos;
            let mut bad = None;
            let mut end_count = None;
            let mut n = 0u64;
            while out.len() < max && pos < end && (eof || pos + MAX_RECORD <= end) {
                match decode(buf.get(pos..).unwrap_or(&[]), &mut self.threads, self.version) {
                    Ok((Rec::Event(ev), len)) => {
                        out.push(ev);
                        pos += len;
                        n += 1;
                    }
                    Ok((Rec::End(c), len)) => {
                        end_count = Some((c, pos));
                        pos += len;
                        break;
                    }
                    Err(b) => {
                        bad = Some(b);
                        break;
                    }
                }
            }
            let rec_start = self.win.base.wrapping_add(pos as u64);
            self.win.pos = pos;
            self.events = self.events.wrapping_add(n);
            if let Some(b) = bad {
                // A truncation at the very end may really be a stream error.
                let trunc = matches!(b, Bad::TruncVarint { .. } | Bad::Trunc { .. });
                if trunc {
                    if let Some(e) = self.stream_error() {
                        return Err(e);
                    }
                }
                let (off, msg) = match b {
                    Bad::TruncVarint { at, what } => (at, format!("truncated varint ({what}): the trace ends inside it")),
                    Bad::Trunc { at, what } => (at, format!("truncated record: the trace ends before its {what}")),
                    Bad::Overlong { at, what } => (at, format!("varint ({what}) overflows 64 bits")),
                    Bad::Range { at, what, v, max } => (at, format!("{what} {v} out of range (max {max})")),
                    Bad::Tag(t) => (0, format!("unknown record tag 0x{t:02x}")),
                };
                return Err(self.err_at(rec_start.wrapping_add(off as u64), msg));
            }
            if let Some((count, at)) = end_count {
                let at = self.win.base.wrapping_add(at as u64);
                if count != self.events {
                    return Err(self.err_at(at, format!("end record counts {count} events but the trace holds {}", self.events)));
                }
                self.want(1);
                if self.win.avail() > 0 {
                    let off = self.win.offset();
                    return Err(self.err_at(off, "data after the end record".to_string()));
                }
                if let Some(e) = self.stream_error() {
                    return Err(e);
                }
                self.done = true;
                break;
            }
            if self.win.eof && self.win.avail() == 0 {
                if let Some(e) = self.stream_error() {
                    return Err(e);
                }
                if self.unfinished {
                    self.done = true;
                    break;
                }
                let off = self.win.offset();
                return Err(self.err_at(off, "the trace ends without an end record (truncated file or unfinished writer)".to_string()));
            }
        }
        Ok(())
    }
}

impl TraceSource for NativeReader {
    fn next_batch(&mut self, out: &mut Vec<TraceEvent>, max: usize) -> Result<usize, TraceError> {
        // `fill` needs `&mut self`, so the failure slot travels outside it and back.
        let mut failed = self.failed.take();
        let done = self.done;
        let r = input::next_batch(out, &mut failed, done, |out| self.fill(out, max));
        self.failed = failed;
        r
    }
}

/// What [`convert`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConvertReport {
    /// Events written.
    pub events: u64,
    /// `Access` events among them.
    pub accesses: u64,
    /// Instructions: fetch accesses plus the `n` of `Instructions` events.
    pub instructions: u64,
    /// Size of the input file on disk.
    pub input_bytes: u64,
    /// Size of the output file on disk.
    pub output_bytes: u64,
}

/// Convert a trace to the native format. Writes `<output>.tmp` and renames it to `output`
/// when complete, so an interrupted or failed convert never leaves a partial `output`
/// (a failed one removes its temporary file).
pub fn convert(input: &Path, input_format: TraceFormat, output: &Path) -> Result<ConvertReport, TraceError> {
    let mut tmp = output.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let r = convert_to(input, input_format, output, &tmp);
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

fn convert_to(input: &Path, input_format: TraceFormat, output: &Path, tmp: &Path) -> Result<ConvertReport, TraceError> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source: io::Error| TraceError::Io { path, source }
    };
    let input_bytes = std::fs::metadata(input).map_err(io_err(input))?.len();
    let mut src = super::open(input, input_format)?;
    let file = File::create(tmp).map_err(io_err(tmp))?;
    let mut w = NativeWriter::new(BufWriter::with_capacity(256 * 1024, file)).map_err(io_err(tmp))?;
    let mut rep = ConvertReport { input_bytes, ..ConvertReport::default() };
    let mut batch = Vec::with_capacity(super::DEFAULT_BATCH);
    while src.next_batch(&mut batch, super::DEFAULT_BATCH)? > 0 {
        for ev in &batch {
            match *ev {
                TraceEvent::Access { kind, .. } => {
                    rep.accesses += 1;
                    if kind == AccessKind::Fetch {
                        rep.instructions = rep.instructions.wrapping_add(1);
                    }
                }
                TraceEvent::Instructions { n } => rep.instructions = rep.instructions.wrapping_add(n),
                _ => {}
            }
        }
        rep.events += batch.len() as u64;
        w.write_batch(&batch).map_err(io_err(tmp))?;
    }
    let file = w.finish().map_err(io_err(tmp))?.into_inner().map_err(|e| TraceError::Io { path: tmp.to_path_buf(), source: e.into_error() })?;
    file.sync_all().map_err(io_err(tmp))?;
    rep.output_bytes = file.metadata().map_err(io_err(tmp))?.len();
    drop(file);
    std::fs::rename(tmp, output).map_err(io_err(output))?;
    Ok(rep)
}
