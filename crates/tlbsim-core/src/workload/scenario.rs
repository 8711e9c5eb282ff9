//! `workload.kind = "scenario"`: the TOML scenario language (docs/ARCHITECTURE.md "Workloads", source
//! 2: "a small scenario language to write new ones"), compiled to a [`Workload`].
//!
//! A scenario is `[workload.scenario]` in the run's config: memory groups, files, and
//! processes with pre-mapped regions and threads, each thread running a program of
//! operations. Example (configs/scenario-example.toml has a longer one):
//!
//! ```toml
//! [workload]
//! kind = "scenario"
//!
//! [[workload.scenario.group]]
//! name = "batch"
//! limit_mib = 64                 # 0 = unlimited
//!
//! [[workload.scenario.file]]
//! name = "index.html"
//! pages = 3
//!
//! [[workload.scenario.process]]
//! name = "server"
//! group = "batch"                # default: "root", an unlimited group
//! region = [{ name = "heap", bytes = 1048576, populate = true }]
//!
//! [[workload.scenario.process.thread]]
//! name = "worker"
//! class = "io"                   # default: the thread's name
//! core = 0                       # default: placed by the scheduler
//! program = [
//!   { op = "loop", count = 1000, body = [
//!     { op = "mmap", region = "page", bytes = 12288, file = "index.html", shared = true, writable = false },
//!     { op = "access", region = "page", pattern = "sequential", count = 192 },
//!     { op = "munmap", region = "page" },
//!     { op = "count" },
//!   ] },
//!   { op = "exit" },
//! ]
//! ```
//!
//! Operations (`op`) and their keys (* = required):
//! - `access`: region*, count* (accesses), pattern (`sequential` (default), `random`,
//!   `strided`, `zipf`), theta (zipf; default 0.99), mode (`read` (default), `write`,
//!   `mixed`, `fetch`: instruction fetches, through the instruction TLB), write_fraction*
//!   (mixed), offset, len (bytes of the window; 0 = to the
//!   region's end), stride (sequential/strided; default 64).
//! - `compute`: cycles*. `block`: cycles* (blocked in the kernel).
//! - `mmap`: region* (the slot it writes), bytes*, file (default: anonymous),
//!   offset_pages (within the file), shared (default false), populate (default false),
//!   writable (default true), recyclable (its frames may be recycled within their context
//!   without a flush when it is unmapped: MAP_FPR, acted on when the run sets
//!   `os.recycling = "fpr"`; default false; the key was `fpr` before), fixed (MAP_FIXED at the address
//!   the slot held before, default false). A process region takes `recyclable` too.
//! - `munmap`, `msync`: region*. `mprotect`: region*, writable*. `madvise`: region*,
//!   advice* (`dontneed`).
//! - `fork`: program* (the child's one thread), core, daemon (default false).
//! - `exit`; `count` (one operation of the thread's work completed); `barrier` (wait until
//!   every non-daemon thread of the process still alive has reached a barrier).
//! - `migrate-thread`: core*. `migrate-pages`: region*, node*.
//! - `loop`: count* (0 = forever, only in a daemon thread or daemon fork child), body*.
//! - `io`: server* (the name of the thread that serves it; unique), cycles* (the device's
//!   time): a split-driver request (Xen's blkfront): the thread sleeps until the server
//!   has taken it, the device has completed it and the server has answered it. `serve`:
//!   take the next request or completion of this thread's queue, asleep until there is
//!   one (Xen's blkback: `{ op = "loop", count = 0, body = [{ op = "serve" }, ...] }` in a
//!   daemon of dom0). os/io.rs.
//!
//! A process may take a `page_tables` table (`[workload.scenario.process.page_tables]`):
//! page-table options the page-table backend interprets (`crate::workload::program::PtOptionKeys`),
//! inherited by its fork children. `replica_sockets = "all" | "none" | [sockets]`: the
//! sockets holding a copy of its page tables, for a backend that keeps copies
//! (`os.pt_placement = "mitosis"`, overriding `[placement.mitosis] replicas`); ignored by the
//! other backends. (It was the process key `mitosis_replicas` before.)
//!
//! Virtual machines (`[[workload.scenario.vm]]`, the hypervisor axis, `crate::hypervisor`)
//! hold their own processes; VM i is domain i in declaration order, the first one dom0,
//! and top-level processes belong to dom0. Keys: name*, vcpus (default 1), weight (default
//! 256), cap (percent of one CPU, default 0 = none), pin (one physical CPU per VCPU; default
//! none pinned). A thread's `core` (and a `fork`'s or `migrate-thread`'s) names a VCPU of
//! its VM. The tag paper's `0012` placement on two CPUs:
//!
//! ```toml
//! [[workload.scenario.vm]]
//! name = "dom0"
//! vcpus = 2
//! pin = [0, 0]
//! [[workload.scenario.vm.process]]
//! name = "xenstored"
//! thread = [{ name = "x", program = [{ op = "loop", count = 0, body = [{ op = "block", cycles = 3000000 }] }], daemon = true }]
//!
//! [[workload.scenario.vm]]
//! name = "dom1"
//! pin = [1]
//! [[workload.scenario.vm.process]]
//! name = "db"
//! region = [{ name = "heap", bytes = 1048576, populate = true }]
//! thread = [{ name = "t", program = [{ op = "access", region = "heap", count = 100000 }, { op = "exit" }] }]
//! ```
//!
//! Region names become slot indices (program.rs): the process's regions first, in order,
//! then every other name in the order an `mmap` of the process's programs first mentions
//! it (thread programs in order, depth first through loop bodies and fork children). A
//! program may name a process region, or a region an `mmap` of the same program (or, in a
//! fork child, of the program that forked it) writes; any other name is an error.
//!
//! Loops compile to the flat form: `Loop { count, body }` followed by the body's
//! operations. Every error names the key (`workload.scenario.process[0].thread[1].
//! program[2].pattern`), and the result passes [`Workload::check`].

use super::program::{AccessMode, Backing, FileSpec, GroupSpec, MapSpec, Op, Pattern, ProcessSpec, ThreadSpec, Workload};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};

const KEY: &str = "workload.scenario";

/// `[workload.scenario]`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScenarioSpec {
    /// Memory groups (cgroups). A group named `root` replaces the implicit unlimited one
    /// that processes without a group belong to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group: Vec<ScenarioGroup>,
    /// Files of the page cache that regions and `mmap` operations can map.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file: Vec<ScenarioFile>,
    #[serde(default)]
    pub process: Vec<ScenarioProcess>,
    /// Virtual machines (`[[workload.scenario.vm]]`), each holding its processes. With any,
    /// VM i is domain i in declaration order (the first is dom0); top-level processes are
    /// dom0's; a thread's `core` names a VCPU of its VM.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vm: Vec<ScenarioVm>,
}

/// `[[workload.scenario.vm]]`: a domain under the hypervisor (`crate::hypervisor`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScenarioVm {
    pub name: String,
    /// VCPUs (default 1).
    #[serde(default = "one")]
    pub vcpus: u32,
    /// Credit-scheduler weight (default 256, Xen's).
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Most of one CPU the VM may use, in percent (default 0: no cap).
    #[serde(default)]
    pub cap: u32,
    /// Per VCPU, the physical CPU it runs on only (default: none pinned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<Vec<u32>>,
    #[serde(default)]
    pub process: Vec<ScenarioProcess>,
}

fn one() -> u32 {
    1
}

fn default_weight() -> u32 {
    256
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScenarioGroup {
    pub name: String,
    /// Memory limit in MiB; 0 = unlimited.
    #[serde(default)]
    pub limit_mib: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub name: String,
    /// Size in 4 KiB pages.
    pub pages: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScenarioProcess {
    pub name: String,
    /// Name of a `[[workload.scenario.group]]`; none = `root`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Regions mapped before the threads start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub region: Vec<ScenarioRegion>,
    pub thread: Vec<ScenarioThread>,
    /// Page-table options for this process and its forked children, which the page-table
    /// backend interprets (`replica_sockets`: see [`crate::workload::program::PtOptionKeys`]).
    /// Unset: the backend's system-wide settings.
    #[serde(default, skip_serializing_if = "crate::workload::program::PtOptionKeys::is_unset")]
    pub page_tables: crate::workload::program::PtOptionKeys,
    /// Retired: now `page_tables.replica_sockets` (an error naming it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mitosis_replicas: Retired,
}

/// A pre-mapped region of a process.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScenarioRegion {
    pub name: String,
    pub bytes: u64,
    /// Name of a `[[workload.scenario.file]]`; none = anonymous memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// First page of the mapping within the file.
    #[serde(default)]
    pub offset_pages: u64,
    /// MAP_SHARED (true) or MAP_PRIVATE (false).
    #[serde(default)]
    pub shared: bool,
    /// MAP_POPULATE.
    #[serde(default)]
    pub populate: bool,
    /// PROT_WRITE (PROT_READ is always given).
    #[serde(default = "yes")]
    pub writable: bool,
    /// Its frames may be recycled within their context without a flush when it is
    /// unmapped (MAP_FPR; acted on when the run sets `os.recycling = "fpr"`).
    #[serde(default)]
    pub recyclable: bool,
    /// Retired: now `recyclable` (an error naming it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fpr: Retired,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScenarioThread {
    pub name: String,
    /// Class for per-class throughput ("io", "compute"); none = the thread's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Pinned core; none = placed by the scheduler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core: Option<u32>,
    /// A background thread: the run ends when every non-daemon thread has exited.
    #[serde(default)]
    pub daemon: bool,
    pub program: Vec<ScenarioOp>,
}

/// The operation an entry of a program is.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum OpName {
    Access,
    Compute,
    Mmap,
    Munmap,
    Mprotect,
    Madvise,
    Msync,
    Fork,
    Exit,
    Block,
    MigrateThread,
    MigratePages,
    Loop,
    Count,
    Barrier,
    Io,
    Serve,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PatternName {
    Sequential,
    Random,
    Strided,
    Zipf,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ModeName {
    Read,
    Write,
    Mixed,
    Fetch,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Advice {
    Dontneed,
}

/// One entry of a program: `op` says which operation, the other keys are its arguments
/// (which ones an operation takes is checked at compile time, with the key named).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScenarioOp {
    pub op: OpName,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<PatternName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theta: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ModeName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_fraction: Option<f64>,
    /// access: accesses; loop: iterations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub len: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stride: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset_pages: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub populate: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writable: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recyclable: Option<bool>,
    /// Retired: now `recyclable` (an error naming it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fpr: Retired,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advice: Option<Advice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon: Option<bool>,
    /// loop: the operations repeated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Vec<ScenarioOp>>,
    /// fork: the child's program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<Vec<ScenarioOp>>,
    /// io: the name of the thread that serves the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

fn yes() -> bool {
    true
}

/// A key the scenario language no longer takes, kept in its struct only so that a config
/// still using it gets an error naming the key that replaced it ([`retired`]).
pub type Retired = Option<serde_json::Value>;

/// The error for a retired key `key` (present when `value` is), naming what replaced it.
fn retired(value: &Retired, key: String, now: &str) -> Result<()> {
    match value {
        None => Ok(()),
        Some(_) => Err(Error::config(key, format!("this key was renamed: use {now}"))),
    }
}

impl OpName {
    fn name(self) -> &'static str {
        match self {
            OpName::Access => "access",
            OpName::Compute => "compute",
            OpName::Mmap => "mmap",
            OpName::Munmap => "munmap",
            OpName::Mprotect => "mprotect",
            OpName::Madvise => "madvise",
            OpName::Msync => "msync",
            OpName::Fork => "fork",
            OpName::Exit => "exit",
            OpName::Block => "block",
            OpName::MigrateThread => "migrate-thread",
            OpName::MigratePages => "migrate-pages",
            OpName::Loop => "loop",
            OpName::Count => "count",
            OpName::Barrier => "barrier",
            OpName::Io => "io",
            OpName::Serve => "serve",
        }
    }

    /// The keys this operation takes besides `op`.
    fn keys(self) -> &'static [&'static str] {
        match self {
            OpName::Access => &["region", "pattern", "theta", "mode", "write_fraction", "count", "offset", "len", "stride"],
            OpName::Compute | OpName::Block => &["cycles"],
            OpName::Mmap => &["region", "bytes", "file", "offset_pages", "shared", "populate", "writable", "recyclable", "fixed"],
            OpName::Munmap | OpName::Msync => &["region"],
            OpName::Mprotect => &["region", "writable"],
            OpName::Madvise => &["region", "advice"],
            OpName::Fork => &["program", "core", "daemon"],
            OpName::Exit | OpName::Count | OpName::Barrier | OpName::Serve => &[],
            OpName::Io => &["server", "cycles"],
            OpName::MigrateThread => &["core"],
            OpName::MigratePages => &["region", "node"],
            OpName::Loop => &["count", "body"],
        }
    }
}

impl ScenarioOp {
    /// The keys given besides `op`.
    fn given(&self) -> Vec<&'static str> {
        let mut g = Vec::new();
        let mut add = |present: bool, key: &'static str| {
            if present {
                g.push(key)
            }
        };
        add(self.region.is_some(), "region");
        add(self.pattern.is_some(), "pattern");
        add(self.theta.is_some(), "theta");
        add(self.mode.is_some(), "mode");
        add(self.write_fraction.is_some(), "write_fraction");
        add(self.count.is_some(), "count");
        add(self.offset.is_some(), "offset");
        add(self.len.is_some(), "len");
        add(self.stride.is_some(), "stride");
        add(self.cycles.is_some(), "cycles");
        add(self.bytes.is_some(), "bytes");
        add(self.file.is_some(), "file");
        add(self.offset_pages.is_some(), "offset_pages");
        add(self.shared.is_some(), "shared");
        add(self.populate.is_some(), "populate");
        add(self.recyclable.is_some(), "recyclable");
        add(self.fixed.is_some(), "fixed");
        add(self.writable.is_some(), "writable");
        add(self.advice.is_some(), "advice");
        add(self.core.is_some(), "core");
        add(self.node.is_some(), "node");
        add(self.daemon.is_some(), "daemon");
        add(self.body.is_some(), "body");
        add(self.program.is_some(), "program");
        add(self.server.is_some(), "server");
        g
    }
}

/// Parse `[workload.scenario]` (errors name the key under `workload.scenario`).
pub fn parse(table: &serde_json::Value) -> Result<ScenarioSpec> {
    crate::tree::from_tree_at("workload.scenario", table.clone())
}

/// `[workload.scenario]` with every default filled in (the effective config's form).
pub fn normalize(table: &serde_json::Value) -> Result<serde_json::Value> {
    Ok(serde_json::to_value(parse(table)?).expect("a scenario serializes"))
}

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
    let mut c =
        Compiler { cores, nodes, files: &files, file_index: &file_index, thread_index: &thread_index, programs: Vec::new(), daemon_programs: Vec::new() };
    let mut processes = Vec::new();
    let mut slots = 0;
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
            collect_mmap_names(&t.program, &mut slot_names);
        }
        slots = slots.max(slot_names.len());
        if p.thread.is_empty() {
            return Err(Error::config(format!("{pkey}.thread"), "a process needs at least one thread ([[workload.scenario.process.thread]])"));
        }
        let names = SlotNames { names: &slot_names, regions: region_count };
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
    let Compiler { programs, daemon_programs, .. } = c;
    let workload = Workload { groups, files, processes, programs, slots, daemon_programs, vms, ..Default::default() };
    workload.check(cores).map_err(|m| Error::config(KEY, m))?;
    Ok(workload)
}

/// A process's region names: `names[i]` is slot i; the first `regions` are pre-mapped.
struct SlotNames<'a> {
    names: &'a [String],
    regions: usize,
}

struct Compiler<'a> {
    cores: u32,
    nodes: u32,
    files: &'a [FileSpec],
    file_index: &'a HashMap<&'a str, u32>,
    thread_index: &'a HashMap<&'a str, Vec<u32>>,
    programs: Vec<Vec<Op>>,
    daemon_programs: Vec<usize>,
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

/// Names `mmap` operations write, in first-mention order, through loop bodies and fork
/// children (slot allocation).
fn collect_mmap_names(ops: &[ScenarioOp], names: &mut Vec<String>) {
    for o in ops {
        if o.op == OpName::Mmap {
            if let Some(r) = &o.region {
                if !names.contains(r) {
                    names.push(r.clone());
                }
            }
        }
        for inner in [&o.body, &o.program].into_iter().flatten() {
            collect_mmap_names(inner, names);
        }
    }
}

/// Names `mmap` operations of this program write (through loop bodies, not into fork
/// children: a child's mappings are its own).
fn collect_mmap_names_shallow(ops: &[ScenarioOp], names: &mut Vec<String>) {
    for o in ops {
        if o.op == OpName::Mmap {
            if let Some(r) = &o.region {
                names.push(r.clone());
            }
        }
        if o.op == OpName::Loop {
            if let Some(body) = &o.body {
                collect_mmap_names_shallow(body, names);
            }
        }
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
