//! `workload.kind = "apache"`: ABIS §5.2 (and FPR §V-A3), Apache serving each request
//! by mapping the requested file, sending it and unmapping it. The default model has
//! worker threads over `processes` processes and no load generator (ABIS isolates it on
//! other cores); `test = "mpm_event"` models Apache 2.4's event MPM (listener, worker
//! queue, idle workers) served to wrk's closed loop. Simplified (mpm_event): a connection
//! stays with one process, only counts of connections, idle workers and responses are
//! kept, all children are started, and write completion never happens
//! ([`apache_mpm_event`]).

use crate::config::Config;
use crate::error::{Error, Result};
use crate::workload::builder::{check_range, file_map, forever, threads_or_cores, times, Builder, PAGE};
use crate::workload::program::{AccessMode, Op, Pattern, Workload};

crate::params! {
    /// `workload.kind = "apache"`.
    pub struct ApacheParams {
        /// The model: empty (the default: workers serving requests back to back) or
        /// `mpm_event` (the event MPM's listener, worker queue and a load generator on cores
        /// of its own).
        pub test: String = String::new(),
        /// Worker threads; 0 = one per core. `mpm_event`: worker threads per child process
        /// (ThreadsPerChild), 0 = 25.
        pub threads: u32 = 0,
        /// Server processes the workers are spread over; 0 = 2 (1 with one worker).
        /// `mpm_event`: the child processes, 0 = 3 (StartServers' default).
        pub processes: u32 = 0,
        /// `mpm_event`: the cores the load generator (wrk) is isolated on, the machine's last
        /// ones; 0 = 6, one per wrk thread.
        pub client_cores: u32 = 0,
        /// Requests each worker serves (`mpm_event`: each wrk thread makes).
        pub ops: u64 = 1_000,
        /// Pages of the file every request maps (3: an 11 KB default page).
        pub file_pages: u64 = 3,
        /// Cycles of a request's processing besides the file (parsing, logging, the
        /// socket): Apache's worker threads' user-space instructions per request, recorded
        /// (apache2 -X under ab -k: 37,707; docs/GUIDE.md "Generators beside the programs
        /// they stand for").
        pub compute_cycles: u64 = REQUEST_CYCLES,
    }
}

/// A request's work besides mapping and sending the file, in cycles (at `machine.base_cpi`
/// = 1, one per instruction): Apache 2.4's worker threads' user-space instructions per
/// request, measured on its recordings (docs/GUIDE.md "Generators beside the programs they
/// stand for"). `python record/recordings.py --only apache2-X-k` records Debian's
/// apache2 2.4.71 (event MPM, `-X`: one process of 4 workers) serving GETs of a 4 KiB static
/// file to `ab -k -c 4` (keep-alive connections, as wrk's in ABIS §5.2), once with 2,000
/// requests and once with `--load-scale 3`; `python record/generators.py --long DIR` counts
/// the instructions of the threads that send the responses (writev): 37,707 per request by
/// difference of the two (37,732 and 37,751 per request in two recordings of about 2,000;
/// 39,666 without keep-alive, where a request also opens and closes its connection). It
/// was 20,000 **[inferred]** until then. A lower bound of what it stands for: the recording
/// holds no kernel work, and a request's other system calls (per request: read 1.15, writev
/// 1, futex 0.6, epoll_wait 0.1 besides its mmap and munmap) are not modelled apart from it.
const REQUEST_CYCLES: u64 = 37_700;

/// The file every request maps (`file_pages`, default 3: the 11 KB default page) and the
/// rest of a request's work (`compute_cycles`, default `REQUEST_CYCLES`): (file, bytes,
/// cycles).
fn apache_file(w: &ApacheParams, b: &mut Builder) -> Result<(u32, u64, u64)> {
    check_range("workload.file_pages", w.file_pages, 1, 1 << 20)?;
    let file = b.file("index.html", w.file_pages);
    Ok((file, w.file_pages * PAGE, w.compute_cycles))
}

/// Sending the mapped file: a read of it, one cache line at a time.
fn send_file(slot: usize, bytes: u64) -> Op {
    Op::Access { slot, pattern: Pattern::Sequential, mode: AccessMode::Read, count: bytes / 64, offset: 0, len: 0, stride: 64 }
}

/// ABIS §5.2 (and FPR §V-A3): Apache's mpm_event runs several processes of several
/// threads, and serves each request by mapping the requested file, sending its content
/// and unmapping it. `threads` workers (default one per core) spread over `processes`
/// processes (default 2) in contiguous blocks, unpinned (the scheduler places them), class
/// "worker". One operation = one request: mmap the `file_pages`-page file (default 3: the
/// default page of 10,918 bytes **[inferred]**) shared read-only, read it sequentially one
/// cache line at a time (sending it), munmap, then `compute_cycles` of the rest of the
/// request's work (default `REQUEST_CYCLES`, 37,700, as recorded: parsing, logging, the
/// socket). Each worker serves `ops` requests (default 1,000) and exits. The load generator (wrk) is
/// not modelled: ABIS isolates it on other cores. `test = "mpm_event"` is the event MPM
/// with its load generator ([`apache_mpm_event`]).
pub(super) fn apache(cfg: &Config, w: &ApacheParams) -> Result<Workload> {
    match w.test.as_str() {
        "" => {}
        "mpm_event" => return apache_mpm_event(cfg, w),
        t => return Err(Error::config("workload.test", format!("{t:?} is not an apache test: use \"mpm_event\", or leave it empty for the default model"))),
    }
    let threads = threads_or_cores(cfg, w.threads);
    let processes = if w.processes == 0 { 2.min(threads) } else { w.processes };
    if processes > threads {
        return Err(Error::config(
            "workload.processes",
            format!("{processes} processes for {threads} worker threads (workload.threads): each process needs a worker"),
        ));
    }
    let ops = w.ops;
    let mut b = Builder::default();
    let root = b.group("root", 0);
    let (file, bytes, cycles) = apache_file(w, &mut b)?;
    let slot = 0;
    let request =
        vec![Op::Mmap { slot, spec: file_map(file, 0, bytes, true, false) }, send_file(slot, bytes), Op::Munmap { slot }, Op::Compute { cycles }, Op::CountOp];
    let worker = b.program([times(ops, request), vec![Op::Exit]].concat());
    for p in 0..processes {
        let process = b.process(&format!("httpd{p}"), root, vec![]);
        let (first, end) = (p * threads / processes, (p + 1) * threads / processes);
        for t in first..end {
            b.thread(process, &format!("worker{t}"), "worker", None, worker, false);
        }
    }
    Ok(b.finish())
}

/// wrk's threads in ABIS §5.2 ("400 connections and 6 threads").
const WRK_THREADS: u32 = 6;
/// wrk's connections in ABIS §5.2.
const WRK_CONNECTIONS: u32 = 400;
/// wrk's work per response, in cycles **[inferred]**: its event loop's read() of the
/// response (the 11 KB copied out of the socket), http_parser over the headers, the latency
/// record, and the write() of the next request, whose loopback delivery runs on the sender's
/// core. Chosen as half of a worker's former 20,000 **[inferred]** cycles (wrk is a lean C
/// event loop, Apache runs its request hooks and filters too); Apache's recorded 37,700
/// (`REQUEST_CYCLES`) did not move it: wrk was not recorded.
const WRK_CYCLES: u64 = 10_000;
/// The listener's work per connection handed to a worker, in cycles **[inferred]**: its
/// share of an epoll_wait returning, get_worker's idle-worker accounting, and
/// ap_queue_push with its condition-variable signal (a futex wake, one system call).
const LISTENER_CYCLES: u64 = 2_000;

/// ABIS §5.2 as Apache 2.4 runs it with its default MPM, mpm_event (`test = "mpm_event"`),
/// served to wrk. Apache 2.4's server/mpm/event/event.c and fdqueue.c, and its defaults
/// (event/mpm_default.h):
/// - `processes` child processes (0 = 3: DEFAULT_START_DAEMON, StartServers), each with
///   `threads` worker threads (0 = 25: DEFAULT_THREADS_PER_CHILD, ThreadsPerChild), class
///   "worker", and one listener thread, class "listener"; daemons (they serve until the
///   run ends). ABIS §5.2 isolates the server and the generator "each one on a set of
///   cores": the server's threads start round-robin on the server's cores, the first
///   `cores - client_cores`, and their first operation is a sched_setaffinity to that set
///   (`Op::SetAffinity`, as `taskset -c` gives every thread of the server: they inherit
///   it), so that under `os.balance = "linux"` the scheduler moves them within it (the
///   wake-up placement and newidle pulls of os/sched.rs); under `none` a thread stays
///   where it starts.
/// - The listener sleeps in epoll_wait until a connection of its process is readable (a
///   request arrived), waits until a worker is idle (get_worker: the listener blocks in
///   ap_queue_info_wait_for_idler for a client connection), computes `LISTENER_CYCLES`
///   and pushes the connection onto the process's worker queue (push2worker, ap_queue_push
///   signalling the queue's condition variable: one sleeping worker wakes).
/// - A worker marks itself idle (ap_queue_info_set_idle), pops a connection from the queue
///   (ap_queue_pop, asleep while it is empty), and serves the request: `compute_cycles`
///   (default `REQUEST_CYCLES`, as the default model: reading and parsing the request, the
///   hooks, opening the file), then the default handler's file bucket is mmapped
///   (EnableMMAP defaults on, sendfile off; apr-util's file bucket maps a file of at least
///   APR_MMAP_THRESHOLD bytes, 1 on Linux, up to APR_MMAP_LIMIT, 4 MiB): the `file_pages`
///   file (0 = 3, the 11 KB default page) is mapped shared read-only, read a line at a time
///   (writev into the socket), the response reaches the client, and the bucket's
///   destruction unmaps the file (apr_mmap_delete). The connection, kept alive, goes back
///   to the listener's pollset; the worker is idle again. So whichever worker is idle
///   serves a connection's next request: one connection's requests are served by
///   different threads on different cores.
/// - wrk: one process of 6 threads (`WRK_THREADS`, class "client", not daemons), each
///   starting on one of the `client_cores` cores (0 = 6, the machine's last ones: the paper
///   isolates the generator on its own cores; the number is not given **[inferred]**: one
///   core per wrk thread) and set to that set of cores as the server is to its own, with 400 keep-alive connections (`WRK_CONNECTIONS`) split evenly
///   among them. Closed loop: each connection sends its first request, then its next one
///   when its response has arrived (`WRK_CYCLES` of wrk's work per response). Each wrk
///   thread makes `ops` requests (0 = 1,000) and exits when all its responses are in; one
///   operation of a client = one response received, of a worker = one request served.
///
/// Simplified: a connection is accepted by one process for its life, the connections of
/// wrk thread t by process t mod `processes` **[inferred]**: the listeners share the
/// listening socket, so the split among processes is even on average. Only counts are
/// kept: a process's readable connections, idle workers, queued connections and the
/// responses its wrk threads have not read yet are counting semaphores (`Op::Take` /
/// `Op::Post`), so a response goes to whichever of the process's wrk threads is waiting
/// for one (each makes its own number of requests). The children are all started (no
/// spare-server maintenance), and a connection is never in write completion (the 11 KB
/// response fits the socket's send buffer).
fn apache_mpm_event(cfg: &Config, w: &ApacheParams) -> Result<Workload> {
    let cores = cfg.cores();
    let client_cores = if w.client_cores == 0 { WRK_THREADS } else { w.client_cores };
    if client_cores >= cores {
        return Err(Error::config(
            "workload.client_cores",
            format!("{client_cores} cores for the load generator leaves none of the machine's {cores} to the server: the generator runs on cores of its own"),
        ));
    }
    let server_cores = cores - client_cores;
    let processes = if w.processes == 0 { 3 } else { w.processes };
    if processes > WRK_THREADS {
        return Err(Error::config(
            "workload.processes",
            format!("{processes} server processes for wrk's {WRK_THREADS} threads: each process serves the connections of one or more wrk threads"),
        ));
    }
    let per_child = if w.threads == 0 { 25 } else { w.threads };
    check_range("workload.threads", per_child as u64, 1, 1024)?;
    let requests = w.ops;
    let mut b = Builder::default();
    let root = b.group("root", 0);
    let (file, bytes, cycles) = apache_file(w, &mut b)?;
    let slot = 0;
    // Per process p, four tokens: readable connections (the listener's epoll), idle
    // workers, the worker queue, responses not yet read by p's wrk threads.
    let (readable, idle, queue, responses) = (|p: u32| 4 * p, |p: u32| 4 * p + 1, |p: u32| 4 * p + 2, |p: u32| 4 * p + 3);
    b.w.tokens = 4 * processes;
    // The two CPU sets (ABIS §5.2: "isolate each one on a set of cores"): the server's, then
    // the generator's.
    let set_of = |cores: std::ops::Range<u32>| {
        let mut words = vec![0u64; (cfg.cores() as usize).div_ceil(64)];
        for c in cores {
            words[c as usize / 64] |= 1 << (c % 64);
        }
        words
    };
    b.w.cpu_sets = vec![set_of(0..server_cores), set_of(server_cores..cores)];
    let (server_set, client_set) = (0, 1);
    let on_set = |set: u32, mut ops: Vec<Op>| {
        ops.insert(0, Op::SetAffinity { set });
        ops
    };
    let mut next_core = 0u32;
    for p in 0..processes {
        let process = b.process(&format!("httpd{p}"), root, vec![]);
        let listener = b.program(on_set(
            server_set,
            forever(vec![Op::Take { token: readable(p) }, Op::Take { token: idle(p) }, Op::Compute { cycles: LISTENER_CYCLES }, Op::Post { token: queue(p) }]),
        ));
        let worker = b.program(on_set(
            server_set,
            forever(vec![
                Op::Post { token: idle(p) },
                Op::Take { token: queue(p) },
                Op::Compute { cycles },
                Op::Mmap { slot, spec: file_map(file, 0, bytes, true, false) },
                send_file(slot, bytes),
                Op::Post { token: responses(p) },
                Op::Munmap { slot },
                Op::CountOp,
            ]),
        ));
        b.thread(process, &format!("listener{p}"), "listener", Some(next_core % server_cores), listener, true);
        next_core += 1;
        for t in 0..per_child {
            b.thread(process, &format!("worker{p}.{t}"), "worker", Some(next_core % server_cores), worker, true);
            next_core += 1;
        }
    }
    let wrk = b.process("wrk", root, vec![]);
    for t in 0..WRK_THREADS {
        let p = t % processes;
        // wrk splits its connections evenly among its threads, the first ones one more.
        let connections = WRK_CONNECTIONS / WRK_THREADS + u32::from(t < WRK_CONNECTIONS % WRK_THREADS);
        let first = (connections as u64).min(requests);
        let response = vec![Op::Take { token: responses(p) }, Op::Compute { cycles: WRK_CYCLES }, Op::CountOp];
        let mut prog = times(first, vec![Op::Post { token: readable(p) }]);
        prog.extend(times(requests - first, [response.clone(), vec![Op::Post { token: readable(p) }]].concat()));
        prog.extend(times(first, response));
        prog.push(Op::Exit);
        let program = b.program(on_set(client_set, prog));
        b.thread(wrk, &format!("wrk{t}"), "client", Some(server_cores + t % client_cores), program, false);
    }
    Ok(b.finish())
}
