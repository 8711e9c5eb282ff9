"""`make recordings`: a library of real programs recorded with `tlbsim record` (issue 47 item 5).

Installs what it needs from Debian's packages (as root, `apt-get install`; run `apt-get
update` first when a package is missing), then for each program:
- runs it natively, with its client (a server's load generator) also native, counting the
  TLB-shootdown IPIs the kernel receives meanwhile (the `TLB:` row of /proc/interrupts,
  summed over CPUs, as `tlbsim record --compare` does), minus the IPIs received over an
  idle interval of the same length just after (other activity on the machine adds to the
  row), the median of `--repeats` runs;
- records it under `tlbsim record` (QEMU user mode with the TCG plugin): a server runs
  under QEMU, its client natively against it, and the server is stopped by its own
  shutdown signal once the client is done, so the recording ends with its exit;
- replays the recording as `tlbsim record --compare` does (one socket of `--cores` cores,
  `os.coherence = "linux"`) and counts the replay's shootdown IPIs received;
- divides both by the program's operations (bzip2 or xz blocks from the input's size,
  requests or transactions from the client's output).

Writes DIR/NAME.tlbsim (not committed: tens of MB each), DIR/results.json and the Markdown
table DIR/table.md (the one in docs/GUIDE.md, "A library of real programs"). A program that
cannot be installed, run, recorded or replayed gets its error in the table and the others go on.

Usage: python record/recordings.py [--out DIR] [--only NAME ...] [--cores N] [--repeats N] [--load-scale N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import tlbsim
from tlbsim import record as rec

# Threads (-p, -T) of the parallel compressors and workers of the servers: this machine's
# two CPUs (the machine the table was made on; `--threads` changes it).
DEFAULT_THREADS = 2
# The fixed input of pbzip2 and xz: 500,000 bytes of text made of a fixed vocabulary
# (seeded, so every run compresses the same bytes; compressible as text is). Its size is
# what QEMU records in a few seconds (the plugin slows a program down about 100 times).
INPUT_BYTES = 500_000
INPUT_SEED = 47
# pbzip2 -b1: 100,000-byte bzip2 blocks (pbzip2(1): "-b#: block size in 100k steps"), so
# the input is 5 blocks, compressed by -p threads.
PBZIP2_BLOCK = 100_000
# xz --block-size: 125,000 bytes, so the input is 4 blocks (xz(1): with -T, the input is
# split into blocks compressed in parallel), preset -1 (the fastest).
XZ_BLOCK = 125_000
# Client loads (bounded in count; loopback only). Each is what the server under QEMU serves
# in a few seconds to a minute.
MEMCACHED_OPS = 20000  # memaslap -x: gets and sets (its default 9:1 mix), 256-byte values
MEMCACHED_CONCURRENCY = 4
APACHE_REQUESTS = 2000  # ab -n: GETs of one 4 KiB static file
APACHE_CONCURRENCY = 4
PGBENCH_CLIENTS = 2  # pgbench -c/-j, TPC-B-like default script, scale 1
PGBENCH_TRANSACTIONS = 50  # per client (-t)
# YCSB-B on LevelDB (record/ycsb_leveldb.cc) and YCSB-C on LMDB (record/ycsb_lmdb.c; its
# 150,000 records make a 364 MiB data file): 150,000 records of 1,000 bytes, about 75
# tables of 2 MiB, more than the 64 its table cache keeps open, so tables are unmapped as
# they are evicted; 100,000 requests over 2 threads (20,000 gave 36 to 945 IPIs in five
# native runs here: too short a run for the two threads to overlap reliably).
YCSB_RECORDS = 150_000
YCSB_OPS = 100_000
# Ports on 127.0.0.1 (assumed free).
MEMCACHED_PORT = 11347
APACHE_PORT = 8047
PG_PORT = 5447
# How long a server under QEMU may take to start accepting (PostgreSQL's startup runs
# initdb's catalog checks at QEMU's speed).
READY_TIMEOUT = 600.0


def tlb_ipis() -> int:
    n = rec.tlb_ipis()
    if n is None:
        raise RuntimeError("this kernel's /proc/interrupts has no TLB: row")
    return n


def apt_install(packages: list[str]) -> None:
    """Install the Debian packages that are missing (`dpkg -s` says which)."""
    missing = [
        p for p in packages if subprocess.run(["dpkg", "-s", p], check=False, capture_output=True).returncode != 0
    ]
    if not missing:
        return
    print(f"installing {' '.join(missing)}", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", *missing], check=True, env=env, stdout=subprocess.DEVNULL)


def make_input(path: Path) -> None:
    r = random.Random(INPUT_SEED)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(r.choice(letters) for _ in range(r.randint(2, 9))) for _ in range(2000)]
    out: list[str] = []
    n = 0
    while n < INPUT_BYTES:
        line = " ".join(r.choice(words) for _ in range(r.randint(4, 14))) + "\n"
        out.append(line)
        n += len(line)
    path.write_text("".join(out)[:INPUT_BYTES])


def wait_tcp(port: int, timeout: float, alive) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if not alive():
            raise RuntimeError("the server exited before it accepted connections")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the server did not accept on port {port} within {timeout:.0f} s")


@dataclass
class Program:
    """One program of the library: its packages, command, and (a server) its client."""

    name: str
    packages: list[str]
    ops_unit: str
    threads: int
    work: Path = field(default_factory=Path)
    user: str | None = None
    server: bool = False
    stop_signal: int = signal.SIGTERM
    # Environment of QEMU while recording (QEMU_SET_ENV: the guest's environment).
    qemu_env: dict[str, str] = field(default_factory=dict)
    # Said after the command in the table (what tells two rows of one command apart).
    note: str = ""

    def prepare(self) -> None:
        pass

    def command(self) -> list[str]:
        raise NotImplementedError

    def describe(self) -> str:
        return " ".join(self.command())

    def ops(self) -> int:
        """Operations of a batch program (known from its input)."""
        raise NotImplementedError

    # Servers.
    def wait_ready(self, alive, timeout: float) -> None:
        raise NotImplementedError

    def client(self) -> list[str]:
        raise NotImplementedError

    def client_ops(self, output: str) -> int:
        raise NotImplementedError

    def run_client(self) -> int:
        cmd = self.client()
        p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=1800, user=self.user)
        if p.returncode != 0:
            raise RuntimeError(f"client {' '.join(cmd)} failed ({p.returncode}): {p.stderr[-500:]}")
        return self.client_ops(p.stdout + p.stderr)


class Pbzip2(Program):
    def command(self) -> list[str]:
        # Writes input.txt.bz2 (file writes, as the recording's): -k keeps the input, -f
        # replaces the output of the run before.
        return ["pbzip2", f"-p{self.threads}", "-b1", "-k", "-f", str(self.work / "input.txt")]

    def ops(self) -> int:
        return math.ceil(INPUT_BYTES / PBZIP2_BLOCK)


class Xz(Program):
    def command(self) -> list[str]:
        return ["xz", f"-T{self.threads}", "-1", f"--block-size={XZ_BLOCK}", "-k", "-f", str(self.work / "input.txt")]

    def ops(self) -> int:
        return math.ceil(INPUT_BYTES / XZ_BLOCK)


class Memcached(Program):
    def command(self) -> list[str]:
        return [
            "memcached",
            "-t",
            str(self.threads),
            "-p",
            str(MEMCACHED_PORT),
            "-l",
            "127.0.0.1",
            "-U",
            "0",
            "-m",
            "64",
            "-u",
            "root",
        ]

    def wait_ready(self, alive, timeout: float) -> None:
        wait_tcp(MEMCACHED_PORT, timeout, alive)

    def client(self) -> list[str]:
        return [
            "memcaslap",
            "-s",
            f"127.0.0.1:{MEMCACHED_PORT}",
            "-T",
            "1",
            "-c",
            str(MEMCACHED_CONCURRENCY),
            "-x",
            str(MEMCACHED_OPS),
            "-X",
            "256",
        ]

    def client_ops(self, output: str) -> int:
        m = re.search(r"Ops: (\d+)", output)
        if not m:
            raise RuntimeError(f"memaslap printed no 'Ops:': {output[-300:]}")
        return int(m.group(1))


class Apache(Program):
    def prepare(self) -> None:
        d = self.work / "apache"
        (d / "htdocs").mkdir(parents=True, exist_ok=True)
        r = random.Random(INPUT_SEED)
        (d / "htdocs" / "page.html").write_text("".join(r.choice("abcdefgh \n") for _ in range(4096)))
        mods = "/usr/lib/apache2/modules"
        (d / "httpd.conf").write_text(
            f"""ServerRoot /etc/apache2
LoadModule mpm_event_module {mods}/mod_mpm_event.so
LoadModule authz_core_module {mods}/mod_authz_core.so
LoadModule mime_module {mods}/mod_mime.so
ServerName localhost
Listen 127.0.0.1:{APACHE_PORT}
User www-data
Group www-data
DefaultRuntimeDir {d}
PidFile {d}/httpd.pid
ErrorLog {d}/error.log
Mutex file:{d} default
DocumentRoot {d}/htdocs
<Directory {d}/htdocs>
    Require all granted
</Directory>
TypesConfig /etc/mime.types
# One child process of {self.threads * 2} worker threads (event MPM; assumed: two per CPU).
StartServers 1
ServerLimit 1
ThreadLimit {self.threads * 2}
ThreadsPerChild {self.threads * 2}
MaxRequestWorkers {self.threads * 2}
MinSpareThreads 1
MaxSpareThreads {self.threads * 2}
"""
        )

    def command(self) -> list[str]:
        return ["/usr/sbin/apache2", "-f", str(self.work / "apache" / "httpd.conf"), "-DFOREGROUND"]

    def wait_ready(self, alive, timeout: float) -> None:
        wait_tcp(APACHE_PORT, timeout, alive)

    def client(self) -> list[str]:
        return [
            "ab",
            "-q",
            "-n",
            str(APACHE_REQUESTS),
            "-c",
            str(APACHE_CONCURRENCY),
            f"http://127.0.0.1:{APACHE_PORT}/page.html",
        ]

    def client_ops(self, output: str) -> int:
        m = re.search(r"Complete requests:\s+(\d+)", output)
        f = re.search(r"Failed requests:\s+(\d+)", output)
        if not m:
            raise RuntimeError(f"ab printed no 'Complete requests': {output[-300:]}")
        return int(m.group(1)) - (int(f.group(1)) if f else 0)


class ApacheOneProcess(Apache):
    """The same server in one process (-X: the child's code and threads in the process
    started, no fork): separates what the replay of a forked child does from the load."""

    def command(self) -> list[str]:
        return [*super().command(), "-X"]


class ApacheKeepAlive(ApacheOneProcess):
    """apache2 -X under `ab -k`: keep-alive connections, as wrk's in ABIS §5.2 (ab opens a
    connection per request without -k; Apache closes a kept-alive one after
    MaxKeepAliveRequests, 100 by default). What record/generators.py holds the apache
    generator against: a request's own work without a connection's set-up and teardown."""

    def client(self) -> list[str]:
        cmd = super().client()
        return [cmd[0], "-k", *cmd[1:]]


PG_BIN = Path("/usr/lib/postgresql/15/bin")
HERE = Path(__file__).resolve().parent


class Postgres(Program):
    def pg(self, tool: str) -> str:
        return str(PG_BIN / tool)

    def prepare(self) -> None:
        # Under QEMU 7.2 its signal handlers need a realigned stack: record/realign_signals.c.
        shim = self.work / "realign_signals.so"
        subprocess.run(
            ["gcc", "-O2", "-shared", "-fPIC", "-o", str(shim), str(HERE / "realign_signals.c"), "-ldl"], check=True
        )
        shim.chmod(0o755)
        self.qemu_env = {"QEMU_SET_ENV": f"LD_PRELOAD={shim}"}
        d = self.work / "pg"
        if (d / "data" / "PG_VERSION").exists():
            return
        d.mkdir(parents=True, exist_ok=True)
        shutil.chown(d, user="postgres")
        subprocess.run(
            [self.pg("initdb"), "-D", str(d / "data"), "-A", "trust", "-U", "postgres"],
            check=True,
            user="postgres",
            stdout=subprocess.DEVNULL,
        )
        # pgbench's tables, made natively once (scale 1: 100,000 accounts).
        server = subprocess.Popen(self.command(), user="postgres", stderr=subprocess.DEVNULL)
        try:
            self.wait_ready(lambda: server.poll() is None, 60)
            subprocess.run(
                [self.pg("pgbench"), "-i", "-s", "1", "-h", str(d), "-p", str(PG_PORT), "postgres"],
                check=True,
                user="postgres",
                capture_output=True,
            )
        finally:
            server.send_signal(signal.SIGINT)
            server.wait()

    def command(self) -> list[str]:
        d = self.work / "pg"
        return [
            self.pg("postgres"),
            "-D",
            str(d / "data"),
            "-p",
            str(PG_PORT),
            "-k",
            str(d),
            "-c",
            "listen_addresses=",  # the Unix socket only
            "-c",
            "log_min_messages=warning",  # no LOG lines on stderr
        ]

    def wait_ready(self, alive, timeout: float) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if not alive():
                raise RuntimeError("postgres exited before it accepted connections")
            p = subprocess.run(
                [self.pg("pg_isready"), "-q", "-h", str(self.work / "pg"), "-p", str(PG_PORT)],
                check=False,
                capture_output=True,
            )
            if p.returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError(f"postgres did not accept within {timeout:.0f} s")

    def client(self) -> list[str]:
        return [
            self.pg("pgbench"),
            "-n",
            "-c",
            str(PGBENCH_CLIENTS),
            "-j",
            str(PGBENCH_CLIENTS),
            "-t",
            str(PGBENCH_TRANSACTIONS),
            "-h",
            str(self.work / "pg"),
            "-p",
            str(PG_PORT),
            "postgres",
        ]

    def client_ops(self, output: str) -> int:
        m = re.search(r"number of transactions actually processed: (\d+)", output)
        if not m:
            raise RuntimeError(f"pgbench printed no transaction count: {output[-300:]}")
        return int(m.group(1))


class YcsbProgram(Program):
    """A YCSB driver of record/ built here against a Debian library: the database loaded
    natively once (`load_args`), then every run, native or recorded, `run_args`."""

    source = ""  # the driver's file in record/
    compile_cmd: tuple[str, ...] = ()  # the compiler and its flags, before -o
    libraries: tuple[str, ...] = ()  # after the source

    def exe(self) -> Path:
        return self.work / Path(self.source).stem

    def db(self) -> Path:
        return self.work / Path(self.source).stem.removeprefix("ycsb_")

    def loaded(self) -> bool:
        raise NotImplementedError

    def load_args(self) -> list[str]:
        raise NotImplementedError

    def run_args(self) -> list[str]:
        raise NotImplementedError

    def prepare(self) -> None:
        subprocess.run([*self.compile_cmd, "-o", str(self.exe()), str(HERE / self.source), *self.libraries], check=True)
        self.db().mkdir(parents=True, exist_ok=True)
        if not self.loaded():
            subprocess.run([str(self.exe()), *self.load_args()], check=True, stdout=subprocess.DEVNULL)

    def command(self) -> list[str]:
        return [
            str(self.exe()),
            *self.run_args(),
            "--records",
            str(YCSB_RECORDS),
            "--ops",
            str(YCSB_OPS),
            "--threads",
            str(self.threads),
        ]

    def ops(self) -> int:
        return YCSB_OPS


class YcsbLevelDb(YcsbProgram):
    """YCSB-B on LevelDB (record/ycsb_leveldb.cc): what the `ycsb` generator's `leveldb`
    test stands for. Every run starts from hard links to the loaded database
    (--reset-from), so that its updates do not carry over."""

    source = "ycsb_leveldb.cc"
    compile_cmd = ("g++", "-O2", "-std=c++17", "-pthread")
    libraries = ("-lleveldb",)

    def loaded(self) -> bool:
        return (self.db() / "pristine" / "CURRENT").exists()

    def load_args(self) -> list[str]:
        return ["--db", str(self.db() / "pristine"), "--load", "--records", str(YCSB_RECORDS)]

    def run_args(self) -> list[str]:
        d = self.db()
        return ["--db", str(d / "db"), "--reset-from", str(d / "pristine"), "--workload", "b"]


class YcsbLmdb(YcsbProgram):
    """YCSB-C on LMDB (record/ycsb_lmdb.c): what the `ycsb` generator's `lmdb` test stands
    for. The runs only read."""

    source = "ycsb_lmdb.c"
    compile_cmd = ("gcc", "-O2", "-pthread")
    libraries = ("-llmdb", "-lm")

    def loaded(self) -> bool:
        return (self.db() / "data.mdb").exists()

    def load_args(self) -> list[str]:
        return ["--db", str(self.db()), "--load", "--records", str(YCSB_RECORDS)]

    def run_args(self) -> list[str]:
        return ["--db", str(self.db())]


def programs(threads: int) -> list[Program]:
    return [
        Pbzip2("pbzip2", ["pbzip2"], "bzip2 block", threads),
        Memcached("memcached", ["memcached", "libmemcached-tools"], "get/set", threads, server=True),
        Postgres(
            "postgresql",
            ["postgresql", "postgresql-contrib"],
            "transaction",
            threads,
            user="postgres",
            server=True,
            stop_signal=signal.SIGINT,  # fast shutdown (pg_ctl -m fast)
        ),
        Apache("apache2", ["apache2", "apache2-utils"], "request", threads, server=True),
        ApacheOneProcess("apache2-X", ["apache2", "apache2-utils"], "request", threads, server=True),
        ApacheKeepAlive(
            "apache2-X-k", ["apache2", "apache2-utils"], "request", threads, server=True, note="(under ab -k)"
        ),
        Xz("xz", ["xz-utils"], "xz block", threads),
        YcsbLevelDb("ycsb-leveldb", ["libleveldb-dev", "g++"], "YCSB-B request", threads),
        YcsbLmdb("ycsb-lmdb", ["liblmdb-dev"], "YCSB-C request", threads),
    ]


TRACEFS = Path("/sys/kernel/tracing")
# Niceness of the native runs: the highest priority, so that on a machine shared with other
# work the program's threads run when they are runnable, as on an idle machine (which the
# replay is: the recording alone on its cores). A TLB-shootdown IPI goes only to a CPU
# currently running the program's address space (arch/x86/mm/tlb.c, should_flush_tlb), so
# the count depends on whether its threads run at the same time.
NATIVE_NICE = -20


class IpiTracer:
    """TLB-shootdown IPIs sent by one program's tasks (its threads and forked processes,
    not its client's, not the rest of the machine's), counted with the kernel's `ipi`
    trace events (include/trace/events/ipi.h: ipi_send_cpu, ipi_send_cpumask, Linux 6.6+)
    in a trace instance of its own, and the flushes it asked of other CPUs: the tlb_flush
    event (include/trace/events/tlb.h) with reason TLB_REMOTE_SEND_IPI, which
    native_flush_tlb_multi traces once per flush before the CPUs that need the IPI are
    chosen (should_flush_tlb: those running the address space, not lazy; in a KVM guest
    kvm_flush_tlb_multi first drops vCPUs the host has preempted, flushed at their next
    entry instead). A shootdown's IPIs are those sent from
    on_each_cpu_cond_mask, which flush_tlb_multi (arch/x86/mm/tlb.c) calls, one per
    target CPU (to one CPU the callback is the generic single-call handler, to several
    flush_tlb_func). Other users of on_each_cpu_cond_mask count too (none in the paths
    these programs take, as far as the traces show). /proc/interrupts' TLB: row counts
    the same IPIs as they arrive (flush_tlb_func's inc_irq_stat), but for the whole machine."""

    def __init__(self) -> None:
        self.dir = TRACEFS / "instances" / f"tlbsim-recordings-{os.getpid()}"

    @staticmethod
    def available() -> bool:
        return (TRACEFS / "events" / "ipi" / "ipi_send_cpumask").exists() and os.geteuid() == 0

    def _w(self, name: str, value: str) -> None:
        (self.dir / name).write_text(value)

    def start(self, pid: int) -> None:
        self.dir.mkdir(exist_ok=True)
        self._w("tracing_on", "0")
        self._w("buffer_size_kb", "32768")
        self._w("trace", "")
        self._w("options/event-fork", "1")  # the pid's new threads and children too
        self._w("set_event_pid", str(pid))
        self._w("events/ipi/ipi_send_cpu/enable", "1")
        self._w("events/ipi/ipi_send_cpumask/enable", "1")
        self._w("events/tlb/tlb_flush/enable", "1")
        self._w("tracing_on", "1")

    def stop(self) -> dict:
        self._w("tracing_on", "0")
        text = (self.dir / "trace").read_text()
        overrun = sum(
            int(m.group(1))
            for m in re.finditer(
                r"overrun: (\d+)",
                "".join((self.dir / "per_cpu" / c / "stats").read_text() for c in os.listdir(self.dir / "per_cpu")),
            )
        )
        self._w("events/ipi/enable", "0")
        self._w("events/tlb/tlb_flush/enable", "0")
        self.dir.rmdir()
        return {**count_trace(text), "lost_events": overrun}


def count_trace(text: str) -> dict:
    """The TLB-shootdown IPIs, flush requests and other IPIs in a trace's text (see
    IpiTracer)."""
    tlb = other = requests = 0
    for line in text.splitlines():
        if "reason:remote IPI send" in line:
            requests += 1
        if "ipi_send_cpu" not in line:
            continue
        if "callsite=on_each_cpu_cond_mask" in line or "callback=flush_tlb_func" in line:
            m = re.search(r"cpumask=(\S+)", line)
            tlb += cpulist_len(m.group(1)) if m else 1
        else:
            other += 1
    return {"tlb_ipis": tlb, "flush_requests": requests, "other_ipis": other}


def cpulist_len(text: str) -> int:
    """CPUs in a cpulist ("0-3,5")."""
    n = 0
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            n += int(hi) - int(lo) + 1
        elif part:
            n += 1
    return n


def start_stopped(cmd: list[str], user: str | None, **kw) -> subprocess.Popen:
    """Start `cmd` stopped (a shell that stops itself, then execs it: the same pid), so that
    a tracer can name its pid before it runs."""
    proc = subprocess.Popen(["/bin/sh", "-c", 'kill -STOP $$; exec "$@"', "sh", *cmd], user=user, **kw)
    while True:
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return proc
        time.sleep(0.001)


def run_native(p: Program) -> dict:
    """One native run at NATIVE_NICE: the program's TLB-shootdown IPIs (traced when the
    kernel can, and the machine's /proc/interrupts TLB: row), operations, seconds."""
    tracer = IpiTracer() if IpiTracer.available() else None
    before, t0 = tlb_ipis(), time.monotonic()
    proc = start_stopped(p.command(), p.user, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.setpriority(os.PRIO_PROCESS, proc.pid, NATIVE_NICE)
    if tracer is not None:
        tracer.start(proc.pid)
    os.kill(proc.pid, signal.SIGCONT)
    traced = None
    try:
        if not p.server:
            _, err = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"{p.describe()} failed natively ({proc.returncode}): {err[-300:]!r}")
            ops = p.ops()
        else:
            try:
                p.wait_ready(lambda: proc.poll() is None, 60)
                ops = p.run_client()
            finally:
                proc.send_signal(p.stop_signal)
                proc.communicate(timeout=120)
    finally:
        if tracer is not None:
            traced = tracer.stop()
    r = {"machine_ipis": tlb_ipis() - before, "ops": ops, "seconds": time.monotonic() - t0}
    if traced is not None:
        r.update(traced)
    return r


def measure_native(p: Program, repeats: int) -> dict:
    """`repeats` native runs; the median of the program's IPIs (traced; else the machine's
    minus an idle interval of the same length just after, a rough stand-in)."""
    runs = []
    for _ in range(repeats):
        r = run_native(p)
        if "tlb_ipis" not in r:
            idle0 = tlb_ipis()
            time.sleep(r["seconds"])
            r["tlb_ipis"] = max(r["machine_ipis"] - (tlb_ipis() - idle0), 0)
            r["source"] = "/proc/interrupts minus idle"
        else:
            r["source"] = "ftrace ipi events"
        runs.append(r)
    ipis = [r["tlb_ipis"] for r in runs]
    return {
        "runs": runs,
        "ipis_median": statistics.median(ipis),
        "ipis_min": min(ipis),
        "ipis_max": max(ipis),
        "ipis_per_op": statistics.median(r["tlb_ipis"] / r["ops"] for r in runs),
        "requests": sorted(r["flush_requests"] for r in runs) if "flush_requests" in runs[0] else None,
    }


def record_program(p: Program, out: Path) -> dict:
    """Record `p` into `out` (a server with its client running natively against it)."""
    holder: dict = {}
    started = threading.Event()

    def on_start(proc: subprocess.Popen) -> None:
        holder["proc"] = proc
        restore()
        started.set()

    def restore() -> None:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    # A server under QEMU as its own user writes its raw file next to the recording: it
    # records into its work directory (which that user can write), and the file moves.
    where = out if p.user is None else p.work / out.name

    def target() -> None:
        try:
            holder["summary"] = rec.record(
                p.command(), where, fetches=False, progress=False, user=p.user, on_start=on_start
            )
        except BaseException as e:  # noqa: BLE001 (re-raised by the caller)
            holder["error"] = e
            started.set()

    t = threading.Thread(target=target, daemon=True)
    saved = {k: os.environ.get(k) for k in p.qemu_env}
    os.environ.update(p.qemu_env)  # QEMU reads it as it starts (on_start restores it)
    t.start()
    ops = None
    if p.server:
        started.wait()
        proc = holder.get("proc")
        try:
            if proc is None:
                raise RuntimeError(f"QEMU did not start: {holder.get('error')}")
            t0 = time.monotonic()
            p.wait_ready(lambda: proc.poll() is None, READY_TIMEOUT)
            holder["ready_seconds"] = time.monotonic() - t0
            ops = p.run_client()
        except Exception:
            if proc is not None and proc.poll() is None:
                proc.send_signal(p.stop_signal)
            t.join()
            restore()
            if proc is not None:
                holder["exit_code"] = proc.returncode
            for f in (where, out):
                f.unlink(missing_ok=True)
            raise
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}) before it was stopped")
        proc.send_signal(p.stop_signal)
    else:
        ops = p.ops()
    t.join()
    restore()
    if "error" in holder:
        raise holder["error"]
    summary = holder["summary"]
    if where != out:
        shutil.move(str(where), str(out))
    summary["ops"] = ops
    summary["ready_seconds"] = holder.get("ready_seconds")
    return summary


def replay(path: Path, cores: int) -> dict:
    """Replay as `tlbsim record --compare` does: one socket of `cores` cores, Linux's
    coherence, the recording's per-block instruction counts."""
    t0 = time.monotonic()
    totals = tlbsim.run(rec.replay_config(path, cores, fetches=False)).stats["totals"]
    return {
        "ipis_sent": totals["shootdown_ipis_sent"],
        "ipis_received": totals["shootdown_ipis_received"],
        "shootdowns": totals["shootdowns_sent"],
        "shootdowns_by_reason": {k: v for k, v in totals["shootdowns_sent_by_reason"].items() if v},
        "page_faults": totals["page_faults"],
        "cow_faults": totals["cow_faults"],
        # Accesses the replay found no mapping (or no permission) for: a SIGSEGV the
        # program did not take natively (it ran on), so a mismatch of replay and recording.
        "segv_signals": totals["segv_signals"],
        "seconds": time.monotonic() - t0,
    }


def fmt(x: float | None, digits: int = 2) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"


def spread(values: list[int] | None) -> str:
    """A sorted list of per-run counts as "median [min–max]"."""
    if not values:
        return "—"
    return f"{statistics.median(values):,.0f} [{values[0]:,}–{values[-1]:,}]"


def per_op(native: dict) -> str:
    """Flush requests per operation: the median run's and the largest run's."""
    if not native or not native.get("requests"):
        return "—"
    values = sorted(r["flush_requests"] / r["ops"] for r in native["runs"])
    return f"{statistics.median(values):,.3f} ({values[-1]:,.3f})"


def table(results: list[dict]) -> str:
    rows = [
        (
            "| program | operations | real flush requests: median [min–max] | real IPIs: median [min–max] "
            "| real requests / op: median (max) | real IPIs / op "
            "| replayed IPIs (by cause) | replayed IPIs / op | replay SIGSEGVs | recording | record time "
            "| replay time |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    notes = []
    for r in results:
        n = r.get("native", {})
        rc = r.get("recording", {})
        rp = r.get("replay", {})
        ops = rc.get("ops") or (n["runs"][0]["ops"] if n else None)
        real = spread(sorted(r["tlb_ipis"] for r in n["runs"])) if n else "—"
        if rp:
            causes = ", ".join(f"{k} {v}" for k, v in rp["shootdowns_by_reason"].items())
            replayed = f"{rp['ipis_sent']} ({causes})" if causes else str(rp["ipis_sent"])
        else:
            replayed = "—"
        size = f"{rc['bytes'] / 1e6:,.1f} MB" if "bytes" in rc else "—"
        rows.append(
            f"| `{r['command']}` | {ops if ops is not None else '—'} {r['unit']}s | "
            f"{spread(n.get('requests'))} | {real} | {per_op(n)} | "
            f"{fmt(n.get('ipis_per_op'), 3)} | {replayed} | "
            f"{fmt(rp['ipis_sent'] / ops, 3) if rp and ops else '—'} | "
            f"{fmt(rp.get('segv_signals'), 0)} | {size} | "
            f"{fmt(rc.get('seconds'), 0)} s | {fmt(rp.get('seconds'), 0)} s |"
        )
        for k in ("native_error", "record_error", "replay_error"):
            if k in r:
                notes.append(f"- {r['name']}: {k.replace('_', ' ')}: {r[k]}")
    return "\n".join(rows + ([""] + notes if notes else [])) + "\n"


def measure_and_record(p: Program, r: dict, path: Path, work: Path, args: argparse.Namespace) -> None:
    """Install, prepare, measure natively, record: into `r`, each failure as its error."""
    try:
        if not args.no_install:
            apt_install(p.packages)
        p.prepare()
        r["command"] = " ".join(Path(c).name if i == 0 else c for i, c in enumerate(p.command())).replace(
            str(work), "$WORK"
        ) + (f" {p.note}" if p.note else "")
        r["native"] = measure_native(p, args.repeats)
        print(f"   native: {r['native']}", flush=True)
    except Exception as e:  # noqa: BLE001 (a failed program is a row of the table)
        r.setdefault("command", p.name)
        r["native_error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
        return
    try:
        r["recording"] = record_program(p, path)
        print(
            f"   recorded: {r['recording']['bytes']:,} bytes in {r['recording']['seconds']:.0f} s, "
            f"exit {r['recording']['exit_code']}",
            flush=True,
        )
    except Exception as e:  # noqa: BLE001 (as above)
        r["record_error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="out/recordings", help="directory of the recordings (default: %(default)s)")
    ap.add_argument("--only", nargs="*", help="programs to run (default: all)")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="replay's cores (default: this machine's)")
    ap.add_argument("--threads", type=int, default=DEFAULT_THREADS, help="threads of each program")
    ap.add_argument("--repeats", type=int, default=9, help="native runs per program (median)")
    ap.add_argument("--no-install", action="store_true", help="do not apt-get install missing packages")
    ap.add_argument(
        "--replay-only", action="store_true", help="replay the recordings already in --out again (after a model change)"
    )
    ap.add_argument(
        "--load-scale",
        type=int,
        default=1,
        help="multiply the servers' client loads (requests, get/sets, transactions) by N: a second, longer "
        "recording, from which record/generators.py --long takes the work per operation by difference",
    )
    args = ap.parse_args(argv)
    if args.load_scale != 1:
        global MEMCACHED_OPS, APACHE_REQUESTS, PGBENCH_TRANSACTIONS
        MEMCACHED_OPS *= args.load_scale
        APACHE_REQUESTS *= args.load_scale
        PGBENCH_TRANSACTIONS *= args.load_scale
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tlbsim-recordings-"))
    os.chmod(work, 0o755)  # read by the servers' own users (postgres, www-data)
    make_input(work / "input.txt")
    os.chmod(work / "input.txt", 0o644)
    results_path = out / "results.json"
    results: list[dict] = json.loads(results_path.read_text()) if results_path.exists() else []
    order = [p.name for p in programs(args.threads)]
    for p in programs(args.threads):
        if args.only and p.name not in args.only:
            continue
        p.work = work
        print(f"== {p.name}", flush=True)
        path = out / f"{p.name}.tlbsim"
        r: dict = {"name": p.name, "unit": p.ops_unit, "threads": args.threads, "cores": args.cores}
        if args.replay_only:
            r = next((x for x in results if x["name"] == p.name), r)
            r.pop("replay", None)
            r.pop("replay_error", None)
        else:
            measure_and_record(p, r, path, work, args)
        if "recording" in r and path.exists():
            try:
                info = rec.info(path)
                r["info"] = {k: v for k, v in info.items() if k != "threads"}
                r["info"]["threads"] = len(info["threads"])
                r["replay"] = replay(path, args.cores)
                print(f"   replay: {r['replay']}", flush=True)
            except Exception as e:  # noqa: BLE001 (a failed program is a row of the table)
                r["replay_error"] = f"{type(e).__name__}: {e}"
                traceback.print_exc()
        results = [x for x in results if x["name"] != p.name] + [r]
        results.sort(key=lambda x: order.index(x["name"]) if x["name"] in order else len(order))
        results_path.write_text(json.dumps(results, indent=1))
        (out / "table.md").write_text(table(results))
    shutil.rmtree(work, ignore_errors=True)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
