//! Trace readers: golden files, malformed input, fuzzing and the native round trip.
//!
//! Fixtures in tests/data (see tests/data/README.md for how they were made):
//! - lackey_tiny.txt(.gz): valgrind lackey trace of lackey_tiny.c, gzip made by gzip(1);
//! - champsim_small.trace(.xz, .gz): ChampSim records from `champsim_records` below,
//!   compressed by xz(1) and gzip(1).

use proptest::prelude::*;
use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use tlbsim_core::trace::{
    self, champsim, native, ChampsimReader, Compression, LackeyReader, NativeReader, NativeWriter, TraceError, TraceEvent, TraceFormat, TraceSource,
};
use tlbsim_core::types::AccessKind;

// ---------------------------------------------------------------------------------------
// Helpers

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

fn read_path(path: &Path, fmt: TraceFormat) -> Result<Vec<TraceEvent>, TraceError> {
    let mut src = trace::open(path, fmt)?;
    trace::read_all(&mut *src)
}

fn read_bytes(bytes: &[u8], fmt: TraceFormat) -> Result<Vec<TraceEvent>, TraceError> {
    let mut src = trace::open_reader(Cursor::new(bytes.to_vec()), Path::new("mem"), fmt)?;
    trace::read_all(&mut *src)
}

/// Read with a given batch size, checking the batch contract on the way.
fn read_batched(src: &mut dyn TraceSource, max: usize) -> Result<Vec<TraceEvent>, TraceError> {
    let mut all = Vec::new();
    let mut batch = vec![TraceEvent::Instructions { n: 99 }; 3]; // must be cleared
    loop {
        let n = src.next_batch(&mut batch, max)?;
        assert_eq!(n, batch.len());
        assert!(n <= max);
        if n == 0 {
            return Ok(all);
        }
        all.extend_from_slice(&batch);
    }
}

fn err_of(r: Result<Vec<TraceEvent>, TraceError>) -> String {
    match r {
        Ok(v) => panic!("expected an error, read {} events", v.len()),
        Err(e) => e.to_string(),
    }
}

fn acc(kind: AccessKind, va: u64, size: u16) -> TraceEvent {
    TraceEvent::Access { va, kind, size }
}

/// Counts of Fetch, Load, Store, Modify, non-access events.
fn counts(evs: &[TraceEvent]) -> [u64; 5] {
    let mut c = [0u64; 5];
    for e in evs {
        let i = match e {
            TraceEvent::Access { kind: AccessKind::Fetch, .. } => 0,
            TraceEvent::Access { kind: AccessKind::Load, .. } => 1,
            TraceEvent::Access { kind: AccessKind::Store, .. } => 2,
            TraceEvent::Access { kind: AccessKind::Modify, .. } => 3,
            _ => 4,
        };
        c[i] += 1;
    }
    c
}

/// FNV-1a over a fixed encoding of each event.
fn checksum(evs: &[TraceEvent]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for e in evs {
        match *e {
            TraceEvent::Access { va, kind, size } => {
                eat(&[0, kind as u8]);
                eat(&va.to_le_bytes());
                eat(&size.to_le_bytes());
            }
            TraceEvent::Instructions { n } => {
                eat(&[1]);
                eat(&n.to_le_bytes());
            }
            TraceEvent::Mmap { start, len, prot, flags } => {
                eat(&[2, prot]);
                eat(&start.to_le_bytes());
                eat(&len.to_le_bytes());
                eat(&flags.to_le_bytes());
            }
            TraceEvent::Munmap { start, len } => {
                eat(&[3]);
                eat(&start.to_le_bytes());
                eat(&len.to_le_bytes());
            }
            TraceEvent::Thread { tid } => {
                eat(&[4]);
                eat(&tid.to_le_bytes());
            }
            TraceEvent::Syscall { nr, nargs, args, ret } => {
                eat(&[5, nargs]);
                eat(&nr.to_le_bytes());
                args.iter().for_each(|a| eat(&a.to_le_bytes()));
                eat(&ret.to_le_bytes());
            }
            TraceEvent::File { dev, ino } => {
                eat(&[6]);
                eat(&dev.to_le_bytes());
                eat(&ino.to_le_bytes());
            }
        }
    }
    h
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn xz(bytes: &[u8]) -> Vec<u8> {
    let mut e = xz2::write::XzEncoder::new(Vec::new(), 1);
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn zst(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 3).unwrap()
}

fn native_bytes(evs: &[TraceEvent]) -> Vec<u8> {
    let mut w = NativeWriter::new(Vec::new()).unwrap();
    for e in evs {
        w.write(e).unwrap();
    }
    w.finish().unwrap()
}

type FileCache = std::sync::Mutex<Vec<(String, &'static [u8])>>;

fn file_bytes(name: &str) -> &'static [u8] {
    static CACHE: OnceLock<FileCache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut c = cache.lock().unwrap();
    if let Some((_, b)) = c.iter().find(|(n, _)| n == name) {
        return b;
    }
    let b: &'static [u8] = Box::leak(std::fs::read(data(name)).unwrap().into_boxed_slice());
    c.push((name.to_string(), b));
    b
}

// ---------------------------------------------------------------------------------------
// Lackey golden

const LACKEY_FETCH: u64 = 10_528;
const LACKEY_LOAD: u64 = 1_538;
const LACKEY_STORE: u64 = 771;
const LACKEY_MODIFY: u64 = 128;
const LACKEY_LINES: u64 = 12_990;
const LACKEY_CHECKSUM: u64 = 0x8b3f_0bf4_2feb_ab68;

fn lackey_golden_events() -> &'static [TraceEvent] {
    static EV: OnceLock<Vec<TraceEvent>> = OnceLock::new();
    EV.get_or_init(|| read_path(&data("lackey_tiny.txt"), TraceFormat::Lackey).unwrap())
}

#[test]
fn lackey_golden_plain() {
    let path = data("lackey_tiny.txt");
    let mut r = LackeyReader::open(&path).unwrap();
    assert_eq!(r.compression(), Compression::None);
    let evs = read_batched(&mut r, 4096).unwrap();
    assert_eq!(r.lines(), LACKEY_LINES);
    assert_eq!(counts(&evs), [LACKEY_FETCH, LACKEY_LOAD, LACKEY_STORE, LACKEY_MODIFY, 0]);
    assert_eq!(
        &evs[..5],
        &[
            acc(AccessKind::Fetch, 0x00401062, 1),
            acc(AccessKind::Store, 0x1fff0006a8, 8),
            acc(AccessKind::Fetch, 0x00401063, 5),
            acc(AccessKind::Fetch, 0x00401068, 5),
            acc(AccessKind::Fetch, 0x0040106d, 5),
        ]
    );
    assert_eq!(evs.last(), Some(&acc(AccessKind::Fetch, 0x00401090, 2)));
    assert!(evs.contains(&acc(AccessKind::Modify, 0x403000, 1)), "a byte modify of text[]");
    assert_eq!(checksum(&evs), LACKEY_CHECKSUM, "checksum {:#x}", checksum(&evs));

    // Valgrind's own count of executed guest instructions, from the summary in the file.
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text.lines().find(|l| l.contains("guest instrs:")).unwrap();
    let n: u64 = line.rsplit(':').next().unwrap().trim().replace(',', "").parse().unwrap();
    assert_eq!(n, LACKEY_FETCH);
}

#[test]
fn lackey_golden_gzip_matches_plain() {
    let mut r = LackeyReader::open(&data("lackey_tiny.txt.gz")).unwrap();
    assert_eq!(r.compression(), Compression::Gzip);
    let evs = read_batched(&mut r, 1000).unwrap();
    assert_eq!(r.lines(), LACKEY_LINES);
    assert_eq!(evs, lackey_golden_events());
}

#[test]
fn lackey_batch_size_does_not_matter() {
    for max in [1, 2, 3, 7, 64, 100_000] {
        let mut r = LackeyReader::open(&data("lackey_tiny.txt")).unwrap();
        assert_eq!(read_batched(&mut r, max).unwrap(), lackey_golden_events(), "max {max}");
    }
}

#[test]
fn lackey_xz_and_zstd_detected_by_content() {
    let plain = file_bytes("lackey_tiny.txt");
    assert_eq!(read_bytes(&xz(plain), TraceFormat::Lackey).unwrap(), lackey_golden_events());
    assert_eq!(read_bytes(&zst(plain), TraceFormat::Lackey).unwrap(), lackey_golden_events());
    // The name says nothing: a gzip file named .txt is still read as gzip.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("looks_plain.txt");
    std::fs::write(&p, file_bytes("lackey_tiny.txt.gz")).unwrap();
    assert_eq!(read_path(&p, TraceFormat::Lackey).unwrap(), lackey_golden_events());
}

// ---------------------------------------------------------------------------------------
// Lackey: format details and malformed input

#[test]
fn lackey_tolerated_variants() {
    let ok = b"==12== Lackey\r\n\
               ==12== \n\
               \n\
               \t \r\n\
               I  04015a0,3\n\
               I   04015a0,3\n\
               \x20L 1ffefffd58,8\r\n\
               \tS\t7f,16  \n\
               \x20M 0000000000000000000ffffffffffffffff,65535\n\
               I 0,0";
    let evs = read_bytes(ok, TraceFormat::Lackey).unwrap();
    assert_eq!(
        evs,
        vec![
            acc(AccessKind::Fetch, 0x04015a0, 3),
            acc(AccessKind::Fetch, 0x04015a0, 3),
            acc(AccessKind::Load, 0x1ffefffd58, 8),
            acc(AccessKind::Store, 0x7f, 16),
            acc(AccessKind::Modify, u64::MAX, 65535),
            acc(AccessKind::Fetch, 0, 0),
        ]
    );
    assert!(read_bytes(b"", TraceFormat::Lackey).unwrap().is_empty());
    assert!(read_bytes(b"==1== only a banner", TraceFormat::Lackey).unwrap().is_empty());
}

fn lackey_with_bad_line_17(bad: &str) -> Vec<u8> {
    let mut s = String::new();
    for i in 0..16 {
        s.push_str(&format!("I  {:08x},4\n", 0x400000 + 4 * i));
    }
    s.push_str(bad);
    s.push_str("\n L 1000,8\n");
    s.into_bytes()
}

#[test]
fn lackey_bad_kind_names_line() {
    let bytes = lackey_with_bad_line_17("X 12,4");
    let e = err_of(read_bytes(&bytes, TraceFormat::Lackey));
    assert_eq!(e, "mem: line 17: expected 'I', 'L', 'S' or 'M', found \"X 12,4\"");

    // The 16 good events come first, then the error, then the same error again.
    let mut r = LackeyReader::from_reader(Cursor::new(bytes), "mem").unwrap();
    let mut out = Vec::new();
    assert_eq!(r.next_batch(&mut out, 100).unwrap(), 16);
    let e1 = r.next_batch(&mut out, 100).unwrap_err().to_string();
    assert!(out.is_empty());
    let e2 = r.next_batch(&mut out, 100).unwrap_err().to_string();
    assert_eq!(e1, e2);
    assert!(matches!(r.next_batch(&mut out, 100), Err(TraceError::Line { line: 17, .. })));
}

#[test]
fn lackey_error_messages() {
    let cases = [
        (" L 12zz,4", "line 17: bad hex address \"12zz\""),
        (" L 0x12,4", "line 17: bad hex address \"0x12\""),
        (" L 1234", "line 17: missing ',' and size after the address in \"L 1234\""),
        (" L 1234,", "line 17: missing size in \"L 1234,\""),
        (" L ,8", "line 17: missing address in \"L ,8\""),
        (" L 1234,4x", "line 17: bad size \"4x\""),
        (" S 1234,70000", "line 17: size 70000 out of range (max 65535)"),
        (" S 1234,99999999999999999999999", "line 17: size 99999999999999999999999 out of range (max 65535)"),
        (" S 1234,8 extra", "line 17: unexpected text after the size: \"extra\""),
        (" S 1234 ;8", "line 17: expected ',' after the address, found \"S 1234 ;8\""),
        (" S 1234;8", "line 17: bad hex address \"1234;8\""),
        ("I04015a0,3", "line 17: expected a space after 'I', found \"I04015a0,3\""),
        (" L 10000000000000000,8", "line 17: hex address \"10000000000000000\" does not fit in 64 bits"),
        ("= not quite a banner", "line 17: expected 'I', 'L', 'S' or 'M', found \"= not quite a banner\""),
        ("i  04015a0,3", "line 17: expected 'I', 'L', 'S' or 'M', found \"i  04015a0,3\""),
    ];
    for (bad, want) in cases {
        let e = err_of(read_bytes(&lackey_with_bad_line_17(bad), TraceFormat::Lackey));
        assert_eq!(e, format!("mem: {want}"), "input {bad:?}");
    }
    // A bad final line without newline is still reported with its number.
    let e = err_of(read_bytes(b"I  1,1\nI  2,1\n L 3", TraceFormat::Lackey));
    assert_eq!(e, "mem: line 3: missing ',' and size after the address in \"L 3\"");
    // Invalid UTF-8 is shown lossily, not a panic.
    let e = err_of(read_bytes(b"\xff\xfe 1,1\n", TraceFormat::Lackey));
    assert!(e.starts_with("mem: line 1: expected 'I', 'L', 'S' or 'M', found \""), "{e}");
}

#[test]
fn lackey_file_error_names_path() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.lackey");
    std::fs::write(&p, b"I  1,1\nnonsense\n").unwrap();
    let e = err_of(read_path(&p, TraceFormat::Lackey));
    assert_eq!(e, format!("{}: line 2: expected 'I', 'L', 'S' or 'M', found \"nonsense\"", p.display()));
    let missing = dir.path().join("missing.lackey");
    assert!(matches!(trace::open(&missing, TraceFormat::Lackey), Err(TraceError::Io { .. })));
}

#[test]
fn lackey_gzip_errors_name_line() {
    let plain = file_bytes("lackey_tiny.txt");
    // Corrupt CRC in the trailer: every line decodes, then the stream fails.
    let mut gz = gzip(plain);
    let n = gz.len();
    gz[n - 8] ^= 0xff;
    let e = err_of(read_bytes(&gz, TraceFormat::Lackey));
    assert!(e.starts_with(&format!("mem: line {}: gzip stream error: ", LACKEY_LINES + 1)), "{e}");
    // A gzip magic followed by garbage: fails before the first line.
    let e = err_of(read_bytes(b"\x1f\x8b\x00garbage garbage garbage", TraceFormat::Lackey));
    assert!(e.starts_with("mem: line 1: gzip stream error: "), "{e}");
    // Truncated stream: an error at some line, after the events that did arrive.
    let gz = gzip(plain);
    let cut = &gz[..gz.len() / 2];
    let mut r = LackeyReader::from_reader(Cursor::new(cut.to_vec()), "mem").unwrap();
    let mut got = Vec::new();
    let mut batch = Vec::new();
    let err = loop {
        match r.next_batch(&mut batch, 512) {
            Ok(0) => panic!("truncated gzip read to the end"),
            Ok(_) => got.extend_from_slice(&batch),
            Err(e) => break e,
        }
    };
    match err {
        TraceError::Line { line, ref message, .. } => {
            assert!(message.starts_with("gzip stream error"), "{message}");
            assert!(line > 1 && line <= LACKEY_LINES, "{line}");
            assert_eq!(line, r.lines() + 1);
        }
        e => panic!("{e}"),
    }
    assert_eq!(&got[..], &lackey_golden_events()[..got.len()]);
}

#[test]
fn lackey_long_lines() {
    // A banner line longer than the 1 MiB window is skipped.
    let mut b = b"I  10,1\n==1== ".to_vec();
    b.extend(std::iter::repeat_n(b'x', 3 << 20));
    b.extend_from_slice(b" L 20,8\nI  30,1\n");
    assert_eq!(read_bytes(&b, TraceFormat::Lackey).unwrap(), vec![acc(AccessKind::Fetch, 0x10, 1), acc(AccessKind::Fetch, 0x30, 1)]);
    // Any other line that long is an error.
    let mut b = b"I  10,1\n L 20,".to_vec();
    b.extend(std::iter::repeat_n(b'7', 2 << 20));
    b.push(b'\n');
    let e = err_of(read_bytes(&b, TraceFormat::Lackey));
    assert!(e.starts_with("mem: line 2: line longer than 1048576 bytes"), "{e}");
}

/// Render events as lackey lines, in lackey's own layout or a tolerated variant.
fn lackey_text(evs: &[(AccessKind, u64, u16, u8)]) -> Vec<u8> {
    let mut s = String::new();
    for (i, &(kind, va, size, style)) in evs.iter().enumerate() {
        let k = match kind {
            AccessKind::Fetch => 'I',
            AccessKind::Load => 'L',
            AccessKind::Store => 'S',
            AccessKind::Modify => 'M',
        };
        match (style % 4, kind) {
            (0 | 1, AccessKind::Fetch) => s.push_str(&format!("I  {va:08x},{size}\n")),
            (0 | 1, _) => s.push_str(&format!(" {k} {va:08x},{size}\n")),
            (2, _) => s.push_str(&format!("\t{k}  {va:X} , {size}\r\n")),
            _ => s.push_str(&format!("=={i}== noise\n {k} {va:x},{size:05}\n")),
        }
    }
    s.into_bytes()
}

#[test]
fn lackey_large_input_crosses_window_boundaries() {
    // ~5 MB: lines and banners straddle the 1 MiB window many times.
    let mut x: u64 = 1;
    let evs: Vec<(AccessKind, u64, u16, u8)> = (0..300_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let kind = [AccessKind::Fetch, AccessKind::Load, AccessKind::Store, AccessKind::Modify][(x % 4) as usize];
            (kind, x >> (x % 40), (x >> 50) as u16, (x >> 20) as u8)
        })
        .collect();
    let text = lackey_text(&evs);
    let want: Vec<TraceEvent> = evs.iter().map(|&(k, va, s, _)| acc(k, va, s)).collect();
    assert_eq!(read_bytes(&text, TraceFormat::Lackey).unwrap(), want);
    assert_eq!(read_bytes(&gzip(&text), TraceFormat::Lackey).unwrap(), want);
}

// ---------------------------------------------------------------------------------------
// ChampSim

/// One `input_instr` record.
#[derive(Clone, Copy, Default)]
struct Instr {
    ip: u64,
    is_branch: u8,
    taken: u8,
    dst_regs: [u8; 2],
    src_regs: [u8; 4],
    dst_mem: [u64; 2],
    src_mem: [u64; 4],
}

impl Instr {
    fn bytes(&self) -> [u8; 64] {
        let mut b = Vec::with_capacity(64);
        b.extend_from_slice(&self.ip.to_le_bytes());
        b.push(self.is_branch);
        b.push(self.taken);
        b.extend_from_slice(&self.dst_regs);
        b.extend_from_slice(&self.src_regs);
        for m in self.dst_mem {
            b.extend_from_slice(&m.to_le_bytes());
        }
        for m in self.src_mem {
            b.extend_from_slice(&m.to_le_bytes());
        }
        b.try_into().unwrap()
    }

    fn events(&self) -> Vec<TraceEvent> {
        let mut v = vec![acc(AccessKind::Fetch, self.ip, 4)];
        v.extend(self.src_mem.iter().filter(|&&m| m != 0).map(|&m| acc(AccessKind::Load, m, 8)));
        v.extend(self.dst_mem.iter().filter(|&&m| m != 0).map(|&m| acc(AccessKind::Store, m, 8)));
        v
    }
}

/// The deterministic instruction stream of the committed ChampSim fixture.
fn champsim_records(n: usize) -> Vec<Instr> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut ip = 0x0040_1000u64;
    (0..n)
        .map(|i| {
            let r = next();
            ip = if r % 13 == 0 { 0x0040_0000 + (next() % 0x4000) } else { ip + 1 + r % 7 };
            let mut ins = Instr { ip, ..Instr::default() };
            ins.is_branch = (r % 5 == 0) as u8;
            ins.taken = (ins.is_branch == 1 && r % 2 == 0) as u8;
            ins.dst_regs = [(r >> 8) as u8 % 32, 0];
            ins.src_regs = [(r >> 16) as u8 % 32, (r >> 24) as u8 % 32, 0, 0];
            for m in ins.src_mem.iter_mut() {
                if next() % 3 == 0 {
                    *m = 0x5555_5555_0000 + ((next() % 0x10_0000) & !7);
                }
            }
            for m in ins.dst_mem.iter_mut() {
                if next() % 4 == 0 {
                    *m = 0x7ffd_f000_0000 + ((next() % 0x1_0000) & !7);
                }
            }
            if i == 3 {
                // Every memory operand used: 7 events from one record.
                ins.src_mem = [0x1000, 0x2000, 0x3000, 0xffff_ffff_ffff_fff8];
                ins.dst_mem = [0x4000, 0x5000];
            }
            if i == 4 {
                // Gaps: only the nonzero entries count.
                ins.src_mem = [0, 0x6000, 0, 0x7000];
                ins.dst_mem = [0, 0x8000];
            }
            ins
        })
        .collect()
}

const CHAMPSIM_RECORDS: usize = 500;

fn champsim_raw(n: usize) -> Vec<u8> {
    champsim_records(n).iter().flat_map(|r| r.bytes()).collect()
}

fn champsim_expected(n: usize) -> Vec<TraceEvent> {
    champsim_records(n).iter().flat_map(|r| r.events()).collect()
}

/// Writes tests/data/champsim_small.trace; compress with `xz -k -6` and `gzip -k -n -9`.
#[test]
#[ignore]
fn regenerate_champsim_fixture() {
    std::fs::write(data("champsim_small.trace"), champsim_raw(CHAMPSIM_RECORDS)).unwrap();
}

const CHAMPSIM_COUNTS: [u64; 5] = [500, 672, 276, 0, 0];
const CHAMPSIM_CHECKSUM: u64 = 0xfe6b_c7dc_789b_d4d3;

#[test]
fn champsim_golden_files() {
    let want = champsim_expected(CHAMPSIM_RECORDS);
    assert_eq!(counts(&want), CHAMPSIM_COUNTS, "{:?}", counts(&want));
    assert_eq!(checksum(&want), CHAMPSIM_CHECKSUM, "checksum {:#x}", checksum(&want));
    // The first three records, as decoded from the committed file by an independent
    // Python struct.unpack script.
    assert_eq!(
        &want[..10],
        &[
            acc(AccessKind::Fetch, 0x401006, 4),
            acc(AccessKind::Load, 0x5555_5555_6130, 8),
            acc(AccessKind::Load, 0x5555_555a_4ae8, 8),
            acc(AccessKind::Load, 0x5555_555d_f2c8, 8),
            acc(AccessKind::Load, 0x5555_555b_e288, 8),
            acc(AccessKind::Fetch, 0x40100a, 4),
            acc(AccessKind::Store, 0x7ffd_f000_bd70, 8),
            acc(AccessKind::Fetch, 0x40100d, 4),
            acc(AccessKind::Load, 0x5555_5556_9ae8, 8),
            acc(AccessKind::Load, 0x5555_5561_0cb8, 8),
        ]
    );
    for (name, c) in [("champsim_small.trace", Compression::None), ("champsim_small.trace.xz", Compression::Xz), ("champsim_small.trace.gz", Compression::Gzip)]
    {
        let mut r = ChampsimReader::open(&data(name)).unwrap();
        assert_eq!(r.compression(), c, "{name}");
        let got = read_batched(&mut r, 4096).unwrap();
        assert_eq!(r.records(), CHAMPSIM_RECORDS as u64, "{name}");
        assert_eq!(got.len(), want.len(), "{name}");
        assert_eq!(got, want, "{name}");
    }
    // Record 3 uses every operand: fetch, 4 loads in order, 2 stores in order.
    let rec3 = champsim_records(4)[3];
    let start: usize = champsim_records(3).iter().map(|r| r.events().len()).sum();
    assert_eq!(
        &want[start..start + 7],
        &[
            acc(AccessKind::Fetch, rec3.ip, 4),
            acc(AccessKind::Load, 0x1000, 8),
            acc(AccessKind::Load, 0x2000, 8),
            acc(AccessKind::Load, 0x3000, 8),
            acc(AccessKind::Load, 0xffff_ffff_ffff_fff8, 8),
            acc(AccessKind::Store, 0x4000, 8),
            acc(AccessKind::Store, 0x5000, 8),
        ]
    );
}

#[test]
fn champsim_batch_size_does_not_matter() {
    let want = champsim_expected(CHAMPSIM_RECORDS);
    for max in [1, 2, 3, 6, 7, 8, 13, 1 << 20] {
        let mut r = ChampsimReader::open(&data("champsim_small.trace.xz")).unwrap();
        assert_eq!(read_batched(&mut r, max).unwrap(), want, "max {max}");
    }
}

#[test]
fn champsim_large_input_crosses_window_boundaries() {
    let n = 40_000; // 2.5 MB, the window is 1 MiB
    let want = champsim_expected(n);
    let raw = champsim_raw(n);
    assert_eq!(read_bytes(&raw, TraceFormat::Champsim).unwrap(), want);
    assert_eq!(read_bytes(&zst(&raw), TraceFormat::Champsim).unwrap(), want);
}

#[test]
fn champsim_truncated_record_names_offset() {
    let mut raw = champsim_raw(10);
    raw.extend_from_slice(&[0xab; 20]);
    let want = "mem: byte offset 640: truncated record: the trace ends 20 bytes into a 64-byte record";
    assert_eq!(err_of(read_bytes(&raw, TraceFormat::Champsim)), want);
    // The offset is in the decompressed stream.
    assert_eq!(err_of(read_bytes(&xz(&raw), TraceFormat::Champsim)), want);
    assert_eq!(err_of(read_bytes(&gzip(&raw), TraceFormat::Champsim)), want);
    // The ten whole records come out before the error.
    let mut r = ChampsimReader::from_reader(Cursor::new(raw), "mem").unwrap();
    let mut out = Vec::new();
    assert_eq!(r.next_batch(&mut out, 1000).unwrap(), champsim_expected(10).len());
    assert!(matches!(r.next_batch(&mut out, 1000), Err(TraceError::Offset { offset: 640, .. })));
    // A lone partial record.
    assert_eq!(err_of(read_bytes(&[1, 2, 3], TraceFormat::Champsim)), "mem: byte offset 0: truncated record: the trace ends 3 bytes into a 64-byte record");
    assert!(read_bytes(&[], TraceFormat::Champsim).unwrap().is_empty());
}

#[test]
fn champsim_bad_compressed_streams() {
    let raw = champsim_raw(100);
    // gzip with a corrupt CRC: all 6400 bytes decode, then the check fails.
    let mut gz = gzip(&raw);
    let n = gz.len();
    gz[n - 6] ^= 1;
    let e = err_of(read_bytes(&gz, TraceFormat::Champsim));
    assert!(e.starts_with("mem: byte offset 6400: gzip stream error: "), "{e}");
    // xz with a corrupted byte inside the compressed data.
    let mut x = xz(&raw);
    let mid = x.len() / 2;
    x[mid] ^= 0x55;
    let e = err_of(read_bytes(&x, TraceFormat::Champsim));
    assert!(e.starts_with("mem: byte offset ") && e.contains(": xz stream error: "), "{e}");
    // xz magic then garbage.
    let e = err_of(read_bytes(b"\xfd7zXZ\x00\x00\x00garbage", TraceFormat::Champsim));
    assert!(e.starts_with("mem: byte offset 0: xz stream error: "), "{e}");
    // A truncated xz file.
    let x = xz(&raw);
    let e = err_of(read_bytes(&x[..x.len() - 10], TraceFormat::Champsim));
    assert!(e.contains(": xz stream error: "), "{e}");
}

// ---------------------------------------------------------------------------------------
// Native format

fn raw_native(records: &[u8]) -> Vec<u8> {
    let mut v = native::MAGIC.to_vec();
    v.extend_from_slice(records);
    v
}

#[test]
fn native_layout_is_as_documented() {
    let evs = [
        acc(AccessKind::Fetch, 0x1000, 4),
        acc(AccessKind::Load, 0xff8, 8),
        acc(AccessKind::Store, 0x1000, 3),
        TraceEvent::Thread { tid: 2 },
        acc(AccessKind::Modify, 0x10, 1),
        TraceEvent::Thread { tid: 0 },
        acc(AccessKind::Fetch, 0x1004, 4),
        TraceEvent::Instructions { n: 300 },
        TraceEvent::Mmap { start: 0x7f00, len: 0x2000, prot: 3, flags: 0x22 },
        TraceEvent::Munmap { start: 0x7f00, len: 0x1000 },
    ];
    let raw = zstd::decode_all(&native_bytes(&evs)[..]).unwrap();
    let want = raw_native(&[
        0x0c, 0x80, 0x40, // Fetch size 4 (sss=3): delta +0x1000 -> zigzag 0x2000
        0x11, 0x0f, // Load size 8 (sss=4): delta -8 -> zigzag 15
        0x02, 0x10, 0x03, // Store, explicit size: delta +8 -> 16, size 3
        0x21, 0x02, // Thread 2
        0x07, 0x20, // Modify size 1 (sss=1): thread 2 starts at 0, delta +0x10 -> 0x20
        0x21, 0x00, // Thread 0
        0x0c, 0x08, // Fetch size 4: thread 0's previous was 0x1000, delta +4 -> 8
        0x20, 0xac, 0x02, // Instructions 300
        0x22, 0x80, 0xfe, 0x01, 0x80, 0x40, 0x03, 0x22, // Mmap
        0x23, 0x80, 0xfe, 0x01, 0x80, 0x20, // Munmap
        0x7f, 0x0a, // End: 10 events
    ]);
    assert_eq!(raw, want);
    assert_eq!(read_bytes(&raw, TraceFormat::Native).unwrap(), evs);
    assert_eq!(read_bytes(&zst(&raw), TraceFormat::Native).unwrap(), evs);
    assert!(native_bytes(&evs).starts_with(&[0x28, 0xb5, 0x2f, 0xfd]), "zstd on disk");
}

#[test]
fn native_wrong_magic_at_offset_0() {
    let e = err_of(read_bytes(&zst(b"TLBSIX\0\x01\x7f\x00"), TraceFormat::Native));
    assert_eq!(
        e,
        "mem: byte offset 0: not a tlbsim native trace: expected magic \"TLBSIM\\0\" + version byte \
         (54 4c 42 53 49 4d 00 02), found 54 4c 42 53 49 58 00 01 after zstd decompression"
    );
    // A lackey trace read as native.
    let e = err_of(read_path(&data("lackey_tiny.txt.gz"), TraceFormat::Native));
    assert!(e.contains(": byte offset 0: not a tlbsim native trace: expected magic"), "{e}");
    assert!(e.ends_with("found 3d 3d 39 34 36 32 3d 3d after gzip decompression"), "{e}");
    // Too short for a magic.
    let e = err_of(read_bytes(b"TLB", TraceFormat::Native));
    assert!(e.starts_with("mem: byte offset 0: not a tlbsim native trace") && e.ends_with("found 54 4c 42"), "{e}");
    let e = err_of(read_bytes(b"", TraceFormat::Native));
    assert!(e.ends_with("found nothing (empty stream)"), "{e}");
    // Unsupported version.
    let e = err_of(read_bytes(&zst(b"TLBSIM\0\x03\x7f\x00"), TraceFormat::Native));
    assert_eq!(e, "mem: byte offset 7: unsupported native trace version 3 (this reader reads versions 1 and 2)");
}

#[test]
fn native_unknown_tag_names_offset() {
    // magic (0..8), Fetch at 8..10, Instructions at 10..12, bad tag at 12.
    let raw = raw_native(&[0x0c, 0x10, 0x20, 0x05, 0x55, 0x00, 0x7f, 0x02]);
    let want = "mem: byte offset 12: unknown record tag 0x55";
    assert_eq!(err_of(read_bytes(&raw, TraceFormat::Native)), want);
    assert_eq!(err_of(read_bytes(&zst(&raw), TraceFormat::Native)), want);
    let mut r = NativeReader::from_reader(Cursor::new(zst(&raw)), "mem").unwrap();
    let mut out = Vec::new();
    assert_eq!(r.next_batch(&mut out, 100).unwrap(), 2);
    assert_eq!(out, vec![acc(AccessKind::Fetch, 8, 4), TraceEvent::Instructions { n: 5 }]);
    assert_eq!(r.next_batch(&mut out, 100).unwrap_err().to_string(), want);
    // Reserved bits of an access tag (0x20 and up are not accesses) and other reserved tags.
    // (0x24, a v2 Syscall record, is reserved in a version-1 file.)
    for tag in [0x24u8, 0x26, 0x40, 0x7e, 0x80, 0xff] {
        let mut v1 = native::MAGIC_V1.to_vec();
        v1.extend_from_slice(&[tag, 0, 0x7f, 0]);
        let e = err_of(read_bytes(&zst(&v1), TraceFormat::Native));
        assert_eq!(e, format!("mem: byte offset 8: unknown record tag 0x{tag:02x}"));
    }
}

#[test]
fn native_truncated_varint_names_offset() {
    // Fetch at 8..10, Instructions tag at 10, its varint starts at 11 and never ends.
    let raw = raw_native(&[0x0c, 0x10, 0x20, 0xff, 0xff]);
    assert_eq!(err_of(read_bytes(&zst(&raw), TraceFormat::Native)), "mem: byte offset 11: truncated varint (instruction count): the trace ends inside it");
    // Access with explicit size: the size varint (offset 10) is cut.
    let raw = raw_native(&[0x01, 0x10]);
    assert_eq!(err_of(read_bytes(&raw, TraceFormat::Native)), "mem: byte offset 10: truncated varint (access size): the trace ends inside it");
    // Mmap missing its prot byte.
    let raw = raw_native(&[0x22, 0x01, 0x02]);
    assert_eq!(err_of(read_bytes(&raw, TraceFormat::Native)), "mem: byte offset 11: truncated record: the trace ends before its mmap prot byte");
    // Overlong varint: 11 continuation bytes.
    let raw = raw_native(&[0x20, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x7f, 0x01]);
    assert_eq!(err_of(read_bytes(&raw, TraceFormat::Native)), "mem: byte offset 9: varint (instruction count) overflows 64 bits");
    // u64::MAX in 10 bytes is fine.
    let raw = raw_native(&[0x20, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x7f, 0x01]);
    assert_eq!(read_bytes(&raw, TraceFormat::Native).unwrap(), vec![TraceEvent::Instructions { n: u64::MAX }]);
    // Out-of-range fields.
    let raw = raw_native(&[0x21, 0x80, 0x80, 0x80, 0x80, 0x10, 0x7f, 0x01]);
    assert_eq!(err_of(read_bytes(&raw, TraceFormat::Native)), "mem: byte offset 9: thread id 4294967296 out of range (max 4294967295)");
    let raw = raw_native(&[0x00, 0x00, 0x80, 0x80, 0x04, 0x7f, 0x01]);
    assert_eq!(err_of(read_bytes(&raw, TraceFormat::Native)), "mem: byte offset 10: access size 65536 out of range (max 65535)");
}

#[test]
fn native_end_record_checks() {
    let full = zstd::decode_all(&native_bytes(&[TraceEvent::Instructions { n: 1 }])[..]).unwrap();
    assert_eq!(full, raw_native(&[0x20, 0x01, 0x7f, 0x01]));
    // Cut before the end record (a writer never finished).
    assert_eq!(
        err_of(read_bytes(&zst(&raw_native(&[0x20, 0x01])), TraceFormat::Native)),
        "mem: byte offset 10: the trace ends without an end record (truncated file or unfinished writer)"
    );
    assert_eq!(
        err_of(read_bytes(&raw_native(&[]), TraceFormat::Native)),
        "mem: byte offset 8: the trace ends without an end record (truncated file or unfinished writer)"
    );
    // Wrong count.
    assert_eq!(
        err_of(read_bytes(&raw_native(&[0x20, 0x01, 0x7f, 0x02]), TraceFormat::Native)),
        "mem: byte offset 10: end record counts 2 events but the trace holds 1"
    );
    // Data after the end.
    assert_eq!(err_of(read_bytes(&raw_native(&[0x20, 0x01, 0x7f, 0x01, 0x20]), TraceFormat::Native)), "mem: byte offset 12: data after the end record");
    // Empty trace.
    assert!(read_bytes(&native_bytes(&[]), TraceFormat::Native).unwrap().is_empty());
}

#[test]
fn native_bad_zstd_stream() {
    let evs: Vec<TraceEvent> = (0..20_000u64).map(|i| acc(AccessKind::Load, i * 0x9e37_79b9, 8)).collect();
    let z = native_bytes(&evs);
    // Truncated compressed file.
    let e = err_of(read_bytes(&z[..z.len() - 3], TraceFormat::Native));
    assert!(e.starts_with("mem: byte offset ") && e.contains(": zstd stream error: "), "{e}");
    // Corrupted content checksum (last 4 bytes of the frame). zstd withholds the data of
    // the failing call, so the offset is where the stream was known good, here 0.
    let mut c = z.clone();
    let n = c.len();
    c[n - 1] ^= 0xff;
    let e = err_of(read_bytes(&c, TraceFormat::Native));
    assert_eq!(e, "mem: byte offset 0: zstd stream error: Restored data doesn't match checksum");
    // zstd magic then garbage.
    let e = err_of(read_bytes(b"\x28\xb5\x2f\xfdgarbage!", TraceFormat::Native));
    assert!(e.starts_with("mem: byte offset 0: zstd stream error: "), "{e}");
}

#[test]
fn native_large_round_trip_crosses_window_boundaries() {
    let mut x: u64 = 7;
    let evs: Vec<TraceEvent> = (0..400_000)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match i % 50 {
                0 => TraceEvent::Thread { tid: (x % 5) as u32 },
                1 => TraceEvent::Mmap { start: x, len: x >> 3, prot: x as u8, flags: (x >> 32) as u32 },
                2 => TraceEvent::Instructions { n: x },
                _ => acc(AccessKind::Load, x, (x >> 48) as u16),
            }
        })
        .collect();
    let z = native_bytes(&evs);
    let mut r = NativeReader::from_reader(Cursor::new(z), "mem").unwrap();
    assert_eq!(read_batched(&mut r, 4093).unwrap(), evs);
    assert_eq!(r.events(), evs.len() as u64);
}

#[test]
fn convert_lackey_to_native_same_stream() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tiny.tlbt");
    let input = data("lackey_tiny.txt.gz");
    let rep = native::convert(&input, TraceFormat::Lackey, &out).unwrap();
    let n = LACKEY_FETCH + LACKEY_LOAD + LACKEY_STORE + LACKEY_MODIFY;
    assert_eq!(rep.events, n);
    assert_eq!(rep.accesses, n);
    assert_eq!(rep.instructions, LACKEY_FETCH);
    assert_eq!(rep.input_bytes, std::fs::metadata(&input).unwrap().len());
    assert_eq!(rep.output_bytes, std::fs::metadata(&out).unwrap().len());
    assert!(!dir.path().join("tiny.tlbt.tmp").exists());
    let mut r = NativeReader::open(&out).unwrap();
    assert_eq!(r.compression(), Compression::Zstd);
    assert_eq!(read_batched(&mut r, 4096).unwrap(), lackey_golden_events());
    // Native -> native is the identity on events too; ChampSim converts as well.
    let out2 = dir.path().join("again.tlbt");
    native::convert(&out, TraceFormat::Native, &out2).unwrap();
    assert_eq!(read_path(&out2, TraceFormat::Native).unwrap(), lackey_golden_events());
    let out3 = dir.path().join("champsim.tlbt");
    let rep = native::convert(&data("champsim_small.trace.xz"), TraceFormat::Champsim, &out3).unwrap();
    assert_eq!(rep.instructions, CHAMPSIM_RECORDS as u64);
    assert_eq!(read_path(&out3, TraceFormat::Native).unwrap(), champsim_expected(CHAMPSIM_RECORDS));
}

#[test]
fn convert_failure_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.lackey");
    std::fs::write(&bad, lackey_with_bad_line_17("X 12,4")).unwrap();
    let out = dir.path().join("out.tlbt");
    let e = native::convert(&bad, TraceFormat::Lackey, &out).unwrap_err();
    assert!(matches!(e, TraceError::Line { line: 17, .. }), "{e}");
    assert!(!out.exists());
    assert!(!dir.path().join("out.tlbt.tmp").exists());
    // An existing output is left untouched by a failed convert.
    std::fs::write(&out, b"old").unwrap();
    assert!(native::convert(&bad, TraceFormat::Lackey, &out).is_err());
    assert_eq!(std::fs::read(&out).unwrap(), b"old");
}

#[test]
fn sources_are_send() {
    let mut src = trace::open(&data("lackey_tiny.txt.gz"), TraceFormat::Lackey).unwrap();
    let n = std::thread::spawn(move || trace::read_all(&mut *src).unwrap().len()).join().unwrap();
    assert_eq!(n as u64, LACKEY_FETCH + LACKEY_LOAD + LACKEY_STORE + LACKEY_MODIFY);
}

// ---------------------------------------------------------------------------------------
// Property tests

fn arb_kind() -> impl Strategy<Value = AccessKind> {
    prop_oneof![Just(AccessKind::Fetch), Just(AccessKind::Load), Just(AccessKind::Store), Just(AccessKind::Modify)]
}

fn arb_event() -> impl Strategy<Value = TraceEvent> {
    let va = prop_oneof![any::<u64>(), 0x40_0000u64..0x40_1000, Just(0u64), Just(u64::MAX)];
    let size = prop_oneof![Just(1u16), Just(4), Just(8), Just(64), any::<u16>()];
    prop_oneof![
        8 => (va, arb_kind(), size).prop_map(|(va, kind, size)| TraceEvent::Access { va, kind, size }),
        1 => any::<u64>().prop_map(|n| TraceEvent::Instructions { n }),
        1 => (any::<u64>(), any::<u64>(), any::<u8>(), any::<u32>())
            .prop_map(|(start, len, prot, flags)| TraceEvent::Mmap { start, len, prot, flags }),
        1 => (any::<u64>(), any::<u64>()).prop_map(|(start, len)| TraceEvent::Munmap { start, len }),
        1 => prop_oneof![0u32..4, any::<u32>()].prop_map(|tid| TraceEvent::Thread { tid }),
    ]
}

/// Read `bytes` as `fmt` to the end or the first error; only a panic fails.
fn read_no_panic(bytes: &[u8], fmt: TraceFormat, max: usize) {
    if let Ok(mut src) = trace::open_reader(Cursor::new(bytes.to_vec()), Path::new("fuzz"), fmt) {
        let mut out = Vec::new();
        for _ in 0..10_000_000 {
            match src.next_batch(&mut out, max) {
                Ok(0) | Err(_) => return,
                Ok(n) => assert!(n <= max),
            }
        }
        panic!("reader never ended");
    }
}

fn fixtures() -> &'static [(TraceFormat, Vec<u8>)] {
    static F: OnceLock<Vec<(TraceFormat, Vec<u8>)>> = OnceLock::new();
    F.get_or_init(|| {
        let text = file_bytes("lackey_tiny.txt");
        let cut = text[..3000].iter().rposition(|&b| b == b'\n').unwrap() + 1;
        let lackey_head = text[..cut].to_vec();
        let champ = champsim_raw(40);
        let nat = native_bytes(&lackey_golden_events()[..300]);
        vec![
            (TraceFormat::Lackey, lackey_head.clone()),
            (TraceFormat::Lackey, gzip(&lackey_head)),
            (TraceFormat::Champsim, champ.clone()),
            (TraceFormat::Champsim, xz(&champ)),
            (TraceFormat::Champsim, gzip(&champ)),
            (TraceFormat::Native, zstd::decode_all(&nat[..]).unwrap()),
            (TraceFormat::Native, nat),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn prop_native_round_trip(evs in prop::collection::vec(arb_event(), 0..400), max in 1usize..50) {
        let bytes = native_bytes(&evs);
        let mut r = NativeReader::from_reader(Cursor::new(bytes), "mem").unwrap();
        prop_assert_eq!(read_batched(&mut r, max).unwrap(), evs);
    }

    #[test]
    fn prop_lackey_lines_round_trip(
        lines in prop::collection::vec((arb_kind(), any::<u64>(), any::<u16>(), any::<u8>()), 0..300),
        max in 1usize..50,
    ) {
        let text = lackey_text(&lines);
        let want: Vec<TraceEvent> = lines.iter().map(|&(k, va, s, _)| acc(k, va, s)).collect();
        let mut r = LackeyReader::from_reader(Cursor::new(text), "mem").unwrap();
        prop_assert_eq!(read_batched(&mut r, max).unwrap(), want);
    }

    #[test]
    fn prop_random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..3000), max in 1usize..100) {
        for fmt in [TraceFormat::Lackey, TraceFormat::Champsim, TraceFormat::Native] {
            read_no_panic(&bytes, fmt, max);
        }
    }

    #[test]
    fn prop_random_native_records_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600), max in 1usize..100) {
        let raw = raw_native(&bytes);
        read_no_panic(&raw, TraceFormat::Native, max);
        read_no_panic(&zst(&raw), TraceFormat::Native, max);
    }

    #[test]
    fn prop_random_text_never_panics(s in "[ILSM=, \\n0-9a-fx\\r\\t]{0,400}", max in 1usize..100) {
        read_no_panic(s.as_bytes(), TraceFormat::Lackey, max);
    }

    #[test]
    fn prop_mutated_files_never_panic(
        which in 0usize..7,
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        do_cut in any::<bool>(),
        max in 1usize..100,
    ) {
        let (fmt, orig) = &fixtures()[which];
        let mut b = orig.clone();
        for (i, v) in edits {
            let i = i.index(b.len());
            b[i] = v;
        }
        if do_cut {
            b.truncate(cut.index(b.len() + 1));
        }
        read_no_panic(&b, *fmt, max);
    }

    #[test]
    fn prop_truncated_files_error_or_prefix(which in 0usize..7, cut in any::<prop::sample::Index>()) {
        // Any cut of a valid file gives a prefix of its events, then possibly an error.
        let (fmt, orig) = &fixtures()[which];
        let full = read_bytes(orig, *fmt).unwrap();
        let b = &orig[..cut.index(orig.len() + 1)];
        let mut src = match trace::open_reader(Cursor::new(b.to_vec()), Path::new("cut"), *fmt) {
            Ok(s) => s,
            Err(_) => return Ok(()),
        };
        let mut got = Vec::new();
        let mut out = Vec::new();
        loop {
            match src.next_batch(&mut out, 64) {
                Ok(0) | Err(_) => break,
                Ok(_) => got.extend_from_slice(&out),
            }
        }
        prop_assert!(got.len() <= full.len());
        // A plain-text lackey cut can shorten the last line into a different valid line.
        let k = if which == 0 { got.len().saturating_sub(1) } else { got.len() };
        prop_assert_eq!(&got[..k], &full[..k]);
    }
}

#[test]
fn champsim_all_zero_record_is_one_fetch() {
    assert_eq!(champsim::RECORD_SIZE, 64);
    let mut v = Vec::new();
    let r = Instr::default().bytes();
    let mut src = ChampsimReader::from_reader(Cursor::new(r.to_vec()), "one").unwrap();
    src.next_batch(&mut v, 10).unwrap();
    assert_eq!(v, vec![acc(AccessKind::Fetch, 0, 4)]);
}
