"""tlbsim: a fast simulator of address translation (TLBs, page walks, TLB shootdowns).

>>> import tlbsim
>>> result = tlbsim.run("machine.toml", machine__tlb__l1d__entries=64)
>>> result.to_frame()          # one row per core, plus "total"
>>> result.save("out/run1")    # config.json + stats.json
"""

from tlbsim._tlbsim import (
    ConfigError,
    IoError,
    SimulationError,
    TlbsimError,
    TraceError,
)
from tlbsim._tlbsim import version as _core_version
from tlbsim.api import bench, convert, override_strings, resolve, run, toml_literal
from tlbsim.result import Result

__version__: str = _core_version()

__all__ = [
    "ConfigError",
    "IoError",
    "Result",
    "SimulationError",
    "TlbsimError",
    "TraceError",
    "__version__",
    "bench",
    "resolve",
    "convert",
    "override_strings",
    "run",
    "toml_literal",
]
