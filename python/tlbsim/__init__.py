"""tlbsim: a fast simulator of address translation (TLBs, page walks, TLB shootdowns).

>>> import tlbsim
>>> result = tlbsim.run("machine.toml", machine__tlb__l1d__entries=64)
>>> result.to_frame()          # one row per core, plus "total"
>>> result.save("out/run1")    # config.json + stats.json
>>> tlbsim.sweep("sweep.toml", "out/sweep")   # every run of a sweep spec, resumable
>>> tlbsim.load("out/sweep")   # one row per run
"""

from tlbsim._tlbsim import (
    ConfigError,
    IoError,
    SimulationError,
    TlbsimError,
    TraceError,
)
from tlbsim._tlbsim import version as _core_version
from tlbsim.api import bench, convert, override_strings, run, toml_literal
from tlbsim.result import Result

__version__: str = _core_version()

from tlbsim import sweep  # noqa: E402  (a callable module: tlbsim.sweep(spec, out, ...))
from tlbsim.store import load  # noqa: E402
from tlbsim.sweep import SpecError, SweepSummary  # noqa: E402

__all__ = [
    "ConfigError",
    "IoError",
    "Result",
    "SpecError",
    "SweepSummary",
    "SimulationError",
    "TlbsimError",
    "TraceError",
    "__version__",
    "bench",
    "convert",
    "override_strings",
    "load",
    "run",
    "sweep",
    "toml_literal",
]
