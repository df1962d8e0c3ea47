"""``check --show-settings`` and ``check --fix --show-fixes`` through the real command line
(issue 27, item 3)."""

import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
READ_ONLY = FIXTURES / "FSD001" / "fix" / "read_only.py"
LOOPS = FIXTURES / "FSD002" / "fires" / "training_loops.py"


def settings_of(cli, cwd, *args):
    result = cli("check", "--show-settings", *args, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return dict(line.split(" = ", 1) for line in result.stdout.splitlines() if " = " in line), result.stdout


def test_defaults_without_a_config(cli, tmp_path):
    shutil.copy(READ_ONLY, tmp_path / "a.py")
    values, out = settings_of(cli, tmp_path, "a.py")
    assert out.startswith("Resolved settings for: a.py\nSettings path: (none: defaults)\n")
    assert values["select"] == "['ALL']  # default"
    assert values["rules"].startswith("['FSD001', 'FSD002'") and "'FSD113'" in values["rules"]
    assert values["unused-noqa (FSD800, opt-in)"] == "false"
    assert values["target-torch-version"].startswith("(not set")
    assert values["launch"] == "(no FSDP launch detected for this file)"


def test_config_file_command_line_and_launch_with_its_file_and_line(cli, tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.fsdp-lint]\nselect = ["FSD0"]\nignore = ["FSD002"]\nextend-select = ["unused-noqa"]\n'
        'per-file-ignores = { "train/*" = ["FSD003"] }\ntarget-torch-version = "2.9"\nunsafe-fixes = true\n'
    )
    (tmp_path / "train").mkdir()
    (tmp_path / "configs").mkdir()
    shutil.copy(READ_ONLY, tmp_path / "train" / "main.py")
    (tmp_path / "configs" / "fsdp.yaml").write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nfsdp_config:\n  fsdp_offload_params: true\n"
    )
    values, out = settings_of(cli, tmp_path, "train")
    assert f"Settings path: {tmp_path / 'pyproject.toml'}\n" in out
    assert out.startswith(f"Resolved settings for: {Path('train') / 'main.py'}\n")
    assert values["select"] == f"['FSD0']  # {tmp_path / 'pyproject.toml'}"
    assert values["ignore"] == "['FSD002']" and values["per-file-ignores (matching this file)"] == "['FSD003']"
    rules = values["rules"]
    assert "'FSD001'" in rules and "'FSD002'" not in rules and "'FSD003'" not in rules and "'FSD101'" not in rules
    assert values["unused-noqa (FSD800, opt-in)"] == "true"
    assert values["unsafe-fixes"].startswith("true")
    assert values["target-torch-version"] == f"2.9  # {tmp_path / 'pyproject.toml'}"
    assert values["launch"] == "FSDP turned on by configs/fsdp.yaml:2 (distributed_type: FSDP) (offload_params=True)"
    assert values["project root (launch paths are relative to it)"] == str(tmp_path)
    # the command line wins, and says so
    values, _ = settings_of(cli, tmp_path, "--select", "FSD101", "--target-torch-version", "2.13", "--no-unsafe-fixes", "train")
    assert values["select"] == "['FSD101']  # command line" and values["rules"] == "['FSD101']"
    assert values["target-torch-version"] == "2.13  # command line"
    assert values["unsafe-fixes"] == "false  # command line"
    assert values["unused-noqa (FSD800, opt-in)"] == "true"  # extend-select still adds it


def test_show_settings_for_standard_input_and_errors(cli, tmp_path):
    values, out = settings_of(cli, tmp_path, "--stdin-filename", "x/train.py", "-")
    assert out.startswith(f"Resolved settings for: {Path('x') / 'train.py'}\n")
    (tmp_path / "empty").mkdir()
    result = cli("check", "--show-settings", "empty", cwd=tmp_path)
    assert result.returncode == 2 and "no Python file" in result.stderr
    result = cli("check", "--show-settings", "--show-files", ".", cwd=tmp_path)
    assert result.returncode == 2


def test_show_fixes_lists_the_fixed_findings_per_file_and_rule(cli, tmp_path):
    shutil.copy(READ_ONLY, tmp_path / "a.py")
    shutil.copy(LOOPS, tmp_path / "loops.py")
    result = cli("check", "--no-cache", "--fix", "--show-fixes", ".", cwd=tmp_path)
    assert "Fixed 6 error(s):\n- a.py:\n    6 \u00d7 FSD001 (summon-writeback-with-cpu-offload)\nFound " in result.stdout
    assert "loops.py:" not in result.stdout.split("Found")[0].split("Fixed")[1]  # nothing fixed there
    # without it, or without --fix, no list
    shutil.copy(READ_ONLY, tmp_path / "a.py")
    assert "Fixed" not in cli("check", "--no-cache", "--fix", "a.py", cwd=tmp_path).stdout
    shutil.copy(READ_ONLY, tmp_path / "a.py")
    assert "Fixed" not in cli("check", "--no-cache", "--show-fixes", "a.py", cwd=tmp_path).stdout


def test_show_settings_names_each_launch_config_and_its_settings_also_as_json(cli, tmp_path):
    """What was detected and from where: a torchtune recipe config tied by ``tune run``, in
    text and in ``--format json``."""
    import json

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "recipes").mkdir()
    (tmp_path / "configs").mkdir()
    shutil.copy(READ_ONLY, tmp_path / "recipes" / "full_finetune.py")
    (tmp_path / "configs" / "8b.yaml").write_text(
        "model:\n  _component_: torchtune.models.llama3.llama3_8b\nfsdp_cpu_offload: True\ndtype: bf16\n")
    (tmp_path / "run.sh").write_text("tune run --nproc_per_node 8 recipes/full_finetune.py --config configs/8b.yaml\n")
    values, _ = settings_of(cli, tmp_path, "recipes/full_finetune.py")
    assert values["launch"] == ("FSDP turned on by configs/8b.yaml:3 (fsdp_cpu_offload: True, tune run, run.sh:1) "
                                "(offload_params=True, fsdp_version=2, dtype=bf16)")
    result = cli("check", "--show-settings", "--format", "json", "recipes/full_finetune.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    launch = json.loads(result.stdout)["launch"]
    assert launch["source"].startswith("configs/8b.yaml:3") and launch["launcher"] == "torchtune"
    assert (launch["offload_params"], launch["fsdp_version"], launch["settings"]) == (True, 2, {"dtype": "bf16"})
