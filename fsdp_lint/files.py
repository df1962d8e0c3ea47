"""Finding the files to lint: ``*.py``/``*.pyi`` under the given paths.

A file named on the command line is linted when it is Python: a ``.py``/``.pyi`` suffix,
or a ``#!`` line that runs python (a script without a suffix, as pre-commit passes
them); any other file named there is skipped with a notice.

Skips version-control, virtualenv, build and cache folders, what ``.gitignore`` files
ignore (the common subset of the syntax: globs, ``**``, anchored ``/x``, ``dir/``, ``!``),
and the user's excludes.  Symlink loops and broken links are skipped with a diagnostic
rather than followed forever.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from typing import Iterable, List, Sequence, Tuple

DEFAULT_EXCLUDES = (
    ".git", ".hg", ".svn", ".bzr", ".venv", "venv", ".env", "env", "__pypackages__",
    ".tox", ".nox", ".eggs", "build", "dist", "site-packages", "node_modules",
    "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".fsdp_lint_cache",
    ".hypothesis", ".ipynb_checkpoints",
)
SUFFIXES = (".py", ".pyi", ".ipynb")


def _glob_regex(pattern: str) -> "re.Pattern[str]":
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


@dataclass
class _IgnoreRule:
    base: str  # directory of the .gitignore, relative to the walk root ('' for root)
    regex: "re.Pattern[str]"
    anchored: bool
    dir_only: bool
    negate: bool

    def matches(self, rel: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        if self.base:
            if not rel.startswith(self.base + "/"):
                return False
            rel = rel[len(self.base) + 1 :]
        if self.anchored:
            return bool(self.regex.match(rel))
        return bool(self.regex.match(rel.rsplit("/", 1)[-1])) or bool(self.regex.match(rel))


def _read_gitignore(directory: str, base: str) -> List[_IgnoreRule]:
    path = os.path.join(directory, ".gitignore")
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    rules = []
    for line in lines:
        line = line.rstrip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = "/" in line
        line = line.lstrip("/")
        if not line:
            continue
        rules.append(_IgnoreRule(base, _glob_regex(line), anchored, dir_only, negate))
    return rules


def _ignored(rules: Sequence[_IgnoreRule], rel: str, is_dir: bool) -> bool:
    verdict = False
    for rule in rules:
        if rule.matches(rel, is_dir):
            verdict = not rule.negate
    return verdict


def matches_any(path: str, patterns: Sequence[str]) -> bool:
    """ruff-style exclude patterns: a glob on the path, or on any of its components."""
    norm = path.replace(os.sep, "/")
    parts = norm.split("/")
    for pattern in patterns:
        pattern = pattern.rstrip("/")
        if fnmatch.fnmatch(norm, pattern) or fnmatch.fnmatch(norm, "*/" + pattern):
            return True
        if any(fnmatch.fnmatch(part, pattern) for part in parts):
            return True
    return False


NOT_PYTHON = "not a Python file (.py, .pyi, .ipynb or a python #! script)"


def is_python_file(path: str) -> bool:
    """A ``.py``/``.pyi`` file, or one whose first line is a ``#!`` line naming python."""
    if path.endswith(SUFFIXES):
        return True
    try:
        with open(path, "rb") as handle:
            first = handle.readline(256)
    except OSError:
        return True  # unreadable: the read reports it with a diagnostic
    return first.startswith(b"#!") and b"python" in first


@dataclass
class Discovery:
    files: List[str] = field(default_factory=list)
    skipped: List[Tuple[str, str]] = field(default_factory=list)  # (path, why)
    problems: List[Tuple[str, str]] = field(default_factory=list)  # (path, what is wrong)
    not_python: List[str] = field(default_factory=list)  # named explicitly, but not Python


def discover(
    paths: Iterable[str],
    excludes: Sequence[str] = (),
    force_exclude: bool = False,
    respect_gitignore: bool = True,
) -> Discovery:
    found = Discovery()
    seen = set()
    for root in paths:
        if os.path.isdir(root):
            _walk(root, excludes, respect_gitignore, found, seen)
        elif os.path.lexists(root):
            if force_exclude and matches_any(root, excludes):
                found.skipped.append((root, "excluded"))
                continue
            if os.path.exists(root) and not is_python_file(root):
                found.skipped.append((root, NOT_PYTHON))
                found.not_python.append(root)
                continue
            found.files.append(root)  # named explicitly (a broken link gets its diagnostic)
        else:
            found.problems.append((root, "no such file or directory"))
    return found


def _walk(root: str, excludes, respect_gitignore, found: Discovery, seen) -> None:
    stack: List[Tuple[str, str, List[_IgnoreRule]]] = [(root, "", [])]
    while stack:
        directory, rel_dir, inherited = stack.pop()
        try:
            real = os.path.realpath(directory)
            if real in seen:
                found.skipped.append((directory, "symlink loop or already visited"))
                continue
            seen.add(real)
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            found.problems.append((directory, f"cannot list directory: {exc.strerror or exc}"))
            continue
        ignore_rules = inherited + (_read_gitignore(directory, rel_dir) if respect_gitignore else [])
        subdirs = []
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            path = os.path.join(directory, entry.name)
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                if entry.name in DEFAULT_EXCLUDES:
                    found.skipped.append((path, "default exclude"))
                elif matches_any(path, excludes):
                    found.skipped.append((path, "excluded"))
                elif _ignored(ignore_rules, rel, True):
                    found.skipped.append((path, "ignored by .gitignore"))
                else:
                    subdirs.append((path, rel, ignore_rules))
                continue
            if not entry.name.endswith(SUFFIXES):
                continue
            if entry.is_symlink() and not os.path.exists(path):
                found.problems.append((path, "broken symbolic link"))
            elif matches_any(path, excludes):
                found.skipped.append((path, "excluded"))
            elif _ignored(ignore_rules, rel, False):
                found.skipped.append((path, "ignored by .gitignore"))
            else:
                found.files.append(path)
        stack.extend(reversed(subdirs))
