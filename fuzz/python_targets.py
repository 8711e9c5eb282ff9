"""The Python fuzz targets: the sweep spec (`tlbsim.sweep.expand`) and a paper folder's
`paper.toml` (`tlbsim.reproduce.paper.load`), each fed arbitrary bytes as the file's text.

A target returns when the parser accepted the input or refused it with its clean error
(`SpecError`, `PaperError`, the core's `TlbsimError`); any other exception escapes and is a
finding. Used by the atheris driver (fuzz/atheris_main.py, `make fuzz`) and by
python/tests/test_fuzz_regressions.py, which runs every committed input under `make test`.

Both parsers may import Python code named by the input (a sweep's `policy = "module:Class"`,
a paper's hooks.py): here only the example policies (examples/policies/) may be imported,
so that a fuzzed module name never runs an arbitrary installed module; any other name is
refused as the real `load_policy` refuses a module it cannot import (ImportError).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ROOT / "examples" / "policies"
TARGETS = ("sweep", "paper")

# A small base config for a spec's `base = "base.toml"`, and the sweep spec a fuzzed paper
# may name (`spec = "s.toml"`): cheap to validate (one config resolved per run).
BASE_TOML = b'seed = 1\n[machine]\nsockets = 1\ncores_per_socket = 2\n[workload]\nkind = "apache"\nops = 20\n'
SPEC_TOML = b'base = "base.toml"\nseeds = [1, 2]\n[grid]\n"os.coherence" = ["linux", "oracle"]\n'

_scratch: Path | None = None


def _folder() -> Path:
    """One scratch folder per process, with base.toml and s.toml in it."""
    global _scratch
    if _scratch is None:
        _scratch = Path(tempfile.mkdtemp(prefix="tlbsim-fuzz-"))
        (_scratch / "base.toml").write_bytes(BASE_TOML)
        (_scratch / "s.toml").write_bytes(SPEC_TOML)
    return _scratch


@contextlib.contextmanager
def _confined() -> Iterator[None]:
    """While parsing: `load_policy` imports example policies only, the working directory is
    the scratch folder (where a policy module is looked up), sys.path as it was after."""
    import tlbsim.policy

    allowed = {p.stem for p in POLICIES.glob("*.py")}
    real = tlbsim.policy.load_policy

    def load_policy(spec: str) -> type[tlbsim.policy.Policy]:
        module = spec.partition(":")[0]
        if module not in allowed:
            raise ImportError(f"fuzz harness: module {module!r} is not an example policy")
        return real(spec)

    cwd, path = os.getcwd(), list(sys.path)
    sys.path.append(str(POLICIES))
    tlbsim.policy.load_policy = load_policy  # type: ignore[assignment]
    os.chdir(_folder())
    try:
        yield
    finally:
        tlbsim.policy.load_policy = real  # type: ignore[assignment]
        sys.path[:] = path
        os.chdir(cwd)


def sweep(data: bytes) -> None:
    from tlbsim import _tlbsim
    from tlbsim.sweep import SpecError, expand

    spec = _folder() / "spec.toml"
    spec.write_bytes(data)
    with _confined():
        try:
            expand(spec)
        except (SpecError, _tlbsim.TlbsimError):
            pass


def paper(data: bytes) -> None:
    from tlbsim import _tlbsim
    from tlbsim.reproduce.paper import PaperError, load
    from tlbsim.sweep import SpecError

    folder = _folder()
    (folder / "paper.toml").write_bytes(data)
    with _confined():
        try:
            load(folder, "fuzz")
        except (PaperError, SpecError, _tlbsim.TlbsimError):
            pass


def run(target: str, data: bytes) -> None:
    if target == "sweep":
        sweep(data)
    elif target == "paper":
        paper(data)
    else:
        raise ValueError(f"unknown fuzz target {target!r}; targets: {', '.join(TARGETS)}")
