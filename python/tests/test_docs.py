"""The README and the user guide cannot silently go stale: every relative link points to a
file that exists, and the pages that list a registry (workloads, presets, policies) name
every entry `tlbsim list` names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tlbsim import catalogue

REPO = Path(__file__).parents[2]
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
# [text](target): a Markdown link; the target up to the first space, `)` or `#`.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]*)(?:#[^)\s]*)?\)")


def _relative_links(page: Path) -> list[str]:
    links = LINK.findall(page.read_text())
    return [t for t in links if t and not re.match(r"^[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_points_to_an_existing_file(page: Path) -> None:
    missing = [t for t in _relative_links(page) if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(REPO)} links to files that do not exist: {missing}"


def test_the_readme_links_every_guide_page() -> None:
    linked = {(REPO / t).resolve() for t in _relative_links(REPO / "README.md")}
    unlinked = [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked]
    assert not unlinked, f"README.md's documentation index does not link {unlinked}"


@pytest.mark.parametrize(
    ("page", "section"),
    [("WORKLOADS.md", "workloads"), ("PRESETS.md", "presets"), ("POLICIES.md", "policies")],
)
def test_a_registry_page_names_every_entry(page: str, section: str) -> None:
    text = (DOCS / page).read_text()
    names = [e["name"] for e in catalogue.section(section)["entries"]]
    assert names
    missing = [n for n in names if f"`{n}`" not in text]
    assert not missing, f"docs/{page} does not name {missing}: add them (`tlbsim list {section}`)"


def test_the_workloads_table_has_one_row_per_kind() -> None:
    text = (DOCS / "WORKLOADS.md").read_text()
    rows = re.findall(r"^\| `([a-z0-9-]+)` \|", text, flags=re.MULTILINE)
    names = [e["name"] for e in catalogue.section("workloads")["entries"]]
    assert sorted(rows) == sorted(names)
