"""The gate's safety net: everything in front of libcst (text markers, the ``ast`` screen,
slicing) may only skip work that cannot change a finding.  Each test lints the same files
through the command line twice, once as users run it and once with the gate switched off
(``FSDP_LINT_GATE=0``: every selected rule's full analysis on every whole file), and
compares every diagnostic field, fixes included.

The net is proven to catch a wrong gate: for each rule, a run where that rule's gate
always says "cannot fire" (its screen yields no site; or its text markers never match)
must differ from the run with the gate off on the rule's firing fixtures.

The two benchmark corpora (``../shared/bench/ml-corpus.sh`` and ``dense-corpus.sh``) are
compared too when ``FSDP_LINT_CORPORA`` names a folder holding them as ``ml/`` and
``dense/`` (about four minutes with the gate off on two cores; skipped otherwise, saying
why).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp_lint.engine import GATE_ENV
from fsdp_lint.rules import ALL_RULES
from tests.generated_modules import modules
from tests.mutated_fixtures import mutants
from tests.helpers import FIXTURE_TARGET

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# Runs of the command line, each with one rule's gate made to say "cannot fire": the
# mutation is applied to the objects the engine reads (the screen table, the rule class),
# then the real entry point runs, then the mutation is undone (one process for them all:
# its start-up is paid once).  stdin: [[code, part, argv], ...]; stdout: one JSON output
# per run.
_MUTANTS = """
import contextlib, io, json, sys
from fsdp_lint import engine, screen
from fsdp_lint.rules import BY_CODE
from fsdp_lint.cli import main
outputs = []
for code, part, argv in json.load(sys.stdin):
    rule, had = BY_CODE[code], code in screen._SCREENS
    saved_screen, saved_markers = screen._SCREENS.get(code), rule.markers
    if part == "screen":
        screen._SCREENS[code] = lambda summary: iter(())
    else:
        rule.markers = (("\\x00never\\x00",),)
    engine._GATES.clear()  # the marker gate is built once per rule selection
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code_ = main(argv)
    assert code_ == 0, (code, part, code_)
    outputs.append(out.getvalue())
    if had:
        screen._SCREENS[code] = saved_screen
    else:
        screen._SCREENS.pop(code, None)
    rule.markers = saved_markers
    engine._GATES.clear()
json.dump(outputs, sys.stdout)
"""


def _args(paths, target=None, jobs=1):
    args = ["check", "--no-cache", "--exit-zero", "--format", "json", "-j", str(jobs)]
    if target:
        args += ["--target-torch-version", target]
    return args + [str(p) for p in paths]


def _records(output):
    records = json.loads(output)
    for record in records:
        record["filename"] = str((ROOT / record["filename"]).resolve())
    return sorted(records, key=lambda r: json.dumps(r, sort_keys=True))


def _run(paths, gate=True, target=None, jobs=1):
    """The diagnostics of ``fsdp-lint check`` on ``paths`` as JSON records, sorted."""
    env = dict(os.environ)
    env.pop(GATE_ENV, None)
    if not gate:
        env[GATE_ENV] = "0"
    done = subprocess.run([sys.executable, "-m", "fsdp_lint", *_args(paths, target, jobs)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr
    return _records(done.stdout)


def _fixture_groups():
    """Fixture files by the target torch version they are linted for (their folder)."""
    groups = {}
    for path in sorted(FIXTURES.rglob("*.py")):
        name = path.parent.name
        target = name[len(FIXTURE_TARGET):] if name.startswith(FIXTURE_TARGET) else None
        groups.setdefault(target, []).append(path)
    return groups


def _differences(gated, whole):
    missing = [r for r in whole if r not in gated]
    extra = [r for r in gated if r not in whole]
    return missing, extra


@pytest.fixture(scope="module")
def fixtures_without_gate():
    return {target: _run(paths, gate=False, target=target) for target, paths in _fixture_groups().items()}


def test_switch_turns_the_gate_off(tmp_path):
    """The switch is real: a file the gate settles without libcst (no marker) is parsed
    with it off, so its syntax error shows only then."""
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n    pass\n")
    assert _run([broken], gate=True) == []
    assert [r["code"] for r in _run([broken], gate=False)] == ["FSD900"]


def test_fixtures_same_with_and_without_the_gate(fixtures_without_gate):
    for target, paths in _fixture_groups().items():
        whole = fixtures_without_gate[target]
        assert whole or target is not None, "the fixtures give findings"
        assert _run(paths, target=target) == whole, target
        assert _run(paths, target=target, jobs=2) == whole, target  # the workers' path


def test_generated_modules_same_with_and_without_the_gate(tmp_path):
    for index, text in enumerate(modules(300, seed=20261202)):
        (tmp_path / f"gen_{index:03}.py").write_text(text)
    whole = _run([tmp_path], gate=False)
    assert len({r["code"] for r in whole}) >= 10, "the generated modules reach most rules"
    assert _run([tmp_path]) == whole


@pytest.mark.slow  # CI runs it; the everyday lane keeps the fixtures' and generated modules' differentials
def test_mutated_fixtures_same_with_and_without_the_gate(tmp_path):
    """Two mutants of every fixture (``tests/mutated_fixtures.py``: literals swapped in,
    keywords dropped or passed by position or through ``**``, comparisons flipped, tests
    negated, names respelled, code moved into a function). Found this way: a gate that
    took ``group=None`` for a subgroup, one that saw no rank test in ``a if rank == 0 else
    b``, and text markers that needed the name of an argument passed by position."""
    count = 0
    for path, index, text in mutants(sorted(FIXTURES.rglob("*.py")), per_file=2, seed=20261207):
        folder = tmp_path / path.relative_to(FIXTURES).parent
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{path.stem}__{index}.py").write_text(text, encoding="utf-8")
        count += 1
    assert count > 500, "the fixtures give mutants"
    whole = _run([tmp_path], gate=False, jobs=2)
    assert len({r["code"] for r in whole}) >= 20, "the mutants still reach most rules"
    assert _run([tmp_path], jobs=2) == whole


def _firing(code):
    return sorted((FIXTURES / code / "fires").rglob("*.py"))


@pytest.mark.slow  # a proof about the net itself: CI runs it, the everyday lane runs the net
def test_the_net_catches_a_gate_that_drops_any_one_rule(fixtures_without_gate):
    runs, expected = [], []
    for code in [rule.code for rule in ALL_RULES]:
        paths = _firing(code)
        assert paths, f"{code} has firing fixtures"
        by_target = {}
        for path in paths:
            name = path.parent.name
            by_target.setdefault(name[len(FIXTURE_TARGET):] if name.startswith(FIXTURE_TARGET) else None, []).append(path)
        for part in ("screen", "markers"):
            for target, group in by_target.items():
                names = {str(p.resolve()) for p in group}
                runs.append([code, part, _args(group, target)])
                expected.append((code, part, [r for r in fixtures_without_gate[target] if r["filename"] in names]))
    env = dict(os.environ)
    env.pop(GATE_ENV, None)
    done = subprocess.run([sys.executable, "-c", _MUTANTS], input=json.dumps(runs), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr
    outputs = json.loads(done.stdout)
    assert len(outputs) == len(runs)
    missing = {}
    for (code, part, whole), output in zip(expected, outputs):
        missing.setdefault((code, part), []).extend(_differences(_records(output), whole)[0])
    unnoticed = [f"{part} gate that drops {code}" for (code, part), lost in missing.items()
                 if not any(r["code"] == code for r in lost)]
    assert len(missing) == 2 * len(ALL_RULES) and not unnoticed, unnoticed


CORPORA = os.environ.get("FSDP_LINT_CORPORA")


@pytest.mark.slow
@pytest.mark.parametrize("corpus", ["ml", "dense"])
def test_corpus_same_with_and_without_the_gate(corpus):
    if not CORPORA or not (Path(CORPORA) / corpus).is_dir():
        pytest.skip(
            f"FSDP_LINT_CORPORA does not name a folder with {corpus}/ "
            f"(build it with ../shared/bench/{corpus}-corpus.sh FOLDER/{corpus})"
        )
    folder = Path(CORPORA) / corpus
    whole = _run([folder], gate=False, jobs=os.cpu_count() or 1)
    assert _run([folder], jobs=os.cpu_count() or 1) == whole
