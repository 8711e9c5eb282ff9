//! The fuzz targets (fuzz/src/targets.rs, shared with the AFL++ harness) on every committed
//! input: each target's seed corpus (fuzz/corpus/TARGET/) and the inputs that once crashed
//! or hung it (fuzz/regressions/TARGET/, each fixed at its cause). A target returns on a
//! clean error or success and panics on anything else, so these tests fail if a fixed
//! crash comes back. Fuzzing itself runs outside `make test` (`make fuzz`,
//! docs/DEVELOPING.md "Fuzzing").

#[path = "../../../fuzz/src/targets.rs"]
#[allow(dead_code)]
mod targets;

use std::path::{Path, PathBuf};

/// The committed inputs of `target`, corpus then regressions, in name order.
fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut all = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else { continue };
        let mut files: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
        files.sort();
        all.extend(files);
    }
    all
}

fn run_all(target: &str) {
    let files = inputs(target);
    assert!(!files.is_empty(), "fuzz/corpus/{target}/ has no seeds");
    for f in files {
        let data = std::fs::read(&f).unwrap();
        let result = std::panic::catch_unwind(|| targets::run(target, &data));
        assert!(result.is_ok(), "fuzz target {target} failed on {}", f.display());
    }
}

#[test]
fn every_target_has_a_test() {
    assert_eq!(targets::TARGETS, ["lackey", "champsim", "native", "recorded", "compile", "config", "scenario"]);
}

#[test]
fn lackey() {
    run_all("lackey");
}

#[test]
fn champsim() {
    run_all("champsim");
}

#[test]
fn native() {
    run_all("native");
}

#[test]
fn recorded() {
    run_all("recorded");
}

#[test]
fn compile() {
    run_all("compile");
}

#[test]
fn config() {
    run_all("config");
}

#[test]
fn scenario() {
    run_all("scenario");
}
