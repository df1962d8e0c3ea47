"""Mutants of the fixtures for the gate's safety net (``tests/test_gate.py``): each mutant
changes a few details of a real-looking file, the details on which a stage in front of
libcst could read the code differently from the facts (a literal ``None`` where a value
was, a keyword dropped or passed by position or through ``**``, a comparison flipped, a test
negated, a statement put under a rank test or another test, a name or an import's alias
spelled another way, code moved into a function).  What a mutant means
does not matter: the net asks only that the gate on and off give the same diagnostics.

Mutants are written with ``ast.unparse`` (comments and ``# noqa`` lines are lost, which
the comparison does not mind), from a fixed seed, so a failure is reproduced by the same
seed."""

from __future__ import annotations

import ast
import random
from pathlib import Path
from typing import Iterator, List, Tuple

# names a local may be renamed to: spellings the facts read as rank values, flags or models
SPELLINGS = ["rank", "local_rank", "global_rank", "is_main", "is_master", "main_process", "model", "net",
             "module", "fsdp_model", "accelerator", "trainer", "optimizer", "group", "cfg", "_rank"]
LITERALS = [None, True, False, 0, 1, -1, 2, "cpu", "cuda", "RANK", "LOCAL_RANK", "fsdp"]


class _Mutator(ast.NodeTransformer):
    def __init__(self, rng: random.Random, rate: float, renames) -> None:
        self.rng, self.rate, self.renames = rng, rate, renames

    def _hit(self) -> bool:
        return self.rng.random() < self.rate

    def visit_Name(self, node: ast.Name):
        new = self.renames.get(node.id)
        return ast.copy_location(ast.Name(id=new, ctx=node.ctx), node) if new else node

    def visit_arg(self, node: ast.arg):
        self.generic_visit(node)
        new = self.renames.get(node.arg)
        if new:
            node.arg = new
        return node

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        keywords = []
        for keyword in node.keywords:
            if keyword.arg is not None and self._hit():
                choice = self.rng.randrange(5)
                if choice == 4 and not any(type(a) is ast.Starred for a in node.args):
                    node.args.append(keyword.value)  # passed by position instead
                    continue
                if choice == 0:
                    keyword = ast.keyword(arg=keyword.arg, value=ast.Constant(self.rng.choice(LITERALS)))
                elif choice == 1:
                    continue  # dropped
                elif choice == 2:  # passed through a ``**`` dict
                    keywords.append(ast.keyword(arg=None, value=ast.Call(
                        func=ast.Name(id="dict", ctx=ast.Load()), args=[], keywords=[keyword])))
                    continue
                else:
                    keyword = ast.keyword(arg=keyword.arg, value=ast.Name(id="cfg_value", ctx=ast.Load()))
            keywords.append(keyword)
        node.keywords = keywords
        if node.args and self._hit():
            index = self.rng.randrange(len(node.args))
            node.args[index] = ast.Constant(self.rng.choice(LITERALS))
        if self._hit():
            node.keywords.append(ast.keyword(arg=self.rng.choice(["group", "process_group", "writeback",
                                                                  "use_orig_params", "rank0_only"]),
                                             value=ast.Constant(self.rng.choice(LITERALS))))
        return node

    def visit_Compare(self, node: ast.Compare):
        self.generic_visit(node)
        if self._hit():
            flip = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE,
                    ast.LtE: ast.Gt, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
            node.ops = [flip.get(type(op), type(op))() for op in node.ops]
        if self._hit() and node.comparators:
            node.comparators[-1] = ast.Constant(self.rng.choice(LITERALS))
        return node

    def visit_If(self, node: ast.If):
        self.generic_visit(node)
        if self._hit():
            node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)
        return node

    def visit_Constant(self, node: ast.Constant):
        if type(node.value) in (int, str, bool) and self._hit():
            return ast.copy_location(ast.Constant(self.rng.choice(LITERALS)), node)
        return node


def _local_names(tree: ast.Module) -> List[str]:
    """Names the file binds (assignment targets, parameters, loop targets), not imports."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.arg) and node.arg not in ("self", "cls"):
            found.add(node.arg)
    return sorted(found)


def _into_function(tree: ast.Module) -> ast.Module:
    """The module's statements after its imports, moved into ``def main():`` called at the end."""
    imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    rest = [s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))]
    if not rest:
        return tree
    main = ast.FunctionDef(name="main", args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                                            defaults=[]),
                           body=rest, decorator_list=[], returns=None)
    call = ast.Expr(ast.Call(func=ast.Name(id="main", ctx=ast.Load()), args=[], keywords=[]))
    return ast.Module(body=[*imports, main, call], type_ignores=[])


# tests a statement may be put under: rank tests of several shapes, and tests of no rank
GUARDS = ["dist.get_rank() == 0", "rank == 0", "int(os.environ['LOCAL_RANK']) == 0", "args.is_main_process",
          "accelerator.is_main_process", "step % 10 == 0", "torch.cuda.is_available()", "use_fsdp"]


class _Guarder(ast.NodeTransformer):
    """Puts a statement of a function body here and there under ``if <test>:``."""

    def __init__(self, rng: random.Random, rate: float) -> None:
        self.rng, self.rate = rng, rate

    def _body(self, body):
        out = []
        for statement in body:
            if (not isinstance(statement, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef,
                                           ast.AsyncFunctionDef, ast.Return))
                    and self.rng.random() < self.rate):
                test = ast.parse(self.rng.choice(GUARDS), mode="eval").body
                statement = ast.If(test=test, body=[statement], orelse=[])
            out.append(statement)
        return out

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        node.body = self._body(node.body)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef


def _respell_imports(tree: ast.Module, rng: random.Random) -> ast.Module:
    """One ``import a.b as x`` / ``from a import b as x`` gets another alias, used
    everywhere the old one was."""
    aliases = [alias for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
               for alias in node.names if alias.name != "*"]
    if not aliases:
        return tree
    alias = rng.choice(aliases)
    old = alias.asname or alias.name.split(".")[0]
    if "." in alias.name and alias.asname is None:
        return tree  # ``import a.b`` binds ``a``: left as it is
    new = f"{old}_alias"
    alias.asname = new
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == old:
            node.id = new
    return tree


def mutate(text: str, rng: random.Random, rate: float = 0.08) -> str:
    tree = ast.parse(text)
    names = _local_names(tree)
    renames = {}
    for name in rng.sample(names, min(len(names), rng.randint(0, 2))):
        renames[name] = rng.choice(SPELLINGS)
    tree = _Mutator(rng, rate, renames).visit(tree)
    if rng.random() < 0.3:
        tree = _Guarder(rng, rate).visit(tree)
    if rng.random() < 0.2:
        tree = _respell_imports(tree, rng)
    if rng.random() < 0.15:
        tree = _into_function(tree)
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def mutants(paths, per_file: int, seed: int) -> Iterator[Tuple[Path, int, str]]:
    """(fixture, index, mutant text) for each fixture that parses, ``per_file`` each."""
    rng = random.Random(seed)
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
            ast.parse(text)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for index in range(per_file):
            try:
                yield path, index, mutate(text, rng)
            except (RecursionError, ValueError, SyntaxError):
                continue
