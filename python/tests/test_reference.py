"""docs/CONFIGURATION.md is `tlbsim config --reference`'s output, and every key in it has a meaning."""

from __future__ import annotations

from pathlib import Path

import pytest

import tlbsim
from tlbsim import reference
from tlbsim.cli import main

COMMITTED = Path(__file__).parents[2] / "docs" / "CONFIGURATION.md"


def _keys(tree: dict, prefix: str = "") -> list[str]:
    out: list[str] = []
    for key, value in tree.items():
        if isinstance(value, dict):
            out += _keys(value, f"{prefix}{key}.")
        else:
            out.append(prefix + key)
    return out


def test_committed_reference_matches_the_generator(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "--reference"]) == 0
    generated = capsys.readouterr().out
    assert generated == COMMITTED.read_text(), (
        "docs/CONFIGURATION.md is stale: run `tlbsim config --reference > docs/CONFIGURATION.md`"
    )


def test_every_fixed_key_of_the_defaults_is_in_the_reference() -> None:
    text = reference.reference()
    defaults = tlbsim.resolve(None, overrides=[])
    fixed = {k: v for k, v in defaults.items() if k in ("seed", "machine", "os", "costs", "sim")}
    for key in _keys(fixed):
        assert f"| `{key}` |" in text, key


def test_every_registry_parameter_is_in_the_reference() -> None:
    text = reference.reference()
    from tlbsim import catalogue as cat

    for section in cat.catalogue().values():
        if section["select"].startswith("tlbsim "):
            continue  # `papers` selects a command's argument, not a config key
        for entry in section["entries"]:
            assert f"### `{entry['name']}`" in text
            for p in entry["params"]:
                assert f"| `{p['key']}` |" in text, (entry["name"], p["key"])


def test_a_key_without_a_doc_fails_naming_the_key(tmp_path: Path) -> None:
    real = reference.CONFIG_SOURCES / "mod.rs"
    undocumented = real.read_text().replace(
        "    /// Clock frequency, to turn cycles into seconds.\n    pub frequency_ghz", "    pub frequency_ghz"
    )
    assert undocumented != real.read_text()
    for source in reference.CONFIG_SOURCES.glob("*.rs"):
        (tmp_path / source.name).write_text(source.read_text())
    (tmp_path / "mod.rs").write_text(undocumented)
    with pytest.raises(reference.MissingDoc, match=r"machine\.frequency_ghz"):
        reference.reference(tmp_path)


def test_reference_refuses_a_config_or_override(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "--reference", "--set", "seed=2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tlbsim: error: ") and "--reference" in err
