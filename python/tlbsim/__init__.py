"""tlbsim: a fast simulator of address translation (TLBs, page walks, TLB shootdowns).

>>> import tlbsim
>>> result = tlbsim.run("machine.toml", machine__tlb__l1d__entries=64)
>>> result.to_frame()          # one row per core, plus "total"
>>> result.save("out/run1")    # config.json + stats.json
>>> tlbsim.sweep("sweep.toml", "out/sweep")   # every run of a sweep spec, resumable
>>> tlbsim.load("out/sweep")   # one row per run
>>> tlbsim.coherence_policies()   # what os.coherence accepts: ["linux", "oracle", "none"]
>>> tlbsim.reproduce("linux", quick=True)   # a paper's claims beside ours: out/reproduce/linux/
>>> tlbsim.reproduce_papers()      # the papers reproduce knows: ["linux"]
>>> tlbsim.fuzz("linux", scenarios=500)   # random OS scenarios: FuzzReport(... clean=True)
"""

from tlbsim._tlbsim import (
    ConfigError,
    IoError,
    RunControl,
    SimulationError,
    TlbsimError,
    TraceError,
)
from tlbsim._tlbsim import version as _core_version
from tlbsim._tlbsim import coherence_policies
from tlbsim.api import bench, convert, override_strings, resolve, run, toml_literal
from tlbsim.result import Result

# tlbsim.sweep is a callable module: tlbsim.sweep(spec, out, ...) runs a sweep
from tlbsim import sweep
from tlbsim.store import load
from tlbsim.fuzz import FuzzReport, fuzz, tagging_modes
from tlbsim.policy import Plan, Policy
from tlbsim.sweep import SpecError, SweepSummary

# tlbsim.reproduce is a callable module too: tlbsim.reproduce("linux", "out/reproduce/linux")
from tlbsim import reproduce
from tlbsim.reproduce import papers as reproduce_papers

__version__: str = _core_version()

__all__ = [
    "ConfigError",
    "FuzzReport",
    "IoError",
    "Plan",
    "Policy",
    "Result",
    "RunControl",
    "SimulationError",
    "SpecError",
    "SweepSummary",
    "TlbsimError",
    "TraceError",
    "__version__",
    "bench",
    "coherence_policies",
    "convert",
    "fuzz",
    "load",
    "override_strings",
    "reproduce",
    "reproduce_papers",
    "resolve",
    "run",
    "sweep",
    "tagging_modes",
    "toml_literal",
]
