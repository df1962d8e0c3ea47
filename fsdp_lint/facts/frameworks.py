"""What training frameworks do with FSDP, read from their sources (pinned versions).

Sources (line numbers as of the versions named):
- accelerate 1.15.0 ``accelerator.py``: ``get_state_dict`` all-gathers under FSDP1
  (``model.state_dict()`` with ``FullStateDictConfig(offload_to_cpu=True, rank0_only=True)``,
  l. 4101-4107) and FSDP2 (``get_model_state_dict``, l. 4096-4100); ``save_model`` calls
  it (l. 3530); ``save_state``/``load_state`` run ``save_fsdp_model``/``load_fsdp_model``
  on every rank (l. 3701, 3849); ``wait_for_everyone``, ``gather``, ``gather_for_metrics``,
  ``reduce``, ``pad_across_processes`` are collectives in every distributed configuration
  (``state.py`` l. 412, ``utils/operations.py``).  ``save`` guards itself (main process only).
  ``prepare(model, optimizer)`` re-points the optimizer for FSDP2 only (l. 1766); under
  FSDP1 an optimizer built from the unwrapped model keeps stale parameters unless
  ``use_orig_params=True`` (``FullyShardedDataParallelPlugin`` defaults to False in code,
  ``utils/dataclasses.py`` l. 1938).
- transformers 5.24.0 ``trainer.py``: ``save_model`` all-gathers under FSDP with a full
  state dict (the Trainer default, l. 4105); under DDP it guards itself (``should_save``).
  ``evaluate`` (l. 2805) and ``predict`` (l. 3132) run ``evaluation_loop`` (l. 2904): the
  wrapped model's forward on each batch (``prediction_step``, l. 2996; under FSDP an
  all-gather of each unit's parameters) and ``accelerator.gather_for_metrics`` of the
  losses and logits (l. 3007-3026); neither guards itself.
- lightning 2.6.6: ``Fabric.save``/``Fabric.load`` end in ``self.barrier()`` (``fabric.py``
  l. 867, 915) in every multi-process strategy, and the docstring says "must be called on
  all processes"; ``Trainer.save_checkpoint`` builds the checkpoint (a full state dict under
  ``FSDPStrategy``) and ends in ``strategy.barrier`` (``pytorch/trainer/trainer.py``
  l. 1463-1465); the strategy names ``fsdp`` and ``fsdp_cpu_offload`` (``cpu_offload=True``)
  are registered in ``pytorch/strategies/fsdp.py`` l. 486-502.
- Methods a trainer calls once per training step (``STEP_HOOKS``): lightning 2.6.6
  ``pytorch/core/hooks.py`` (``on_train_batch_start``/``_end`` l. 68-80, ``on_before_zero_grad``,
  ``on_before_backward``, ``on_after_backward``, ``on_before_optimizer_step`` l. 260-299),
  ``pytorch/core/module.py`` (``training_step`` l. 710, ``backward`` l. 1120,
  ``configure_gradient_clipping`` l. 1278, ``optimizer_step`` l. 1337, ``optimizer_zero_grad``
  l. 1370), ``pytorch/callbacks/callback.py`` (the batch hooks, l. 76-91, 274-288);
  transformers 5.24.0 ``trainer_callback.py`` (``TrainerCallback``: ``on_step_begin``,
  ``on_pre_optimizer_step``, ``on_optimizer_step``, ``on_substep_end``, ``on_step_end``,
  l. 371-396) and ``trainer.py`` (``Trainer._inner_training_loop`` calls ``training_step``
  for every micro-batch, l. 1917, which calls ``compute_loss``, l. 2090).  Their step counters: Lightning's ``batch_idx`` argument and ``global_step``
  (of the module and the trainer), the Trainer state's ``global_step``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.call_shape import CallShape, of_cst
from fsdp_lint.facts.dataflow import dict_entries, item_writes, sources
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import CallSite, ModuleFacts
from fsdp_lint.facts.values import keyword_args, literal_string
from fsdp_lint.facts.walk import descendants

ACCELERATOR = frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"})
FABRIC = frozenset({"lightning.Fabric", "lightning.fabric.Fabric", "lightning_fabric.Fabric", "lightning.fabric.fabric.Fabric"})
LIGHTNING_TRAINER = frozenset({"lightning.Trainer", "lightning.pytorch.Trainer", "pytorch_lightning.Trainer"})
FSDP_PLUGIN = frozenset({"accelerate.FullyShardedDataParallelPlugin", "accelerate.utils.FullyShardedDataParallelPlugin"})

# framework -> methods every rank must call, in every distributed configuration
ALWAYS = {
    "accelerator": frozenset({"wait_for_everyone", "gather", "gather_for_metrics", "reduce", "pad_across_processes"}),
    "fabric": frozenset({"save", "load", "barrier", "all_gather", "all_reduce", "broadcast"}),
}
# framework -> methods that gather a sharded model when the job uses FSDP
WITH_FSDP = {
    "accelerator": frozenset({"get_state_dict", "save_model", "save_state", "load_state"}),
    "hf_trainer": frozenset({"save_model", "evaluate", "predict"}),
    # lightning 2.6.6 ``pytorch/trainer/trainer.py`` l. 1463-1465: ``dump_checkpoint`` (under
    # FSDP a full state dict, ``strategies/fsdp.py`` l. 505) then ``strategy.barrier``; counted
    # only where FSDP shows (not every DeepSpeed or DDP script)
    "lightning_trainer": frozenset({"save_checkpoint"}),
}
WITH_FSDP_METHODS = frozenset().union(*WITH_FSDP.values())
_FRAMEWORK_BY_NAME = {"accelerator": "accelerator", "fabric": "fabric"}

# the class a hook overrides -> its methods the trainer calls once per training step (or
# micro-step), the module docstring's sources
_LIGHTNING_BATCH_HOOKS = frozenset({
    "on_train_batch_start", "on_train_batch_end", "on_before_backward", "on_after_backward",
    "on_before_optimizer_step", "on_before_zero_grad",
})
STEP_HOOKS = {
    "a LightningModule": _LIGHTNING_BATCH_HOOKS | {
        "training_step", "backward", "configure_gradient_clipping", "optimizer_step", "optimizer_zero_grad"},
    "a Lightning callback": _LIGHTNING_BATCH_HOOKS,
    "a transformers TrainerCallback": frozenset({
        "on_step_begin", "on_pre_optimizer_step", "on_optimizer_step", "on_substep_end", "on_step_end"}),
    # ``Trainer._inner_training_loop`` calls ``training_step`` for every micro-batch, which
    # calls ``compute_loss`` (TRL's trainers derive from it)
    "a transformers Trainer": frozenset({"training_step", "compute_loss"}),
}
STEP_HOOK_NAMES = frozenset().union(*STEP_HOOKS.values())
# what those trainers count steps with (a test comparing one with ``==`` or ``in`` runs sparsely)
STEP_COUNTERS = frozenset({
    "batch_idx", "self.global_step", "self.trainer.global_step", "trainer.global_step", "pl_module.global_step",
    "state.global_step",
})
_LIGHTNING_CALLBACKS = frozenset({"lightning.Callback", "lightning.pytorch.Callback", "pytorch_lightning.Callback"})


def step_hook(facts: ModuleFacts, function) -> Optional[str]:
    """The trainer's class (a key of ``STEP_HOOKS``) whose per-step hook the method
    ``function`` (a ``FunctionInfo``) overrides: its class derives from that framework
    class (also through classes of this file), and its name is one of the hooks; None
    otherwise (a same-named method of any other class)."""
    if function.class_def is None or function.parent is not None or function.name not in STEP_HOOK_NAMES:
        return None
    kind = _trainer_class(facts, function.class_def)
    return kind if kind is not None and function.name in STEP_HOOKS[kind] else None


def _trainer_class(facts: ModuleFacts, class_def, depth: int = 0) -> Optional[str]:
    for base in class_def.bases:
        qualname = facts.qualname(base.value) or ""
        if qualname.startswith(("lightning.", "pytorch_lightning.")):
            if qualname.endswith("LightningModule"):
                return "a LightningModule"
            if qualname in _LIGHTNING_CALLBACKS or qualname.startswith(
                    ("lightning.pytorch.callbacks.", "pytorch_lightning.callbacks.")):
                return "a Lightning callback"
        if qualname.startswith("transformers.") and qualname.endswith("TrainerCallback"):
            return "a transformers TrainerCallback"
        if qualname.startswith(("transformers.", "trl.")) and qualname.endswith("Trainer"):
            return "a transformers Trainer"
        local = facts.classes.get(dotted_name(base.value) or "")
        if local is not None and local is not class_def and depth < 4:
            found = _trainer_class(facts, local, depth + 1)
            if found is not None:
                return found
    return None

# Text filters for the rules' markers (``Rule.marker_needs``), each true of every file in
# which the facts below could answer yes.
# - ``shows_fsdp``'s evidence all names FSDP: the package ``torch.distributed.fsdp``, the
#   plugin or a strategy class, an ``fsdp_plugin=``/``fsdp=`` keyword, a
#   strategy string with ``fsdp``, ``full_shard`` or ``shard_grad_op``;
SHOWS_FSDP_TEXT = re.compile(r"fsdp|FSDP|FullyShardedDataParallel|full_shard|shard_grad_op")


class AllOf:
    """A text filter that holds where each of its parts matches, tried in order: a string
    by ``in`` (a fast scan, first), a compiled pattern by ``search``; each a linear scan
    of the text.  It stands where a compiled pattern does (``search``, ``pattern``)."""

    def __init__(self, *parts) -> None:
        self.parts = parts
        self.pattern = " & ".join(p if isinstance(p, str) else p.pattern for p in parts)

    def search(self, text: str) -> bool:
        return all((p in text) if isinstance(p, str) else p.search(text) for p in self.parts)


# - an accelerate method every rank must call: its receiver is built by accelerate's
#   ``Accelerator(...)`` (under that name or an import alias) or named ``accelerator``
#   (``framework_of``; not ``torch.accelerator``'s own functions, nor Lightning's class);
ACCELERATOR_TEXT = AllOf("ccelerator", re.compile(
    rf"\bAccelerator[\s\\]*\(|\bAccelerator[ \t]+as\b"
    rf"|\baccelerator[\s\\]*\.[\s\\]*(?:{'|'.join(sorted(ALWAYS['accelerator']))})\b"))
# - a transformers Trainer method that gathers under FSDP: the text shows FSDP, and its
#   receiver is a transformers or TRL trainer (a ``Trainer`` class of an import of either,
#   or a ``trainer`` of a file importing one).
HF_TRAINER_FSDP_TEXT = AllOf("rainer", re.compile(r"Trainer|\btrainer\b"), re.compile(r"\b(?:transformers|trl)\b"),
                             SHOWS_FSDP_TEXT)
# - a Fabric method every rank must call, on a receiver named ``fabric`` (``self.fabric``);
_FABRIC_METHODS = "|".join(sorted(ALWAYS["fabric"]))
FABRIC_CALL_TEXT = re.compile(rf"\bfabric[\s\\]*\.[\s\\]*(?:{_FABRIC_METHODS})\b")
# - the same method on any receiver (one built by ``Fabric(...)``, under any name).
FABRIC_METHOD_TEXT = re.compile(rf"\.[\s\\]*(?:{_FABRIC_METHODS})\b")


def collective_method_needs() -> Dict[str, "re.Pattern[str]"]:
    """The framework methods ``framework_collective`` knows (but Fabric's ``save``, ``load``,
    ...: a rule finds those by ``FABRIC_CALL_TEXT``/``FABRIC_METHOD_TEXT``), each with the
    text filter that holds in every file where a call of it can be one every rank must
    make: ``SHOWS_FSDP_TEXT`` for those that gather only under FSDP (``HF_TRAINER_FSDP_TEXT``
    for one only a transformers Trainer has), ``ACCELERATOR_TEXT`` for accelerate's collectives."""
    needs = dict.fromkeys(ALWAYS["accelerator"], ACCELERATOR_TEXT)
    for method in WITH_FSDP_METHODS:
        owners = [framework for framework, methods in WITH_FSDP.items() if method in methods]
        needs[method] = HF_TRAINER_FSDP_TEXT if owners == ["hf_trainer"] else SHOWS_FSDP_TEXT
    return needs


def framework_of(facts: ModuleFacts, receiver: cst.BaseExpression, site: CallSite) -> Optional[str]:
    """Which framework object ``receiver`` is: by the constructor it comes from, else by its
    conventional name (``accelerator``, ``self.accelerator``, ``fabric``, a Lightning
    module's ``self.trainer``, an HF script's ``trainer``)."""
    for source in sources(facts, receiver, site.ctx, site.order).found:
        if isinstance(source.expr, cst.Call):
            qualname = facts.qualname(source.expr.func) or ""
            if qualname in ACCELERATOR:
                return "accelerator"
            if qualname in FABRIC:
                return "fabric"
            if qualname in LIGHTNING_TRAINER:
                return "lightning_trainer"
            if qualname.startswith(("transformers.", "trl.")) and qualname.endswith("Trainer"):
                return "hf_trainer"
    if dotted_name(receiver) == "self" and site.ctx.class_def is not None and _subclasses_hf_trainer(facts, site.ctx.class_def):
        return "hf_trainer"  # axolotl's and TRL's Trainer subclasses override save_model/_save_checkpoint
    name = (dotted_name(receiver) or "").rsplit(".", 1)[-1]
    if name in _FRAMEWORK_BY_NAME:
        return _FRAMEWORK_BY_NAME[name]
    if name == "trainer":
        if facts.imports.imports_from("lightning") or facts.imports.imports_from("pytorch_lightning"):
            return None if facts.imports.imports_from("transformers") else "lightning_trainer"
        if facts.imports.imports_from("transformers") or facts.imports.imports_from("trl"):
            return "hf_trainer"
    return None


def _subclasses_hf_trainer(facts: ModuleFacts, class_def, depth: int = 0) -> bool:
    """``class MyTrainer(SFTTrainer)``, also through classes of this file."""
    for base in class_def.bases:
        qualname = facts.qualname(base.value) or ""
        if qualname.startswith(("transformers.", "trl.")) and qualname.endswith("Trainer"):
            return True
        local = facts.classes.get(dotted_name(base.value) or "")
        if local is not None and local is not class_def and depth < 4 and _subclasses_hf_trainer(facts, local, depth + 1):
            return True
    return False


def _shows_fsdp(facts: ModuleFacts) -> bool:
    return facts.launch is not None or facts.cached("file_shows_fsdp", _file_shows_fsdp)


def launched_fsdp_only(facts: ModuleFacts) -> Optional[str]:
    """Where FSDP is turned on when the file itself does not show it (the launch's
    source: ``configs/fsdp.yaml:2 (distributed_type: FSDP)``); None otherwise."""
    if facts.launch is None or facts.cached("file_shows_fsdp", _file_shows_fsdp):
        return None
    return facts.launch.source


def _file_shows_fsdp(facts: ModuleFacts) -> bool:
    return facts.cached("file_configures_fsdp", _file_configures_fsdp) or _tests_fsdp_mode(facts)


def _file_configures_fsdp(facts: ModuleFacts) -> bool:
    if facts.imports.imports_from(torch_api.FSDP_PACKAGE):
        return True
    for site in facts.calls:
        qualname = facts.qualname(site.node.func) or ""
        if qualname in FSDP_PLUGIN or qualname.endswith(("FSDPStrategy", "FullyShardedDataParallelPlugin")):
            return True
        for arg in site.node.args:
            keyword = arg.keyword.value if arg.keyword is not None else ""
            if _turns_fsdp_on(keyword, arg.value):
                return True
            if arg.star == "**" and _dict_turns_fsdp_on(facts, site, arg.value):
                return True
    return _fields_turn_fsdp_on(facts)


def names_fsdp_mode(qualname: str) -> bool:
    """accelerate's ``DistributedType.FSDP`` (``accelerate.utils.dataclasses``): the value
    ``accelerator.distributed_type`` holds when the launch turns FSDP on.  A file that
    names it, most often comparing the run with it (``if accelerator.distributed_type ==
    DistributedType.FSDP:``, ``... not in [DistributedType.FSDP, DistributedType.DEEPSPEED]``),
    is written to run under FSDP, whose switch is then in the launch configuration.  The ``ast`` gate reads
    the same definition (``screen.evidence_lines``)."""
    return qualname.startswith("accelerate.") and qualname.endswith(".DistributedType.FSDP")


def _tests_fsdp_mode(facts: ModuleFacts) -> bool:
    if not facts.imports.imports_from("accelerate"):
        return False  # no name of the file can stand for accelerate's: no walk of the tree
    return any(isinstance(node, cst.Attribute) and node.attr.value == "FSDP"
               and names_fsdp_mode(facts.qualname(node) or "") for node in descendants(facts.module))


def _fields_turn_fsdp_on(facts: ModuleFacts) -> bool:
    """``class Args(TrainingArguments): fsdp: str = field(default="full_shard auto_wrap")``
    (or ``= "full_shard"``): a subclass of transformers' or TRL's arguments class whose
    ``fsdp`` field defaults to a value that turns FSDP on (``HfArgumentParser`` builds it
    with that default)."""
    for class_def in facts.classes.values():
        if not any((facts.qualname(base.value) or "").startswith(("transformers.", "trl."))
                   and (facts.qualname(base.value) or "").endswith(("TrainingArguments", "Config"))
                   for base in class_def.bases):
            continue
        for statement in class_def.body.body:
            for small in getattr(statement, "body", ()):
                if not (isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name)
                        and small.target.value == "fsdp" and small.value is not None):
                    continue
                value = small.value
                if isinstance(value, cst.Call) and dotted_name(value.func) in ("field", "dataclasses.field"):
                    value = keyword_args(value).get("default")
                    value = value.value if value is not None else None
                if value is not None and _turns_fsdp_on("fsdp", value):
                    return True
    return False


def _turns_fsdp_on(keyword: str, value) -> bool:
    return turns_fsdp_on(keyword, literal_string(value))


def turns_fsdp_on(keyword: str, text: Optional[str]) -> bool:
    """A keyword argument that turns FSDP on, given the literal text it passes (None for
    anything else): ``fsdp_plugin=``, ``strategy="fsdp"``, ``fsdp="full_shard auto_wrap"``.
    Not ``fsdp_config=`` alone: transformers reads it only when ``fsdp`` is set
    ("`--fsdp_config` is useful only when `--fsdp` is specified", huggingface/transformers
    fd798335 ``src/transformers/training_args.py``, ``TrainingArguments.__post_init__``;
    newer versions' ``_process_fsdp_args`` returns at once without ``fsdp``).  The ``ast``
    gate reads the same definition (``screen.evidence_lines``)."""
    if keyword == "fsdp_plugin":
        return True
    if keyword in ("strategy", "fsdp"):
        text = text or ""
        return "fsdp" in text or "full_shard" in text or "shard_grad_op" in text
    return False


def _dict_turns_fsdp_on(facts: ModuleFacts, site: CallSite, value) -> bool:
    """``TrainingArguments(**args)`` where ``args`` is a dict display or ``dict(...)`` built
    before (``args = dict(fsdp="full_shard auto_wrap", ...)``) that turns FSDP on."""
    for source in sources(facts, value, site.ctx, site.order).found:
        entries = dict_entries(facts, source.expr)
        if entries and any(_turns_fsdp_on(key, item) for key, item in entries.items()):
            return True
    return _item_turns_fsdp_on(facts, site, value)


def _item_turns_fsdp_on(facts: ModuleFacts, site: CallSite, value) -> bool:
    """``args["fsdp"] = "full_shard auto_wrap"`` (a literal key) in the same function, before
    ``SFTConfig(**args)`` (``dataflow.item_writes``): the dict is filled item by item
    (perhaps under an ``if``: FSDP may be on)."""
    name = dotted_name(value)
    if name is None:
        return False
    written = item_writes(facts, name, site.ctx, site.order)
    return any(_turns_fsdp_on(key, item) for key, (item, _) in written.entries.items())


def shows_fsdp(facts: ModuleFacts) -> bool:
    """The file configures FSDP for its framework: a torch FSDP import, an accelerate
    ``FullyShardedDataParallelPlugin``/``fsdp_plugin=``, a Lightning ``FSDPStrategy`` or
    ``strategy="fsdp..."``, a transformers ``fsdp=`` argument (``fsdp_config=`` alone turns
    nothing on: ``_turns_fsdp_on``; also in a dict display or ``dict(...)`` passed as
    ``**args``, or the default of the ``fsdp`` field of a ``TrainingArguments`` subclass), a
    reference to accelerate's ``DistributedType.FSDP`` (``names_fsdp_mode``); or the project
    launches it with FSDP (``facts.launch``: an accelerate config, ``--fsdp``)."""
    return facts.cached("shows_fsdp", _shows_fsdp)


def framework_collective(facts: ModuleFacts, site: CallSite) -> Optional[str]:
    """'`accelerator.get_state_dict`'-style words when ``site`` is a framework call that
    every rank must make here, else None."""
    func = site.node.func
    if not isinstance(func, cst.Attribute) or facts.qualname(func) is not None:
        return None
    method = func.attr.value
    if not any(method in names for names in (*ALWAYS.values(), *WITH_FSDP.values())):
        return None
    framework = framework_of(facts, func.value, site)
    if framework is None:
        return None
    if method in ALWAYS.get(framework, frozenset()) or (
        method in WITH_FSDP.get(framework, frozenset()) and shows_fsdp(facts)
    ):
        turned_on = ""
        if method not in ALWAYS.get(framework, frozenset()):
            where = launched_fsdp_only(facts)
            if where:
                turned_on = f"; FSDP is turned on by {where}"
            elif not facts.cached("file_configures_fsdp", _file_configures_fsdp):
                turned_on = " under FSDP, which this file expects: it names `DistributedType.FSDP`"
        return f"`{facts.module.code_for_node(func)}` (every rank must call it{turned_on})"
    return None


def accelerate_fsdp1_keeps_stale_optimizer(facts: ModuleFacts) -> Optional[cst.Call]:
    if not facts.imports.imports_from("accelerate"):
        return None
    return facts.cached("accelerate_stale_plugin", _stale_plugin)


def _stale_plugin(facts: ModuleFacts) -> Optional[cst.Call]:
    """The file's ``FullyShardedDataParallelPlugin(...)`` when it wraps with FSDP1 and
    ``use_orig_params=False`` (accelerate then leaves an optimizer built from the unwrapped
    model pointing at stale parameters).  Left out, accelerate 1.15.0 reads it from the
    environment (``utils/dataclasses.py`` l. 1938-1939: ``FSDP_USE_ORIG_PARAMS``, default
    "False", and ``FSDP_VERSION``, default "1", l. 1831), which ``accelerate launch`` sets
    from its config or flags (``--fsdp_use_orig_params`` defaults to "true",
    ``commands/launch.py`` l. 577-583; ``utils/launch.py`` l. 327): ``default_use_orig_params``."""
    for site in facts.calls:
        qualname = facts.qualname(site.node.func) or ""
        if qualname not in FSDP_PLUGIN:
            continue
        shape = of_cst(site.node)
        said = plugin_keeps_orig_params(shape)
        if said is False:
            return site.node
        if said is None and default_use_orig_params(facts, "fsdp_version" in shape.keywords) is False:
            return site.node
    return _stale_launch(facts)


def plugin_keeps_orig_params(shape: CallShape) -> Optional[bool]:
    """What an FSDP plugin's arguments (``call_shape``) say about ``use_orig_params`` for
    an FSDP1 wrap: False for ``use_orig_params=False`` (or 0), None when they leave it to
    its default (``default_use_orig_params``), True when it is on, the plugin is not FSDP1
    (``fsdp_version`` other than a literal 1) or ``*``/``**`` arguments may set it.  The
    ``ast`` gate asks this same definition (``screen``)."""
    if shape.star or shape.double_star:
        return True
    version = shape.literal("fsdp_version", default=1)
    if not (type(version) is int and version == 1):
        return True
    said = shape.flag("use_orig_params", default=None)
    return None if said is None else said is not False


def _stale_launch(facts: ModuleFacts) -> Optional[cst.Call]:
    """No plugin in the file: an ``Accelerator(...)`` without ``fsdp_plugin=`` that ``accelerate
    launch`` starts with an FSDP1 config saying ``fsdp_use_orig_params: false`` (accelerate
    1.15.0 builds the plugin from that environment, ``utils/dataclasses.py`` l. 1938-1939)."""
    launch = facts.launch
    if launch is None or getattr(launch, "launcher", "") != "accelerate" or launch.use_orig_params is not False:
        return None
    if launch.version == 2:
        return None
    for site in facts.calls:
        if facts.qualname(site.node.func) in ACCELERATOR and "fsdp_plugin" not in keyword_args(site.node) \
                and not any(a.star for a in site.node.args):
            return site.node
    return None


def default_use_orig_params(facts: ModuleFacts, fsdp1_given: bool) -> Optional[bool]:
    """What a ``FullyShardedDataParallelPlugin`` without ``use_orig_params`` gets, where the
    project tells how the file is started: from an ``accelerate launch`` with FSDP, its
    config's ``fsdp_use_orig_params`` (default true; a config of ``fsdp_version: 2`` is no
    FSDP1); from ``torchrun`` or ``python`` (``[tool.fsdp-lint] launch`` or the project's
    launch commands), False.  None where it is not known (``accelerate launch`` may read the
    user's own default config)."""
    launch = facts.launch
    if launch is not None:
        if getattr(launch, "launcher", "") != "accelerate" or (not fsdp1_given and launch.version == 2):
            return None
        return launch.use_orig_params if launch.use_orig_params is not None else True
    launcher = getattr(facts.project, "launcher", None) if facts.project is not None else None
    if launcher is not None and launcher.name in ("torchrun", "python"):
        return False
    return None



@dataclass
class FrameworkWrap:
    """A framework call that shards a model and leaves an optimizer built before it on the
    old parameters: ``site`` wraps the modules among its arguments; ``config`` is the line
    that makes it so; ``how`` names it for messages."""

    site: CallSite
    config: cst.CSTNode
    how: str


def _model_parallel_strategy(facts: ModuleFacts) -> Optional[cst.Call]:
    for site in facts.calls:
        if (facts.qualname(site.node.func) or "").endswith("ModelParallelStrategy"):
            return site.node
    return None


def framework_wraps(facts: ModuleFacts) -> List[FrameworkWrap]:
    """- ``accelerator.prepare(...)`` with a ``FullyShardedDataParallelPlugin(use_orig_params=False)``
      (FSDP1): accelerate 1.15.0 re-points the optimizer for FSDP2 only (l. 1766);
    - ``fabric.setup(...)`` / ``fabric.setup_module(...)`` with ``ModelParallelStrategy``
      (FSDP2 through the user's ``parallelize_fn``): Lightning 2.6.6 uses the base
      ``setup_module_and_optimizers`` (``strategies/strategy.py`` l. 150-161), which maps no
      parameters, while ``fully_shard`` installs new DTensor parameters."""
    found: List[FrameworkWrap] = []
    plugin = accelerate_fsdp1_keeps_stale_optimizer(facts)
    strategy = _model_parallel_strategy(facts) if facts.imports.imports_from("lightning") else None
    if plugin is None and strategy is None:
        return found
    for site in facts.calls:
        func = site.node.func
        if not isinstance(func, cst.Attribute) or site.attr not in ("prepare", "setup", "setup_module"):
            continue
        framework = framework_of(facts, func.value, site)
        if plugin is not None and site.attr == "prepare" and framework == "accelerator":
            found.append(FrameworkWrap(site, plugin, _stale_how(facts, plugin)))
        elif strategy is not None and site.attr in ("setup", "setup_module") and framework == "fabric":
            chosen = _fabric_strategy(facts, func.value, site)
            if chosen is not None:
                found.append(FrameworkWrap(site, chosen, "Lightning's `ModelParallelStrategy` (FSDP2)"))
    return found


def _stale_how(facts: ModuleFacts, plugin: cst.Call) -> str:
    if (facts.qualname(plugin.func) or "") in ACCELERATOR:
        return (f"accelerate's FSDP1, whose `use_orig_params` comes from the launch: False in "
                f"{facts.launch.source}")
    if "use_orig_params" in keyword_args(plugin):
        return "accelerate's FSDP1 plugin with `use_orig_params=False`"
    launch = facts.launch
    if launch is not None:
        return (f"accelerate's FSDP1 plugin, whose `use_orig_params` left out comes from the launch: False in "
                f"{launch.source}")
    return (f"accelerate's FSDP1 plugin, whose `use_orig_params` left out defaults to False outside "
            f"`accelerate launch` (started by {facts.project.launcher.name}: {facts.project.launcher.source})")


def _fabric_strategy(facts: ModuleFacts, receiver, site: CallSite) -> Optional[cst.Call]:
    """The ``ModelParallelStrategy(...)`` the ``Fabric(strategy=...)`` behind ``receiver`` uses."""
    for source in sources(facts, receiver, site.ctx, site.order).found:
        fabric = source.expr
        if not (isinstance(fabric, cst.Call) and (facts.qualname(fabric.func) or "") in FABRIC):
            continue
        strategy = keyword_args(fabric).get("strategy")
        if strategy is None:
            continue
        for chosen in sources(facts, strategy.value, source.ctx, source.order, source.via).found:
            if isinstance(chosen.expr, cst.Call) and (facts.qualname(chosen.expr.func) or "").endswith("ModelParallelStrategy"):
                return chosen.expr
    return None


def launched_trainer_runs(facts: ModuleFacts) -> List[CallSite]:
    """``trainer.train()`` of a transformers/TRL ``Trainer`` in a file that ``accelerate
    launch`` starts with FSDP (``facts.launch``): the Trainer builds its ``Accelerator``
    from the environment the launch sets (``ACCELERATE_USE_FSDP``) and shards the model it
    was given, so the function the call stands in runs an FSDP training as
    ``accelerator.prepare`` does (``launched_prepares``)."""
    return _launched_calls(facts, "train", "hf_trainer")


def launched_prepares(facts: ModuleFacts) -> List[CallSite]:
    """``accelerator.prepare(...)`` calls of a file that ``accelerate launch`` starts with FSDP
    (``facts.launch``): each shards the models among its arguments, so the function it stands
    in sets up an FSDP run as ``FSDP(...)`` would."""
    return _launched_calls(facts, "prepare", "accelerator")


def _launched_calls(facts: ModuleFacts, method: str, framework: str) -> List[CallSite]:
    """The calls ``<framework object>.<method>(...)`` of a file that ``accelerate launch``
    starts with FSDP; none in a file started otherwise."""
    launch = facts.launch
    if launch is None or getattr(launch, "launcher", "") != "accelerate":
        return []
    return [
        site for site in facts.calls
        if site.attr == method and isinstance(site.node.func, cst.Attribute)
        and framework_of(facts, site.node.func.value, site) == framework
    ]
