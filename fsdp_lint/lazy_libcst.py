"""The one lazy import: ``cst``, libcst loaded on first use.

Importing libcst costs about 0.3 s; most runs (a clean pre-commit file, ``fsdp-lint
rules``, files the text markers or the ``ast`` stage rule out) never parse anything.  Every
module of the package takes libcst as ``from fsdp_lint.lazy_libcst import cst``: a module
object that imports libcst at its first attribute access (``cst.parse_module``,
``isinstance(node, cst.Call)``) and then holds libcst's names itself, so later lookups are
plain module attribute lookups.  Code must not touch ``cst.<name>`` at module level;
annotations are strings (``from __future__ import annotations``).
"""

from __future__ import annotations

import types


class _LazyLibcst(types.ModuleType):
    def __getattr__(self, name: str):
        import libcst  # the package's one deferred import (see the module docstring)

        self.__dict__.update({k: v for k, v in vars(libcst).items() if not k.startswith("__")})
        return getattr(libcst, name)


cst = _LazyLibcst("libcst")


def load() -> None:
    """Import libcst now rather than at the first parse (a worker process does, while the
    parent is still reading files)."""
    cst.Module  # noqa: B018 - the first attribute access imports libcst
