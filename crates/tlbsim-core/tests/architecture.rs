//! The crate's layering (docs/ARCHITECTURE.md "Layers"), read from the source: every
//! `crate::<module>` path of a top-level module must name a module of its own layer or a
//! lower one, and the modules of one layer must not use each other in a circle. A new
//! import circle fails here rather than in a review.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Lowest first. A module may use modules of its own layer and of the layers below.
const LAYERS: &[(&str, &[&str])] = &[
    ("vocabulary: types, errors, config trees", &["types", "error", "rng", "fasthash", "control", "tree"]),
    ("the plug-in registry mechanism", &["registry"]),
    ("the config document (builds nothing)", &["config"]),
    ("machine structures", &["stats", "prefetch", "memory", "trace", "page_table", "tlb", "memsys", "walk"]),
    ("workloads (the OS-mode IR, generators, trace-mode streams)", &["workload"]),
    ("plug-in axes", &["coherence", "recycling", "placement", "hypervisor"]),
    ("the machine assembled (with its page-table backend) and the one access path", &["machine", "access"]),
    ("the engines", &["sim", "os"]),
    ("set-up and tools", &["setup", "hostmem", "fuzz", "bench"]),
];

/// Top-level module → the top-level modules its code names (comments skipped).
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut modules = BTreeSet::new();
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        if name != "lib" && (p.is_dir() || p.extension().is_some_and(|x| x == "rs")) {
            modules.insert(name);
        }
    }
    let mut graph = BTreeMap::new();
    for m in &modules {
        let mut uses = BTreeSet::new();
        let mut files = Vec::new();
        collect_rs(&src.join(format!("{m}.rs")), &mut files);
        collect_rs(&src.join(m), &mut files);
        for f in files {
            for line in std::fs::read_to_string(&f).unwrap().lines() {
                let code = line.split("//").next().unwrap_or("");
                for used in crate_paths(code) {
                    if used != *m && modules.contains(&used) {
                        uses.insert(used);
                    }
                }
            }
        }
        graph.insert(m.clone(), uses);
    }
    graph
}

fn collect_rs(p: &Path, out: &mut Vec<std::path::PathBuf>) {
    if p.is_file() {
        out.push(p.to_path_buf());
    } else if p.is_dir() {
        for e in std::fs::read_dir(p).unwrap() {
            collect_rs(&e.unwrap().path(), out);
        }
    }
}

/// The first path segment after every `crate::` of `code`, the names of a `crate::{a, b::c}`
/// group included.
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = 0;
            for (j, ch) in group.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.push(first_segment(&group[start..j]));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(first_segment(&group[start..j]));
                        start = j + 1;
                    }
                    _ => {}
                }
            }
        } else {
            out.push(first_segment(rest));
        }
    }
    out
}

fn first_segment(path: &str) -> String {
    path.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, mods)| mods.contains(&module))
}

#[test]
fn every_module_has_a_layer_and_uses_only_its_own_and_lower_ones() {
    let graph = module_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let mut wrong = Vec::new();
    for (m, uses) in &graph {
        let Some(lm) = layer_of(m) else {
            wrong.push(format!("{m} has no layer: add it to LAYERS (and docs/ARCHITECTURE.md)"));
            continue;
        };
        for u in uses {
            match layer_of(u) {
                Some(lu) if lu > lm => wrong.push(format!("{m} ({}) uses {u} ({}), a higher layer", LAYERS[lm].0, LAYERS[lu].0)),
                _ => {}
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn no_import_circle_between_modules() {
    let graph = module_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // A depth-first search for a back edge, reporting the circle.
    fn visit(m: &str, g: &BTreeMap<String, BTreeSet<String>>, path: &mut Vec<String>, done: &mut BTreeSet<String>) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            return Some(path[i..].iter().cloned().chain([m.to_string()]).collect());
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for u in g.get(m).into_iter().flatten() {
            if let Some(circle) = visit(u, g, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        if let Some(circle) = visit(m, &graph, &mut Vec::new(), &mut done) {
            panic!("import circle: {}", circle.join(" -> "));
        }
    }
}

#[test]
fn the_reader_finds_grouped_and_nested_paths() {
    assert_eq!(crate_paths("use crate::{config::Config, tlb::{Tlb, X}, types};"), ["config", "tlb", "types"]);
    assert_eq!(crate_paths("let x = crate::os::run(cfg, crate::workload::build(cfg)?);"), ["os", "workload"]);
}
