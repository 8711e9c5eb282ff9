"""Parameter sweeps: expand a spec into runs, run them (threads or Dask), resume.

A spec is a TOML file or a dict with these top-level keys (all optional):

``base``
    A run config: a path to a TOML file (relative to the spec file; to the current
    folder for a dict spec) or an inline table. Default: the built-in defaults.
``seeds``
    A list of seeds; every other combination is run once per seed. Default: the base
    config's seed (``seed`` is then not a swept parameter).
``[grid]``
    Dotted config keys → lists of values; the runs are their Cartesian product.
``[zip]``
    Dotted config keys → lists of equal length, varied together (row ``i`` of every
    list forms one combination); crossed with the grid and the seeds. A list may repeat
    a value; two equal rows are a duplicate run.
``policy``
    A coherence policy written in Python, ``"module:Class"`` (a ``tlbsim.Policy``
    subclass; importable where the runs happen, Dask workers included: a module in the
    spec's folder or the working directory is found, as ``tlbsim fuzz`` finds one), used by
    every run instead of ``os.coherence``; it is part of each run's ID.
``policy`` in ``[grid]`` or ``[zip]``
    The coherence policy as a swept key: each value a built-in policy's name (the run sets
    ``os.coherence`` to it) or a Python policy's ``"module:Class"`` (the run uses it as the
    top-level ``policy`` does), so built-in and Python policies are compared in one sweep:
    ``policy = ["linux", "latr", "mypolicies:Mine"]``. Not beside a top-level ``policy``
    or a swept ``os.coherence``.

Runs are expanded in order grid (first key outermost) × zip row × seed.

Validation happens before any run starts. The spec's structure is checked in Python
(unknown top-level key, non-list or empty list, unequal zip lists, a key in both grid
and zip, duplicate run). Then every distinct combination of grid values and zip row
(seeds excluded), and every seed, is resolved by the core on the base config without
running (``tlbsim.resolve``: the same checks a run makes first). A ``ConfigError`` becomes
a ``SpecError`` naming the spec key, e.g. ``grid."machine.tlb.l1d.entires"``.

Run ID: the first 16 hex digits of the sha256 of the canonical JSON (keys sorted,
separators ``,`` and ``:``, ASCII) of ``{"config": C, "source": S, "traces": T, "version":
V}`` where ``S`` is ``tlbsim._tlbsim.source_hash()``, a digest of the core's source files
(so a sweep resumed after the model changed runs again instead of reusing runs of the
model before; crates/tlbsim-core/build.rs),
``C`` is the resolved input config (the base config tree with the run's overrides set
at their dotted paths; not the core's effective config, so defaults are not
included), ``V`` is ``tlbsim.__version__`` and ``T`` is the list, in order, of the
sha256 hex digests of the files named in ``C["workload"]["paths"]`` (resolved against
the base config's folder).

Output, under ``out``: ``spec.toml`` (or ``spec.json``), and ``runs/<id>/`` holding
``config.json`` (effective config), ``params.json`` (the swept values of that run) and
``stats.json``, each written to a temporary name and renamed, stats.json last. A run is
finished iff its ``stats.json`` exists; finished runs are skipped, so a sweep killed at
any moment resumes losing nothing and redoing nothing.

The module is callable: ``tlbsim.sweep(spec, out)`` is ``tlbsim.sweep.sweep(spec, out)``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import sys
import tomllib
import types
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tlbsim import _tlbsim
from tlbsim.api import toml_literal
from tlbsim.json_values import json_default
from tlbsim.progress import ProgressBar
from tlbsim.result import write_json_atomic

SPEC_KEYS = ("base", "seeds", "grid", "zip", "policy")
CLUSTER_BATCH = 4

SpecLike = Mapping[str, Any] | str | os.PathLike[str]


class SpecError(ValueError):
    """The sweep spec is wrong; the message names the offending key."""


@dataclass(frozen=True)
class RunSpec:
    """One expanded run: its ID, swept values (dotted key → value) and overrides."""

    id: str
    params: dict[str, Any]
    overrides: list[str]
    policy: str | None = None
    """The Python policy ("module:Class") the run uses, if any."""


@dataclass
class Sweep:
    """An expanded, validated spec."""

    base_json: str
    base_dir: Path
    runs: list[RunSpec]
    spec_source: Path | None = None
    spec_dict: dict[str, Any] = field(default_factory=dict)
    policy: str | None = None


@dataclass
class SweepSummary:
    """``total`` runs in the spec, ``skipped`` (already finished), ``ran`` now; ``out``."""

    total: int
    skipped: int
    ran: int
    out: Path


# ---------------------------------------------------------------------------- spec


def _read_spec(spec: SpecLike) -> tuple[dict[str, Any], Path, Path | None]:
    """(spec dict, folder that relative paths are resolved against, spec file)."""
    if isinstance(spec, Mapping):
        return dict(spec), Path.cwd(), None
    path = Path(spec)
    if not path.is_file():
        raise FileNotFoundError(2, "sweep spec not found", os.fspath(path))
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{path}: invalid TOML: {err}") from None
    except UnicodeDecodeError as err:  # TOML is UTF-8; tomllib decodes before it parses
        raise SpecError(f"{path}: invalid TOML: not UTF-8 text (byte offset {err.start})") from None
    return data, path.resolve().parent, path


def _check_lists(section: str, table: object, unique: bool = True) -> dict[str, list[Any]]:
    if not isinstance(table, Mapping):
        raise SpecError(f"{section}: expected a table of dotted keys to lists")
    out: dict[str, list[Any]] = {}
    for key, values in table.items():
        name = f'{section}."{key}"'
        if isinstance(values, Mapping):
            raise SpecError(
                f'{name}: expected a list of values, got a table (quote dotted keys: "machine.tlb.l1d.entries" = [...])'
            )
        if not isinstance(values, (list, tuple)):
            raise SpecError(f"{name}: expected a list of values, got {values!r}")
        if not values:
            raise SpecError(f"{name}: empty list")
        if not key or any(not part for part in str(key).split(".")):
            raise SpecError(f"{name}: not a dotted config key")
        if unique:
            _check_unique(name, values)
        out[str(key)] = list(values)
    return out


def _check_unique(name: str, values: Sequence[Any]) -> None:
    seen: set[str] = set()
    for value in values:
        text = canonical_json(value)
        if text in seen:
            raise SpecError(f"{name}: duplicate value {value!r}")
        seen.add(text)


def _set_dotted(tree: dict[str, Any], key: str, value: Any) -> None:
    node = tree
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def canonical_json(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=json_default)


def run_id(config: Mapping[str, Any], base_dir: Path, trace_hashes: dict[Path, str]) -> str:
    """The run ID of a resolved input config (see the module docstring)."""
    paths = config.get("workload", {}).get("paths", []) if isinstance(config, Mapping) else []
    traces = []
    for p in paths if isinstance(paths, list) else []:
        full = (base_dir / os.fspath(p)).resolve()
        if full not in trace_hashes:
            try:
                trace_hashes[full] = _sha256_file(full)
            except OSError as err:
                raise SpecError(f"workload.paths: {full}: {err.strerror or err}") from None
        traces.append(trace_hashes[full])
    # the core's version, which is tlbsim.__version__ (read here, as the package imports this
    # module), and the digest of its sources: a model changed since a run finished is a new run
    doc = {"config": config, "source": _tlbsim.source_hash(), "traces": traces, "version": _tlbsim.version()}
    return hashlib.sha256(canonical_json(doc).encode()).hexdigest()[:16]


def _validate(base_json: str, base_dir: Path, overrides: list[str], keys: dict[str, str]) -> None:
    """Resolve one config in the core without running it; errors become SpecErrors."""
    try:
        _tlbsim.resolve(base_json, overrides, base_dir)
    except _tlbsim.ConfigError as err:
        if not overrides:
            raise SpecError(f"base: {err}") from None
        bad = getattr(err, "key", "") or ""
        combo = ", ".join(overrides)
        if bad in keys:
            raise SpecError(f"{keys[bad]}: {err} (in the run with {combo})") from None
        raise SpecError(f"the run with {combo}: {err}") from None


def expand(spec: SpecLike, *, validate: bool = True) -> Sweep:
    """Expand and (unless ``validate=False``) validate a spec; runs nothing else."""
    data, root, source = _read_spec(spec)
    unknown = [k for k in data if k not in SPEC_KEYS]
    if unknown:
        raise SpecError(f"{unknown[0]}: unknown top-level key; allowed: {', '.join(SPEC_KEYS)}")

    base = data.get("base", {})
    if isinstance(base, (str, os.PathLike)):
        base_path = root / os.fspath(base)
        if not base_path.is_file():
            raise SpecError(f"base: config file not found: {base_path}")
        try:
            base_json = _tlbsim.load_config(base_path)
        except _tlbsim.TlbsimError as err:
            raise SpecError(f"base: {err}") from None
        base_dir = base_path.resolve().parent
    elif isinstance(base, Mapping):
        base_json = json.dumps(base, default=json_default)
        base_dir = root
    else:
        raise SpecError("base: expected a path to a TOML config or a table")

    policy = data.get("policy")
    if policy is not None:
        from tlbsim.policy import add_policy_folders, load_policy

        if not isinstance(policy, str):
            raise SpecError(f'policy: expected "module:Class", got {policy!r}')
        # As `tlbsim fuzz` does: a policy module beside the spec or in the working directory.
        add_policy_folders(root, os.getcwd())
        try:
            load_policy(policy)
        except (ImportError, AttributeError, TypeError, ValueError) as err:
            raise SpecError(f"policy: {err}") from None

    grid = _check_lists("grid", data.get("grid", {}))
    # A zip list may repeat a value (its rows differ in another list); the rows themselves
    # must not repeat (the duplicate-run check).
    zipped = _check_lists("zip", data.get("zip", {}), unique=False)
    lengths = {k: len(v) for k, v in zipped.items()}
    if len(set(lengths.values())) > 1:
        detail = ", ".join(f'"{k}" has {n}' for k, n in lengths.items())
        first = next(k for k, n in lengths.items() if n != next(iter(lengths.values())))
        raise SpecError(f'zip."{first}": zip lists must have equal lengths ({detail})')
    both = set(grid) & set(zipped)
    if both:
        raise SpecError(f'zip."{min(both)}": key is in both [grid] and [zip]')
    swept_policy = "grid" if "policy" in grid else "zip" if "policy" in zipped else None
    if swept_policy is not None:
        where = f'{swept_policy}."policy"'
        if policy is not None:
            raise SpecError(f"{where}: the policy is swept here and set by the top-level policy key; keep one")
        if "os.coherence" in grid or "os.coherence" in zipped:
            raise SpecError(f'{where}: the policy is swept here and as "os.coherence"; keep one')
        from tlbsim.policy import add_policy_folders, load_policy

        add_policy_folders(root, os.getcwd())
        for value in (grid if swept_policy == "grid" else zipped)["policy"]:
            if not isinstance(value, str):
                raise SpecError(f'{where}: expected a policy name or "module:Class", got {value!r}')
            if ":" in value:
                try:
                    load_policy(value)
                except (ImportError, AttributeError, TypeError, ValueError) as err:
                    raise SpecError(f"{where}: {err}") from None
    seeds: list[Any] | None = None
    if "seeds" in data:
        seeds = data["seeds"]
        if not isinstance(seeds, list) or not seeds:
            raise SpecError(f"seeds: expected a non-empty list of seeds, got {seeds!r}")
        _check_unique("seeds", seeds)
        if "seed" in grid or "seed" in zipped:
            raise SpecError('seeds: "seed" is also swept in [grid] or [zip]')

    names = {k: f'grid."{k}"' for k in grid} | {k: f'zip."{k}"' for k in zipped}
    if swept_policy is not None:
        names["os.coherence"] = names["policy"]
    if seeds is not None:
        names["seed"] = "seeds"
    zip_rows = [dict(zip(zipped, row)) for row in zip(*zipped.values())] or [{}]
    combos = [dict(zip(grid, values)) | row for values in itertools.product(*grid.values()) for row in zip_rows]

    if validate:
        # The base alone need not be a valid run when the grid completes it (a key of the
        # workload kind the grid selects): its error counts only if a run has it too.
        base_error: SpecError | None = None
        try:
            _validate(base_json, base_dir, [], {})
        except SpecError as err:
            if combos == [{}]:
                raise
            base_error = err
        for combo in combos:
            try:
                _validate(base_json, base_dir, _overrides(combo), names)
            except SpecError as err:
                if base_error is not None and str(base_error).removeprefix("base: ") in str(err):
                    raise base_error from None
                raise
        for seed in seeds or []:
            _validate(base_json, base_dir, _overrides(combos[0] | {"seed": seed}), names)

    runs: list[RunSpec] = []
    seen: dict[str, dict[str, Any]] = {}
    hashes: dict[Path, str] = {}
    for combo in combos:
        for seed in seeds if seeds is not None else [None]:
            params = dict(combo) if seed is None else combo | {"seed": seed}
            tree = json.loads(base_json)
            python_policy = _python_policy(params, policy)
            for key, value in params.items():
                if key == "policy":
                    if ":" not in value:
                        _set_dotted(tree, "os.coherence", value)
                    continue
                _set_dotted(tree, key, value)
            if python_policy is not None:
                tree["policy (python)"] = python_policy
            rid = run_id(tree, base_dir, hashes)
            if rid in seen:
                raise SpecError(f"duplicate run: {params} and {seen[rid]} are the same config")
            seen[rid] = params
            runs.append(RunSpec(rid, params, _overrides(params), python_policy))
    return Sweep(base_json, base_dir, runs, source, data, policy)


def _overrides(params: Mapping[str, Any]) -> list[str]:
    """The ``--set`` overrides of a run's swept values; a swept ``policy`` that names a
    built-in policy sets ``os.coherence`` (a Python one is not an override: ``_python_policy``)."""
    out = []
    for key, value in params.items():
        if key == "policy":
            if ":" not in value:
                out.append(f"os.coherence={toml_literal(value)}")
            continue
        out.append(f"{key}={toml_literal(value)}")
    return out


def _python_policy(params: Mapping[str, Any], top_level: str | None) -> str | None:
    value = params.get("policy")
    if isinstance(value, str) and ":" in value:
        return value
    return top_level


# ----------------------------------------------------------------------------- run


def run_one(base_json: str, base_dir: str, overrides: list[str], policy: str | None = None) -> tuple[str, str]:
    """Run one simulation in the core: (effective config JSON, stats JSON); with
    ``policy`` ("module:Class"), under that Python policy."""
    if policy is None:
        return _tlbsim.run(base_json, overrides, Path(base_dir))
    from tlbsim.policy import add_policy_folders, load_policy

    # A worker process that did not inherit the parent's sys.path still finds a policy
    # module beside the base config or in its working directory.
    add_policy_folders(base_dir, os.getcwd())

    return _tlbsim.run_policy(base_json, overrides, Path(base_dir), load_policy(policy)(), policy)


def run_batch(
    base_json: str, base_dir: str, batch: list[tuple[str, list[str], dict[str, Any], str | None]]
) -> list[tuple[str, str, str, dict[str, Any]]]:
    """Run several simulations (one Dask task): [(id, config JSON, stats JSON, params)];
    each of ``batch`` is (id, overrides, params, Python policy or None)."""
    out = []
    for rid, overrides, params, policy in batch:
        config, stats = run_one(base_json, base_dir, overrides, policy)
        out.append((rid, config, stats, params))
    return out


def _write_run(run_dir: Path, config_json: str, stats_json: str, params: dict[str, Any]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / "config.json", json.loads(config_json))
    write_json_atomic(run_dir / "params.json", params)
    write_json_atomic(run_dir / "stats.json", json.loads(stats_json))  # last: "finished"


def _clean_temp_files(run_dir: Path) -> None:
    for tmp in run_dir.glob(".*.tmp-*"):
        tmp.unlink(missing_ok=True)


def _copy_spec(sw: Sweep, out: Path) -> None:
    if sw.spec_source is not None:
        tmp = out / ".spec.toml.tmp"
        shutil.copyfile(sw.spec_source, tmp)
        os.replace(tmp, out / "spec.toml")
    else:
        write_json_atomic(out / "spec.json", sw.spec_dict)


def _run_local(sw: Sweep, todo: list[RunSpec], runs_dir: Path, jobs: int, bar: ProgressBar) -> None:
    base_dir = os.fspath(sw.base_dir)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        pending = iter(todo)
        futures: dict[Any, RunSpec] = {}

        def submit_next() -> None:
            r = next(pending, None)
            if r is not None:
                futures[pool.submit(run_one, sw.base_json, base_dir, r.overrides, r.policy)] = r

        for _ in range(jobs * 2):  # bounded queue: a kill loses at most the runs in flight
            submit_next()
        try:
            while futures:
                done, _ = wait(futures, return_when=FIRST_COMPLETED)
                for fut in done:
                    r = futures.pop(fut)
                    config, stats = fut.result()
                    _write_run(runs_dir / r.id, config, stats, r.params)
                    bar.update(1)
                    submit_next()
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise


def _run_cluster(sw: Sweep, todo: list[RunSpec], runs_dir: Path, address: str, bar: ProgressBar) -> None:
    try:
        from dask.distributed import Client, as_completed
    except ImportError as err:
        raise ImportError(
            f"--cluster needs Dask distributed ({err}); install it with: pip install 'tlbsim[cluster]'"
        ) from None
    base_dir = os.fspath(sw.base_dir)
    batches = [todo[i : i + CLUSTER_BATCH] for i in range(0, len(todo), CLUSTER_BATCH)]
    with Client(address) as client:
        futures = [
            client.submit(
                run_batch,
                sw.base_json,
                base_dir,
                [(r.id, r.overrides, r.params, r.policy) for r in batch],
                pure=False,
            )
            for batch in batches
        ]
        for fut in as_completed(futures):
            for rid, config, stats, params in fut.result():
                _write_run(runs_dir / rid, config, stats, params)
                bar.update(1)


def sweep(
    spec: SpecLike,
    out: str | os.PathLike[str] | None = None,
    *,
    jobs: int | None = None,
    cluster: str | None = None,
    progress: bool = False,
    on_start: Callable[[int, int], None] | None = None,
) -> SweepSummary:
    """Run every unfinished run of ``spec`` into ``out`` (default ``out/<spec stem>``).

    ``jobs``: simulations in parallel on this machine (threads; default
    ``os.cpu_count()``); ``cluster``: a Dask scheduler address instead; ``progress``:
    show a progress bar on stderr. ``on_start(total, skipped)`` is called once the spec
    is validated, before any run. Raises ``SpecError`` before any run on a bad spec.
    """
    sw = expand(spec)
    if out is None:
        stem = sw.spec_source.stem if sw.spec_source is not None else "sweep"
        out = Path("out") / stem
    out = Path(out)
    if jobs is not None and jobs < 1:
        raise ValueError("jobs must be at least 1")
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    _copy_spec(sw, out)

    todo: list[RunSpec] = []
    for r in sw.runs:
        run_dir = runs_dir / r.id
        if run_dir.is_dir():
            _clean_temp_files(run_dir)
        if not (run_dir / "stats.json").is_file():
            todo.append(r)
    total, skipped = len(sw.runs), len(sw.runs) - len(todo)
    if on_start is not None:
        on_start(total, skipped)
    with ProgressBar(len(todo), desc="sweep", unit="run", enabled=progress) as bar:
        if not todo:
            pass
        elif cluster is not None:
            _run_cluster(sw, todo, runs_dir, cluster, bar)
        else:
            _run_local(sw, todo, runs_dir, jobs or os.cpu_count() or 1, bar)
    return SweepSummary(total=total, skipped=skipped, ran=len(todo), out=out)


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> SweepSummary:
        return sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["RunSpec", "SpecError", "Sweep", "SweepSummary", "expand", "run_id", "sweep"]
