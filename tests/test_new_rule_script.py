"""scripts/new_rule.py lays out a new rule: module, fixtures, scenario stub and registry
entry, README row; the rule module imports and documents itself in ruff's sections."""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_new_rule_script_lays_out_a_rule(tmp_path):
    for part in ("fsdp_lint/rules", "fsdp_lint/scenarios"):
        shutil.copytree(ROOT / part, tmp_path / part)
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    (tmp_path / "fixtures").mkdir()
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "new_rule.py"), "FSD199", "demo-rule", "--root", str(tmp_path)],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    module = tmp_path / "fsdp_lint" / "rules" / "fsd199_demo_rule.py"
    spec = importlib.util.spec_from_file_location("fsd199_demo_rule", module)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    rule = loaded.DemoRule
    assert (rule.code, rule.name) == ("FSD199", "demo-rule")
    for section in ("What it does", "Why is this bad?", "Example", "Use instead", "Known problems", "Fix safety",
                    "References"):
        assert rule.section(section), section
    assert (tmp_path / "fixtures" / "FSD199" / "fires" / "expected.txt").exists()
    assert (tmp_path / "fsdp_lint" / "scenarios" / "fsd199_demo_rule.py").exists()
    assert '"FSD199": Scenario(' in (tmp_path / "fsdp_lint" / "scenarios" / "registry.py").read_text()
    assert "| FSD199 | `demo-rule` |" in (tmp_path / "README.md").read_text()
    again = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "new_rule.py"), "FSD199", "demo-rule", "--root", str(tmp_path)],
        capture_output=True, text=True,
    )
    assert again.returncode == 2 and "exists already" in again.stderr


# What a developer writes after the script: the rule module's summary, markers, docs and
# check, nothing else (no screen condition, no slicing vocabulary, no registry of rules).
_SUMMARY = 'summary = "TODO: what it flags, in one line"'
_MARKERS = 'markers = (("TODO_identifier",),)'
_CHECK = '''raise NotImplementedError("TODO: FSD199's check")'''
_WRITTEN_CHECK = '''for site in facts.calls:
            if facts.qualname(site.node.func) == "torch.distributed.monitored_barrier":
                report(site.node, "demo: a monitored barrier", statement=site.ctx.statement)'''
_FIRES = '''import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def sync_ranks():
    dist.monitored_barrier()


def train(model, batches):
    model = FSDP(model)
    for batch in batches:
        model(batch).sum().backward()
    sync_ranks()
'''
_QUIET = _FIRES.replace("dist.monitored_barrier()", "dist.barrier()  # monitored_barrier() is mentioned only here")


def _run(tmp_path, *args, gate="1"):
    env = {**os.environ, "FSDP_LINT_GATE": gate, "PYTHONPATH": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "fsdp_lint", *args], capture_output=True, text=True, cwd=tmp_path, env=env)


@pytest.mark.parametrize("gate", ["1", "0"])
def test_a_laid_out_rule_is_live_with_only_its_module_written(tmp_path, gate):
    """Issue 25, item 4: after ``new_rule.py``, writing the rule module alone makes the rule
    fire through the real command line, with the gate on exactly as with it off: the
    screen, the slicing and the rule registry need no edit.  The package runs from a copy,
    so the new module is the one the command imports."""
    shutil.copytree(ROOT / "fsdp_lint", tmp_path / "fsdp_lint", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    (tmp_path / "fixtures").mkdir()
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "new_rule.py"), "FSD199", "demo-rule", "--root", str(tmp_path)],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    module = tmp_path / "fsdp_lint" / "rules" / "fsd199_demo_rule.py"
    text = module.read_text()
    for old, new in ((_SUMMARY, 'summary = "demo: monitored barriers"'),
                     (_MARKERS, 'markers = (("monitored_barrier",),)'), (_CHECK, _WRITTEN_CHECK)):
        assert old in text, old
        text = text.replace(old, new)
    module.write_text(text)
    (tmp_path / "fires.py").write_text(_FIRES)
    (tmp_path / "quiet.py").write_text(_QUIET)
    # a large file too, so that the slicing (not only the whole-file path) must keep the site
    (tmp_path / "large.py").write_text(_FIRES + "".join(f"\n\ndef helper_{i}(x):\n    return x + {i}\n" for i in range(4000)))

    result = _run(tmp_path, "check", "--no-cache", "--select", "FSD199", "fires.py", "quiet.py", "large.py", gate=gate)
    found = sorted(line.split(":")[0] + ":" + line.split(":")[1] for line in result.stdout.splitlines() if "FSD199" in line)
    assert found == ["fires.py:6", "large.py:6"], result.stdout + result.stderr
    assert "demo: a monitored barrier" in result.stdout
    assert result.returncode == 1

    shown = _run(tmp_path, "rule", "demo-rule")
    assert shown.returncode == 0 and "## What it does" in shown.stdout, shown.stderr
    listed = _run(tmp_path, "rules")
    assert "FSD199" in listed.stdout and "demo-rule" in listed.stdout
