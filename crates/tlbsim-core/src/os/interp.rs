//! The thread interpreter: runs each thread's program of workload operations
//! (`crate::workload::program::Op`) on its core — loops, compute, accesses through the one
//! access path, system calls into `mm/`, blocking, migration, fork and exit.

use super::locks::LockMode;
use super::mm::RangeKind;
use super::Os;
use crate::coherence::Coherence;
use crate::error::{Error, Result};
use crate::types::{AccessKind, NodeId};
use crate::workload::program::{AccessMode, Op, Pattern};

impl<P: Coherence> Os<P> {
    /// Step one thread on `core` until `until` (or it blocks, exits, or waits).
    pub(super) fn step_thread(&mut self, core: usize, thread: usize, until: u64) -> Result<()> {
        while self.clock(core) < until && self.cores[core].current == Some(thread) && self.cores[core].waiting == 0 && !self.sched.yield_requested() {
            // An access whose page fault waited for `mmap_lock` runs again first, its fault
            // under the lock it was granted (os/locks.rs `fault_must_wait`).
            if let Some((va, kind)) = self.threads[thread].retry_access.take() {
                crate::access::access(self, core, va, kind)?;
                self.threads[thread].fault_lock_granted = false;
                continue;
            }
            // A system call an allocator operation asked for runs first (os/alloc.rs).
            if let Some(op) = self.threads[thread].pending.clone() {
                self.exec_op(core, thread, op, until)?;
                continue;
            }
            let prog = self.threads[thread].program;
            let pc = self.threads[thread].pc;
            // End of a loop body: go round again or leave the loop.
            if let Some(&(start, body, left)) = self.threads[thread].loops.last() {
                if pc == start + body {
                    let t = &mut self.threads[thread];
                    if left == u64::MAX || left > 1 {
                        if left != u64::MAX {
                            t.loops.last_mut().expect("open loop").2 -= 1;
                        }
                        t.pc = start;
                    } else {
                        t.loops.pop();
                    }
                    continue;
                }
            }
            if pc >= self.w.programs[prog].len() {
                self.exit_thread(core, thread);
                return Ok(());
            }
            // NUMA task placement chose another core for this thread: it leaves this one.
            if self.numa.is_some() && self.threads[thread].syscall_resume == 0 && self.numa_move_due(core, thread) {
                return Ok(());
            }
            if self.numa.is_some() && self.threads[thread].syscall_resume == 0 && self.numa_scan_due(core, thread) {
                // AutoNUMA's task work, on the way back to user space: it changes page
                // tables, so it waits as a system call does for cores behind it.
                self.cores[core].leap = None;
                if self.ahead_of_others(core) {
                    self.sched.request_yield();
                    return Ok(());
                }
                self.numa_scan(core, thread)?;
                continue;
            }
            let op = self.w.programs[prog][pc].clone();
            self.exec_op(core, thread, op, until)?;
        }
        Ok(())
    }

    /// The operation the thread runs is done: the pending one (os/alloc.rs) if any, else
    /// the one at its pc.
    pub(super) fn advance(&mut self, thread: usize) {
        let t = &mut self.threads[thread];
        if t.pending.take().is_none() {
            t.pc += 1;
        }
    }

    fn exec_op(&mut self, core: usize, thread: usize, op: Op, until: u64) -> Result<()> {
        if !matches!(op, Op::Compute { .. }) {
            // The core does something other cores may see: its computation is over.
            self.cores[core].leap = None;
        }
        let system_call = matches!(
            op,
            Op::Fork { .. }
                | Op::Mmap { .. }
                | Op::Munmap { .. }
                | Op::Mprotect { .. }
                | Op::MadviseDontneed { .. }
                | Op::Msync { .. }
                | Op::MigratePages { .. }
        );
        // Allocator calls change state other threads' calls read (os/alloc.rs): ordered as
        // system calls are.
        let allocator_call = matches!(op, Op::Malloc { .. } | Op::Free { .. } | Op::Realloc { .. });
        if (system_call || allocator_call) && self.ahead_of_others(core) {
            self.sched.request_yield();
            return Ok(());
        }
        if !system_call {
            return self.exec_user_op(core, thread, op, until);
        }
        // A system call runs whole: an interrupt arriving meanwhile is taken when it
        // returns to user space (`kernel_span`, counted in handle_irq).
        let start = self.clock(core);
        let call = match op {
            Op::Mmap { .. } => 0,
            Op::Munmap { .. } => 1,
            Op::Mprotect { .. } => 2,
            Op::MadviseDontneed { .. } => 3,
            Op::Msync { .. } => 4,
            Op::Fork { .. } => 5,
            _ => 6,
        };
        let pc = self.threads[thread].pc;
        let was_pending = self.threads[thread].pending.is_some();
        let resuming = self.threads[thread].syscall_resume != 0;
        self.exec_user_op(core, thread, op, until)?;
        let finished = self.threads[thread].pc != pc || (was_pending && self.threads[thread].pending.is_none());
        if finished {
            self.stats[core].syscall_calls[call] += 1;
        }
        // It ran, whole or a piece (a call that waits for a lock first returns without
        // advancing, and without a piece done).
        if finished || resuming || self.threads[thread].syscall_resume != 0 {
            self.stats[core].syscall_cycles[call] += self.clock(core) - start;
        }
        if self.settings.recycling_on() && !self.m.mem.tracked_claims.is_empty() {
            // Page tables (and migration targets) the call claimed may leave a context.
            self.settle_claims(core, None);
        }
        self.set_kernel_span(core, start);
        Ok(())
    }

    fn exec_user_op(&mut self, core: usize, thread: usize, op: Op, until: u64) -> Result<()> {
        match op {
            Op::Loop { count, body } => {
                let t = &mut self.threads[thread];
                let start = t.pc + 1;
                if count == 0 && !t.daemon {
                    return Err(Error::Sim(format!("thread {:?}: a loop without end in a non-daemon thread", t.name)));
                }
                if body == 0 {
                    t.pc = start;
                } else {
                    t.loops.push((start, body, if count == 0 { u64::MAX } else { count }));
                    t.pc = start;
                }
            }
            Op::CountOp => {
                self.threads[thread].ops_completed += 1;
                if self.ptdump_at.is_some() {
                    self.ptdump_at_op(core, thread);
                }
                self.advance(thread);
            }
            Op::Barrier => {
                self.advance(thread);
                let pid = self.threads[thread].pid as usize;
                self.spaces[pid].barrier_waiting.push(thread);
                let now = self.clock(core);
                if !self.release_barrier(pid, now, (thread, core)) {
                    // Asleep without a wake-up time: the last to arrive wakes it.
                    self.park(core, thread);
                }
            }
            Op::Compute { cycles } => {
                // Runs in pieces: to the step's limit, or past it as a leap up to what is due
                // on the core (`Leap`, `leap_until`).
                let now = self.clock(core);
                // Computation since the last thing other cores could see.
                let from = self.live_leap(core).map_or(now, |l| l.from);
                let t = &mut self.threads[thread];
                if t.access_left == 0 {
                    t.access_left = cycles;
                }
                let bound = until.max(self.cores[core].leap_until);
                let piece = t.access_left.min(bound.saturating_sub(now).max(1));
                t.access_left -= piece;
                let finished = t.access_left == 0;
                if finished {
                    t.pc += 1;
                }
                self.m.cores[core].stats.instructions += piece;
                self.m.cores[core].tlbs.retire(piece);
                self.charge(core, piece);
                let end_raw = self.m.cores[core].clock;
                let pc = self.threads[thread].pc;
                self.cores[core].leap = Some(super::Leap { thread, pc, end_raw, from, floor: now, finished });
            }
            Op::Io { server, cycles } => self.io_request(core, thread, server as usize, cycles),
            Op::Replay { stream, start, len } => self.exec_replay(core, thread, stream as usize, start, len, until)?,
            Op::SetRange { slot, va, len } => {
                self.threads[thread].slots[slot] = (va, len);
                self.advance(thread);
            }
            Op::SubRange { slot, of, offset, len } => {
                let (va, held) = self.threads[thread].slots[of];
                if offset + len > held {
                    return Err(Error::Sim(format!(
                        "thread {:?}: bytes {offset:#x}..{:#x} of region slot {of} do not exist (it holds {held:#x} bytes)",
                        self.threads[thread].name,
                        offset + len
                    )));
                }
                self.threads[thread].slots[slot] = (va + offset, len);
                self.advance(thread);
            }
            Op::Spawn { thread: declared } => self.spawn_held(core, thread, declared),
            Op::Clone { program } => self.clone_thread(core, thread, program),
            Op::Post { token } => self.post(core, thread, token),
            Op::Wait { token, count } => self.wait_token(core, thread, token, count, until)?,
            Op::Sleep { token, count } => self.sleep_token(core, thread, token, count),
            Op::Spin { token, count, stream, start, len } => self.exec_spin(core, thread, token, count, stream as usize, start, len, until)?,
            Op::Take { token } => self.take_token(core, thread, token),
            Op::Malloc { ptr, bytes, slot } => self.exec_malloc(core, thread, ptr, bytes, slot)?,
            Op::Free { ptr } => self.exec_free(core, thread, ptr, None)?,
            Op::Realloc { ptr, bytes } => self.exec_free(core, thread, ptr, Some(bytes))?,
            Op::UsePtr { slot, ptr } => self.exec_use_ptr(thread, slot, ptr)?,
            Op::Serve => self.serve(core, thread),
            Op::FileIo { file, offset, len, write } => self.file_io(core, thread, file, offset, len, write)?,
            Op::Block { cycles } => {
                self.advance(thread);
                let now = self.clock(core);
                self.block(core, thread, now + cycles);
            }
            Op::Access { .. } => self.exec_access(core, thread, &op, until)?,
            Op::Exit => {
                self.advance(thread);
                self.exit_thread(core, thread);
            }
            Op::SetAffinity { set } => {
                self.advance(thread);
                self.set_affinity(core, thread, set)?;
            }
            Op::MigrateThread { core: to } => {
                self.advance(thread);
                let to = self.cpu_index(thread, to as usize);
                self.threads[thread].allowed = None;
                self.threads[thread].pinned = true;
                if to != self.threads[thread].core {
                    self.move_thread(core, thread, to)?;
                }
            }
            Op::Fork { program, core: child_core } => {
                // dup_mmap write-locks the parent's mmap_lock and every VMA.
                let pid = self.threads[thread].pid;
                if !self.mmap_lock(core, thread, pid, LockMode::Write) {
                    return Ok(());
                }
                self.lock_vmas(pid, 0, u64::MAX);
                self.advance(thread);
                self.syscall_fork(core, thread, program, child_core.map(|c| c as usize))?;
                self.mmap_unlock_after_syscall(core, thread, pid);
            }
            Op::Mmap { slot, spec } => {
                let pid = self.threads[thread].pid;
                if !self.mmap_lock(core, thread, pid, LockMode::Write) {
                    return Ok(());
                }
                self.advance(thread);
                self.stats[core].syscalls += 1;
                self.charge(core, self.settings.costs().syscall + self.settings.costs().mmap);
                // MAP_FIXED at the address the slot held before (none yet: a plain mmap).
                let previous = self.threads[thread].slots[slot].0;
                let fixed_at = (spec.fixed && previous != 0).then_some(previous);
                if let Some(va) = fixed_at {
                    // MAP_FIXED replaces what its range overlaps (mmap_region's
                    // do_vmi_munmap), under the write lock it holds.
                    let len = spec.bytes.div_ceil(4096) * 4096;
                    if self.overlaps_mapping(pid, va, len) {
                        self.unmap_range(core, thread, va, len)?;
                    }
                }
                let va = self.mmap_region(core, pid, &spec, fixed_at)?;
                self.threads[thread].slots[slot] = (va, spec.bytes.div_ceil(4096) * 4096);
                self.mmap_unlock_after_syscall(core, thread, pid);
            }
            // Write-locked to detach the VMAs, downgraded to read for the teardown and the
            // flush (munmap's begin downgrades); mprotect holds the write lock throughout,
            // madvise the read lock.
            Op::Munmap { slot } => self.range_syscall(core, thread, slot, RangeKind::Munmap)?,
            Op::Mprotect { slot, writable } => self.range_syscall(core, thread, slot, RangeKind::Mprotect { writable })?,
            Op::MadviseDontneed { slot } => self.range_syscall(core, thread, slot, RangeKind::Dontneed)?,
            Op::Msync { slot } => {
                self.paged_syscall(core, thread, slot, |os, (va, len)| os.sys_msync(core, thread, va, len))?;
            }
            Op::MigratePages { slot, node } => {
                self.paged_syscall(core, thread, slot, |os, (va, len)| os.sys_migrate_pages(core, thread, va, len, NodeId(node)))?;
            }
        }
        Ok(())
    }

    /// A long page-table system call on region `slot` (mm/steps.rs): the first time, take
    /// `mmap_lock` (or wait and run again when granted), write-lock the region's VMAs for
    /// munmap and mprotect, and begin; then one page-table page per run, the operation
    /// staying at its pc (the lock held) until the last step has sent the call's flush;
    /// then release (after the flush, if it left the core waiting).
    fn range_syscall(&mut self, core: usize, thread: usize, slot: usize, kind: RangeKind) -> Result<()> {
        let pid = self.threads[thread].pid;
        let resume = self.threads[thread].syscall_resume;
        let (mut call, from) = match self.threads[thread].range_call.take() {
            Some(call) if resume != 0 => (call, resume),
            _ => {
                let mode = if kind == RangeKind::Dontneed { LockMode::Read } else { LockMode::Write };
                if !self.mmap_lock(core, thread, pid, mode) {
                    return Ok(());
                }
                self.syscall_prologue(core);
                let (va, len) = self.threads[thread].slots[slot];
                if kind != RangeKind::Dontneed {
                    self.lock_vmas(pid, va, va.saturating_add(len));
                }
                let call = Box::new(self.range_call_begin(core, thread, kind, va, len));
                let from = call.start();
                (call, from)
            }
        };
        match self.range_call_step(core, thread, &mut call, from)? {
            Some(next) => {
                let t = &mut self.threads[thread];
                t.syscall_resume = next;
                t.range_call = Some(call);
            }
            None => {
                self.threads[thread].syscall_resume = 0;
                self.advance(thread);
                self.mmap_unlock_after_syscall(core, thread, pid);
            }
        }
        Ok(())
    }

    /// A system call that flushes as it goes and waits for each flush (msync's
    /// page_mkclean, migration's batches): `call` returns the address to go on from when it
    /// left its core waiting for acks; the operation then runs again from there when the
    /// core resumes (`mmap_lock` read-held per piece, the call counted once).
    fn paged_syscall(&mut self, core: usize, thread: usize, slot: usize, call: impl FnOnce(&mut Self, (u64, u64)) -> Result<Option<u64>>) -> Result<()> {
        let pid = self.threads[thread].pid;
        if !self.mmap_lock(core, thread, pid, LockMode::Read) {
            return Ok(());
        }
        let resume = self.threads[thread].syscall_resume;
        if resume == 0 {
            self.syscall_prologue(core);
        }
        let (va, len) = self.threads[thread].slots[slot];
        let from = if resume == 0 { va } else { resume.clamp(va, va + len) };
        match call(self, (from, va + len - from))? {
            Some(next) => self.threads[thread].syscall_resume = next,
            None => {
                self.threads[thread].syscall_resume = 0;
                self.advance(thread);
            }
        }
        self.mmap_unlock_after_syscall(core, thread, pid);
        Ok(())
    }

    /// The writer write-locks the VMAs of `[start, end)` (vma_start_write) until it
    /// releases or downgrades `mmap_lock`.
    fn lock_vmas(&mut self, pid: u32, start: u64, end: u64) {
        if self.locks.enabled() {
            self.spaces[pid as usize].mmap_lock.vma_locked.push((start, end));
        }
    }

    fn syscall_prologue(&mut self, core: usize) {
        self.stats[core].syscalls += 1;
        self.charge(core, self.settings.costs().syscall + self.settings.costs().vma_op);
    }

    /// Run the `Access` op at the thread's pc until it is done or `until`.
    pub(super) fn exec_access(&mut self, core: usize, thread: usize, op: &Op, until: u64) -> Result<()> {
        let Op::Access { slot, pattern, mode, count, offset, len, stride } = *op else { unreachable!() };
        let (base, region_len) = self.threads[thread].slots[slot];
        let start = base + offset.min(region_len);
        let window = if len == 0 { region_len.saturating_sub(offset) } else { len.min(region_len.saturating_sub(offset)) };
        if self.threads[thread].access_left == 0 {
            // `Pages`: one access per page the window's bytes span.
            let count = if pattern == Pattern::Pages { (start + window.max(1)).div_ceil(4096) - start / 4096 } else { count };
            if count == 0 {
                self.advance(thread);
                return Ok(());
            }
            self.threads[thread].access_left = count;
            self.threads[thread].access_cursor = 0;
        }
        let words = (window / 8).max(1);
        let pid = self.threads[thread].pid;
        let stride = stride.max(8);
        if let Pattern::Zipf { theta } = pattern {
            let pages = window.div_ceil(4096).max(1);
            let key = (pages, theta.to_bits());
            if self.threads[thread].zipf.as_ref().map(|z| (z.0, z.1)) != Some(key) {
                self.threads[thread].zipf = Some((pages, theta.to_bits(), crate::workload::program::zipf_cdf(pages, theta)));
            }
        }
        // One access, one instruction; a program that fetches its instructions counts them
        // by its fetches, its data accesses being their operands.
        let fetch_op = mode == AccessMode::Fetch;
        self.threads[thread].fetches |= fetch_op;
        let counts_instructions = fetch_op || !self.threads[thread].fetches;
        let cpi = self.m.cpi_fixed;
        while self.threads[thread].access_left > 0 {
            if self.clock(core) >= until || self.cores[core].current != Some(thread) || self.cores[core].waiting > 0 {
                return Ok(());
            }
            let t = &mut self.threads[thread];
            let off = match pattern {
                Pattern::Sequential | Pattern::Strided => {
                    let o = t.access_cursor % (words * 8);
                    t.access_cursor += stride;
                    o
                }
                Pattern::Random => t.rng.below(words) * 8,
                Pattern::Pages => {
                    // The window's first byte, then the start of each page after it.
                    let o = if t.access_cursor == 0 { 0 } else { (start / 4096 + t.access_cursor) * 4096 - start };
                    t.access_cursor += 1;
                    o
                }
                Pattern::Zipf { .. } => {
                    let cdf = &t.zipf.as_ref().expect("built above").2;
                    let u = (t.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                    let page = cdf.partition_point(|&c| c < u).min(cdf.len() - 1) as u64;
                    (page * 4096 + t.rng.below(512) * 8).min(window.saturating_sub(8))
                }
            };
            let kind = match mode {
                AccessMode::Read => AccessKind::Load,
                AccessMode::Write => AccessKind::Store,
                AccessMode::Mixed(f) => {
                    if ((t.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < f {
                        AccessKind::Store
                    } else {
                        AccessKind::Load
                    }
                }
                AccessMode::Fetch => AccessKind::Fetch,
            };
            t.access_left -= 1;
            t.accesses += 1;
            if counts_instructions {
                self.m.cores[core].stats.instructions += 1;
                self.m.cores[core].tlbs.retire(1);
            }
            self.m.cores[core].clock += cpi;
            let _ = pid;
            crate::access::access(self, core, start + off, kind)?;
        }
        self.advance(thread);
        Ok(())
    }
}
