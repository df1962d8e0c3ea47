"""Parameters tied between two modules, and which ``fully_shard`` group a module lands in.

- ``ties(facts)``: each ``A.x.w = A.y.w`` of the file (both sides dotted names under one
  head, no imported name): ``model.lm_head.weight = model.embed.weight`` in a function (the
  tie of that object), or ``self.lm_head.weight = self.embed.weight`` in a method of a class
  of this file (the tie of every instance), where the method is ``__init__`` or is called
  somewhere in the file (``tie_weights()``).  Sharing a whole submodule
  (``self.decoder.embed = self.encoder.embed``) is a tie of its parameters too.
- ``shard_groups(facts, function)``: the ``fully_shard`` calls of ``function`` (torch's, any
  alias) as groups of dotted names: ``fully_shard(m)`` one group; ``fully_shard([a, b])``
  one group of both; ``for m in (a, b): fully_shard(m)`` one group per element.
- ``instance_class(facts, name_node, ctx, order)``: the class of this file an object comes
  from (every source a call of that class), for ties declared in a class.
- ``tests_identity(test)``: an ``if`` that asks whether two parameters are one object.
- ``project_class_ties(facts, name_node, ctx, order)``: the ties of a class of another project
  file the object is built from (``model = Llama(cfg)``), from the project index.
- ``ties_word_embeddings(facts, name_node, ctx, order)``: the object is a transformers model
  loaded with ``tie_word_embeddings=True`` said in the file (``from_pretrained(...,
  tie_word_embeddings=True)``, ``from_config(config)`` with ``config`` from such a call or
  ``AutoConfig.from_pretrained(..., tie_word_embeddings=True)``): its output embedding
  (``lm_head``, ``get_output_embeddings()``) shares the input embedding's weight
  (``embed_tokens``, ``wte``, ``word_embeddings``, ``get_input_embeddings()``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.dataflow import sources
from fsdp_lint.facts.fsdp_modules import FsdpWrap, fsdp_modules
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import Binding, Context, ModuleFacts
from fsdp_lint.facts.scopes import calls_by_callee_name, function_info, latest_binding
from fsdp_lint.facts.values import first_positional, keyword_args, literal_bool


@dataclass(eq=False)
class Tie:
    binding: Binding
    head: str  # "self" (a class's tie) or the object's name (``model``)
    class_def: Optional[cst.ClassDef]  # the class, for a tie on ``self``
    first: str  # the assigned path, relative to ``head`` (``lm_head.weight``)
    second: str  # the path it is tied to (``embed.weight``)

    def full(self, path: str) -> str:
        return f"{self.head}.{path}"


@dataclass(eq=False)
class ShardGroup:
    wrap: FsdpWrap
    names: Tuple[str, ...]  # the dotted names of the modules this group shards


def _split(dotted: str) -> Optional[Tuple[str, str]]:
    head, _, rest = dotted.partition(".")
    return (head, rest) if "." in rest else None  # at least ``head.module.param``


def _compute_ties(facts: ModuleFacts) -> List[Tie]:
    called = {name for (attr, name) in calls_by_callee_name(facts) if attr}
    found: List[Tie] = []
    for binding in facts.bindings:
        if binding.kind != "assign" or binding.index is not None or not isinstance(binding.value, cst.Attribute):
            continue
        value = dotted_name(binding.value)
        if value is None or facts.qualname(binding.value) is not None:
            continue
        target, source = _split(binding.target), _split(value)
        if target is None or source is None or target[0] != source[0] or target[1] == source[1]:
            continue
        head = target[0]
        if target[1].startswith(source[1] + ".") or source[1].startswith(target[1] + "."):
            continue  # one inside the other: not two modules
        class_def = None
        if head == "self":
            function = binding.ctx.function
            info = function_info(facts, function) if function is not None else None
            if info is None or info.class_def is None or (info.name != "__init__" and info.name not in called):
                continue
            class_def = info.class_def
        found.append(Tie(binding, head, class_def, target[1], source[1]))
    return found


def ties(facts: ModuleFacts) -> List[Tie]:
    return facts.cached("ties", _compute_ties)


HF_LOADERS = frozenset({"from_pretrained", "from_config", "from_dict"})
# transformers' names of the input and output embeddings of a model whose word embeddings are tied
INPUT_EMBEDDINGS = ("embed_tokens", "wte", "word_embeddings", "embed_in", "get_input_embeddings()")
OUTPUT_EMBEDDINGS = ("lm_head", "embed_out", "get_output_embeddings()")
_ACCESSORS = frozenset({"get_input_embeddings", "get_output_embeddings"})


def _module_name(facts: ModuleFacts, expr: cst.BaseExpression) -> Optional[str]:
    """A dotted name, or ``m.get_input_embeddings()`` / ``m.get_output_embeddings()`` as text."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _ACCESSORS \
            and not expr.args and facts.qualname(expr.func) is None:
        receiver = dotted_name(expr.func.value)
        return f"{receiver}.{expr.func.attr.value}()" if receiver is not None else None
    return dotted_name(expr)


def _says_tied(facts: ModuleFacts, call: cst.Call) -> bool:
    arg = keyword_args(call).get("tie_word_embeddings")
    return arg is not None and literal_bool(arg.value) is True


def ties_word_embeddings(facts: ModuleFacts, head: cst.BaseExpression, ctx: Context, order: int) -> bool:
    found = sources(facts, head, ctx, order)
    if not found.complete or not found.found:
        return False
    for source in found.found:
        call = source.expr
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
                and call.func.attr.value in HF_LOADERS):
            return False
        if _says_tied(facts, call):
            continue
        config = keyword_args(call).get("config") or (first_positional(call) if call.func.attr.value != "from_pretrained" else None)
        configs = sources(facts, config.value, source.ctx, source.order) if config is not None else None
        if configs is None or not configs.complete or not configs.found or not all(
            isinstance(c.expr, cst.Call) and _says_tied(facts, c.expr) for c in configs.found
        ):
            return False
    return True


def _elements(facts: ModuleFacts, wrap: FsdpWrap) -> List[Tuple[str, ...]]:
    """The groups one ``fully_shard`` call makes, as dotted names (empty: unreadable)."""
    arg = first_positional(wrap.site.node)
    if arg is None:
        return []
    value = arg.value
    if isinstance(value, (cst.List, cst.Tuple)):
        names = tuple(_module_name(facts, e.value) for e in value.elements)
        return [names] if names and None not in names else []
    name = _module_name(facts, value)
    if name is None:
        return []
    loop_var = latest_binding(facts, name, wrap.site.ctx, wrap.site.order, kinds=("assign", "for", "with"))
    if loop_var is not None and loop_var.kind == "for" and loop_var.ctx.function is wrap.site.ctx.function:
        if isinstance(loop_var.value, (cst.List, cst.Tuple)):  # one fully_shard per element
            names = tuple(_module_name(facts, e.value) for e in loop_var.value.elements)
            return [(n,) for n in names] if names and None not in names else []
        return []  # ``for layer in model.layers``: modules it cannot name
    return [(name,)]


def shard_groups(facts: ModuleFacts, function) -> List[ShardGroup]:
    key = ("shard_groups", id(function))
    if key not in facts._cache:
        groups = []
        for wrap in fsdp_modules(facts).fsdp2_wraps:
            if wrap.through is None and wrap.site.ctx.function is function:
                groups.extend(ShardGroup(wrap, names) for names in _elements(facts, wrap))
        facts._cache[key] = groups
    return facts._cache[key]


def group_of(groups: List[ShardGroup], path: str) -> Optional[ShardGroup]:
    """The group whose module is the innermost one holding ``path`` (a dotted name)."""
    best, depth = None, -1
    for group in groups:
        for name in group.names:
            if (path == name or path.startswith(name + ".")) and name.count(".") > depth:
                best, depth = group, name.count(".")
    return best


def instance_class(facts: ModuleFacts, head: cst.BaseExpression, ctx: Context, order: int) -> Optional[cst.ClassDef]:
    """The class of this file every value of ``head`` comes from (``model = TiedLM(cfg)``)."""
    if isinstance(head, cst.Name) and head.value == "self":
        return ctx.class_def
    found = sources(facts, head, ctx, order)
    classes = set()
    for source in found.found:
        call = source.expr
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and facts.qualname(call.func) is None):
            return None
        class_def = facts.classes.get(call.func.value)
        if class_def is None:
            return None
        classes.add(id(class_def))
    if not found.complete or len(classes) != 1:
        return None
    return facts.classes[found.found[0].expr.func.value]


def project_class_ties(facts: ModuleFacts, head: cst.BaseExpression, ctx: Context, order: int) -> List[Tuple[str, str, str]]:
    """The ties of the class of another project file every value of ``head`` comes from
    (``model = Llama(config)`` with ``from model.llama import Llama``, whose ``__init__``
    sets ``self.output.weight = self.embedding.weight``): (first path, second path, place),
    read off the project index (``ProjectView.class_ties``); [] when not known."""
    project = facts.project
    if project is None:
        return []
    found = sources(facts, head, ctx, order)
    specs = set()
    for source in found.found:
        call = source.expr
        if not isinstance(call, cst.Call):
            return []
        spec = facts.imports.project_spec(dotted_name(call.func))
        if spec is None:
            return []
        specs.add(spec)
    if not found.complete or len(specs) != 1:
        return []
    return project.class_ties(specs.pop())


def tests_identity(test: cst.BaseExpression) -> bool:
    """``test`` asks whether two parameters are one object (``model.output.weight is
    embed.weight``, also inside ``and``/``or``/``not``): the code checks a tie itself."""
    stack = [test]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Comparison):
            if any(isinstance(c.operator, (cst.Is, cst.IsNot)) and isinstance(c.comparator, cst.Attribute)
                   for c in node.comparisons) and isinstance(node.left, cst.Attribute):
                return True
        elif isinstance(node, cst.BooleanOperation):
            stack.extend((node.left, node.right))
        elif isinstance(node, cst.UnaryOperation):
            stack.append(node.expression)
    return False
