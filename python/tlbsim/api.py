"""The Python API: run a simulation, the speed benchmark, trace conversion.

Overrides are given to the core as ``"dotted.key=<TOML literal>"`` strings; this module
turns Python values into those literals.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from tlbsim import _tlbsim
from tlbsim.json_values import json_default
from tlbsim.result import Result

ConfigLike = Mapping[str, Any] | str | os.PathLike[str] | None
Overrides = Mapping[str, object] | Sequence[str] | None
TraceFormatName = Literal["lackey", "champsim", "native"]

DEFAULT_BENCH_ACCESSES = 20_000_000

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _toml_string(s: str) -> str:
    out = []
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _toml_string(key)


def toml_literal(value: object) -> str:
    """The TOML literal for ``value``: ``True`` → ``true``, ``"a b"`` → ``"a b"``,
    ``[1, 2]`` → ``[1, 2]``, ``{"a": 1}`` → ``{a = 1}``. Paths become strings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, os.PathLike):
        return _toml_string(os.fspath(value))
    if isinstance(value, Mapping):
        items = ", ".join(f"{_toml_key(str(k))} = {toml_literal(v)}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    raise TypeError(f"cannot express {type(value).__name__} value {value!r} in TOML")


def override_strings(overrides: Overrides = None, **kwargs: object) -> list[str]:
    """``"dotted.key=literal"`` strings from a mapping of dotted keys (values converted to
    TOML literals), a list of ready-made strings (kept as they are), and keyword arguments
    whose ``__`` stands for a dot (``machine__tlb__l1d__entries=64``). Later ones win."""
    out: list[str] = []
    if isinstance(overrides, Mapping):
        out += [f"{key}={toml_literal(value)}" for key, value in overrides.items()]
    elif overrides is not None:
        if isinstance(overrides, str):
            raise TypeError("overrides must be a list of 'dotted.key=value' strings, not a str")
        for item in overrides:
            key, sep, _ = str(item).partition("=")
            if not sep or not key.strip():
                raise _tlbsim.ConfigError(f"override {item!r}: expected dotted.key=value")
            out.append(str(item))
    out += [f"{key.replace('__', '.')}={toml_literal(value)}" for key, value in kwargs.items()]
    return out


def _config_source(config: ConfigLike) -> tuple[str, Path]:
    """(config tree as JSON, base directory for relative paths)."""
    if config is None:
        return "{}", Path.cwd()
    if isinstance(config, Mapping):
        return json.dumps(config, default=json_default), Path.cwd()
    if isinstance(config, (str, os.PathLike)):
        path = Path(config)
        if not path.is_file():
            # A ConfigError (a ValueError) like every other bad config, so that one except
            # clause catches them all.
            what = "is a folder, not a config file" if path.is_dir() else "no such config file"
            err = _tlbsim.ConfigError(f"config: {os.fspath(path)}: {what}")
            err.key = os.fspath(path)
            raise err
        return _tlbsim.load_config(path), path.resolve().parent
    raise TypeError(f"config must be a dict, a path to a TOML file or None, not {type(config).__name__}")


def run(
    config: ConfigLike = None,
    *,
    overrides: Overrides = None,
    policy: Any = None,
    control: _tlbsim.RunControl | None = None,
    **kwargs: object,
) -> Result:
    """Run one simulation.

    ``config`` is a dict, a path to a TOML file (relative trace paths are then resolved
    against its folder) or None for the built-in defaults. ``overrides`` and keyword
    arguments change single keys: ``run(cfg, machine__tlb__l1d__entries=64)``.
    ``policy`` is a coherence policy written in Python (a ``tlbsim.Policy`` instance, or
    ``"module:Class"``) used instead of ``os.coherence`` (OS-mode workloads only).
    The GIL is released while the simulation runs (held only inside the policy's hooks).
    ``control`` (a ``tlbsim.RunControl``, built-in policies only) lets another thread watch
    the run's progress and stop it; a stopped run returns its stats so far with
    ``stats["run"]["partial"] = True``.
    """
    config_json, base_dir = _config_source(config)
    strings = override_strings(overrides, **kwargs)
    if policy is not None:
        from tlbsim.policy import load_policy

        if isinstance(policy, str):
            policy = load_policy(policy)()
        label = f"{type(policy).__module__}:{type(policy).__qualname__}"
        if control is not None:
            raise ValueError("control: not available with a Python policy")
        effective, stats = _tlbsim.run_policy(config_json, strings, base_dir, policy, label)
    else:
        effective, stats = _tlbsim.run(config_json, strings, base_dir, control)
    return Result(config=json.loads(effective), stats=json.loads(stats))


def resolve(config: ConfigLike = None, *, overrides: Overrides = None, **kwargs: object) -> dict[str, Any]:
    """The effective config (every key, after preset, file and overrides) without running;
    raises ``ConfigError`` naming the key exactly as ``run`` would."""
    config_json, base_dir = _config_source(config)
    strings = override_strings(overrides, **kwargs)
    effective: dict[str, Any] = json.loads(_tlbsim.resolve(config_json, strings, base_dir))
    return effective


def bench(
    accesses: int = DEFAULT_BENCH_ACCESSES, memory_model: str = "flat", replicas: int = 1, policy: str = "linux"
) -> dict[str, Any]:
    """Simulated accesses per second on this machine: ``l1_hit_stream_per_s``,
    ``walk_stream_per_s``, ``null_loop_per_s``, ``l1_hit_over_null``, ``accesses``
    (the L1-hit stream and the null loop are each the fastest of three alternated timings).
    ``memory_model`` ("flat" or "cache") is ``machine.memory.model`` of the access streams
    and the multicore run; ``replicas`` > 1 runs the L1-hit and walk streams on that many
    sockets with Mitosis keeping a page-table copy on each; ``policy`` is the coherence
    policy (``os.coherence``) of the 64-core multicore run."""
    if accesses <= 0:
        raise ValueError("accesses must be positive")
    if replicas < 1:
        raise ValueError("replicas must be at least 1")
    report: dict[str, Any] = json.loads(_tlbsim.bench(accesses, memory_model, replicas, policy))
    return report


def convert(
    input: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    input_format: TraceFormatName,
) -> dict[str, Any]:
    """Convert a lackey, ChampSim or native trace to tlbsim's native format."""
    report: dict[str, Any] = json.loads(_tlbsim.convert(input, input_format, output))
    return report
