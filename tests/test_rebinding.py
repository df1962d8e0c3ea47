"""facts.rebinding: a name rebound between a wrap and a later call no longer holds the wrap."""

import textwrap

import libcst as cst
import pytest

from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.index import index_module
from fsdp_lint.facts.rebinding import rebound_between


def _wrap_and_use(code, use_attr):
    facts = index_module(cst.parse_module(textwrap.dedent(code)))
    wrap = next(s for s in facts.calls if dotted_name(s.node.func) == "FSDP")
    use = next(s for s in facts.calls if s.attr == use_attr)
    return facts, wrap, use


@pytest.mark.parametrize(
    "middle,rebound",
    [
        ("pass", False),
        ("model = model.to(torch.device('cuda'))", False),  # a method of the same object
        ("model = torch.load(path)", True),
        ("model = other", True),
        ("other = torch.load(path)", False),  # another name
    ],
)
def test_rebound_between(middle, rebound):
    facts, wrap, use = _wrap_and_use(
        f"""
        def run(net, other, path):
            model = FSDP(net)
            {middle}
            model.half()
        """,
        "half",
    )
    assert rebound_between(facts, "model", wrap, use) is rebound


def test_rebinding_in_another_function_does_not_count():
    facts, wrap, use = _wrap_and_use(
        """
        def run(net):
            model = FSDP(net)

            def reload(path):
                model = torch.load(path)  # a local of reload(), not run()'s model
                return model

            model.half()
        """,
        "half",
    )
    assert rebound_between(facts, "model", wrap, use) is False
