"""The FSDP2 facts FSD113-FSD116 read: where a write stands in evaluation order
(``Mutation.order``), unshard/reshard regions (``facts.unshard``), mixed-precision policies
(``facts.mixed_precision``), and forward methods (``facts.forward_methods``)."""

import textwrap

import libcst as cst

from fsdp_lint.facts.forward_methods import BYPASS, HOOKS, in_file_method, registered_forward_methods
from fsdp_lint.facts.fsdp_modules import Origin, fsdp_modules
from fsdp_lint.facts.index import index_module
from fsdp_lint.facts.mixed_precision import NO_POLICY, mp_policy
from fsdp_lint.facts.unshard import unshard_regions
from fsdp_lint.facts.values import UNKNOWN

HEADER = "import torch\nfrom torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method\n"


def _facts(code):
    return index_module(cst.parse_module(HEADER + textwrap.dedent(code)))


def _code(facts, node):
    return facts.module.code_for_node(node)


def test_a_write_is_ordered_between_the_calls_around_it():
    facts = _facts(
        """
        def f(model):
            model.unshard()
            model.fc.weight.data = torch.zeros(2)
            p += 1
            model.reshard()
        """
    )
    unshard, reshard = (s for s in facts.calls if s.attr in ("unshard", "reshard"))
    writes = [m for m in facts.mutations if m.ctx.function is not None]
    assert len(writes) == 2
    assert all(unshard.done <= w.order < reshard.order for w in writes)


def test_unshard_regions_pair_a_sharded_module_with_its_next_reshard():
    facts = _facts(
        """
        def edit(model, ema):
            fully_shard(model)
            model.unshard()
            for p in model.parameters():
                ema.mul_(0.5)
                p.mul_(0.5)
            model.reshard()
            model.unshard()
            model.reshard()

        def no_reshard(model):
            fully_shard(model)
            model.unshard()
            for p in model.parameters():
                p.zero_()

        def other_loop(model, steps):
            fully_shard(model)
            model.unshard()
            for _ in steps:
                model.reshard()

        def not_sharded(model):
            model.unshard()
            model.reshard()
        """
    )
    regions = unshard_regions(facts)
    assert len(regions) == 2
    first, second = regions
    assert first.receiver == "model" and first.reshard.order < second.unshard.order
    assert [_code(facts, e.node) for e in first.edits] == ["p.mul_(0.5)"]  # not the write to ``ema``
    assert second.edits == []


def _wraps(facts):
    return {_code(facts, w.site.node).split("(", 1)[1].split(",")[0].rstrip(")"): w for w in fsdp_modules(facts).fsdp2_wraps}


def test_mp_policy_reads_names_dicts_and_positional_dtypes():
    facts = _facts(
        """
        def f(model, mesh, given):
            policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
            kwargs = {"mesh": mesh, "mp_policy": MixedPrecisionPolicy(torch.float16)}
            fully_shard(model.a, mp_policy=policy)
            fully_shard(model.b, **kwargs)
            fully_shard(model.c, mp_policy=MixedPrecisionPolicy(reduce_dtype=torch.float32))
            fully_shard(model.d, mp_policy=given)
            fully_shard(model)
        """
    )
    wraps = _wraps(facts)
    assert mp_policy(facts, wraps["model.a"]).param_dtype == "torch.bfloat16"
    assert mp_policy(facts, wraps["model.b"]).param_dtype == "torch.float16"
    third = mp_policy(facts, wraps["model.c"])
    assert third.given and third.param_dtype is None
    assert mp_policy(facts, wraps["model.d"]) is UNKNOWN
    assert mp_policy(facts, wraps["model"]) == NO_POLICY


def test_registered_forward_methods_are_literals_or_unknown():
    facts = _facts(
        """
        def f(model, name):
            fully_shard(model)
            register_fsdp_forward_method(model, "encode")
            register_fsdp_forward_method(model, method_name="decode")
        """
    )
    assert registered_forward_methods(facts) == {"encode", "decode"}
    facts = _facts("register_fsdp_forward_method(model, name)\n")
    assert registered_forward_methods(facts) == {None}


def test_in_file_methods_run_the_hooks_or_bypass_them():
    facts = _facts(
        """
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = torch.nn.Embedding(8, 4)
                self.encoder = torch.nn.Linear(4, 4)
                self.tokenizer = None

            def forward(self, x):
                return self.encoder(self.embed(x))

            def encode(self, x):
                return self.embed(x)

            def via_encode(self, x):
                return self.encode(x)

            def generate(self, x):
                return self(x)

            def via_forward(self, x):
                return self.forward(x)

            def tokenize(self, text):
                return self.tokenizer(text)

            def encode_apart(self, x):
                return self.encoder(x)

        def f():
            net = Net()
            fully_shard(net.encoder)
            fully_shard(net)
        """
    )
    origin = Origin(_wraps(facts)["net"])
    assert in_file_method(facts, origin, "encode") == BYPASS
    assert in_file_method(facts, origin, "via_encode") == BYPASS
    assert in_file_method(facts, origin, "via_forward") == BYPASS
    assert in_file_method(facts, origin, "generate") == HOOKS
    assert in_file_method(facts, origin, "tokenize") is None  # not a module
    assert in_file_method(facts, origin, "encode_apart") is None  # sharded apart: its own hooks
    assert in_file_method(facts, origin, "missing") is None


def test_a_submodule_without_parameters_is_no_bypass():
    facts = _facts(
        """
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.loss_fn = torch.nn.CrossEntropyLoss()
                self.drop = torch.nn.Dropout(0.1)
                self.head = torch.nn.Linear(4, 4)

            def loss(self, logits, labels):
                return self.loss_fn(self.drop(logits), labels)

            def logits(self, h):
                return self.head(h)

        def f():
            net = Net()
            fully_shard(net)
        """
    )
    origin = Origin(_wraps(facts)["net"])
    assert in_file_method(facts, origin, "loss") is None
    assert in_file_method(facts, origin, "logits") == BYPASS


def test_a_state_dict_call_ends_the_region_it_reshards():
    facts = _facts(
        """
        def f(model, sd):
            fully_shard(model)
            model.unshard()
            model.fc.weight.zero_()
            model.load_state_dict(sd)
            model.fc.bias.zero_()
            model.reshard()
        """
    )
    (region,) = unshard_regions(facts)
    assert [_code(facts, e.node) for e in region.edits] == ["model.fc.weight.zero_()"]


def test_the_modules_whose_weights_a_sharded_module_holds():
    """``submodules.weight_holders``: what ``fully_shard`` is given is part of the modules
    it is read from, through attributes, loops, ``getattr`` and names bound in branches
    (``None`` left out); a name also bound to something else is only itself."""
    from fsdp_lint.facts.submodules import weight_holders

    facts = _facts(
        """
        def shard(model, other, cfg):
            layers = None
            if hasattr(model.model, "language_model"):
                layers = model.model.language_model.layers
            elif hasattr(model.model, "layers"):
                layers = model.model.layers
            for block in layers:
                fully_shard(block, **cfg)
            visual = getattr(getattr(model, "model", None), "visual", None)
            fully_shard([visual.patch_embed, visual.rotary_pos_emb], **cfg)
            for i, layer in enumerate(model.blocks):
                fully_shard(layer, **cfg)
            mixed = model.head if cfg.tie else other.head
            fully_shard(mixed, **cfg)
            fully_shard(model.lm_head, **cfg)
        """
    )
    wraps = [s for s in facts.calls if s.attr == "fully_shard"]
    held = [weight_holders(facts, s.node.args[0].value, s.ctx, s.order) for s in wraps]
    assert held[0] == ["block", "layers", "model.model", "model"]
    assert held[1] == ["visual", "model"]
    assert held[2] == ["layer", "model"]
    assert held[3] == ["mixed"]  # a conditional expression: parts of two modules
    assert held[4] == ["model.lm_head", "model"]
