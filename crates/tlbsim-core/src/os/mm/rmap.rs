//! Reverse mapping of the OS model: every (process, virtual address) that maps a frame
//! (mm/rmap.c: anon_vma for anonymous pages, the file's i_mmap for page-cache pages).
//!
//! Simplified: no anon_vma chains or i_mmap tree are kept; the candidate addresses come
//! from the frame's index (an anonymous page sits at the same address in every process of
//! its fork family) or from each file VMA's offset, and each is checked in the page table.

use super::PAGE;
use crate::coherence::Coherence;
use crate::os::Os;
use crate::page_table::pte_pfn;
use crate::types::Pfn;
use crate::workload::program::Backing;

impl<P: Coherence> Os<P> {
    /// Every (process, virtual address) whose page table maps `pfn` (Linux rmap: anon_vma
    /// for anonymous pages, the file's i_mmap for page-cache pages).
    pub(crate) fn mappings(&self, pfn: Pfn) -> Vec<(u32, u64)> {
        let d = self.m.mem.desc(pfn);
        let (owner, mapping) = (self.m.mem.owner(pfn), self.m.mem.mapping(pfn));
        let mut out = Vec::new();
        for p in self.spaces.iter().filter(|p| p.alive) {
            let candidates: Vec<u64> = if mapping == 0 {
                if owner != u32::MAX && (owner as usize) < self.spaces.count() && self.spaces[owner as usize].family == p.family {
                    vec![d.index() << 12]
                } else {
                    vec![]
                }
            } else {
                p.vmas
                    .iter()
                    .filter_map(|(&s, v)| match v.backing {
                        Backing::File { file, offset_pages } if file + 1 == mapping && d.index() >= offset_pages => {
                            let va = s + (d.index() - offset_pages) * PAGE;
                            (va < v.end).then_some(va)
                        }
                        _ => None,
                    })
                    .collect()
            };
            for va in candidates {
                if let Some(l) = self.pte_lookup(p.pid, va) {
                    if l.level == 1 && pte_pfn(l.pte) == pfn {
                        out.push((p.pid, va));
                    }
                }
            }
        }
        out
    }

    /// Whether a process other than `pid` maps `pfn`.
    pub(crate) fn mapped_by_other(&self, pfn: Pfn, pid: u32) -> bool {
        self.mappings(pfn).iter().any(|&(p, _)| p != pid)
    }
}
