"""GitHub Actions workflow annotations: ``::error file=...,line=...,col=...,title=FSD001::message``."""

from __future__ import annotations

from typing import List

from fsdp_lint.diagnostics import Diagnostic


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render(diagnostics: List[Diagnostic], **_context) -> str:
    return "".join(
        f"::error file={_escape_property(d.filename)},line={d.location.row},col={d.location.column},"
        f"endLine={d.end_location.row},endColumn={d.end_location.column},"
        f"title={_escape_property(d.code)}::{_escape_data(f'{d.code} {d.message}')}\n"
        for d in diagnostics
    )
