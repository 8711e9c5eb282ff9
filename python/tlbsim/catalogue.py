"""What tlbsim can simulate, from its registries (``tlbsim list``): coherence policies,
workload kinds, machine presets, recycling schemes, page-table placements, hypervisor
schedulers (each with its parameters, their kinds, defaults and documentation, as the core
declares them), and the papers ``tlbsim reproduce`` knows.

The core's registries are the single source: a policy, workload kind or preset added in
Rust appears here with no change to this file.
"""

from __future__ import annotations

import json
import textwrap
import tomllib
from typing import Any

from tlbsim import _tlbsim

#: Sections in the order ``tlbsim list`` prints them.
SECTIONS = ("policies", "workloads", "presets", "recycling", "placements", "hypervisors", "papers")


class UnknownEntry(LookupError):
    """A section or entry name ``tlbsim list`` does not know; the message lists the names."""


def catalogue() -> dict[str, Any]:
    """Every section: ``{"select": config key, "entries": [{name, summary, params}]}``."""
    data: dict[str, Any] = json.loads(_tlbsim.catalogue())
    data["papers"] = {"select": "tlbsim reproduce PAPER", "entries": _papers()}
    return {name: data[name] for name in SECTIONS}


def _papers() -> list[dict[str, Any]]:
    from tlbsim.reproduce import PAPERS_DIR, papers

    out = []
    for name in papers():
        with open(PAPERS_DIR / name / "paper.toml", "rb") as f:
            doc = tomllib.load(f)
        out.append({"name": name, "summary": doc.get("title", ""), "citation": doc.get("citation", ""), "params": []})
    return out


def section(name: str) -> dict[str, Any]:
    cat = catalogue()
    if name not in cat:
        raise UnknownEntry(f"unknown section {name!r}; use one of {', '.join(SECTIONS)}")
    return dict(cat[name])


def entry(section_name: str, name: str) -> dict[str, Any]:
    entries = section(section_name)["entries"]
    for e in entries:
        if e["name"] == name:
            return dict(e)
    names = ", ".join(e["name"] for e in entries)
    raise UnknownEntry(f"no {section_name} entry named {name!r}; {section_name}: {names}")


def format_section(name: str, data: dict[str, Any]) -> str:
    """One line per entry: its name and summary (wrapped under it when long)."""
    entries = data["entries"]
    width = max((len(e["name"]) for e in entries), default=0)
    lines = [f"{name} ({data['select']}):"]
    for e in entries:
        summary = textwrap.wrap(e["summary"], width=max(40, 96 - width)) or [""]
        lines.append(f"  {e['name']:<{width}}  {summary[0]}")
        lines.extend(f"  {'':<{width}}  {more}" for more in summary[1:])
    return "\n".join(lines)


def format_entry(section_name: str, e: dict[str, Any]) -> str:
    """An entry with each parameter: key, kind, default and its documentation."""
    lines = [f"{e['name']}: {e['summary']}"]
    if e.get("citation"):
        lines.append(f"  {e['citation']}")
    if not e["params"]:
        if section_name != "papers":
            lines.append("  (no parameters)")
        return "\n".join(lines)
    where = {
        "policies": f"[coherence.{e['name']}]",
        "recycling": f"[recycling.{e['name']}]",
        "placements": f"[placement.{e['name']}]",
        "hypervisors": f"[hypervisor.{e['name']}]",
        "workloads": "[workload] (with kind = " + json.dumps(e["name"]) + ")",
    }.get(section_name, "")
    lines.append(f"parameters, in {where}:" if where else "parameters:")
    for p in e["params"]:
        lines.append(f"  {p['key']} ({p['kind']}, default {json.dumps(p['default'])})")
        lines.extend(f"      {line}" for line in textwrap.wrap(" ".join(p["doc"].split()), width=88))
    return "\n".join(lines)
