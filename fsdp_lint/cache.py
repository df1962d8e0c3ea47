"""A per-file result cache: key = content hash + fsdp-lint version and code + the rules in force.

One cache per project, as ruff keeps it: ``.fsdp_lint_cache/`` in the folder of the nearest
``pyproject.toml`` above the working directory (the working directory when there is
none); ``--cache-dir`` or ``FSD_LINT_CACHE_DIR`` put it elsewhere, ``--no-cache`` turns it
off.  The folder holds a ``.gitignore`` with ``*`` so that git never picks it up, and a
``CACHEDIR.TAG`` for backup tools.  A corrupt or unreadable entry is a miss, never an
error; ``fsdp-lint clean`` removes the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import List, Optional, Sequence

from fsdp_lint import __version__
from fsdp_lint.code_identity import code_fingerprint
from fsdp_lint.diagnostics import Diagnostic, Edit, Fix, Location

DEFAULT_DIR = ".fsdp_lint_cache"
ENV_DIR = "FSD_LINT_CACHE_DIR"
GITIGNORE = "# Automatically created by fsdp-lint.\n*\n"
CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by fsdp-lint.\n"
    "# For information about cache directory tags, see https://bford.info/cachedir/\n"
)


def project_root(start: Optional[str] = None) -> str:
    """The folder of the nearest ``pyproject.toml`` at or above ``start`` (default: the
    working directory), or ``start`` itself when there is none."""
    start = os.path.abspath(start or os.getcwd())
    directory = start
    while True:
        if os.path.isfile(os.path.join(directory, "pyproject.toml")):
            return directory
        parent = os.path.dirname(directory)
        if parent == directory:
            return start
        directory = parent


def cache_dir(explicit: Optional[str] = None, config: Optional[str] = None) -> str:
    """Where the cache lives: ``--cache-dir``, else ``FSD_LINT_CACHE_DIR``, else
    ``.fsdp_lint_cache`` in the project root (the folder of ``--config`` when given)."""
    if explicit:
        return explicit
    if os.environ.get(ENV_DIR):
        return os.environ[ENV_DIR]
    root = os.path.dirname(os.path.abspath(config)) if config else project_root()
    return os.path.join(root, DEFAULT_DIR)


def _create_file(path: str, text: str) -> None:
    try:
        with open(path, "x", encoding="utf-8") as handle:
            handle.write(text)
    except FileExistsError:
        pass


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
        self.root = directory
        self.directory = os.path.join(directory, __version__)
        self._ready = False

    def _prepare(self) -> None:
        """Create the cache folder with its ``.gitignore`` and ``CACHEDIR.TAG`` (once)."""
        if self._ready:
            return
        os.makedirs(self.directory, exist_ok=True)
        _create_file(os.path.join(self.root, ".gitignore"), GITIGNORE)
        _create_file(os.path.join(self.root, "CACHEDIR.TAG"), CACHEDIR_TAG)
        self._ready = True

    @staticmethod
    def key(raw: bytes, rule_codes: Sequence[str]) -> str:
        digest = hashlib.sha256(raw)
        digest.update(("\0" + __version__ + "\0" + code_fingerprint() + "\0" + ",".join(rule_codes)).encode())
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
            self._prepare()
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump([_encode(d) for d in diagnostics], handle)
            os.replace(tmp, path)
        except OSError:
            pass  # a cache that cannot be written is only slower


def clean(directory: Optional[str] = None) -> bool:
    """Remove the cache; a folder that is not an fsdp-lint cache (no ``CACHEDIR.TAG`` of
    ours, another name) is left alone."""
    directory = directory or cache_dir()
    tag = os.path.join(directory, "CACHEDIR.TAG")
    ours = os.path.basename(os.path.normpath(directory)) == DEFAULT_DIR
    try:
        with open(tag, encoding="utf-8") as handle:
            ours = ours or "fsdp-lint" in handle.read()
    except OSError:
        pass
    if os.path.isdir(directory) and ours:
        shutil.rmtree(directory, ignore_errors=True)
        return True
    return False
