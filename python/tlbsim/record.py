"""``tlbsim record``: run a program under QEMU user mode with tlbsim's TCG plugin
(``record/tlbsim_record.c``, built by ``make`` into ``target/native/tlbsim_record.so``) and
write one native trace (format version 2) of all its threads and processes.

Follows: QEMU's ``-plugin file=...,arg=...`` option (qemu-user, Debian package
``qemu-user``). Simplifies: x86-64 guests only; the plugin writes a raw file next to the
output, finished (compressed, end record appended) when the program exits.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import _tlbsim

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


def record(cmd: list[str], out: str | os.PathLike, fetches: bool = True,
           progress: bool = True) -> dict:
    """Record ``cmd`` into ``out``; returns the summary (plus ``exit_code``, ``seconds``)."""
    if not cmd:
        raise RecordError("tlbsim record: no command given (usage: tlbsim record -- CMD ARGS...)")
    qemu = shutil.which(QEMU)
    if qemu is None:
        raise RecordError(f"tlbsim record needs {QEMU}: install the Debian package qemu-user "
                          "(apt-get install qemu-user; `make` does it when run as root)")
    plugin = plugin_path()
    if not plugin.exists():
        raise RecordError(f"tlbsim record: plugin {plugin} not built: run `make` (or set "
                          "TLBSIM_RECORD_PLUGIN)")
    out = Path(out)
    raw = out.with_name(out.name + ".raw")
    status = out.with_name(out.name + ".status")
    raw.write_bytes(MAGIC_V2)
    status.write_bytes(b"\0" * 8)
    arg = f"{plugin},out={raw},status={status},fetches={'on' if fetches else 'off'}"
    t0 = time.monotonic()
    proc = subprocess.Popen([qemu, "-plugin", arg, *cmd])
    try:
        while proc.poll() is None:
            time.sleep(0.5)
            if progress:
                n = int.from_bytes(status.read_bytes()[:8] or b"\0", "little")
                print(f"\rrecording: {n:,} instructions, {raw.stat().st_size:,} bytes written, "
                      f"{time.monotonic() - t0:.0f} s", end="", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
    seconds = time.monotonic() - t0
    if progress:
        print(file=sys.stderr)
    summary = json.loads(_tlbsim.record_finish(str(raw), str(out)))
    summary["exit_code"] = proc.returncode
    summary["seconds"] = seconds
    summary["raw_bytes"] = raw.stat().st_size
    summary["bytes"] = out.stat().st_size
    raw.unlink()
    status.unlink(missing_ok=True)
    return summary


def info(path: str | os.PathLike, syscalls: bool = False) -> dict:
    """Summary of a recording: threads, events by kind, instruction counts."""
    return json.loads(_tlbsim.record_info(str(path), syscalls))


def format_summary(s: dict) -> str:
    lines = [f"{s['path']}: {s['events']:,} events, {s['instructions']:,} instructions, "
             f"{len(s['threads'])} threads"]
    for t in s["threads"]:
        lines.append(f"  thread {t['tid']}: {t['instructions']:,} instructions, "
                     f"{t['loads']:,} loads, {t['stores']:,} stores, {t['syscalls']} syscalls")
    lines.append("  events by kind: " + ", ".join(f"{k} {v:,}" for k, v in s["by_kind"].items()))
    return "\n".join(lines)
