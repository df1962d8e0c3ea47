"""What a fix changes, as edited libcst nodes: the one place where fixes are built.

Rules describe a change with these functions (set or drop an argument of a call, call a
method on a receiver instead of a function, drop an import name) and hand the old and new
nodes to the engine as a ``FixProposal``; the engine turns them into minimal text edits
(``engine._fix_edits``) and ``fixer`` applies those to files.

Edits keep the call's own layout: a multi-line call gets the new argument on a line of
its own with the same indentation, comments stay beside the argument they annotate,
and a trailing comma stays a trailing comma.
"""

from __future__ import annotations

import functools
import re
from typing import Dict, Optional, Tuple

from fsdp_lint.lazy_libcst import cst



@functools.lru_cache(maxsize=64)
def _value(code: str) -> "cst.BaseExpression":
    """A parsed literal such as ``False``; nodes are immutable, so one serves every fix."""
    return cst.parse_expression(code)


def set_keyword(call: "cst.Call", keyword: str, value_code: str, position: Optional[int] = None) -> "cst.Call":
    """Return ``call`` with ``keyword=value_code``.

    ``position`` is the argument's index when it was passed positionally: the value is
    replaced in place.  An existing keyword argument has its value replaced.
    """
    args = list(call.args)
    for index, arg in enumerate(args):
        if (arg.keyword is not None and arg.keyword.value == keyword) or (
            position is not None and index == position and arg.keyword is None
        ):
            args[index] = arg.with_changes(value=_value(value_code))
            return call.with_changes(args=args)
    return call.with_changes(args=_append(args, call, keyword, value_code))


def _append(args, call: "cst.Call", keyword: str, value_code: str):
    new_arg = cst.Arg(
        keyword=cst.Name(keyword),
        value=_value(value_code),
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
        ),
    )
    if not args:
        return [new_arg]
    last = args[-1]
    comma = last.comma
    if isinstance(comma, cst.Comma) and isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace):
        # One argument per line with a trailing comma: the new argument gets its own line.
        closing = comma.whitespace_after
        inner = _inner_separator(args, call)
        last = last.with_changes(
            comma=comma.with_changes(
                whitespace_after=closing.with_changes(
                    last_line=inner.last_line, indent=inner.indent
                )
            )
        )
        new_arg = new_arg.with_changes(
            comma=cst.Comma(
                whitespace_before=cst.SimpleWhitespace(""),
                whitespace_after=cst.ParenthesizedWhitespace(
                    first_line=cst.TrailingWhitespace(),
                    empty_lines=[],
                    indent=closing.indent,
                    last_line=closing.last_line,
                ),
            )
        )
        return [*args[:-1], last, new_arg]
    if isinstance(comma, cst.Comma):
        # ``f(a, b,)`` on one line: keep the trailing comma after the new argument.
        last = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        new_arg = new_arg.with_changes(comma=comma.with_changes(whitespace_before=cst.SimpleWhitespace("")))
        return [*args[:-1], last, new_arg]
    # No trailing comma: ``f(a)`` -> ``f(a, kw=v)``; what followed the last argument
    # (a newline before the parenthesis, a comment) now follows the new one.
    new_arg = new_arg.with_changes(whitespace_after_arg=last.whitespace_after_arg)
    last = last.with_changes(
        comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
        whitespace_after_arg=cst.SimpleWhitespace(""),
    )
    return [*args[:-1], last, new_arg]


def _inner_separator(args, call: "cst.Call") -> "cst.ParenthesizedWhitespace":
    for arg in reversed(args[:-1]):
        ws = arg.comma.whitespace_after if isinstance(arg.comma, cst.Comma) else None
        if isinstance(ws, cst.ParenthesizedWhitespace):
            return ws
    ws = call.whitespace_before_args
    if isinstance(ws, cst.ParenthesizedWhitespace):
        return ws
    last_ws = args[-1].comma.whitespace_after
    return last_ws


def remove_argument(call: "cst.Call", index: int) -> "cst.Call":
    """Drop argument ``index``; the others keep their separators and comments.

    When the last argument goes, the new last one takes over what closed the list (a
    trailing comma, the line break before the parenthesis) but keeps its own comment; the
    removed argument's comment stays on a line of its own where the argument was (it
    described that argument, and nothing the user wrote is lost).
    """
    args = list(call.args)
    removed = args.pop(index)
    if not args or index != len(args):
        return call.with_changes(args=args)
    prev = args[-1]
    own = prev.comma.whitespace_after if isinstance(prev.comma, cst.Comma) else None
    closing = removed.comma.whitespace_after if isinstance(removed.comma, cst.Comma) else None
    if isinstance(own, cst.ParenthesizedWhitespace) and isinstance(closing, cst.ParenthesizedWhitespace):
        empty_lines = list(own.empty_lines) + list(closing.empty_lines)
        if closing.first_line.comment is not None:
            # the removed argument's comment stays, on its own line where the argument was
            empty_lines.append(
                cst.EmptyLine(indent=own.indent, whitespace=own.last_line, comment=closing.first_line.comment)
            )
        comma = prev.comma.with_changes(
            whitespace_after=own.with_changes(
                empty_lines=empty_lines, indent=closing.indent, last_line=closing.last_line
            )
        )
        args[-1] = prev.with_changes(comma=comma)
    elif isinstance(own, cst.ParenthesizedWhitespace) and own.first_line.comment is not None:
        pass  # keep the comma that carries a comment; a trailing comma is valid
    else:
        args[-1] = prev.with_changes(comma=removed.comma, whitespace_after_arg=removed.whitespace_after_arg)
    return call.with_changes(args=args)


def set_arguments(call: "cst.Call", bound: Dict[str, "cst.Arg"], values: Dict[str, str]) -> "cst.Call":
    """``call`` with each ``name=code`` of ``values``; ``bound`` maps parameter names to the
    call's arguments, so an argument passed by position is replaced where it stands and new
    keywords are appended."""
    new = call
    for name, code in values.items():
        arg = bound.get(name)
        position = list(call.args).index(arg) if arg is not None and arg.keyword is None else None
        new = set_keyword(new, name, code, position)
    return new


def drop_argument(call: "cst.Call", bound: Dict[str, "cst.Arg"], name: str) -> "cst.Call":
    """``call`` without parameter ``name``; a positional one followed by others becomes ``False``."""
    arg = bound[name]
    args = list(call.args)
    index = args.index(arg)
    if arg.keyword is None and index != len(args) - 1:
        return set_arguments(call, bound, {name: "False"})
    return remove_argument(call, index)


def method_call(call: "cst.Call", receiver: "cst.BaseExpression", method: str, args) -> "cst.Call":
    """``receiver.method(args)`` in place of ``call`` (``clip_grad_norm_(m.parameters(), 1.0)``
    becomes ``m.clip_grad_norm_(1.0)``); the last argument loses its trailing comma."""
    args = list(args)
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(func=cst.Attribute(value=receiver, attr=cst.Name(method)), args=args)


def drop_import_name(import_froms, module_code: str, name: str, uses: int = 1) -> Tuple:
    """The edits that remove ``from x import name`` once the fix has removed the name's
    ``uses`` uses (the name stays when it is mentioned anywhere else, comments included):
    ``((ImportFrom, smaller ImportFrom),)``, ``((statement, None),)`` to delete the line, or ()."""
    for node, statement in import_froms:
        if not isinstance(node.names, (list, tuple)) or not isinstance(statement, cst.SimpleStatementLine):
            continue
        mine = [a for a in node.names if (a.asname.name.value if a.asname else getattr(a.name, "value", None)) == name]
        if not mine or len(statement.body) != 1:
            continue
        if len(re.findall(rf"\b{re.escape(name)}\b", module_code)) != uses + 1:
            return ()
        rest = [a for a in node.names if a not in mine]
        if not rest:
            return ((statement, None),)
        rest[-1] = rest[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return ((node, node.with_changes(names=rest)),)
    return ()
