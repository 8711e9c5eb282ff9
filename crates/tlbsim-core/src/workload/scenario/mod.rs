//! `workload.kind = "scenario"`: the TOML scenario language (docs/ARCHITECTURE.md "Workloads", source
//! 2: "a small scenario language to write new ones"), compiled to a [`Workload`]. The
//! language — groups, files, processes, threads, every operation and its keys — is
//! documented in docs/SCENARIO.md; configs/scenario-example.toml is an example. Errors name
//! the dotted key (`workload.scenario.process[1].thread[0].program[3].count`).

use super::program::{AccessMode, Backing, FileSpec, GroupSpec, MapSpec, Op, Pattern, ProcessSpec, ThreadSpec, Workload};
use super::ptmalloc::Glibc;
use crate::error::{Error, Result};

use std::collections::{HashMap, HashSet};

mod spec;
pub use spec::*;
use spec::{retired, KEY};

/// Compile a scenario for a machine of `cores` cores and `nodes` NUMA nodes.
pub fn compile(spec: &ScenarioSpec, cores: u32, nodes: u32) -> Result<Workload> {
    // Groups: index 0 is `root` (the user's, or an unlimited one).
    let mut groups = vec![GroupSpec { name: "root".into(), limit_pages: 0 }];
    let mut group_index: HashMap<&str, usize> = HashMap::new();
    for (i, g) in spec.group.iter().enumerate() {
        let key = format!("{KEY}.group[{i}]");
        if group_index.contains_key(g.name.as_str()) {
            return Err(Error::config(format!("{key}.name"), format!("a second group named {:?}", g.name)));
        }
        check_range(&format!("{key}.limit_mib"), g.limit_mib, 0, 1 << 30)?;
        let spec = GroupSpec { name: g.name.clone(), limit_pages: g.limit_mib * 256 };
        if g.name == "root" {
            groups[0] = spec;
            group_index.insert(&g.name, 0);
        } else {
            group_index.insert(&g.name, groups.len());
            groups.push(spec);
        }
    }
    group_index.entry("root").or_insert(0);

    let mut files = Vec::new();
    let mut file_index: HashMap<&str, u32> = HashMap::new();
    for (i, f) in spec.file.iter().enumerate() {
        let key = format!("{KEY}.file[{i}]");
        if file_index.contains_key(f.name.as_str()) {
            return Err(Error::config(format!("{key}.name"), format!("a second file named {:?}", f.name)));
        }
        check_range(&format!("{key}.pages"), f.pages, 1, 1 << 36)?;
        file_index.insert(&f.name, files.len() as u32);
        files.push(FileSpec { name: f.name.clone(), pages: f.pages });
    }

    if spec.process.is_empty() && spec.vm.iter().all(|v| v.process.is_empty()) {
        return Err(Error::config(format!("{KEY}.process"), "a scenario needs at least one process ([[workload.scenario.process]])"));
    }
    // Every process with its key and VM: the top-level ones (dom0's under VMs), then each
    // VM's.
    let mut all: Vec<(String, &ScenarioProcess, usize)> = spec.process.iter().enumerate().map(|(i, p)| (format!("{KEY}.process[{i}]"), p, 0)).collect();
    let mut vms = Vec::new();
    let mut vm_names = HashSet::new();
    for (vi, v) in spec.vm.iter().enumerate() {
        let vkey = format!("{KEY}.vm[{vi}]");
        if !vm_names.insert(v.name.as_str()) {
            return Err(Error::config(format!("{vkey}.name"), format!("a second VM named {:?}", v.name)));
        }
        check_range(&format!("{vkey}.vcpus"), v.vcpus as u64, 1, 64)?;
        check_range(&format!("{vkey}.weight"), v.weight as u64, 1, 65535)?;
        check_range(&format!("{vkey}.cap"), v.cap as u64, 0, 100 * v.vcpus as u64)?;
        let pin = match &v.pin {
            None => vec![None; v.vcpus as usize],
            Some(p) => {
                if p.len() != v.vcpus as usize {
                    return Err(Error::config(format!("{vkey}.pin"), format!("{} entries for {} VCPUs: give one physical CPU per VCPU", p.len(), v.vcpus)));
                }
                for (i, &c) in p.iter().enumerate() {
                    check_core(&format!("{vkey}.pin[{i}]"), c, cores)?;
                }
                p.iter().map(|&c| Some(c)).collect()
            }
        };
        vms.push(super::program::VmSpec { name: v.name.clone(), vcpus: v.vcpus, weight: v.weight, cap: v.cap, pin, processes: Vec::new() });
        for (i, p) in v.process.iter().enumerate() {
            all.push((format!("{vkey}.process[{i}]"), p, vi));
        }
    }
    // Threads by name, as `io` names its server: their index in declaration order.
    let mut thread_index: HashMap<&str, Vec<u32>> = HashMap::new();
    for (n, t) in all.iter().flat_map(|(_, p, _)| &p.thread).enumerate() {
        thread_index.entry(t.name.as_str()).or_default().push(n as u32);
    }
    let mut c = Compiler {
        cores,
        nodes,
        files: &files,
        file_index: &file_index,
        thread_index: &thread_index,
        programs: Vec::new(),
        daemon_programs: Vec::new(),
        cpu_sets: Vec::new(),
    };
    let mut processes = Vec::new();
    let mut slots = 0;
    let mut pointers = 0u32;
    let mut process_names = HashSet::new();
    for (pi, (pkey, p, vm)) in all.iter().enumerate() {
        let (pkey, p, vm) = (pkey.as_str(), *p, *vm);
        let cpus = if vms.is_empty() { cores } else { vms[vm].vcpus };
        if let Some(v) = vms.get_mut(vm) {
            v.processes.push(pi);
        }
        if !process_names.insert(p.name.as_str()) {
            return Err(Error::config(format!("{pkey}.name"), format!("a second process named {:?}", p.name)));
        }
        let group = match &p.group {
            None => 0,
            Some(g) => *group_index
                .get(g.as_str())
                .ok_or_else(|| Error::config(format!("{pkey}.group"), format!("no group named {g:?}{}", known(spec.group.iter().map(|g| &g.name)))))?,
        };
        let mut slot_names: Vec<String> = Vec::new();
        let mut regions = Vec::new();
        for (ri, r) in p.region.iter().enumerate() {
            let rkey = format!("{pkey}.region[{ri}]");
            if slot_names.contains(&r.name) {
                return Err(Error::config(format!("{rkey}.name"), format!("a second region named {:?}", r.name)));
            }
            retired(&r.fpr, format!("{rkey}.fpr"), "`recyclable` (`recyclable = true`: frames recyclable within their context without a flush)")?;
            let mut spec = c.map_spec(&rkey, r.bytes, r.file.as_deref(), r.offset_pages, r.shared, r.populate, r.writable)?;
            spec.recyclable = r.recyclable;
            regions.push(spec);
            slot_names.push(r.name.clone());
        }
        let region_count = slot_names.len();
        for t in &p.thread {
            collect_names(&t.program, mapped_name, &mut slot_names);
        }
        slots = slots.max(slot_names.len());
        let mut pointer_names = Vec::new();
        for t in &p.thread {
            collect_names(&t.program, |o| o.pointer.as_ref(), &mut pointer_names);
        }
        pointers = pointers.max(pointer_names.len() as u32);
        if p.thread.is_empty() {
            return Err(Error::config(format!("{pkey}.thread"), "a process needs at least one thread ([[workload.scenario.process.thread]])"));
        }
        let names = SlotNames { names: &slot_names, regions: region_count, pointers: &pointer_names };
        let mut threads = Vec::new();
        for (ti, t) in p.thread.iter().enumerate() {
            let tkey = format!("{pkey}.thread[{ti}]");
            if let Some(core) = t.core {
                check_core(&format!("{tkey}.core"), core, cpus)?;
            }
            if t.program.is_empty() {
                return Err(Error::config(format!("{tkey}.program"), "a thread needs at least one operation"));
            }
            let program = c.program(&t.program, &format!("{tkey}.program"), t.daemon, &HashSet::new(), &names)?;
            threads.push(ThreadSpec {
                name: t.name.clone(),
                class: t.class.clone().unwrap_or_else(|| t.name.clone()),
                core: t.core,
                program,
                daemon: t.daemon,
            });
        }
        retired(
            &p.mitosis_replicas,
            format!("{pkey}.mitosis_replicas"),
            "the process's `page_tables` table: `page_tables.replica_sockets` (`[workload.scenario.process.page_tables] replica_sockets = [...]`)",
        )?;
        let page_tables = p.page_tables.resolve(&format!("{pkey}.page_tables"), nodes)?;
        processes.push(ProcessSpec { name: p.name.clone(), group, regions, threads, page_tables });
    }
    let Compiler { programs, daemon_programs, cpu_sets, .. } = c;
    let glibc = Glibc::parse(&format!("{KEY}.glibc"), &spec.glibc)?;
    let workload = Workload { groups, files, processes, programs, slots, daemon_programs, vms, cpu_sets, pointers, glibc, ..Default::default() };
    workload.check(cores).map_err(|m| Error::config(KEY, m))?;
    Ok(workload)
}

/// A process's region names: `names[i]` is slot i; the first `regions` are pre-mapped.
struct SlotNames<'a> {
    names: &'a [String],
    regions: usize,
    /// The process's pointer names: `pointers[i]` is pointer i.
    pointers: &'a [String],
}

struct Compiler<'a> {
    cores: u32,
    nodes: u32,
    files: &'a [FileSpec],
    file_index: &'a HashMap<&'a str, u32>,
    thread_index: &'a HashMap<&'a str, Vec<u32>>,
    programs: Vec<Vec<Op>>,
    daemon_programs: Vec<usize>,
    /// The CPU sets of the `set-affinity` operations, one per distinct set.
    cpu_sets: Vec<Vec<u64>>,
}

impl Compiler<'_> {
    /// Compile one program (a thread's, or a fork child's) into `programs`; returns its
    /// index. `inherited` are the mmapped names the forking program makes visible.
    fn program(&mut self, ops: &[ScenarioOp], key: &str, daemon: bool, inherited: &HashSet<String>, names: &SlotNames) -> Result<usize> {
        let index = self.programs.len();
        self.programs.push(Vec::new());
        let mut own = Vec::new();
        collect_mmap_names_shallow(ops, &mut own);
        let mut visible = inherited.clone();
        visible.extend(own);
        let flat = self.ops(ops, key, daemon, &visible, names)?;
        self.programs[index] = flat;
        Ok(index)
    }

    fn ops(&mut self, ops: &[ScenarioOp], key: &str, daemon: bool, visible: &HashSet<String>, names: &SlotNames) -> Result<Vec<Op>> {
        let mut out = Vec::new();
        for (i, o) in ops.iter().enumerate() {
            let at = format!("{key}[{i}]");
            self.op(o, &at, daemon, visible, names, &mut out)?;
        }
        Ok(out)
    }

    fn op(&mut self, o: &ScenarioOp, at: &str, daemon: bool, visible: &HashSet<String>, names: &SlotNames, out: &mut Vec<Op>) -> Result<()> {
        retired(&o.fpr, format!("{at}.fpr"), "`recyclable` (`recyclable = true`: frames recyclable within their context without a flush)")?;
        let allowed = o.op.keys();
        for k in o.given() {
            if !allowed.contains(&k) {
                let takes = if allowed.is_empty() { "no other key".to_owned() } else { allowed.join(", ") };
                return Err(Error::config(format!("{at}.{k}"), format!("not a key of op {:?}; it takes {takes}", o.op.name())));
            }
        }
        let need = |v: bool, k: &str| -> Result<()> {
            if v {
                Ok(())
            } else {
                Err(Error::config(format!("{at}.{k}"), format!("op {:?} needs it", o.op.name())))
            }
        };
        let slot = |o: &ScenarioOp| -> Result<usize> {
            let name = o.region.as_deref().ok_or_else(|| Error::config(format!("{at}.region"), format!("op {:?} needs it", o.op.name())))?;
            resolve_region(name, &format!("{at}.region"), visible, names)
        };
        match o.op {
            OpName::Access => {
                let slot = slot(o)?;
                need(o.count.is_some(), "count")?;
                let count = o.count.unwrap();
                check_range(&format!("{at}.count"), count, 1, 1 << 48)?;
                let pattern_name = o.pattern.unwrap_or(PatternName::Sequential);
                if o.theta.is_some() && pattern_name != PatternName::Zipf {
                    return Err(Error::config(format!("{at}.theta"), "only a zipf pattern takes theta"));
                }
                if o.stride.is_some() && matches!(pattern_name, PatternName::Random | PatternName::Zipf) {
                    return Err(Error::config(format!("{at}.stride"), "only a sequential or strided pattern takes a stride"));
                }
                let pattern = match pattern_name {
                    PatternName::Sequential => Pattern::Sequential,
                    PatternName::Random => Pattern::Random,
                    PatternName::Strided => Pattern::Strided,
                    PatternName::Zipf => {
                        let theta = o.theta.unwrap_or(0.99);
                        if !(theta.is_finite() && theta > 0.0) {
                            return Err(Error::config(format!("{at}.theta"), format!("{theta}: must be a positive number")));
                        }
                        Pattern::Zipf { theta }
                    }
                };
                let mode = match o.mode.unwrap_or(ModeName::Read) {
                    ModeName::Read | ModeName::Write | ModeName::Fetch if o.write_fraction.is_some() => {
                        return Err(Error::config(format!("{at}.write_fraction"), "only mode = \"mixed\" takes a write fraction"))
                    }
                    ModeName::Read => AccessMode::Read,
                    ModeName::Write => AccessMode::Write,
                    ModeName::Fetch => AccessMode::Fetch,
                    ModeName::Mixed => {
                        need(o.write_fraction.is_some(), "write_fraction")?;
                        let f = o.write_fraction.unwrap();
                        if !(0.0..=1.0).contains(&f) {
                            return Err(Error::config(format!("{at}.write_fraction"), format!("{f}: must be 0.0 to 1.0")));
                        }
                        AccessMode::Mixed(f)
                    }
                };
                let stride = o.stride.unwrap_or(64);
                check_range(&format!("{at}.stride"), stride, 1, 1 << 40)?;
                out.push(Op::Access { slot, pattern, mode, count, offset: o.offset.unwrap_or(0), len: o.len.unwrap_or(0), stride });
            }
            OpName::Compute | OpName::Block => {
                need(o.cycles.is_some(), "cycles")?;
                let cycles = o.cycles.unwrap();
                check_range(&format!("{at}.cycles"), cycles, 1, 1 << 50)?;
                out.push(if o.op == OpName::Compute { Op::Compute { cycles } } else { Op::Block { cycles } });
            }
            OpName::Mmap => {
                let slot = slot(o)?;
                need(o.bytes.is_some(), "bytes")?;
                if o.offset_pages.is_some() && o.file.is_none() {
                    return Err(Error::config(format!("{at}.offset_pages"), "only a file mapping takes offset_pages"));
                }
                let spec = self.map_spec(
                    at,
                    o.bytes.unwrap(),
                    o.file.as_deref(),
                    o.offset_pages.unwrap_or(0),
                    o.shared.unwrap_or(false),
                    o.populate.unwrap_or(false),
                    o.writable.unwrap_or(true),
                )?;
                let spec = MapSpec { recyclable: o.recyclable.unwrap_or(false), fixed: o.fixed.unwrap_or(false), ..spec };
                out.push(Op::Mmap { slot, spec });
            }
            OpName::Munmap => out.push(Op::Munmap { slot: slot(o)? }),
            OpName::Msync => out.push(Op::Msync { slot: slot(o)? }),
            OpName::Mprotect => {
                let slot = slot(o)?;
                need(o.writable.is_some(), "writable")?;
                out.push(Op::Mprotect { slot, writable: o.writable.unwrap() });
            }
            OpName::Madvise => {
                let slot = slot(o)?;
                need(o.advice.is_some(), "advice")?;
                match o.advice.unwrap() {
                    Advice::Dontneed => out.push(Op::MadviseDontneed { slot }),
                }
            }
            OpName::Fork => {
                need(o.program.is_some(), "program")?;
                let child = o.program.as_ref().unwrap();
                if child.is_empty() {
                    return Err(Error::config(format!("{at}.program"), "a child program needs at least one operation"));
                }
                if let Some(core) = o.core {
                    check_core(&format!("{at}.core"), core, self.cores)?;
                }
                let child_daemon = o.daemon.unwrap_or(false);
                let program = self.program(child, &format!("{at}.program"), child_daemon, visible, names)?;
                if child_daemon {
                    self.daemon_programs.push(program);
                }
                out.push(Op::Fork { program, core: o.core });
            }
            OpName::Exit => out.push(Op::Exit),
            OpName::Count => out.push(Op::CountOp),
            OpName::Barrier => out.push(Op::Barrier),
            OpName::Serve => out.push(Op::Serve),
            OpName::Io => {
                need(o.server.is_some(), "server")?;
                need(o.cycles.is_some(), "cycles")?;
                let cycles = o.cycles.unwrap();
                check_range(&format!("{at}.cycles"), cycles, 1, 1 << 50)?;
                let name = o.server.as_deref().unwrap();
                let server = match self.thread_index.get(name).map(Vec::as_slice) {
                    Some([one]) => *one,
                    Some(many) => {
                        return Err(Error::config(
                            format!("{at}.server"),
                            format!("{} threads are named {name:?}: give the server a name of its own", many.len()),
                        ))
                    }
                    None => {
                        let mut known: Vec<&&str> = self.thread_index.keys().collect();
                        known.sort();
                        return Err(Error::config(
                            format!("{at}.server"),
                            format!("no thread named {name:?} (threads: {})", known.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ")),
                        ));
                    }
                };
                out.push(Op::Io { server, cycles });
            }
            OpName::MigrateThread => {
                need(o.core.is_some(), "core")?;
                let core = o.core.unwrap();
                check_core(&format!("{at}.core"), core, self.cores)?;
                out.push(Op::MigrateThread { core });
            }
            OpName::SetAffinity => {
                need(o.cores.is_some(), "cores")?;
                let cores = o.cores.as_ref().unwrap();
                if cores.is_empty() {
                    return Err(Error::config(format!("{at}.cores"), "an empty CPU set (sched_setaffinity refuses one: EINVAL)"));
                }
                let mut set = vec![0u64; (self.cores as usize).div_ceil(64)];
                for (j, &core) in cores.iter().enumerate() {
                    check_core(&format!("{at}.cores[{j}]"), core, self.cores)?;
                    set[core as usize / 64] |= 1 << (core % 64);
                }
                let index = self.cpu_sets.iter().position(|s| *s == set).unwrap_or_else(|| {
                    self.cpu_sets.push(set);
                    self.cpu_sets.len() - 1
                });
                out.push(Op::SetAffinity { set: index as u32 });
            }
            OpName::MigratePages => {
                let slot = slot(o)?;
                need(o.node.is_some(), "node")?;
                let node = o.node.unwrap();
                if node >= self.nodes {
                    return Err(Error::config(
                        format!("{at}.node"),
                        format!("node {node} does not exist: the machine's nodes are 0 to {} (one per socket)", self.nodes - 1),
                    ));
                }
                out.push(Op::MigratePages { slot, node });
            }
            OpName::Malloc | OpName::Free | OpName::Realloc | OpName::UsePointer => {
                need(o.pointer.is_some(), "pointer")?;
                let name = o.pointer.as_deref().unwrap();
                let ptr = names.pointers.iter().position(|p| p == name).expect("collected from every program of the process") as u32;
                let bytes = || -> Result<u64> {
                    need(o.bytes.is_some(), "bytes")?;
                    let bytes = o.bytes.unwrap();
                    check_range(&format!("{at}.bytes"), bytes, 1, 1 << 46)?;
                    Ok(bytes)
                };
                out.push(match o.op {
                    OpName::Malloc => Op::Malloc { ptr, bytes: bytes()?, slot: resolve_region(name, &format!("{at}.pointer"), visible, names)? },
                    OpName::Realloc => Op::Realloc { ptr, bytes: bytes()? },
                    OpName::Free => Op::Free { ptr },
                    _ => Op::UsePtr { slot: resolve_region(name, &format!("{at}.pointer"), visible, names)?, ptr },
                });
            }
            OpName::Loop => {
                need(o.count.is_some(), "count")?;
                need(o.body.is_some(), "body")?;
                let count = o.count.unwrap();
                if count == 0 && !daemon {
                    return Err(Error::config(
                        format!("{at}.count"),
                        "0 (forever) is only allowed in a daemon thread (daemon = true), or a fork child with daemon = true: \
                         the run ends when every other thread has exited",
                    ));
                }
                let body_ops = o.body.as_ref().unwrap();
                if body_ops.is_empty() {
                    return Err(Error::config(format!("{at}.body"), "a loop needs at least one operation"));
                }
                let body = self.ops(body_ops, &format!("{at}.body"), daemon, visible, names)?;
                out.push(Op::Loop { count, body: body.len() });
                out.extend(body);
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn map_spec(&self, key: &str, bytes: u64, file: Option<&str>, offset_pages: u64, shared: bool, populate: bool, writable: bool) -> Result<MapSpec> {
        check_range(&format!("{key}.bytes"), bytes, 1, 1 << 47)?;
        let backing = match file {
            None => Backing::Anonymous,
            Some(name) => {
                let file = *self
                    .file_index
                    .get(name)
                    .ok_or_else(|| Error::config(format!("{key}.file"), format!("no file named {name:?}{}", known(self.files.iter().map(|f| &f.name)))))?;
                let pages = self.files[file as usize].pages;
                if offset_pages + bytes.div_ceil(4096) > pages {
                    return Err(Error::config(
                        format!("{key}.bytes"),
                        format!("{bytes} bytes from page {offset_pages} map past the end of file {name:?} ({pages} pages)"),
                    ));
                }
                Backing::File { file, offset_pages }
            }
        };
        Ok(MapSpec { recyclable: false, fixed: false, bytes, backing, shared, populate, writable })
    }
}

/// The names `pick` takes from each operation (a region an operation maps, a pointer), in
/// first-mention order, through loop bodies and fork children (slot and pointer indices).
fn collect_names(ops: &[ScenarioOp], pick: fn(&ScenarioOp) -> Option<&String>, names: &mut Vec<String>) {
    for o in ops {
        if let Some(r) = pick(o) {
            if !names.contains(r) {
                names.push(r.clone());
            }
        }
        for inner in [&o.body, &o.program].into_iter().flatten() {
            collect_names(inner, pick, names);
        }
    }
}

/// Names `mmap` operations of this program write (through loop bodies, not into fork
/// children: a child's mappings are its own).
fn collect_mmap_names_shallow(ops: &[ScenarioOp], names: &mut Vec<String>) {
    for o in ops {
        if let Some(r) = mapped_name(o) {
            names.push(r.clone());
        }
        if o.op == OpName::Loop {
            if let Some(body) = &o.body {
                collect_mmap_names_shallow(body, names);
            }
        }
    }
}

/// The region name an operation gives bytes to: an mmap's region, or the pointer of a
/// malloc or use-pointer (the allocation's bytes, in this thread).
fn mapped_name(o: &ScenarioOp) -> Option<&String> {
    match o.op {
        OpName::Mmap => o.region.as_ref(),
        OpName::Malloc | OpName::UsePointer => o.pointer.as_ref(),
        _ => None,
    }
}

fn resolve_region(name: &str, key: &str, visible: &HashSet<String>, names: &SlotNames) -> Result<usize> {
    let slot = names.names.iter().position(|n| n == name);
    match slot {
        Some(s) if s < names.regions || visible.contains(name) => Ok(s),
        _ => {
            let regions = &names.names[..names.regions];
            let mut mapped: Vec<&String> = names.names[names.regions..].iter().filter(|n| visible.contains(*n)).collect();
            mapped.sort();
            let list = |v: Vec<&String>| if v.is_empty() { "none".to_owned() } else { v.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ") };
            Err(Error::config(
                key,
                format!(
                    "unknown region {name:?}: the process's regions are {}; this program's mmap operations map {}",
                    list(regions.iter().collect()),
                    list(mapped)
                ),
            ))
        }
    }
}

fn known<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let v: Vec<String> = names.map(|n| format!("{n:?}")).collect();
    if v.is_empty() {
        " (none are defined)".to_owned()
    } else {
        format!(" (defined: {})", v.join(", "))
    }
}

fn check_core(key: &str, core: u32, cores: u32) -> Result<()> {
    if core >= cores {
        return Err(Error::config(key, format!("core {core} does not exist (the machine has {cores} cores, 0 to {})", cores - 1)));
    }
    Ok(())
}

fn check_range(key: &str, v: u64, lo: u64, hi: u64) -> Result<()> {
    if v < lo || v > hi {
        return Err(Error::config(key, format!("{v} is out of range: allowed {lo} to {hi}")));
    }
    Ok(())
}
