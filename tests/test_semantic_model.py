"""The module model every rule queries: evaluation order, where a nested ``def`` runs,
re-binding, rank tests and single-process branches (``facts.index``, ``facts.scopes``,
``facts.flow``, ``facts.ranks``)."""

import ast
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from fsdp_lint.facts.index import index_module
from fsdp_lint.facts.processes import single_process_branch, true_when_distributed
from fsdp_lint.facts.ranks import restricted_to_some_ranks
from fsdp_lint.facts.scopes import lookup, runs_before, runs_in


def _facts(code):
    return index_module(cst.parse_module(textwrap.dedent(code)))


def _call(facts, text):
    found = [s for s in facts.calls if facts.module.code_for_node(s.node) == text]
    assert len(found) == 1, (text, [facts.module.code_for_node(s.node) for s in facts.calls])
    return found[0]


def test_arguments_run_before_the_call():
    facts = _facts("model = FSDP(model.bfloat16(), device_id=rank())\n")
    wrap = _call(facts, "FSDP(model.bfloat16(), device_id=rank())")
    cast = _call(facts, "model.bfloat16()")
    rank = _call(facts, "rank()")
    assert wrap.order < cast.order < rank.order <= wrap.done
    assert not runs_before(facts, wrap.ctx, wrap.done, cast.ctx, cast.order)
    assert runs_before(facts, cast.ctx, cast.done, wrap.ctx, wrap.done + 1)


def test_the_right_side_runs_before_the_target_is_bound():
    facts = _facts(
        """
        def f(model):
            model = FSDP(model)
            model = wrap(model)
            return model
        """
    )
    first = _call(facts, "FSDP(model)")
    second = _call(facts, "wrap(model)")
    bindings = [b for b in facts.bindings if b.target == "model"]
    assert [b.order > c.done for b, c in zip(bindings, (first, second))] == [True, True]
    # the argument of the second call sees the first binding, not its own
    seen = lookup(facts, "model", second.ctx, second.order).bindings
    assert [facts.module.code_for_node(b.value) for b in seen] == ["FSDP(model)"]
    # and the argument of the first sees no binding of the function (the parameter)
    assert lookup(facts, "model", first.ctx, first.order).param == "model"


def test_loop_and_with_targets_are_bound_after_their_expression():
    facts = _facts(
        """
        def f(loader, model):
            for batch in make(loader):
                pass
            with open_ctx(model) as ctx:
                pass
        """
    )
    for target, call in (("batch", "make(loader)"), ("ctx", "open_ctx(model)")):
        binding = next(b for b in facts.bindings if b.target == target)
        assert binding.order > _call(facts, call).done


NESTED = """
class Trainer:
    def setup(self):
        def do_fsdp():
            self.model = FSDP(self.model)

        def never_called():
            self.ref = FSDP(self.ref)

        self.model.to("cuda")
        do_fsdp()
        self.model.half()

    def later(self):
        self.model.float()
"""


def test_a_nested_def_runs_where_it_is_called():
    facts = _facts(NESTED)
    wrap = _call(facts, "FSDP(self.model)")
    move = _call(facts, 'self.model.to("cuda")')
    cast = _call(facts, "self.model.half()")
    places = runs_in(facts, wrap.ctx, move.ctx.function)
    assert [p[1] for p in places] == [_call(facts, "do_fsdp()").done]
    assert not runs_before(facts, wrap.ctx, wrap.done, move.ctx, move.order)
    assert runs_before(facts, wrap.ctx, wrap.done, cast.ctx, cast.order)
    # a nested def never called where it stands does not run there
    never = _call(facts, "FSDP(self.ref)")
    assert runs_in(facts, never.ctx, move.ctx.function) == []
    # another method: nothing is known, it may have run before
    other = _call(facts, "self.model.float()")
    assert runs_in(facts, wrap.ctx, other.ctx.function) is None
    assert runs_before(facts, wrap.ctx, wrap.done, other.ctx, other.order)


def test_attribute_bindings_follow_the_nested_def_and_the_method():
    facts = _facts(NESTED)
    move = _call(facts, 'self.model.to("cuda")')
    cast = _call(facts, "self.model.half()")
    assert lookup(facts, "self.model", move.ctx, move.order).bindings == []
    assert [facts.module.code_for_node(b.value) for b in lookup(facts, "self.model", cast.ctx, cast.order).bindings] == [
        "FSDP(self.model)"
    ]
    other = _call(facts, "self.model.float()")
    assert len(lookup(facts, "self.model", other.ctx, other.order).bindings) == 1


def test_a_binding_of_the_method_on_every_path_hides_the_other_methods():
    facts = _facts(
        """
        class T:
            def a(self):
                self.model = FSDP(self.model)

            def b(self):
                self.model = build()
                self.model.cuda()
        """
    )
    move = _call(facts, "self.model.cuda()")
    assert [facts.module.code_for_node(b.value) for b in lookup(facts, "self.model", move.ctx, move.order).bindings] == [
        "build()"
    ]


@pytest.mark.parametrize(
    "test,branch",
    [
        ('"LOCAL_RANK" in os.environ', "orelse"),
        ('"WORLD_SIZE" not in os.environ', "body"),
        ("dist.is_initialized()", "orelse"),
        ("dist.is_available() and dist.is_initialized()", "orelse"),
        ("not torch.distributed.is_initialized()", "body"),
        ("use_fsdp or use_ddp", "orelse"),
        ("args.distributed", "orelse"),
        ("world_size > 1", "orelse"),
        ("dist.get_world_size() == 1", "body"),
        ("dist.is_available()", None),
        ("use_fsdp or step > 10", None),
        ("rank == 0", None),
        ("args.fsdp_config", None),
        # DDP's flag: its other side may be FSDP, not one process (FSDP's flag keeps its
        # reading: its other side is a run FSDP is not in)
        ("use_ddp", None),
        ("not args.use_ddp", None),
        ("args.enable_fsdp", "orelse"),
    ],
)
def test_single_process_branches(test, branch):
    assert single_process_branch(cst.parse_expression(test)) == branch


@pytest.mark.parametrize(
    "value,holds",
    [
        ("dist.get_world_size() > 1", True),
        ('"RANK" in os.environ', True),
        ("dist.is_available() and dist.is_initialized()", True),
        ("world_size != 1", True),
        ("dist.get_world_size() == 1", False),
        ("not dist.is_initialized()", False),
        ("args.offload", False),
        ("use_ddp", False),  # DDP's flag: the run FSDP shards may be its other side
        ("rank == 0", False),
    ],
)
def test_values_true_in_every_distributed_run(value, holds):
    assert true_when_distributed(cst.parse_expression(value)) is holds


@pytest.mark.parametrize(
    "test,restricted",
    [
        ('os.environ["LOCAL_RANK"] == 0', True),
        ('int(os.environ["LOCAL_RANK"]) == 0', True),
        ("state.is_local_master", True),
        ("my_rank == 0", True),
        ('os.environ.get("RANK", "0") == "0"', True),
        ('"LOCAL_RANK" in os.environ', False),  # the body: the distributed run, every rank
        ("step % 10 == 0", False),
        ("dist.is_initialized()", False),
    ],
)
def test_code_under_a_rank_test_may_run_on_some_ranks(test, restricted):
    facts = _facts(f"if {test}:\n    save()\n")
    assert restricted_to_some_ranks(facts, _call(facts, "save()").ctx) is restricted


def test_else_of_a_distributed_test_is_restricted():
    facts = _facts('if "LOCAL_RANK" in os.environ:\n    sync()\nelse:\n    save()\n')
    assert restricted_to_some_ranks(facts, _call(facts, "save()").ctx)
    assert not restricted_to_some_ranks(facts, _call(facts, "sync()").ctx)


# One home for each domain fact: no rule module keeps its own list of rank words, rank
# tests or collectives (they live in facts/ranks.py and facts/collectives.py).
RULES = sorted((Path(__file__).resolve().parent.parent / "fsdp_lint" / "rules").glob("fsd*.py"))
_DOMAIN_WORDS = ("rank", "is_main_process", "is_global_zero", "barrier", "all_reduce", "all_gather", "broadcast")


@pytest.mark.parametrize("path", RULES, ids=lambda p: p.name)
def test_rules_keep_no_private_rank_or_collective_vocabulary(path):
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        strings = [n.value for n in ast.walk(node.value) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        words = [s for s in strings if any(w in s for w in _DOMAIN_WORDS)]
        assert not words, f"{path.name} line {node.lineno} defines its own rank/collective vocabulary: {words}"


@pytest.mark.parametrize(
    "expr,per_rank",
    [
        ('f"shard_{rank}.pt"', True),
        ("os.path.join(out, str(dist.get_rank()))", True),
        ('os.path.join(out, os.environ["LOCAL_RANK"])', True),
        ('AtomicDirectory(out, is_master=rank == 0)', False),
        ('make_dir(out, main=args.local_rank in (-1, 0))', False),
        ('os.path.join(out, "model.pt")', False),
    ],
)
def test_a_rank_value_flows_into_a_path_a_rank_test_does_not(expr, per_rank):
    from fsdp_lint.facts.ranks import mentions_rank

    assert mentions_rank(cst.parse_expression(expr), values_only=True) is per_rank


def test_latest_binding_is_what_reaches_the_use():
    from fsdp_lint.facts.scopes import latest_binding

    facts = _facts(
        """
        def f(step, cond):
            flag = step % 10 == 0
            if cond:
                flag = True
            use(flag)
            flag = False
        """
    )
    use = _call(facts, "use(flag)")
    assert facts.module.code_for_node(latest_binding(facts, "flag", use.ctx, use.order).value) == "True"


def test_a_binding_later_in_a_loop_reaches_the_next_iteration():
    from fsdp_lint.facts.scopes import lookup

    facts = _facts(
        """
        def train(loader, model):
            do_eval = False
            for step, batch in enumerate(loader):
                if do_eval:
                    evaluate(model)
                do_eval = step % 100 == 0
        """
    )
    use = _call(facts, "evaluate(model)")
    values = sorted(facts.module.code_for_node(b.value) for b in lookup(facts, "do_eval", use.ctx, use.order).bindings)
    assert values == ["False", "step % 100 == 0"]


# -- tests that contradict each other (``facts.conditions``) ------------------------------
_SETUP = """
def main(args, net, loader):
    is_distributed = args.world_size > 1
    is_ddp = is_distributed and args.dist == "ddp"
    is_fsdp = is_distributed and args.dist == "fsdp"
{body}
"""


@pytest.mark.parametrize(
    "body, first, then, exclusive",
    [
        # one value of args.dist cannot equal two strings; not-distributed excludes is_fsdp
        ("    if is_fsdp:\n        wrap(net)\n    if (not is_distributed) or is_ddp:\n        use(net)\n",
         "wrap(net)", "use(net)", True),
        ("    if is_fsdp:\n        wrap(net)\n    if is_distributed:\n        use(net)\n", "wrap(net)", "use(net)", False),
        ("    if args.dist in ('fsdp', 'hsdp'):\n        wrap(net)\n    elif args.dist == 'ddp':\n        pass\n"
         "    if args.dist == 'ddp':\n        use(net)\n", "wrap(net)", "use(net)", True),
        ("    if args.use_fsdp:\n        wrap(net)\n    if not args.use_fsdp:\n        use(net)\n",
         "wrap(net)", "use(net)", True),
        ("    if args.dist != 'fsdp':\n        wrap(net)\n    if args.dist == 'ddp':\n        use(net)\n",
         "wrap(net)", "use(net)", False),
        # a name bound again between the tests, in a loop, or a test that calls: not read
        ("    if is_fsdp:\n        wrap(net)\n    is_fsdp = False\n    if not is_fsdp:\n        use(net)\n",
         "wrap(net)", "use(net)", False),
        ("    for mode in args.modes:\n        on = mode == 'fsdp'\n        if on:\n            wrap(net)\n"
         "        if not on:\n            use(net)\n", "wrap(net)", "use(net)", False),
        ("    if dist.is_initialized():\n        wrap(net)\n    if not dist.is_initialized():\n        use(net)\n",
         "wrap(net)", "use(net)", False),
        # a part of a test that is not read is free: the rest still contradicts
        ("    if args.dist == 'fsdp':\n        wrap(net)\n    if args.dist != 'fsdp' and dist.get_rank() == 0:\n"
         "        use(net)\n", "wrap(net)", "use(net)", True),
        ("    if args.dist == 'fsdp':\n        wrap(net)\n    if args.dist != 'fsdp' or dist.get_rank() == 0:\n"
         "        use(net)\n", "wrap(net)", "use(net)", False),
        # a flag computed once by a call before both tests is one value
        ("    main_process = dist.get_rank() == 0\n    if main_process:\n        wrap(net)\n"
         "    if not main_process:\n        use(net)\n", "wrap(net)", "use(net)", True),
    ],
)
def test_tests_that_contradict_each_other_are_exclusive(body, first, then, exclusive):
    from fsdp_lint.facts.flow import can_follow

    facts = _facts(_SETUP.format(body=body))
    a, b = _call(facts, first), _call(facts, then)
    assert can_follow(a.ctx, a.order, b.ctx, b.order) is not exclusive


@pytest.mark.parametrize(
    "body, exclusive",
    [
        # in a loop: an attribute flag and a comparison are read, a bare name only when
        # nothing in the function may change the object it holds
        ("    if args.fsdp:\n        wrap(net)\n    for batch in loader:\n        if not args.fsdp:\n"
         "            use(net)\n", True),
        ("    for batch in loader:\n        if args.dist == 'fsdp':\n            wrap(net)\n"
         "        elif args.dist == 'ddp':\n            pass\n        if args.dist == 'ddp':\n            use(net)\n", True),
        ("    pending = []\n    for batch in loader:\n        if pending:\n            wrap(net)\n"
         "        if not pending:\n            use(net)\n            pending.append(batch)\n", False),
        # a flag the function only reads keeps its value through the loop; handed to a call,
        # written into or augmented, it may not
        ("    ready = load()\n    for batch in loader:\n        if ready:\n            wrap(net)\n        if not ready:\n"
         "            use(net)\n", True),
        ("    ready = load()\n    for batch in loader:\n        if ready:\n            wrap(net)\n        if not ready:\n"
         "            use(net)\n        refresh(ready)\n", False),
        ("    done = []\n    for batch in loader:\n        if done:\n            wrap(net)\n        if not done:\n"
         "            use(net)\n        done += [batch]\n", False),
        # a flag computed once by a call before the loop is the same value in it (nanoGPT's
        # fsdp = int(os.environ.get("RANK", -1)) != -1)
        ("    on = int(os.environ.get('RANK', -1)) != -1\n    if on:\n        wrap(net)\n    for batch in loader:\n"
         "        if not on:\n            use(net)\n", True),
        ("    on = int(os.environ.get('RANK', -1)) != -1\n    if on:\n        wrap(net)\n    for batch in loader:\n"
         "        if not on:\n            use(net)\n        on.refresh()\n", False),
    ],
)
def test_tests_in_loops_read_attributes_and_comparisons_only(body, exclusive):
    from fsdp_lint.facts.flow import exclusive as are_exclusive

    facts = _facts(_SETUP.format(body=body))
    a, b = _call(facts, "wrap(net)"), _call(facts, "use(net)")
    assert are_exclusive(a.ctx, b.ctx) is exclusive


# -- module globals that exec() may rebind; conditional expressions read on the use's path --
_FSDP_IMPORT = "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"

@pytest.mark.parametrize(
    "head, reaches",
    [
        # a literal flag is that value: the FSDP branch never runs where a test is read
        ("use_fsdp = False\n", False),
        # nanoGPT's configurator rebinds the globals from the command line: the flag is
        # unknown (one value, either), so the FSDP branch may run
        ("use_fsdp = False\nexec(open('configurator.py').read())\n", True),
        ("use_fsdp = False\nglobals().update(overrides)\n", True),
        # an exec before the binding rebinds nothing after it
        ("exec(open('configurator.py').read())\nuse_fsdp = False\n", False),
    ],
)
def test_exec_may_rebind_the_module_globals(head, reaches):
    from fsdp_lint.facts.fsdp_modules import origins

    facts = _facts(_FSDP_IMPORT + head + "ready = args.ready\nmodel = Net()\nif use_fsdp:\n    model = FSDP(model)\n"
                   "if ready:\n    use(model)\n")
    site = _call(facts, "use(model)")
    found = origins(facts, site.node.args[0].value, site.ctx, site.order)
    assert bool(found.fsdp1) is reaches


@pytest.mark.parametrize(
    "test, reaches",
    [
        ("if not use_fsdp:\n", False),  # raw is the DDP inner module or the plain model
        ("if use_fsdp:\n", True),
        ("if ready:\n", True),  # a test the arms do not depend on
    ],
)
def test_a_conditional_expression_is_read_on_the_use_path(test, reaches):
    from fsdp_lint.facts.fsdp_modules import origins

    code = _FSDP_IMPORT + (
        "use_fsdp = args.use_fsdp\ndistributed = args.distributed\nready = args.ready\nmodel = Net()\n"
        "if distributed:\n    if use_fsdp:\n        model = FSDP(model)\n    else:\n        model = DDP(model)\n"
        "raw = model.module if distributed and not use_fsdp else model\n"
        + test + "    use(raw)\n"
    )
    facts = _facts(code)
    site = _call(facts, "use(raw)")
    found = origins(facts, site.node.args[0].value, site.ctx, site.order)
    assert bool(found.fsdp1) is reaches


def test_an_instance_flag_set_once_in_init_splits_the_methods():
    from fsdp_lint.facts.fsdp_modules import origins

    code = _FSDP_IMPORT + (
        "class Trainer:\n"
        "    def __init__(self, config, model):\n"
        "        self.is_fsdp = config.use_fsdp\n"
        "        if self.is_fsdp:\n"
        "            self.model = FSDP(model)\n"
        "        else:\n"
        "            self.model = model\n"
        "    def step(self):\n"
        "        if self.is_fsdp:\n"
        "            use_sharded(self.model)\n"
        "        else:\n"
        "            use_plain(self.model)\n"
    )
    facts = _facts(code)
    for call, reaches in (("use_sharded(self.model)", True), ("use_plain(self.model)", False)):
        site = _call(facts, call)
        assert bool(origins(facts, site.node.args[0].value, site.ctx, site.order).fsdp1) is reaches
    # bound again in another method: the flag may change between the calls, nothing is concluded
    facts = _facts(code + "    def other(self):\n        self.is_fsdp = True\n")
    site = _call(facts, "use_plain(self.model)")
    assert origins(facts, site.node.args[0].value, site.ctx, site.order).fsdp1


def test_a_device_tested_before_the_wrap_is_not_the_cpu():
    from fsdp_lint.facts.fsdp_modules import origins, wrap_config

    for guard, cpu in (("    if device.type != 'cuda':\n        raise RuntimeError('needs GPUs')\n", False),
                       ("    if world_size < 2:\n        raise RuntimeError('needs two ranks')\n", True)):
        facts = _facts(_FSDP_IMPORT + "import torch\n"
                       "def build(core, world_size, device):\n" + guard +
                       "    return FSDP(core, device_id=device)\n"
                       "device = torch.device('cuda') if torch.cuda.is_available() else torch.device('cpu')\n"
                       "model = build(net, 2, device)\n"
                       "use(model)\n")
        site = _call(facts, "use(model)")
        found = origins(facts, site.node.args[0].value, site.ctx, site.order).fsdp1
        assert found and wrap_config(facts, found[0]).cpu_device is cpu


@pytest.mark.parametrize("helper, loaded", [
    ("m = AutoModel.from_pretrained(p, torch_dtype=torch.bfloat16)\n    m.config.use_cache = False\n    return m",
     "torch.bfloat16"),
    ("return AutoModel.from_pretrained(p, torch_dtype=torch.float16).to('cuda')", "torch.float16"),
    ("m = AutoModel.from_pretrained(p)\n    return m.to(torch.bfloat16)", "torch.bfloat16"),
    ("m = AutoModel.from_pretrained(p, torch_dtype=torch.bfloat16)\n    m = m.float()\n    return m", "torch.float32"),
    ("m = AutoModel.from_pretrained(p, torch_dtype=torch.bfloat16)\n    m.float()\n    return m", None),
    ("return AutoModel.from_pretrained(p)", None),
])
def test_the_dtype_a_module_is_made_in_follows_a_helper_of_the_file(helper, loaded):
    """A function body runs where it is called: ``model = load(p)`` holds what its
    ``return`` gives, read in the dtype that load or cast makes it (an in-place cast on the
    way out leaves it unknown)."""
    from fsdp_lint.facts.dtypes import loaded_in
    from fsdp_lint.facts.scopes import latest_binding

    facts = _facts(
        "import torch\nfrom transformers import AutoModel\n\n\ndef load(p):\n    " + helper + "\n\n\n"
        "def main(p):\n    model = load(p)\n    use(model)\n"
    )
    use = _call(facts, "use(model)")
    binding = latest_binding(facts, "model", use.ctx, use.order)
    found = loaded_in(facts, binding.value, binding.ctx)
    assert (found[0] if found is not None else None) == loaded


def test_a_helper_that_shards_its_parameter_in_place_returns_it_sharded_and_compile_keeps_it():
    """``model = shard(model)`` where ``shard`` runs ``fully_shard(model)`` and returns it:
    the value the caller gets went through that ``fully_shard`` (the helper's in-place
    events are read at its ``return``); ``torch.compile(model)`` is the same module for
    every question about its FSDP units."""
    from fsdp_lint.facts.fsdp_modules import fully_sharded

    facts = _facts(
        """
        import torch
        from torch.distributed.fsdp import fully_shard

        def shard(model):
            for block in model.layers:
                fully_shard(block)
            fully_shard(model)
            return model

        def main(model):
            model = shard(model)
            use(model)
            model = torch.compile(model)
            use(model)
            other = torch.compile(make())
            use(other)
        """
    )
    uses = [s for s in facts.calls if facts.module.code_for_node(s.node).startswith("use(")]
    found = [fully_sharded(facts, u.node.args[0].value, u.ctx, u.order) for u in uses]
    assert [f is not None for f in found] == [True, True, False]


@pytest.mark.parametrize("test, branch, expected", [
    ("isinstance(model, FSDP)", "else", True),
    ("isinstance(model, FSDP)", "body", False),
    ("not isinstance(model, FSDP)", "body", True),
    ("isinstance(model, (FSDP, FullyShardedDataParallel))", "else", True),
    ("isinstance(model, (FSDP, DDP))", "else", False),
    ("isinstance(other, FSDP)", "else", False),
])
def test_a_type_test_says_a_module_is_not_fsdp(test, branch, expected):
    from fsdp_lint.facts import torch_api
    from fsdp_lint.facts.conditions import tested_not_instance

    body, orelse = ("use(model)", "pass") if branch == "body" else ("pass", "use(model)")
    facts = _facts(
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, FullyShardedDataParallel\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n\n"
        f"def f(model, other):\n    if {test}:\n        {body}\n    else:\n        {orelse}\n"
    )
    use = _call(facts, "use(model)")
    assert tested_not_instance(facts, use.ctx, "model", torch_api.FSDP_CLASS) is expected


@pytest.mark.parametrize("code, expected", [
    # the else of a hasattr test: what runs there has no such attribute
    ("if hasattr(norm, 'item'):\n        pass\n    else:\n        use(norm)", True),
    ("if not hasattr(norm, 'full_tensor'):\n        use(norm)", True),
    ("x = norm.item() if hasattr(norm, 'item') else use(norm)", True),
    # the branch where it has one, another attribute, another name, a non-hasattr test
    ("if hasattr(norm, 'item'):\n        use(norm)", False),
    ("x = use(norm) if hasattr(norm, 'item') else 0.0", False),
    ("if not hasattr(norm, 'shape_of_mine'):\n        use(norm)", False),
    ("if not hasattr(other, 'item'):\n        use(norm)", False),
    ("if not isinstance(norm, float):\n        use(norm)", False),
])
def test_a_hasattr_test_says_what_a_value_lacks(code, expected):
    from fsdp_lint.facts.conditions import tested_without

    facts = _facts(f"def f(norm, other):\n    {code}\n")
    use = _call(facts, "use(norm)")
    assert tested_without(use.ctx, "norm", {"item", "full_tensor"}) is expected


def test_a_call_that_hands_its_operand_back_is_read_on_the_uses_path():
    """``raw = model.module if ddp else model`` after ``if ddp: model = FSDP(model)`` and
    ``if compile: model = torch.compile(model)``: the ``else`` arm's ``model`` is the plain
    one, through the compile as without it."""
    from fsdp_lint.facts.fsdp_modules import origins

    facts = _facts(
        """
        import os
        import torch
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        ddp = int(os.environ.get("RANK", -1)) != -1
        compile = True
        model = make()
        if ddp:
            model = FSDP(model, use_orig_params=True)
        if compile:
            model = torch.compile(model)
        raw_model = model.module if ddp else model
        use(raw_model)
        """
    )
    use = _call(facts, "use(raw_model)")
    found = origins(facts, use.node.args[0].value, use.ctx, use.order)
    assert not found.fsdp1 and found.inner  # the ddp arm: the root's inner module; the other: not wrapped


@pytest.mark.parametrize("code, reaching", [
    # an elif chain whose last arm raises: both other arms reach the code after it
    ("if c == 1:\n        x = 1\n    elif c == 2:\n        x = 2\n    else:\n        raise ValueError\n    use(x)",
     ["1", "2"]),
    # the same inside a with block, and read under a test that keeps one arm
    ("with ctx():\n        if c == 1:\n            x = 1\n        elif c == 2:\n            x = 2\n"
     "        else:\n            raise ValueError\n        if c == 1:\n            use(x)", ["1"]),
    # an early exit inside a branch narrows the rest of that branch only
    ("x = 0\n    if c:\n        if d:\n            return\n        x = 1\n    use(x)", ["0", "1"]),
])
def test_the_guards_of_an_exit_inside_a_branch_end_with_the_branch(code, reaching):
    facts = _facts("def f(c, d):\n    " + code + "\n")
    use = _call(facts, "use(x)")
    assert sorted(facts.module.code_for_node(b.value) for b in lookup(facts, "x", use.ctx, use.order).bindings) == reaching


@pytest.mark.parametrize("other, per_rank", [("dist.get_rank() % num_shard", True), ("0", False)])
def test_a_path_made_after_an_elif_chain_that_raises_reads_the_binding_that_reaches_it(other, per_rank):
    """``shard_index`` bound in each arm of ``if/elif/else: raise`` inside a ``with``: the
    path reads the binding that reaches it last (the guard stack kept the arms apart)."""
    from fsdp_lint.facts.ranks import per_rank_path

    facts = _facts(
        "import torch\nimport torch.distributed as dist\n\n\n"
        "def save(opt, strategy, num_shard):\n    with ctx():\n        if strategy == 'full':\n"
        "            shard_index = dist.get_rank()\n        elif strategy == 'hybrid':\n"
        f"            shard_index = {other}\n        else:\n            raise ValueError(strategy)\n"
        "        path = f'optimizer.{shard_index:05d}.pt'\n        torch.save(opt.state_dict(), path)\n"
    )
    save = _call(facts, "torch.save(opt.state_dict(), path)")
    assert per_rank_path(facts, save, save.node.args[1].value) is per_rank


@pytest.mark.parametrize("test, together", [
    ("torch.cuda.is_available()", False),  # one answer for the whole process
    ("not torch.cuda.is_available()", True),
    ("dist.is_initialized()", True),  # may change between the two calls: not read
    ("use_cuda", True),  # the caller's name is another variable than the helper's
])
def test_a_process_constant_test_relates_two_functions(test, together):
    """The helper's ``else`` (no GPU) and the caller's code under ``test``."""
    from fsdp_lint.facts.conditions import never_together

    facts = _facts("import torch\nimport torch.distributed as dist\n"
                   "def setup():\n    use_cuda = torch.cuda.is_available()\n"
                   "    if use_cuda:\n        made(1)\n    else:\n        made(2)\n"
                   f"def main(use_cuda):\n    if {test}:\n        use(1)\n")
    assert never_together(_call(facts, "made(2)").ctx, _call(facts, "use(1)").ctx) is not together


def test_a_process_constant_test_read_through_a_name_in_one_function():
    from fsdp_lint.facts.flow import exclusive

    facts = _facts("import torch\ndef main():\n    use_cuda = torch.cuda.is_available()\n"
                   "    if use_cuda:\n        wrap(net)\n    if not torch.cuda.is_available():\n        use(net)\n")
    assert exclusive(_call(facts, "wrap(net)").ctx, _call(facts, "use(net)").ctx)


@pytest.mark.parametrize("wrapper, inner, expected", [
    ("FSDP", "wrap(net)", {"SHARD_GRAD_OP"}),  # enable_wrap's keywords configure the wrap
    ("FSDP", "wrap(net, sharding_strategy=ShardingStrategy.NO_SHARD)", {"NO_SHARD"}),  # wrap's own win
    ("OtherWrapper", "wrap(net)", None),  # another wrapper class: no FSDP construction
])
def test_wrap_under_enable_wrap_is_an_fsdp1_construction(wrapper, inner, expected):
    from fsdp_lint.facts.fsdp_modules import origins, wrap_config

    facts = _facts("import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy\n"
                   "from torch.distributed.fsdp.wrap import enable_wrap, wrap\nfrom other import OtherWrapper\n"
                   f"with enable_wrap(wrapper_cls={wrapper}, sharding_strategy=ShardingStrategy.SHARD_GRAD_OP):\n"
                   f"    model = {inner}\nuse(model)\n")
    site = _call(facts, "use(model)")
    found = origins(facts, site.node.args[0].value, site.ctx, site.order).fsdp1
    if expected is None:
        assert not found
    else:
        assert found and wrap_config(facts, found[0]).sharding == expected


@pytest.mark.parametrize("setting, gathers", [
    # the class sets the state-dict type of self.model in another method: FSDP1 by its word
    ("    def ckpt(self):\n        with FSDP.state_dict_type(self.model, StateDictType.FULL_STATE_DICT):\n"
     "            self.model.state_dict()\n", True),
    # only after asking what kind of module it is: the module may be another kind
    ("    def ckpt(self):\n        if isinstance(self.model, FSDP):\n"
     "            with FSDP.state_dict_type(self.model, StateDictType.FULL_STATE_DICT):\n"
     "                self.model.state_dict()\n", False),
    # another attribute's state-dict type says nothing about self.model
    ("    def ckpt(self):\n        with FSDP.state_dict_type(self.ema, StateDictType.FULL_STATE_DICT):\n"
     "            self.ema.state_dict()\n", False),
    # the use in the else of the if that sets it for FSDP
    (None, False),
])
def test_a_module_whose_state_dict_type_the_code_sets_is_fsdp1(setting, gathers):
    from fsdp_lint.facts.collectives import gathers_full_state_dict

    head = ("import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType\n")
    if setting is None:
        code = head + ("def save(vlm, use_fsdp, rank):\n    if rank == 0:\n        if use_fsdp:\n"
                       "            with FSDP.state_dict_type(vlm, StateDictType.FULL_STATE_DICT):\n"
                       "                keep(vlm.state_dict())\n        else:\n            use(vlm.state_dict())\n")
        gathers, text = False, "use(vlm.state_dict())"
    else:
        code = head + ("class Trainer:\n    def __init__(self, model):\n        self.model = model\n"
                       "    def save(self):\n        use(self.model.state_dict())\n" + setting)
        text = "use(self.model.state_dict())"
    facts = _facts(code)
    site = _call(facts, text)
    inner = site.node.args[0].value
    assert gathers_full_state_dict(facts, inner.func.value, facts.call_site(inner)) is gathers


@pytest.mark.parametrize("test, branch", [
    ("not should_save or rank != 0", "orelse"),  # the rest after ``if ...: return`` is rank 0's
    ("rank != 0 or step % 10", "orelse"),
    ("should_save or rank == 0", None),  # its else needs rank != 0: every rank but one
    ("should_save and rank == 0", "body"),
    ("should_save or debug", None),
    # a "launched distributed?" side has its distributed run's value: the other side decides
    ("is_distributed() and get_rank() != 0", "orelse"),  # ranks but 0 return: the rest is rank 0's
    ("dist.is_initialized() and dist.get_rank() == 0", "body"),
    ("not dist.is_initialized() or dist.get_rank() == 0", "body"),
    ("get_world_size() > 1 and rank != 0", "orelse"),
    ("is_distributed() or rank == 0", None),  # true in every distributed run: every rank
    ("use_ddp and rank != 0", None),  # DDP's flag: its other side may be FSDP on every rank
])
def test_a_rank_test_inside_and_or_or(test, branch):
    from fsdp_lint.facts.ranks import one_rank_branch

    assert one_rank_branch(cst.parse_expression(test)) == branch


@pytest.mark.parametrize("subclass, reaches", [
    ("class Child(Base):\n    def use(self):\n        touch(self.policy.head)\n", True),  # inherits shard
    ("class Child(Base):\n    def shard(self):\n        self.policy.head = plain(self.policy.head)\n"
     "    def use(self):\n        touch(self.policy.head)\n", False),  # overrides it
    ("class Child(Middle):\n    def use(self):\n        touch(self.policy.head)\n", True),  # through two bases
    ("class Child(Other):\n    def use(self):\n        touch(self.policy.head)\n", False),  # not a subclass
])
def test_an_attribute_bound_in_an_inherited_method_reaches_the_subclass(subclass, reaches):
    facts = _facts("class Base:\n    def shard(self):\n        self.policy.head = wrap(self.policy.head)\n"
                   "class Middle(Base):\n    pass\nclass Other:\n    pass\n" + subclass)
    site = _call(facts, "touch(self.policy.head)")
    found = [b.value for b in lookup(facts, "self.policy.head", site.ctx, site.order).bindings]
    assert any(facts.module.code_for_node(v) == "wrap(self.policy.head)" for v in found) is reaches


def test_which_modules_an_optimizer_may_hold():
    from fsdp_lint.facts.optimizers import may_hold_parameters_of

    facts = _facts(
        """
        def setup(policy, ref, frozen):
            model = policy
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
            scheduler = get_scheduler("cosine", optimizer)
            return model, ref, frozen

        def parts(net, head):
            groups = [p for n, p in net.backbone.named_parameters()]
            optimizer = AdamW([{"params": groups}])

        def opaque(model, ref):
            optimizer = create_optimizer(model)

        def none_here(model):
            return model
        """
    )
    setup, parts, opaque, none_here = (
        facts.functions[n][0].node for n in ("setup", "parts", "opaque", "none_here")
    )
    # the optimizer holds `model`, an alias of `policy`, never `ref`
    assert may_hold_parameters_of(facts, "model", setup)
    assert may_hold_parameters_of(facts, "policy", setup)
    assert not may_hold_parameters_of(facts, "ref", setup)
    assert not may_hold_parameters_of(facts, "frozen", setup)
    # a part of `net` in the optimizer: `net` and that part may be held, `head` is not
    assert may_hold_parameters_of(facts, "net", parts)
    assert may_hold_parameters_of(facts, "net.backbone.layer1", parts)
    assert not may_hold_parameters_of(facts, "head", parts)
    # an optimizer built by a call the file cannot follow, or none at all: may hold anything
    assert may_hold_parameters_of(facts, "ref", opaque)
    assert may_hold_parameters_of(facts, "model", none_here)


def test_an_optimizer_is_used_through_the_object_it_was_handed_to():
    from fsdp_lint.facts.optimizers import used_after

    facts = _facts(
        """
        def main(model, loader):
            optimizer = AdamW(model.parameters())
            stepper = Stepper(model, optimizer)
            model = FSDP(model)
            for batch in loader:
                stepper.step(model(batch))

        def rebuilt(model, loader):
            optimizer = AdamW(model.parameters())
            old = Stepper(model, optimizer)
            model = FSDP(model)
            optimizer = AdamW(model.parameters())
            for batch in loader:
                model(batch).backward()
                optimizer.step()

        def stale_holder(model):
            optimizer = SGD(model.parameters())
            logger = Logger(optimizer)
            optimizer = AdamW(model.parameters())
            model = FSDP(model)
            logger.flush()
        """
    )
    main, rebuilt, stale = (facts.functions[n][0].node for n in ("main", "rebuilt", "stale_holder"))
    orders = {id(s.ctx.function): s.order for s in facts.calls if facts.module.code_for_node(s.node) == "FSDP(model)"}
    # the stepper holding the optimizer is used after the wrap
    assert used_after(facts, "optimizer", main, orders[id(main)])
    # the holder is never used again and the name is rebound after the wrap
    assert not used_after(facts, "optimizer", rebuilt, orders[id(rebuilt)])
    # the logger holds the SGD optimizer, not the AdamW one bound after it
    assert not used_after(facts, "optimizer", stale, orders[id(stale)])


def _values_at(facts, dotted, call_text):
    site = _call(facts, call_text)
    return sorted(facts.module.code_for_node(b.value) for b in lookup(facts, dotted, site.ctx, site.order).bindings)


def test_a_binding_made_only_in_one_process_does_not_reach_the_distributed_run():
    facts = _facts(
        """
        def setup(model, world_size):
            if world_size == 1:
                model = model.cuda()
                describe(model)
            else:
                model = FSDP(model)
            train(model)

        def wrap(model):
            if not dist.is_initialized():
                model = model.to("cuda")
                return model
            model = FSDP(model)
            evaluate(model)
        """
    )
    assert _values_at(facts, "model", "train(model)") == ["FSDP(model)"]
    # inside the single-process branch, its own binding is what the name holds
    assert _values_at(facts, "model", "describe(model)") == ["model.cuda()"]
    assert _values_at(facts, "model", "evaluate(model)") == ["FSDP(model)"]


def test_an_attribute_rebound_by_a_method_called_before_return():
    facts = _facts(
        """
        class Engine:
            def initialize(self):
                self.model = load(self.path)
                self._wrap()

            def _wrap(self):
                if not dist.is_initialized():
                    return
                inspect(self.model)
                self.model = FSDP(self.model)

            def setup_if_asked(self):
                self.head = load(self.path)
                if self.config.shard:
                    self._wrap_head()

            def _wrap_head(self):
                self.head = FSDP(self.head)

            def train(self):
                step(self.model)
                step(self.head)
        """
    )
    # another method sees the attribute as initialize() leaves it: wrapped by _wrap()
    assert _values_at(facts, "self.model", "step(self.model)") == ["FSDP(self.model)"]
    # _wrap() itself runs after the load and sees it
    assert "load(self.path)" in _values_at(facts, "self.model", "inspect(self.model)")
    # a wrap that runs only under a test does not hide the load
    assert _values_at(facts, "self.head", "step(self.head)") == ["FSDP(self.head)", "load(self.path)"]


def test_the_other_side_of_one_strategy_flag_is_not_one_process():
    facts = _facts(
        """
        def setup(model, args):
            if args.use_ddp:
                model = DDP(model)
            else:
                model = FSDP(model)
            train(model)
        """
    )
    assert _values_at(facts, "model", "train(model)") == ["DDP(model)", "FSDP(model)"]


@pytest.mark.parametrize("fallback, expected", [
    # torch moved the API: both paths are the one API, the first stands for both
    ("from torch.distributed._composable.fsdp import fully_shard", "torch.distributed.fsdp.fully_shard"),
    ("from torch.distributed._composable.fsdp.fully_shard import fully_shard", "torch.distributed.fsdp.fully_shard"),
    # another library's function of the same name, or another torch name: ambiguous, nothing
    ("from mylib.sharding import fully_shard", None),
    ("from torch.distributed.fsdp import FullyShardedDataParallel as fully_shard", None),
])
def test_an_import_fallback_to_an_older_torch_path_is_the_same_api(fallback, expected):
    facts = _facts(
        f"""
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:
            {fallback}

        fully_shard(model)
        """
    )
    call = _call(facts, "fully_shard(model)")
    assert facts.qualname(call.node.func) == expected


def test_helper_summaries_read_tests_that_hold_whenever_fsdp_shards():
    from fsdp_lint.facts.helpers import summaries

    facts = _facts(
        """
        try:
            from torch.distributed.fsdp import FSDPModule, fully_shard
        except ImportError:
            FSDPModule = fully_shard = None
        from torch.distributed.checkpoint.state_dict import get_model_state_dict
        from torch.nn.parallel import DistributedDataParallel as DDP

        TYPES = (FSDPModule,) if FSDPModule is not None else ()

        def prepare(model, config):
            if config.use_ddp:
                return DDP(model)
            if config.use_fsdp:
                if fully_shard is None:
                    raise RuntimeError("needs FSDP2")
                fully_shard(model)
            return model

        def prepare_if_asked(model, config):
            if config.shard_it:
                fully_shard(model)
            return model

        def gather(model):
            if isinstance(model, TYPES + (DDP,)):
                return get_model_state_dict(model)
            return model.state_dict()

        def gather_ddp(model):
            if isinstance(model, DDP):
                return get_model_state_dict(model)
            return model.state_dict()
        """
    )
    found = summaries(facts)
    # shards whenever FSDP is on (the DDP branch returns first; the raise ends the other path)
    assert found["prepare"].shards == "model"
    # a test that says nothing about FSDP keeps the shard conditional
    assert "prepare_if_asked" not in found or found["prepare_if_asked"].shards is None
    # the gather runs whenever the module is an FSDP one: a collective on `model`
    assert (found["gather"].model, found["gather"].needs) == ("model", "sharded")
    # under a DDP-only test it never runs on an FSDP module
    assert "gather_ddp" not in found or not found["gather_ddp"].collective


def test_an_arm_of_a_conditional_expression_runs_under_its_test():
    from fsdp_lint.facts.flow import exclusive

    facts = _facts(
        """
        def save(model, args):
            state = gathered() if args.fsdp else model.state_dict()
            if args.fsdp:
                wrap(model)
        """
    )
    arm = _call(facts, "model.state_dict()")
    assert [(facts.module.code_for_node(g.node.test), g.branch) for g in arm.ctx.guards] == [("args.fsdp", "orelse")]
    assert exclusive(arm.ctx, _call(facts, "wrap(model)").ctx)
    assert not _call(facts, "gathered()").ctx.guards[0].branch == "orelse"


def test_an_attribute_set_to_a_rank_test_in_another_function_is_one():
    from fsdp_lint.facts.ranks import rank_guard

    facts = _facts(
        """
        def save(args, state):
            if args.save_logs:
                write(state)
            if args.verbose:
                show(state)

        def main(args):
            args.save_logs = args.logs and dist.get_rank() == 0
            args.verbose = args.debug
        """
    )
    assert rank_guard(facts, _call(facts, "write(state)").ctx) is not None
    assert rank_guard(facts, _call(facts, "show(state)").ctx) is None


def test_a_method_of_the_files_own_class_decides_over_a_rank_flag_name():
    """``self.should_save`` read where the class defines ``should_save`` (a property, below
    its use: every method is bound when the class is made) is what the property returns,
    not transformers' main-process flag; a property or a method called that returns a rank
    test is one; a method read without a call is a bound method, always true."""
    from fsdp_lint.facts.ranks import rank_guard

    facts = _facts(
        """
        class Trainer:
            def train(self):
                if self.should_save:
                    first(self.step)
                if self.is_main:
                    second(self.step)
                if self.is_main_process():
                    third(self.step)
                if self.is_main_process:
                    fourth(self.step)

            @property
            def should_save(self):
                return self.step % self.every == 0 and self.step > 0

            @property
            def is_main(self):
                return dist.get_rank() == 0

            def is_main_process(self):
                return dist.get_rank() == 0
        """
    )
    assert rank_guard(facts, _call(facts, "first(self.step)").ctx) is None
    assert rank_guard(facts, _call(facts, "second(self.step)").ctx) is not None
    assert rank_guard(facts, _call(facts, "third(self.step)").ctx) is not None
    assert rank_guard(facts, _call(facts, "fourth(self.step)").ctx) is None


def test_a_value_made_on_one_rank_makes_its_test_a_rank_test():
    from fsdp_lint.facts.ranks import rank_guard

    facts = _facts(
        """
        def make():
            return Evaluator()

        def loop(rank, args, batch):
            evaluator = make() if rank == 0 else None
            writer = None
            if rank == 0:
                writer = Writer()
            task = make() if args.task else None
            if evaluator is not None:
                first(batch)
            if writer:
                second(batch)
            if task is not None:
                third(batch)
            if batch is None:
                fourth(batch)
        """
    )
    assert rank_guard(facts, _call(facts, "first(batch)").ctx) is not None
    assert rank_guard(facts, _call(facts, "second(batch)").ctx) is not None
    assert rank_guard(facts, _call(facts, "third(batch)").ctx) is None
    assert rank_guard(facts, _call(facts, "fourth(batch)").ctx) is None


def test_a_comparison_with_a_value_one_rank_updates_is_a_rank_test():
    """``ranks._compares_a_value_one_rank_updates``: a name that reaches the test both as
    a value every rank binds and as one rank 0 binds again (also around a loop) makes the
    ranks take different branches; a value every rank updates, one every rank binds again
    after the update (a broadcast's result) or a collective writes in place, or one no rank
    updates before the test, does not."""
    from fsdp_lint.facts.ranks import rank_guard

    facts = _facts(
        """
        def fit(loader, epochs, rank):
            best = float("inf")
            shared = float("inf")
            synced = float("inf")
            for epoch in range(epochs):
                loss = evaluate(loader)
                if loss < best:
                    first(loss)
                if loss < shared:
                    second(loss)
                if loss < synced:
                    fifth(loss)
                if rank == 0 and loss < best:
                    best = loss
                if loss < shared:
                    shared = loss
                    if rank == 0:
                        print(shared)
                if rank == 0 and loss < synced:
                    synced = loss
                synced = broadcast_value(synced)

        import torch.distributed as dist

        def synced_in_place(loss, rank):
            best = torch.zeros(1)
            if rank == 0:
                best = loss.clone()
            dist.broadcast(best, src=0)
            if loss > best:
                sixth(loss)

        def once(loss, rank):
            limit = 1.0
            if rank == 0:
                limit = read_limit()
            if loss > limit:
                third(loss)
            if rank == 0:
                late = loss
            if loss > 2.0:
                fourth(loss)
        """
    )
    assert rank_guard(facts, _call(facts, "first(loss)").ctx) is not None  # around the loop
    assert rank_guard(facts, _call(facts, "second(loss)").ctx) is None  # every rank updates it
    assert rank_guard(facts, _call(facts, "third(loss)").ctx) is not None  # straight on
    assert rank_guard(facts, _call(facts, "fourth(loss)").ctx) is None  # a constant: the same everywhere
    # rank 0's update is overwritten on every rank before the next iteration
    assert rank_guard(facts, _call(facts, "fifth(loss)").ctx) is None
    # a collective writes rank 0's value into every rank's tensor
    assert rank_guard(facts, _call(facts, "sixth(loss)").ctx) is None


def test_a_parameter_holds_what_the_callers_in_the_file_pass():
    """``facts.callers``: a parameter read on its own is followed into every call of its
    function (and, for ``self.<attr>`` bound in ``__init__``, every construction of the
    class): a value made on one rank, or a rank test, passed by every caller makes the
    callee's test a rank test; one caller passing a value every rank has keeps it not."""
    from fsdp_lint.facts.callers import passed_for
    from fsdp_lint.facts.ranks import rank_guard

    facts = _facts(
        """
        def loop(model, evaluator, is_main, shared):
            if evaluator is not None:
                first(model)
            if is_main:
                second(model)
            if shared is not None:
                third(model)

        class Runner:
            def __init__(self, model, hook=None):
                self.model = model
                self.hook = hook

            def run(self):
                if self.hook:
                    fourth(self.model)

        def main(rank, args):
            evaluator = Evaluator() if rank == 0 else None
            loop(model, evaluator, rank == 0, evaluator)
            loop(model, None, is_main=rank == 0, shared=Evaluator())
            Runner(model, hook=evaluator).run()
            Runner(model).run()
        """
    )
    assert rank_guard(facts, _call(facts, "first(model)").ctx) is not None
    assert rank_guard(facts, _call(facts, "second(model)").ctx) is not None
    assert rank_guard(facts, _call(facts, "third(model)").ctx) is None  # the second call's value is every rank's
    assert rank_guard(facts, _call(facts, "fourth(self.model)").ctx) is not None
    where = _call(facts, "first(model)").ctx
    passed = passed_for(facts, "evaluator", where)
    assert [facts.module.code_for_node(p.expr) for p in passed] == ["evaluator", "None"]
    assert passed_for(facts, "hook", _call(facts, "fourth(self.model)").ctx) is None  # ``run`` is no __init__


def test_callers_hidden_behind_star_arguments_are_unknown():
    from fsdp_lint.facts.ranks import rank_guard

    facts = _facts(
        """
        def loop(model, evaluator):
            if evaluator is not None:
                first(model)

        def main(rank, kwargs):
            evaluator = Evaluator() if rank == 0 else None
            loop(model, evaluator)
            loop(model, **kwargs)
        """
    )
    assert rank_guard(facts, _call(facts, "first(model)").ctx) is None


def test_a_value_the_file_shows_decides_over_a_rank_flag_name():
    """``should_save`` read as ``args.should_save`` (transformers' main-process flag, no
    binding in the file) is a rank test; a local ``should_save`` the file computes from the
    step is what its value says.  A rank read from the environment and never converted
    never equals a number: ``if rank == 0:`` then runs on no rank at all."""
    from fsdp_lint.facts.ranks import one_rank_branch, rank_guard, restricted_to_some_ranks

    facts = _facts(
        """
        def save(args, step, every, is_last):
            if args.should_save:
                first(step)
            should_save = is_last or step % every == 0
            if should_save:
                second(step)
            is_main = dist.get_rank() == 0 and is_last
            if is_main:
                third(step)

        def main():
            rank = os.environ["RANK"]
            if rank == 0:
                fourth(rank)
            if int(os.environ["RANK"]) == 0:
                fifth(rank)
            if os.environ.get("LOCAL_RANK", "0") == 0:
                sixth(rank)
        """
    )
    assert rank_guard(facts, _call(facts, "first(step)").ctx) is not None
    assert rank_guard(facts, _call(facts, "second(step)").ctx) is None
    assert rank_guard(facts, _call(facts, "third(step)").ctx) is not None
    assert rank_guard(facts, _call(facts, "fourth(rank)").ctx) is None
    assert restricted_to_some_ranks(facts, _call(facts, "fourth(rank)").ctx)  # (rules flagging every rank keep quiet)
    assert rank_guard(facts, _call(facts, "fifth(rank)").ctx) is not None
    assert rank_guard(facts, _call(facts, "sixth(rank)").ctx) is None
    assert one_rank_branch(cst.parse_expression("rank == 0")) == "body"  # without the file: the name alone


def test_a_launch_test_read_through_its_value():
    """nanoGPT's ``ddp = int(os.environ.get("RANK", -1)) != -1``: ``if ddp:`` asks whether
    the program was launched distributed (its value says so, whatever its name), so its
    ``else`` is a single-process branch and ``master_process = True`` there is not what
    a distributed run sees; a DDP flag copied from the arguments says nothing."""
    from fsdp_lint.facts.processes import in_single_process_branch
    from fsdp_lint.facts.ranks import rank_guard

    facts = _facts(
        """
        ddp = int(os.environ.get("RANK", -1)) != -1
        if ddp:
            master_process = int(os.environ["RANK"]) == 0
        else:
            master_process = True
            alone(model)
        if master_process:
            first(model)
        use_ddp = args.ddp
        if use_ddp:
            wrap(model)
        else:
            second(model)
        if args.local_rank == -1:
            third(model)
        """
    )
    assert in_single_process_branch(_call(facts, "alone(model)").ctx)
    assert rank_guard(facts, _call(facts, "first(model)").ctx) is not None
    assert not in_single_process_branch(_call(facts, "second(model)").ctx)
    assert in_single_process_branch(_call(facts, "third(model)").ctx)


def test_a_main_process_flag_read_off_a_call():
    """``TrainerTools().parallel.is_main_process``: the flag's name counts where its
    receiver is a value the file cannot follow (no dotted name to look up)."""
    from fsdp_lint.facts.ranks import rank_guard

    facts = _facts(
        """
        def init_eval_model(self):
            if TrainerTools().parallel.is_main_process:
                first(self)
            if TrainerTools().parallel.world_size > 1:
                second(self)
        """
    )
    assert rank_guard(facts, _call(facts, "first(self)").ctx) is not None
    assert rank_guard(facts, _call(facts, "second(self)").ctx) is None


def test_code_of_a_function_called_on_some_ranks_only():
    """``restricted_to_some_ranks(..., callers=True)``: a function every in-file call of
    which stands under a rank test (itself or through the function it stands in) runs on
    some ranks only; one call on every rank, or no call in the file, says nothing."""
    from fsdp_lint.facts.ranks import restricted_to_some_ranks

    facts = _facts(
        """
        def write(state, path):
            torch.save(state, path)

        def export(state, path):
            torch.save(state, path)

        def unused(state, path):
            torch.save(state, path)

        def on_main(state):
            write(state, "a.pt")

        def train(state, rank):
            if rank == 0:
                on_main(state)
                export(state, "b.pt")
            export(state, "c.pt")
        """
    )
    sites = [s for s in facts.calls if facts.module.code_for_node(s.node) == "torch.save(state, path)"]
    assert [restricted_to_some_ranks(facts, s.ctx, callers=True) for s in sites] == [True, False, False]
    assert not restricted_to_some_ranks(facts, sites[0].ctx)  # (without callers: the body alone)


def test_an_fsdp_type_test_through_a_predicate_of_the_file():
    """``def is_fsdp(m): return isinstance(m, FSDP)``, then ``if is_fsdp(model):``: the
    helper summary reads the test as ``isinstance(model, FSDP)``; a predicate that tests
    something else, or returns under a condition, is no such test."""
    from fsdp_lint.facts.helpers import summaries

    facts = _facts(
        """
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        def is_fsdp(module):
            return isinstance(module, FSDP)

        def is_big(module):
            return sum(p.numel() for p in module.parameters()) > 10

        def gather(model):
            if is_fsdp(model):
                with FSDP.summon_full_params(model):
                    return [p.clone() for p in model.parameters()]
            return list(model.parameters())

        def gather_big(model):
            if is_big(model):
                with FSDP.summon_full_params(model):
                    return [p.clone() for p in model.parameters()]
            return list(model.parameters())
        """
    )
    found = summaries(facts)
    assert found["gather"].collective and found["gather"].model == "model"
    assert "gather_big" not in found or not found["gather_big"].collective


def test_a_dict_filled_item_by_item_holds_what_was_written_before_its_use():
    from fsdp_lint.facts.dataflow import item_writes

    facts = _facts(
        """
        def shard(model, args):
            kwargs = {}
            kwargs["mp_policy"] = policy()
            fully_shard(model, **kwargs)
            kwargs["late"] = 1
            maybe = {}
            if args.bf16:
                maybe["mp_policy"] = policy()
            fully_shard(model, **maybe)
            opaque = {}
            opaque[args.key] = 1
            fully_shard(model, **opaque)
            updated = {}
            updated.update(other)
            fully_shard(model, **updated)
        """
    )
    uses = [s for s in facts.calls if facts.module.code_for_node(s.node).startswith("fully_shard(")]
    first, second, third, fourth = uses
    plain = item_writes(facts, "kwargs", first.ctx, first.order)
    assert sorted(plain.entries) == ["mp_policy"] and plain.readable  # not the write after the use
    guarded = item_writes(facts, "maybe", second.ctx, second.order)
    assert sorted(guarded.entries) == ["mp_policy"] and guarded.conditional and not guarded.readable
    assert item_writes(facts, "opaque", third.ctx, third.order).opaque
    assert item_writes(facts, "updated", fourth.ctx, fourth.order).opaque


def test_frozen_modules_are_those_every_parameter_of_which_is_frozen_before_the_use():
    from fsdp_lint.facts.optimizers import frozen_modules

    facts = _facts(
        """
        def lora(model, encoder):
            for name, param in model.named_parameters():
                param.requires_grad = False
            encoder.requires_grad_(False)
            use()

        def partial(model):
            for name, param in model.named_parameters():
                if "head" not in name:
                    param.requires_grad = False
            use()

        def thawed(model):
            model.requires_grad_(False)
            model.head.requires_grad_(True)
            use()
        """
    )
    uses = [s for s in facts.calls if facts.module.code_for_node(s.node) == "use()"]
    assert frozen_modules(facts, uses[0].ctx.function, uses[0].order) == {"model", "encoder"}
    assert frozen_modules(facts, uses[0].ctx.function, 0) == frozenset()  # not yet at the start
    assert frozen_modules(facts, uses[1].ctx.function, uses[1].order) == frozenset()  # only some
    assert frozen_modules(facts, uses[2].ctx.function, uses[2].order) == frozenset()  # turned back on


@pytest.mark.parametrize("text, strict, any_receiver", [
    ('os.environ["RANK"]', ("RANK", None), ("RANK", None)),
    ('environ["LOCAL_RANK"]', ("LOCAL_RANK", None), ("LOCAL_RANK", None)),
    ('os.environ.get("RANK", -1)', ("RANK", "-1"), ("RANK", "-1")),
    ('os.getenv("LOCAL_RANK")', ("LOCAL_RANK", None), ("LOCAL_RANK", None)),
    ('config.get("RANK")', None, ("RANK", None)),
    ('settings["RANK"]', None, None),
    ('os.environ[key]', None, None),
    ('os.environ.get(key)', None, None),
])
def test_one_reader_of_environment_variables(text, strict, any_receiver):
    from fsdp_lint.facts.processes import environment_read

    expr = cst.parse_expression(text)

    def shown(read):
        return None if read is None else (read[0], None if read[1] is None else cst.Module([]).code_for_node(read[1]))

    assert shown(environment_read(expr)) == strict
    assert shown(environment_read(expr, any_receiver=True)) == any_receiver


@pytest.mark.parametrize("binding, expected", [
    # the process's rank kept in a variable whose name does not say so
    ('ddp_rank = int(os.environ["RANK"])', True),
    ("ddp_rank = dist.get_rank()", True),
    # a group's or a mesh dimension's rank: one rank of each group, not of the run
    ("ddp_rank = dist.get_rank(group)", False),
    ('ddp_rank = mesh.get_local_rank("tp")', False),
    # bound to anything else on some path
    ('ddp_rank = int(os.environ["RANK"]) if ddp else step', False),
])
def test_a_variable_holding_the_process_rank_makes_a_rank_test(binding, expected):
    from fsdp_lint.facts.ranks import rank_guard

    facts = _facts(
        f"""
        import os
        import torch.distributed as dist

        def save(model, group, mesh, ddp, step):
            {binding}
            if ddp_rank == 0:
                use(model)
        """
    )
    assert (rank_guard(facts, _call(facts, "use(model)").ctx) is not None) is expected  # one rank runs it


def test_a_method_called_through_self_or_super_binds_where_the_call_returns():
    """``scopes._attribute_bindings``: another method's binding of ``self.<attr>`` reaches a
    use of a method that calls that method (``self.load()``, or ``super().setup()`` whose
    base calls ``self.load()``) only after the call; a method that calls none of them sees
    it as possibly bound before.  An overridden base method called as ``super().m()`` binds
    for the subclass too (``scopes._inherited_methods``)."""
    from fsdp_lint.facts.scopes import lookup

    facts = _facts(
        """
        class Base:
            def load(self):
                self.model = build()

            def setup(self):
                self.load()

            def run(self):
                before(self.model)
                self.load()
                after(self.model)

            def other(self):
                anywhere(self.model)


        class Child(Base):
            def setup(self):
                early(self.model)
                super().setup()
                late(self.model)
        """
    )

    def seen(text):
        site = _call(facts, text)
        return [facts.module.code_for_node(b.value) for b in lookup(facts, "self.model", site.ctx, site.order).bindings]

    assert seen("before(self.model)") == []
    assert seen("after(self.model)") == ["build()"]
    assert seen("anywhere(self.model)") == ["build()"]
    assert seen("early(self.model)") == []
    assert seen("late(self.model)") == ["build()"]


def test_a_binding_in_both_arms_of_an_if_hides_the_ones_before():
    """``flow.reaching``: an ``if`` whose body and ``else`` both bind the name, each on every
    path of its arm, leaves no earlier binding to the use; one arm alone, an ``elif`` chain,
    or an arm that leaves early does not."""
    from fsdp_lint.facts.scopes import lookup

    facts = _facts(
        """
        def f(flag, other):
            x = build()
            if flag:
                x = first()
            else:
                x = second()
            both(x)
            y = build()
            if flag:
                y = first()
            one(y)
            z = build()
            if flag:
                z = first()
            elif other:
                z = second()
            chain(z)
        """
    )

    def seen(text, name):
        site = _call(facts, text)
        return sorted(facts.module.code_for_node(b.value) for b in lookup(facts, name, site.ctx, site.order).bindings)

    assert seen("both(x)", "x") == ["first()", "second()"]
    assert seen("one(y)", "y") == ["build()", "first()"]
    assert seen("chain(z)", "z") == ["build()", "first()", "second()"]
