//! Valgrind lackey traces (`valgrind --tool=lackey --trace-mem=yes`), plain or compressed
//! (gzip, xz or zstd, detected from the magic bytes, never from the file name).
//!
//! Lines look like
//!
//! ```text
//! ==1234== Lackey, an example Valgrind tool        (skipped: valgrind banner/summary)
//! I  04015a0,3                                     instruction fetch
//!  L 1ffefffd58,8                                  load
//!  S 1ffefffd50,8                                  store
//!  M 0060104c,4                                    modify (one access that reads and writes)
//! ```
//!
//! Addresses are hex without `0x`, sizes decimal (at most 65535). Blank lines and lines
//! starting with `==` are skipped; spaces/tabs around the fields and a trailing `\r` are
//! tolerated; the last line may lack its newline. Anything else is an error naming the
//! 1-based line number.
//!
//! Speed: the reader parses bytes in place in a 1 MiB window (no per-line allocation); a
//! fast path handles the exact layout lackey prints and falls back to a general parser
//! for anything else (skipped lines, odd spacing, errors, a line cut by the window end).

use super::input::{self, Compression, Window};
use super::{TraceError, TraceEvent, TraceSource};
use crate::types::AccessKind;
use std::io::Read;
use std::path::{Path, PathBuf};

const WINDOW: usize = 1 << 20;

/// Reader of a lackey trace.
pub struct LackeyReader {
    win: Window,
    /// Lines fully consumed so far.
    line: u64,
    /// Inside a `==` line longer than the window: skip to its newline.
    skipping: bool,
    done: bool,
    failed: Option<TraceError>,
}

impl LackeyReader {
    /// Open a lackey trace file (plain, gzip, xz or zstd).
    pub fn open(path: &Path) -> Result<LackeyReader, TraceError> {
        let (src, c) = input::open_path(path)?;
        Ok(LackeyReader::with_source(src, c, path.to_path_buf()))
    }

    /// Read a lackey trace from any reader (compression detected from its first bytes);
    /// `name` is used in error messages.
    pub fn from_reader<R: Read + Send + 'static>(r: R, name: impl Into<PathBuf>) -> Result<LackeyReader, TraceError> {
        let name = name.into();
        let (src, c) = input::wrap_reader(r, &name)?;
        Ok(LackeyReader::with_source(src, c, name))
    }

    fn with_source(src: Box<dyn Read + Send>, c: Compression, path: PathBuf) -> LackeyReader {
        LackeyReader { win: Window::new(src, c, path, WINDOW), line: 0, skipping: false, done: false, failed: None }
    }

    /// Lines consumed so far (including skipped ones).
    pub fn lines(&self) -> u64 {
        self.line
    }

    /// Compression detected on the input.
    pub fn compression(&self) -> Compression {
        self.win.compression
    }

    fn line_error(&self, message: String) -> TraceError {
        TraceError::Line { path: self.win.path.clone(), line: self.line.wrapping_add(1), message }
    }

    /// The window needs more bytes but the stream failed: report it at the current line.
    fn stream_error(&mut self) -> TraceError {
        let Some(e) = self.win.take_error() else {
            return self.line_error("read error".to_string());
        };
        match self.win.compression {
            Compression::None => TraceError::Io { path: self.win.path.clone(), source: e },
            _ => {
                let msg = self.win.error_message(&e);
                self.line_error(msg)
            }
        }
    }

    fn fill(&mut self, out: &mut Vec<TraceEvent>, max: usize) -> Result<(), TraceError> {
        while out.len() < max {
            if !self.skipping {
                // Fast path over as many well-formed lines as possible.
                let room = max - out.len();
                let buf = self.win.buf.get(..self.win.end).unwrap_or(&[]);
                let mut pos = self.win.pos;
                let mut n = 0usize;
                while n < room {
                    match fast_line(buf.get(pos..).unwrap_or(&[])) {
                        Some((ev, len)) => {
                            out.push(ev);
                            pos += len;
                            n += 1;
                        }
                        None => break,
                    }
                }
                self.win.pos = pos;
                self.line = self.line.wrapping_add(n as u64);
                if n == room {
                    break;
                }
            }
            // Slow path: one line (or a refill).
            let avail = self.win.buf.get(self.win.pos..self.win.end).unwrap_or(&[]);
            match avail.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    let line = avail.get(..i).unwrap_or(&[]);
                    if self.skipping {
                        self.skipping = false;
                    } else {
                        match parse_general(line) {
                            Ok(Some(ev)) => out.push(ev),
                            Ok(None) => {}
                            Err(msg) => return Err(self.line_error(msg)),
                        }
                    }
                    self.win.pos += i + 1;
                    self.line = self.line.wrapping_add(1);
                }
                None if !self.win.eof => {
                    if self.win.pos == 0 && self.win.end == self.win.buf.len() {
                        // A line longer than the whole window.
                        if self.skipping || avail.starts_with(b"==") {
                            self.skipping = true;
                            self.win.discard_all();
                        } else {
                            let msg = format!("line longer than {} bytes: \"{}\"", self.win.buf.len(), input::show(avail));
                            return Err(self.line_error(msg));
                        }
                    }
                    self.win.refill();
                }
                None => {
                    // End of stream (or a stream error) with `avail` bytes left, no newline.
                    if self.win.error.is_some() {
                        return Err(self.stream_error());
                    }
                    if avail.is_empty() {
                        self.done = true;
                        break;
                    }
                    if self.skipping {
                        self.skipping = false;
                    } else {
                        match parse_general(avail) {
                            Ok(Some(ev)) => out.push(ev),
                            Ok(None) => {}
                            Err(msg) => return Err(self.line_error(msg)),
                        }
                    }
                    self.win.pos = self.win.end;
                    self.line = self.line.wrapping_add(1);
                }
            }
        }
        Ok(())
    }
}

impl TraceSource for LackeyReader {
    fn next_batch(&mut self, out: &mut Vec<TraceEvent>, max: usize) -> Result<usize, TraceError> {
        // `fill` needs `&mut self`, so the failure slot travels outside it and back.
        let mut failed = self.failed.take();
        let done = self.done;
        let r = input::next_batch(out, &mut failed, done, |out| self.fill(out, max));
        self.failed = failed;
        r
    }
}

/// Hex digit values; 0xff for non-hex bytes.
static HEX: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// Parse one line in exactly the layout lackey prints (`I  hex,dec\n` or ` K hex,dec\n`),
/// returning the event and the bytes consumed including the newline. `None` for anything
/// else (including a line not complete in `b`): the general parser decides.
#[inline(always)]
fn fast_line(b: &[u8]) -> Option<(TraceEvent, usize)> {
    let kind = match b.get(..3)? {
        [b'I', b' ', b' '] => AccessKind::Fetch,
        [b' ', b'L', b' '] => AccessKind::Load,
        [b' ', b'S', b' '] => AccessKind::Store,
        [b' ', b'M', b' '] => AccessKind::Modify,
        _ => return None,
    };
    let mut i = 3;
    let mut va: u64 = 0;
    loop {
        let d = HEX[*b.get(i)? as usize];
        if d > 15 {
            break;
        }
        va = (va << 4) | d as u64;
        i += 1;
    }
    let digits = i - 3;
    if digits == 0 || digits > 16 || *b.get(i)? != b',' {
        return None;
    }
    i += 1;
    let s0 = i;
    let mut size: u32 = 0;
    loop {
        let d = b.get(i)?.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        size = size * 10 + d as u32;
        i += 1;
        if i - s0 > 5 {
            return None;
        }
    }
    if i == s0 || size > u16::MAX as u32 || *b.get(i)? != b'\n' {
        return None;
    }
    Some((TraceEvent::Access { va, kind, size: size as u16 }, i + 1))
}

#[inline]
fn is_space(b: u8) -> bool {
    b == b' ' || b == b'\t' || b == b'\r'
}

/// Parse one line (without its newline) in the general, tolerant way. `Ok(None)` for a
/// skipped line; `Err` with a message saying what is wrong.
fn parse_general(line: &[u8]) -> Result<Option<TraceEvent>, String> {
    if line.starts_with(b"==") {
        return Ok(None);
    }
    let mut end = line.len();
    while end > 0 && line.get(end - 1).is_some_and(|&b| is_space(b)) {
        end -= 1;
    }
    let t = line.get(..end).unwrap_or(&[]);
    let mut i = 0;
    while t.get(i).is_some_and(|&b| is_space(b)) {
        i += 1;
    }
    let shown = || input::show(t.get(i0(t)..).unwrap_or(&[]));
    let Some(&k) = t.get(i) else {
        return Ok(None); // blank line
    };
    let kind = match k {
        b'I' => AccessKind::Fetch,
        b'L' => AccessKind::Load,
        b'S' => AccessKind::Store,
        b'M' => AccessKind::Modify,
        _ => return Err(format!("expected 'I', 'L', 'S' or 'M', found \"{}\"", shown())),
    };
    i += 1;
    if !t.get(i).is_some_and(|&b| is_space(b)) {
        return Err(format!("expected a space after '{}', found \"{}\"", k as char, shown()));
    }
    while t.get(i).is_some_and(|&b| is_space(b)) {
        i += 1;
    }
    // Address token.
    let a0 = i;
    while t.get(i).is_some_and(|&b| b != b',' && !is_space(b)) {
        i += 1;
    }
    let tok = t.get(a0..i).unwrap_or(&[]);
    if tok.is_empty() {
        return Err(format!("missing address in \"{}\"", shown()));
    }
    if tok.iter().any(|&b| HEX[b as usize] > 15) {
        return Err(format!("bad hex address \"{}\"", input::show(tok)));
    }
    let sig: &[u8] = {
        let z = tok.iter().take_while(|&&b| b == b'0').count();
        tok.get(z..).unwrap_or(&[])
    };
    if sig.len() > 16 {
        return Err(format!("hex address \"{}\" does not fit in 64 bits", input::show(tok)));
    }
    let va = sig.iter().fold(0u64, |v, &b| (v << 4) | HEX[b as usize] as u64);
    while t.get(i).is_some_and(|&b| is_space(b)) {
        i += 1;
    }
    match t.get(i) {
        Some(b',') => i += 1,
        None => return Err(format!("missing ',' and size after the address in \"{}\"", shown())),
        Some(_) => return Err(format!("expected ',' after the address, found \"{}\"", shown())),
    }
    while t.get(i).is_some_and(|&b| is_space(b)) {
        i += 1;
    }
    let s0 = i;
    while t.get(i).is_some_and(|&b| !is_space(b)) {
        i += 1;
    }
    let stok = t.get(s0..i).unwrap_or(&[]);
    if stok.is_empty() {
        return Err(format!("missing size in \"{}\"", shown()));
    }
    if !stok.iter().all(|b| b.is_ascii_digit()) {
        return Err(format!("bad size \"{}\"", input::show(stok)));
    }
    let size = stok.iter().try_fold(0u32, |v, &b| v.checked_mul(10)?.checked_add((b - b'0') as u32)).filter(|&v| v <= u16::MAX as u32);
    let Some(size) = size else {
        return Err(format!("size {} out of range (max 65535)", input::show(stok)));
    };
    while t.get(i).is_some_and(|&b| is_space(b)) {
        i += 1;
    }
    if let Some(rest) = t.get(i..).filter(|r| !r.is_empty()) {
        return Err(format!("unexpected text after the size: \"{}\"", input::show(rest)));
    }
    Ok(Some(TraceEvent::Access { va, kind, size: size as u16 }))
}

/// Index of the first non-space byte of `t`.
fn i0(t: &[u8]) -> usize {
    t.iter().take_while(|&&b| is_space(b)).count()
}
