"""A per-file result cache: key = content hash + fsdp-lint version + the rules in force.

Entries live in ``.fsdp_lint_cache/`` under the working directory (``--cache-dir``).
A corrupt or unreadable entry is a miss, never an error; ``fsdp-lint clean`` removes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import List, Optional, Sequence

from fsdp_lint import __version__
from fsdp_lint.diagnostics import Diagnostic, Edit, Fix, Location

DEFAULT_DIR = ".fsdp_lint_cache"


def _loc(data) -> Location:
    return Location(int(data[0]), int(data[1]))


def _encode(d: Diagnostic) -> dict:
    fix = None
    if d.fix is not None:
        fix = [d.fix.applicability, d.fix.message,
               [[e.content, [e.location.row, e.location.column], [e.end_location.row, e.end_location.column],
                 e.start_offset, e.end_offset] for e in d.fix.edits]]
    return {"c": d.code, "n": d.name, "m": d.message, "l": [d.location.row, d.location.column],
            "e": [d.end_location.row, d.end_location.column], "f": fix, "u": d.url, "s": list(d.statement_rows)}


def _decode(data: dict, filename: str) -> Diagnostic:
    fix = None
    if data["f"] is not None:
        applicability, message, edits = data["f"]
        fix = Fix(applicability, message, tuple(
            Edit(content, _loc(start), _loc(end), int(a), int(b)) for content, start, end, a, b in edits))
    return Diagnostic(data["c"], data["n"], data["m"], filename, _loc(data["l"]), _loc(data["e"]), fix,
                      data["u"], tuple(data["s"]))


class Cache:
    def __init__(self, directory: str = DEFAULT_DIR):
        self.directory = os.path.join(directory, __version__)

    @staticmethod
    def key(raw: bytes, rule_codes: Sequence[str]) -> str:
        digest = hashlib.sha256(raw)
        digest.update(("\0" + __version__ + "\0" + ",".join(rule_codes)).encode())
        return digest.hexdigest()

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key + ".json")

    def get(self, key: str, filename: str) -> Optional[List[Diagnostic]]:
        try:
            with open(self._path(key), encoding="utf-8") as handle:
                data = json.load(handle)
            return [_decode(item, filename) for item in data]
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None

    def put(self, key: str, diagnostics: Sequence[Diagnostic]) -> None:
        path = self._path(key)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump([_encode(d) for d in diagnostics], handle)
            os.replace(tmp, path)
        except OSError:
            pass  # a cache that cannot be written is only slower


def clean(directory: str = DEFAULT_DIR) -> bool:
    if os.path.isdir(directory):
        shutil.rmtree(directory, ignore_errors=True)
        return True
    return False
