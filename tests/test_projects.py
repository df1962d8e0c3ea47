"""FSDP turned on outside the linted file (``fsdp_lint.launch``), and helpers that live in
another file (``fsdp_lint.project``): multi-file projects under ``fixtures/projects/`` (an
accelerate config and its launch script, a Trainer run by a shell script with ``--fsdp``, a
torchtitan-style ``parallelize.py``, raw FSDP with a checkpoint helper module), each with a
quiet twin, give the findings of their ``expected.txt`` from a whole-tree run, a one-file
run and flake8 alike."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp_lint.check import Settings
from fsdp_lint.launch import (
    LaunchFinder, project_root, read_accelerate_config, read_lightning_config, read_project, read_torchtune_config,
)
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
PROJECTS = sorted(p for p in (ROOT / "fixtures" / "projects").iterdir() if p.is_dir())


def _expected(project: Path):
    lines = (project / "expected.txt").read_text().split()
    return sorted((lines[i].rsplit(":", 1)[0], int(lines[i].rsplit(":", 1)[1]), lines[i + 1]) for i in range(0, len(lines), 2))


def _cli(*paths, cwd=ROOT):
    done = run_cli("check", "--no-cache", "--exit-zero", "--format", "json", *paths, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _entry(project: Path) -> str:
    """The file a quiet project's one-file run lints: the one its firing twin is flagged in,
    else the script it is run by."""
    twin = project.parent / project.name[: -len("_quiet")]
    if project.name.endswith("_quiet") and (twin / "expected.txt").is_file() and _expected(twin):
        return _expected(twin)[0][0]
    for name in ("src/train.py", "finetune.py", "sft.py"):
        if (project / name).is_file():
            return name
    return os.path.relpath(next(iter(sorted(project.rglob("train.py")))), project)


def _found(records, project: Path):
    return sorted(
        (os.path.relpath((ROOT / r["filename"]).resolve(), project), r["location"]["row"], r["code"]) for r in records
    )


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)
def test_whole_tree_and_one_file_runs_agree_with_expected(project):
    expected = _expected(project)
    assert (project.name.endswith("_quiet")) == (not expected), "a firing project and its quiet twin"
    assert _found(_cli(project), project) == expected
    one_file = []
    for relative in sorted({e[0] for e in expected}) or [_entry(project)]:
        one_file += _found(_cli(project / relative), project)
    assert sorted(one_file) == expected


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)
def test_flake8_sees_the_launch_too(project):
    pytest.importorskip("flake8")
    target = next(iter(sorted({e[0] for e in _expected(project)})), None) or _entry(project)
    done = subprocess.run(
        [sys.executable, "-m", "flake8", "--select", "FSD", "--format", "%(row)d|%(code)s", str(project / target)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    found = sorted((target, int(row), code) for row, code in (line.split("|") for line in done.stdout.split()))
    assert found == [e for e in _expected(project) if e[0] == target]


def test_the_message_names_where_fsdp_was_turned_on():
    project = ROOT / "fixtures" / "projects" / "accelerate_config"
    (record,) = _cli(project)
    assert "FSDP is turned on by configs/accelerate.yaml:2 (distributed_type: FSDP, scripts/train.sh:4)" in record["message"]


def _project(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


FSDP_YAML = "distributed_type: FSDP\nfsdp_config:\n  fsdp_offload_params: true\n  fsdp_use_orig_params: false\n  fsdp_version: 2\n"


def test_accelerate_config_keys():
    config = read_accelerate_config("a.yaml", "compute_environment: LOCAL_MACHINE\n" + FSDP_YAML)
    assert (config.line, config.offload_params, config.use_orig_params, config.version) == (2, True, False, 2)
    assert read_accelerate_config("b.yaml", "distributed_type: MULTI_GPU\n") is None
    assert read_accelerate_config("c.yaml", "model:\n  distributed_type: FSDP\n") is None  # not top level
    assert read_accelerate_config("d.yaml", "!!python/object/apply:os.system ['x']\ndistributed_type: 'FSDP'\n").line == 2


def test_the_only_config_applies_to_the_project_two_do_not(tmp_path):
    one = _project(tmp_path / "one", {"pyproject.toml": "", "fsdp.yaml": FSDP_YAML, "src/a.py": ""})
    assert LaunchFinder().for_file(str(one / "src" / "a.py")).source == "fsdp.yaml:1 (distributed_type: FSDP)"
    two = _project(tmp_path / "two", {"pyproject.toml": "", "fsdp.yaml": FSDP_YAML, "fsdp2.yaml": FSDP_YAML, "a.py": ""})
    assert LaunchFinder().for_file(str(two / "a.py")) is None


def test_a_command_ties_a_config_or_flags_to_its_script(tmp_path):
    root = _project(tmp_path, {
        ".git/HEAD": "",
        "cfg/one.yaml": FSDP_YAML,
        "cfg/two.yaml": FSDP_YAML,
        "run.sh": "accelerate launch --config_file cfg/two.yaml train.py\n"
                  "accelerate launch --use_fsdp --fsdp_offload_params true other.py\n"
                  "python eval.py --fsdp ''\n",
        "train.py": "", "other.py": "", "eval.py": "", "util.py": "",
    })
    finder = LaunchFinder()
    assert finder.for_file(str(root / "train.py")).source.startswith("cfg/two.yaml:1")
    other = finder.for_file(str(root / "other.py"))
    assert other.offload_params is True and "--use_fsdp" in other.source
    assert finder.for_file(str(root / "eval.py")) is None
    assert finder.for_file(str(root / "util.py")) is None  # two configs: neither is the project's


def test_a_script_launched_without_fsdp_is_not_given_the_projects_config(tmp_path):
    root = _project(tmp_path, {"pyproject.toml": "", "fsdp.yaml": FSDP_YAML, "run.sh": "torchrun --nproc_per_node 2 ddp.py\n",
                               "ddp.py": "", "lib.py": ""})
    finder = LaunchFinder()
    assert finder.for_file(str(root / "ddp.py")) is None
    assert finder.for_file(str(root / "lib.py")) is not None


def test_nested_projects_huge_and_unreadable_files(tmp_path):
    root = _project(tmp_path, {"pyproject.toml": "", "a.py": "", "vendor/pyproject.toml": "", "vendor/fsdp.yaml": FSDP_YAML,
                               "big.yaml": FSDP_YAML + "# x\n" * 100000, "bad.yaml": "distributed_type: FSDP\n\x00\xff"})
    (root / "unreadable.sh").write_bytes(b"\xff\xfe accelerate launch x.py")
    project = read_project(str(root))
    assert [os.path.basename(p) for p in project.configs] == ["bad.yaml"]  # vendor/ is its own project; big.yaml skipped
    assert project_root(str(root / "vendor" / "fsdp.yaml")) == str(root / "vendor")


def test_no_project_no_launch(tmp_path):
    """No ``pyproject.toml`` or ``.git`` above a file: no project, so no launch config is
    read for it (its files are linted one by one)."""
    if any((parent / marker).exists() for parent in tmp_path.parents for marker in ("pyproject.toml", ".git")):
        pytest.skip("the temporary folder lies inside a project")
    (tmp_path / "fsdp.yaml").write_text(FSDP_YAML)
    (tmp_path / "a.py").write_text("")
    assert project_root(str(tmp_path / "a.py")) is None
    assert LaunchFinder().for_file(str(tmp_path / "a.py")) is None
    (tmp_path / ".git").mkdir()
    assert project_root(str(tmp_path / "a.py")) == str(tmp_path)


PLUGIN_SCRIPT = (
    "import torch\nfrom accelerate import Accelerator, FullyShardedDataParallelPlugin\n\n\n"
    "def main(model):\n    plugin = FullyShardedDataParallelPlugin(fsdp_version=1)\n"
    "    accelerator = Accelerator(fsdp_plugin=plugin)\n"
    "    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n"
    "    model, optimizer = accelerator.prepare(model, optimizer)\n"
)


def _codes(root, *args):
    done = run_cli("check", "--no-cache", "--exit-zero", "--format", "json", *args, "train.py", cwd=root)
    return done, [r["code"] for r in json.loads(done.stdout or "[]")]


def test_the_plugins_use_orig_params_default_follows_the_launch(tmp_path):
    """accelerate 1.15.0: left out, ``use_orig_params`` is FSDP_USE_ORIG_PARAMS, unset (False)
    outside ``accelerate launch``, which sets it from its config (default true)."""
    cases = {
        "torchrun-script": ({"run.sh": "torchrun --nproc_per_node 2 train.py\n"}, ["FSD101"]),
        "python-key": ({"pyproject.toml": '[tool.fsdp-lint]\nlaunch = { framework = "python" }\n'}, ["FSD101"]),
        "accelerate-default": ({"run.sh": "accelerate launch --config_file fsdp.yaml train.py\n",
                                "fsdp.yaml": "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 1\n"}, []),
        "accelerate-false": ({"run.sh": "accelerate launch --config_file fsdp.yaml train.py\n",
                              "fsdp.yaml": FSDP_YAML.replace("fsdp_version: 2", "fsdp_version: 1")}, ["FSD101"]),
        "key-config-false": ({"pyproject.toml": '[tool.fsdp-lint]\nlaunch = { framework = "accelerate", config = "c.yaml" }\n',
                              "c.yaml": FSDP_YAML.replace("fsdp_version: 2", "fsdp_version: 1")}, ["FSD101"]),
        "unknown": ({}, []),  # ``accelerate launch`` may read the user's own default config
    }
    for name, (files, expected) in cases.items():
        root = _project(tmp_path / name, {"pyproject.toml": "", "train.py": PLUGIN_SCRIPT, **files})
        assert _codes(root)[1] == expected, name


def test_the_launch_key_is_validated_and_a_bad_config_file_is_a_warning(tmp_path):
    bad = _project(tmp_path / "bad", {"pyproject.toml": '[tool.fsdp-lint]\nlaunch = { framework = "slurm" }\n',
                                      "train.py": PLUGIN_SCRIPT})
    done, _ = _codes(bad)
    assert done.returncode == 2 and "launch.framework" in done.stderr and "accelerate, torchrun, python" in done.stderr
    for name, extra in (("missing", {}), ("huge", {"c.yaml": FSDP_YAML + "# x\n" * 100000}),
                        ("binary", {"c.yaml": "distributed_type: FSDP\n\x00"})):
        root = _project(tmp_path / name, {
            "pyproject.toml": '[tool.fsdp-lint]\nlaunch = { framework = "accelerate", config = "c.yaml" }\n',
            "train.py": PLUGIN_SCRIPT, **extra})
        done, codes = _codes(root)
        assert done.returncode == 0 and codes == [], name  # the run goes on; the launch is not known
        assert "c.yaml" in done.stderr and "the launch is not known" in done.stderr, name


TRAINER_KWARGS = '''from transformers import AutoModelForCausalLM, Trainer, TrainingArguments


def main(dataset):
    {args}
    training_args = TrainingArguments(**args)
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
    trainer = Trainer(model=model, args=training_args, train_dataset=dataset)
    trainer.train()
    if trainer.is_world_process_zero():
        trainer.save_model(training_args.output_dir)
'''


@pytest.mark.parametrize("args, expected", [
    ('args = dict(output_dir="out", fsdp="full_shard auto_wrap", bf16=True)', ["FSD104"]),
    ('args = {"output_dir": "out", "fsdp": "full_shard", "fsdp_config": {"min_num_params": 1e8}}', ["FSD104"]),
    ('args = dict(output_dir="out", bf16=True)', []),
    ('args = {"output_dir": "out", "fsdp": ""}', []),
    ('args = {"output_dir": "out", "fsdp_config": {"min_num_params": 1e8}}', []),  # transformers: needs `fsdp`
])
def test_a_dict_passed_as_kwargs_turns_fsdp_on(tmp_path, args, expected):
    """transformers' ``fsdp=``/``fsdp_config=`` in a dict built before ``**``: the Trainer
    then saves through FSDP, a gather every rank must join."""
    (tmp_path / "finetune.py").write_text(TRAINER_KWARGS.format(args=args))
    for gate in ("1", "0"):
        done = run_cli("check", "--no-cache", "--exit-zero", "--format", "json", "finetune.py", cwd=tmp_path,
                       env={**os.environ, "FSDP_LINT_GATE": gate})
        assert [r["code"] for r in json.loads(done.stdout)] == expected, gate


def test_a_launch_reaches_the_project_modules_its_script_imports(tmp_path):
    """``accelerate launch --use_fsdp train.py``: the modules ``train.py`` imports (and what
    they import) run in the launched processes; a module imported only in a string, or by
    no launched script, is not reached, and two launches that disagree are not guessed."""
    root = _project(tmp_path, {
        "pyproject.toml": "",
        "run.sh": "accelerate launch --use_fsdp scripts/train.py\n",
        "scripts/train.py": '"""from pkg import unused"""\nfrom pkg.loop import fit\nimport pkg.other as o\n',
        "pkg/__init__.py": "", "pkg/loop.py": "from .deep import step\n", "pkg/deep.py": "", "pkg/other.py": "",
        "pkg/unused.py": "", "tools/lonely.py": "",
    })
    settings = Settings()
    for name in ("pkg/loop.py", "pkg/deep.py", "pkg/other.py"):
        launch = settings.launch_for(str(root / name))
        assert launch is not None and launch.launcher == "accelerate", name
        assert "launching scripts/train.py, which imports this file" in launch.source
    assert settings.launch_for(str(root / "pkg" / "unused.py")) is None
    assert settings.launch_for(str(root / "tools" / "lonely.py")) is None
    assert LaunchFinder().for_file(str(root / "pkg" / "loop.py")) is None  # without the index: only what names it
    (root / "run.sh").write_text("accelerate launch --use_fsdp scripts/train.py\n"
                                 "accelerate launch --use_fsdp --fsdp_offload_params true scripts/other.py\n")
    (root / "scripts" / "other.py").write_text("import pkg.loop\n")
    assert Settings().launch_for(str(root / "pkg" / "loop.py")) is None  # two launches that disagree
    assert Settings().launch_for(str(root / "pkg" / "other.py")) is not None


def test_transformers_fsdp_config_json_is_read_as_transformers_reads_it(tmp_path):
    """``--fsdp ... --fsdp_config cfg.json``: the JSON's keys, a leading ``fsdp_`` dropped
    (transformers' ``TrainingArguments``); ``--fsdp_config`` without ``--fsdp`` turns nothing
    on; a JSON file that is not JSON or too big is a note naming it (and its line), and FSDP
    stays on."""
    root = _project(tmp_path, {
        "pyproject.toml": "",
        "ok.json": '{"fsdp_use_orig_params": "false", "version": 1, "cpu_ram_efficient_loading": true}',
        "v2.json": '{"fsdp_version": 2, "cpu_offload": true, "offload_params": false}',
        "bad.json": '{\n  "fsdp_use_orig_params": false,\n  oops\n}',
        "big.json": '{"a": "' + "x" * (300 * 1024) + '"}',
        "run.sh": "torchrun a.py --fsdp 'full_shard auto_wrap' --fsdp_config ok.json\n"
                  "torchrun b.py --fsdp full_shard --fsdp_config v2.json\n"
                  "torchrun c.py --fsdp_config ok.json\n"
                  "torchrun d.py --fsdp 'shard_grad_op offload' --fsdp_config=bad.json\n"
                  "torchrun e.py --fsdp full_shard --fsdp_config big.json\n",
        **{f"{n}.py": "" for n in "abcde"},
    })
    project = read_project(str(root))
    a = project.for_file(str(root / "a.py"))
    assert (a.offload_params, a.use_orig_params, a.version) == (False, False, 1)
    assert ("cpu_ram_efficient_loading", "True") in a.settings and "--fsdp_config ok.json" in a.source
    b = project.for_file(str(root / "b.py"))
    assert (b.offload_params, b.version) == (True, 2)  # ``cpu_offload`` is read, ``offload_params`` is not a key
    assert project.for_file(str(root / "c.py")) is None
    d = project.for_file(str(root / "d.py"))
    assert d is not None and d.offload_params is True and d.use_orig_params is None
    assert project.for_file(str(root / "e.py")) is not None
    notes = "\n".join(project.notes)
    assert "bad.json:3 (named by run.sh:4): not valid JSON" in notes
    assert "big.json (named by run.sh:5): over 256 KiB" in notes


TUNE_CONFIG = """# Config for multi-device full finetuning in recipes/full_finetune.py
output_dir: /tmp/llama3_8b_full
model:
  _component_: torchtune.models.llama3.llama3_8b
optimizer:
  _component_: torch.optim.AdamW
  lr: 2e-5
fsdp_cpu_offload: True
dtype: bf16
"""

LIGHTNING_CONFIG = """seed_everything: 42
trainer:
  accelerator: gpu
  devices: 8
  strategy:
    class_path: lightning.pytorch.strategies.FSDPStrategy
    init_args:
      cpu_offload: true
      sharding_strategy: FULL_SHARD
model:
  lr: 1.0e-4
"""


def test_torchtune_and_lightning_configs_tied_by_their_commands(tmp_path):
    root = _project(tmp_path, {
        "pyproject.toml": "",
        "configs/llama3_8b_full.yaml": TUNE_CONFIG,
        "configs/builtin.yaml": TUNE_CONFIG,
        "configs/fit_fsdp.yaml": LIGHTNING_CONFIG,
        "configs/ddp.yaml": LIGHTNING_CONFIG.replace(
            "    class_path: lightning.pytorch.strategies.FSDPStrategy\n    init_args:\n      cpu_offload: true\n"
            "      sharding_strategy: FULL_SHARD\n", "    ddp\n").replace("strategy:\n    ddp", "strategy: ddp"),
        "launch/finetune.sh": "tune run --nnodes 1 --nproc_per_node 8 recipes/full_finetune.py "
                              "--config configs/llama3_8b_full.yaml\n"
                              "tune run --nproc_per_node 8 full_finetune_distributed --config configs/builtin.yaml\n",
        "launch/fit.sh": "python main.py fit --config configs/fit_fsdp.yaml\npython other.py fit -c configs/ddp.yaml\n",
        "recipes/full_finetune.py": "", "main.py": "", "other.py": "", "unrelated.py": "",
    })
    project = read_project(str(root))
    tune = project.for_file(str(root / "recipes" / "full_finetune.py"))
    assert tune.source == "configs/llama3_8b_full.yaml:8 (fsdp_cpu_offload: True, tune run, launch/finetune.sh:1)"
    assert (tune.offload_params, tune.version, tune.launcher, tune.settings) == (True, 2, "torchtune", (("dtype", "bf16"),))
    fit = project.for_file(str(root / "main.py"))
    assert fit.source.startswith("configs/fit_fsdp.yaml:6 (trainer.strategy.class_path: lightning.pytorch.strategies.")
    assert (fit.offload_params, fit.launcher) == (True, "lightning")
    assert project.for_file(str(root / "other.py")) is None  # its config is DDP
    # three FSDP configs (one tied to no project file): none is the project's
    assert project.for_file(str(root / "unrelated.py")) is None
    assert sorted(c.kind for c in project.configs.values()) == ["lightning", "torchtune", "torchtune"]


def test_yaml_configs_are_read_as_data():
    assert read_lightning_config("a.yaml", "trainer:\n  strategy: fsdp_cpu_offload\n").offload_params is True
    assert read_lightning_config("b.yaml", "trainer:\n  strategy: ddp\nmodel:\n  strategy: fsdp\n") is None
    assert read_lightning_config("c.yaml", "model:\n  trainer:\n    strategy: fsdp\n") is None  # not the CLI's trainer
    assert read_torchtune_config("d.yaml", "fsdp_cpu_offload: True\n") is None  # no torchtune components
    assert read_torchtune_config("e.yaml", "model:\n  _component_: x\n  fsdp_cpu_offload: True\n") is None  # nested
    tagged = "!!python/object/apply:os.system ['x']\nmodel:\n  _component_: !!python/name:os.system\nfsdp_cpu_offload: false\n"
    assert read_torchtune_config("f.yaml", tagged).offload_params is False  # tags are text, never constructed


def test_a_config_tied_to_a_script_is_not_the_projects(tmp_path):
    root = _project(tmp_path, {"pyproject.toml": "", "fsdp.yaml": FSDP_YAML,
                               "run.sh": "accelerate launch --config_file fsdp.yaml train.py\n",
                               "train.py": "", "tools/export.py": ""})
    finder = LaunchFinder()
    assert finder.for_file(str(root / "train.py")) is not None
    assert finder.for_file(str(root / "tools" / "export.py")) is None


def test_a_named_config_that_cannot_be_read_is_a_warning_and_the_run_goes_on(tmp_path):
    root = _project(tmp_path, {
        "pyproject.toml": "", "big.yaml": FSDP_YAML + "# x\n" * 100000,
        "run.sh": "accelerate launch --config_file big.yaml train.py\n",
        "train.py": PLUGIN_SCRIPT,
    })
    done, codes = _codes(root)
    assert done.returncode == 0 and codes == []
    assert "big.yaml (named by run.sh:1): over 256 KiB" in done.stderr and "its launch is not known" in done.stderr
