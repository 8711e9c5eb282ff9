"""The Python fuzz targets (fuzz/python_targets.py, shared with the atheris driver of
`make fuzz`) on every committed input: the seed corpora fuzz/corpus/{sweep,paper}/ and the
inputs that once made a parser fail with anything but its clean error
(fuzz/regressions/{sweep,paper}/, each fixed at its cause)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

FUZZ = Path(__file__).resolve().parents[2] / "fuzz"


def _targets() -> ModuleType:
    spec = importlib.util.spec_from_file_location("python_targets", FUZZ / "python_targets.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


TARGETS = _targets()
INPUTS = [
    pytest.param(target, path, id=f"{target}/{path.parent.parent.name}/{path.name}")
    for target in TARGETS.TARGETS
    for kind in ("corpus", "regressions")
    for path in sorted((FUZZ / kind / target).glob("*"))
    if path.is_file()
]


def test_every_target_has_seeds() -> None:
    for target in TARGETS.TARGETS:
        assert any((FUZZ / "corpus" / target).iterdir()), target


@pytest.mark.parametrize(("target", "path"), INPUTS)
def test_committed_input_gives_a_clean_result(target: str, path: Path) -> None:
    TARGETS.run(target, path.read_bytes())
