"""``--add-noqa``, the opt-in FSD800 (unused noqa codes), ``--baseline`` and
``--write-baseline``, through the real command line (issue 27, item 2)."""

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from fsdp_lint.noqa import add_noqa
from tests.conftest import run_cli

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
READ_ONLY = FIXTURES / "FSD001" / "fix" / "read_only.py"
LOOPS = FIXTURES / "FSD002" / "fires" / "training_loops.py"


def findings(cli, cwd, *args):
    result = cli("check", "--format", "json", "--no-cache", *args, cwd=cwd)
    assert result.returncode in (0, 1), result.stderr
    return [(d["filename"], d["code"], d["location"]["row"]) for d in json.loads(result.stdout)]


# --add-noqa ---------------------------------------------------------------------------------


def test_add_noqa_suppresses_every_finding_keeps_comments_and_is_idempotent(cli, tmp_path):
    shutil.copy(READ_ONLY, tmp_path / "a.py")
    shutil.copy(LOOPS, tmp_path / "loops.py")
    before = findings(cli, tmp_path, ".")
    assert len(before) >= 8
    result = cli("check", "--add-noqa", "--no-cache", ".", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = {(f, row) for f, _, row in before}
    assert f"Added {len(rows)} noqa directive(s)." in result.stderr  # one per flagged row
    assert findings(cli, tmp_path, ".") == []
    text = (tmp_path / "a.py").read_text()
    # an existing comment stays, the directive goes after it; a multi-line call gets it on its first row
    assert "with FSDP.summon_full_params(model):  # only reads  # noqa: FSD001\n" in text
    assert "with FSDP.summon_full_params(  # noqa: FSD001\n    model,\n    recurse=True,  # keep this comment\n" in text
    # the line that had one keeps it as it was
    assert text.count("with FSDP.summon_full_params(model):  # noqa: FSD001\n") == 1
    again = cli("check", "--add-noqa", "--no-cache", ".", cwd=tmp_path)
    assert again.returncode == 0 and "Added 0 noqa directive(s)." in again.stderr
    assert (tmp_path / "a.py").read_text() == text


def test_add_noqa_merges_into_an_existing_code_list_and_keeps_its_codes(cli, tmp_path):
    source = READ_ONLY.read_text().replace(
        "with FSDP.summon_full_params(model):  # only reads", "with FSDP.summon_full_params(model):  # noqa: E501, F401"
    )
    (tmp_path / "a.py").write_text(source)
    assert cli("check", "--add-noqa", "--no-cache", "a.py", cwd=tmp_path).returncode == 0
    assert "with FSDP.summon_full_params(model):  # noqa: E501, F401, FSD001\n" in (tmp_path / "a.py").read_text()


def test_add_noqa_keeps_encoding_bom_and_crlf(cli, tmp_path):
    text = READ_ONLY.read_text().replace("# only reads", "# lit seulement: é")
    raw = b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode("utf-8")
    (tmp_path / "a.py").write_bytes(raw)
    assert cli("check", "--add-noqa", "--no-cache", "a.py", cwd=tmp_path).returncode == 0
    new = (tmp_path / "a.py").read_bytes()
    assert new.startswith(b"\xef\xbb\xbf") and b"\n" not in new.replace(b"\r\n", b"")
    assert "# lit seulement: é  # noqa: FSD001\r\n".encode() in new


def test_add_noqa_never_writes_inside_a_string_or_after_a_continuation():
    text = (
        "x = f(a, '''one\n"
        "two''', b)\n"
        "y = g(1, \\\n"
        "      2)\n"
    )
    new, count = add_noqa(text, [("FSD001", 1, 1, 2), ("FSD002", 3, 3, 4)])
    assert count == 2
    assert new == "x = f(a, '''one\ntwo''', b)  # noqa: FSD001\ny = g(1, \\\n      2)  # noqa: FSD002\n"


def test_add_noqa_refuses_fix_and_standard_input(cli, tmp_path):
    shutil.copy(READ_ONLY, tmp_path / "a.py")
    for extra in (["--fix"], ["--diff"], ["--baseline", "b.json"]):
        result = cli("check", "--add-noqa", *extra, "a.py", cwd=tmp_path)
        assert result.returncode == 2 and f"--add-noqa cannot be used with {extra[0]}" in result.stderr
    result = cli("check", "--add-noqa", "-", input=READ_ONLY.read_text(), cwd=tmp_path)
    assert result.returncode == 2 and "standard input" in result.stderr


# FSD800 unused-noqa ---------------------------------------------------------------------------


UNUSED = READ_ONLY.read_text().replace(
    "with FSDP.summon_full_params(model):  # noqa: FSD001\n", "with FSDP.summon_full_params(model):  # noqa: FSD001, F401, FSD002\n"
) + "total = 1  # noqa: FSD003\nother = 2  # noqa: summon-in-forward, FSD999\nlast = 3  # noqa: FSD001  keep me\n"


def test_unused_noqa_is_opt_in(cli, tmp_path):
    (tmp_path / "a.py").write_text(UNUSED)
    assert "FSD800" not in {code for _, code, _ in findings(cli, tmp_path, "a.py")}
    assert "FSD800" not in {code for _, code, _ in findings(cli, tmp_path, "--select", "ALL", "a.py")}
    assert "FSD800" not in {code for _, code, _ in findings(cli, tmp_path, "--select", "FSD", "a.py")}
    for selector in ("FSD800", "unused-noqa", "FSD8"):
        assert ("a.py", "FSD800", 22) in findings(cli, tmp_path, "--extend-select", selector, "a.py")
    assert "FSD800" not in {c for _, c, _ in findings(cli, tmp_path, "--extend-select", "FSD800", "--ignore", "FSD8", "a.py")}
    (tmp_path / "pyproject.toml").write_text('[tool.fsdp-lint]\nextend-select = ["unused-noqa"]\n')
    assert ("a.py", "FSD800", 22) in findings(cli, tmp_path, "a.py")


def test_unused_noqa_reports_fsd_codes_only_and_fixes_them_away(cli, tmp_path):
    (tmp_path / "a.py").write_text(UNUSED)
    result = cli("check", "--no-cache", "--select", "FSD0,FSD800", "--format", "json", "a.py", cwd=tmp_path)
    unused = {d["location"]["row"]: d["message"] for d in json.loads(result.stdout) if d["code"] == "FSD800"}
    assert unused == {
        22: "Unused `noqa` directive (unused: `FSD002`)",  # FSD001 suppressed a finding; F401 is another tool's
        24: "Unused `noqa` directive (unused: `FSD003`)",
        25: "Unused `noqa` directive (unused: `summon-in-forward`; unknown: `FSD999`)",
        26: "Unused `noqa` directive (unused: `FSD001`)",
    }
    # a rule not selected in this run keeps its code: another run may select it
    only = findings(cli, tmp_path, "--select", "FSD001,FSD800", "a.py")
    assert [row for _, code, row in only if code == "FSD800"] == [25, 26]  # FSD002 (row 22) is not selected
    fixed = cli("check", "--no-cache", "--select", "FSD0,FSD800", "--fix", "a.py", cwd=tmp_path)
    assert fixed.returncode == 1  # FSD001 findings are fixed too; the free-text directive stays reported
    text = (tmp_path / "a.py").read_text()
    assert "with FSDP.summon_full_params(model):  # noqa: FSD001, F401\n" in text
    assert "total = 1\nother = 2\n" in text  # whole directives go, with the spaces before them
    assert "last = 3  # noqa: FSD001  keep me\n" in text  # free text after an emptied list: no fix
    again = cli("check", "--no-cache", "--select", "FSD0,FSD800", "--fix", "a.py", cwd=tmp_path)
    assert (tmp_path / "a.py").read_text() == text and again.returncode == 1


def test_unused_noqa_in_a_file_no_rule_can_fire_on(cli, tmp_path):
    """The gate skips the file (no FSDP name in it), and its FSD codes are still judged."""
    (tmp_path / "plain.py").write_text("import os  # noqa: F401, FSD104\n")
    assert findings(cli, tmp_path, "--extend-select", "FSD800", "plain.py") == [("plain.py", "FSD800", 1)]
    # the cache keeps runs with and without FSD800 apart
    cached = [cli("check", "--format", "json", *extra, "plain.py", cwd=tmp_path) for extra in ([], ["--extend-select", "FSD800"], [])]
    assert [len(json.loads(r.stdout)) for r in cached] == [0, 1, 0]


def test_a_noqa_naming_fsd800_silences_it(cli, tmp_path):
    (tmp_path / "plain.py").write_text("import os  # noqa: FSD104, FSD800\n")
    assert findings(cli, tmp_path, "--extend-select", "FSD800", "plain.py") == []


# --baseline ---------------------------------------------------------------------------------


def test_baseline_hides_recorded_findings_across_line_moves_and_reports_new_ones(cli, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(READ_ONLY, src / "a.py")
    shutil.copy(LOOPS, src / "loops.py")
    before = findings(cli, tmp_path, "src")
    written = cli("check", "--no-cache", "--write-baseline", "baseline.json", "src", cwd=tmp_path)
    assert written.returncode == 0 and f"recorded {len(before)} finding(s)" in written.stderr
    data = json.loads((tmp_path / "baseline.json").read_text())
    assert {e["file"] for e in data["findings"]} == {"src/a.py", "src/loops.py"}
    assert findings(cli, tmp_path, "--baseline", "baseline.json", "src") == []
    clean = cli("check", "--no-cache", "--baseline", "baseline.json", "src", cwd=tmp_path)
    assert clean.returncode == 0 and "All checks passed!" in clean.stdout
    assert f"{len(before)} finding(s) recorded in baseline.json not shown" in clean.stderr
    # lines added above every finding: still matched
    (src / "a.py").write_text("import os\nimport sys\n\n" + (src / "a.py").read_text())
    assert findings(cli, tmp_path, "--baseline", "baseline.json", "src") == []
    # a new finding, on a statement equal to a recorded one but one more of them: reported
    (src / "a.py").write_text((src / "a.py").read_text() + "with FSDP.summon_full_params(model,\n    recurse=True):\n    pass\n")
    assert findings(cli, tmp_path, "--baseline", "baseline.json", "src") == [(os.path.join("src", "a.py"), "FSD001", 27)]
    # the baseline's paths are relative to its own folder: the run from elsewhere matches too
    assert findings(cli, src, "--baseline", "../baseline.json", ".") == [("a.py", "FSD001", 27)]


def test_a_changed_statement_is_a_new_finding(cli, tmp_path):
    shutil.copy(READ_ONLY, tmp_path / "a.py")
    cli("check", "--no-cache", "--write-baseline", "b.json", "a.py", cwd=tmp_path)
    text = (tmp_path / "a.py").read_text().replace(
        "with FSDP.summon_full_params(model, True,):", "with FSDP.summon_full_params(model, True, recurse=False):"
    )
    (tmp_path / "a.py").write_text(text)
    assert findings(cli, tmp_path, "--baseline", "b.json", "a.py") == [("a.py", "FSD001", 20)]


@pytest.mark.parametrize("content,needle", [
    (None, "cannot read --baseline"), ("{", "is not JSON"), ('{"findings": []}', "is not an fsdp-lint baseline"),
])
def test_a_bad_baseline_is_a_usage_error(cli, tmp_path, content, needle):
    shutil.copy(READ_ONLY, tmp_path / "a.py")
    if content is not None:
        (tmp_path / "b.json").write_text(content)
    result = cli("check", "--baseline", "b.json", "a.py", cwd=tmp_path)
    assert result.returncode == 2 and needle in result.stderr


CORPORA = os.environ.get("FSDP_LINT_CORPORA")
FSD001_EXAMPLE = (
    "from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP\n\n"
    "model = FSDP(net, cpu_offload=CPUOffload(offload_params=True))\n"
    "with FSDP.summon_full_params(model):\n"
    "    for name, param in model.named_parameters():\n"
    "        print(name, param.norm())\n"
)


@pytest.mark.slow
@pytest.mark.skipif(not CORPORA, reason="FSDP_LINT_CORPORA names no folder holding ml/")
def test_baseline_on_the_ml_corpus_reports_only_a_file_added_after_it(cli, tmp_path):
    corpus = tmp_path / "ml"
    shutil.copytree(Path(CORPORA) / "ml", corpus, symlinks=True)
    written = cli("check", "--no-cache", "--write-baseline", "b.json", "ml", cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    assert findings(cli, tmp_path, "--baseline", "b.json", "ml") == []
    (corpus / "new_bad.py").write_text(FSD001_EXAMPLE)
    assert findings(cli, tmp_path, "--baseline", "b.json", "ml") == [(os.path.join("ml", "new_bad.py"), "FSD001", 4)]


def test_unused_noqa_is_the_same_with_the_gate_off(cli, tmp_path):
    """FSD800 judges the findings the rules make, which the gate may never change: every
    FSD001-FSD009 fixture with noqa codes added (used, unused, on rows no rule can reach)
    gives the same FSD800 findings and fixes with ``FSDP_LINT_GATE=0``."""
    count = 0
    for source in sorted(FIXTURES.glob("FSD00[1-9]/*/*.py")):
        text = source.read_text()
        text = re.sub(r"^(with [^\n#]*:)$", r"\1  # noqa: FSD001, FSD002, FSD104", text, count=1, flags=re.M)
        lines = text.split("\n")
        lines[0] += "  # noqa: FSD101"
        (tmp_path / f"{source.parent.parent.name}_{source.parent.name}_{source.name}").write_text("\n".join(lines))
        count += 1
    assert count > 20

    def run(gate):
        env = {**os.environ, "FSDP_LINT_GATE": gate}
        done = run_cli("check", "--no-cache", "--exit-zero", "--format", "json", "--extend-select", "FSD800", ".",
                       cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    gated, whole = run("1"), run("0")
    assert gated == whole
    assert sum(1 for d in gated if d["code"] == "FSD800") > 20


def test_rule_command_prints_the_unused_noqa_page(cli):
    for key in ("FSD800", "unused-noqa"):
        result = cli("rule", key)
        assert result.returncode == 0 and result.stdout.startswith("# FSD800 unused-noqa\n")
        assert "## What it does" in result.stdout and "## Fix safety" in result.stdout

