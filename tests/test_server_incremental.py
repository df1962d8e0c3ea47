"""The language server's incremental parse (``fsdp_lint.server.incremental``): after any
sequence of edits, the spliced module has the text's code, a text that does not parse
raises as a full parse does, and linting with it gives exactly the full parse's findings
and fixes (hypothesis: random edits of the fixtures and of a long FSDP module)."""

import sys
from pathlib import Path

import libcst
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsdp_lint.engine import lint_text
from fsdp_lint.rules import ALL_RULES
from fsdp_lint.server.incremental import ParseCache

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from server_latency import candidate  # noqa: E402  (the benchmark's 1,000-line module)

TEXTS = [path.read_text() for path in sorted(ROOT.glob("fixtures/*/*/*.py"))][::3] + [candidate(160)]
SNIPPETS = [
    "\n", "    ", "\t", "x", "(", ")", "[", "'''", '"', "#", ":", "\\\n", "\r\n", "  # noqa\n",
    "    y = 1\n", "def g():\n", "class C:\n    pass\n", "# comment\n", "\n\n",
    "with FSDP.summon_full_params(model):\n    pass\n",
    "    with FSDP.summon_full_params(model, writeback=False):\n        total = 1\n",
    "from __future__ import annotations\n", "if dist.get_rank() == 0:\n",
]


def findings(result):
    return [
        (d.code, d.location, d.end_location, d.message, d.statement_rows, d.fix and d.fix.edits)
        for d in result.diagnostics
    ]


def check(cache: ParseCache, text: str) -> None:
    try:
        expected = libcst.parse_module(text)
    except Exception as exc:  # noqa: BLE001
        with pytest.raises(type(exc)):
            cache.parse(text)
        return
    module = cache.parse(text)
    assert module.code == expected.code  # (libcst itself does not round-trip a few odd texts)
    assert len(module.body) == len(expected.body)
    assert findings(lint_text(text, "m.py", ALL_RULES, cache.parse)) == findings(lint_text(text, "m.py", ALL_RULES))


edits = st.lists(
    st.tuples(st.floats(0, 1), st.integers(0, 12), st.sampled_from(SNIPPETS)), min_size=1, max_size=4
)


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(TEXTS), steps=edits)
def test_spliced_parse_equals_a_full_parse(base, steps):
    cache = ParseCache()
    cache.parse(base)
    text = base
    for where, cut, insert in steps:
        at = int(where * len(text))
        text = text[:at] + insert + text[at + cut:]
        check(cache, text)


def test_typing_in_a_long_module_reuses_the_untouched_statements():
    text = candidate(1000)
    cache = ParseCache()
    module = cache.parse(text)
    at = text.index("lr: float = 3e-4", len(text) // 2)
    edited = text[:at] + "lr: float = 1e-5" + text[at + len("lr: float = 3e-4"):]
    spliced = cache.parse(edited)
    assert cache.spliced == 1
    assert spliced.code == edited
    changed = [i for i, (a, b) in enumerate(zip(module.body, spliced.body)) if a is not b]
    assert 1 <= len(changed) <= 2  # the edited function (and the statement before it)
    assert findings(lint_text(edited, "m.py", ALL_RULES, ParseCache().parse)) == findings(
        lint_text(edited, "m.py", ALL_RULES)
    )


def test_an_unclosed_bracket_raises_the_full_parse_error_and_recovers():
    text = candidate(200)
    cache = ParseCache()
    cache.parse(text)
    at = text.index("wrapped = FSDP(") + len("wrapped = FSDP(")
    broken = text[:at] + "(" + text[at:]
    with pytest.raises(libcst.ParserSyntaxError) as raised:
        cache.parse(broken)
    with pytest.raises(libcst.ParserSyntaxError) as full:
        libcst.parse_module(broken)
    assert (raised.value.raw_line, raised.value.raw_column) == (full.value.raw_line, full.value.raw_column)
    assert cache.parse(text).code == text
