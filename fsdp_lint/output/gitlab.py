"""GitLab Code Quality report (ruff's ``--format gitlab``): a JSON array of issues with
``description``, ``check_name``, ``fingerprint`` (unique per issue), ``severity`` and
``location`` (``path`` and ``lines.begin``/``lines.end``).

Paths are relative to ``$CI_PROJECT_DIR`` when it is set (GitLab's checkout), else as
reported.  Fingerprints hash the rule, the path and the flagged statement's text (not its
line), so an issue keeps its identity when code above it moves; two findings on the same
statement get a running number in the hash."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Dict, List

from fsdp_lint.diagnostics import Diagnostic
from fsdp_lint.output.fingerprint import Texts

ERROR_CODES = ("FSD900", "FSD901", "FSD902")


def _path(filename: str) -> str:
    base = os.environ.get("CI_PROJECT_DIR")
    if base:
        rel = os.path.relpath(os.path.abspath(filename), os.path.abspath(base))
        if not rel.startswith(".."):
            filename = rel
    return filename.replace(os.sep, "/")


def issues(diagnostics: List[Diagnostic], texts: Texts = None) -> List[dict]:
    texts = texts or Texts()
    seen: Dict[str, int] = {}
    out = []
    for d in diagnostics:
        path = _path(d.filename)
        base = f"{path}\0{texts.fingerprint(d)}\0{d.code}"
        seen[base] = seen.get(base, 0) + 1
        digest = hashlib.sha256(f"{base}\0{seen[base]}".encode("utf-8", "surrogatepass")).hexdigest()
        out.append(
            {
                "description": f"{d.code} {d.message}",
                "check_name": d.code,
                "fingerprint": digest,
                "severity": "critical" if d.code in ERROR_CODES else "major",
                "location": {"path": path, "lines": {"begin": d.location.row, "end": d.end_location.row}},
            }
        )
    return out


def render(diagnostics: List[Diagnostic], texts: Texts = None, **_context) -> str:
    return json.dumps(issues(diagnostics, texts), indent=2) + "\n"
