"""Resolving expressions to qualified names from the module's own imports.

This replaces libcst's QualifiedNameProvider (about 10x the cost of the bare parse):
the module's import statements are collected during the one traversal and names are
resolved afterwards, flow-insensitively.  A name bound both by a torch import and by
something else (another library's import, a class or function of the user's, an
assignment) is ambiguous and resolves to nothing: precision first.  Two torch paths of
one API (an ``except ImportError`` fallback to where an older torch kept it) are not.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set

from fsdp_lint.lazy_libcst import cst

_AMBIGUOUS = object()


def dotted_name(expr: cst.BaseExpression) -> Optional[str]:
    """``a.b.c`` for a Name/Attribute chain; None for anything else (calls, subscripts)."""
    parts = []
    while isinstance(expr, cst.Attribute):
        parts.append(expr.attr.value)
        expr = expr.value
    if isinstance(expr, cst.Name):
        parts.append(expr.value)
        return ".".join(reversed(parts))
    return None


def target_names(target) -> List[str]:
    """The dotted names an assignment or loop target binds (``(n, p), q``: n, p, q)."""
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in target_names(e.value)]
    name = dotted_name(target)
    return [name] if name is not None else []


def module_dotted(expr) -> str:
    """``a.b.c`` of an import's module expression (Name/Attribute only there)."""
    if hasattr(expr, "attr"):
        return f"{module_dotted(expr.value)}.{expr.attr.value}"
    return expr.value


def moved_within_torch(first: str, second: str) -> bool:
    """Two torch paths of one API that torch moved between releases: the fallback import of
    ``try: from torch.distributed.fsdp import fully_shard`` / ``except ImportError: from
    torch.distributed._composable.fsdp import fully_shard`` (or ``torch.distributed.tensor``
    / ``._tensor``) binds the same name to the same thing, whichever import runs; the first
    path stands for both (the API tables list every path)."""
    return first.startswith("torch.") and second.startswith("torch.") \
        and first.rsplit(".", 1)[-1] == second.rsplit(".", 1)[-1]


class ImportTable:
    def __init__(self) -> None:
        self._bindings: Dict[str, object] = {}
        self._local: Set[str] = set()
        self._aliases: Dict[str, cst.BaseExpression] = {}
        self.imported_modules: Set[str] = set()  # every module named in an import
        # names bound by relative imports (the user's own package, ``facts.helper_summary``):
        # ``from .utils import save`` binds ``save`` to ``.utils.save`` (one dot per level)
        self.relative: Dict[str, str] = {}

    # -- collection (called by the traversal) ---------------------------------
    def _bind(self, name: str, qualname: str) -> None:
        previous = self._bindings.get(name)
        if previous is None:
            self._bindings[name] = qualname
        elif previous != qualname and not (previous is not _AMBIGUOUS and moved_within_torch(previous, qualname)):
            self._bindings[name] = _AMBIGUOUS

    def add_import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = module_dotted(alias.name)
            self.imported_modules.add(full)
            if alias.asname is not None and hasattr(alias.asname.name, "value"):
                self._bind(alias.asname.name.value, full)
            else:
                head = full.split(".", 1)[0]
                self._bind(head, head)

    def add_import_from(self, node: cst.ImportFrom) -> None:
        if node.relative:  # the user's own package: kept apart, never a torch name
            self._add_relative(node)
            return
        if node.module is None:
            return
        base = module_dotted(node.module)
        self.imported_modules.add(base)
        if not isinstance(node.names, (list, tuple)):
            return  # ``import *``
        for alias in node.names:
            name = module_dotted(alias.name)
            bound = name
            if alias.asname is not None and hasattr(alias.asname.name, "value"):
                bound = alias.asname.name.value
            self._bind(bound, f"{base}.{name}")

    def _add_relative(self, node: cst.ImportFrom) -> None:
        if not isinstance(node.names, (list, tuple)):
            return
        base = "." * len(node.relative) + (module_dotted(node.module) if node.module is not None else "")
        for alias in node.names:
            name = module_dotted(alias.name)
            bound = alias.asname.name.value if alias.asname is not None and hasattr(alias.asname.name, "value") else name
            spec = f"{base}.{name}" if not base.endswith(".") else f"{base}{name}"
            previous = self.relative.get(bound)
            self.relative[bound] = spec if previous in (None, spec) else ""

    def project_spec(self, dotted: Optional[str]) -> Optional[str]:
        """What ``dotted`` names through the imports, relative ones included (``.utils.save``
        after ``from .utils import save``): where a project helper is looked up."""
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head in self._local:
            return None
        found = self.resolve(dotted)
        if found is not None:
            return found
        relative = self.relative.get(head) if head not in self._bindings and head not in self._aliases else None
        if not relative:
            return None
        return f"{relative}.{rest}" if rest else relative

    def add_local_definition(self, name: str) -> None:
        """A class, function or non-alias assignment binds ``name`` in this module."""
        self._local.add(name)

    def add_alias_assignment(self, name: str, value: cst.BaseExpression) -> None:
        """``FSDP = torch.distributed.fsdp.FullyShardedDataParallel``."""
        if name in self._aliases:
            self._local.add(name)
        self._aliases[name] = value

    # -- queries ---------------------------------------------------------------
    def resolve_head(self, name: str, _depth: int = 0) -> Optional[str]:
        if name in self._local:
            return None
        bound = self._bindings.get(name)
        if name in self._aliases:
            if bound is not None or _depth > 8:
                return None  # both imported and assigned: ambiguous
            target = dotted_name(self._aliases[name])
            if target is None or target == name:
                return None
            return self.resolve(target, _depth + 1)
        if bound is _AMBIGUOUS:
            return None
        return bound

    def resolve(self, dotted: Optional[str], _depth: int = 0) -> Optional[str]:
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        base = self.resolve_head(head, _depth)
        if base is None:
            return None
        return f"{base}.{rest}" if rest else base

    def qualname(self, expr: cst.BaseExpression) -> Optional[str]:
        return self.resolve(dotted_name(expr))

    def imports_from(self, package: str) -> bool:
        return any(m == package or m.startswith(package + ".") for m in self.imported_modules)
