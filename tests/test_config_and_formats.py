"""[tool.fsdp-lint] configuration, output formats, standard input, file suppression."""

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BAD = FIXTURES / "FSD001" / "fix" / "read_only.py"
LOOPS = FIXTURES / "FSD002" / "fires" / "training_loops.py"
SCHEMA = Path(__file__).resolve().parent / "data" / "sarif-2.1.0.json"


@pytest.fixture
def project(tmp_path):
    (tmp_path / "src" / "gen").mkdir(parents=True)
    shutil.copy(BAD, tmp_path / "src" / "a.py")
    shutil.copy(LOOPS, tmp_path / "src" / "loops.py")
    shutil.copy(BAD, tmp_path / "src" / "gen" / "b.py")
    return tmp_path


def codes(cli, cwd, *args):
    result = cli("check", "--format", "json", "--no-cache", *args, cwd=cwd)
    assert result.returncode in (0, 1), result.stderr
    return sorted({(Path(d["filename"]).as_posix(), d["code"]) for d in json.loads(result.stdout)})


def test_config_select_ignore_per_file_and_excludes(cli, project):
    (project / "pyproject.toml").write_text(
        '[tool.fsdp-lint]\nignore = ["FSD104"]\nextend-exclude = ["gen"]\n'
        'per-file-ignores = { "src/loops.py" = ["summon-in-training-loop"] }\n'
    )
    assert codes(cli, project) == [("src/a.py", "FSD001")]
    # the command line wins over the file
    assert ("src/loops.py", "FSD104") in codes(cli, project, "--select", "FSD104")
    # --force-exclude applies excludes to files named explicitly
    assert codes(cli, project, "src/gen/b.py") == [("src/gen/b.py", "FSD001")]
    assert codes(cli, project, "--force-exclude", "src/gen/b.py") == []


def test_nearest_config_wins(cli, project):
    (project / "pyproject.toml").write_text('[tool.fsdp-lint]\nselect = ["FSD002"]\n')
    (project / "src" / "gen" / "pyproject.toml").write_text('[tool.fsdp-lint]\nselect = ["FSD001"]\n')
    found = codes(cli, project)
    assert ("src/gen/b.py", "FSD001") in found and ("src/loops.py", "FSD002") in found
    assert ("src/a.py", "FSD001") not in found


def test_target_torch_version_skips_fixed_hazards(cli, project):
    (project / "pyproject.toml").write_text('[tool.fsdp-lint]\ntarget-torch-version = "2.14.1"\n')
    assert ("src/a.py", "FSD001") not in codes(cli, project)
    assert ("src/a.py", "FSD001") in codes(cli, project, "--target-torch-version", "2.13")
    # 2.14 is 2.14.0, which still has the hazard fixed in 2.14.1
    assert ("src/a.py", "FSD001") in codes(cli, project, "--target-torch-version", "2.14")


STATE_DICT = FIXTURES / "FSD010" / "fires" / "target-torch-2.0" / "single_gpu_finetune.py"


def test_a_path_fixed_long_ago_reports_only_below_its_release(cli, tmp_path):
    """FSD010's state-dict path (fixed in torch 2.1) is off without a target version, on
    below 2.1; the cache keeps the answers apart (no --no-cache here)."""
    shutil.copy(STATE_DICT, tmp_path / "save.py")

    def found(*args):
        result = cli("check", "--format", "json", *args, "save.py", cwd=tmp_path)
        return [(d["code"], d["location"]["row"]) for d in json.loads(result.stdout)]

    assert found() == []
    assert found("--target-torch-version", "2.0.1") == [("FSD010", 22)]
    assert found("--target-torch-version", "2.1") == []
    assert found("--target-torch-version", "2.0") == [("FSD010", 22)]
    (tmp_path / "pyproject.toml").write_text('[tool.fsdp-lint]\ntarget-torch-version = "1.13"\n')
    assert found() == [("FSD010", 22)]


TOTAL_NORM = FIXTURES / "FSD106" / "quiet" / "target-torch-2.11" / "titan_style_train.py"


def test_a_path_fixed_recently_reports_unless_the_target_has_the_fix(cli, tmp_path):
    """FSD106's total-norm path (clip_grad_norm_ returns Replicate() from torch 2.11) is on
    without a target version, off from 2.11 on; the cache keeps the answers apart."""
    shutil.copy(TOTAL_NORM, tmp_path / "train.py")

    def found(*args):
        result = cli("check", "--format", "json", *args, "train.py", cwd=tmp_path)
        return [(d["code"], d["location"]["row"]) for d in json.loads(result.stdout)]

    assert found() == [("FSD106", 22), ("FSD106", 23)]
    assert found("--target-torch-version", "2.11") == []
    assert found("--target-torch-version", "2.10.2") == [("FSD106", 22), ("FSD106", 23)]
    assert found("--target-torch-version", "2.13") == []
    (tmp_path / "pyproject.toml").write_text('[tool.fsdp-lint]\ntarget-torch-version = "2.9"\n')
    assert found() == [("FSD106", 22), ("FSD106", 23)]


def test_unsafe_fixes_from_config(cli, project):
    target = project / "src" / "m.py"
    shutil.copy(FIXTURES / "FSD001" / "fix" / "mutating.py", target)
    (project / "pyproject.toml").write_text("[tool.fsdp-lint]\nunsafe-fixes = true\n")
    assert cli("check", "--fix", "--no-cache", "src/m.py", cwd=project).returncode == 0
    assert target.read_text() == (FIXTURES / "FSD001" / "fix" / "mutating.unsafe.py").read_text()


@pytest.mark.parametrize(
    "body,needle",
    [
        ("bogus = 1", "bogus: unknown key; allowed: select"),
        ('select = "FSD001"', "select: must be a list"),
        ('ignore = ["FSD999"]', "unknown rule selector 'FSD999'"),
        ('target-torch-version = "two"', "target-torch-version: must be a version"),
        ("unsafe-fixes = 1", "unsafe-fixes: must be true or false"),
        ("select = [", "invalid TOML"),
    ],
)
def test_bad_config_exits_2_naming_key_and_file(cli, project, body, needle):
    (project / "pyproject.toml").write_text(f"[tool.fsdp-lint]\n{body}\n")
    result = cli("check", "src", cwd=project)
    assert result.returncode == 2
    assert needle in result.stderr and "pyproject.toml" in result.stderr


def test_sarif_validates_against_the_schema(cli, project):
    result = cli("check", "--format", "sarif", "--no-cache", "src", cwd=project)
    log = json.loads(result.stdout)
    schema = json.loads(SCHEMA.read_text())
    jsonschema.validators.validator_for(schema)(schema).validate(log)
    run = log["runs"][0]
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert "FSD001" in rule_ids and run["tool"]["driver"]["rules"][0]["helpUri"].startswith("https://")
    fixed = [r for r in run["results"] if r.get("fixes")]
    assert fixed and fixed[0]["fixes"][0]["artifactChanges"][0]["replacements"][0]["insertedContent"]["text"]
    region = run["results"][0]["locations"][0]["physicalLocation"]["region"]
    assert region["startLine"] >= 1 and region["startColumn"] >= 1


def test_sarif_schema_rejects_a_broken_log():
    schema = json.loads(SCHEMA.read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validators.validator_for(schema)(schema).validate({"version": "2.1.0", "runs": [{"results": []}]})


def test_github_format_and_output_file(cli, project):
    out = project / "report.txt"
    result = cli("check", "--format", "github", "--no-cache", "-o", out, "src/a.py", cwd=project)
    assert result.returncode == 1 and result.stdout == ""
    first = out.read_text().splitlines()[0]
    assert first.startswith("::error file=src/a.py,line=4,col=6,") and "title=FSD001::FSD001 " in first


def test_full_format_shows_source_caret_and_fix(cli, project):
    result = cli("check", "--format", "full", "--no-cache", "src/a.py", cwd=project)
    assert "  4 | with FSDP.summon_full_params(model):  # only reads" in result.stdout
    assert "^^^^" in result.stdout and "= fix (safe): Pass `writeback=False`" in result.stdout
    assert "+with FSDP.summon_full_params(model, writeback=False):  # only reads" in result.stdout


def test_stdin_lint_and_fix(cli):
    source = BAD.read_text()
    linted = cli("check", "--stdin-filename", "pkg/m.py", "-", input=source)
    assert linted.returncode == 1 and "pkg/m.py:4:6: FSD001" in linted.stdout
    fixed = cli("check", "--fix", "--stdin-filename", "pkg/m.py", "-", input=source)
    assert fixed.stdout == (FIXTURES / "FSD001" / "fix" / "read_only.fixed.py").read_text()


def test_file_level_noqa_and_show_files(cli, project):
    target = project / "src" / "a.py"
    target.write_text("# fsdp-lint: noqa\n" + target.read_text())
    assert ("src/a.py", "FSD001") not in codes(cli, project)
    shown = cli("check", "--show-files", "--extend-exclude", "gen", cwd=project).stdout.splitlines()
    assert "src/a.py" in shown and "skipped src/gen (excluded)" in shown


def test_cache_warm_run_gives_the_same_answer(cli, project):
    first = cli("check", "--format", "json", "src", cwd=project).stdout
    assert (project / ".fsdp_lint_cache").is_dir()
    assert cli("check", "--format", "json", "src", cwd=project).stdout == first
    # a corrupt entry is a miss, never fatal
    for entry in (project / ".fsdp_lint_cache").rglob("*.json"):
        entry.write_text("{not json")
    assert cli("check", "--format", "json", "src", cwd=project).stdout == first
    assert cli("clean", cwd=project).returncode == 0 and not (project / ".fsdp_lint_cache").exists()


@pytest.mark.slow  # CI runs it; the everyday lane's gate differential runs the fixtures with workers too
def test_parallel_output_identical_to_serial(cli):
    serial = cli("check", "--format", "json", "--no-cache", "-j", "1", FIXTURES).stdout
    parallel = cli("check", "--format", "json", "--no-cache", "-j", "2", FIXTURES).stdout
    assert serial == parallel and json.loads(serial)


def test_settings_with_a_target_version_survive_pickling(tmp_path):
    """Workers started by spawn get the settings pickled; the rules made for a target
    version are rebuilt there, not lost or named wrongly."""
    import pickle

    from fsdp_lint.check import Overrides, Settings

    settings = Settings(overrides=Overrides(target_torch_version="2.0"))
    rules = settings.rules_for(str(tmp_path / "x.py"))
    assert "FSD010@2.0.0" in [r.cache_tag() for r in rules]
    clone = pickle.loads(pickle.dumps(settings))
    assert [r.cache_tag() for r in clone.rules_for(str(tmp_path / "x.py"))] == [r.cache_tag() for r in rules]


@pytest.mark.parametrize("header", ["[tool.fsdp_lint]", "[tool.fsdplint]", "[fsdp-lint]"])
def test_a_misnamed_table_is_named_in_a_warning(cli, project, header):
    """``[tool.fsdp_lint]`` used to be ignored without a word: the run warns on standard
    error, naming the file and the table it should be, once; the table still is not read."""
    (project / "pyproject.toml").write_text(f'{header}\nselect = ["FSD002"]\n')
    result = cli("check", "--format", "json", "--no-cache", "-j", "2", cwd=project)
    warning = f"pyproject.toml: {header} is not read: the table is named [tool.fsdp-lint]"
    assert result.stderr.count(warning) == 1, result.stderr
    assert ("src/a.py", "FSD001") in {(Path(d["filename"]).as_posix(), d["code"]) for d in json.loads(result.stdout)}
    (project / "pyproject.toml").write_text('[tool.fsdp-lint]\nselect = ["FSD002"]\n[tool.ruff]\nline-length = 99\n')
    assert "warning" not in cli("check", "--no-cache", cwd=project).stderr


@pytest.mark.parametrize(
    "key, suggestion",
    [("extend_select", "extend-select"), ("selcet", "select"), ("unsafe_fixes", "unsafe-fixes"),
     ("target-version", "target-torch-version")],
)
def test_unknown_key_gets_a_did_you_mean(cli, project, key, suggestion):
    (project / "pyproject.toml").write_text(f'[tool.fsdp-lint]\n{key} = []\n')
    result = cli("check", cwd=project)
    assert result.returncode == 2
    assert f"{key}: unknown key; did you mean {suggestion!r}? allowed: select" in result.stderr, result.stderr
