"""fsdp-lint's own position pass agrees with libcst's PositionProvider on every node it
records, in every fixture (it relies on libcst's code generation internals)."""

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from fsdp_lint.positions import Positions, recorded_types
from fsdp_lint.source import line_starts

# every fixture with code in it (a package's empty ``__init__.py`` has no node to place)
FILES = sorted(p for p in (Path(__file__).resolve().parent.parent / "fixtures").rglob("*.py") if p.read_text().strip())


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_positions_match_libcst(path):
    text = path.read_text()
    text = text.replace("\n", "\r\n") if "fix" in path.parts else text  # CRLF too
    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    positions = Positions(module, line_starts(text))
    checked = 0
    for node, rng in expected.items():
        if type(node) in recorded_types() and not isinstance(node, cst.Module):
            assert positions(node) == rng, type(node).__name__
            checked += 1
    assert checked


def test_fallback_to_libcsts_provider_when_the_codegen_pass_breaks(monkeypatch):
    """positions.py reads libcst's code-generation internals; if they ever break, the
    public PositionProvider answers instead, with the same positions."""
    import fsdp_lint.positions as positions_module

    def broken(*args, **kwargs):
        raise AttributeError("libcst internals changed")

    path = next(p for p in FILES if p.name == "import_forms.py")
    text = path.read_text()
    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    monkeypatch.setattr(positions_module, "_offset_state", broken)
    positions = Positions(module, line_starts(text))
    calls = [node for node in expected if isinstance(node, cst.Call)]
    assert calls and all(positions(node) == expected[node] for node in calls)
