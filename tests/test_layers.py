"""The package's layering (ARCHITECTURE.md): a module imports only modules of its own or a
lower layer, wherever the import statement stands.  Breaking it (a rule importing the
verifier, facts importing a rule, the engine importing the command line) fails here, and
so do an import cycle and an import inside a function that ``LAZY_IMPORTS`` does not name."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "fsdp_lint"

# lowest first; a module's box is the longest prefix listed here
LAYERS = [
    ["fsdp_lint", "fsdp_lint.lazy_libcst", "fsdp_lint.diagnostics", "fsdp_lint.source", "fsdp_lint.noqa",
     "fsdp_lint.interrupt", "fsdp_lint.notebook", "fsdp_lint.versions", "fsdp_lint.code_identity"],
    ["fsdp_lint.facts", "fsdp_lint.fixes", "fsdp_lint.positions"],
    ["fsdp_lint.rules", "fsdp_lint.config", "fsdp_lint.launch", "fsdp_lint.project"],
    ["fsdp_lint.engine", "fsdp_lint.slicing", "fsdp_lint.screen"],
    ["fsdp_lint.fixer", "fsdp_lint.output"],
    ["fsdp_lint.check", "fsdp_lint.cache", "fsdp_lint.files", "fsdp_lint.baseline"],
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


ALL_FILES_FOR_RULE_IMPORTS = sorted(PACKAGE.rglob("*.py"))
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


def test_no_module_reaches_into_a_rule_module():
    """What a rule knows that another stage needs (a vocabulary, a test on a name) lives in
    facts/, where both import it: no module imports a rule's module by name (the registry
    in rules/__init__.py discovers them), so neither the ``ast`` screen nor another rule
    copies or borrows a rule's private helper (issue 25, item 1)."""
    for path in ALL_FILES_FOR_RULE_IMPORTS:
        for line, target in _imports(path):
            assert not target.startswith("fsdp_lint.rules.fsd"), f"{_module(path)}:{line} imports {target}"


def test_output_formats_render_diagnostics_only():
    """A format turns diagnostics into text: it applies no fix through the fixer and asks
    the engine for nothing (codes and a fix's result belong with the diagnostics), so the
    same findings render alike from the CLI, the server and a baseline (issue 25, item 3)."""
    for path in sorted((PACKAGE / "output").glob("*.py")):
        for line, target in _imports(path):
            assert not target.startswith(("fsdp_lint.engine", "fsdp_lint.fixer", "fsdp_lint.rules",
                                          "fsdp_lint.screen", "fsdp_lint.slicing", "fsdp_lint.facts")) or (
                path.name == "sarif.py" and target == "fsdp_lint.rules"  # the rules' docs as SARIF metadata
            ), f"output/{path.name}:{line} imports {target}"


# The only imports that stand inside a function, each with its reason: (file under
# fsdp_lint/, function) -> the modules it may import there.  Anything else is imported at
# module level; a module that needs an optional dependency is imported only by the command
# that uses it (server/, verify/program/observe.py) or catches its absence at module level.
LAZY_IMPORTS = {
    # libcst costs about 0.3 s to import and most runs parse nothing (a clean file, `rules`,
    # files the markers or the ast stage settle): every module takes it as
    # `from fsdp_lint.lazy_libcst import cst`, loaded at the first attribute access.
    ("lazy_libcst.py", "_LazyLibcst.__getattr__"): {"libcst"},
    # One import per command, of the command's own module: `--version` loads none of the
    # linter, `check` neither the rule pages (package metadata), the verifier nor the
    # language server, whose pygls is an optional extra.
    ("cli/__init__.py", "main"): {
        "fsdp_lint.cli.check", "fsdp_lint.cli.rule", "fsdp_lint.cli.rules", "fsdp_lint.server",
        "fsdp_lint.verify.command",
    },
    # matplotlib (the optional 'report' extra, about 0.4 s to import) is loaded only when
    # `verify --report` writes a page: `verify` without it, and the linter, never load it.
    ("verify/html_report/__init__.py", "_page"): {"fsdp_lint.verify.html_report.page"},
    # Not deferred: runs once, when fsdp_lint.rules is imported, and imports every rule module
    # it finds (the registry is the rule files present).
    ("rules/__init__.py", "_discover"): {"importlib.import_module()"},
}
# Scenario programs are what torchrun runs, written as users write them: torch may be
# imported inside their functions, nothing else.
SCENARIO_PROGRAM_MAY_IMPORT = ("torch",)


def _function_level_imports(path: Path):
    """(function, module, line) for every import inside a function, ``importlib.import_module``
    and ``__import__`` calls included.  The function is the innermost one, qualified by its
    enclosing classes and functions."""
    found = []

    def visit(node, scope, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, scope + [child.name], in_function or not isinstance(child, ast.ClassDef))
                continue
            if in_function:
                where = ".".join(scope)
                if isinstance(child, ast.Import):
                    found.extend((where, alias.name, child.lineno) for alias in child.names)
                elif isinstance(child, ast.ImportFrom):
                    found.append((where, "." * child.level + (child.module or ""), child.lineno))
                elif isinstance(child, ast.Call):
                    name = ast.unparse(child.func)
                    if name in ("importlib.import_module", "import_module", "__import__", "importlib.__import__"):
                        found.append((where, f"{name}()", child.lineno))
            visit(child, scope, in_function)

    visit(ast.parse(path.read_text()), [], False)
    return found


ALL_FILES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: _module(p))
def test_imports_stand_at_module_level(path):
    """Imports stand at the top of the module (ARCHITECTURE.md), but for ``LAZY_IMPORTS``."""
    name = path.relative_to(PACKAGE).as_posix()
    program = path.parent.name == "scenarios" and path.name not in ("registry.py", "__init__.py")
    for function, module, line in _function_level_imports(path):
        if program and module.split(".")[0] in SCENARIO_PROGRAM_MAY_IMPORT:
            continue
        assert module in LAZY_IMPORTS.get((name, function), ()), (
            f"{name}:{line} imports {module} inside {function}(): import it at module level, or name it "
            "in LAZY_IMPORTS with the reason it cannot be"
        )


def test_lazy_imports_name_imports_that_exist():
    """An entry of ``LAZY_IMPORTS`` that no longer matches anything is removed, not kept."""
    present = {
        (path.relative_to(PACKAGE).as_posix(), function, module)
        for path in ALL_FILES
        for function, module, _ in _function_level_imports(path)
    }
    for (name, function), modules in LAZY_IMPORTS.items():
        for module in modules:
            assert (name, function, module) in present, f"LAZY_IMPORTS names {module} in {name} {function}()"


def _graph():
    """Which package module imports which (anywhere in the module); ``from package import
    submodule`` is an import of the submodule."""
    modules = {_module(path): path for path in ALL_FILES}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    dotted = f"{node.module}.{alias.name}"
                    targets.add(dotted if dotted in modules else node.module)
        graph[name] = sorted(t for t in targets if t in modules and t != name)
    return graph


def test_no_import_cycle():
    graph = _graph()
    done, path = set(), []

    def visit(name):
        if name in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(name):] + [name]))
        if name in done:
            return
        path.append(name)
        for target in graph[name]:
            visit(target)
        path.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)
