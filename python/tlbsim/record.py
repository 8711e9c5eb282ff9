"""``tlbsim record``: run a program under QEMU user mode with tlbsim's TCG plugin
(``record/tlbsim_record.c``, built by ``make`` into ``target/native/tlbsim_record.so``) and
write one native trace (format version 2) of all its threads and processes.

Follows: QEMU's ``-plugin file=...,arg=...`` option (qemu-user, Debian package
``qemu-user``). A recording replays through the OS model as ``workload.kind = "recorded"``
(crates/tlbsim-core/src/workload/recorded.rs); ``compare`` sets a program's real shootdown
IPIs beside its replay's. Simplifies: x86-64 guests only; the plugin writes a raw file next to the
output, finished (compressed, end record appended) when the program exits.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from . import _tlbsim
from .progress import StatusLine

MAGIC_V2 = b"TLBSIM\0\x02"
QEMU = "qemu-x86_64"


class RecordError(RuntimeError):
    """The recording could not be made (missing QEMU or plugin, program failed to start)."""


def plugin_path() -> Path:
    """The built plugin: $TLBSIM_RECORD_PLUGIN, else target/native/tlbsim_record.so of the
    source tree."""
    env = os.environ.get("TLBSIM_RECORD_PLUGIN")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "target" / "native" / "tlbsim_record.so"


def resolve(program: str) -> str:
    """``program`` as QEMU must be given it: a path. QEMU user mode loads the file it is
    given and does not search $PATH, as the shell and execvp do; a bare name is looked up
    here."""
    if os.sep in program:
        return program
    found = shutil.which(program)
    if found is None:
        raise RecordError(f"tlbsim record: {program}: not found in $PATH")
    return found


def record(
    cmd: list[str],
    out: str | os.PathLike,
    fetches: bool = True,
    progress: bool = True,
    user: str | None = None,
    on_start: Callable[[subprocess.Popen], None] | None = None,
) -> dict:
    """Record ``cmd`` into ``out``; returns the summary (plus ``exit_code``, ``seconds``).
    ``user``: run QEMU (and so the program) as that user (a server that refuses root, as
    PostgreSQL does; the program itself cannot switch, as QEMU runs an execve'd program
    natively). ``on_start``: called with the QEMU process once it runs (its pid is the
    program's, e.g. to signal a server)."""
    if not cmd:
        raise RecordError("tlbsim record: no command given (usage: tlbsim record -- CMD ARGS...)")
    cmd = [resolve(cmd[0]), *cmd[1:]]
    qemu = shutil.which(QEMU)
    if qemu is None:
        raise RecordError(
            f"tlbsim record needs {QEMU}: install the Debian package qemu-user "
            "(apt-get install qemu-user; `make` does it when run as root)"
        )
    plugin = plugin_path()
    if not plugin.exists():
        raise RecordError(f"tlbsim record: plugin {plugin} not built: run `make` (or set TLBSIM_RECORD_PLUGIN)")
    out = Path(out)
    raw = out.with_name(out.name + ".raw")
    status = out.with_name(out.name + ".status")
    raw.write_bytes(MAGIC_V2)
    status.write_bytes(b"\0" * 8)
    if user is not None:
        for f in (raw, status):
            shutil.chown(f, user=user)
    arg = f"{plugin},out={raw},status={status},fetches={'on' if fetches else 'off'}"
    t0 = time.monotonic()
    line = StatusLine()
    proc = subprocess.Popen([qemu, "-plugin", arg, *cmd], user=user)
    if on_start is not None:
        on_start(proc)
    try:
        while True:
            try:
                proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            if progress:
                n = int.from_bytes(status.read_bytes()[:8] or b"\0", "little")
                line.show(
                    f"recording: {n:,} instructions, {raw.stat().st_size:,} bytes written, "
                    f"{time.monotonic() - t0:.0f} s"
                )
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
    seconds = time.monotonic() - t0
    if progress:
        line.end()
    summary = json.loads(_tlbsim.record_finish(str(raw), str(out)))
    summary["exit_code"] = proc.returncode
    summary["seconds"] = seconds
    summary["raw_bytes"] = raw.stat().st_size
    summary["bytes"] = out.stat().st_size
    raw.unlink()
    status.unlink(missing_ok=True)
    return summary


def tlb_ipis() -> int | None:
    """TLB-shootdown IPIs received so far, summed over CPUs: the ``TLB:`` row of
    /proc/interrupts (None when the kernel has none). ``TLBSIM_PROC_INTERRUPTS`` names
    another file to read, as for bench/proc_interrupts.h."""
    path = os.environ.get("TLBSIM_PROC_INTERRUPTS") or "/proc/interrupts"
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "TLB:":
            return sum(int(f) for f in fields[1:] if f.isdigit())
    return None


def replay_config(path: str | os.PathLike, cores: int, fetches: bool = True, coherence: str = "linux") -> dict:
    """The config `tlbsim record --compare` replays a recording with: one socket of `cores`
    cores, the recording as the workload, `coherence` as the policy."""
    return {
        "machine": {"sockets": 1, "cores_per_socket": cores},
        "workload": {"kind": "recorded", "paths": [str(path)], "fetches": fetches},
        "os": {"coherence": coherence},
    }


def compare(
    cmd: list[str],
    out: str | os.PathLike,
    fetches: bool = True,
    coherence: str = "linux",
    cores: int | None = None,
    progress: bool = True,
) -> dict:
    """Run ``cmd`` natively counting the TLB-shootdown IPIs the kernel receives meanwhile
    (as bench/shootdown.c does; the whole machine's, so other activity adds to it), record
    it into ``out``, replay the recording under ``coherence`` on ``cores`` cores (default:
    this machine's CPUs) and return both counts. The program runs twice: its two runs may
    differ where its behaviour depends on timing."""
    if not cmd:
        raise RecordError("tlbsim record --compare: no command given")
    before, t0 = tlb_ipis(), time.monotonic()
    native = subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
    seconds, after = time.monotonic() - t0, tlb_ipis()
    summary = record(cmd, out, fetches=fetches, progress=progress)
    cores = cores or os.cpu_count() or 1
    import tlbsim

    totals = tlbsim.run(replay_config(out, cores, fetches, coherence)).stats["totals"]
    return {
        "real_ipis_received": None if before is None or after is None else after - before,
        "real_exit_code": native.returncode,
        "real_seconds": seconds,
        "simulated_ipis_received": totals["shootdown_ipis_received"],
        "simulated_shootdowns": totals["shootdowns_sent"],
        "coherence": coherence,
        "cores": cores,
        "recording": summary,
    }


def info(path: str | os.PathLike, syscalls: bool = False) -> dict:
    """Summary of a recording: threads, events by kind, instruction counts."""
    return json.loads(_tlbsim.record_info(str(path), syscalls))


def format_summary(s: dict) -> str:
    lines = [f"{s['path']}: {s['events']:,} events, {s['instructions']:,} instructions, {len(s['threads'])} threads"]
    for t in s["threads"]:
        lines.append(
            f"  thread {t['tid']}: {t['instructions']:,} instructions, "
            f"{t['loads']:,} loads, {t['stores']:,} stores, {t['syscalls']} syscalls"
        )
    lines.append("  events by kind: " + ", ".join(f"{k} {v:,}" for k, v in s["by_kind"].items()))
    return "\n".join(lines)
