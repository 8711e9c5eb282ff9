//! Preset `fpr-amd-2s`: FPR Table I's dual-socket Zen 3 server (2 × 24 cores, PCIDs on).
//!
//! FPR Table I, "AMD": a dual-socket Zen 3 server (its reference [11]) with 256 GB and
//! a Toshiba PM5 SAS SSD; "the AMD server only has 48 cores" (§V-B), 96 threads with
//! SMT: 2 sockets × 24 cores (SMT not modelled). TLB: Zen 3's 64-entry fully
//! associative L1 DTLB and 2,048-entry L2 DTLB (AMD's Zen 3 optimization guide; the
//! L2's associativity is not published, 16 ways assumed); PCIDs on (Linux 5.15). The
//! CPU model is not stated: 2.65 GHz (a 24-core EPYC 7413's base clock) assumed.

use serde_json::{json, Value};

pub struct FprAmd2s;

impl crate::registry::Plugin for FprAmd2s {
    type Params = crate::registry::NoParams;
}

impl super::Preset for FprAmd2s {
    fn machine() -> Value {
        json!({
            "sockets": 2, "cores_per_socket": 24, "frequency_ghz": 2.65,
            "tlb": {
                "tagging": "pcid",
                "l1d": {"entries": 64, "ways": 64, "replacement": "lru", "latency": 0},
                "l2": {"entries": 2048, "ways": 16, "replacement": "lru", "latency": 7}
            }
        })
    }
}
