"""Write the fuzz targets' seed corpora (fuzz/corpus/TARGET/): a few small, valid inputs per
target, from the test data, the configs and hand-built recordings. Deterministic; run from
the repository root: `python3 fuzz/seeds.py`. The corpora are committed; this script says
where each seed comes from.

The trace targets' first byte chooses how the rest reaches the reader (fuzz/src/targets.rs,
`wrap`): 0 as given, 1 gzip, 2 xz, 3 zstd (compressed by the harness).
"""

import gzip
import lzma
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "crates/tlbsim-core/tests/data"
OUT = ROOT / "fuzz/corpus"


def put(target: str, name: str, data: bytes) -> None:
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def zstd(data: bytes) -> bytes | None:
    if shutil.which("zstd") is None:
        return None
    return subprocess.run(["zstd", "-q", "-c", "-3"], input=data, capture_output=True, check=True).stdout


# ---- native format v2 (crates/tlbsim-core/src/trace/native.rs) ----------------------------
MAGIC = b"TLBSIM\0\x02"
KIND = {"F": 0, "L": 1, "S": 2, "M": 3}
SIZE_CODE = {1: 1, 2: 2, 4: 3, 8: 4, 16: 5, 32: 6, 64: 7}


def varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def zigzag(d: int) -> int:
    d &= (1 << 64) - 1
    signed = d - (1 << 64) if d >> 63 else d
    return ((signed << 1) ^ (signed >> 63)) & ((1 << 64) - 1)


class Native:
    """Records of one native trace; `bytes(end=...)` with or without the end record."""

    def __init__(self) -> None:
        self.recs: list[bytes] = []
        self.prev: dict[int, int] = {}
        self.tid = 0

    def access(self, kind: str, va: int, size: int = 8) -> None:
        delta = zigzag(va - self.prev.get(self.tid, 0))
        self.prev[self.tid] = va
        code = SIZE_CODE.get(size, 0)
        rec = bytes([(code << 2) | KIND[kind]]) + varint(delta)
        if code == 0:
            rec += varint(size)
        self.recs.append(rec)

    def instructions(self, n: int) -> None:
        self.recs.append(b"\x20" + varint(n))

    def thread(self, tid: int) -> None:
        self.tid = tid
        self.recs.append(b"\x21" + varint(tid))

    def syscall(self, nr: int, args: list[int], ret: int) -> None:
        rec = b"\x24" + varint(nr) + bytes([len(args)])
        rec += b"".join(varint(a & ((1 << 64) - 1)) for a in args)
        self.recs.append(rec + varint(zigzag(ret)))

    def file(self, dev: int, ino: int) -> None:
        self.recs.append(b"\x25" + varint(dev) + varint(ino))

    def bytes(self, end: bool = True) -> bytes:
        body = MAGIC + b"".join(self.recs)
        return body + (b"\x7f" + varint(len(self.recs)) if end else b"")


MAIN, WORKER, CHILD = 100, 101, 200
HEAP, CODE, FUTEX = 0x7000_0000_0000, 0x40_0000, 0x60_1000


def two_threads() -> Native:
    """As tests/recorded.rs: main clones a worker, maps 8 pages, both read, main unmaps."""
    n = Native()
    n.thread(MAIN)
    n.access("F", CODE, 4)
    n.thread(WORKER)
    n.access("F", CODE + 64, 4)
    n.thread(MAIN)
    n.syscall(56, [0x3D0F00, 0, 0, FUTEX, 0], WORKER)
    n.syscall(9, [0, 8 * 4096, 3, 0x22, -1, 0], HEAP)
    for r in range(6):
        for tid, page in ((MAIN, r % 8), (WORKER, (r + 4) % 8)):
            n.thread(tid)
            n.access("F", CODE + 4 * r, 4)
            n.access("L", HEAP + page * 4096 + 8 * r)
            n.instructions(3)
    n.thread(MAIN)
    n.syscall(11, [HEAP, 8 * 4096], 0)
    n.syscall(231, [0], 0)
    n.thread(WORKER)
    n.syscall(60, [0], 0)
    return n


def many_calls() -> Native:
    """Every system call the compiler reads: file mmap, mprotect, madvise, msync, brk,
    mremap, sched_setaffinity, futex wait/wake, a spin loop released by a store, a fork."""
    n = Native()
    n.thread(MAIN)
    n.syscall(12, [0], 0x60_0000)
    n.syscall(12, [0x60_4000], 0x60_4000)
    n.access("S", 0x60_0010)
    n.file(0x803, 1234)
    n.syscall(9, [0, 4 * 4096, 1, 0x02, 3, 0], HEAP)
    n.access("L", HEAP + 100, 4)
    n.syscall(10, [HEAP, 4096, 3], 0)
    n.syscall(28, [HEAP, 4096, 4], 0)
    n.syscall(26, [HEAP, 4096, 4], 0)
    n.syscall(25, [HEAP, 4 * 4096, 8 * 4096, 1], HEAP + 0x10_0000)
    n.syscall(203, [0, 8, 0x7FFF_0000], 0)
    n.syscall(56, [0x3D0F00, 0, 0, FUTEX, 0], WORKER)
    n.thread(WORKER)
    n.syscall(218, [FUTEX], WORKER)
    for _ in range(4):  # spin: the same fetch and load until main's store
        n.access("F", CODE + 0x100, 4)
        n.access("L", 0x60_0040)
        n.access("F", CODE + 0x104, 2)
    n.thread(MAIN)
    n.access("S", 0x60_0040)
    n.thread(WORKER)
    n.access("F", CODE + 0x100, 4)
    n.access("L", 0x60_0040)
    n.access("M", 0x60_0048, 16)
    n.access("L", 0x60_0050, 3)
    n.syscall(60, [0], 0)
    n.thread(MAIN)
    n.syscall(202, [FUTEX, 0, WORKER, 0], 0)
    n.syscall(57, [], CHILD)
    n.thread(CHILD)
    n.access("S", 0x60_0000)
    n.syscall(231, [0], 0)
    n.thread(MAIN)
    n.syscall(11, [HEAP + 0x10_0000, 8 * 4096], 0)
    n.syscall(231, [0], 0)
    return n


def lackey_head(lines: int) -> bytes:
    text = (DATA / "lackey_tiny.txt").read_bytes().splitlines(keepends=True)
    return b"".join(text[:lines])


def main() -> None:
    if OUT.exists():
        for d in OUT.iterdir():
            if d.name in TARGETS:
                shutil.rmtree(d)

    lk = lackey_head(40)
    put("lackey", "plain", b"\0" + lk)
    put("lackey", "gzip-wrapped", b"\1" + lk)
    put("lackey", "xz-wrapped", b"\2" + lk)
    put("lackey", "zstd-wrapped", b"\3" + lackey_head(12))
    put("lackey", "gzip-file", b"\0" + gzip.compress(lk, mtime=0))

    ch = (DATA / "champsim_small.trace").read_bytes()[: 64 * 12]
    put("champsim", "plain", b"\0" + ch)
    put("champsim", "gzip-wrapped", b"\1" + ch)
    put("champsim", "xz-wrapped", b"\2" + ch[: 64 * 6])
    put("champsim", "zstd-wrapped", b"\3" + ch[: 64 * 6])
    put("champsim", "xz-file", b"\0" + lzma.compress(ch[: 64 * 4]))

    two, many = two_threads(), many_calls()
    v1 = Native()
    v1.access("F", CODE, 4)
    v1.access("S", HEAP, 64)
    v1.recs.append(b"\x22" + varint(HEAP) + varint(8192) + b"\x03" + varint(0x22))
    v1.recs.append(b"\x23" + varint(HEAP) + varint(8192))
    put("native", "v2-plain", b"\0" + two.bytes())
    put("native", "v2-calls-gzip-wrapped", b"\1" + many.bytes())
    put("native", "v2-xz-wrapped", b"\2" + two.bytes())
    put("native", "v2-zstd-wrapped", b"\3" + many.bytes())
    put("native", "v1-plain", b"\0" + b"TLBSIM\0\x01" + v1.bytes()[8:])
    z = zstd(two.bytes())
    if z is not None:
        put("native", "v2-zstd-file", b"\0" + z)

    put("recorded", "raw-two-threads", two.bytes(end=False))
    put("recorded", "raw-calls", many.bytes(end=False))
    put("recorded", "finished-two-threads", two.bytes())

    put("compile", "two-threads-fetches", b"\x03" + two.bytes())
    put("compile", "calls-no-fetches", b"\x04" + many.bytes())
    put("compile", "calls-fetches", b"\x07" + many.bytes())

    put("config", "example.toml", (ROOT / "configs/example.toml").read_bytes())
    put("config", "scale-1tib.toml", (ROOT / "configs/scale-1tib.toml").read_bytes())
    put(
        "config",
        "overrides.toml",
        b"seed = 3\n#set machine.sockets=2\n#set os.coherence=linux\n#set machine.tlb.l1d.entries=32\n"
        b'[workload]\nkind = "apache"\n',
    )
    put(
        "config",
        "synthetic.toml",
        b'[machine]\npreset = "none"\n[workload]\nkind = "synthetic"\n#set sim.batch=1000\n',
    )
    put("scenario", "scenario-example.toml", (ROOT / "configs/scenario-example.toml").read_bytes())
    put(
        "scenario",
        "small.toml",
        b'[[workload.scenario.process]]\nname = "p"\nregion = [ { name = "heap", bytes = 65536 } ]\n'
        b'[[workload.scenario.process.thread]]\nname = "t"\nprogram = [\n'
        b'  { op = "access", region = "heap", count = 16 },\n  { op = "munmap", region = "heap" },\n'
        b'  { op = "exit" },\n]\n',
    )
    put(
        "scenario",
        "malloc.toml",
        b'[workload.scenario]\nglibc = "2.23"\n[[workload.scenario.process]]\nname = "p"\n'
        b'[[workload.scenario.process.thread]]\nname = "a"\nprogram = [\n'
        b'  { op = "malloc", pointer = "buf", bytes = 200000 },\n'
        b'  { op = "access", region = "buf", mode = "write", count = 8, stride = 4096 },\n'
        b'  { op = "barrier" },\n  { op = "barrier" },\n  { op = "realloc", pointer = "buf", bytes = 4096 },\n'
        b'  { op = "free", pointer = "buf" },\n  { op = "exit" },\n]\n'
        b'[[workload.scenario.process.thread]]\nname = "b"\nprogram = [\n  { op = "barrier" },\n'
        b'  { op = "use-pointer", pointer = "buf" },\n  { op = "access", region = "buf", count = 4 },\n'
        b'  { op = "barrier" },\n  { op = "exit" },\n]\n',
    )

    # Python targets (fuzz/python_targets.py): the scratch folder holds base.toml (a small
    # apache config) and s.toml (a sweep spec over it), which seeds may name.
    put("sweep", "ideal.toml", (ROOT / "python/tlbsim/reproduce/fpr/ideal.toml").read_bytes())
    put(
        "sweep",
        "base-file.toml",
        b'base = "base.toml"\nseeds = [1, 2]\n[grid]\n"os.coherence" = ["linux", "oracle"]\n'
        b'[zip]\n"machine.tlb.l1d.entries" = [32, 64]\n"machine.tlb.l1d.ways" = [4, 8]\n',
    )
    put(
        "sweep",
        "policy.toml",
        b'policy = "skip_idle_cores:SkipIdleCores"\n[base]\nmachine = { sockets = 1, cores_per_socket = 2 }\n'
        b'workload = { kind = "apache", ops = 20 }\n',
    )
    put(
        "paper",
        "paper.toml",
        b'title = "fuzz"\nfull_run = { minutes = 0.5, measured = "here" }\n[sweep.s]\nspec = "s.toml"\n'
        b'quick = { seeds = [1], set = { "workload.ops" = 10 } }\n[figure.f]\ntitle = "F"\nlog = true\n'
        b'[defaults]\nunit = "ratio"\n'
        b'[[claim]]\nid = "a"\nsection = "1"\nclaim = "fewer"\npaper_value = 0.5\ntolerance = { rel = 0.2 }\n'
        b'figure = "f"\nours = { metric = "totals.shootdown_ipis_sent", where = { "os.coherence" = "oracle" }, '
        b'relative_to = { where = { "os.coherence" = "linux" } } }\n'
        b'[[claim]]\nid = "b"\nsection = "2"\nclaim = "few"\npaper_value = 3\nunit = "count"\n'
        b'tolerance = { factor = 2 }\nours = { sweep = "s", metric = "totals.instructions", '
        b'where = { seed = 1 }, relative_to = { where = {}, best = "min" } }\n',
    )


TARGETS = ("lackey", "champsim", "native", "recorded", "compile", "config", "scenario", "sweep", "paper")

if __name__ == "__main__":
    main()
