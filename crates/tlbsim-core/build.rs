//! A digest of the core's source files (`tlbsim_core::SOURCE_HASH`): every file under
//! `src/`, in sorted path order, its path and its bytes through FNV-1a (64 bits). Sweep run
//! IDs include it (python/tlbsim/sweep.py), so that a sweep resumed after the model changed
//! runs its runs again instead of mixing in the stats of the model before.

use std::fs;
use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    println!("cargo:rerun-if-changed=src");
    let mut all = Vec::new();
    files(&src, &mut all);
    all.sort();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for path in &all {
        let rel = path.strip_prefix(root).unwrap_or(path);
        eat(rel.to_string_lossy().as_bytes());
        eat(&[0]);
        eat(&fs::read(path).unwrap_or_default());
        eat(&[0]);
    }
    println!("cargo:rustc-env=TLBSIM_SOURCE_HASH={hash:016x}");
}
