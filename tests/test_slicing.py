"""Slicing large files (``fsdp_lint.slicing``, on by default) changes nothing a user sees:
every fixture and a set of large real-code-shaped files give the same diagnostics (codes,
positions, messages, fixes) whether libcst parses the whole text or only the slice; the
slice seeded by the screen's candidate sites, and the closure alone (no sites) too."""

from pathlib import Path

import pytest

from fsdp_lint.engine import lint_text_sliced
from fsdp_lint.fixer import fix_text
from fsdp_lint.rules import ALL_RULES
from fsdp_lint.slicing import slice_text
from tests.helpers import fixture_rules

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
# Fixtures known to differ when sliced (strict xfails; none at the moment).
_DIFFERS: set = set()


def _known(paths):
    return [
        pytest.param(p, marks=pytest.mark.xfail(strict=True, reason="slice misses a unit the facts reach"))
        if f"{p.parent.parent.name}/{p.parent.name}/{p.name}" in _DIFFERS else p
        for p in paths
    ]


FIXTURE_FILES = _known(sorted(FIXTURES.rglob("*.py")))


def _seen(diagnostics):
    return [
        (d.code, d.location, d.end_location, d.message, d.statement_rows,
         None if d.fix is None else (d.fix.applicability, d.fix.message, d.fix.edits))
        for d in diagnostics
    ]


def _same_both_ways(text: str, name: str = "x.py", rules=ALL_RULES):
    whole = lint_text_sliced(text, name, rules, None)
    sliced = lint_text_sliced(text, name, rules, 0)
    assert _seen(sliced.diagnostics) == _seen(whole.diagnostics)
    return whole.diagnostics


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_fixture_same_with_and_without_slicing(path):
    _same_both_ways(path.read_text(), path.name, fixture_rules(path))


# Large files shaped like the ones that made slicing worth it: a test module of a PEFT-like
# library (hundreds of unrelated tests, one FSDP test class), a trainer with one FSDP method
# among many, and module-level helpers that the FSDP code reaches through names.
_HEADER = '''\
import copy
import os

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP

from .testing_utils import get_peft_state, set_seed

OFFLOAD = CPUOffload(offload_params=True)
KEEP_ON_RANK0 = True
CASES = [("lora", {"r": 8}), ("ia3", {"target_modules": ["lin0"]})]


def build_model(width=16):
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 2))


def is_main():
    return dist.get_rank() == 0
'''

_FILLER = '''

class TestAdapter{index}:
    """Adapter behaviour {index}: nothing distributed here."""

    torch_device = "cpu"

    def setup_method(self):
        set_seed({index})
        self.model = build_model()

    @pytest.mark.parametrize("name, kwargs", CASES)
    def test_forward_{index}(self, name, kwargs):
        model = copy.deepcopy(self.model)
        x = torch.randn(4, 16)
        out = model(x)
        state = get_peft_state(model)
        assert out.shape == (4, 2) and state is not None

    def test_train_{index}(self):
        model = self.model
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            loss = model(torch.randn(2, 16)).sum()
            loss.backward()
            optimizer.step()
        if os.environ.get("RANK", "0") == "0":
            torch.save(model.state_dict(), "/tmp/m{index}.pt")
'''

_FSDP = '''

class TestFsdpWrapped:
    def _wrapped(self, offload):
        model = build_model()
        return FSDP(model, cpu_offload=offload, use_orig_params=False)

    def test_summon_edits(self):
        model = self._wrapped(OFFLOAD)
        optimizer = torch.optim.Adam(model.parameters())
        with FSDP.summon_full_params(model):
            for param in model.parameters():
                param.data.zero_()
        if is_main():
            with FSDP.summon_full_params(model, rank0_only=KEEP_ON_RANK0, writeback=True):
                pass
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    def test_state_dict_on_rank0(self):
        model = self._wrapped(None)
        if dist.get_rank() == 0:
            state = model.state_dict()
            torch.save(state, "full.pt")


def train(model, loader):
    optimizer = torch.optim.AdamW(model.parameters())
    model = FSDP(model)
    for batch in loader:
        model(batch).sum().backward()
        optimizer.step()
'''


def _large_test_module(fillers_before: int, fillers_after: int) -> str:
    return (
        _HEADER
        + "".join(_FILLER.format(index=i) for i in range(fillers_before))
        + _FSDP
        + "".join(_FILLER.format(index=i) for i in range(fillers_before, fillers_before + fillers_after))
    )


@pytest.mark.parametrize("before,after", [(0, 40), (40, 0), (25, 25)])
def test_large_module_same_with_and_without_slicing(before, after):
    text = _large_test_module(before, after)
    diagnostics = _same_both_ways(text)
    assert {d.code for d in diagnostics} >= {"FSD001", "FSD101", "FSD104"}  # the findings all there


def test_large_module_fixes_same_with_and_without_slicing(monkeypatch):
    import fsdp_lint.engine as engine

    text = _large_test_module(20, 20)
    monkeypatch.setattr(engine, "_SLICE_MODE", "0")
    whole = fix_text(text, "x.py", ALL_RULES, True)
    monkeypatch.setattr(engine, "_SLICE_MODE", "all")
    sliced = fix_text(text, "x.py", ALL_RULES, True)
    assert whole.text != text
    assert sliced.text == whole.text
    assert _seen(sliced.diagnostics) == _seen(whole.diagnostics)


def test_slice_keeps_whole_lines_and_maps_offsets():
    text = _large_test_module(10, 10)
    piece = slice_text(text, ALL_RULES, 0)
    assert piece is not None
    for start, original, length in piece.chunks:
        assert piece.text[start : start + length] == text[original : original + length]
        assert original == 0 or text[original - 1] == "\n"
        assert piece.to_original(start) == original
        assert piece.to_original(start + length, end=True) == original + length


def test_syntax_error_reported_from_the_whole_text():
    text = _large_test_module(5, 5) + "\ndef broken(:\n    pass\n"
    whole = lint_text_sliced(text, "x.py", ALL_RULES, None)
    sliced = lint_text_sliced(text, "x.py", ALL_RULES, 0)
    assert [d.code for d in whole.diagnostics] == ["FSD900"]
    assert _seen(sliced.diagnostics) == _seen(whole.diagnostics)


FIRING = _known(sorted(
    p for p in FIXTURES.rglob("*.py") if p.parent.name in ("fires", "fix") or p.parent.parent.name == "fires"
))


@pytest.mark.parametrize("path", FIRING, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_fixture_inside_a_large_module_same_with_and_without_slicing(path, monkeypatch):
    """Each firing fixture, followed by unrelated tests that reuse its everyday names
    (``model``, ``optimizer``, a rank test): sliced, it must report exactly what the
    whole text reports, both with the slice seeded by the screen's sites and with the
    closure alone (seeds from the rules' marker groups and API names, no sites)."""
    text = path.read_text()
    if not text.endswith("\n"):
        text += "\n"
    text += "".join(_FILLER.format(index=i) for i in range(12))
    rules = fixture_rules(path)
    whole = _seen(lint_text_sliced(text, path.name, rules, None).diagnostics)
    # (module-level names shared with the filler keep some of it)
    assert _seen(lint_text_sliced(text, path.name, rules, 0).diagnostics) == whole
    calls = _without_sites(monkeypatch)
    assert _seen(lint_text_sliced(text, path.name, rules, 0).diagnostics) == whole
    assert calls, "the engine did not ask the patched screen: the test would compare nothing"


_SAVE_HELPER = '''\
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def train(net):
    model = FSDP(net)
    model(torch.randn(2, 2)).sum().backward()


def save(model):
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), "m.pt")
'''


def test_helper_taking_the_model_as_a_parameter_is_kept():
    """``save(model)`` names no FSDP API, but the facts know ``model`` as FSDP-wrapped
    file-wide, so its rank-guarded ``state_dict()`` is reported: the slice keeps it."""
    text = _SAVE_HELPER + "".join(_FILLER.format(index=i) for i in range(12))
    piece = slice_text(text, ALL_RULES, 0, 1.0)
    assert piece is None or "def save(model):" in piece.text
    diagnostics = _same_both_ways(text)
    assert [(d.code, d.location.row) for d in diagnostics] == [("FSD104", 13)]


def _without_sites(monkeypatch):
    """The screen's verdicts without its sites, patched where the engine's screening looks
    the function up (``screen``'s own binding, called by ``Screening.live_and_sites``)."""
    import fsdp_lint.screen as screen

    real = screen._live_and_sites
    calls = []

    def without(summary, rules):
        calls.append(summary)
        return real(summary, rules)[0], None

    monkeypatch.setattr(screen, "_live_and_sites", without)
    return calls


@pytest.mark.parametrize("before,after", [(0, 40), (25, 25)])
def test_large_module_same_without_sites(before, after, monkeypatch):
    calls = _without_sites(monkeypatch)
    _same_both_ways(_large_test_module(before, after))
    assert calls


def test_slicing_is_on_by_default_for_large_files():
    import fsdp_lint.engine as engine
    from fsdp_lint.slicing import MIN_CHARS

    if engine._SLICE_MODE != "on":
        pytest.skip("FSDP_LINT_SLICE is set in the environment")
    assert engine._slice_from() == MIN_CHARS


def test_sites_keep_the_slice_small():
    """A large test module whose FSDP code is one class: the slice seeded by the screen's
    sites keeps that class and what it reads, not the unrelated tests around it."""
    from fsdp_lint.screen import live_rules_and_sites, parse

    plain = _FILLER.split("        if os.environ", 1)[0]  # no rank-guarded save: no candidate site
    text = _HEADER + "".join(plain.format(index=i) for i in range(30)) + _FSDP
    text += "".join(plain.format(index=i) for i in range(30, 60))
    tree = parse(text)
    live, sites = live_rules_and_sites(tree, ALL_RULES)
    assert sites
    piece = slice_text(text, live, 0, 1.0, tree, sites)
    assert piece is not None and len(piece.text) < 0.3 * len(text)
