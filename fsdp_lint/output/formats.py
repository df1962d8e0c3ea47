"""The registry of output formats."""

from __future__ import annotations

from typing import Callable, Dict, List

from fsdp_lint.diagnostics import Diagnostic
from fsdp_lint.output import full, github, gitlab, json_format, junit, sarif, text

FORMATS: Dict[str, Callable[..., str]] = {
    "text": text.render,
    "full": full.render,
    "json": json_format.render,
    "sarif": sarif.render,
    "github": github.render,
    "gitlab": gitlab.render,
    "junit": junit.render,
}


def render(fmt: str, diagnostics: List[Diagnostic], **context) -> str:
    return FORMATS[fmt](diagnostics, **context)
