"""Fix safety properties on hundreds of generated modules (hypothesis).

Modules are assembled from FSDP snippets with random import aliases, offload settings,
call layouts (multi-line, trailing commas, comments inside the call, positional
arguments), read-only or mutating blocks, loops, noqa comments, newline styles, a BOM
and a latin-1 coding declaration.
"""

import difflib
import re

import libcst
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsdp_lint.diagnostics import SAFE
from fsdp_lint.engine import lint_text
from fsdp_lint.fixer import fix_text
from fsdp_lint.rules import ALL_RULES, BY_CODE
from fsdp_lint.source import decode_source

IMPORTS = [
    ("from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, CPUOffload", "FSDP", "CPUOffload"),
    ("import torch.distributed.fsdp as fsdp", "fsdp.FullyShardedDataParallel", "fsdp.CPUOffload"),
    ("import torch", "torch.distributed.fsdp.FullyShardedDataParallel", "torch.distributed.fsdp.CPUOffload"),
]
OFFLOAD = ["cpu_offload={off}(offload_params=True)", "cpu_offload={off}(True)", 'device_id="cpu"', "use_orig_params=True", ""]
ARGS = ["writeback=True", "writeback=False", "rank0_only=True", "offload_to_cpu=True", "recurse=False", "with_grads=True"]
BODIES = ["print(p.norm())", "p.data.add_(1)", "model.weight[0] = 1", "pass", "loss.backward()", "total += 1"]
COMMENTS = ["", "  # keep me", "  # noqa", "  # noqa: FSD001"]


@st.composite
def call(draw, cls):
    args = ["model"] + draw(st.lists(st.sampled_from(ARGS), unique_by=lambda a: a.split("=")[0], max_size=3))
    layout = draw(st.sampled_from(["flat", "lines", "lines-comma", "flat-comma", "commented"]))
    if layout == "flat":
        inner = ", ".join(args)
    elif layout == "flat-comma":
        inner = ", ".join(args) + ","
    elif layout == "lines":
        inner = "\n" + ",\n".join("        " + a for a in args) + "\n    "
    elif layout == "lines-comma":
        inner = "\n" + "".join("        " + a + ",\n" for a in args) + "    "
    else:
        inner = "\n" + "".join(f"        {a},  # about {a.split('=')[0]}\n" for a in args) + "    "
    return f"{cls}.summon_full_params({inner})"


@st.composite
def module(draw):
    header, cls, off = draw(st.sampled_from(IMPORTS))
    lines = [header, f"model = {cls}(net, {draw(st.sampled_from(OFFLOAD)).format(off=off)})", ""]
    for index in range(draw(st.integers(1, 4))):
        summon = draw(call(cls))
        comment = draw(st.sampled_from(COMMENTS))
        body = draw(st.sampled_from(BODIES))
        form = draw(st.sampled_from(["with", "loop", "bare", "assigned"]))
        lines.append(f"def f{index}(model, loader, opt):")
        if form == "with":
            lines += [f"    with {summon}:{comment}", f"        {body}"]
        elif form == "loop":
            lines += ["    for batch in loader:", "        opt.step()",
                      f"        with {summon.replace(chr(10), chr(10) + '    ')}:{comment}", f"            {body}"]
        elif form == "bare":
            lines += [f"    {summon}{comment}"]
        else:
            lines += [f"    ctx = {summon}{comment}", "    with ctx:", f"        {body}"]
        lines.append("")
    return "\n".join(lines) + "\n"


def comments(text):
    return sorted(re.findall(r"#[^\r\n]*", text))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(module(), st.booleans())
def test_fix_properties(text, unsafe):
    found = lint_text(text, "gen.py", ALL_RULES).diagnostics  # linting never raises
    fixed = fix_text(text, "gen.py", ALL_RULES, unsafe).text
    libcst.parse_module(fixed)  # the output always parses
    assert fix_text(fixed, "gen.py", ALL_RULES, unsafe).text == fixed  # fix(fix(x)) == fix(x)
    assert comments(fixed) == comments(text)  # every comment kept
    old, new = text.splitlines(), fixed.splitlines()
    for line in old:
        if line.endswith("# noqa"):
            assert line in new, line  # suppressed lines are never changed
        elif "# noqa: FSD001" in line:
            only = fix_text(text, "gen.py", [BY_CODE["FSD001"]], unsafe).text.splitlines()
            assert line in only, line  # ... by the rule the comment names
    if not unsafe:
        fixable = [d for d in found if d.fix is not None and d.fix.applicability == SAFE]
        rows = set()
        for d in fixable:
            rows.update(range(d.location.row, d.end_location.row + 1))
        matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
        for tag, a0, a1, _, _ in matcher.get_opcodes():
            if tag != "equal":
                changed = set(range(a0 + 1, max(a1, a0 + 1) + 1))
                assert changed & rows, (tag, old[a0:a1])  # only the fixed calls' lines differ
        if not fixable:
            assert fixed == text


@settings(max_examples=100, deadline=None)
@given(module(), st.sampled_from(["\n", "\r\n", "\r"]), st.booleans(), st.booleans())
def test_bytes_outside_the_edits_are_kept(text, newline, bom, latin1):
    body = text.replace("\n", newline)
    if latin1:
        raw = ("# -*- coding: latin-1 -*-" + newline + "# caf\xe9" + newline + body).encode("latin-1")
    else:
        raw = (b"\xef\xbb\xbf" if bom else b"") + ("# caf\xe9" + newline + body).encode("utf-8")
    source = decode_source(raw, "gen.py")
    fixed = fix_text(source.text, "gen.py", ALL_RULES, True).text
    out = source.encode(fixed)
    assert out.startswith(raw[:3]) if bom and not latin1 else True
    assert decode_source(out, "gen.py").text == fixed  # round-trips in the file's own encoding
    others = {"\n", "\r\n", "\r"} - {newline}
    stripped = fixed.replace(newline, "")
    for other in others:
        if other != "\n" or newline != "\r\n":
            assert other not in stripped  # no foreign line break introduced


@given(st.text(max_size=200))
@settings(max_examples=200, deadline=None)
def test_linting_arbitrary_text_never_raises(text):
    snippet = "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, CPUOffload\n" + text
    for diagnostic in lint_text(snippet, "x.py", ALL_RULES).diagnostics:
        assert diagnostic.code.startswith("FSD")
    fixed = fix_text(snippet, "x.py", ALL_RULES, True).text
    if fixed != snippet:
        libcst.parse_module(fixed)
