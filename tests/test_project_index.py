"""The project index (``fsdp_lint.project``): how imports resolve to project files, what a
helper's summary says (only what it does on every call), that the summaries are cached by
content and that a change to a helper invalidates the cached findings that depend on it,
and that the language server sees the same project facts as the command line."""

import json
import os
from pathlib import Path

import pytest

from fsdp_lint.check import Settings
from fsdp_lint.project import ProjectIndex, summarize_text
from fsdp_lint.server.linting import lint_document
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent

FSDP_HEADER = (
    "import torch\nimport torch.distributed as dist\n"
    "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n\n\n"
)


def _project(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def _functions(text):
    return summarize_text(FSDP_HEADER + text).functions


def test_a_summary_says_only_what_runs_on_every_call():
    found = _functions(
        "def gather(model):\n    return model.state_dict()\n\n\n"
        "def maybe(model, flag):\n    if flag:\n        return model.state_dict()\n\n\n"
        "def looped(models):\n    for m in models:\n        m.state_dict()\n\n\n"
        "def short(model, flag):\n    return flag and model.state_dict()\n\n\n"
        "def rebound(model):\n    model = model.module\n    return model.state_dict()\n\n\n"
        "def outer(model):\n    return gather(model)\n"
    )
    assert set(found) == {"gather", "outer"}
    assert (found["gather"]["model"], found["gather"]["needs"], found["gather"]["collective_at"]) == ("model", "fsdp1", 7)
    assert (found["outer"]["model"], found["outer"]["collective_at"]) == ("model", 7)  # through the inner helper


def test_saves_on_every_rank_only_without_a_rank_test_or_per_rank_path():
    found = _functions(
        "def save(model, path):\n    torch.save(model, path)\n\n\n"
        "def save_main(model, path):\n    if dist.get_rank() == 0:\n        torch.save(model, path)\n\n\n"
        "def save_own(model):\n    torch.save(model, f'ckpt_{dist.get_rank()}.pt')\n\n\n"
        "def save_fixed(model):\n    torch.save(model, 'model.pt')\n"
    )
    assert {name for name, data in found.items() if data["saves"]} == {"save", "save_fixed"}
    assert found["save"]["save_path"] == "path" and found["save_fixed"]["save_path"] is None


def test_sharding_helpers_and_files_without_helpers():
    found = summarize_text(
        "from torch.distributed.fsdp import fully_shard\n\n\n"
        "def apply_fsdp(model, mesh):\n    for block in model.layers:\n        fully_shard(block, mesh=mesh)\n"
        "    fully_shard(model, mesh=mesh)\n"
    ).functions
    assert found["apply_fsdp"]["shards"] == "model" and found["apply_fsdp"]["shard_at"] == 7
    assert summarize_text("def f(x):\n    return x + 1\n").functions == {}
    assert summarize_text("def f(:\n  state_dict\n").functions == {}  # does not parse: unknown


def test_a_summary_is_computed_from_the_functions_it_can_come_from():
    """A large module's unrelated code is blanked before libcst (lines keep their numbers),
    and the summary is the same as from the whole text: helpers, their helpers and
    classes they name, and every def or class naming FSDP stay."""
    from fsdp_lint.project import _summarized_text

    text = FSDP_HEADER + (
        "class Config:\n    lr = 1e-4\n\n\n"
        "class Sharded(FSDP):\n    pass\n\n\n"
        "def unrelated(x):\n    print(x * 2)\n\n\n"
        "def path_for(step):\n    return f'ckpt_{step}.pt'\n\n\n"
        "def save_ckpt(model, step):\n    torch.save(model.state_dict(), path_for(step))\n\n\n"
        "def wrap(net):\n    return Sharded(net)\n"
    )
    kept = _summarized_text(text)
    assert kept.count("\n") == text.count("\n")
    assert "lr = 1e-4" not in kept and "print(x * 2)" not in kept  # unrelated class and function
    assert "def path_for" in kept and "class Sharded(FSDP)" in kept and "def wrap" in kept
    whole = summarize_text(text).functions
    assert whole["save_ckpt"]["save_at"] == 23 and whole["save_ckpt"]["kinds"] == ("collective", "saves")
    assert _summarized_text("import torch\n\n\ndef f(x):\n    print(x)\n") is None  # no function can have one


def test_imports_resolve_to_project_files(tmp_path):
    root = _project(tmp_path, {
        "pyproject.toml": "",
        "src/pkg/__init__.py": "from .ckpt import save\n",
        "src/pkg/ckpt.py": FSDP_HEADER + "def save(model, path):\n    torch.save(model.state_dict(), path)\n",
        "src/pkg/sub/__init__.py": "",
        "src/pkg/sub/train.py": "",
        "scripts/helpers.py": FSDP_HEADER + "def gather(model):\n    return model.state_dict()\n",
        "scripts/run.py": "",
    })
    index = ProjectIndex()
    view = index.view(str(root / "src" / "pkg" / "sub" / "train.py"))
    assert view.root == str(root)
    assert view.helper("pkg.ckpt.save").file == os.path.join("src", "pkg", "ckpt.py")  # src/ layout
    assert view.helper("pkg.save").file == os.path.join("src", "pkg", "ckpt.py")  # re-exported by __init__
    assert view.helper("..ckpt.save").name == "save"  # relative
    assert view.helper("..save").name == "save"  # relative, through the package's __init__
    assert view.helper("torch.save") is None and view.helper("pkg.ckpt.missing") is None
    script = index.view(str(root / "scripts" / "run.py"))
    assert script.helper("helpers.gather").line == 6  # the script's folder, as sys.path[0]
    text = "import helpers as h\nfrom helpers import gather as g\nh.gather(m)\ng(m)\n"
    # and "imported" for a project name no helper summary covers (here the module itself)
    assert script.gate_kinds(text) == {"h.gather": frozenset({"collective"}), "g": frozenset({"collective"}),
                                       "h": frozenset({"imported"})}
    assert script.gate_kinds("import torch\nimport helpers\ntorch.save(helpers)\n") == {"helpers": frozenset({"imported"})}
    outside = _project(tmp_path / "other", {".git/HEAD": "", "a.py": ""})
    assert index.view(str(outside / "a.py")).helper("helpers.gather") is None


def _cli(*args, cwd):
    done = run_cli("check", "--exit-zero", "--format", "json", *args, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return [(r["location"]["row"], r["code"]) for r in json.loads(done.stdout)]


TRAIN = FSDP_HEADER + (
    "from helpers import save_ckpt\n\n\n"
    "def main(net):\n    dist.init_process_group('nccl')\n    model = FSDP(net)\n"
    "    if dist.get_rank() == 0:\n        save_ckpt(model, 'model.pt')\n"
)
HELPER = FSDP_HEADER + "def save_ckpt(model, path):\n    torch.save(model.state_dict(), path)\n"
GUARDED = FSDP_HEADER + (
    "def save_ckpt(model, path):\n    state = model.state_dict()\n    if dist.get_rank() == 0:\n"
    "        torch.save(state, path)\n"
)


def test_a_change_to_a_helper_invalidates_the_cached_findings(tmp_path):
    root = _project(tmp_path, {"pyproject.toml": "", "train.py": TRAIN, "helpers.py": HELPER})
    cache = tmp_path / "cache"
    first = _cli("--cache-dir", str(cache), "train.py", cwd=root)
    assert first == [(13, "FSD104")]
    assert list((cache).rglob("project/*.json")), "the summaries are cached by content"
    assert _cli("--cache-dir", str(cache), "train.py", cwd=root) == first  # warm
    # moving the helper's state dict call into the rank test's other side: not a collective
    # on every call any more, so the cached finding must go
    (root / "helpers.py").write_text(FSDP_HEADER + "def save_ckpt(model, path):\n    if path:\n"
                                     "        torch.save(model.state_dict(), path)\n")
    assert _cli("--cache-dir", str(cache), "train.py", cwd=root) == []
    (root / "helpers.py").write_text(HELPER)
    assert _cli("--cache-dir", str(cache), "train.py", cwd=root) == first
    (root / "helpers.py").write_text(GUARDED)  # gathers on every call: still a hang under the rank test
    assert _cli("--cache-dir", str(cache), "train.py", cwd=root) == first


def test_prefetched_parts_are_used_unless_the_file_changed(tmp_path):
    """``ProjectIndex.prefetch``: the parts another process computed (a file's "names" and,
    where they name a function, its "summary") are what the index answers (not computed
    again); those of a file that changed since are computed anew."""
    from fsdp_lint.project import parts_in_worker

    root = _project(tmp_path, {"pyproject.toml": "", "train.py": TRAIN, "helpers.py": HELPER, "other.py": HELPER})
    index = ProjectIndex()
    view = index.view(str(root / "train.py"))
    assert view.imported_modules(TRAIN) == [str(root / "helpers.py")]
    submitted, answers = [], {}

    def submit(function, *args):
        submitted.append(args[1])
        answers[args[1]] = function(*args)  # what a worker would send back
        return args[1]

    index.prefetch([str(root / "helpers.py"), str(root / "other.py")], submit, lambda future: answers[future])
    index.prefetch([str(root / "helpers.py")], submit, lambda future: answers[future])  # asked once
    assert submitted == [str(root / "helpers.py"), str(root / "other.py")]
    assert sorted(answers[str(root / "helpers.py")]) == ["names", "summary"]
    assert index.summary(str(root / "helpers.py")) is answers[str(root / "helpers.py")]["summary"][1]
    assert "save_ckpt" in index.summary(str(root / "helpers.py")).functions
    # the file changes after the worker read it: its answer is stale, the summary is new
    (root / "other.py").write_text(FSDP_HEADER + "def unrelated():\n    return 1\n\n\n# longer now\n")
    assert index.summary(str(root / "other.py")).functions == {}
    assert parts_in_worker(None, str(root / "missing.py")) == {}


def test_a_module_is_summarized_only_where_its_importer_names_a_function_it_may_hold(tmp_path):
    """The cheap "names" part comes first: an importer that calls none of the functions a
    summary of the module may hold never has the module summarized (libcst is not run on
    it), and one that calls such a function gets its summary."""
    helper_text = ("import torch\n\n\ndef save_ckpt(model, path):\n    torch.save(model.state_dict(), path)\n"
                   "\n\ndef unrelated_math(x):\n    return x + 1\n")
    root = _project(tmp_path, {"pyproject.toml": "", "helpers.py": helper_text,
                               "train.py": TRAIN, "other.py": "import helpers\n\nprint(helpers.unrelated_math(1))\n"})
    index = ProjectIndex()
    helpers = str(root / "helpers.py")
    assert index._part(helpers, "names")["functions"] == ["save_ckpt"]
    other = index.view(str(root / "other.py"))
    assert other.imported_helpers((root / "other.py").read_text()) == {}
    assert (helpers, "summary") not in index._parts
    train = index.view(str(root / "train.py"))
    assert "save_ckpt" in train.imported_helpers(TRAIN)
    assert (helpers, "summary") in index._parts


def test_workers_prefetching_summaries_give_the_same_findings(tmp_path):
    """With workers (``-j 2``) the project files a file imports are summarized by them
    ahead of the main process's gate; the findings are those of one process."""
    files = {"pyproject.toml": "", "train.py": TRAIN, "helpers.py": HELPER}
    files.update({f"script_{i}.py": TRAIN.replace("main(net)", f"main_{i}(net)") for i in range(3)})
    root = _project(tmp_path, files)
    one = sorted(_cli("--no-cache", "-j", "1", ".", cwd=root))
    assert one == [(13, "FSD104")] * 4
    assert sorted(_cli("--no-cache", "-j", "2", ".", cwd=root)) == one


def test_a_checkout_without_pyproject_is_rooted_at_its_git_folder(tmp_path):
    """A clone without ``pyproject.toml``: its ``.git`` folder roots the index, whether the
    run starts in the folder or above it; with neither marker there is no index."""
    if any((parent / marker).exists() for parent in tmp_path.parents for marker in ("pyproject.toml", ".git")):
        pytest.skip("the temporary folder lies inside a project")
    root = _project(tmp_path / "scripts", {"train.py": TRAIN, "helpers.py": HELPER})
    assert _cli("--no-cache", "train.py", cwd=root) == []
    (root / ".git").mkdir()
    assert _cli("--no-cache", "train.py", cwd=root) == [(13, "FSD104")]
    assert _cli("--no-cache", "scripts", cwd=tmp_path) == [(13, "FSD104")]


def test_a_wrap_helper_given_a_model_built_in_its_call(tmp_path):
    """``model = setup_fsdp(build_model(cfg))``: the helper's FSDP1 wrap holds a module
    no name names, and ``model`` is that wrap (as ``model = FSDP(build_model(cfg))`` is)."""
    wrap = FSDP_HEADER + "def setup_fsdp(module):\n    return FSDP(module, device_id=torch.cuda.current_device())\n"
    train = FSDP_HEADER + (
        "from dist_utils import setup_fsdp\nfrom nets import build_model\n\n\n"
        "def main(cfg):\n    model = setup_fsdp(build_model(cfg))\n"
        "    if dist.get_rank() == 0:\n        torch.save(model.state_dict(), 'model.pt')\n"
    )
    root = _project(tmp_path, {"pyproject.toml": "", "train.py": train, "dist_utils.py": wrap})
    assert _cli("--no-cache", "train.py", cwd=root) == [(13, "FSD104")]
    (root / "train.py").write_text(train.replace("setup_fsdp(build_model(cfg))", "setup_fsdp()"))
    assert _cli("--no-cache", "train.py", cwd=root) == []  # the call passes no module: no wrap


def test_the_language_server_sees_the_project_too():
    project = ROOT / "fixtures" / "projects" / "raw_fsdp_helpers"
    path = project / "src" / "train.py"
    lint = lint_document(path.as_uri(), str(path), 1, path.read_text(), Settings())
    expected = [(int(line.split(":")[1].split()[0]), line.split()[1])
                for line in (project / "expected.txt").read_text().splitlines() if line.startswith("src/train.py")]
    assert [(d.location.row, d.code) for d in lint.diagnostics] == expected


def test_rules_reading_fsdp2_wraps_see_a_project_helper_that_shards(tmp_path):
    root = _project(tmp_path, {
        "pyproject.toml": "",
        "parallel.py": "from torch.distributed.fsdp import fully_shard\n\n\n"
                       "def shard(model, mesh):\n    for block in model.blocks:\n        fully_shard(block, mesh=mesh)\n"
                       "    fully_shard(model, mesh=mesh)\n",
        "train.py": "import copy\n\nfrom parallel import shard\n\n\n"
                    "def main(model, mesh):\n    shard(model, mesh)\n    model.bfloat16()\n    return copy.deepcopy(model)\n",
    })
    done = run_cli("check", "--no-cache", "--exit-zero", "--format", "json", "train.py", cwd=root)
    records = json.loads(done.stdout)
    assert [(r["location"]["row"], r["code"]) for r in records] == [(8, "FSD107"), (9, "FSD111")]
    assert all("sharded in parallel.py:7" in r["message"] for r in records)
    (root / "parallel.py").write_text("def shard(model, mesh):\n    return model\n")  # shards nothing: quiet
    done = run_cli("check", "--no-cache", "--exit-zero", "--format", "json", "train.py", cwd=root)
    assert json.loads(done.stdout) == []


def test_except_blocks_and_balanced_barriers_are_not_every_call():
    found = _functions(
        "def on_error(model, path):\n    try:\n        return None\n    except OSError:\n"
        "        return model.state_dict()\n\n\n"
        "def prepare(root):\n    print(root)\n    dist.barrier()\n"
    )
    assert set(found) == {"prepare"} and found["prepare"]["balanced_by"] == "torch.distributed.barrier"


def test_a_barrier_helper_balanced_by_the_callers_other_branch_is_quiet(tmp_path):
    helper = FSDP_HEADER + "def prepare(root):\n    print(root)\n    dist.barrier()\n"
    body = FSDP_HEADER + "from helpers import prepare\n\n\ndef main(net, root):\n    model = FSDP(net)\n" \
        "    if dist.get_rank() == 0:\n        prepare(root)\n{other}"
    root = _project(tmp_path / "balanced", {"pyproject.toml": "", "helpers.py": helper,
                                            "train.py": body.format(other="    else:\n        dist.barrier()\n")})
    assert _cli("--no-cache", "train.py", cwd=root) == []
    root = _project(tmp_path / "hang", {"pyproject.toml": "", "helpers.py": helper, "train.py": body.format(other="")})
    assert _cli("--no-cache", "train.py", cwd=root) == [(12, "FSD104")]


def test_a_dtensor_gather_over_a_parameters_parameters_is_a_collective(tmp_path):
    """``for n, p in model.named_parameters(): optimizer.state[p]["exp_avg_sq"].full_tensor()``
    gathers on every call when the caller's ``model`` is sharded with ``fully_shard``;
    a loop over something else, a gather under an ``if``, or a caller whose model is not
    sharded is not one."""
    found = _functions(
        "def moments(model, optimizer):\n    out = {}\n    for name, p in model.named_parameters():\n"
        "        state = optimizer.state[p]\n        out[name] = state['exp_avg_sq'].full_tensor()\n    return out\n\n\n"
        "def others(model, tensors):\n    for t in tensors:\n        t.full_tensor()\n\n\n"
        "def maybe(model, flag):\n    for p in model.parameters():\n        if flag:\n            p.full_tensor()\n"
    )
    assert set(found) == {"moments"}
    assert (found["moments"]["model"], found["moments"]["needs"], found["moments"]["collective_at"]) == ("model", "fsdp2", 10)
    caller = (
        "import torch.distributed as dist\nfrom torch.distributed.fsdp import fully_shard\nfrom io_utils import moments\n\n\n"
        "def train(model, optimizer):\n    {shard}\n    if dist.get_rank() == 0:\n        moments(model, optimizer)\n"
    )
    for shard, expected in (("fully_shard(model)", ["FSD104"]), ("model = model.cuda()", [])):
        root = _project(tmp_path / str(len(expected)), {
            "pyproject.toml": "", "io_utils.py": FSDP_HEADER + "def moments(model, optimizer):\n    out = []\n    for p in model.parameters():\n"
            "        out.append(optimizer.state[p]['exp_avg'].full_tensor())\n    return out\n",
            "train.py": caller.format(shard=shard),
        })
        done = run_cli("check", "--no-cache", "--exit-zero", "--format", "json", "train.py", cwd=root)
        assert [r["code"] for r in json.loads(done.stdout)] == expected, shard


def test_a_helper_returning_an_fsdp1_wrap_carries_its_configuration():
    found = _functions(
        "from torch.distributed.fsdp import CPUOffload, ShardingStrategy\n\n\n"
        "def offloaded(model):\n    return FSDP(model, cpu_offload=CPUOffload(offload_params=True))\n\n\n"
        "def named(module, strategy):\n    wrapped = FSDP(module, use_orig_params=True, sharding_strategy=ShardingStrategy.NO_SHARD)\n"
        "    return wrapped\n\n\n"
        "def chosen(model, offload):\n    return FSDP(model, cpu_offload=CPUOffload(offload_params=offload))\n\n\n"
        "def maybe(model, flag):\n    if flag:\n        return FSDP(model)\n    return model\n\n\n"
        "def other(model):\n    net = model.module\n    return FSDP(net)\n\n\n"
        "def nested(model, policy):\n    return FSDP(model, auto_wrap_policy=ModuleWrapPolicy({nn.Linear}))\n\n\n"
        "def flat(model):\n    return FSDP(model, auto_wrap_policy=None)\n"
    )
    # given an auto-wrap policy: nested units (a forward on one rank all-gathers them, FSD104)
    assert found["nested"]["wrap_nested"] is True
    assert found["flat"]["wrap_nested"] is None and found["offloaded"]["wrap_nested"] is None
    assert {name for name, data in found.items() if data["wraps"]} == {"offloaded", "named", "chosen", "nested", "flat"}
    assert (found["offloaded"]["wraps"], found["offloaded"]["wrap_offload"], found["offloaded"]["wrap_orig_params"],
            found["offloaded"]["wrap_at"], found["offloaded"]["kinds"]) == ("model", True, False, 10, ("wraps", "offloads"))
    assert (found["named"]["wraps"], found["named"]["wrap_offload"], found["named"]["wrap_orig_params"],
            found["named"]["wrap_sharding"]) == ("module", False, True, ("NO_SHARD",))
    assert found["chosen"]["wrap_offload"] is None and found["chosen"]["kinds"] == ("wraps",)  # read from an argument
    # a wrap of a module the helper reaches itself (not its parameter as passed): the caller
    # gets an FSDP1 module all the same, of no name of its own
    assert {name for name, data in found.items() if data["wrap_built"]} == {"other"}
    assert found["other"]["kinds"] == ("wraps",) and "maybe" not in found  # not on every path: nothing to say


def test_a_factory_returning_an_fsdp1_wrap_of_its_own_model():
    found = _functions(
        "from torch.distributed.fsdp import CPUOffload\nfrom nets import Encoder\n\n\n"
        "def build(cfg):\n    encoder = Encoder(cfg.dim)\n    if cfg.ckpt:\n        encoder.load_state_dict(torch.load(cfg.ckpt))\n"
        "    return FSDP(encoder, cpu_offload=CPUOffload(offload_params=True))\n\n\n"
        "def build_sometimes(cfg):\n    encoder = Encoder(cfg.dim)\n    if cfg.fsdp:\n        encoder = FSDP(encoder)\n"
        "    return encoder\n"
    )
    assert (found["build"]["wraps"], found["build"]["wrap_built"], found["build"]["wrap_offload"],
            found["build"]["kinds"]) == (None, True, True, ("wraps", "offloads"))
    assert "build_sometimes" not in found or not found["build_sometimes"]["wrap_built"]


LOOP = (
    "import torch\n\n\n"
    "def train(model, loader, max_norm=1.0):\n    for batch in loader:\n        model(batch).sum().backward()\n"
    "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"
)
CALLER = FSDP_HEADER + (
    "from torch.distributed.fsdp import ShardingStrategy\nfrom loop import train\n\n\n"
    "def main(net, loader):\n    model = FSDP(net, sharding_strategy=ShardingStrategy.{strategy})\n"
    "    train(model, loader)\n    train(loader=loader, model=model)\n    train(net, loader)\n"
)


def test_what_other_files_pass_to_a_files_functions():
    """``facts.passed_arguments``: per call of an imported project function, the arguments
    that hold FSDP modules the caller's file wraps, by position or keyword; a plain module
    says nothing."""
    from fsdp_lint.facts.index import index_module
    from fsdp_lint.facts.passed_arguments import external_wraps, passed_arguments
    from fsdp_lint.lazy_libcst import cst

    facts = index_module(cst.parse_module(CALLER.format(strategy="HYBRID_SHARD")))
    records = passed_arguments(facts, lambda node: 0, lambda spec: spec.startswith("loop."))
    assert [(r["spec"], r["args"]) for r in records] == [
        ("loop.train", {"0": {"fsdp": 1, "sharding": ["HYBRID_SHARD"]}, "1": {}}),
        ("loop.train", {"loader": {}, "model": {"fsdp": 1, "sharding": ["HYBRID_SHARD"]}}),
        ("loop.train", {"0": {}, "1": {}}),
    ]
    for record in records:
        record["place"] = "train.py:1"
    assert [w.sharding for w in external_wraps(records, ("model", "loader", "max_norm"), "model")] == [
        ("HYBRID_SHARD",), ("HYBRID_SHARD",)]
    assert external_wraps(records, ("model", "loader", "max_norm"), "loader") == []


def test_a_module_passed_sharded_by_another_file(tmp_path):
    """The training loop of another module clips a model the entry script wraps: FSD102
    there, from a whole-tree and a one-file run; not when the caller's strategy does not
    shard, and the cached answer follows a change of the caller (``ProjectView.tag``)."""
    root = _project(tmp_path, {"pyproject.toml": "", "loop.py": LOOP,
                               "train.py": CALLER.format(strategy="FULL_SHARD")})
    cache = tmp_path / "cache"
    assert _cli("--cache-dir", str(cache), "loop.py", cwd=root) == [(7, "FSD102")]
    assert _cli("--no-cache", ".", cwd=root) == [(7, "FSD102")]
    (root / "train.py").write_text(CALLER.format(strategy="NO_SHARD"))
    assert _cli("--cache-dir", str(cache), "loop.py", cwd=root) == []


def test_modules_importing_each_other_pass_records_without_a_loop(tmp_path):
    a = FSDP_HEADER + "from b import save\n\n\ndef run(net):\n    model = FSDP(net)\n    save(model)\n"
    b = FSDP_HEADER + (
        "from a import run\n\n\ndef save(model):\n    if dist.get_rank() == 0:\n"
        "        torch.save(model.state_dict(), 'm.pt')\n\n\ndef again(net):\n    run(net)\n"
    )
    root = _project(tmp_path, {"pyproject.toml": "", "a.py": a, "b.py": b})
    assert _cli("--no-cache", ".", cwd=root) == [(11, "FSD104")]


def test_a_class_tie_of_another_file_is_in_its_index_and_read_back_from_disk(tmp_path):
    from fsdp_lint.project import ProjectIndex, class_ties_of_text

    text = (
        "import torch.nn as nn\n\n\n"
        "class LM(nn.Module):\n"
        "    def __init__(self, vocab, dim):\n"
        "        super().__init__()\n"
        "        self.embed = nn.Embedding(vocab, dim)\n"
        "        self.head = nn.Linear(dim, vocab, bias=False)\n"
        "        self.head.weight = self.embed.weight\n\n\n"
        "class Untied(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.head = nn.Linear(4, 4)\n"
    )
    assert class_ties_of_text(text) == {"LM": [["head.weight", "embed.weight", 9]]}
    assert class_ties_of_text("def f():\n    return 1\n") == {}
    module = tmp_path / "lm.py"
    module.write_text(text)
    first = ProjectIndex(str(tmp_path / "cache")).ties(str(module))
    assert first == {"LM": [["head.weight", "embed.weight", 9]]}
    stored = list((tmp_path / "cache" / "project").glob("*.json"))
    assert len(stored) == 1
    stored[0].write_text('{"LM": [["head.weight", "embed.weight", 99]]}')  # read back, not computed again
    assert ProjectIndex(str(tmp_path / "cache")).ties(str(module)) == {"LM": [["head.weight", "embed.weight", 99]]}
    stored[0].write_text("[1, 2]")  # damaged: computed again
    assert ProjectIndex(str(tmp_path / "cache")).ties(str(module)) == first


def test_what_other_files_pass_says_which_arguments_exist_on_one_rank():
    """``facts.passed_arguments`` answers, with the caller's own facts, which arguments are
    rank tests and which hold a value made on one rank only; ``argument_records`` gives
    the callee each call's entry (None: not passed; open: hidden behind ``**``)."""
    from fsdp_lint.facts.index import index_module
    from fsdp_lint.facts.passed_arguments import argument_records, passed_arguments
    from fsdp_lint.lazy_libcst import cst

    code = (
        "import torch.distributed as dist\nfrom trainer import Trainer\n\n\n"
        "def main(model, cfg):\n    rank = dist.get_rank()\n    eval_fn = None\n    if rank == 0:\n"
        "        eval_fn = make_eval()\n"
        "    Trainer(model, eval_fn=eval_fn, is_main=rank == 0, verbose=cfg.verbose)\n"
        "    Trainer(model)\n    Trainer(model, **cfg.extra)\n"
    )
    records = passed_arguments(index_module(cst.parse_module(code)), lambda node: 0,
                               lambda spec: spec.startswith("trainer."))
    assert [r["args"] for r in records] == [
        {"0": {}, "eval_fn": {"rank": "body", "one_rank": True}, "is_main": {"rank": "body"}, "verbose": {}},
        {"0": {}},
        {"0": {}},
    ]
    params = ("model", "eval_fn", "is_main", "verbose")
    assert argument_records(records, params, "eval_fn") == [{"rank": "body", "one_rank": True}, None, {"open": True}]
    assert argument_records(records, params, "model") == [{}, {}, {}]


def test_a_rank_value_passed_on_through_two_files_and_its_cache(tmp_path):
    """``trainer.py`` passes an eval copy made on rank 0 only to ``model_params.py``, which
    passes ``_to is None`` on to ``fsdp_params.py``: the broadcast under ``not only_rank0``
    runs on rank 0 only (``CALLER_DEPTH``: two levels of importers).  The cached answer of
    the last file follows a change of the first (``ProjectView.tag``)."""
    import shutil

    source = Path(__file__).resolve().parent.parent / "fixtures" / "projects" / "eval_model_on_rank_zero_two_files_away"
    root = tmp_path / "proj"
    shutil.copytree(source, root)
    cache = tmp_path / "cache"
    target = "llm_kit/fsdp_params.py"
    assert _cli("--cache-dir", str(cache), target, cwd=root) == [(20, "FSD104")]
    trainer = root / "llm_kit" / "trainer.py"
    trainer.write_text(trainer.read_text().replace("if dist.get_rank() == 0:", "if dist.get_world_size() > 0:"))
    assert _cli("--cache-dir", str(cache), target, cwd=root) == []


def test_only_the_classes_that_can_tie_are_parsed_for_ties_and_lines_are_kept():
    from fsdp_lint.project import _tying_classes, class_ties_of_text

    text = (
        "import torch.nn as nn\n\n\n"
        "class Scope:\n"
        "    def enter(self):\n"
        "        self.scope.module_path = self.prev.module_path\n\n\n"  # ties nothing (no module params)
        "def helper(x):\n"
        "    return x\n\n\n"
        "class LM(nn.Module):\n"
        "    def __init__(self, vocab, dim):\n"
        "        super().__init__()\n"
        "        self.embed = nn.Embedding(vocab, dim)\n"
        "        self.head = nn.Linear(dim, vocab, bias=False)\n"
        "        self.head.weight = self.embed.weight\n"
    )
    kept = _tying_classes(text)
    assert kept.count("\n") == text.count("\n")
    assert "def helper" not in kept and "class LM" in kept and "class Scope" in kept
    # ``enter`` is neither ``__init__`` nor called: no tie of Scope
    assert class_ties_of_text(text) == {"LM": [["head.weight", "embed.weight", 18]]}
    assert text.splitlines()[17].strip() == "self.head.weight = self.embed.weight"
    # a file of no such assignment is not parsed at all
    assert class_ties_of_text("class A:\n    def f(self):\n        self.x = self.y.z\n") == {}


def _method_records(code):
    import textwrap

    import libcst

    from fsdp_lint.facts.index import index_module
    from fsdp_lint.facts.passed_arguments import passed_arguments

    facts = index_module(libcst.parse_module(textwrap.dedent(code)))
    return [r for r in passed_arguments(facts, lambda node: 0) if "method" in r]


def test_a_method_called_on_an_instance_of_a_project_class_is_recorded_with_the_overrides():
    records = _method_records(
        """
        from trainer.base import Trainer

        class FSDPTrainer(Trainer):
            def training_step(self, model, batch, batch_idx):
                return model(**batch).loss

        def main(model, loader):
            trainer = FSDPTrainer(max_epochs=3)
            trainer.fit(model=model, train_loader=loader)
            plain = Trainer()
            plain.evaluate(model)
        """
    )
    found = {(r["spec"], r["method"], tuple(r.get("overrides", ()))) for r in records}
    assert found == {("trainer.base.Trainer", "fit", ("training_step",)), ("trainer.base.Trainer", "evaluate", ())}


def test_a_method_the_subclass_defines_or_an_unknown_receiver_is_not_recorded():
    records = _method_records(
        """
        from trainer.base import Trainer

        class FSDPTrainer(Trainer):
            def fit(self, model, train_loader):
                super().fit(model, train_loader)

        def main(model, loader, make_trainer):
            FSDPTrainer().fit(model, loader)  # no name: nothing recorded either
            trainer = FSDPTrainer()
            trainer.fit(model, loader)
            other = make_trainer()
            other.fit(model, loader)
        """
    )
    assert records == []


MODELING = (
    "import torch\nfrom transformers import AutoModelForCausalLM\n\n\n"
    "def load_model(name):\n    model = AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.bfloat16)\n"
    "    return model\n\n\n"
    "def load_fp32(name):\n    return AutoModelForCausalLM.from_pretrained(name)\n"
)
SHARD_LOADED = (
    "import torch\nfrom torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard\n\n"
    "from modeling import load_fp32, load_model\n\n\n"
    "def build(name):\n    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16)\n"
    "    model = load_model(name)\n    fully_shard(model, mp_policy=mp)\n"
    "    other = load_fp32(name)\n    fully_shard(other, mp_policy=mp)\n"
    "    return torch.optim.AdamW(list(model.parameters()) + list(other.parameters()))\n"
)


def test_a_function_of_another_file_that_returns_a_bf16_model(tmp_path):
    """``returned_dtypes_of_text``: what a project function's every ``return`` gives, read only
    for the functions that load or cast with a low-precision dtype; FSD113 reads it for a
    model such a function makes, and a cached answer goes when the function changes."""
    from fsdp_lint.project import returned_dtypes_of_text

    assert returned_dtypes_of_text(MODELING) == {"load_model": ["torch.bfloat16", 6]}
    assert returned_dtypes_of_text(MODELING.replace("torch.bfloat16", "torch.float32")) == {}
    assert returned_dtypes_of_text(MODELING.replace("    return model\n", "    model.float()\n    return model\n")) == {}
    root = _project(tmp_path, {"pyproject.toml": "", "train.py": SHARD_LOADED, "modeling.py": MODELING})
    cache = tmp_path / "cache"
    first = _cli("--cache-dir", str(cache), "train.py", cwd=root)
    assert first == [(10, "FSD113")]
    assert _cli("--cache-dir", str(cache), "train.py", cwd=root) == first  # warm
    (root / "modeling.py").write_text(MODELING.replace("torch.bfloat16", "torch.float32"))
    assert _cli("--cache-dir", str(cache), "train.py", cwd=root) == []
    (root / "modeling.py").write_text(MODELING)
    assert _cli("--cache-dir", str(cache), "train.py", cwd=root) == first


def _fixture_texts():
    for path in sorted((ROOT / "fixtures").rglob("*.py")):
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8", errors="replace")


@pytest.mark.slow
def test_the_cheap_screens_never_drop_a_summary(monkeypatch):
    """What the "names" part and the blanked text keep (``_may_have_summary``,
    ``_candidates``: hand-written ``ast`` screens in front of libcst) loses no summary: on
    every fixture file, each function the whole text summarizes is listed in the file's
    "names" part, and the summary from the screened text is the same."""
    import fsdp_lint.project as project

    screened = {}
    for name, text in _fixture_texts():
        screened[name] = (summarize_text(text).functions, project.summarized_names_of_text(text)["functions"])
    monkeypatch.setattr(project, "_may_have_summary", lambda text: True)
    monkeypatch.setattr(project, "_summarized_text", lambda text: text)
    compared = 0
    for name, text in _fixture_texts():
        whole = summarize_text(text).functions
        functions, names = screened[name]
        assert functions == whole, name
        assert set(whole) <= set(names), name
        compared += bool(whole)
    assert compared > 50  # files with helpers a summary holds were compared
