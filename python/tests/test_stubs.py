"""python/tlbsim/_tlbsim.pyi against the compiled binding (crates/tlbsim-py/src/lib.rs): the
same names, both ways, each the same kind of thing, and each function with the same
parameters (names, and which have defaults), so that mypy checks the Python code against
what the extension really exports."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from tlbsim import _tlbsim

STUB = Path(__file__).resolve().parents[1] / "tlbsim" / "_tlbsim.pyi"


def stub_declarations() -> dict[str, ast.stmt]:
    """The stub's top-level functions, classes and annotated attributes (``__version__:
    str``), by name. Type aliases (``_Path: TypeAlias = ...``) are the stub's own, which
    the extension does not have."""
    declared: dict[str, ast.stmt] = {}
    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            declared[node.name] = node
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and not (isinstance(node.annotation, ast.Name) and node.annotation.id == "TypeAlias")
        ):
            declared[node.target.id] = node
    return declared


def exported() -> dict[str, object]:
    """What the extension module exports: everything but the module's own dunders
    (``__doc__``, ``__file__``, ``__all__`` ...), ``__version__`` included."""
    return {
        name: value
        for name, value in vars(_tlbsim).items()
        if name == "__version__" or not (name.startswith("__") and name.endswith("__"))
    }


def test_stub_declares_what_the_binding_exports() -> None:
    missing = sorted(set(exported()) - set(stub_declarations()))
    assert not missing, f"exported by tlbsim._tlbsim but not declared in {STUB.name}: {missing}"


def test_binding_exports_what_the_stub_declares() -> None:
    extra = sorted(set(stub_declarations()) - set(exported()))
    assert not extra, f"declared in {STUB.name} but not exported by tlbsim._tlbsim: {extra}"


def test_each_name_is_the_same_kind_of_thing() -> None:
    runtime = exported()
    for name, node in stub_declarations().items():
        if name not in runtime:
            continue  # the test above says so
        value = runtime[name]
        if isinstance(node, ast.ClassDef):
            assert isinstance(value, type), f"{name}: a class in the stub, a {type(value).__name__} in the binding"
            bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
            is_exception = issubclass(value, BaseException)
            stub_exception = any(b in ("Exception", "TlbsimError") or b.endswith("Error") for b in bases)
            assert is_exception == stub_exception, f"{name}: an exception in one and not the other"
            for base in bases:
                runtime_base = getattr(_tlbsim, base, None) or getattr(__builtins__, base, None)
                if isinstance(runtime_base, type):
                    assert issubclass(value, runtime_base), f"{name}: the binding's class is not a {base}"
        elif isinstance(node, ast.FunctionDef):
            assert callable(value) and not isinstance(value, type), f"{name}: a function in the stub only"
        else:
            assert not callable(value), f"{name}: an attribute in the stub, callable in the binding"


def _stub_parameters(node: ast.FunctionDef) -> list[tuple[str, bool]]:
    args = node.args
    positional = args.posonlyargs + args.args
    with_default = len(positional) - len(args.defaults)
    params = [(a.arg, i >= with_default) for i, a in enumerate(positional)]
    params += [(a.arg, d is not None) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    return params


def test_functions_take_the_stubs_parameters() -> None:
    runtime = exported()
    for name, node in stub_declarations().items():
        if not isinstance(node, ast.FunctionDef) or name not in runtime:
            continue
        signature = inspect.signature(runtime[name])  # type: ignore[arg-type]
        actual = [(p.name, p.default is not inspect.Parameter.empty) for p in signature.parameters.values()]
        assert actual == _stub_parameters(node), f"{name}{signature} in the binding"
