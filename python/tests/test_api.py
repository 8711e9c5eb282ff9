"""tlbsim.api: overrides, run, bench, errors, GIL release."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from conftest import COUNTERS

import tlbsim
from tlbsim import _tlbsim
from tlbsim.api import override_strings, toml_literal

# --- override conversion -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        (True, "true"),
        (False, "false"),
        (64, "64"),
        (-3, "-3"),
        (0.5, "0.5"),
        (float("inf"), "inf"),
        (float("-inf"), "-inf"),
        (float("nan"), "nan"),
        ("lru", '"lru"'),
        ('say "hi"', r'"say \"hi\""'),
        ("back\\slash", r'"back\\slash"'),
        ("tab\tnl\n", r'"tab\tnl\n"'),
        ("\x01\x7f", r'"\u0001\u007F"'),
        ("ünïcode", '"ünïcode"'),
        (Path("traces/a.gz"), '"traces/a.gz"'),
        ([1, 2, 3], "[1, 2, 3]"),
        (("a", True), '["a", true]'),
        ({"entries": 64, "replacement": "lru"}, '{entries = 64, replacement = "lru"}'),
        ({"a b": 1}, '{"a b" = 1}'),
    ],
)
def test_toml_literal(value: object, literal: str) -> None:
    assert toml_literal(value) == literal


def test_toml_literal_is_valid_toml() -> None:
    import tomllib

    for value in ['q"\\\n\t\x00\x7f', 1.25, [1, [2]], {"x": {"y": "z"}}, "ünï"]:
        assert tomllib.loads(f"v = {toml_literal(value)}")["v"] == (
            value if not isinstance(value, tuple) else list(value)
        )


def test_toml_literal_rejects_none_and_objects() -> None:
    with pytest.raises(TypeError):
        toml_literal(None)
    with pytest.raises(TypeError):
        toml_literal(object())


def test_kwargs_use_double_underscore_for_dots() -> None:
    assert override_strings(machine__tlb__l1d__entries=64, seed=3) == [
        "machine.tlb.l1d.entries=64",
        "seed=3",
    ]


def test_dict_overrides_are_dotted_keys_with_literals() -> None:
    assert override_strings({"machine.tlb.l1d.replacement": "lru", "workload.fetches": False}) == [
        'machine.tlb.l1d.replacement="lru"',
        "workload.fetches=false",
    ]


def test_list_overrides_kept_verbatim_and_kwargs_come_last() -> None:
    assert override_strings(["seed=1", "machine.preset=host"], seed=2) == [
        "seed=1",
        "machine.preset=host",
        "seed=2",
    ]


def test_malformed_list_override_is_config_error() -> None:
    with pytest.raises(tlbsim.ConfigError):
        override_strings(["seed"])
    with pytest.raises(TypeError):
        override_strings("seed=1")  # type: ignore[arg-type]


# --- exceptions and the panic guard ----------------------------------------------------


def test_exception_hierarchy() -> None:
    assert issubclass(tlbsim.TlbsimError, Exception)
    assert issubclass(tlbsim.ConfigError, tlbsim.TlbsimError)
    assert issubclass(tlbsim.ConfigError, ValueError)
    assert issubclass(tlbsim.TraceError, tlbsim.TlbsimError)
    assert issubclass(tlbsim.TraceError, ValueError)
    assert issubclass(tlbsim.SimulationError, tlbsim.TlbsimError)
    assert issubclass(tlbsim.SimulationError, RuntimeError)
    assert issubclass(tlbsim.IoError, tlbsim.TlbsimError)
    assert issubclass(tlbsim.IoError, OSError)
    assert tlbsim.ConfigError is _tlbsim.ConfigError
    assert tlbsim.ConfigError.__module__ == "tlbsim"


def test_rust_panic_becomes_simulation_error() -> None:
    for _ in range(2):  # the module stays usable after a panic
        with pytest.raises(tlbsim.SimulationError) as info:
            _tlbsim._panic_for_test()
        message = str(info.value)
        assert "deliberate panic for testing" in message
        assert "lib.rs" in message  # the panic's location
    assert tlbsim.__version__ == _tlbsim.version()


def test_panic_in_a_thread_becomes_simulation_error() -> None:
    caught: list[BaseException] = []

    def target() -> None:
        try:
            _tlbsim._panic_for_test()
        except BaseException as err:  # noqa: BLE001 - we want to see exactly what arrives
            caught.append(err)

    t = threading.Thread(target=target)
    t.start()
    t.join()
    assert len(caught) == 1 and isinstance(caught[0], tlbsim.SimulationError)


def test_calls_release_the_gil() -> None:
    threads = [threading.Thread(target=_tlbsim._sleep_for_test, args=(0.5,)) for _ in range(2)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.perf_counter() - start < 0.9  # serialised would take >= 1.0 s


def test_missing_config_file_is_config_error(tmp_path: Path) -> None:
    for call in (tlbsim.run, tlbsim.resolve):
        with pytest.raises(tlbsim.ConfigError, match="nope.toml: no such config file") as info:
            call(tmp_path / "nope.toml")
        assert info.value.key == str(tmp_path / "nope.toml")
    with pytest.raises(tlbsim.ConfigError, match="is a folder, not a config file"):
        tlbsim.run(tmp_path)


def test_bad_config_type_is_type_error() -> None:
    with pytest.raises(TypeError):
        tlbsim.run(42)  # type: ignore[arg-type]


def test_unknown_trace_format_is_trace_error(tmp_path: Path) -> None:
    with pytest.raises(tlbsim.TraceError, match="unknown trace format"):
        _tlbsim.convert(tmp_path / "a", "pin", tmp_path / "b")


# --- with the real core ----------------------------------------------------------------


def test_run_with_defaults_produces_all_stats() -> None:
    result = tlbsim.run(None)
    assert isinstance(result.config, dict) and result.config
    stats = result.stats
    for section in ("totals", "per_core", "per_structure"):
        assert section in stats
    assert set(COUNTERS) <= set(stats["totals"])
    assert stats["per_core"], "at least one core"
    for core in stats["per_core"]:
        assert set(COUNTERS) <= set(core)
    for counters in stats["per_structure"].values():
        assert {"hits", "misses", "evictions", "invalidations"} <= set(counters)
    frame = result.to_frame()
    assert len(frame) == len(stats["per_core"]) + 1
    assert frame["core"].iloc[-1] == "total"


def test_run_is_deterministic_for_a_seed() -> None:
    first = tlbsim.run(None, seed=7)
    second = tlbsim.run(None, seed=7)
    assert json.dumps(first.stats, sort_keys=True) == json.dumps(second.stats, sort_keys=True)
    assert first.config == second.config


def test_runs_in_two_threads_finish() -> None:
    results: list[tlbsim.Result] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            results.append(tlbsim.run(None, seed=3))
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=target) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    assert len(results) == 2
    assert results[0].stats == results[1].stats


def test_override_reaches_the_effective_config() -> None:
    result = tlbsim.run(None, seed=11)
    assert result.config["seed"] == 11


def test_unknown_key_is_config_error_naming_the_key() -> None:
    with pytest.raises(tlbsim.ConfigError) as info:
        tlbsim.run({"machine": {"no_such_key": 1}})
    assert "machine.no_such_key" in str(info.value)
    assert info.value.key == "machine.no_such_key"  # type: ignore[attr-defined]


def test_resolve_validates_without_running() -> None:
    effective = tlbsim.resolve({"machine": {"preset": "didi-cmp"}}, machine__cores_per_socket=32)
    assert effective["machine"]["cores_per_socket"] == 32
    assert effective["machine"]["tlb"]["l1d"]["entries"] == 128  # DiDi Table I
    with pytest.raises(tlbsim.ConfigError, match="machine.sockets"):
        tlbsim.resolve(None, machine__sockets=0)


def test_coherence_policies_are_the_ones_the_core_accepts() -> None:
    policies = tlbsim.coherence_policies()
    assert policies[0] == "linux" and {"oracle", "none"} <= set(policies)
    # An OS-mode kind: under the default (trace-mode) kind a policy cannot matter.
    os_mode = {"workload": {"kind": "fpr-munmap"}}
    for policy in policies:
        assert tlbsim.resolve(os_mode, os__coherence=policy)["os"]["coherence"] == policy
    with pytest.raises(tlbsim.ConfigError) as err:
        tlbsim.resolve(None, os__coherence="no-such-policy")
    assert err.value.key == "os.coherence"
    assert all(p in str(err.value) for p in policies)
