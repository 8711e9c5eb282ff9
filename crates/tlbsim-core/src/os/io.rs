//! Split-driver I/O (`Op::Io`, `Op::Serve`): a front-end's request goes through a back-end
//! thread, as a Xen guest's disk and network I/O goes through dom0 (Barham et al., "Xen
//! and the Art of Virtualization", SOSP 2003, §3.3 and §4.1's I/O rings; Xen 3.x's
//! blkfront/blkback and netfront/netback).
//!
//! Modelled: the requester queues a request on the back-end's ring and sleeps; the
//! notification (an event channel) wakes the back-end if it sleeps in `Serve`, which under
//! a hypervisor wakes its VCPU (credit's BOOST) and, on a CPU the guest ran on, is an
//! inter-VM switch. The back-end's `Serve` takes the request and hands it to the device,
//! which completes it `cycles` later; the completion interrupt queues it back on the
//! back-end, whose next `Serve` takes it and notifies the requester, waking it. What the
//! back-end does per request (its processing, the grant copies) is the operations after
//! `Serve` in its program.
//!
//! Also the storage reads a demand fault sleeps for (`machine.storage`: a device whose
//! reads sleep, the SSDs): counted here, the thread blocked by os/access.rs; and a
//! recorded program's read/write/pread/pwrite of a file (`Op::FileIo`), through the page
//! cache as filemap_read and generic_perform_write go (mm/filemap.c): each page of the
//! range is looked up in the page cache, a miss allocates a page and reads it from the
//! device (a write that overwrites a whole page does not read it), and the bytes are
//! copied to or from the user's buffer (`costs.copy_page` per 4 KiB, pro rata); where the
//! device's reads sleep the thread blocks for them, its core free to run others or idle.
//! Simplified there: no readahead (each page the call covers is read, no more); written
//! pages are not marked dirty nor written back (writeback is asynchronous in Linux, and
//! balance_dirty_pages' throttling is not modelled); the copy's accesses to the user's
//! buffer do not go through the TLB (the recording has only the program's own accesses).
//!
//! Simplified: one queue per back-end thread, served in arrival order; the device has no
//! queueing of its own (requests overlap freely); notifications cost nothing beyond the
//! wake-ups they cause.

use super::{Os, ThreadState};
use crate::coherence::Coherence;

/// The I/O state of the OS: split-driver counters, and the device reads a demand fault
/// waits for asleep.
pub(crate) struct Io {
    /// Split-driver requests sent and completions delivered.
    requests: u64,
    completions: u64,
    /// The storage device's reads sleep (`machine.storage`): a demand fault's page-cache
    /// misses block the faulting thread instead of stalling its core.
    reads_sleep: bool,
    /// A demand fault of a thread is being handled (not MAP_POPULATE or a system call).
    in_demand_fault: bool,
    /// Cycles of device reads the demand fault being handled waits for, asleep.
    wait: u64,
}

impl Io {
    pub(crate) fn new(reads_sleep: bool) -> Io {
        Io { requests: 0, completions: 0, reads_sleep, in_demand_fault: false, wait: 0 }
    }

    /// Split-driver requests sent and completions delivered.
    pub(crate) fn requests(&self) -> u64 {
        self.requests
    }
    pub(crate) fn completions(&self) -> u64 {
        self.completions
    }

    /// A demand fault starts (`true`) or the fault being handled ends (`false`); also a
    /// file read or write of a thread (`Op::FileIo`), whose device reads sleep likewise.
    pub(crate) fn set_in_demand_fault(&mut self, demand: bool) {
        self.in_demand_fault = demand;
    }

    /// One page read for the fault being handled: whether the thread sleeps for it (a
    /// demand fault on a device whose reads sleep), its `cycles` then added to the wait.
    pub(crate) fn sleep_for_read(&mut self, cycles: u64) -> bool {
        if self.reads_sleep && self.in_demand_fault {
            self.wait += cycles;
            return true;
        }
        false
    }

    /// The cycles the fault just handled waits for asleep (0: none), reset.
    pub(crate) fn take_wait(&mut self) -> u64 {
        std::mem::take(&mut self.wait)
    }
}

/// One entry of a back-end's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IoItem {
    /// A new request of thread `client` that takes the device `cycles`.
    Request { client: usize, cycles: u64 },
    /// The device completed `client`'s request: answer it.
    Done { client: usize },
}

impl<P: Coherence> Os<P> {
    /// `thread` on `core` sends a request to `server` and sleeps until it is answered.
    pub(super) fn io_request(&mut self, core: usize, thread: usize, server: usize, cycles: u64) {
        self.advance(thread);
        let now = self.clock(core);
        self.io.requests += 1;
        self.park(core, thread);
        self.threads[server].io_queue.push_back(IoItem::Request { client: thread, cycles });
        self.notify_server(server, now);
    }

    /// `thread` on `core` takes the next item of its queue, or sleeps until there is one
    /// (its `Serve` then runs again).
    pub(super) fn serve(&mut self, core: usize, thread: usize) {
        let now = self.clock(core);
        match self.threads[thread].io_queue.pop_front() {
            None => {
                self.threads[thread].serving = true;
                self.park(core, thread);
            }
            Some(IoItem::Request { client, cycles }) => {
                self.advance(thread);
                self.schedule_event(now + cycles, super::sched::Event::IoDone { server: thread, client });
            }
            Some(IoItem::Done { client }) => {
                self.advance(thread);
                self.io.completions += 1;
                if self.threads[client].state == ThreadState::Blocked {
                    self.schedule_wake(client, now);
                }
            }
        }
    }

    /// `Op::FileIo`: `thread` on `core` reads (or writes) `len` bytes of `file` from byte
    /// `offset` through the page cache (read(2)/pread(2)/write(2)/pwrite(2) on a regular
    /// file: filemap_read, generic_perform_write).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn file_io(&mut self, core: usize, thread: usize, file: u32, offset: u64, len: u64, write: bool) -> crate::error::Result<()> {
        const PAGE: u64 = 4096;
        self.advance(thread);
        self.stats[core].syscalls += 1;
        self.charge(core, self.settings.costs().syscall);
        if len == 0 {
            return Ok(());
        }
        let pid = self.threads[thread].pid;
        let end = offset + len;
        self.io.set_in_demand_fault(true);
        let mut result = Ok(());
        for index in offset / PAGE..end.div_ceil(PAGE) {
            let whole = write && index * PAGE >= offset && (index + 1) * PAGE <= end;
            if let Err(e) = self.cache_page_filled(core, pid, file, index, !whole) {
                result = Err(e);
                break;
            }
        }
        self.io.set_in_demand_fault(false);
        result?;
        // copy_page_to_iter / copy_page_from_iter: the bytes, at copy_page's rate.
        self.charge(core, (self.settings.costs().copy_page * len).div_ceil(PAGE));
        let wait = self.io.take_wait();
        if wait > 0 {
            // The device's reads sleep: the thread blocks until they complete.
            self.stats[core].io_sleeps += 1;
            let now = self.clock(core);
            self.block(core, thread, now + wait);
        }
        Ok(())
    }

    /// The device completed `client`'s request at `at`: back to `server`'s queue.
    pub(super) fn io_done(&mut self, server: usize, client: usize, at: u64) {
        self.threads[server].io_queue.push_back(IoItem::Done { client });
        self.notify_server(server, at);
    }

    /// The event channel: wake `server` at `at` if it sleeps in `Serve`.
    fn notify_server(&mut self, server: usize, at: u64) {
        let t = &mut self.threads[server];
        if t.serving && t.state == ThreadState::Blocked {
            t.serving = false;
            self.schedule_wake(server, at);
        }
    }
}
