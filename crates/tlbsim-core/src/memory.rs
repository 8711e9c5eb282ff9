//! Simulated physical memory: frames on NUMA nodes, each with a descriptor.
//!
//! DESIGN.md "Physical memory and the OS": a per-frame descriptor (owner, mapcount, what
//! the frame holds, and a word of technique metadata such as FPR's tracking word).
//! Frame numbers encode their node (`pfn = node << NODE_SHIFT | index`), so the node of a
//! frame, which every page-table read needs, is a shift, not a lookup.
//!
//! Simplified (this issue): each node hands out frames from a bump pointer with a LIFO
//! free list in front; no per-CPU lists or buddy allocator yet (the OS-model issue adds
//! them behind this same interface). Descriptors exist only for frames handed out so far,
//! so a large, mostly unused node costs nothing.

use crate::error::{Error, Result};
use crate::types::{NodeId, Pfn};

/// Frames per node are numbered below 2^NODE_SHIFT (1 TiB of 4 KiB frames).
pub const NODE_SHIFT: u32 = 28;
const INDEX_MASK: u64 = (1 << NODE_SHIFT) - 1;

/// What a frame holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    Free,
    Data,
    PageTable,
}

/// Per-frame descriptor (Linux's `struct page`, reduced).
#[derive(Clone, Copy, Debug)]
pub struct FrameDesc {
    pub kind: FrameKind,
    /// Owning address space (process) id; `u32::MAX` when free or shared.
    pub owner: u32,
    /// Number of page-table entries mapping this frame.
    pub mapcount: u32,
    /// For a page-table frame: its slot in the page-table arena.
    pub pt_slot: u32,
    /// Room for a technique's per-frame metadata (FPR's tracking word, ...).
    pub technique_word: u64,
}

impl FrameDesc {
    const FREE: FrameDesc =
        FrameDesc { kind: FrameKind::Free, owner: u32::MAX, mapcount: 0, pt_slot: u32::MAX, technique_word: 0 };
}

struct Node {
    capacity: u64,
    /// Frames ever handed out: descriptors exist for indices below this.
    descs: Vec<FrameDesc>,
    free: Vec<u64>,
}

pub struct PhysMem {
    nodes: Vec<Node>,
}

#[inline]
pub fn node_of(pfn: Pfn) -> NodeId {
    NodeId((pfn.0 >> NODE_SHIFT) as u32)
}

impl PhysMem {
    pub fn new(nodes: u32, mib_per_node: u64) -> PhysMem {
        let capacity = (mib_per_node << 20 >> 12).min(INDEX_MASK + 1);
        PhysMem { nodes: (0..nodes).map(|_| Node { capacity, descs: Vec::new(), free: Vec::new() }).collect() }
    }

    pub fn nodes(&self) -> u32 {
        self.nodes.len() as u32
    }

    /// Allocate one frame on `node`.
    pub fn alloc(&mut self, node: NodeId, kind: FrameKind, owner: u32) -> Result<Pfn> {
        let n = &mut self.nodes[node.0 as usize];
        let index = match n.free.pop() {
            Some(i) => i,
            None => {
                if n.descs.len() as u64 >= n.capacity {
                    return Err(Error::Sim(format!(
                        "node {} is out of memory ({} MiB): raise machine.memory.node_mib",
                        node.0,
                        n.capacity * 4096 >> 20
                    )));
                }
                n.descs.push(FrameDesc::FREE);
                n.descs.len() as u64 - 1
            }
        };
        n.descs[index as usize] = FrameDesc { kind, owner, ..FrameDesc::FREE };
        Ok(Pfn(((node.0 as u64) << NODE_SHIFT) | index))
    }

    /// Allocate `count` contiguous frames (a power of two) aligned to `count` on `node`, for
    /// a huge page; from fresh memory only (no compaction is modelled).
    pub fn alloc_contiguous(&mut self, node: NodeId, count: u64, kind: FrameKind, owner: u32) -> Result<Pfn> {
        let n = &mut self.nodes[node.0 as usize];
        let start = (n.descs.len() as u64).next_multiple_of(count);
        if start + count > n.capacity {
            return Err(Error::Sim(format!("node {} has no free {count}-frame block left", node.0)));
        }
        while (n.descs.len() as u64) < start {
            // Frames skipped for alignment go to the free list for 4 KiB use.
            n.free.push(n.descs.len() as u64);
            n.descs.push(FrameDesc::FREE);
        }
        for _ in 0..count {
            n.descs.push(FrameDesc { kind, owner, ..FrameDesc::FREE });
        }
        Ok(Pfn(((node.0 as u64) << NODE_SHIFT) | start))
    }

    pub fn free(&mut self, pfn: Pfn) {
        let n = &mut self.nodes[node_of(pfn).0 as usize];
        let i = pfn.0 & INDEX_MASK;
        n.descs[i as usize] = FrameDesc::FREE;
        n.free.push(i);
    }

    #[inline]
    pub fn desc(&self, pfn: Pfn) -> &FrameDesc {
        &self.nodes[(pfn.0 >> NODE_SHIFT) as usize].descs[(pfn.0 & INDEX_MASK) as usize]
    }

    #[inline]
    pub fn desc_mut(&mut self, pfn: Pfn) -> &mut FrameDesc {
        &mut self.nodes[(pfn.0 >> NODE_SHIFT) as usize].descs[(pfn.0 & INDEX_MASK) as usize]
    }

    /// Frames in use on `node`.
    pub fn used(&self, node: NodeId) -> u64 {
        let n = &self.nodes[node.0 as usize];
        n.descs.len() as u64 - n.free.len() as u64
    }
}
