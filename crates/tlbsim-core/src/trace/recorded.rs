//! Recordings of real programs made by `tlbsim record` (QEMU user mode with the
//! `record/tlbsim_record.c` plugin): finishing the plugin's raw output into a native trace,
//! and summarising a recording (`tlbsim record --info`).
//!
//! Follows: native format version 2 ([`super::native`]); x86-64 Linux system-call numbers
//! (arch/x86/entry/syscalls/syscall_64.tbl). Simplifies: a summary counts events, it does not
//! interpret them (replay does, in the OS model).

use super::native::{NativeReader, NativeWriter};
use super::{TraceError, TraceEvent, TraceSource, DEFAULT_BATCH};
use crate::types::AccessKind;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

/// Name of an x86-64 system call recorded by the plugin (`None` for any other number).
pub fn syscall_name(nr: u16) -> Option<&'static str> {
    Some(match nr {
        9 => "mmap",
        10 => "mprotect",
        11 => "munmap",
        12 => "brk",
        25 => "mremap",
        26 => "msync",
        28 => "madvise",
        56 => "clone",
        57 => "fork",
        58 => "vfork",
        60 => "exit",
        202 => "futex",
        218 => "set_tid_address",
        203 => "sched_setaffinity",
        231 => "exit_group",
        435 => "clone3",
        // Blocking calls (file I/O, waits, wakes, sleeps): arch/x86/entry/syscalls/syscall_64.tbl.
        0 => "read",
        1 => "write",
        7 => "poll",
        17 => "pread64",
        18 => "pwrite64",
        19 => "readv",
        20 => "writev",
        23 => "select",
        35 => "nanosleep",
        42 => "connect",
        43 => "accept",
        44 => "sendto",
        45 => "recvfrom",
        46 => "sendmsg",
        47 => "recvmsg",
        48 => "shutdown",
        230 => "clock_nanosleep",
        232 => "epoll_wait",
        270 => "pselect6",
        271 => "ppoll",
        281 => "epoll_pwait",
        288 => "accept4",
        295 => "preadv",
        296 => "pwritev",
        299 => "recvmmsg",
        307 => "sendmmsg",
        441 => "epoll_pwait2",
        _ => return None,
    })
}

/// One thread's share of a recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ThreadSummary {
    /// Thread id as the program saw it (the host's thread id under QEMU user mode).
    pub tid: u32,
    /// Instructions: fetch accesses plus `Instructions` records.
    pub instructions: u64,
    pub loads: u64,
    pub stores: u64,
    pub syscalls: u64,
}

/// One recorded system call, in file order.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SyscallEvent {
    pub tid: u32,
    pub name: String,
    pub nr: u16,
    pub args: Vec<u64>,
    pub ret: i64,
    /// (device, inode) of the mapped file, for a file mmap.
    pub file: Option<(u64, u64)>,
}

/// What `tlbsim record --info` prints.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecordingSummary {
    pub path: PathBuf,
    /// Events in the file (records other than the magic and the end record).
    pub events: u64,
    pub instructions: u64,
    /// Threads in order of first appearance.
    pub threads: Vec<ThreadSummary>,
    /// Events by kind: "fetch", "load", "store", "modify", "instructions", "thread",
    /// "file", and one "syscall:NAME" per system call.
    pub by_kind: BTreeMap<String, u64>,
    /// Every system call, when asked for.
    pub syscalls: Vec<SyscallEvent>,
}

struct Summariser {
    s: RecordingSummary,
    index: BTreeMap<u32, usize>,
    cur: usize,
    file: Option<(u64, u64)>,
    keep_syscalls: bool,
}

impl Summariser {
    fn new(path: &Path, keep_syscalls: bool) -> Summariser {
        let mut s = Summariser {
            s: RecordingSummary { path: path.to_path_buf(), ..RecordingSummary::default() },
            index: BTreeMap::new(),
            cur: 0,
            file: None,
            keep_syscalls,
        };
        s.thread(0);
        s
    }

    fn thread(&mut self, tid: u32) {
        let n = self.s.threads.len();
        self.cur = *self.index.entry(tid).or_insert(n);
        if self.cur == n {
            self.s.threads.push(ThreadSummary { tid, ..ThreadSummary::default() });
        }
    }

    fn bump(&mut self, kind: &str) {
        if let Some(v) = self.s.by_kind.get_mut(kind) {
            *v += 1;
        } else {
            self.s.by_kind.insert(kind.to_string(), 1);
        }
    }

    /// Take one event; an error (its message) for instruction counts whose sum passes
    /// 2^64, which no recording of `tlbsim record` holds.
    fn eat(&mut self, ev: &TraceEvent) -> Result<(), String> {
        self.s.events += 1;
        let cur = self.cur;
        match *ev {
            TraceEvent::Access { kind, .. } => {
                let t = &mut self.s.threads[cur];
                match kind {
                    AccessKind::Fetch => self.add_instructions(1)?,
                    AccessKind::Load => t.loads += 1,
                    AccessKind::Store => t.stores += 1,
                    AccessKind::Modify => {
                        t.loads += 1;
                        t.stores += 1
                    }
                }
                self.bump(match kind {
                    AccessKind::Fetch => "fetch",
                    AccessKind::Load => "load",
                    AccessKind::Store => "store",
                    AccessKind::Modify => "modify",
                });
            }
            TraceEvent::Instructions { n } => {
                self.add_instructions(n)?;
                self.bump("instructions");
            }
            TraceEvent::Thread { tid } => {
                self.thread(tid);
                self.bump("thread");
            }
            TraceEvent::Mmap { .. } => self.bump("mmap (v1)"),
            TraceEvent::Munmap { .. } => self.bump("munmap (v1)"),
            TraceEvent::File { dev, ino } => {
                self.file = Some((dev, ino));
                self.bump("file");
            }
            TraceEvent::Syscall { nr, nargs, args, ret } => {
                self.s.threads[cur].syscalls += 1;
                let name = syscall_name(nr).map(str::to_string).unwrap_or_else(|| format!("syscall_{nr}"));
                self.bump(&format!("syscall:{name}"));
                let file = self.file.take();
                if self.keep_syscalls {
                    self.s.syscalls.push(SyscallEvent {
                        tid: self.s.threads[cur].tid,
                        name,
                        nr,
                        args: args.iter().take(nargs as usize).copied().collect(),
                        ret,
                        file,
                    });
                }
            }
        }
        Ok(())
    }

    /// `n` more instructions of the current thread (and of the whole recording).
    fn add_instructions(&mut self, n: u64) -> Result<(), String> {
        let t = &mut self.s.threads[self.cur];
        let sum = t.instructions.checked_add(n).zip(self.s.instructions.checked_add(n));
        let (mine, all) = sum.ok_or_else(|| format!("thread {}'s instruction counts sum past 2^64: not a recording of tlbsim record", t.tid))?;
        (t.instructions, self.s.instructions) = (mine, all);
        Ok(())
    }

    /// `eat` each event of a batch; an error names the event.
    fn eat_batch(&mut self, batch: &[TraceEvent]) -> Result<(), TraceError> {
        for e in batch {
            self.eat(e).map_err(|message| TraceError::Event { path: self.s.path.clone(), event: self.s.events, message })?;
        }
        Ok(())
    }

    fn finish(mut self) -> RecordingSummary {
        // Thread 0 is the implicit thread before the first Thread record: drop it if unused.
        if let Some(t) = self.s.threads.first() {
            if t.tid == 0 && t.instructions == 0 && t.loads == 0 && t.stores == 0 && t.syscalls == 0 {
                self.s.threads.remove(0);
            }
        }
        self.s
    }
}

fn drain(src: &mut dyn TraceSource, mut each: impl FnMut(&[TraceEvent]) -> Result<(), TraceError>) -> Result<(), TraceError> {
    let mut batch = Vec::with_capacity(DEFAULT_BATCH);
    while src.next_batch(&mut batch, DEFAULT_BATCH)? > 0 {
        each(&batch)?;
    }
    Ok(())
}

/// Summarise a recording (any native trace); `syscalls` keeps every system call event.
pub fn summarise(path: &Path, syscalls: bool) -> Result<RecordingSummary, TraceError> {
    let mut r = NativeReader::open(path)?;
    let mut s = Summariser::new(path, syscalls);
    drain(&mut r, |b| s.eat_batch(b))?;
    Ok(s.finish())
}

/// Turn the plugin's raw output `raw` (magic + records, no end record) into the finished
/// native trace `out` (zstd, end record); returns its summary (system calls not kept).
/// The output is written to `out` + ".part" and renamed at the end, so an interrupted
/// finish never leaves a file that looks whole.
pub fn finish(raw: &Path, out: &Path) -> Result<RecordingSummary, TraceError> {
    let mut r = NativeReader::open_unfinished(raw)?;
    let part = PathBuf::from(format!("{}.part", out.display()));
    let io = |path: &Path, e: std::io::Error| TraceError::Io { path: path.to_path_buf(), source: e };
    let f = File::create(&part).map_err(|e| io(&part, e))?;
    let mut w = NativeWriter::new(BufWriter::new(f)).map_err(|e| io(&part, e))?;
    let mut s = Summariser::new(out, false);
    drain(&mut r, |b| {
        s.eat_batch(b)?;
        w.write_batch(b).map_err(|e| io(&part, e))
    })?;
    let inner = w.finish().map_err(|e| io(&part, e))?;
    let f = inner.into_inner().map_err(|e| io(&part, e.into_error()))?;
    f.sync_all().map_err(|e| io(&part, e))?;
    std::fs::rename(&part, out).map_err(|e| io(out, e))?;
    Ok(s.finish())
}
