//! The scenario document (docs/SCENARIO.md): the types `[workload.scenario]` is read into,
//! with every key's default and the retired keys refused, and `parse`/`normalize`. The
//! compiler to the workload IR is the parent module.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

pub(super) const KEY: &str = "workload.scenario";

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
    /// The C library whose malloc the `malloc`, `free`, `realloc` and `use-pointer`
    /// operations run: "2.23" (heap trims on every free that leaves the top chunk above a
    /// page) or "2.36" (any 2.26 or later, the default when empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub glibc: String,
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
    SetAffinity,
    MigratePages,
    Loop,
    Count,
    Barrier,
    Io,
    Serve,
    Malloc,
    Free,
    Realloc,
    UsePointer,
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
    /// set-affinity: the CPUs the thread may run on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<Vec<u32>>,
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
    /// malloc, free, realloc, use-pointer: the pointer's name (one namespace per process;
    /// also the region that names the allocation's bytes in the thread that allocated it
    /// or used it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
}

fn yes() -> bool {
    true
}

/// A key the scenario language no longer takes, kept in its struct only so that a config
/// still using it gets an error naming the key that replaced it ([`retired`]).
pub type Retired = Option<serde_json::Value>;

/// The error for a retired key `key` (present when `value` is), naming what replaced it.
pub(super) fn retired(value: &Retired, key: String, now: &str) -> Result<()> {
    match value {
        None => Ok(()),
        Some(_) => Err(Error::config(key, format!("this key was renamed: use {now}"))),
    }
}

impl OpName {
    pub(super) fn name(self) -> &'static str {
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
            OpName::SetAffinity => "set-affinity",
            OpName::MigratePages => "migrate-pages",
            OpName::Loop => "loop",
            OpName::Count => "count",
            OpName::Barrier => "barrier",
            OpName::Io => "io",
            OpName::Serve => "serve",
            OpName::Malloc => "malloc",
            OpName::Free => "free",
            OpName::Realloc => "realloc",
            OpName::UsePointer => "use-pointer",
        }
    }

    /// The keys this operation takes besides `op`.
    pub(super) fn keys(self) -> &'static [&'static str] {
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
            OpName::SetAffinity => &["cores"],
            OpName::MigratePages => &["region", "node"],
            OpName::Loop => &["count", "body"],
            OpName::Malloc | OpName::Realloc => &["pointer", "bytes"],
            OpName::Free | OpName::UsePointer => &["pointer"],
        }
    }
}

impl ScenarioOp {
    /// The keys given besides `op`.
    pub(super) fn given(&self) -> Vec<&'static str> {
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
        add(self.cores.is_some(), "cores");
        add(self.node.is_some(), "node");
        add(self.daemon.is_some(), "daemon");
        add(self.body.is_some(), "body");
        add(self.program.is_some(), "program");
        add(self.server.is_some(), "server");
        add(self.pointer.is_some(), "pointer");
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
