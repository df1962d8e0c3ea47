"""Methods that run a model's computation without its ``forward`` being called through
``__call__``, and FSDP2's ``register_fsdp_forward_method`` that makes one run FSDP's hooks.

- ``ENTRY_POINTS``: library methods that run a model's forward, or its submodules, from one
  of its own methods (``generate``, ``encode``, ``get_image_features``, ...).  FSD105 (FSDP1:
  ``FSDP.__getattr__`` hands back the inner model's method) reads all of them.
- ``CALL_THROUGH_SELF``: the ones among them that reach the model through ``self(...)``
  (transformers' ``GenerationMixin.generate`` calls ``self(**model_inputs)``), so a module's
  forward hooks run: FSDP2's do (FSD114 leaves them alone).
- ``in_file_method(facts, origin, name)``: for a module built from a class of this file, what
  its method ``name`` does: ``HOOKS`` (it calls ``self(...)``, also through the class's other
  methods), ``BYPASS`` (it calls a submodule the class builds, ``self.embed(...)``, that the
  file does not shard apart (``fully_shard(model.embed)``), or ``self.forward(...)``, and never
  ``self(...)``), or None (not a method of an in-file class, or nothing visible either way).
- ``uses_own_weights(facts, class_def, name)``: for FSDP1, whose root forward alone gathers
  the weights no nested unit owns, the ``self.X`` (a ``torch.nn`` layer with weights or an
  ``nn.Parameter`` the class builds itself) that method ``name`` computes with, also through
  its other methods and its ``forward``; ``runs_forward(facts, class_def, name)``: the
  ``self.X`` holding nested FSDP units (``unit_holders``: module classes, ``from_pretrained``
  models, ``torch.nn`` containers) that it runs; ``model_class_method(facts, origin, name)``:
  both, for the class a wrapped module is built from, of this file or (through the project
  index's "classes" part) of another project file.
- ``registered_forward_methods(facts)``: the method names this file registers with
  ``register_fsdp_forward_method``; ``None`` in the set when a name is not a literal.
"""

from __future__ import annotations

from typing import FrozenSet, Optional, Set

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.dataflow import handed_back, sources
from fsdp_lint.facts.helper_summary import argument
from fsdp_lint.facts.fsdp_modules import Origin, fsdp_modules
from fsdp_lint.facts.model import ModuleFacts
from fsdp_lint.facts.scopes import methods_of
from fsdp_lint.facts.values import first_positional, keyword_args, literal_string, positional_args

# Methods of a model that run its forward (or its submodules) from a method of its own:
# neither FullyShardedDataParallel nor nn.Module defines them.
ENTRY_POINTS = frozenset(
    {
        "generate",  # transformers GenerationMixin, most decoder models
        "encode_image", "encode_text",  # CLIP-style towers (open_clip)
        "get_image_features", "get_text_features",  # transformers CLIPModel and friends
        "encode", "decode",  # autoencoders (diffusers AutoencoderKL), seq2seq encoders
        "sample",  # diffusion models' sampling loops
    }
)
# ... of which these call the model itself (``self(...)``): its forward hooks run
CALL_THROUGH_SELF = frozenset({"generate"})

HOOKS = "hooks"
BYPASS = "bypass"
MAX_DEPTH = 3


def _built_from(facts: ModuleFacts, origin: Origin) -> Optional[cst.Name]:
    """The name of the class the module sharded by ``origin`` is built from, when every
    value it may have is a call of that one name (``model = Transformer(cfg)``, also moved
    or compiled: ``Transformer(cfg).cuda()``), given to the wrap or to the project helper
    that wraps it."""
    wrap = origin.wrap
    if wrap.through is not None:
        return None
    if wrap.summary is not None:  # a project helper's wrap: the argument for the parameter it wraps
        module = argument(wrap.summary, wrap.site.node, wrap.summary.wraps)
    else:
        first = first_positional(wrap.site.node) or keyword_args(wrap.site.node).get("module")
        module = first.value if first is not None else None
    if module is None:
        return None
    found = sources(facts, module, wrap.site.ctx, wrap.site.order, origin.via)
    names = {}
    for source in found.found:
        call = source.expr
        while handed_back(facts, call) is not None:  # ``Net(cfg).cuda()``
            call = handed_back(facts, call)
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Name)):
            return None
        names[call.func.value] = call.func
    if not found.complete or len(names) != 1:
        return None
    return names.popitem()[1]


def _class_of(facts: ModuleFacts, origin: Origin) -> Optional[cst.ClassDef]:
    """The class of this file the module sharded by ``origin`` is built from, when every
    value it may have is one call of that class (``model = Transformer(cfg)``)."""
    name = _built_from(facts, origin)
    if name is None or facts.qualname(name) is not None or name.value not in facts.classes:
        return None
    return facts.classes[name.value]


def project_class_of(facts: ModuleFacts, origin: Origin) -> Optional[str]:
    """What the class the module ``origin`` wraps is built from names through this file's
    imports, when it is imported (a class of another project file: ``from models import
    MAE``, then ``FSDP(MAE(cfg))``); where the project index looks it up."""
    name = _built_from(facts, origin)
    if name is None or name.value in facts.classes:
        return None
    return facts.imports.project_spec(name.value)


# ``torch.nn`` modules that hold parameters (a loss, an activation, dropout or pooling holds
# none: calling one outside the hooks touches no sharded parameter)
PARAMETER_MODULES = frozenset(
    {
        "Linear", "Bilinear", "LazyLinear", "Embedding", "EmbeddingBag", "LayerNorm", "RMSNorm", "GroupNorm",
        "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
        "ConvTranspose2d", "ConvTranspose3d", "MultiheadAttention", "RNN", "LSTM", "GRU", "Transformer",
        "TransformerEncoder", "TransformerDecoder", "TransformerEncoderLayer", "TransformerDecoderLayer",
        "Sequential", "PReLU",
    }
)


def _is_module_constructor(facts: ModuleFacts, value: cst.BaseExpression) -> bool:
    """A module with parameters: ``nn.Linear(...)`` (``PARAMETER_MODULES``), a class of this
    file, ``X.from_pretrained(...)``."""
    if not isinstance(value, cst.Call):
        return False
    qualname = facts.qualname(value.func) or ""
    if qualname.startswith("torch.nn."):
        return qualname.rsplit(".", 1)[-1] in PARAMETER_MODULES
    if isinstance(value.func, cst.Name) and not qualname and value.func.value in facts.classes:
        return True
    return isinstance(value.func, cst.Attribute) and value.func.attr.value in ("from_pretrained", "from_config")


def _self_assignments(facts: ModuleFacts, class_def: cst.ClassDef):
    """(``X``, value) for each plain ``self.X = value`` in the methods of ``class_def``."""
    for b in facts.bindings:
        if b.ctx.class_def is class_def and b.kind == "assign" and b.index is None \
                and b.target.startswith("self.") and b.target.count(".") == 1:
            yield b.target[len("self."):], b.value


def submodule_attrs(facts: ModuleFacts, class_def: cst.ClassDef) -> FrozenSet[str]:
    """``X`` for each ``self.X = <a module>`` in the methods of ``class_def``."""
    def compute(f):
        return frozenset(attr for attr, value in _self_assignments(f, class_def) if _is_module_constructor(f, value))
    return facts.cached(("submodule_attrs", id(class_def)), compute)


def _self_callee(func: cst.BaseExpression) -> Optional[str]:
    """The method of the instance a call's ``func`` runs: ``X`` for ``self.X``, ``forward``
    for ``self`` itself (``self(...)``)."""
    return "forward" if isinstance(func, cst.Name) and func.value == "self" else _self_attr(func)


def _self_attr(expr: cst.BaseExpression) -> Optional[str]:
    """``X`` when ``expr`` is ``self.X``."""
    if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
        return expr.attr.value
    return None


def sharded_apart(facts: ModuleFacts) -> FrozenSet[str]:
    """Last attribute names of the modules this file shards with ``fully_shard`` by a dotted
    name (``fully_shard(model.encoder)``: ``encoder``): a submodule of that name has FSDP
    hooks of its own, its call gathers its parameters."""
    from_wraps = fsdp_modules(facts).fsdp2_wraps
    return frozenset(w.wrapped.rsplit(".", 1)[-1] for w in from_wraps if w.wrapped and "." in w.wrapped)


def _method_does(facts: ModuleFacts, class_def: cst.ClassDef, name: str, depth: int) -> Optional[str]:
    infos = methods_of(facts, class_def, name)
    if len(infos) != 1 or depth > MAX_DEPTH:
        return None
    function = infos[0].node
    # submodules the root's own group holds: built by the class, not sharded apart
    modules = submodule_attrs(facts, class_def) - sharded_apart(facts)
    verdict = None
    for site in facts.calls:
        if site.ctx.function is not function:
            continue
        func = site.node.func
        if isinstance(func, cst.Name) and func.value == "self":
            return HOOKS
        attr = _self_attr(func)
        if attr is None:
            continue
        if attr == "forward":
            verdict = BYPASS
        elif methods_of(facts, class_def, attr):
            inner = _method_does(facts, class_def, attr, depth + 1)
            if inner == HOOKS:
                return HOOKS
            verdict = verdict or inner
        elif attr in modules:
            verdict = BYPASS
    return verdict


# ``torch.nn`` layers with weights: an FSDP1 auto-wrap policy (transformer layers, module
# classes of the model, ``ModuleWrapPolicy``) leaves them in the unit of the module that
# builds them, so on the root they are the root's own parameters
OWN_WEIGHT_LAYERS = frozenset(
    {
        "Linear", "Bilinear", "LazyLinear", "Embedding", "EmbeddingBag", "LayerNorm", "RMSNorm", "GroupNorm",
        "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
        "ConvTranspose2d", "ConvTranspose3d", "PReLU",
    }
)
_PARAMETER = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})


def own_weights(facts: ModuleFacts, class_def: cst.ClassDef) -> FrozenSet[str]:
    """``X`` for each ``self.X = nn.Linear(...)`` (``OWN_WEIGHT_LAYERS``) or ``self.X =
    nn.Parameter(...)`` in the methods of ``class_def``: weights the class holds itself."""
    def compute(f):
        found = set()
        for attr, value in _self_assignments(f, class_def):
            qualname = (f.qualname(value.func) or "") if isinstance(value, cst.Call) else ""
            if qualname in _PARAMETER or qualname.startswith("torch.nn.") and qualname.rsplit(".", 1)[-1] in OWN_WEIGHT_LAYERS:
                found.add(attr)
        return frozenset(found)
    return facts.cached(("own_weights", id(class_def)), compute)


def _self_attributes(node: cst.CSTNode):
    """Every ``self.X`` in ``node`` that computes with X (nested functions and classes
    excluded): not the receiver of a method ``torch.nn.Module`` defines
    (``self.head.parameters()``, ``self.head.train()``: no weight is computed with)."""
    def computed(current):
        if _self_attr(current) is not None:
            return ()  # ``self.X`` itself, not ``self``
        if isinstance(current, cst.Call) and isinstance(current.func, cst.Attribute) \
                and current.func.attr.value in torch_api.NN_MODULE_METHODS:
            return current.args  # its arguments only
        return current.children
    return (n for n in _nodes(node, computed) if _self_attr(n) is not None)


def uses_own_weights(facts: ModuleFacts, class_def: cst.ClassDef, name: str, depth: int = 0) -> Optional[str]:
    """``self.X`` when the method ``name`` of ``class_def`` computes with a weight the class
    holds itself (``own_weights``: it calls ``self.head(...)`` or reads ``self.pos_embed``),
    also through the class's other methods it calls (``self.encode(...)``) and its
    ``forward`` (``self(...)``, ``self.forward(...)``); None when none is shown."""
    infos = methods_of(facts, class_def, name)
    if len(infos) != 1 or depth > MAX_DEPTH:
        return None
    weights = own_weights(facts, class_def)
    function = infos[0].node
    for attribute in _self_attributes(function.body):
        if attribute.attr.value in weights:
            return f"self.{attribute.attr.value}"
    for site in facts.calls:
        if site.ctx.function is not function:
            continue
        func = site.node.func
        callee = _self_callee(func)
        if callee is not None and callee != name and methods_of(facts, class_def, callee):
            found = uses_own_weights(facts, class_def, callee, depth + 1)
            if found is not None:
                return found
    return None


_CONTAINERS = frozenset({"torch.nn.ModuleList", "torch.nn.ModuleDict", "torch.nn.Sequential"})


def unit_holders(facts: ModuleFacts, class_def: cst.ClassDef) -> FrozenSet[str]:
    """``X`` for each submodule ``self.X`` of ``class_def`` that an auto-wrap policy may make
    (or fill with) nested FSDP units: a module class of this file, a ``from_pretrained``
    model, a ``torch.nn`` container (``nn.ModuleList(Block(d) for ...)``); not a ``torch.nn``
    layer with weights of its own (``own_weights``)."""
    def compute(f):
        found = set(submodule_attrs(f, class_def)) - own_weights(f, class_def)
        found.update(attr for attr, value in _self_assignments(f, class_def)
                     if isinstance(value, cst.Call) and f.qualname(value.func) in _CONTAINERS)
        return frozenset(found)
    return facts.cached(("unit_holders", id(class_def)), compute)


def runs_forward(facts: ModuleFacts, class_def: cst.ClassDef, name: str, depth: int = 0) -> Optional[str]:
    """What the method ``name`` of ``class_def`` runs that holds the model's nested FSDP
    units (``unit_holders``): ``self(...)``/``self.forward(...)`` (the class's forward, read
    the same way), ``self.blocks[i](...)``, ``self.encoder(...)``, or a loop ``for block in
    self.blocks: block(...)``; also through the class's other methods.  None when none is shown."""
    infos = methods_of(facts, class_def, name)
    if len(infos) != 1 or depth > MAX_DEPTH:
        return None
    function = infos[0].node
    holders = unit_holders(facts, class_def)
    loop_names = {}
    for node in _nodes(function.body):
        if isinstance(node, cst.For) and isinstance(node.target, cst.Name):
            attr = _self_attr(node.iter)
            if attr in holders:
                loop_names[node.target.value] = attr
    for site in facts.calls:
        if site.ctx.function is not function:
            continue
        func = site.node.func
        if isinstance(func, cst.Subscript):
            func = func.value  # ``self.blocks[i](x)``
        if isinstance(func, cst.Name) and func.value in loop_names:
            return f"self.{loop_names[func.value]}"
        callee = _self_callee(func)
        if callee is None:
            continue
        if callee in holders:
            return f"self.{callee}"
        if callee != name and methods_of(facts, class_def, callee):
            found = runs_forward(facts, class_def, callee, depth + 1)
            if found is not None:
                return found
    return None


def _nodes(node: cst.CSTNode, children=lambda current: current.children):
    """Every node in ``node`` in source order, nested functions and classes excluded;
    ``children``: what of a node to walk into."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if current is not node and isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        stack.extend(reversed(children(current)))


def model_class_method(facts: ModuleFacts, origin: Origin, name: str) -> Optional[dict]:
    """What the method ``name`` of the class the module ``origin`` wraps is built from does
    (a class of this file, or of another project file through the imports): {"label":
    ```Class.method``` (and where, for another file), "weight": the ``self.X`` of
    ``uses_own_weights`` or None, "forward": the ``self.X`` of ``runs_forward`` or None};
    None when the class is not found or the method does neither."""
    class_def = _class_of(facts, origin)
    if class_def is not None:
        weight, forward = uses_own_weights(facts, class_def, name), runs_forward(facts, class_def, name)
        if weight is None and forward is None:
            return None
        return {"label": f"`{class_def.name.value}.{name}`", "weight": weight, "forward": forward}
    spec = project_class_of(facts, origin) if facts.project is not None else None
    found = facts.project.class_method(spec, name) if spec is not None else None
    if found is None:
        return None
    entry, place = found
    return {"label": f"`{spec.rsplit('.', 1)[-1]}.{name}` ({place})", "weight": entry.get("weight"),
            "forward": entry.get("forward")}


def in_file_method(facts: ModuleFacts, origin: Origin, name: str) -> Optional[str]:
    """``HOOKS``, ``BYPASS`` or None for ``m.<name>(...)`` on the module ``origin`` shards."""
    class_def = _class_of(facts, origin)
    if class_def is None:
        return None
    return _method_does(facts, class_def, name, 0)


def defined_in_file_class(facts: ModuleFacts, origin: Origin, name: str) -> bool:
    """The module's class is of this file and defines ``name`` itself."""
    class_def = _class_of(facts, origin)
    return class_def is not None and bool(methods_of(facts, class_def, name))


def registered_forward_methods(facts: ModuleFacts) -> Set[Optional[str]]:
    """Method names given to ``register_fsdp_forward_method(module, name)`` in this file
    (None: a name that is not a string literal, which may be any)."""
    def compute(f):
        names: Set[Optional[str]] = set()
        for site in f.calls:
            if f.qualname(site.node.func) not in torch_api.REGISTER_FSDP_FORWARD_METHOD:
                continue
            args = positional_args(site.node)
            arg = args[1] if len(args) > 1 else keyword_args(site.node).get("method_name")
            names.add(literal_string(arg.value) if arg is not None else None)
        return names
    return facts.cached("registered_forward_methods", compute)
