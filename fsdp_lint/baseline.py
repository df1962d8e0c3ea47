"""``check --baseline FILE`` and ``--write-baseline FILE``: adopt fsdp-lint on a code base
that has findings today, and fail only on new ones.

A finding is recorded by its rule, its file (relative to the baseline file's folder, with
``/``) and the fingerprint of the flagged statement (``output.fingerprint``): moving the
statement to other lines keeps it matched; changing the statement, its rule or its file
makes it new.  Matching counts: a baseline that holds two findings of one rule on equal
statements in a file hides two, and a third one is reported.  Internal errors (FSD901) are
never recorded or hidden.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import List, Sequence, Tuple

from fsdp_lint.diagnostics import Diagnostic
from fsdp_lint.output.fingerprint import Texts

FORMAT = 1
NEVER = ("FSD901",)


class BaselineError(Exception):
    pass


def _file(path: str, baseline: str) -> str:
    base = os.path.dirname(os.path.abspath(baseline))
    return os.path.relpath(os.path.abspath(path), base).replace(os.sep, "/")


def _key(d: Diagnostic, baseline: str, texts: Texts) -> Tuple[str, str, str]:
    return d.code, _file(d.filename, baseline), texts.fingerprint(d)


def write(path: str, diagnostics: Sequence[Diagnostic], texts: Texts) -> int:
    """Record ``diagnostics`` in ``path`` (sorted, one entry per finding; ``line`` and
    ``message`` are for people and not matched).  Returns how many were recorded."""
    entries = []
    for d in diagnostics:
        if d.code in NEVER:
            continue
        code, file, fingerprint = _key(d, path, texts)
        entries.append({"code": code, "file": file, "fingerprint": fingerprint, "line": d.location.row,
                        "message": d.message})
    entries.sort(key=lambda e: (e["file"], e["line"], e["code"], e["fingerprint"]))
    data = {"fsdp-lint-baseline": FORMAT, "findings": entries}
    try:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2)
            handle.write("\n")
    except OSError as exc:
        raise BaselineError(f"cannot write --write-baseline {path}: {exc.strerror or exc}") from None
    return len(entries)


def load(path: str) -> Counter:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise BaselineError(f"cannot read --baseline {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise BaselineError(f"--baseline {path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("fsdp-lint-baseline") != FORMAT or not isinstance(
        data.get("findings"), list
    ):
        raise BaselineError(
            f"--baseline {path} is not an fsdp-lint baseline (write one with --write-baseline)"
        )
    counts: Counter = Counter()
    for entry in data["findings"]:
        try:
            counts[(entry["code"], entry["file"], entry["fingerprint"])] += 1
        except (KeyError, TypeError):
            raise BaselineError(f"--baseline {path}: an entry lacks code, file or fingerprint: {entry!r}") from None
    return counts


def new_findings(diagnostics: Sequence[Diagnostic], path: str, texts: Texts) -> Tuple[List[Diagnostic], int]:
    """The findings the baseline in ``path`` does not hold, and how many it held."""
    left = load(path)
    kept, hidden = [], 0
    for d in diagnostics:
        if d.code in NEVER:
            kept.append(d)
            continue
        key = _key(d, path, texts)
        if left[key] > 0:
            left[key] -= 1
            hidden += 1
        else:
            kept.append(d)
    return kept, hidden
