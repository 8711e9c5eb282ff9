//! The fuzz targets: one function per parser of user input, each fed arbitrary bytes.
//!
//! A target returns normally when the parser accepted the input or refused it with a clean
//! error (`tlbsim_core::Error` / `TraceError`); it panics on anything else: a panic inside
//! the parser, an internal error (`Error::Sim`) from parsing, or a broken property the
//! parser promises (a reader that failed keeps returning the same error; a native trace
//! read back from its own re-encoding gives the same events; an effective config resolves
//! to itself; a finished recording summarises as `finish` said).
//!
//! This file is compiled twice: by the `tlbsim-fuzz` crate (fuzz/, the AFL++ harness,
//! outside the workspace) and, through a `#[path]` module, by the core's test suite
//! (tests/fuzz_regressions.rs), which feeds every committed seed and regression input to
//! its target under `make test`. It uses only the core's public API.
//!
//! Per-input limits that are not the parsers' own: a trace target reads at most
//! [`MAX_EVENTS`] events (a small compressed input may expand to gigabytes; reading them
//! is not parsing, only time), and the AFL++ harness adds a time limit and a heap bound
//! (docs/DEVELOPING.md "Fuzzing").

use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use tlbsim_core::trace::{self, TraceError, TraceEvent, TraceFormat, TraceSource};
use tlbsim_core::Error;

/// Every target, by the name the harness and the corpus folders use.
pub const TARGETS: &[&str] = &["lackey", "champsim", "native", "recorded", "compile", "config", "scenario"];

/// Events a trace target reads at most from one input.
pub const MAX_EVENTS: usize = 1 << 20;

/// Run target `name` on `data`; panics on a finding. Unknown names panic too.
pub fn run(name: &str, data: &[u8]) {
    match name {
        "lackey" => trace_target(TraceFormat::Lackey, data),
        "champsim" => trace_target(TraceFormat::Champsim, data),
        "native" => trace_target(TraceFormat::Native, data),
        "recorded" => recorded_target(data),
        "compile" => compile_target(data),
        "config" => config_target(data),
        "scenario" => scenario_target(data),
        other => panic!("unknown fuzz target {other:?}; targets: {}", TARGETS.join(", ")),
    }
}

/// The trace targets' first byte chooses how the rest reaches the reader, so that every
/// decompressor is fuzzed with content that decompresses: 0 as given (the reader detects
/// plain or compressed content itself: corrupt compressed streams come this way), 1 gzip,
/// 2 xz, 3 zstd (compressed here). Higher bits: the batch size asked for.
fn wrap(data: &[u8]) -> (Vec<u8>, usize) {
    let Some((&mode, rest)) = data.split_first() else { return (Vec::new(), 1) };
    let batch = 1 + (mode >> 2) as usize * 37;
    let bytes = match mode & 3 {
        0 => rest.to_vec(),
        1 => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(rest).expect("gzip to memory");
            e.finish().expect("gzip to memory")
        }
        2 => {
            let mut e = xz2::write::XzEncoder::new(Vec::new(), 0);
            e.write_all(rest).expect("xz to memory");
            e.finish().expect("xz to memory")
        }
        _ => zstd::encode_all(rest, 1).expect("zstd to memory"),
    };
    (bytes, batch)
}

/// Read a source to its end, an error, or `MAX_EVENTS`; checks the batch protocol.
fn drain(src: &mut dyn TraceSource, batch: usize) -> Result<Vec<TraceEvent>, TraceError> {
    let mut all = Vec::new();
    let mut out = Vec::new();
    loop {
        match src.next_batch(&mut out, batch) {
            Ok(0) => {
                assert!(out.is_empty(), "a batch of 0 events left {} events in the buffer", out.len());
                let again = src.next_batch(&mut out, batch);
                assert!(matches!(again, Ok(0)), "a finished reader returned {again:?}");
                return Ok(all);
            }
            Ok(n) => {
                assert_eq!(n, out.len(), "next_batch's count and the batch differ");
                assert!(n <= batch, "next_batch returned {n} events, more than the {batch} asked for");
                all.extend_from_slice(&out);
                if all.len() >= MAX_EVENTS {
                    return Ok(all);
                }
            }
            Err(e) => {
                let again = src.next_batch(&mut out, batch);
                match &again {
                    Err(e2) => assert_eq!(e.to_string(), e2.to_string(), "a failed reader's next error differs"),
                    Ok(n) => panic!("a failed reader ({e}) returned Ok({n}) on the next call"),
                }
                return Err(e);
            }
        }
    }
}

fn trace_target(format: TraceFormat, data: &[u8]) {
    let (bytes, batch) = wrap(data);
    let mut src = match trace::open_reader(Cursor::new(bytes), Path::new("fuzz-input"), format) {
        Ok(s) => s,
        Err(_) => return,
    };
    let Ok(events) = drain(src.as_mut(), batch) else { return };
    if format == TraceFormat::Native && events.len() < MAX_EVENTS {
        // A native trace that read whole is written back and read again: same events.
        let mut w = trace::NativeWriter::new(Vec::new()).expect("writer to memory");
        w.write_batch(&events).expect("writing to memory");
        let again = w.finish().expect("writing to memory");
        let mut r = trace::NativeReader::from_reader(Cursor::new(again), "re-encoded").expect("reading the re-encoding");
        let back = drain(&mut r, trace::DEFAULT_BATCH).unwrap_or_else(|e| panic!("the re-encoded trace does not read: {e}"));
        assert!(back == events, "the re-encoded trace reads back as other events");
    }
}

/// A fresh scratch file path for this process (the recording targets work on files, as
/// `tlbsim record` does): in /dev/shm when there is one.
fn scratch(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = Path::new("/dev/shm");
    let dir = if dir.is_dir() { dir.to_path_buf() } else { std::env::temp_dir() };
    let n = N.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("tlbsim-fuzz-{}-{n}-{tag}", std::process::id()))
}

/// Removes its files when dropped (also when the target panics).
struct Scratch(Vec<PathBuf>);

impl Drop for Scratch {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The recording targets take plain traces only: their work grows with the events, and a
/// small compressed input can hold billions (the `native` target fuzzes the decompressors).
fn is_compressed(data: &[u8]) -> bool {
    trace::Compression::detect(data) != trace::Compression::None
}

/// The recorded-trace reader: the plugin's raw output finished into a native trace
/// (`trace::recorded::finish`), then summarised (`summarise`, as `tlbsim record --info`).
fn recorded_target(data: &[u8]) {
    if is_compressed(data) {
        return;
    }
    let raw = scratch("raw");
    let out = scratch("out.trace");
    let part = PathBuf::from(format!("{}.part", out.display()));
    let _clean = Scratch(vec![raw.clone(), out.clone(), part]);
    std::fs::write(&raw, data).expect("writing the scratch file");
    let Ok(finished) = trace::recorded::finish(&raw, &out) else { return };
    let summary = trace::recorded::summarise(&out, true).unwrap_or_else(|e| panic!("a finished recording does not read: {e}"));
    let mut plain = summary.clone();
    plain.syscalls.clear();
    assert!(plain == finished, "summarise and finish disagree:\n{plain:?}\n{finished:?}");
    let calls: u64 = summary.threads.iter().map(|t| t.syscalls).sum();
    assert_eq!(calls, summary.syscalls.len() as u64, "system calls counted and kept differ");
}

/// The compiler from a recording (a native trace) to an OS-mode workload. The first byte
/// chooses the compile's options (fetches kept or not, cores 1-8); the rest is the trace.
fn compile_target(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    if is_compressed(rest) {
        return;
    }
    let path = scratch("rec.trace");
    let _clean = Scratch(vec![path.clone()]);
    std::fs::write(&path, rest).expect("writing the scratch file");
    let fetches = mode & 1 == 1;
    let cores = 1 + u32::from((mode >> 1) & 7);
    match tlbsim_core::workload::recorded::build_from(&path, fetches, cores, 3.0) {
        // The engine checks a workload before it runs one: that check must not panic either.
        Ok(w) => drop(w.check(cores)),
        Err(e) => clean(&e),
    }
}

/// An error a parser may return: any but an internal one, and a config error names a key.
fn clean(e: &Error) {
    match e {
        Error::Sim(m) => panic!("parsing returned an internal error: {m}"),
        Error::Config { key, message } => {
            assert!(!key.is_empty() && !message.is_empty(), "a config error without key or message: {e}")
        }
        Error::Trace(_) | Error::Io { .. } => {}
    }
}

/// A config document and its overrides from one input: TOML text whose lines starting with
/// `#set ` (TOML comments) are the `--set` overrides, in order.
fn config_input(data: &[u8]) -> Option<(serde_json::Value, Vec<String>)> {
    let text = std::str::from_utf8(data).ok()?;
    let overrides = text.lines().filter_map(|l| l.strip_prefix("#set ")).map(str::to_owned).collect();
    let tree = tlbsim_core::tree::parse_toml(text).ok()?;
    Some((tree, overrides))
}

/// What `tlbsim run config.toml --set ...` does before it runs: parse, resolve every part
/// (building an OS-mode workload) and the host-memory check. An effective config resolves
/// to itself (a run is repeatable from its config.json alone).
fn resolve(tree: serde_json::Value, overrides: &[String]) {
    let base = Path::new("/nonexistent-tlbsim-fuzz");
    let prepared = match tlbsim_core::setup::prepare(tree, overrides, base) {
        Ok(p) => p,
        Err(e) => return clean(&e),
    };
    if let Err(e) = tlbsim_core::hostmem::check(&prepared.config, prepared.workload.as_ref()) {
        return clean(&e);
    }
    let effective = prepared.config.to_json();
    drop(prepared);
    let again = tlbsim_core::config::Config::resolve(effective.clone(), &[], base)
        .unwrap_or_else(|e| panic!("the effective config does not resolve: {e}\n{effective:#}"));
    let again = again.to_json();
    assert!(again == effective, "the effective config resolves to another:\n{effective:#}\n{again:#}");
}

fn config_target(data: &[u8]) {
    if let Some((tree, overrides)) = config_input(data) {
        resolve(tree, &overrides)
    }
}

/// The scenario language: a config document (as for `config`) run with
/// `workload.kind = "scenario"`, so that its `[workload.scenario]` is parsed and compiled.
fn scenario_target(data: &[u8]) {
    if let Some((tree, mut overrides)) = config_input(data) {
        overrides.push("workload.kind=\"scenario\"".to_owned());
        resolve(tree, &overrides)
    }
}
