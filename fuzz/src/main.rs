//! The AFL++ harness: `tlbsim-fuzz TARGET` under `cargo afl fuzz` runs one target of
//! `targets.rs` on each input AFL++ gives it (persistent mode); `tlbsim-fuzz TARGET FILE...`
//! runs the target once on each file (to replay a crash outside AFL++).
//!
//! Heap bound: the global allocator counts live heap bytes and aborts the process (a crash
//! for AFL++) when one allocation would take them over `HEAP_LIMIT`. Memory that C code
//! allocates itself (the xz and zstd decoders) is outside that count; AFL++'s `-m` bounds
//! the whole address space (`make fuzz`).

mod targets;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Live Rust heap allowed at once: inputs are at most 1 MiB (AFL++'s default), and no
/// parser should need more than a few hundred times its input.
const HEAP_LIMIT: usize = 512 << 20;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

fn over() -> ! {
    let _ = std::io::stderr().write_all(b"tlbsim-fuzz: heap over HEAP_LIMIT (512 MiB): aborting\n");
    std::process::abort()
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size() > HEAP_LIMIT {
            over();
        }
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size() > HEAP_LIMIT {
            over();
        }
        System.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            let grow = new_size - layout.size();
            if LIVE.fetch_add(grow, Ordering::Relaxed) + grow > HEAP_LIMIT {
                over();
            }
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(target) = args.first().cloned() else {
        eprintln!("usage: tlbsim-fuzz TARGET [FILE...]; targets: {}", targets::TARGETS.join(", "));
        std::process::exit(2);
    };
    if !targets::TARGETS.contains(&target.as_str()) {
        eprintln!("tlbsim-fuzz: unknown target {target:?}; targets: {}", targets::TARGETS.join(", "));
        std::process::exit(2);
    }
    if args.len() > 1 {
        for file in &args[1..] {
            let data = std::fs::read(file).unwrap_or_else(|e| panic!("{file}: {e}"));
            targets::run(&target, &data);
            println!("{file}: ok");
        }
        return;
    }
    afl::fuzz!(|data: &[u8]| {
        targets::run(&target, data);
    });
}
