"""The package's layering (ARCHITECTURE.md): a module imports only modules of its own or a
lower layer, wherever the import statement stands.  Breaking it (a rule importing the
verifier, facts importing a rule, the engine importing the command line) fails here."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "fsdp_lint"

# lowest first; a module's box is the longest prefix listed here
LAYERS = [
    ["fsdp_lint", "fsdp_lint.lazy_libcst", "fsdp_lint.diagnostics", "fsdp_lint.source", "fsdp_lint.noqa",
     "fsdp_lint.interrupt"],
    ["fsdp_lint.facts", "fsdp_lint.fixes", "fsdp_lint.positions"],
    ["fsdp_lint.rules", "fsdp_lint.config"],
    ["fsdp_lint.engine", "fsdp_lint.slicing", "fsdp_lint.screen"],
    ["fsdp_lint.fixer", "fsdp_lint.output"],
    ["fsdp_lint.check", "fsdp_lint.cache", "fsdp_lint.files"],
    ["fsdp_lint.verify", "fsdp_lint.scenarios", "fsdp_lint.docs", "fsdp_lint.server", "fsdp_lint.flake8_plugin"],
    ["fsdp_lint.cli", "fsdp_lint.__main__"],
]
RANK = {box: rank for rank, boxes in enumerate(LAYERS) for box in boxes}


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _box(module: str) -> str:
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in RANK:
            return ".".join(parts[:end])
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS and ARCHITECTURE.md")


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fsdp_lint") and not node.level:
            yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("fsdp_lint"):
                    yield node.lineno, alias.name


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "scenarios" not in p.parts or p.name in ("registry.py", "__init__.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module(p))
def test_imports_go_down_the_layers(path):
    here = _box(_module(path))
    for line, target in _imports(path):
        there = _box(target)
        assert RANK[there] <= RANK[here], f"{_module(path)}:{line} imports {target} ({there} is above {here})"


def test_rules_and_facts_never_reach_the_verifier_or_the_command():
    for path in list((PACKAGE / "rules").glob("*.py")) + list((PACKAGE / "facts").glob("*.py")):
        for line, target in _imports(path):
            assert not target.startswith(("fsdp_lint.verify", "fsdp_lint.scenarios", "fsdp_lint.engine",
                                          "fsdp_lint.check", "fsdp_lint.cli")), f"{path.name}:{line} imports {target}"


def test_facts_and_rules_have_no_function_level_imports():
    """Facts and rules import at module level (libcst through ``fsdp_lint.lazy_libcst``)."""
    for path in list((PACKAGE / "rules").glob("*.py")) + list((PACKAGE / "facts").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    assert not isinstance(inner, (ast.Import, ast.ImportFrom)), (
                        f"{path.name}:{inner.lineno} imports inside {node.name}()"
                    )
