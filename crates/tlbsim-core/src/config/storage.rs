//! Storage devices behind the page cache (`machine.storage`), for FPR §V-A2's comparison
//! of nullblk, a RAM disk, Optane persistent memory, an Optane SSD and a NAND SSD. The FPR
//! paper states no latencies; the numbers are the devices' typical 4 KiB figures (sources
//! per line) plus the kernel's block-layer path, all assumed.
//!
//! What a device changes: the cycles one page takes to read (a page-cache miss) or write
//! back, and whether the reading thread sleeps meanwhile. Devices that complete in the
//! submitting context (nullblk with inline completion, the RAM disk's and pmem's memcpy)
//! keep the core busy in the kernel; an SSD completes by interrupt, and the thread sleeps
//! in io_schedule: its core goes idle, and an idle core is lazy for TLB shootdowns (it is
//! skipped and flushes when it switches back), which is how FPR §II's "lazy shootdowns" of
//! I/O-bound threads show up in the model.

use crate::error::{Error, Result};

/// What reclaim's write-back of one page costs the reclaiming CPU on a device that
/// completes by interrupt: the block layer's submission (~2 µs, the same assumed path as
/// the Optane SSD's line below). pageout() does not wait for the write: the page stays
/// under writeback and is freed by a later pass, so the device's latency is not on the
/// reclaimer's path (a synchronous device's write is: its CPU does the copy).
pub const ASYNC_WRITE_SUBMIT_NS: f64 = 2_000.0;

/// Names `machine.storage` accepts.
pub const NAMES: &[&str] = &["none", "nullblk", "ramdisk", "pmem", "optane-ssd", "ssd"];

/// One device's page read and write, in nanoseconds, and whether a read sleeps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Device {
    pub read_ns: f64,
    pub write_ns: f64,
    pub sleeps: bool,
}

/// The device `name` names (`None` for `none`: `costs.read_page` / `write_page`, stalling).
pub fn device(name: &str) -> Result<Option<Device>> {
    Ok(Some(match name {
        "none" => return Ok(None),
        // null_blk, irqmode=0 (inline completion): no media, the block layer's submit and
        // complete path only, ~1 µs (assumed).
        "nullblk" => Device { read_ns: 1_000.0, write_ns: 1_000.0, sleeps: false },
        // brd: a 4 KiB memcpy (~0.4 µs at ~10 GB/s) plus the block and ext4 paths (assumed
        // ~1 µs in all).
        "ramdisk" => Device { read_ns: 1_500.0, write_ns: 1_500.0, sleeps: false },
        // Optane DC persistent memory through the page cache: ~300 ns read latency and
        // ~6.6 GB/s per DIMM (Izraelevitz et al. 2019) → ~1 µs per 4 KiB, plus the file
        // system's path; writes ~2.3 GB/s → ~2 µs.
        "pmem" => Device { read_ns: 2_000.0, write_ns: 3_000.0, sleeps: false },
        // Intel Optane SSD DC P4800X: 10 µs read and write latency (Intel's product brief),
        // plus ~2 µs of block layer and interrupt.
        "optane-ssd" => Device { read_ns: 12_000.0, write_ns: 12_000.0, sleeps: true },
        // A data-centre NAND SSD (NVMe or SAS, such as FPR's Toshiba PM5): ~90 µs 4 KiB
        // random read, ~30 µs write into its cache (typical datasheet figures).
        "ssd" => Device { read_ns: 90_000.0, write_ns: 30_000.0, sleeps: true },
        other => {
            return Err(Error::config(
                "machine.storage",
                format!("{other:?} is not a storage device: use one of {}", NAMES.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")),
            ))
        }
    }))
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_name_resolves_and_a_bad_one_is_named() {
        for n in super::NAMES {
            super::device(n).unwrap();
        }
        let err = super::device("floppy").unwrap_err().to_string();
        assert!(err.contains("machine.storage") && err.contains("optane-ssd"), "{err}");
    }
}
