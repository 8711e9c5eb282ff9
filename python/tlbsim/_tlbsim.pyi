"""Type stubs for the compiled extension ``tlbsim._tlbsim`` (crates/tlbsim-py)."""

import os
from typing import TypeAlias

_Path: TypeAlias = str | os.PathLike[str]

__version__: str

class TlbsimError(Exception):
    """Base class of every error tlbsim raises."""

class ConfigError(TlbsimError, ValueError):
    """A config value is wrong; ``key`` is its dotted path (``machine.tlb.l1d.ways``)."""

    key: str

class TraceError(TlbsimError, ValueError):
    """A trace file is malformed or cannot be read."""

class SimulationError(TlbsimError, RuntimeError):
    """The simulation failed internally (a bug in tlbsim), including Rust panics."""

class IoError(TlbsimError, OSError):
    """A file could not be read or written."""

class RunControl:
    """Progress and stop of a run: pass it to ``run``, watch it from another thread."""

    def __init__(self) -> None: ...
    def stop(self) -> None:
        """Ask the run to stop at its next check (its stats so far come back, partial)."""
    def progress(self) -> tuple[int, int, str]:
        """(done, total or 0 when not known, "accesses" | "operations")."""

def run(config_json: str, overrides: list[str], base_dir: _Path, control: RunControl | None = None) -> tuple[str, str]:
    """Run one simulation; returns (effective config JSON, stats JSON)."""

def resolve(config_json: str, overrides: list[str], base_dir: _Path) -> str:
    """Resolve a config without running it; returns the effective config JSON."""

def load_config(path: _Path) -> str:
    """Parse a TOML config file; returns the config tree as JSON."""

def bench(accesses: int, memory_model: str = "flat", replicas: int = 1, policy: str = "linux") -> str:
    """Run the speed benchmark; returns its report as JSON."""

def convert(input: _Path, input_format: str, output: _Path) -> str:
    """Convert a trace to the native format; returns the report as JSON."""

def record_finish(raw: _Path, output: _Path) -> str:
    """Finish a raw recording of the ``tlbsim record`` plugin into a native trace; returns its summary as JSON."""

def record_info(path: _Path, syscalls: bool = False) -> str:
    """Summary of a recording (threads, events by kind, instructions) as JSON; ``syscalls`` also lists every system call."""

def version() -> str:
    """The core's version."""

def source_hash() -> str:
    """A digest of the core's source files (``tlbsim_core::SOURCE_HASH``), in sweep run IDs."""

def config_toml(config_json: str) -> str:
    """A config (JSON) as TOML text that loads back to the same config (nulls left out)."""

def catalogue() -> str:
    """Every registry's entries by axis (policies, workloads, presets, recycling,
    placements, hypervisors) as JSON: name, summary, parameters with kind, default, doc."""

def coherence_policies() -> list[str]:
    """The coherence policies ``os.coherence`` accepts, in the core's order."""

def fuzz(policy: str, tagging: str | None, overrides: list[str], scenarios: int, seed: int) -> str:
    """Run random OS scenarios under a policy; returns the fuzz report as JSON."""

def run_policy(config_json: str, overrides: list[str], base_dir: _Path, policy: object, label: str) -> tuple[str, str]:
    """Run with a coherence policy written in Python; returns (effective config, stats) JSON."""

def fuzz_policy(
    factory: object, label: str, tagging: str | None, overrides: list[str], scenarios: int, seed: int
) -> str:
    """tlbsim fuzz with a Python policy built by ``factory()`` per scenario; JSON report."""

def tagging_modes() -> list[str]:
    """The tagging modes ``tlbsim fuzz --tagging`` accepts."""

def _panic_for_test() -> None: ...
def _sleep_for_test(seconds: float) -> None: ...
