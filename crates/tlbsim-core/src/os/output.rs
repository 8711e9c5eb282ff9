//! stats.json of an OS-mode run: the trace-mode layout (totals, per_core with
//! per_structure, per_structure, per_socket, run) plus the OS model's counters in `totals`
//! and every `per_core` entry, `per_thread` and `per_class` throughput, and the first
//! violation records. Names are stable (the engine issue lists them).

use super::{Os, OsCoreStats, CAUSES};
use crate::coherence::Coherence;
use crate::config::Config;
use serde_json::{json, Map, Value};

fn os_fields(s: &OsCoreStats) -> Map<String, Value> {
    let mut m = Map::new();
    let mut put = |k: &str, v: u64| {
        m.insert(k.into(), json!(v));
    };
    put("shootdowns_sent", s.shootdowns_sent);
    put("shootdown_ipis_sent", s.shootdown_ipis_sent);
    put("shootdown_ipis_received", s.shootdown_ipis_received);
    put("shootdown_messages_received", s.shootdown_messages_received);
    put("shootdowns_deferred_received", s.shootdowns_deferred_received);
    put("direct_fills", s.direct_fills);
    put("false_positive_targets", s.false_positive_targets);
    put("pages_flushed", s.pages_flushed);
    put("shootdown_cycles_initiator_send", s.shootdown_cycles_initiator_send);
    put("shootdown_cycles_initiator_wait", s.shootdown_cycles_initiator_wait);
    put("shootdown_cycles_target", s.shootdown_cycles_target);
    put("violations_security", s.violations_security);
    put("violations_consistency", s.violations_consistency);
    put("stale_entries_marked", s.stale_entries_marked);
    put("stale_uses_in_lazy_window", s.stale_uses_in_lazy_window);
    put("context_switches", s.context_switches);
    put("syscalls", s.syscalls);
    put("segv_signals", s.segv_signals);
    put("spurious_faults", s.spurious_faults);
    put("cow_faults", s.cow_faults);
    put("file_faults", s.file_faults);
    put("page_cache_misses", s.page_cache_misses);
    put("shootdowns_deferred_lazy", s.shootdowns_deferred_lazy);
    put("shootdowns_taken_on_kernel_exit", s.shootdowns_taken_on_kernel_exit);
    put("io_sleeps", s.io_sleeps);
    put("pages_reclaimed", s.pages_reclaimed);
    put("pages_migrated", s.pages_migrated);
    put("idle_cycles", s.idle_cycles);
    put("idle_exits", s.idle_exits);
    put("idle_exit_cycles", s.idle_exit_cycles);
    put("balance_pulls", s.balance_pulls);
    m.insert("full_flushes_by_cause".into(), by_cause(&s.full_flushes_by_cause));
    let names = crate::coherence::FlushReason::NAMES;
    m.insert("shootdowns_sent_by_reason".into(), Value::Object(names.iter().zip(s.shootdowns_sent_by_reason).map(|(n, v)| ((*n).into(), json!(v))).collect()));
    let by_call: Map<String, Value> = super::SYSCALLS
        .iter()
        .enumerate()
        .filter(|&(i, _)| s.syscall_calls[i] > 0)
        .map(|(i, n)| ((*n).into(), json!({"calls": s.syscall_calls[i], "cycles": s.syscall_cycles[i]})))
        .collect();
    m.insert("syscalls_by_call".into(), Value::Object(by_call));
    // Histogram as a list: index = targets of one shootdown (the last bucket: that many or
    // more), trailing zeros trimmed.
    let last = s.targets_hist.iter().rposition(|&x| x > 0).map_or(0, |i| i + 1);
    m.insert("targets_per_shootdown".into(), json!(s.targets_hist[..last].to_vec()));
    m
}

fn sum(all: &[OsCoreStats]) -> OsCoreStats {
    let mut t = OsCoreStats { targets_hist: vec![0; all.first().map_or(0, |s| s.targets_hist.len())], ..Default::default() };
    for s in all {
        macro_rules! add { ($($f:ident),*) => { $( t.$f += s.$f; )* } }
        add!(
            shootdowns_sent,
            shootdown_ipis_sent,
            shootdown_ipis_received,
            shootdown_messages_received,
            shootdowns_deferred_received,
            shootdowns_deferred_lazy,
            shootdowns_taken_on_kernel_exit,
            direct_fills,
            false_positive_targets,
            pages_flushed,
            shootdown_cycles_initiator_send,
            shootdown_cycles_initiator_wait,
            shootdown_cycles_target,
            violations_security,
            violations_consistency,
            stale_entries_marked,
            stale_uses_in_lazy_window,
            context_switches,
            syscalls,
            segv_signals,
            spurious_faults,
            cow_faults,
            file_faults,
            page_cache_misses,
            io_sleeps,
            pages_reclaimed,
            pages_migrated,
            idle_cycles,
            idle_exits,
            idle_exit_cycles,
            balance_pulls
        );
        for (a, b) in t.full_flushes_by_cause.iter_mut().zip(s.full_flushes_by_cause) {
            *a += b;
        }
        for (a, b) in t.shootdowns_sent_by_reason.iter_mut().zip(s.shootdowns_sent_by_reason) {
            *a += b;
        }
        for i in 0..super::SYSCALLS.len() {
            t.syscall_calls[i] += s.syscall_calls[i];
            t.syscall_cycles[i] += s.syscall_cycles[i];
        }
        for (a, b) in t.targets_hist.iter_mut().zip(&s.targets_hist) {
            *a += b;
        }
    }
    t
}

impl<P: Coherence> Os<P> {
    pub(crate) fn stats_json(&mut self, cfg: &Config) -> Value {
        self.settle_all_vms();
        let workers = self.threads.iter().filter(|t| !t.daemon).count();
        let mut v = self.m.stats_json(cfg, self.threads.len());
        let freq = cfg.machine.frequency_ghz * 1e9;
        let end = self.sched.end_cycle();
        if let Some(per_core) = v["per_core"].as_array_mut() {
            for (i, c) in per_core.iter_mut().enumerate() {
                for (k, x) in os_fields(&self.stats[i]) {
                    c[k] = x;
                }
                if let Some(p) = self.policy.core_stats_json(crate::types::CoreId(i as u32)) {
                    c["coherence"] = p;
                }
            }
        }
        for (k, x) in os_fields(&sum(&self.stats)) {
            v["totals"][k] = x;
        }
        v["totals"]["coherence"] = self.policy.stats_json();
        v["totals"]["locks"] = self.locks.json();
        v["totals"]["locks"]["lru"] = self.lru.json();
        v["totals"]["page_tables"] = self.m.backend.stats_json();
        // Freed table pages whose flush had not completed when the run ended (still live).
        v["totals"]["page_table_pages_awaiting_flush"] = json!(self.shootdowns.tables_awaiting_flush());
        if self.numa.is_some() {
            // /proc/vmstat's names where Linux has one (numa_pte_updates, ...).
            let n = &self.numa_stats;
            v["totals"]["numa_balancing"] = json!({
                "scans": n.scans,
                "scans_skipped_locked": n.scans_skipped_locked,
                "pte_updates": n.pte_updates,
                "hint_faults": n.hint_faults,
                "hint_faults_local": n.hint_faults_local,
                "pages_migrated": n.pages_migrated,
                "migrations_flushed": n.migrations_flushed,
                "task_migrations": n.task_migrations,
                "task_swaps": n.task_swaps,
                "group_joins": n.group_joins,
            });
        }
        if let Some(dump) = &self.ptdump {
            let mut dump = dump.clone();
            match &self.ptdump_at {
                None => {
                    // Processes still alive at the end (daemons, a stopped run).
                    for p in self.spaces.iter().filter(|p| p.alive) {
                        dump.add(&self.m.pt, self.m.backend.as_ref(), p.pid, p.root);
                    }
                    v["page_table_dump"] = dump.json();
                }
                Some(at) => {
                    // One process, when the thread completed operation `at.op`; none if it
                    // never did (the dump then counts nothing and says why).
                    let t = &self.threads[at.thread];
                    let mut d = dump.json();
                    d["at_op"] = json!(at.op);
                    d["thread"] = json!(t.name);
                    d["taken"] = json!(at.taken.is_some());
                    match at.taken {
                        Some((pid, cycle)) => {
                            d["pid"] = json!(pid);
                            d["process"] = json!(self.w.processes.get(pid as usize).map_or_else(|| format!("pid{pid}"), |p| p.name.clone()));
                            d["cycle"] = json!(cycle);
                        }
                        None => {
                            d["message"] = json!(format!(
                                "no page-table dump was taken: thread {:?} completed {} operation(s), fewer than sim.ptdump_at_op = {}{}",
                                t.name,
                                t.ops_completed,
                                at.op,
                                if self.sched.partial() { " (the run was stopped early)" } else { "" }
                            ));
                        }
                    }
                    v["page_table_dump"] = d;
                }
            }
        }
        if self.settings.recycling_on() {
            let mut r = self.recycling.stats_json();
            // The tracking word of every frame of physical memory (FPR keeps one per page,
            // on the page's node).
            r["tracking_bytes"] = json!(self.recycling.tracking_bytes_per_frame() * self.m.mem.total_frames());
            r["stale_uses_permitted"] = json!(self.stale_uses_permitted_by_recycling);
            r["tables_reused"] = json!(self.m.pt.tables_reused);
            v["totals"][self.recycling.name()] = r;
        }
        let per_thread: Vec<Value> = self
            .threads
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let stop = t.end_cycle.unwrap_or(end).min(end.max(t.start_cycle));
                let secs = stop.saturating_sub(t.start_cycle) as f64 / freq;
                json!({
                    "thread": i,
                    "name": t.name,
                    "class": t.class,
                    "process": t.pid,
                    "core": t.core,
                    "daemon": t.daemon,
                    "ops_completed": t.ops_completed,
                    "ops_per_second": if secs > 0.0 { t.ops_completed as f64 / secs } else { 0.0 },
                    "accesses": t.accesses,
                    "lock_wait_cycles": t.lock_wait_cycles,
                    "start_cycle": t.start_cycle,
                    "first_run_cycle": t.first_run_cycle,
                    "end_cycle": t.end_cycle,
                })
            })
            .collect();
        let mut per_class: Map<String, Value> = Map::new();
        for t in &per_thread {
            let class = t["class"].as_str().unwrap_or("").to_owned();
            let e = per_class.entry(class).or_insert_with(|| json!({"threads": 0, "ops_completed": 0, "ops_per_second": 0.0}));
            e["threads"] = json!(e["threads"].as_u64().unwrap_or(0) + 1);
            e["ops_completed"] = json!(e["ops_completed"].as_u64().unwrap_or(0) + t["ops_completed"].as_u64().unwrap_or(0));
            e["ops_per_second"] = json!(e["ops_per_second"].as_f64().unwrap_or(0.0) + t["ops_per_second"].as_f64().unwrap_or(0.0));
        }
        v["per_thread"] = json!(per_thread);
        v["per_class"] = Value::Object(per_class);
        v["violations"] = json!(self
            .violations
            .iter()
            .map(|r| {
                let mut v = json!({
                    "cycle": r.cycle, "core": r.core, "process": r.process, "vpn": r.vpn,
                    "old_pfn": r.old_pfn, "new_pfn": r.new_pfn,
                    "kind": if r.security { "security" } else { "consistency" },
                });
                if r.freed_table {
                    // No page was used: `old_pfn` is the freed table a lazy CPU still reaches.
                    v["freed_table"] = json!(true);
                }
                v
            })
            .collect::<Vec<_>>());
        v["run"]["makespan_cycles"] = json!(end);
        v["run"]["seconds"] = json!(end as f64 / freq);
        v["run"]["threads"] = json!(workers);
        v["run"]["coherence"] = json!(cfg.os.coherence);
        v["run"]["processes"] = json!(self.spaces.count());
        v["run"]["engine_steps"] = json!(self.sched.steps());
        if self.io.requests() > 0 {
            v["totals"]["io_requests"] = json!(self.io.requests());
            v["totals"]["io_completions"] = json!(self.io.completions());
        }
        v["run"]["events"] = json!(self.events_simulated());
        if let Some(per_vm) = self.per_vm_json() {
            v["per_vm"] = per_vm;
            let virt = self.virt.as_ref().expect("VMs");
            if let Some(per_core) = v["per_core"].as_array_mut() {
                for (i, c) in per_core.iter_mut().enumerate() {
                    c["vcpu_switches"] = json!(virt.vcpu_switches[i]);
                }
            }
            v["totals"]["vcpu_switches"] = json!(virt.vcpu_switches.iter().sum::<u64>());
            if virt.interval > 0 {
                v["intervals"] = self.intervals_json();
            }
            v["run"]["hypervisor"] = json!(virt.hv.name());
        }
        if self.sched.partial() {
            // Stopped through its control (Ctrl-C): the stats so far.
            v["run"]["partial"] = json!(true);
        }
        v
    }

    /// Simulated events: memory accesses plus OS operations (system calls, faults,
    /// context switches, interrupts taken).
    pub(crate) fn events_simulated(&self) -> u64 {
        let t = sum(&self.stats);
        let accesses: u64 = self.m.cores.iter().map(|c| c.stats.accesses).sum();
        let faults: u64 = self.m.cores.iter().map(|c| c.stats.page_faults).sum();
        accesses + t.syscalls + faults + t.context_switches + t.shootdown_ipis_received
    }
}

/// `full_flushes_by_cause` as stats.json names the causes.
fn by_cause(counts: &[u64]) -> Value {
    Value::Object(CAUSES.iter().zip(counts).map(|(n, v)| ((*n).into(), json!(v))).collect())
}

/// MPTTI: TLB misses per 10,000 instructions (the tag paper §5's metric).
fn mptti(misses: u64, instructions: u64) -> f64 {
    if instructions > 0 {
        misses as f64 * 1e4 / instructions as f64
    } else {
        0.0
    }
}

/// Index of the first-level data (4 KiB) and instruction TLBs in per-structure counters.
/// The data one counts every data access that missed the L1 (crate::tlb::hierarchy
/// `lookup`).
fn l1_structures() -> (usize, usize) {
    let names = crate::tlb::hierarchy::NAMES;
    let at = |n: &str| names.iter().position(|&x| x == n).expect("a structure name");
    (at("l1d"), at("l1i"))
}

impl<P: Coherence> Os<P> {
    /// `sim.interval_instructions`' time series: per CPU and interval (in the order they
    /// closed), the cycle it ended at and per VM its instructions, DTLB and ITLB misses,
    /// MPTTI and full flushes by cause.
    fn intervals_json(&self) -> Value {
        let virt = self.virt.as_ref().expect("VMs");
        let (l1d, l1i) = l1_structures();
        json!(virt
            .intervals
            .iter()
            .map(|(cpu, cycle, instructions, counts)| {
                let vms: Vec<Value> = counts
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.instructions > 0)
                    .map(|(vm, c)| {
                        json!({
                            "vm": vm,
                            "instructions": c.instructions,
                            "dtlb_misses": c.misses[l1d],
                            "itlb_misses": c.misses[l1i],
                            "dtlb_mptti": mptti(c.misses[l1d], c.instructions),
                            "itlb_mptti": mptti(c.misses[l1i], c.instructions),
                            "full_flushes_by_cause": by_cause(&c.full_flushes_by_cause),
                        })
                    })
                    .collect();
                json!({"cpu": cpu, "end_cycle": cycle, "instructions": instructions, "per_vm": vms})
            })
            .collect::<Vec<_>>())
    }

    /// Per VM (domain), under a hypervisor: instructions, accesses, cycles, TLB misses per
    /// structure, full flushes by cause, and the MPTTI of the data and instruction TLBs.
    fn per_vm_json(&self) -> Option<Value> {
        let virt = self.virt.as_ref()?;
        let names = crate::tlb::hierarchy::NAMES;
        let (l1d, l1i) = l1_structures();
        let present: Vec<usize> = (0..names.len()).filter(|&i| self.m.cores[0].tlbs.present(i)).collect();
        let vms = virt
            .per_vm
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let misses: Map<String, Value> = present.iter().map(|&s| (names[s].to_string(), json!(a.misses[s]))).collect();
                json!({
                    "vm": i,
                    "name": self.w.vms[i].name,
                    "vcpus": virt.vcpus.iter().filter(|v| v.vm == i).count(),
                    "instructions": a.instructions,
                    "accesses": a.accesses,
                    "misses": misses,
                    "dtlb_mptti": mptti(a.misses[l1d], a.instructions),
                    "itlb_mptti": mptti(a.misses[l1i], a.instructions),
                    "full_flushes_by_cause": by_cause(&a.full_flushes_by_cause),
                    "vcpu_switches_in": a.vcpu_switches_in,
                    "cycles": a.cycles_on.iter().sum::<u64>(),
                    "cycles_per_cpu": (0..self.cores.len()).map(|c| a.cycles_on.get(c).copied().unwrap_or(0)).collect::<Vec<_>>(),
                })
            })
            .collect::<Vec<_>>();
        Some(json!(vms))
    }
}
