"""``facts.call_shape``: the facts and the ``ast`` gate read a call's arguments the same
way, so a fact written over a call's shape is evaluated alike by both stages."""

import ast

import libcst
import pytest

from fsdp_lint.facts.call_shape import UNKNOWN, of_ast, of_cst
from fsdp_lint.facts.collectives import on_subgroup

CALLS = [
    "f()",
    "f(a, b)",
    "f(a, *rest)",
    "f(*rest, a)",
    "f(**kwargs)",
    "f(a, group=None)",
    "f(a, group=g)",
    "f(a, process_group=None, group=g)",
    "f(x=True, y=False, z=0, w=1, v=-2, u=1.5, t='cpu', s=\"cpu:0\")",
    "f(x=1_000, y=0x10, z=-0.5, w=b'raw', v=f'{a}', u=None if a else 1)",
    "f(a, b, c, d=dict(e=1), **extra)",
    "obj.method(a, key=value.attr)",
]


def shape_tuple(shape):
    return shape.positional, shape.star, shape.double_star, shape.keywords


@pytest.mark.parametrize("text", CALLS)
def test_both_trees_give_the_same_shape(text):
    from_cst = of_cst(libcst.parse_expression(text))
    from_ast = of_ast(ast.parse(text, mode="eval").body)
    assert shape_tuple(from_cst) == shape_tuple(from_ast)


def test_literals_are_read_and_anything_else_is_unknown():
    shape = of_ast(ast.parse("f(a, *r, b, x=None, y=True, z=-2, s='cpu', n=name, c=g())", mode="eval").body)
    assert (shape.positional, shape.star, shape.double_star) == (2, True, False)
    assert shape.keywords == {"x": None, "y": True, "z": -2, "s": "cpu", "n": UNKNOWN, "c": UNKNOWN}
    assert shape.passes("x") and shape.passes("anything", index=1) and not shape.passes("anything", index=2)
    assert shape.literal("missing", default="absent") == "absent"


@pytest.mark.parametrize("text, name, restricted", [
    ("dist.all_reduce(t)", "all_reduce", False),
    ("dist.all_reduce(t, op, group)", "all_reduce", True),
    ("dist.all_reduce(t, group=None)", "all_reduce", False),
    ("dist.all_reduce(t, group=tp_group)", "all_reduce", True),
    ("dist.barrier()", "barrier", False),
    ("dist.barrier(group)", "barrier", True),
    ("dist.barrier(group=None)", "barrier", False),
    ("dist.broadcast(t, src=0, process_group=pg)", "broadcast", True),
])
def test_a_collective_on_a_subgroup_is_one_definition_for_both_trees(text, name, restricted):
    # the gate read its own copy of this fact once and took ``group=None`` for a subgroup
    # (in ``ast`` None is a constant, not a name), dropping a hang the facts report
    assert on_subgroup(of_cst(libcst.parse_expression(text)), name) is restricted
    assert on_subgroup(of_ast(ast.parse(text, mode="eval").body), name) is restricted
