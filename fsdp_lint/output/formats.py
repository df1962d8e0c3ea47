"""The registry of output formats."""

from __future__ import annotations

from typing import Callable, Dict, List

from fsdp_lint.diagnostics import Diagnostic
from fsdp_lint.output import json_format, text

FORMATS: Dict[str, Callable[..., str]] = {
    "text": text.render,
    "json": json_format.render,
}


def render(fmt: str, diagnostics: List[Diagnostic], **context) -> str:
    return FORMATS[fmt](diagnostics, **context)
