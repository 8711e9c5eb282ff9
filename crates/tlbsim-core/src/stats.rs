//! Run statistics. Names are stable: later issues and users' scripts read them.

use serde::Serialize;
use serde_json::{json, Map, Value};

/// Counters of one TLB-like structure.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct StructCounters {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub invalidations: u64,
}

impl StructCounters {
    fn add(&mut self, o: &StructCounters) {
        self.hits += o.hits;
        self.misses += o.misses;
        self.evictions += o.evictions;
        self.invalidations += o.invalidations;
    }
}

/// Counters of one core.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct CoreStats {
    pub instructions: u64,
    pub accesses: u64,
    /// Accesses that hit in a first-level TLB (data or instruction, any page size).
    pub l1_tlb_hits: u64,
    pub l1_tlb_misses: u64,
    pub l2_tlb_hits: u64,
    pub l2_tlb_misses: u64,
    /// Page walks, including the `dirty_walks`.
    pub walks: u64,
    /// Walks made only to set a PTE's dirty bit: a write hit a TLB entry filled by a read
    /// (Intel SDM §4.8: the processor updates D with a locked walk).
    pub dirty_walks: u64,
    /// Cycles spent in page walks (PWC lookups and page-table reads).
    pub walk_cycles: u64,
    /// Walks that skipped at least one level thanks to a page-walk-cache hit.
    pub pwc_hits: u64,
    /// Page-table reads that went to DRAM on the walking core's own node...
    pub pt_accesses_local: u64,
    /// ... and on another node.
    pub pt_accesses_remote: u64,
    /// Page-table reads served by the socket's page-table-line cache.
    pub pt_cache_hits: u64,
    /// Accessed-bit 0→1 transitions the walker made in leaf entries.
    pub accessed_bits_set: u64,
    /// Dirty-bit 0→1 transitions (on walks and on writes that hit clean entries).
    pub dirty_bits_set: u64,
    pub page_faults: u64,
    /// THP faults that found no 2 MiB block (none free, or `os.thp_failure_rate`) and
    /// mapped a 4 KiB page instead.
    pub thp_fallbacks: u64,
    pub full_flushes: u64,
    /// Walks that met a page-walk-cache entry pointing to a freed page-table page (the
    /// checker reports each as a security violation in OS mode).
    pub stale_pwc_uses: u64,
    /// Cycles spent translating (TLB lookups beyond overlap, walks, faults).
    pub translation_cycles: u64,
    pub cycles: u64,
}

/// Sum of per-core stats.
pub fn totals(cores: &[CoreStats]) -> CoreStats {
    let mut t = CoreStats::default();
    for c in cores {
        macro_rules! add { ($($f:ident),*) => { $( t.$f += c.$f; )* } }
        add!(
            instructions,
            accesses,
            l1_tlb_hits,
            l1_tlb_misses,
            l2_tlb_hits,
            l2_tlb_misses,
            walks,
            dirty_walks,
            walk_cycles,
            pwc_hits,
            pt_accesses_local,
            pt_accesses_remote,
            pt_cache_hits,
            accessed_bits_set,
            dirty_bits_set,
            page_faults,
            thp_fallbacks,
            full_flushes,
            stale_pwc_uses,
            translation_cycles
        );
        t.cycles += c.cycles;
    }
    t
}

/// stats.json: `totals`, `per_core` (each with its `per_structure`), `per_structure`
/// (summed over cores), `per_socket`, and `run` (derived figures and sizes).
pub fn to_json(cores: &[CoreStats], structures: &[Vec<(&'static str, StructCounters)>], per_socket: Value, run: Value) -> Value {
    let totals = totals(cores);
    let mut per_structure: Vec<(&'static str, StructCounters)> = Vec::new();
    let mut per_core = Vec::new();
    for (i, (c, s)) in cores.iter().zip(structures).enumerate() {
        let mut v = serde_json::to_value(c).expect("stats serialize");
        let mut ps = Map::new();
        for (name, counters) in s {
            ps.insert((*name).into(), serde_json::to_value(counters).expect("serialize"));
            match per_structure.iter_mut().find(|(n, _)| n == name) {
                Some((_, sum)) => sum.add(counters),
                None => per_structure.push((name, *counters)),
            }
        }
        v["core"] = json!(i);
        v["per_structure"] = Value::Object(ps);
        per_core.push(v);
    }
    let per_structure: Map<String, Value> = per_structure.into_iter().map(|(n, c)| (n.to_owned(), serde_json::to_value(c).expect("serialize"))).collect();
    json!({
        "totals": totals,
        "per_core": per_core,
        "per_structure": per_structure,
        "per_socket": per_socket,
        "run": run,
    })
}
