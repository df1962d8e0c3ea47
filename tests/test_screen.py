"""The ``ast`` screen (``fsdp_lint.screen``) drops a rule for a file only when the rule
cannot report anything there: every fixture, and every fixture inside a large module of
unrelated code, gives the same diagnostics with and without it."""

from pathlib import Path

import pytest

import fsdp_lint.screen as screen
from fsdp_lint.engine import GATE_ENV, lint_text_sliced
from fsdp_lint.rules import ALL_RULES
from tests.helpers import fixture_rules

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FIXTURE_FILES = sorted(FIXTURES.rglob("*.py"))


def _seen(diagnostics):
    return [
        (d.code, d.location, d.end_location, d.message, d.statement_rows,
         None if d.fix is None else (d.fix.applicability, d.fix.message, d.fix.edits))
        for d in diagnostics
    ]


def _unscreened(monkeypatch, text, name, rules=ALL_RULES):
    """Every rule's full analysis on the whole text: the gate turned off by its switch
    (``FSDP_LINT_GATE=0``, read by the engine on every call)."""
    with monkeypatch.context() as patch:
        patch.setenv(GATE_ENV, "0")
        return lint_text_sliced(text, name, rules, None).diagnostics


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_fixture_same_with_and_without_the_screen(path, monkeypatch):
    text = path.read_text()
    rules = fixture_rules(path)
    whole = _unscreened(monkeypatch, text, path.name, rules)
    assert _seen(lint_text_sliced(text, path.name, rules, None).diagnostics) == _seen(whole)
    # each rule that reports is kept by the screen on its own
    fired = {d.code for d in whole}
    kept = {r.code for r in screen.live_rules(screen.parse(text), [r for r in rules if r.code in fired])}
    assert fired <= kept


def test_rules_without_a_condition_are_kept():
    tree = screen.parse("x = 1\n")
    unscreened = [r for r in ALL_RULES if r.code not in screen._SCREENS and screen.declared(r) is None]
    assert screen.live_rules(tree, unscreened) == unscreened


def test_a_declared_gate_needs_its_facts_and_its_calls():
    """``Rule.gate_facts``/``gate_calls`` make the screen (``screen.declared``): a module with
    the declared call but no FSDP2 wrap, or a wrap but not the call, is screened out; one
    with both is kept, with the call as its site."""
    from fsdp_lint.rules import BY_CODE

    rule = BY_CODE["FSD110"]
    assert rule.gate_facts == ("fsdp2_wrap",) and "load_state_dict" in rule.gate_calls and not rule.gate_sites
    both = screen.parse("from torch.distributed.fsdp import fully_shard as shard\nshard(m)\nm.load_state_dict(sd)\n")
    no_wrap = screen.parse("from other import fully_shard\nfully_shard(m)\nm.load_state_dict(sd)\n")
    no_call = screen.parse("from torch.distributed.fsdp import fully_shard\nfully_shard(m)\n")
    assert screen.live_rules(both, [rule]) == [rule]
    assert screen.live_rules(no_wrap, [rule]) == [] and screen.live_rules(no_call, [rule]) == []
    live, sites = screen.live_rules_and_sites(both, [rule])
    assert live == [rule] and not sites.complete  # the slice keeps the whole closure


def test_a_declared_argument_name_and_sites():
    """``gate_arguments``: FSD004's summon must pass ``rank0_only`` (by keyword, by its
    position, or in a ``**`` dict the file fills with that name); ``gate_names``: FSD002
    needs ``backward`` or ``step`` in the code; ``gate_sites``: the kept calls seed the slice
    as the findings' own statements."""
    from fsdp_lint.rules import BY_CODE

    head = "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
    fsd004, fsd002 = BY_CODE["FSD004"], BY_CODE["FSD002"]
    passing = [
        "with FSDP.summon_full_params(m, rank0_only=True):\n    pass\n",
        "with FSDP.summon_full_params(m, True, True, True):\n    pass\n",
        "kw = {'rank0_only': True}\nwith FSDP.summon_full_params(m, **kw):\n    pass\n",
    ]
    for body in passing:
        assert screen.live_rules(screen.parse(head + body), [fsd004]) == [fsd004], body
    not_passing = [
        "with FSDP.summon_full_params(m, writeback=False):\n    pass\n",
        "with FSDP.summon_full_params(m, True, True):\n    pass\n",
        "kw = {'writeback': False}\nwith FSDP.summon_full_params(m, **kw):\n    pass\n",
    ]
    for body in not_passing:
        assert screen.live_rules(screen.parse(head + body), [fsd004]) == [], body
    loop = head + "for b in data:\n    loss = m(b)\n    with FSDP.summon_full_params(m):\n        pass\n"
    assert screen.live_rules(screen.parse(loop), [fsd002]) == []
    stepped = screen.parse(loop + "    loss.backward()\n")
    live, sites = screen.live_rules_and_sites(stepped, [fsd002])
    assert live == [fsd002] and sites.complete and 4 in sites


def test_unparsable_text_keeps_every_rule():
    assert screen.live_rules(screen.parse("def broken(:\n"), ALL_RULES) == list(ALL_RULES)


# Code written to reach the screen's corners: each snippet fires its rule (checked here, with
# libcst on the whole text), and the screen must keep the rule.
_CORNERS = {
    "rank test returned by a helper": ("FSD104", '''
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

def main_rank():
    return dist.get_rank() == 0

def save(net):
    model = FSDP(net)
    if main_rank():
        state = model.state_dict()
'''),
    "rank flag in a module constant, aliased barrier": ("FSD104", '''
import os
from torch.distributed import barrier as sync
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

FIRST = int(os.environ["RANK"]) == 0

def train(net):
    model = FSDP(net)
    if FIRST:
        sync()
'''),
    "early exit": ("FSD104", '''
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

def save(net):
    model = FSDP(net)
    if dist.get_rank() != 0:
        return
    state = model.state_dict()
'''),
    "one-rank decorator, annotated model": ("FSD104", '''
from lightning.pytorch.utilities import rank_zero_only
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

@rank_zero_only
def save(model: FSDP):
    return model.state_dict()
'''),
    "accelerator from a factory": ("FSD104", '''
from accelerate import Accelerator

def make():
    return Accelerator()

def run():
    acc = make()
    if acc.is_main_process:
        acc.wait_for_everyone()
'''),
    "rank flag on self": ("FSD104", '''
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

class Runner:
    def __init__(self, net):
        self.first = dist.get_rank() == 0
        self.model = FSDP(net)

    def save(self):
        if self.first:
            return self.model.state_dict()
'''),
    "rank through a parameter of a called helper": ("FSD104", '''
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

RANK_ZERO = dist.get_rank() == 0

def same(flag):
    return flag

def save(net):
    model = FSDP(net)
    ok = same(RANK_ZERO)
    if ok:
        return model.state_dict()
'''),
    "partial of FSDP": ("FSD101", '''
import functools
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

wrap = functools.partial(FSDP, use_orig_params=False)

def train(model):
    optimizer = torch.optim.AdamW(model.parameters())
    model = wrap(model)
    optimizer.step()
'''),
    "optimizer class in a variable": ("FSD101", '''
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as Sharded

def train(model):
    kind = torch.optim.SGD
    optimizer = kind(model.parameters(), lr=0.1)
    model = Sharded(model)
    optimizer.step()
'''),
    "optimizer factory": ("FSD101", '''
import torch
from torch.distributed.fsdp import fully_shard

def build(m):
    return torch.optim.SGD(m.parameters(), lr=0.1)

def train(model):
    optimizer = build(model)
    fully_shard(model)
    optimizer.step()
'''),
    "accelerate FSDP1 plugin": ("FSD101", '''
import torch
from accelerate import Accelerator, FullyShardedDataParallelPlugin

def train(model):
    plugin = FullyShardedDataParallelPlugin(fsdp_version=1, use_orig_params=False)
    accelerator = Accelerator(fsdp_plugin=plugin)
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
'''),
    "generate on an attribute wrapped elsewhere": ("FSD105", '''
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

class Gen:
    def __init__(self, net):
        self.model = FSDP(net)

    def run(self, x):
        return self.model.generate(x)
'''),
    "cast after fully_shard": ("FSD107", '''
import torch
from torch.distributed.fsdp import fully_shard

def train(model):
    fully_shard(model)
    model.to(torch.bfloat16)
'''),
    "aliased torch.save": ("FSD108", '''
import torch.distributed as dist
from torch import save as store
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

def main(net):
    dist.init_process_group("nccl")
    model = FSDP(net)
    store(model.state_dict(), "model.pt")
'''),
    "CPU device through a dict": ("FSD003", '''
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

CFG = {"device_id": torch.device("cpu")}

def train(net):
    model = FSDP(net, **CFG)
    with FSDP.summon_full_params(model, offload_to_cpu=True, writeback=False):
        pass
'''),
    "offload through a wrapper's keywords": ("FSD001", '''
from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP

def shard(net, **kwargs):
    return FSDP(net, **kwargs)

def train(net):
    model = shard(net, cpu_offload=CPUOffload(offload_params=True))
    with FSDP.summon_full_params(model):
        pass
'''),
    "rank0_only passed by position": ("FSD004", '''
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

def peek(net):
    model = FSDP(net)
    with FSDP.summon_full_params(model, True, True, True):  # recurse, writeback, rank0_only
        pass
'''),
    "optimizer class imported under another name": ("FSD101", '''
from torch.optim import sgd as Step
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

def train(model):
    optimizer = Step(model.parameters(), lr=0.1)
    model = FSDP(model)
    optimizer.step()
'''),
    "bare summon on any receiver": ("FSD012", '''
def peek(model):
    model.summon_full_params()
'''),
    "aliased clip_grad_norm_": ("FSD102", '''
from torch.nn.utils import clip_grad_norm_ as clip
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

def step(net):
    model = FSDP(net)
    clip(model.parameters(), 1.0)
'''),
    "move after offload, through self": ("FSD103", '''
from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP

class Trainer:
    def __init__(self, net):
        self.model = FSDP(net, cpu_offload=CPUOffload(offload_params=True))

    def place(self):
        self.model.cuda()
'''),
    "grad norm of an FSDP2 model read": ("FSD106", '''
import torch
from torch.distributed.fsdp import fully_shard

def step(model):
    fully_shard(model)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    print(norm.item())
'''),
}


@pytest.mark.parametrize("name", sorted(_CORNERS))
def test_corner_fires_and_is_kept(name, monkeypatch):
    code, text = _CORNERS[name]
    whole = _unscreened(monkeypatch, text, "corner.py")
    # (FSD104 reached through a one-rank decorator currently fails in its message: FSD901)
    assert any(d.code == code or (d.code == "FSD901" and code in d.message) for d in whole)
    assert code in {r.code for r in screen.screen(screen.parse(text), ALL_RULES)}
    assert _seen(lint_text_sliced(text, "corner.py", ALL_RULES, None).diagnostics) == _seen(whole)


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_names_stage_read_from_the_ast_is_the_compilers(path):
    """``Summary.confirms`` answers as ``engine.ast_confirms`` (compiled names) does, and the
    marker gate as the markers do."""
    from fsdp_lint.engine import ast_confirms, wanted_rules

    text = path.read_text()
    assert wanted_rules(text, ALL_RULES) == [r for r in ALL_RULES if r.wanted(text)]
    tree = screen.parse(text)
    if tree is None:
        return
    for rule in ALL_RULES:
        assert screen.Summary(tree).confirms([rule], text) == ast_confirms(text, [rule]), rule.code


def test_a_name_only_in_annotations_is_left_to_the_compiler():
    from fsdp_lint.engine import ast_confirms
    from fsdp_lint.rules import BY_CODE

    rules = [BY_CODE["FSD012"]]
    for text in (
        "from __future__ import annotations\ndef f(m: x.summon_full_params): pass\n",
        "def f(m: x.summon_full_params): pass\n",
        "def f():\n    m: x.summon_full_params = 1\n",
        "x: y.summon_full_params\n",
        "summon_full_params: int\n",
        "def f():\n    summon_full_params: int\n",
        "global summon_full_params\n",
    ):
        assert screen.Summary(screen.parse(text)).confirms(rules, text) == ast_confirms(text, rules), text


# Generated modules (tests/generated_modules.py), drawn by hypothesis.
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.generated_modules import generate  # noqa: E402

_generated = lambda: st.randoms(use_true_random=False).map(generate)  # noqa: E731


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_generated())
def test_generated_modules_same_with_and_without_the_screen(text):
    from _pytest.monkeypatch import MonkeyPatch

    with MonkeyPatch.context() as patch:
        whole = _unscreened(patch, text, "gen.py")
    assert _seen(lint_text_sliced(text, "gen.py", ALL_RULES, None).diagnostics) == _seen(whole)
    assert _seen(lint_text_sliced(text, "gen.py", ALL_RULES, 0).diagnostics) == _seen(whole)
    with MonkeyPatch.context() as patch:  # as with a rule the screen does not know: sites and the whole closure
        patch.setattr(screen.Sites, "complete", False)
        assert _seen(lint_text_sliced(text, "gen.py", ALL_RULES, 0).diagnostics) == _seen(whole)
