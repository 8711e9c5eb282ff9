"""Import layering of python/tlbsim: no module imports, even lazily, a module that imports it back.

The import graph is read from the source (every ``import`` and ``from ... import`` statement,
function-level ones included), not from a running interpreter, so an import inside a function
that a test never calls still counts. Imports under ``if TYPE_CHECKING:`` are left out: they
never run, and annotations are how two modules may name each other's types without a circle.

Run as a script to print the graph's cycles::

    python python/tests/test_layering.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "tlbsim"


def module_name(path: Path, package_root: Path = PACKAGE_ROOT) -> str:
    """``python/tlbsim/host/fit.py`` -> ``tlbsim.host.fit``; a package is named by its ``__init__``."""
    parts = list(path.relative_to(package_root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a module at any depth, except under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if _is_type_checking_block(node):
            assert isinstance(node, ast.If)
            pending.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found


def import_graph(package_root: Path = PACKAGE_ROOT) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (explicitly; a parent package's implicit
    import by ``import tlbsim.x`` is Python's doing, not an edge)."""
    # An extension module (tlbsim._tlbsim) is known by its stub: a module that imports nothing.
    stubs = {module_name(p, package_root) for p in package_root.rglob("*.pyi")}
    paths = {module_name(p, package_root): p for p in sorted(package_root.rglob("*.py"))}
    graph: dict[str, set[str]] = {name: set() for name in paths | dict.fromkeys(stubs)}
    known = set(graph)
    top = package_root.name
    for name, path in paths.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in _import_nodes(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:  # relative: from . import x / from .mod import y
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                # `from pkg import mod` imports the submodule; `from mod import name` the module
                targets = [
                    f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source for alias in node.names
                ]
            for target in targets:
                if target != top and not target.startswith(top + "."):
                    continue
                while target not in known and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in known and target != name:
                    graph[name].add(target)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle of the graph, each once, starting at its smallest module name."""
    cycles: list[list[str]] = []
    for start in sorted(graph):
        # Paths from `start` through modules sorted after it: each cycle is found from its
        # smallest member only.
        stack: list[tuple[str, list[str]]] = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for successor in sorted(graph[node]):
                if successor == start:
                    cycles.append(path)
                elif successor > start and successor not in path:
                    stack.append((successor, [*path, successor]))
    return cycles


def test_no_import_cycle() -> None:
    cycles = import_cycles(import_graph())
    assert not cycles, "import cycles in python/tlbsim:\n" + "\n".join(" -> ".join([*c, c[0]]) for c in cycles)


def test_graph_sees_function_level_imports(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg import b\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import c\nfrom . import a\n"
    )
    (package / "c.py").write_text("import pkg.b\nfrom pkg import _native\n")
    (package / "_native.pyi").write_text("def f() -> None: ...\n")
    graph = import_graph(package)
    assert graph == {
        "pkg": set(),
        "pkg._native": set(),
        "pkg.a": {"pkg.b"},
        "pkg.b": {"pkg.a"},
        "pkg.c": {"pkg.b", "pkg._native"},
    }
    assert import_cycles(graph) == [["pkg.a", "pkg.b"]]


if __name__ == "__main__":
    found = import_cycles(import_graph())
    for cycle in found:
        print(" -> ".join([*cycle, cycle[0]]))
    print(f"{len(found)} import cycles in {PACKAGE_ROOT}")
    sys.exit(1 if found else 0)
