//! The autonomic partition controller (`machine.tlb.partition_controller = "utility"`): the
//! tag paper's §6.5 future work ("an autonomic QoS policy which can utilize the differing
//! TLB requirements of the different domains … by altering the TLB partition ratios as and
//! when needed"), built as utility-based cache partitioning does it (Qureshi and Patt,
//! "Utility-Based Cache Partitioning", MICRO 2006: §3's utility monitors, §4's lookahead
//! allocation).
//!
//! Modelled, per core and per partitioned TLB structure (the L1 DTLBs, the ITLB and the
//! L2; the page-walk caches keep their static quotas):
//! - **Shadow tags (UMON).** Per service level (the domain id, tag paper §4), an LRU stack of
//!   the translations that level would hold if it had the whole structure to itself, with
//!   one hit counter per stack position. A hit at position p is an access that a quota of
//!   p + 1 entries would have hit, so a level's miss curve is its accesses minus the running
//!   sum of its position counters. The stacks see the structure's own lookups (hits where
//!   the hit happened, misses where the fill goes) and its flushes: a full flush clears
//!   them, a tag's invalidation drops that tag, as the real structure does.
//! - **Sampling.** A structure of E entries monitors 1 in S pages (S = the largest power of
//!   two not above E / 64, at least 1; by a hash of the VPN), with E / S stack positions, so
//!   a monitored access costs at most 64 comparisons and a position stands for S entries
//!   (SHARDS-style spatial sampling; UCP samples sets, which a fully associative TLB has
//!   one of).
//! - **Epochs.** Every `partition_epoch_instructions` instructions the core retires, the
//!   controller turns each level's counters into an estimated MPTTI curve (its misses per
//!   10,000 of its own instructions, the paper's metric), allocates the structure's entries
//!   in units of S and halves every counter (UCP's ageing). With `partition_at_flush` the
//!   new quotas wait for the structure's next full flush after the epoch's end, the
//!   boundary the paper proposes ("the TLB flushes form a natural point in time").
//! - **Goals.** `min-mean-mptti`: minimise the mean of the active levels' estimated MPTTI
//!   (UCP's lookahead: repeatedly give the level with the highest marginal utility per
//!   entry the units that achieve it). `mptti-ceiling`: first give `partition_goal_domain`
//!   the fewest units that keep its estimated MPTTI at or under `partition_goal_mptti` (all
//!   it can get if none do), then share the rest as `min-mean-mptti` does. Every level
//!   active in the epoch keeps at least one unit; an inactive one gets none.
//!
//! Simplified: the stacks are LRU whatever the structure's replacement policy (UCP's
//! assumption; a FIFO TLB's misses differ from LRU's at equal size); single-page
//! invalidations (shootdowns) are not mirrored in the stacks; an epoch's instruction count
//! is split between levels at CR3 writes (when the service level changes).

use super::hierarchy::NAMES;

pub use crate::types::{PartitionController, PartitionGoal};

#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub goal: PartitionGoal,
    pub goal_domain: u8,
    pub goal_mptti: f64,
    pub epoch_instructions: u64,
    pub at_flush: bool,
}

/// Stack positions a monitored structure keeps at most (see the module comment).
const MAX_POSITIONS: u32 = 64;
const NONE: u8 = u8::MAX;
/// Epochs recorded in `history`; later ones are counted, not kept.
const HISTORY_LIMIT: usize = 4096;

/// One service level's shadow LRU stack.
#[derive(Clone, Default)]
struct ShadowStack {
    /// Most recent first: (page key, tag).
    entries: Vec<(u64, u16)>,
    /// hits[p]: sampled accesses found at stack position p.
    hits: Vec<u64>,
    accesses: u64,
}

/// The utility monitor of one structure.
struct Monitor {
    structure: usize,
    entries: u32,
    /// S = 1 << sample_shift entries per stack position.
    sample_shift: u32,
    positions: usize,
    stacks: Vec<ShadowStack>,
    /// A new allocation is waiting for the structure's next full flush (`at_flush`).
    pending: Option<Vec<u32>>,
}

/// One epoch's outcome, for stats.json.
#[derive(Clone, Debug)]
pub struct EpochRecord {
    /// The core's instructions retired when the epoch ended.
    pub instructions: u64,
    /// Per partitioned structure: its name and the entries allotted to each level.
    pub quotas: Vec<(&'static str, Vec<u32>)>,
}

pub struct Controller {
    settings: Settings,
    monitors: Vec<Monitor>,
    /// Per TLB structure, its monitor's index in `monitors` (`NONE`: not monitored).
    monitor_of: [u8; 8],
    /// Instructions retired under each level (decayed with the counters).
    instructions: Vec<u64>,
    /// Instructions retired when the running level last changed.
    mark: u64,
    pub epochs: u64,
    pub history: Vec<EpochRecord>,
}

#[inline(always)]
fn page_key(vpn: u64, size_index: u8) -> u64 {
    (vpn << 2) | size_index as u64
}

impl Monitor {
    fn new(structure: usize, entries: u32) -> Monitor {
        let per = (entries / MAX_POSITIONS).max(1);
        let sample_shift = 31 - per.leading_zeros();
        Monitor { structure, entries, sample_shift, positions: (entries >> sample_shift) as usize, stacks: Vec::new(), pending: None }
    }

    #[inline(always)]
    fn sampled(&self, vpn: u64) -> bool {
        // Fibonacci hashing: the top bits of the product are well mixed.
        self.sample_shift == 0 || (vpn.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.sample_shift)) == 0
    }

    fn observe(&mut self, key: u64, tag: u16, sl: u8) {
        let sl = sl as usize;
        if sl >= self.stacks.len() {
            self.stacks.resize_with(sl + 1, ShadowStack::default);
        }
        let positions = self.positions;
        let s = &mut self.stacks[sl];
        if s.hits.is_empty() {
            s.hits = vec![0; positions];
        }
        s.accesses += 1;
        match s.entries.iter().position(|&e| e == (key, tag)) {
            Some(p) => {
                s.hits[p] += 1;
                s.entries[..=p].rotate_right(1);
            }
            None => {
                if s.entries.len() == positions {
                    s.entries.pop();
                }
                s.entries.insert(0, (key, tag));
            }
        }
    }

    fn flush(&mut self) {
        for s in &mut self.stacks {
            s.entries.clear();
        }
    }

    fn flush_tag(&mut self, tag: u16) {
        for s in &mut self.stacks {
            s.entries.retain(|e| e.1 != tag);
        }
    }

    /// Estimated misses of each level at 0..=positions units (in sampled accesses).
    fn miss_curve(&self, sl: usize) -> Vec<f64> {
        let s = &self.stacks[sl];
        let mut curve = Vec::with_capacity(self.positions + 1);
        let mut misses = s.accesses as f64;
        curve.push(misses);
        for p in 0..self.positions {
            misses -= s.hits.get(p).copied().unwrap_or(0) as f64;
            curve.push(misses);
        }
        curve
    }

    fn decay(&mut self) {
        for s in &mut self.stacks {
            s.accesses >>= 1;
            for h in &mut s.hits {
                *h >>= 1;
            }
        }
    }
}

/// UCP's lookahead allocation (Qureshi and Patt, Algorithm 2): `cost[l][a]` is level l's
/// cost with `a` units (non-increasing in a is not required); every level starts at
/// `start[l]` units and `budget` more are handed out, each round to the level whose best
/// extension has the highest cost reduction per unit, the extension's units at once. Units
/// nobody gains from go round-robin to the levels in `active`.
pub fn lookahead(cost: &[Vec<f64>], start: &[usize], mut budget: usize, active: &[bool]) -> Vec<usize> {
    let mut alloc = start.to_vec();
    while budget > 0 {
        let mut best: Option<(f64, usize, usize)> = None;
        for (l, c) in cost.iter().enumerate() {
            if !active[l] {
                continue;
            }
            let have = alloc[l];
            let most = budget.min(c.len().saturating_sub(1).saturating_sub(have));
            for k in 1..=most {
                let gain = (c[have] - c[have + k]) / k as f64;
                // Strictly greater: the first level and the fewest units win ties.
                if gain > 0.0 && best.is_none_or(|(g, _, _)| gain > g) {
                    best = Some((gain, l, k));
                }
            }
        }
        match best {
            Some((_, l, k)) => {
                alloc[l] += k;
                budget -= k;
            }
            None => break,
        }
    }
    let takers: Vec<usize> = (0..cost.len()).filter(|&l| active[l]).collect();
    let mut i = 0;
    while budget > 0 && !takers.is_empty() {
        alloc[takers[i % takers.len()]] += 1;
        budget -= 1;
        i += 1;
    }
    alloc
}

impl Controller {
    /// A controller for the present structures among the TLB levels (`present_entries[i]`
    /// the entries of structure i, 0 when absent).
    pub fn new(settings: Settings, present_entries: &[(usize, u32)]) -> Controller {
        let monitors: Vec<Monitor> = present_entries.iter().filter(|&&(_, e)| e > 0).map(|&(i, e)| Monitor::new(i, e)).collect();
        let mut monitor_of = [NONE; 8];
        for (mi, m) in monitors.iter().enumerate() {
            monitor_of[m.structure] = mi as u8;
        }
        Controller { settings, monitors, monitor_of, instructions: Vec::new(), mark: 0, epochs: 0, history: Vec::new() }
    }

    fn monitor(&mut self, structure: usize) -> Option<&mut Monitor> {
        let mi = self.monitor_of[structure];
        (mi != NONE).then(|| &mut self.monitors[mi as usize])
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// A lookup of structure `structure` for page `vpn` (size index `size`) under `tag`, by
    /// a context of service level `sl`.
    #[inline(always)]
    pub fn observe(&mut self, structure: usize, vpn: u64, size: u8, tag: u16, sl: u8) {
        if let Some(m) = self.monitor(structure) {
            if m.sampled(vpn) {
                m.observe(page_key(vpn, size), tag, sl);
            }
        }
    }

    /// The running level changes from `old` at `retired` instructions.
    pub fn switch_level(&mut self, old: u8, retired: u64) {
        let old = old as usize;
        if old >= self.instructions.len() {
            self.instructions.resize(old + 1, 0);
        }
        self.instructions[old] += retired - self.mark;
        self.mark = retired;
    }

    /// Structure `structure` was flushed whole: its stacks are emptied; a pending
    /// allocation is returned to be applied.
    pub fn flushed(&mut self, structure: usize) -> Option<Vec<u32>> {
        let m = self.monitor(structure)?;
        m.flush();
        m.pending.take()
    }

    pub fn flushed_tag(&mut self, structure: usize, tag: u16) {
        if let Some(m) = self.monitor(structure) {
            m.flush_tag(tag);
        }
    }

    /// End of an epoch at `retired` instructions with level `sl` running: the new quotas
    /// of every structure to apply now (`(structure, quotas)`; empty with `at_flush`, whose
    /// quotas wait in `flushed`).
    pub fn epoch_end(&mut self, retired: u64, sl: u8) -> Vec<(usize, Vec<u32>)> {
        self.switch_level(sl, retired);
        self.epochs += 1;
        let mut apply = Vec::new();
        let mut record = Vec::new();
        for mi in 0..self.monitors.len() {
            // A structure nobody used this epoch keeps its quotas.
            let Some(quotas) = self.allocate(mi) else {
                self.monitors[mi].decay();
                continue;
            };
            let m = &mut self.monitors[mi];
            record.push((NAMES[m.structure], quotas.clone()));
            if self.settings.at_flush {
                m.pending = Some(quotas);
            } else {
                apply.push((m.structure, quotas));
            }
            m.decay();
        }
        for i in &mut self.instructions {
            *i >>= 1;
        }
        if self.history.len() < HISTORY_LIMIT {
            self.history.push(EpochRecord { instructions: retired, quotas: record });
        }
        apply
    }

    /// Entries each level gets in monitor `mi`'s structure for the epoch that ends (None
    /// when no level was active in it).
    fn allocate(&self, mi: usize) -> Option<Vec<u32>> {
        let m = &self.monitors[mi];
        let levels = m.stacks.len().max(self.instructions.len());
        let scale = (1u64 << m.sample_shift) as f64;
        let active: Vec<bool> =
            (0..levels).map(|l| self.instructions.get(l).is_some_and(|&i| i > 0) && m.stacks.get(l).is_some_and(|s| s.accesses > 0)).collect();
        if !active.contains(&true) {
            return None;
        }
        // Estimated MPTTI of each level at 0..=positions units.
        let cost: Vec<Vec<f64>> = (0..levels)
            .map(|l| {
                if !active[l] {
                    return vec![0.0; m.positions + 1];
                }
                let per = 1e4 * scale / self.instructions[l] as f64;
                m.miss_curve(l).into_iter().map(|x| x * per).collect()
            })
            .collect();
        // Every active level keeps a unit; an inactive one gets none (its first insertion
        // then takes the replacement policy's victim, as an unpartitioned TLB does).
        let mut start: Vec<usize> = active.iter().map(|&a| usize::from(a)).collect();
        let mut budget = m.positions.saturating_sub(start.iter().sum());
        let mut greedy = active.clone();
        if self.settings.goal == PartitionGoal::MpttiCeiling {
            let d = self.settings.goal_domain as usize;
            if d < levels && active[d] {
                let most = 1 + budget;
                let need = (1..=most).find(|&a| cost[d][a] <= self.settings.goal_mptti).unwrap_or(most);
                start[d] = need;
                budget -= need - 1;
                greedy[d] = false;
            }
        }
        let alloc = if start.iter().sum::<usize>() > m.positions {
            // More active levels than units: one unit each as far as they go.
            let mut left = m.positions;
            start
                .iter()
                .map(|&a| {
                    let give = a.min(left);
                    left -= give;
                    give
                })
                .collect()
        } else {
            lookahead(&cost, &start, budget, &greedy)
        };
        let mut quotas: Vec<u32> = alloc.iter().map(|&a| (a as u32) << m.sample_shift).collect();
        // Entries the sampling granularity leaves over go to the largest share.
        let spare = m.entries.saturating_sub(quotas.iter().sum());
        if let Some(q) = quotas.iter_mut().max() {
            *q += spare;
        }
        Some(quotas)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64 as Rng;

    /// The obviously correct model: an access's LRU stack distance is the number of
    /// distinct keys touched since the same key's previous access.
    fn stack_distances(stream: &[(u64, u16)]) -> Vec<Option<usize>> {
        stream
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let prev = stream[..i].iter().rposition(|x| x == k)?;
                let mut seen: Vec<(u64, u16)> = stream[prev + 1..i].to_vec();
                seen.sort();
                seen.dedup();
                Some(seen.len())
            })
            .collect()
    }

    #[test]
    fn shadow_stack_counts_stack_distances() {
        let mut rng = Rng::new(7);
        let stream: Vec<(u64, u16)> = (0..3000).map(|_| (rng.next_u64() % 40, (rng.next_u64() % 2) as u16)).collect();
        let mut m = Monitor::new(0, 64);
        assert_eq!((m.sample_shift, m.positions), (0, 64));
        for &(k, t) in &stream {
            m.observe(k, t, 0);
        }
        let mut expected = vec![0u64; 64];
        for d in stack_distances(&stream).into_iter().flatten() {
            if d < 64 {
                expected[d] += 1;
            }
        }
        assert_eq!(m.stacks[0].hits, expected);
        assert_eq!(m.stacks[0].accesses, 3000);
        // Misses at a units = accesses - hits within a positions.
        let curve = m.miss_curve(0);
        let cold = stack_distances(&stream).iter().filter(|d| d.is_none_or(|d| d >= 10)).count();
        assert_eq!(curve[10], cold as f64);
    }

    #[test]
    fn stacks_are_per_level_and_flushes_follow_the_structure() {
        let mut m = Monitor::new(0, 8);
        for k in 0..4 {
            m.observe(k, 1, 0);
            m.observe(k, 2, 1);
        }
        m.flush_tag(1);
        assert!(m.stacks[0].entries.is_empty());
        assert_eq!(m.stacks[1].entries.len(), 4);
        m.observe(0, 2, 1);
        assert_eq!(m.stacks[1].hits[3], 1, "key 0 was 4th most recent");
        m.flush();
        m.observe(0, 2, 1);
        assert_eq!(m.stacks[1].hits.iter().sum::<u64>(), 1, "a flushed stack misses");
    }

    #[test]
    fn sampling_keeps_at_most_64_positions() {
        for (entries, shift, positions) in [(64, 0, 64), (96, 0, 96), (128, 1, 64), (512, 3, 64), (1024, 4, 64), (1536, 4, 96)] {
            let m = Monitor::new(0, entries);
            assert_eq!((m.sample_shift, m.positions), (shift, positions), "{entries} entries");
        }
        // About 1 in 8 pages is sampled at 512 entries.
        let m = Monitor::new(0, 512);
        let n = (0..80_000u64).filter(|&v| m.sampled(v)).count();
        assert!((9_000..11_000).contains(&n), "{n} of 80,000 sampled");
    }

    /// Exhaustive search for the best split of `total` units between two levels.
    fn best_split(cost: &[Vec<f64>], total: usize) -> f64 {
        (1..total).map(|a| cost[0][a] + cost[1][total - a]).fold(f64::INFINITY, f64::min)
    }

    #[test]
    fn lookahead_finds_the_best_split_of_convex_curves() {
        let mut rng = Rng::new(3);
        for _ in 0..200 {
            // Convex non-increasing curves: decreasing steps.
            let curve = |rng: &mut Rng| {
                let mut steps: Vec<f64> = (0..16).map(|_| (rng.next_u64() % 100) as f64).collect();
                steps.sort_by(|a, b| b.partial_cmp(a).unwrap());
                let mut c = vec![steps.iter().sum::<f64>()];
                for s in steps {
                    c.push(c.last().unwrap() - s);
                }
                c
            };
            let cost = vec![curve(&mut rng), curve(&mut rng)];
            let alloc = lookahead(&cost, &[1, 1], 14, &[true, true]);
            assert_eq!(alloc.iter().sum::<usize>(), 16);
            let got = cost[0][alloc[0]] + cost[1][alloc[1]];
            assert!((got - best_split(&cost, 16)).abs() < 1e-9, "{alloc:?}: {got}");
        }
    }

    #[test]
    fn lookahead_sees_past_a_plateau() {
        // Level 0 gains nothing from 1-3 units and everything at 4 (a working set of 4):
        // plain greedy (one unit at a time) would never start on it.
        let cost = vec![vec![100.0, 100.0, 100.0, 100.0, 0.0, 0.0, 0.0, 0.0], vec![50.0, 40.0, 35.0, 33.0, 32.0, 31.0, 30.0, 30.0]];
        let alloc = lookahead(&cost, &[0, 0], 6, &[true, true]);
        assert_eq!(alloc, vec![4, 2]);
    }

    fn controller(goal: PartitionGoal, goal_mptti: f64) -> Controller {
        let settings = Settings { goal, goal_domain: 1, goal_mptti, epoch_instructions: 1000, at_flush: false };
        Controller::new(settings, &[(0, 16)])
    }

    /// Level 1 cycles over `ws1` pages, level 2 over `ws2`, alternating runs of 50.
    fn feed(c: &mut Controller, ws1: u64, ws2: u64) -> Vec<u32> {
        let mut retired = 0;
        for round in 0..40 {
            for (sl, ws) in [(1u8, ws1), (2, ws2)] {
                for i in 0..50u64 {
                    c.observe(0, 1000 * sl as u64 + (round * 50 + i) % ws, 0, sl as u16, sl);
                }
                retired += 50;
                c.switch_level(sl, retired);
            }
        }
        c.epoch_end(retired, 2).remove(0).1
    }

    #[test]
    fn utility_gives_entries_to_the_level_that_gains() {
        // Level 1's 4 pages fit anywhere; level 2's 10 need 10 entries of 16.
        let mut c = controller(PartitionGoal::MinMeanMptti, 0.0);
        let q = feed(&mut c, 4, 10);
        assert_eq!(q.iter().sum::<u32>(), 16);
        assert!(q[1] >= 4 && q[2] >= 10, "{q:?}");
        // Swapped demands, swapped shares.
        let mut c = controller(PartitionGoal::MinMeanMptti, 0.0);
        let q = feed(&mut c, 10, 4);
        assert!(q[1] >= 10 && q[2] >= 4, "{q:?}");
        assert_eq!(c.history.len(), 1);
        // A structure nobody looked up keeps its quotas.
        let mut c = Controller::new(c.settings, &[(0, 16), (3, 16)]);
        let mut retired = 0;
        for i in 0..100u64 {
            c.observe(0, i % 4, 0, 1, 1);
            retired += 1;
        }
        let apply = c.epoch_end(retired, 1);
        assert_eq!(apply.len(), 1);
        assert_eq!(apply[0].0, 0);
    }

    #[test]
    fn a_ceiling_goal_serves_its_domain_first() {
        // Both want 12 of 16 entries; level 1 must reach MPTTI 0 (no capacity misses).
        let mut c = controller(PartitionGoal::MpttiCeiling, 200.0);
        let q = feed(&mut c, 12, 12);
        assert!(q[1] >= 12, "{q:?}");
        let mut c = controller(PartitionGoal::MinMeanMptti, 0.0);
        let q = feed(&mut c, 12, 12);
        assert!(q[1] < 12 || q[2] < 12, "{q:?}");
    }
}
