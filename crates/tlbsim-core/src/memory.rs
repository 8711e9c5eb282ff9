//! Simulated physical memory: frames on NUMA nodes, each with a descriptor, handed out by a
//! buddy allocator with per-CPU lists of single frames in front of it.
//!
//! docs/ARCHITECTURE.md "Physical memory and the OS": a per-frame descriptor (owner, mapcount, what the
//! frame holds, and a word of technique metadata such as FPR's tracking word), and an
//! allocator shaped like Linux's, because FPR's gain comes from which frame comes back from
//! which free list:
//! - per node, a binary buddy allocator over blocks of 2^0 .. 2^MAX_ORDER frames (Linux's
//!   MAX_PAGE_ORDER = 10: 4 MiB), free lists last-in first-out, splitting from the smallest
//!   free block that fits and merging a freed block with its free buddy, order by order;
//! - per CPU and node, a LIFO list of single frames (Linux's per-CPU pageset): a free goes
//!   to the freeing CPU's list and the next allocation on that CPU takes it back; an empty
//!   list is refilled with `batch` frames from the buddy allocator, a list longer than
//!   `high` gives its `batch` oldest frames back.
//!
//! Frame numbers encode their node (`pfn = node << NODE_SHIFT | index`), so a frame's node is
//! a shift. Descriptors are made a 4 MiB block at a time, when the block is first split, so
//! a large, mostly untouched node costs nothing.
//! Only what every frame in use needs is in the 10-byte descriptor; [`FrameDesc`] says
//! where the owner and the rarer fields live (host storage only: nothing reads differently).
//!
//! Simplified: one zone per node; no migrate types, compaction or watermarks here (reclaim
//! belongs to the OS model); allocation never falls back to another node (the caller picks
//! the node).

use crate::error::{Error, Result};
use crate::types::{CoreId, NodeId, Pfn};

/// The cache line holding `pfn`'s descriptor (its `struct page`, 64 bytes): Linux's
/// vmemmap keeps a node's descriptors on that node; here they sit at the top of the node's
/// frame numbers, 64 to a frame (no node has that many frames).
pub fn descriptor_line(pfn: Pfn) -> u64 {
    let index = pfn.0 & INDEX_MASK;
    let frame = (pfn.0 & !INDEX_MASK) | (INDEX_MASK - index / 64);
    (frame << 6) | (index % 64)
}

/// Frames per node are numbered below 2^NODE_SHIFT (1 TiB of 4 KiB frames).
pub const NODE_SHIFT: u32 = 28;
const INDEX_MASK: u64 = (1 << NODE_SHIFT) - 1;
/// Largest block order (Linux MAX_PAGE_ORDER): 2^10 frames = 4 MiB.
pub const MAX_ORDER: u32 = 10;
const CHUNK: u64 = 1 << MAX_ORDER;
/// `FrameDesc::order` of a frame that is not the head of a free buddy block.
const NOT_FREE_HEAD: u8 = u8::MAX;

/// Linux's per-CPU pageset batch for large zones (zone_batchsize caps at 63, rounded to
/// 2^n - 1); `high` = 8 batches is an assumption (Linux derives it from zone size and
/// `percpu_pagelist_high_fraction`).
pub const DEFAULT_PCP_BATCH: u32 = 63;
pub const DEFAULT_PCP_HIGH: u32 = 8 * DEFAULT_PCP_BATCH;

/// What a frame holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    Free,
    Data,
    PageTable,
}

/// Per-frame descriptor (Linux's `struct page`, reduced): 10 bytes, what every frame in
/// use needs. The rest lives beside it, per 4 MiB block, in forms that cost nothing where
/// a run does not use them (a fully touched 1 TiB footprint is 268 M descriptors):
/// - the owner ([`PhysMem::owner`]): one value for the whole block while every frame
///   claimed in it has had the same owner (a single-process run), an array once two
///   differ;
/// - the page-cache identity ([`PhysMem::mapping`]) and the three 64-bit words only some
///   runs use ([`FrameWord`]): arrays made on the first non-zero write;
/// - a map count of [`MAPCOUNT_SPILLED`] or more ([`PhysMem::mapcount`]): in a map, for
///   the frames that many page-table entries map at once.
#[derive(Clone, Copy, Debug)]
pub struct FrameDesc {
    /// [`FrameDesc::index`], 48 bits in 16-bit thirds so that the descriptor is 2-aligned.
    index: [u16; 3],
    pub kind: FrameKind,
    /// Order of the free buddy block this frame heads, or NOT_FREE_HEAD.
    order: u8,
    /// Number of page-table entries mapping this frame, or [`MAPCOUNT_SPILLED`]: the count
    /// is in [`PhysMem`]'s map of spilled counts.
    mapcount: u16,
}

const _: () = assert!(std::mem::size_of::<FrameDesc>() == 10);

/// `FrameDesc::mapcount` of a frame whose map count (this or more) is kept in a map.
pub const MAPCOUNT_SPILLED: u16 = u16::MAX;

/// [`FrameDesc::index`] holds this many bits: a 57-bit virtual address has 45 bits of page
/// number, and a file of 2^48 pages is 1 EiB.
pub const INDEX_BITS: u32 = 48;

impl FrameDesc {
    const FREE: FrameDesc = FrameDesc { kind: FrameKind::Free, order: NOT_FREE_HEAD, mapcount: 0, index: [0; 3] };

    /// For a page-cache page, its page index in the file; for an anonymous page, the
    /// virtual page number it was faulted at (Linux's `page->index`, what rmap follows).
    /// For the head of a free buddy block: its position in its free list (for O(1) removal
    /// on merge), as Linux reuses a free page's `struct page` fields for its buddy list.
    #[inline]
    pub fn index(&self) -> u64 {
        self.index[0] as u64 | (self.index[1] as u64) << 16 | (self.index[2] as u64) << 32
    }

    /// Set [`FrameDesc::index`] (below 2^[`INDEX_BITS`]).
    #[inline]
    pub fn set_index(&mut self, index: u64) {
        debug_assert!(index < 1 << INDEX_BITS, "page index {index:#x} wider than {INDEX_BITS} bits");
        self.index = [index as u16, (index >> 16) as u16, (index >> 32) as u16];
    }
}

/// The per-frame 64-bit words kept beside the descriptors (0 until set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameWord {
    /// Room for a coherence policy's per-frame metadata. It survives while the frame sits
    /// in the allocator's free lists.
    Technique = 0,
    /// The recycling axis' tracking word (FPR's: flags, context, version). It survives the
    /// free lists; two free buddies' words merge with `PhysMem::merge_tracking`, a split
    /// copies a block's word to both halves, and a claimed block's frames all get its
    /// head's word (a free block's word is its head's).
    Tracking = 1,
    /// LRU position: the stamp of this frame's live entry in its group's reclaim LRU (0 =
    /// not on an LRU). Older stamps in the queue are stale and skipped. Cleared when the
    /// frame is allocated or freed.
    LruStamp = 2,
}

/// The owners of one 4 MiB block's frames in use (a free frame has none: `u32::MAX`).
enum Owners {
    /// No frame of the block has been claimed yet.
    None,
    /// Every frame claimed in the block so far was claimed (and set) with this owner.
    All(u32),
    /// Per frame.
    Each(Box<[u32]>),
}

/// Frame `i`'s element of per-4-MiB-block arrays made on the first non-zero write (an
/// absent block's elements are all 0).
#[inline(always)]
fn lazy_get<T: Copy + Default>(blocks: &[Option<Box<[T]>>], i: u64) -> T {
    match &blocks[(i / CHUNK) as usize] {
        Some(values) => values[(i % CHUNK) as usize],
        None => T::default(),
    }
}

/// Set frame `i`'s element of such arrays, making its block's array only for a non-zero
/// value.
#[inline(always)]
fn lazy_set<T: Copy + Default + PartialEq>(blocks: &mut [Option<Box<[T]>>], i: u64, value: T) {
    let block = &mut blocks[(i / CHUNK) as usize];
    match block {
        Some(values) => values[(i % CHUNK) as usize] = value,
        None if value == T::default() => {}
        None => {
            let mut values = vec![T::default(); CHUNK as usize].into_boxed_slice();
            values[(i % CHUNK) as usize] = value;
            *block = Some(values);
        }
    }
}

struct Node {
    /// Frames on the node (a whole number of 4 MiB blocks).
    capacity: u64,
    /// Descriptors per 4 MiB block, made when the block is first split.
    chunks: Vec<Option<Box<[FrameDesc]>>>,
    /// Per [`FrameWord`], per 4 MiB block: the block's words, made on the first non-zero
    /// write (absent = all 0).
    words: [Vec<Option<Box<[u64]>>>; 3],
    /// Per 4 MiB block: its frames' owners.
    owners: Vec<Owners>,
    /// Per 4 MiB block: its frames' page-cache identities, made on the first non-zero write
    /// (absent = all 0).
    mappings: Vec<Option<Box<[u32]>>>,
    /// Free block heads (node-relative indices) per order; the last is taken first.
    free: Vec<Vec<u64>>,
    /// Per CPU: free single frames, the last freed taken first.
    pcp: Vec<Vec<u64>>,
    /// Frames handed out to users (not in a free list or a per-CPU list).
    used: u64,
    /// Of those, data frames (anonymous and page-cache pages).
    data_used: u64,
}

pub struct PhysMem {
    nodes: Vec<Node>,
    pcp_batch: u32,
    pcp_high: u32,
    /// Frames moved between a per-CPU list and the buddy allocator so far (refills and
    /// drains): the work done under the zone lock, which the OS model charges and locks.
    pub zone_frames_moved: u64,
    /// How two free buddies' tracking words merge (the recycling axis' rule; default: the
    /// lower block's).
    pub merge_tracking: fn(u64, u64) -> u64,
    /// Blocks claimed (head frame, order) whose tracking word was not 0, for the OS model
    /// to hand to the recycling axis (a frame leaving its context).
    pub tracked_claims: Vec<(Pfn, u32)>,
    /// Map counts of [`MAPCOUNT_SPILLED`] or more, by frame number.
    spilled_mapcounts: std::collections::BTreeMap<u64, u32>,
    /// Data frames in use now, every node, and the most at once.
    data_total: u64,
    pub data_peak: u64,
}

#[inline]
pub fn node_of(pfn: Pfn) -> NodeId {
    NodeId((pfn.0 >> NODE_SHIFT) as u32)
}

impl Node {
    #[inline]
    fn desc(&self, i: u64) -> &FrameDesc {
        &self.chunks[(i / CHUNK) as usize].as_ref().expect("descriptor of an untouched block")[(i % CHUNK) as usize]
    }

    #[inline]
    fn desc_mut(&mut self, i: u64) -> &mut FrameDesc {
        &mut self.chunks[(i / CHUNK) as usize].as_mut().expect("descriptor of an untouched block")[(i % CHUNK) as usize]
    }

    #[inline]
    fn word(&self, w: FrameWord, i: u64) -> u64 {
        lazy_get(&self.words[w as usize], i)
    }

    /// Set a word; a block's array is made only when a non-zero value is written to it.
    #[inline]
    fn set_word(&mut self, w: FrameWord, i: u64, value: u64) {
        lazy_set(&mut self.words[w as usize], i, value)
    }

    /// Owner of frame `i`, which is in use.
    #[inline]
    fn owner(&self, i: u64) -> u32 {
        match &self.owners[(i / CHUNK) as usize] {
            Owners::None => u32::MAX,
            Owners::All(owner) => *owner,
            Owners::Each(owners) => owners[(i % CHUNK) as usize],
        }
    }

    /// Set the owner of frame `i`, which is in use; the block keeps one value until two
    /// frames of it differ.
    #[inline(always)]
    fn set_owner(&mut self, i: u64, owner: u32) {
        // The common case (every claim of a single-process run) without a call.
        if let Owners::All(all) = self.owners[(i / CHUNK) as usize] {
            if all == owner {
                return;
            }
        }
        self.set_owner_slow(i, owner);
    }

    #[inline(never)]
    fn set_owner_slow(&mut self, i: u64, owner: u32) {
        let block = &mut self.owners[(i / CHUNK) as usize];
        match block {
            Owners::None => *block = Owners::All(owner),
            Owners::All(all) if *all == owner => {}
            Owners::All(all) => {
                let mut owners = vec![*all; CHUNK as usize].into_boxed_slice();
                owners[(i % CHUNK) as usize] = owner;
                *block = Owners::Each(owners);
            }
            Owners::Each(owners) => owners[(i % CHUNK) as usize] = owner,
        }
    }

    #[inline]
    fn mapping(&self, i: u64) -> u32 {
        lazy_get(&self.mappings, i)
    }

    /// Set frame `i`'s page-cache identity; a block's array is made only when a non-zero
    /// value is written to it.
    #[inline(always)]
    fn set_mapping(&mut self, i: u64, value: u32) {
        lazy_set(&mut self.mappings, i, value)
    }

    fn materialize(&mut self, i: u64) {
        let c = &mut self.chunks[(i / CHUNK) as usize];
        if c.is_none() {
            *c = Some(vec![FrameDesc::FREE; CHUNK as usize].into_boxed_slice());
        }
    }

    fn push_free(&mut self, i: u64, order: u32) {
        if order < MAX_ORDER {
            let pos = self.free[order as usize].len() as u32;
            let d = self.desc_mut(i);
            d.order = order as u8;
            d.set_index(pos as u64);
        } else if self.chunks[(i / CHUNK) as usize].is_some() {
            self.desc_mut(i).order = order as u8;
        }
        self.free[order as usize].push(i);
    }

    fn remove_free(&mut self, i: u64, order: u32) {
        let pos = self.desc(i).index() as usize;
        let list = &mut self.free[order as usize];
        debug_assert_eq!(list[pos], i);
        list.swap_remove(pos);
        if let Some(&moved) = list.get(pos) {
            self.desc_mut(moved).set_index(pos as u64);
        }
        let d = self.desc_mut(i);
        d.order = NOT_FREE_HEAD;
        d.set_index(0);
    }

    /// Take a free block of `order` from the buddy allocator (node-relative index).
    fn alloc_block(&mut self, order: u32) -> Option<u64> {
        let j = (order..=MAX_ORDER).find(|&j| !self.free[j as usize].is_empty())?;
        let head = self.free[j as usize].pop().expect("non-empty");
        self.materialize(head);
        let d = self.desc_mut(head);
        d.order = NOT_FREE_HEAD;
        d.set_index(0);
        let word = self.word(FrameWord::Tracking, head);
        // Split: the upper halves go back to the free lists, with the block's word.
        for k in (order..j).rev() {
            self.materialize(head + (1 << k));
            self.set_word(FrameWord::Tracking, head + (1 << k), word);
            self.push_free(head + (1 << k), k);
        }
        Some(head)
    }

    /// Give a block back to the buddy allocator, merging it with free buddies (and their
    /// tracking words, with `merge`).
    fn free_block(&mut self, mut i: u64, order: u32, merge: fn(u64, u64) -> u64) {
        let mut k = order;
        let mut word = self.word(FrameWord::Tracking, i);
        while k < MAX_ORDER {
            let buddy = i ^ (1 << k);
            if self.desc(buddy).order != k as u8 {
                break;
            }
            self.remove_free(buddy, k);
            word = merge(word, self.word(FrameWord::Tracking, buddy));
            i = i.min(buddy);
            k += 1;
        }
        if self.chunks[(i / CHUNK) as usize].is_some() {
            self.set_word(FrameWord::Tracking, i, word);
        }
        self.push_free(i, k);
    }
}

impl PhysMem {
    /// `nodes` nodes of `mib_per_node` MiB each (rounded down to whole 4 MiB blocks, at least
    /// one), default per-CPU list sizes, per-CPU lists for up to 4096 CPUs made on demand.
    pub fn new(nodes: u32, mib_per_node: u64) -> PhysMem {
        PhysMem::with_pcp(nodes, mib_per_node, DEFAULT_PCP_BATCH, DEFAULT_PCP_HIGH)
    }

    pub fn with_pcp(nodes: u32, mib_per_node: u64, pcp_batch: u32, pcp_high: u32) -> PhysMem {
        let frames = (mib_per_node << 20 >> 12).min(INDEX_MASK + 1);
        let capacity = (frames / CHUNK).max(1) * CHUNK;
        let nodes = (0..nodes)
            .map(|_| {
                let mut free = vec![Vec::new(); MAX_ORDER as usize + 1];
                // Lowest addresses first out.
                free[MAX_ORDER as usize] = (0..capacity / CHUNK).rev().map(|c| c * CHUNK).collect();
                let blocks = (capacity / CHUNK) as usize;
                let words = || (0..blocks).map(|_| None).collect::<Vec<_>>();
                Node {
                    capacity,
                    chunks: (0..blocks).map(|_| None).collect(),
                    words: [words(), words(), words()],
                    owners: (0..blocks).map(|_| Owners::None).collect(),
                    mappings: (0..blocks).map(|_| None).collect(),
                    free,
                    pcp: Vec::new(),
                    used: 0,
                    data_used: 0,
                }
            })
            .collect();
        PhysMem {
            nodes,
            pcp_batch: pcp_batch.max(1),
            pcp_high: pcp_high.max(pcp_batch.max(1)),
            zone_frames_moved: 0,
            merge_tracking: |a, _| a,
            tracked_claims: Vec::new(),
            spilled_mapcounts: std::collections::BTreeMap::new(),
            data_total: 0,
            data_peak: 0,
        }
    }

    pub fn nodes(&self) -> u32 {
        self.nodes.len() as u32
    }

    fn out_of_memory(&self, node: NodeId, order: u32) -> Error {
        let n = &self.nodes[node.0 as usize];
        Error::Sim(format!(
            "node {} has no free block of {} frames ({} of {} MiB in use): raise machine.memory.node_mib",
            node.0,
            1u64 << order,
            (n.used * 4096) >> 20,
            (n.capacity * 4096) >> 20
        ))
    }

    fn claim(&mut self, node: NodeId, i: u64, order: u32, kind: FrameKind, owner: u32) -> Pfn {
        let n = &mut self.nodes[node.0 as usize];
        let tracking = n.word(FrameWord::Tracking, i);
        for f in i..i + (1 << order) {
            *n.desc_mut(f) = FrameDesc { kind, ..FrameDesc::FREE };
            // (Its page-cache identity is 0: `release` cleared it.)
            n.set_owner(f, owner);
            n.set_word(FrameWord::Tracking, f, tracking);
            n.set_word(FrameWord::LruStamp, f, 0);
        }
        n.used += 1 << order;
        if kind == FrameKind::Data {
            n.data_used += 1 << order;
            self.data_total += 1 << order;
            self.data_peak = self.data_peak.max(self.data_total);
        }
        let pfn = Pfn(((node.0 as u64) << NODE_SHIFT) | i);
        if tracking != 0 {
            self.tracked_claims.push((pfn, order));
        }
        pfn
    }

    /// Allocate 2^`order` contiguous, aligned frames on `node` from the buddy allocator.
    pub fn alloc_order(&mut self, node: NodeId, order: u32, kind: FrameKind, owner: u32) -> Result<Pfn> {
        assert!(order <= MAX_ORDER, "order {order} above MAX_ORDER");
        let i = self.nodes[node.0 as usize].alloc_block(order).ok_or_else(|| self.out_of_memory(node, order))?;
        Ok(self.claim(node, i, order, kind, owner))
    }

    /// Allocate one frame on `node` (no CPU: straight from the buddy allocator).
    pub fn alloc(&mut self, node: NodeId, kind: FrameKind, owner: u32) -> Result<Pfn> {
        self.alloc_order(node, 0, kind, owner)
    }

    /// Allocate one frame on `node` through `cpu`'s per-CPU list.
    pub fn alloc_on(&mut self, cpu: CoreId, node: NodeId, kind: FrameKind, owner: u32) -> Result<Pfn> {
        let batch = self.pcp_batch;
        let n = &mut self.nodes[node.0 as usize];
        let c = cpu.0 as usize;
        if n.pcp.len() <= c {
            n.pcp.resize_with(c + 1, Vec::new);
        }
        let mut moved = 0;
        if n.pcp[c].is_empty() {
            // Refill with a batch; taken in the order the buddy hands them out.
            let mut got = Vec::with_capacity(batch as usize);
            while got.len() < batch as usize {
                match n.alloc_block(0) {
                    Some(i) => got.push(i),
                    None => break,
                }
            }
            got.reverse();
            moved = got.len() as u64;
            n.pcp[c] = got;
        }
        let popped = n.pcp[c].pop();
        self.zone_frames_moved += moved;
        let i = popped.ok_or_else(|| self.out_of_memory(node, 0))?;
        Ok(self.claim(node, i, 0, kind, owner))
    }

    /// Allocate `count` contiguous frames (a power of two, at most 2^MAX_ORDER), aligned to
    /// `count`, on `node`: a huge page.
    pub fn alloc_contiguous(&mut self, node: NodeId, count: u64, kind: FrameKind, owner: u32) -> Result<Pfn> {
        assert!(count.is_power_of_two() && count <= CHUNK, "block of {count} frames");
        self.alloc_order(node, count.trailing_zeros(), kind, owner)
    }

    fn release(&mut self, pfn: Pfn, order: u32) -> (usize, u64) {
        let node = node_of(pfn).0 as usize;
        let i = pfn.0 & INDEX_MASK;
        let n = &mut self.nodes[node];
        if n.desc(i).kind == FrameKind::Data {
            n.data_used -= 1 << order;
            self.data_total -= 1 << order;
        }
        for f in i..i + (1 << order) {
            let d = n.desc_mut(f);
            debug_assert_ne!(d.kind, FrameKind::Free, "double free of frame {f}");
            if d.mapcount == MAPCOUNT_SPILLED {
                self.spilled_mapcounts.remove(&((pfn.0 & !INDEX_MASK) | f));
            }
            *d = FrameDesc::FREE;
            n.set_mapping(f, 0);
            n.set_word(FrameWord::LruStamp, f, 0);
        }
        n.used -= 1 << order;
        (node, i)
    }

    /// Free a block of 2^`order` frames to the buddy allocator.
    pub fn free_order(&mut self, pfn: Pfn, order: u32) {
        let (node, i) = self.release(pfn, order);
        let merge = self.merge_tracking;
        self.nodes[node].free_block(i, order, merge);
    }

    /// Free one frame to the buddy allocator.
    pub fn free(&mut self, pfn: Pfn) {
        self.free_order(pfn, 0)
    }

    /// Free one frame to `cpu`'s per-CPU list (Linux's free_unref_page).
    pub fn free_on(&mut self, cpu: CoreId, pfn: Pfn) {
        let (node, i) = self.release(pfn, 0);
        let (batch, high) = (self.pcp_batch as usize, self.pcp_high as usize);
        let n = &mut self.nodes[node];
        let c = cpu.0 as usize;
        if n.pcp.len() <= c {
            n.pcp.resize_with(c + 1, Vec::new);
        }
        n.pcp[c].push(i);
        if n.pcp[c].len() > high {
            // The oldest (coldest) frames go back to the buddy allocator.
            let spill: Vec<u64> = n.pcp[c].drain(..batch).collect();
            let moved = spill.len() as u64;
            for f in spill {
                n.free_block(f, 0, self.merge_tracking);
            }
            self.zone_frames_moved += moved;
        }
    }

    /// Give every per-CPU list back to the buddy allocator (Linux's drain_all_pages).
    pub fn drain_pcp(&mut self) {
        let merge = self.merge_tracking;
        for n in &mut self.nodes {
            let lists = std::mem::take(&mut n.pcp);
            for f in lists.into_iter().flatten() {
                n.free_block(f, 0, merge);
            }
        }
    }

    #[inline]
    pub fn desc(&self, pfn: Pfn) -> &FrameDesc {
        self.nodes[(pfn.0 >> NODE_SHIFT) as usize].desc(pfn.0 & INDEX_MASK)
    }

    #[inline]
    pub fn desc_mut(&mut self, pfn: Pfn) -> &mut FrameDesc {
        self.nodes[(pfn.0 >> NODE_SHIFT) as usize].desc_mut(pfn.0 & INDEX_MASK)
    }

    /// Owning address space (process) id of `pfn`, a frame in use (`u32::MAX` if it is
    /// free, or shared and so set).
    #[inline]
    pub fn owner(&self, pfn: Pfn) -> u32 {
        let n = &self.nodes[(pfn.0 >> NODE_SHIFT) as usize];
        let i = pfn.0 & INDEX_MASK;
        if n.desc(i).kind == FrameKind::Free {
            return u32::MAX;
        }
        n.owner(i)
    }

    /// Set the owner of `pfn`, a frame in use.
    #[inline]
    pub fn set_owner(&mut self, pfn: Pfn, owner: u32) {
        let n = &mut self.nodes[(pfn.0 >> NODE_SHIFT) as usize];
        let i = pfn.0 & INDEX_MASK;
        debug_assert_ne!(n.desc(i).kind, FrameKind::Free, "owner of a free frame");
        n.set_owner(i, owner);
    }

    /// Number of page-table entries mapping `pfn`.
    #[inline]
    pub fn mapcount(&self, pfn: Pfn) -> u32 {
        match self.desc(pfn).mapcount {
            MAPCOUNT_SPILLED => self.spilled_mapcounts[&pfn.0],
            count => count as u32,
        }
    }

    /// Set the map count of `pfn`, a frame in use.
    #[inline]
    pub fn set_mapcount(&mut self, pfn: Pfn, count: u32) {
        let was_spilled = self.desc(pfn).mapcount == MAPCOUNT_SPILLED;
        let inline = if count >= MAPCOUNT_SPILLED as u32 {
            self.spilled_mapcounts.insert(pfn.0, count);
            MAPCOUNT_SPILLED
        } else {
            if was_spilled {
                self.spilled_mapcounts.remove(&pfn.0);
            }
            count as u16
        };
        self.desc_mut(pfn).mapcount = inline;
    }

    /// Page-cache identity of `pfn`: 0 for anonymous memory (and free frames), file id + 1
    /// for a page-cache page.
    #[inline]
    pub fn mapping(&self, pfn: Pfn) -> u32 {
        let n = &self.nodes[(pfn.0 >> NODE_SHIFT) as usize];
        let i = pfn.0 & INDEX_MASK;
        if n.desc(i).kind == FrameKind::Free {
            return 0;
        }
        n.mapping(i)
    }

    /// Set the page-cache identity of `pfn`, a frame in use.
    #[inline]
    pub fn set_mapping(&mut self, pfn: Pfn, mapping: u32) {
        let n = &mut self.nodes[(pfn.0 >> NODE_SHIFT) as usize];
        let i = pfn.0 & INDEX_MASK;
        debug_assert_ne!(n.desc(i).kind, FrameKind::Free, "mapping of a free frame");
        n.set_mapping(i, mapping);
    }

    /// `pfn`'s word `w` (0 if never set).
    #[inline]
    pub fn word(&self, pfn: Pfn, w: FrameWord) -> u64 {
        self.nodes[(pfn.0 >> NODE_SHIFT) as usize].word(w, pfn.0 & INDEX_MASK)
    }

    #[inline]
    pub fn set_word(&mut self, pfn: Pfn, w: FrameWord, value: u64) {
        self.nodes[(pfn.0 >> NODE_SHIFT) as usize].set_word(w, pfn.0 & INDEX_MASK, value)
    }

    /// Run `f` on a copy of `pfn`'s word `w` and store what it leaves (so that a hook that
    /// changes nothing makes no array).
    #[inline]
    pub fn update_word<R>(&mut self, pfn: Pfn, w: FrameWord, f: impl FnOnce(&mut u64) -> R) -> R {
        let mut word = self.word(pfn, w);
        let before = word;
        let r = f(&mut word);
        if word != before {
            self.set_word(pfn, w, word);
        }
        r
    }

    /// Frames in use on `node`.
    pub fn used(&self, node: NodeId) -> u64 {
        self.nodes[node.0 as usize].used
    }

    /// Data frames in use on `node`.
    pub fn data_used(&self, node: NodeId) -> u64 {
        self.nodes[node.0 as usize].data_used
    }

    /// Frames of physical memory, every node.
    pub fn total_frames(&self) -> u64 {
        self.nodes.iter().map(|n| n.capacity).sum()
    }

    /// Free blocks per order on `node` (for tests and stats).
    pub fn free_blocks(&self, node: NodeId) -> Vec<usize> {
        self.nodes[node.0 as usize].free.iter().map(Vec::len).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    #[test]
    fn split_and_merge_restore_the_initial_state() {
        let mut m = PhysMem::new(1, 16); // 4 blocks of 4 MiB
        let a = m.alloc_order(NodeId(0), 0, FrameKind::Data, 1).unwrap();
        // The first frame of the lowest block; its buddies at orders 0..9 are now free.
        assert_eq!(a, Pfn(0));
        assert_eq!(m.free_blocks(NodeId(0)), vec![1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3]);
        let b = m.alloc_order(NodeId(0), 0, FrameKind::Data, 1).unwrap();
        assert_eq!(b, Pfn(1), "the smallest free block that fits is split");
        m.free(a);
        m.free(b);
        assert_eq!(m.free_blocks(NodeId(0)), vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4]);
        assert_eq!(m.used(NodeId(0)), 0);
    }

    #[test]
    fn per_cpu_lists_give_back_the_last_freed_frame() {
        let mut m = PhysMem::new(2, 16);
        let a = m.alloc_on(CoreId(3), NodeId(1), FrameKind::Data, 1).unwrap();
        assert_eq!(node_of(a), NodeId(1));
        let b = m.alloc_on(CoreId(3), NodeId(1), FrameKind::Data, 1).unwrap();
        assert_ne!(a, b);
        m.free_on(CoreId(3), a);
        // The same CPU gets the same frame back (FPR's recycling depends on this) ...
        assert_eq!(m.alloc_on(CoreId(3), NodeId(1), FrameKind::Data, 2).unwrap(), a);
        m.free_on(CoreId(3), a);
        // ... another CPU does not.
        assert_ne!(m.alloc_on(CoreId(0), NodeId(1), FrameKind::Data, 2).unwrap(), a);
    }

    #[test]
    fn technique_word_survives_the_free_lists() {
        let mut m = PhysMem::new(1, 4);
        let a = m.alloc_on(CoreId(0), NodeId(0), FrameKind::Data, 1).unwrap();
        m.set_word(a, FrameWord::Technique, 0xfeed);
        m.set_word(a, FrameWord::LruStamp, 5);
        m.free_on(CoreId(0), a);
        let again = m.alloc_on(CoreId(0), NodeId(0), FrameKind::Data, 7).unwrap();
        assert_eq!((again, m.word(again, FrameWord::Technique), m.owner(again)), (a, 0xfeed, 7));
        assert_eq!(m.word(again, FrameWord::LruStamp), 0, "the LRU stamp does not survive a free");
    }

    /// Owners, page-cache identities and map counts, kept outside the descriptor (a block's
    /// one owner until two differ, arrays made on a non-zero write, counts of 2^16 - 1 or
    /// more in a map), against a plain map per frame through random claims, writes and
    /// frees (both through the buddy allocator and the per-CPU lists).
    #[test]
    fn frame_fields_outside_the_descriptor_match_a_model() {
        use std::collections::HashMap;
        for seed in 0..20 {
            let mut rng = SplitMix64::new(seed);
            let mut m = PhysMem::with_pcp(1, 16, 7, 20);
            // Per frame in use: (owner, mapping, mapcount).
            let mut model: HashMap<Pfn, (u32, u32, u32)> = HashMap::new();
            let mut live: Vec<Pfn> = Vec::new();
            for step in 0..4000 {
                match rng.below(10) {
                    0..=3 => {
                        // Few distinct owners, so that blocks both stay uniform and split.
                        let owner = if seed % 2 == 0 { 5 } else { rng.below(3) as u32 };
                        let r = if rng.below(2) == 0 {
                            m.alloc_on(CoreId(rng.below(2) as u32), NodeId(0), FrameKind::Data, owner)
                        } else {
                            m.alloc(NodeId(0), FrameKind::Data, owner)
                        };
                        if let Ok(p) = r {
                            model.insert(p, (owner, 0, 0));
                            live.push(p);
                        }
                    }
                    4 | 5 if !live.is_empty() => {
                        let p = live[rng.below(live.len() as u64) as usize];
                        let e = model.get_mut(&p).unwrap();
                        match rng.below(3) {
                            0 => {
                                e.0 = rng.below(4) as u32;
                                m.set_owner(p, e.0);
                            }
                            1 => {
                                e.1 = if rng.below(2) == 0 { 0 } else { 1 + rng.below(9) as u32 };
                                m.set_mapping(p, e.1);
                            }
                            _ => {
                                // Around the spill threshold and far from it.
                                e.2 = match rng.below(3) {
                                    0 => rng.below(4) as u32,
                                    1 => MAPCOUNT_SPILLED as u32 - 2 + rng.below(4) as u32,
                                    _ => 1 << 20,
                                };
                                m.set_mapcount(p, e.2);
                            }
                        }
                    }
                    6 | 7 if !live.is_empty() => {
                        let p = live.swap_remove(rng.below(live.len() as u64) as usize);
                        model.remove(&p);
                        if rng.below(2) == 0 {
                            m.free_on(CoreId(0), p)
                        } else {
                            m.free(p)
                        }
                        assert_eq!((m.owner(p), m.mapping(p), m.mapcount(p)), (u32::MAX, 0, 0), "seed {seed} step {step}: a free frame");
                    }
                    _ => {}
                }
                for (&p, &want) in &model {
                    assert_eq!((m.owner(p), m.mapping(p), m.mapcount(p)), want, "seed {seed} step {step}: frame {p:?}");
                }
            }
            assert_eq!(
                m.spilled_mapcounts.len(),
                model.values().filter(|e| e.2 >= MAPCOUNT_SPILLED as u32).count(),
                "seed {seed}: no spilled count outlives its frame"
            );
        }
    }

    #[test]
    fn out_of_memory_is_an_error() {
        let mut m = PhysMem::new(1, 4); // one 4 MiB block
        m.alloc_order(NodeId(0), MAX_ORDER, FrameKind::Data, 1).unwrap();
        let e = m.alloc(NodeId(0), FrameKind::Data, 1).unwrap_err().to_string();
        assert!(e.contains("node_mib"), "{e}");
    }

    /// Random allocations and frees (buddy and per-CPU) against a simple model: blocks
    /// never overlap, are aligned, `used` matches, and freeing everything merges back to
    /// whole 4 MiB blocks.
    #[test]
    fn random_operations_against_a_model() {
        for seed in 0..20 {
            let mut rng = SplitMix64::new(seed);
            let mut m = PhysMem::with_pcp(1, 32, 7, 20);
            let mut owned = vec![false; 8 * CHUNK as usize];
            let mut live: Vec<(Pfn, u32, Option<CoreId>)> = Vec::new();
            for _ in 0..3000 {
                if live.is_empty() || rng.below(100) < 55 {
                    let via_cpu = rng.below(2) == 0;
                    let (r, order, cpu) = if via_cpu {
                        let cpu = CoreId(rng.below(3) as u32);
                        (m.alloc_on(cpu, NodeId(0), FrameKind::Data, 1), 0, Some(cpu))
                    } else {
                        let order = rng.below(6) as u32;
                        (m.alloc_order(NodeId(0), order, FrameKind::Data, 1), order, None)
                    };
                    let Ok(p) = r else { continue };
                    assert_eq!(p.0 % (1 << order), 0, "aligned");
                    for f in p.0..p.0 + (1 << order) {
                        assert!(!owned[f as usize], "frame {f} handed out twice");
                        owned[f as usize] = true;
                    }
                    live.push((p, order, cpu));
                } else {
                    let (p, order, cpu) = live.swap_remove(rng.below(live.len() as u64) as usize);
                    for f in p.0..p.0 + (1 << order) {
                        owned[f as usize] = false;
                    }
                    match cpu {
                        Some(c) if rng.below(2) == 0 => m.free_on(c, p),
                        _ => m.free_order(p, order),
                    }
                }
                assert_eq!(m.used(NodeId(0)), owned.iter().filter(|&&o| o).count() as u64);
            }
            for (p, order, _) in live.drain(..) {
                m.free_order(p, order);
            }
            m.drain_pcp();
            let mut expect = vec![0; MAX_ORDER as usize + 1];
            expect[MAX_ORDER as usize] = 8;
            assert_eq!(m.free_blocks(NodeId(0)), expect, "seed {seed}: everything merges back");
        }
    }
}
