"""A file goes through the pipeline once (issue 25, item 3): one marker pass, one cache
lookup, at most one ``ast.parse`` and one libcst parse, however many stages ask; the
flake8 bridge reuses the tree flake8 hands it.  Each stage is counted where the code under
test looks it up (its own module's binding), and each count is checked to have seen work,
so a patch that missed would fail the test instead of passing it."""

import ast
from collections import Counter
from pathlib import Path

import pytest

import fsdp_lint.engine as engine
from fsdp_lint import check
from fsdp_lint.cache import Cache

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
# files of every kind: findings (libcst needed), a file the ``ast`` stage clears, a file
# naming no topic at all, one whose markers match but whose code never uses the names
FILES = {
    "offload.py": (FIXTURES / "FSD001" / "fix" / "read_only.py").read_text(),
    "loops.py": (FIXTURES / "FSD002" / "fires" / "training_loops.py").read_text(),
    "quiet.py": next((FIXTURES / "FSD002" / "quiet").glob("*.py")).read_text(),
    "data.py": "import torch\n\n\ndef collate(batch):\n    return torch.stack(batch)\n",
    "docs.py": '"""summon_full_params and CPUOffload are explained in offload.py."""\nX = 1\n',
}


@pytest.fixture
def files(tmp_path):
    paths = []
    for name, text in FILES.items():
        path = tmp_path / name
        path.write_text(text)
        paths.append(str(path))
    return paths


def _count(monkeypatch):
    """Counters per stage, keyed by the text each stage was given."""
    seen = {"markers": Counter(), "ast": Counter(), "libcst": Counter(), "cache": Counter()}
    real_wanted, real_parse, real_cst, real_get = engine.wanted_rules, ast.parse, engine._parse, Cache.get

    def wanted(text, *args, **kwargs):
        seen["markers"][text] += 1
        return real_wanted(text, *args, **kwargs)

    def parse(text, *args, **kwargs):
        seen["ast"][text] += 1
        return real_parse(text, *args, **kwargs)

    def cst_parse(text, *args, **kwargs):
        seen["libcst"][text] += 1
        return real_cst(text, *args, **kwargs)

    def get(self, key, path):
        seen["cache"][path] += 1
        return real_get(self, key, path)

    monkeypatch.setattr(engine, "wanted_rules", wanted)
    monkeypatch.setattr(ast, "parse", parse)  # every ``ast`` parse, whoever asks
    monkeypatch.setattr(engine, "_parse", cst_parse)
    monkeypatch.setattr(Cache, "get", get)
    return seen


@pytest.mark.parametrize("mode", ["lint", "fix"])
def test_each_stage_runs_at_most_once_per_file(files, tmp_path, monkeypatch, mode):
    seen = _count(monkeypatch)
    settings = check.Settings(cache=Cache(str(tmp_path / "cache")), fix=mode == "fix")
    reports = check.run_files(files, settings, jobs=1)
    assert sum(len(r.diagnostics) for r in reports) > 0
    for stage, counts in seen.items():
        if stage == "cache" and mode == "fix":
            assert not counts  # fixes are never answered from the cache
            continue
        assert counts, f"the {stage} stage was never reached: the count would prove nothing"
        assert max(counts.values()) == 1, (stage, counts)
    # every file's markers, once each (with fixes, each fixed text is a new text, checked again once)
    assert set(seen["markers"]) >= set(FILES.values())
    assert len(seen["libcst"]) < len(seen["markers"])  # and the gate kept libcst from some
    if mode == "lint":
        assert len(seen["markers"]) == len(FILES)
        assert len(seen["cache"]) == len(FILES) - 1  # the file naming no topic is never looked up


def test_flake8_bridge_reuses_flake8s_tree(monkeypatch):
    from fsdp_lint.flake8_plugin import Flake8Plugin

    text = FILES["loops.py"]
    tree = ast.parse(text)  # flake8's
    seen = _count(monkeypatch)
    found = list(Flake8Plugin(tree, "loops.py", text.splitlines(keepends=True)).run())
    assert found
    assert not seen["ast"], "the bridge parsed the file again instead of using flake8's tree"
    assert sum(seen["libcst"].values()) == 1
