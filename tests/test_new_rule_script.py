"""scripts/new_rule.py lays out a new rule: module, fixtures, scenario stub and registry
entry, README row; the rule module imports and documents itself in ruff's sections."""

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

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
    for section in ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety", "References"):
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
