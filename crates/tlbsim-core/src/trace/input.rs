//! Shared input plumbing for the trace readers: compression detection by magic number and
//! a refillable byte window over the (decompressed) stream.

use super::TraceError;
use std::fs::File;
use std::io::{self, BufReader, Cursor, Read};
use std::path::{Path, PathBuf};

/// Buffer size of the raw (compressed or plain) file reader.
const FILE_BUF: usize = 256 * 1024;
/// Memory limit of the xz decoder.
const XZ_MEMLIMIT: u64 = 1 << 30;

/// Compression of a trace file, detected from its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    /// gzip: 1f 8b.
    Gzip,
    /// xz: fd 37 7a 58 5a 00.
    Xz,
    /// zstd: 28 b5 2f fd.
    Zstd,
}

impl Compression {
    /// Detect compression from the first bytes of a stream (up to 6 are looked at).
    pub fn detect(head: &[u8]) -> Compression {
        if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
            Compression::Xz
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "plain",
            Compression::Gzip => "gzip",
            Compression::Xz => "xz",
            Compression::Zstd => "zstd",
        }
    }
}

/// Open `path`, detect its compression and return a reader of the decompressed bytes.
pub(crate) fn open_path(path: &Path) -> Result<(Box<dyn Read + Send>, Compression), TraceError> {
    let file = File::open(path).map_err(|source| TraceError::Io { path: path.to_path_buf(), source })?;
    wrap_reader(file, path)
}

/// Detect the compression of `r` from its first bytes and return a reader of the
/// decompressed bytes. Works on any `Read` (the peeked bytes are chained back in front).
pub(crate) fn wrap_reader<R: Read + Send + 'static>(mut r: R, path: &Path) -> Result<(Box<dyn Read + Send>, Compression), TraceError> {
    let mut head = [0u8; 6];
    let mut n = 0;
    while n < head.len() {
        match r.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => return Err(TraceError::Io { path: path.to_path_buf(), source }),
        }
    }
    let head = head.get(..n).unwrap_or(&[]).to_vec();
    let compression = Compression::detect(&head);
    let raw = BufReader::with_capacity(FILE_BUF, Cursor::new(head).chain(r));
    let reader: Box<dyn Read + Send> = match compression {
        Compression::None => return Ok((Box::new(raw), compression)),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(raw)),
        Compression::Xz => {
            // Concatenated streams allowed; memory capped so a corrupt header cannot ask
            // for an absurd dictionary (xz -9 needs 65 MiB).
            let stream = xz2::stream::Stream::new_stream_decoder(XZ_MEMLIMIT, xz2::stream::CONCATENATED)
                .map_err(|e| TraceError::Io { path: path.to_path_buf(), source: e.into() })?;
            Box::new(xz2::bufread::XzDecoder::new_stream(raw, stream))
        }
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(raw).map_err(|source| TraceError::Io { path: path.to_path_buf(), source })?),
    };
    // Decompression runs on its own thread, ahead of the simulator.
    Ok((Box::new(Prefetched::spawn(reader)), compression))
}

/// Bytes of one chunk handed from the decompression thread to the reader.
const CHUNK: usize = 1 << 20;
/// Chunks decompressed ahead of the reader at most (bounded memory: 4 MiB).
const CHUNKS_AHEAD: usize = 4;

/// A reader whose source is read on another thread, `CHUNKS_AHEAD` chunks ahead: with two
/// host cores, reading a compressed trace takes about the longer of decompressing and
/// simulating instead of their sum. The bytes, and an error after them, arrive exactly as
/// the source gives them, so results do not change.
struct Prefetched {
    chunks: std::sync::mpsc::Receiver<io::Result<Vec<u8>>>,
    /// Emptied chunks go back to the thread to be refilled (no allocation per chunk).
    spare: std::sync::mpsc::SyncSender<Vec<u8>>,
    current: Vec<u8>,
    pos: usize,
    finished: bool,
}

impl Prefetched {
    fn spawn(mut src: Box<dyn Read + Send>) -> Prefetched {
        let (tx, chunks) = std::sync::mpsc::sync_channel::<io::Result<Vec<u8>>>(CHUNKS_AHEAD);
        let (spare, spares) = std::sync::mpsc::sync_channel::<Vec<u8>>(CHUNKS_AHEAD + 2);
        std::thread::Builder::new()
            .name("tlbsim-decompress".into())
            .spawn(move || loop {
                let mut chunk = spares.try_recv().unwrap_or_else(|_| Vec::with_capacity(CHUNK));
                chunk.resize(CHUNK, 0);
                let mut filled = 0;
                let mut error = None;
                while filled < CHUNK {
                    match src.read(&mut chunk[filled..]) {
                        Ok(0) => break,
                        Ok(n) => filled += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            error = Some(e);
                            break;
                        }
                    }
                }
                chunk.truncate(filled);
                let end = filled < CHUNK;
                // The reader was dropped: stop.
                if filled > 0 && tx.send(Ok(chunk)).is_err() {
                    return;
                }
                if let Some(e) = error {
                    let _ = tx.send(Err(e));
                    return;
                }
                if end {
                    return;
                }
            })
            .expect("spawning the decompression thread");
        Prefetched { chunks, spare, current: Vec::new(), pos: 0, finished: false }
    }
}

impl Read for Prefetched {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.current.len() {
            if self.finished {
                return Ok(0);
            }
            match self.chunks.recv() {
                Ok(Ok(chunk)) => {
                    let used = std::mem::replace(&mut self.current, chunk);
                    let _ = self.spare.try_send(used);
                    self.pos = 0;
                }
                Ok(Err(e)) => {
                    self.finished = true;
                    return Err(e);
                }
                // The thread is done: end of the stream.
                Err(_) => {
                    self.finished = true;
                    return Ok(0);
                }
            }
        }
        let n = out.len().min(self.current.len() - self.pos);
        out[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// A window `[pos, end)` over a large buffer of the decompressed stream, refilled on demand.
///
/// A read error is not reported at once: the bytes read before it stay usable, and the
/// error is kept in `error` for the reader to report when it needs bytes past them. This
/// makes the reported line/offset independent of how the decompressor chunks its output.
pub(crate) struct Window {
    src: Box<dyn Read + Send>,
    pub buf: Box<[u8]>,
    pub pos: usize,
    pub end: usize,
    /// Absolute offset (in the decompressed stream) of `buf[0]`.
    pub base: u64,
    /// The source returned end of file or an error: no more bytes will come.
    pub eof: bool,
    pub error: Option<io::Error>,
    pub compression: Compression,
    pub path: PathBuf,
}

impl Window {
    pub fn new(src: Box<dyn Read + Send>, compression: Compression, path: PathBuf, cap: usize) -> Window {
        Window { src, buf: vec![0u8; cap.max(64)].into_boxed_slice(), pos: 0, end: 0, base: 0, eof: false, error: None, compression, path }
    }

    /// Bytes available in the window.
    #[inline]
    pub fn avail(&self) -> usize {
        self.end - self.pos
    }

    /// Absolute offset of `pos`.
    #[inline]
    pub fn offset(&self) -> u64 {
        self.base.wrapping_add(self.pos as u64)
    }

    /// Move the unread bytes to the front and read until the buffer is full or the source
    /// ends. Returns true if new bytes arrived.
    pub fn refill(&mut self) -> bool {
        if self.eof {
            return false;
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base = self.base.wrapping_add(self.pos as u64);
            self.end -= self.pos;
            self.pos = 0;
        }
        let before = self.end;
        while self.end < self.buf.len() {
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(k) => self.end += k.min(self.buf.len() - self.end),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.error = Some(e);
                    self.eof = true;
                    break;
                }
            }
        }
        self.end > before
    }

    /// Discard all buffered bytes (used to skip over an overlong line).
    pub fn discard_all(&mut self) {
        self.pos = self.end;
    }

    /// Describe the pending read error, if any, as a message (decompression errors are
    /// errors of the stream's content, reported at a line or offset by the caller).
    pub fn take_error(&mut self) -> Option<io::Error> {
        self.error.take()
    }

    /// Message for a read error of the stream.
    pub fn error_message(&self, e: &io::Error) -> String {
        match self.compression {
            Compression::None => format!("read error: {e}"),
            c => format!("{} stream error: {e}", c.name()),
        }
    }
}

/// Rebuild an equivalent error (so a reader can report the same error on every later call).
pub(crate) fn clone_error(e: &TraceError) -> TraceError {
    match e {
        TraceError::Line { path, line, message } => TraceError::Line { path: path.clone(), line: *line, message: message.clone() },
        TraceError::Offset { path, offset, message } => TraceError::Offset { path: path.clone(), offset: *offset, message: message.clone() },
        TraceError::Io { path, source } => TraceError::Io { path: path.clone(), source: io::Error::new(source.kind(), source.to_string()) },
        TraceError::Event { path, event, message } => TraceError::Event { path: path.clone(), event: *event, message: message.clone() },
    }
}

/// Render up to 80 bytes of input for an error message.
pub(crate) fn show(bytes: &[u8]) -> String {
    const MAX: usize = 80;
    let cut = bytes.get(..MAX).unwrap_or(bytes);
    let mut s = String::from_utf8_lossy(cut).into_owned();
    if bytes.len() > MAX {
        s.push_str("...");
    }
    s
}

/// Render up to 8 bytes as hex for an error message.
pub(crate) fn hex_bytes(bytes: &[u8]) -> String {
    let cut = bytes.get(..8).unwrap_or(bytes);
    let v: Vec<String> = cut.iter().map(|b| format!("{b:02x}")).collect();
    if v.is_empty() {
        "nothing (empty stream)".to_string()
    } else {
        v.join(" ")
    }
}

/// The batch protocol every reader shares: a reader that failed keeps returning its error,
/// a finished one returns `Ok(0)`; otherwise `fill` appends events, and when it fails part
/// way the good events of this batch are handed out first and the error on the next call.
pub(crate) fn next_batch(
    out: &mut Vec<super::TraceEvent>,
    failed: &mut Option<TraceError>,
    done: bool,
    fill: impl FnOnce(&mut Vec<super::TraceEvent>) -> Result<(), TraceError>,
) -> Result<usize, TraceError> {
    out.clear();
    if let Some(e) = failed {
        return Err(clone_error(e));
    }
    if done {
        return Ok(0);
    }
    match fill(out) {
        Ok(()) => Ok(out.len()),
        Err(e) => {
            let again = clone_error(&e);
            *failed = Some(e);
            if out.is_empty() {
                Err(again)
            } else {
                Ok(out.len())
            }
        }
    }
}
