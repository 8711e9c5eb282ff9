"""The one JSON encoding of tlbsim's files and configs: what ``json.dumps`` cannot write by
itself, written as the nearest JSON value.

Pass :func:`json_default` as ``default=`` to ``json.dump``/``json.dumps``: numpy scalars
become Python numbers, paths strings, sets lists; anything else is a TypeError, so that a
value nobody meant to write is found rather than written as its repr.
:func:`json_default_or_str` writes anything else as its ``str()``, for reports that must be
written whatever they hold (``tlbsim validate``'s).
"""

from __future__ import annotations

import os
import sys


def json_default(obj: object) -> object:
    # numpy is looked up, not imported: a numpy scalar exists only once numpy is imported,
    # and `import tlbsim` should not pay for numpy.
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(obj, (numpy.floating, numpy.integer)):
        return obj.item()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"value of type {type(obj).__name__} is not JSON serialisable")


def json_default_or_str(obj: object) -> object:
    try:
        return json_default(obj)
    except TypeError:
        return str(obj)
