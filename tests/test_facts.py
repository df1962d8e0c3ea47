"""Module facts: name resolution through imports, offload evidence, training loops."""

import textwrap

import libcst as cst
import pytest

from fsdp_lint.facts.index import index_module
from fsdp_lint.facts.loops import per_step_hook, per_step_loop, per_step_via_call
from fsdp_lint.facts.offload import cpu_param_evidence


def facts_of(code):
    return index_module(cst.parse_module(textwrap.dedent(code)))


@pytest.mark.parametrize(
    "imports,expr",
    [
        ("import torch.distributed.fsdp as fsdp", "fsdp.FullyShardedDataParallel"),
        ("from torch.distributed.fsdp import FullyShardedDataParallel as FSDP", "FSDP"),
        ("import torch", "torch.distributed.fsdp.FullyShardedDataParallel"),
        ("import torch.distributed.fsdp", "torch.distributed.fsdp.FullyShardedDataParallel"),
        ("from torch.distributed import fsdp", "fsdp.FullyShardedDataParallel"),
        ("from torch.distributed.fsdp import FullyShardedDataParallel\nFSDP = FullyShardedDataParallel", "FSDP"),
    ],
)
def test_resolves_fsdp_class(imports, expr):
    facts = facts_of(f"{imports}\nx = {expr}\n")
    binding = [b for b in facts.bindings if b.target == "x"][0]
    assert facts.qualname(binding.value) in {
        "torch.distributed.fsdp.FullyShardedDataParallel",
    }


@pytest.mark.parametrize(
    "code",
    [
        "from fairscale.nn import FullyShardedDataParallel as FSDP\nx = FSDP",
        "class FSDP: pass\nx = FSDP",
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\nclass FSDP: pass\nx = FSDP",
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "from fairscale.nn import FullyShardedDataParallel as FSDP\nx = FSDP",
        "from .fsdp import FullyShardedDataParallel as FSDP\nx = FSDP",
    ],
)
def test_not_torch_fsdp(code):
    facts = facts_of(code + "\n")
    binding = [b for b in facts.bindings if b.target == "x"][0]
    assert facts.qualname(binding.value) != "torch.distributed.fsdp.FullyShardedDataParallel"


@pytest.mark.parametrize(
    "code,kinds",
    [
        ("from torch.distributed.fsdp import CPUOffload\nc = CPUOffload(True)", {"CPUOffload(offload_params=True)"}),
        ("from torch.distributed.fsdp import CPUOffload\nc = CPUOffload(offload_params=False)", set()),
        ("from torch.distributed.fsdp import CPUOffload\nc = CPUOffload(offload_params=flag)", set()),
        ("from torch.distributed.fsdp import CPUOffloadPolicy\nc = CPUOffloadPolicy()", {"CPUOffloadPolicy"}),
        (
            "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as F\n"
            "m = F(net, device_id='cpu')",
            {"device_id on the CPU"},
        ),
        (
            "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as F\n"
            "d = torch.device('cpu')\nm = F(net, device_id=d)",
            {"device_id on the CPU"},
        ),
        (
            "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as F\n"
            "m = F(net, device_id=torch.device('cuda'))",
            set(),
        ),
        ("class CPUOffload: pass\nc = CPUOffload(True)", set()),
    ],
)
def test_offload_evidence(code, kinds):
    facts = facts_of(code + "\n")
    assert {e.kind for e in cpu_param_evidence(facts)} == kinds


def test_training_loop_needs_step_in_the_loop_itself():
    facts = facts_of(
        """
        for epoch in range(3):
            for batch in loader:
                loss.backward()
            marker_epoch()
            for x in other:
                marker_inner()
        """
    )
    sites = {s.attr: s for s in facts.calls}
    assert per_step_loop(facts, sites["marker_epoch"].ctx) is None
    assert per_step_loop(facts, sites["marker_inner"].ctx) is None


@pytest.mark.parametrize(
    "test,every_step",
    [
        ("step % 10 == 0", False),
        ("should_run(step, every)", False),
        ("step in eval_steps", False),
        ("step == max_steps - 1", False),
        ("flag", False),  # flag = step % every == 0 above
        ("args.debug", True),
        ("step > warmup", True),
        ("step != 0", True),
        ("is_main()", True),
    ],
)
def test_sparse_guards(test, every_step):
    facts = facts_of(
        f"""
        def train():
            for step, batch in enumerate(loader):
                loss.backward()
                flag = step % every == 0
                if {test}:
                    marker()
        """
    )
    site = next(s for s in facts.calls if s.attr == "marker")
    assert (per_step_loop(facts, site.ctx) is not None) is every_step


@pytest.mark.parametrize(
    "base,method,guard,trainer",
    [
        ("pl.LightningModule", "training_step", "", "a LightningModule"),
        ("pl.LightningModule", "on_before_zero_grad", "if self.trainer.is_last_batch:", "a LightningModule"),
        ("LightningModule", "on_after_backward", "", "a LightningModule"),
        ("Base", "optimizer_step", "", "a LightningModule"),  # through a class of the file
        ("pl.Callback", "on_train_batch_end", "", "a Lightning callback"),
        ("ModelCheckpoint", "on_train_batch_end", "", "a Lightning callback"),
        ("TrainerCallback", "on_step_end", "", "a transformers TrainerCallback"),
        # not a step: another hook, another class, a sparse guard on the trainer's counters
        ("pl.LightningModule", "on_train_epoch_end", "", None),
        ("pl.LightningModule", "validation_step", "", None),
        ("pl.Callback", "training_step", "", None),  # a callback has no training_step
        ("object", "on_before_zero_grad", "", None),
        ("torch.nn.Module", "training_step", "", None),
        ("pl.LightningModule", "on_train_batch_end", "if batch_idx % 100 == 0:", None),
        ("pl.LightningModule", "on_train_batch_end", "if self.global_step == 10:", None),
        ("TrainerCallback", "on_step_end", "if state.global_step in save_steps:", None),
    ],
)
def test_trainer_hooks_run_on_every_step(base, method, guard, trainer):
    body = f"{guard}\n                    marker()" if guard else "marker()"
    facts = facts_of(
        f"""
        import torch
        import lightning.pytorch as pl
        from lightning.pytorch import LightningModule
        from lightning.pytorch.callbacks import ModelCheckpoint
        from transformers import TrainerCallback


        class Base(pl.LightningModule):
            pass


        class Hooked({base}):
            def {method}(self, *args, batch_idx=0, state=None):
                {body}
        """
    )
    found = per_step_hook(facts, _site(facts, "marker").ctx)
    assert (found.trainer if found is not None else None) == trainer
    if trainer is not None:
        assert found.node.name.value == method


@pytest.mark.parametrize(
    "before,after,every_step",
    [
        ("", "self.warned = True", False),  # a latch set after the test: once
        ("", "self.warned = None", False),
        ("", "self.warned = check(batch)", True),  # set to what a call returns: not a latch
        ("self.warned = True\n        prepare()", "", True),  # set before the test only
    ],
)
def test_a_latch_the_loop_sets_after_its_test_runs_once(before, after, every_step):
    facts = facts_of(
        f"""
        def train(self):
            for batch in loader:
                {before}
                loss.backward()
                if not self.warned:
                    marker()
                    {after}
        """.replace("\n        prepare()", "\n                prepare()")
    )
    assert (per_step_loop(facts, _site(facts, "marker").ctx) is not None) is every_step


def test_a_latch_in_a_hook_runs_once():
    facts = facts_of(
        """
        import lightning.pytorch as pl


        class Logger(pl.Callback):
            def on_train_epoch_start(self, trainer, pl_module):
                self.logged = False

            def on_after_backward(self, trainer, pl_module):
                if self.logged:
                    return
                self.logged = True
                marker()

            def on_before_zero_grad(self, trainer, pl_module, optimizer):
                if self.enabled:
                    other()
        """
    )
    assert per_step_hook(facts, _site(facts, "marker").ctx) is None
    assert per_step_hook(facts, _site(facts, "other").ctx) is not None  # a flag: every step


def test_a_method_a_hook_calls_runs_on_every_step_one_level():
    facts = facts_of(
        """
        import lightning.pytorch as pl


        class Flow(pl.LightningModule):
            def on_before_zero_grad(self, optimizer):
                self.update_ema()

            def update_ema(self):
                marker()

            def on_train_epoch_end(self):
                self.log_norms()

            def log_norms(self):
                other()
        """
    )
    where, calls = per_step_via_call(facts, _site(facts, "marker").ctx)
    assert where.node.name.value == "on_before_zero_grad" and [c.attr for c in calls] == ["update_ema"]
    assert per_step_via_call(facts, _site(facts, "other").ctx) is None


@pytest.mark.parametrize(
    "step_body,every_step",
    [
        ("loss.backward()\n    optimizer.step()", True),  # the step is made once per call
        ("for micro in batch:\n        loss.backward()\n    optimizer.step()", True),  # accumulation
        ("for batch in loader:\n        loss.backward()\n        optimizer.step()", False),  # an epoch
        ("log(batch)", False),  # no step at all: an evaluation loop
    ],
)
def test_a_loop_steps_through_the_function_it_calls(step_body, every_step):
    facts = facts_of(
        f"""
def train_step(batch):
    {step_body}

def train(loader):
    for batch in loader:
        train_step(batch)
        marker()
"""
    )
    assert (per_step_loop(facts, _site(facts, "marker").ctx) is not None) is every_step


@pytest.mark.parametrize(
    "rollout_call,levels",
    [
        ("rollout(policy)", 3),  # loop -> train_step -> collect -> rollout
        ("if step % 10 == 0:\n        rollout(policy)", None),  # a sparse guard breaks the chain
    ],
)
def test_a_statement_runs_per_step_several_calls_from_the_loop(rollout_call, levels):
    facts = facts_of(
        f"""
def rollout(policy):
    marker()

def collect(policy, step):
    {rollout_call}

def train_step(policy, batch, step):
    collect(policy, step)
    loss.backward()
    optimizer.step()

def train(policy, loader):
    for step, batch in enumerate(loader):
        train_step(policy, batch, step)
"""
    )
    found = per_step_via_call(facts, _site(facts, "marker").ctx)
    if levels is None:
        assert found is None
    else:
        assert [call.attr for call in found[1]] == ["train_step", "collect", "rollout"]


def test_calls_four_levels_from_the_loop_are_not_followed():
    facts = facts_of(
        """
def a():
    marker()

def b():
    a()

def c():
    b()

def d():
    c()

def train(loader):
    for batch in loader:
        d()
        loss.backward()
"""
    )
    assert per_step_via_call(facts, _site(facts, "marker").ctx) is None
    assert per_step_via_call(facts, _site(facts, "a").ctx) is not None  # three calls away


def _site(facts, attr):
    return next(s for s in facts.calls if s.attr == attr)


@pytest.mark.parametrize(
    "code,exclusive",
    [
        ("def f(c):\n    if c:\n        a()\n    elif d:\n        b()\n", True),
        ("def f(c):\n    if c:\n        a()\n        return\n    b()\n", True),
        ("def f(c):\n    if c:\n        a()\n    b()\n", False),
        # a loop repeats the if: both arms run when the test can change between iterations
        ("def f(c):\n    for x in y:\n        if x:\n            a()\n        else:\n            b()\n", False),
        ("def f(c):\n    for x in y:\n        if x:\n            a()\n            continue\n        b()\n", False),
        # a flag the function only reads cannot change: one arm in every iteration
        ("def f(c):\n    for x in y:\n        if c:\n            a()\n        else:\n            b()\n", True),
        ("def f(c):\n    for x in y:\n        if c:\n            a()\n        else:\n            b()\n        g(c)\n", False),
        ("def f(c):\n    for x in y:\n        if c:\n            a()\n            return\n        b()\n", True),
    ],
)
def test_exclusive_arms(code, exclusive):
    from fsdp_lint.facts.flow import can_follow

    facts = facts_of(code)
    a, b = _site(facts, "a"), _site(facts, "b")
    assert can_follow(a.ctx, a.order, b.ctx, b.order) is not exclusive


@pytest.mark.parametrize(
    "code,offloads",
    [
        ("m = FSDP(net, cpu_offload=CPUOffload(offload_params=True))", True),
        ("m = FSDP(net)", False),
        ("m = FSDP(net)\nm = FSDP(other, cpu_offload=CPUOffload(True))", True),
        ("cfg = dict(cpu_offload=CPUOffload(offload_params=True))\nm = FSDP(net, **cfg)", True),
        ("cfg = {'use_orig_params': True}\nm = FSDP(net, **cfg)", False),
        ("def w(x, **kw):\n    return FSDP(x, **kw)\nm = w(net, cpu_offload=CPUOffload(True))", True),
        ("def w(x, **kw):\n    return FSDP(x, **kw)\nm = w(net)", False),
        ("import functools\nw = functools.partial(FSDP, cpu_offload=CPUOffload(True))\nm = w(net)", True),
        ("def build():\n    return FSDP(net, cpu_offload=CPUOffload(True)), 1\nm, n = build()", True),
    ],
)
def test_model_offload_follows_the_value(code, offloads):
    from fsdp_lint.facts.fsdp_modules import origins, wrap_config

    facts = facts_of(
        "from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP\n" + code + "\nuse(m)\n"
    )
    use = next(s for s in facts.calls if getattr(s.node.func, "value", None) == "use")
    found = origins(facts, use.node.args[0].value, use.ctx, use.order)
    assert found.complete and found.wraps
    assert any(wrap_config(facts, o).offload is True for o in found.wraps) is offloads


@pytest.mark.parametrize(
    "test,one_rank",
    [
        ("rank == 0", "body"),
        ("dist.get_rank() != 0", "orelse"),
        ("args.local_rank in (-1, 0)", "body"),
        ("args.local_rank not in [-1, 0]", "orelse"),
        ("local_rank <= 0", "body"),
        ("int(os.environ['LOCAL_RANK']) == 0", "body"),
        ("accelerator.is_main_process", "body"),
        ("trainer.is_world_process_zero()", "body"),
        ("not self._is_rank_zero", "orelse"),
        ("tp_rank == 0", None),
        ("node_rank == 0", None),
        ("lora_rank == 0", None),
        # a low-rank adapter's dimension read off its configuration, not a process rank
        ("config.model.lora.rank > 0", None),
        ("peft_config.rank == 0", None),
        ("self.adapter.rank != 0", None),
        ("self.rank == 0", "body"),
        ("args.rank != 0", "orelse"),
        # ``world_size == 1`` is false in every run FSDP shards: the rank side decides
        ("rank == 0 or world_size == 1", "body"),
        ("rank == 0 or use_cpu", None),
        ("not dist.get_rank()", "body"),
        ("not rank", "body"),
        ("global_rank", "orelse"),
        ("not is_main", "orelse"),
        # any one rank, not only rank 0; a negative number is no rank (single-process convention)
        ("rank == 1", "body"),
        ("dist.get_rank() == 3", "body"),
        ("1 == rank", "body"),
        ("rank != 1", "orelse"),
        ("args.local_rank == -1", None),
        ("args.local_rank != -1", None),
        ("rank == world_size", None),
    ],
)
def test_rank_tests(test, one_rank):
    from fsdp_lint.facts.ranks import one_rank_branch

    assert one_rank_branch(cst.parse_expression(test)) == one_rank


@pytest.mark.parametrize(
    "body,edits",
    [
        ("for n, p in model.named_parameters():\n        copies[n] = p.detach().clone()", False),
        ("stats.total = sum(p.numel() for p in model.parameters())", False),
        ("acc = torch.zeros(1)\n    for p in model.parameters():\n        acc.add_(p.norm())", False),
        ("for p in model.parameters():\n        p.mul_(0.5)", True),
        ("w = model.fc.weight\n    w.zero_()", True),
        ("torch.nn.init.zeros_(model.bias)", True),
        ("model.load_state_dict(sd)", True),
        ("for k, v in model.state_dict().items():\n        v.copy_(new[k])", True),
        ("other.weight.data = x", True),
        # reads
        ("print({n: p.norm().item() for n, p in model.named_parameters()})", False),
        ("torch.save(model.state_dict(), path)", False),
        ("for n, p in model.named_parameters():\n        shadow[n].mul_(0.9).add_(p.detach().cpu(), alpha=0.1)", False),
        ("logger.info('%s', [p.shape for p in model.parameters()])", False),
        # edits through aliases, views, calls and code that runs elsewhere (a fix audit)
        ("p = next(iter(model.parameters()))\n    p.zero_()", True),
        ("ps = [p for p in model.parameters()]\n    ps[0].zero_()", True),
        ("params = {n: p for n, p in model.named_parameters()}\n    params['weight'].zero_()", True),
        ("if (w := next(model.parameters())) is not None:\n        w.zero_()", True),
        ("list(map(lambda p: p.zero_(), model.parameters()))", True),
        ("torch.flatten(model.fc.weight).zero_()", True),
        ("a = model.fc.weight.detach().numpy()\n    a[:] = 0", True),
        ("w = model.fc.weight.type(torch.float32)\n    w.zero_()", True),
        ("model.half()", True),
        ("model.to(torch.float16)", True),
        ("model.apply(init_fn)", True),
        ("reinit()", True),
        ("getattr(model, 'load_state_dict')(sd)", True),
        ("torch.nn.utils.vector_to_parameters(flat, model.parameters())", True),
        ("yield model", True),
    ],
)
def test_parameter_edits(body, edits):
    from fsdp_lint.facts.read_only_blocks import block_may_edit

    facts = facts_of(
        "import torch\ncopies = {}\ndef reinit():\n    model.fc.weight.data.zero_()\n"
        "with FSDP.summon_full_params(model):\n    " + body + "\n"
    )
    block = next(s.entered_by for s in facts.calls if s.attr == "summon_full_params")
    assert block_may_edit(facts, block, ["model"]) is edits
