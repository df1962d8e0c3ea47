"""``[tool.fsdp-lint]`` in ``pyproject.toml``: found by walking up from each file's folder
(the nearest ``pyproject.toml`` that has the table wins), validated before use.

Keys: select, extend-select, ignore, per-file-ignores, exclude, extend-exclude,
unsafe-fixes, target-torch-version, launch (how the project's scripts are started:
``"fsdp"``, or ``{ framework = "accelerate", config = "configs/fsdp.yaml" }``,
``{ framework = "torchrun" }``; ``fsdp_lint.launch.launch_from_setting``).  Command-line
options win over the file.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from fsdp_lint.rules import UnknownRuleError, matching

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TABLE = "fsdp-lint"
LIST_KEYS = ("select", "extend-select", "ignore", "exclude", "extend-exclude")
KEYS = LIST_KEYS + ("per-file-ignores", "unsafe-fixes", "target-torch-version", "launch")
LAUNCH_FRAMEWORKS = ("accelerate", "torchrun", "python")
LAUNCH_KEYS = ("framework", "config", "fsdp")
LAUNCH_RULE = ('must be "fsdp" or a table such as { framework = "accelerate", config = "configs/fsdp.yaml" } '
               f"(framework: {', '.join(LAUNCH_FRAMEWORKS)}; keys: {', '.join(LAUNCH_KEYS)})")
_VERSION = re.compile(r"^\d+(\.\d+){0,2}$")


class ConfigError(Exception):
    pass


@dataclass
class Config:
    path: Optional[str] = None  # the pyproject.toml, None for defaults
    root: str = "."
    select: Optional[List[str]] = None
    extend_select: List[str] = field(default_factory=list)
    ignore: List[str] = field(default_factory=list)
    per_file_ignores: Dict[str, List[str]] = field(default_factory=dict)
    exclude: Optional[List[str]] = None
    extend_exclude: List[str] = field(default_factory=list)
    unsafe_fixes: Optional[bool] = None
    target_torch_version: Optional[str] = None
    launch: Optional[object] = None  # "fsdp" or the launch table, validated

    def ignores_for(self, path: str) -> List[str]:
        rel = os.path.relpath(os.path.abspath(path), self.root).replace(os.sep, "/")
        name = os.path.basename(path)
        codes: List[str] = []
        for pattern, ignored in self.per_file_ignores.items():
            if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(name, pattern):
                codes.extend(ignored)
        return codes


VERSION_RULE = 'must be a version string such as "2.13" or "2.14.1"'


def check_version(value) -> str:
    """A torch version as ``target-torch-version`` takes it; ValueError says what is allowed."""
    if not isinstance(value, str) or not _VERSION.match(value):
        raise ValueError(f"{value!r}: {VERSION_RULE}" if isinstance(value, str) else VERSION_RULE)
    return value


def _fail(path: str, key: str, what: str) -> ConfigError:
    return ConfigError(f"{path}: [tool.{TABLE}] {key}: {what}")


def _validate_selectors(path: str, key: str, values) -> List[str]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise _fail(path, key, "must be a list of strings (rule codes, prefixes or names)")
    for value in values:
        try:
            matching(value)
        except UnknownRuleError:
            raise _fail(path, key, f"unknown rule selector {value!r}; allowed: codes (FSD001), prefixes (FSD0), names, ALL") from None
    return values


def _validate_launch(path: str, value):
    if value == "fsdp":
        return value
    if not isinstance(value, dict) or not value:
        raise _fail(path, "launch", LAUNCH_RULE)
    for key, item in value.items():
        if key not in LAUNCH_KEYS:
            raise _fail(path, f"launch.{key}", f"unknown key; {LAUNCH_RULE}")
        if key == "framework" and item not in LAUNCH_FRAMEWORKS:
            raise _fail(path, "launch.framework", f"must be one of {', '.join(LAUNCH_FRAMEWORKS)}")
        if key == "config" and (not isinstance(item, str) or not item):
            raise _fail(path, "launch.config", "must be a path relative to the pyproject.toml's folder")
        if key == "fsdp" and not isinstance(item, bool):
            raise _fail(path, "launch.fsdp", "must be true or false")
    if "framework" not in value:
        raise _fail(path, "launch", f"needs framework; {LAUNCH_RULE}")
    if "config" in value and value["framework"] != "accelerate":
        raise _fail(path, "launch.config", "is an accelerate config: only with framework = \"accelerate\"")
    return dict(value)


def parse_table(path: str, table: dict, root: str) -> Config:
    config = Config(path=path, root=root)
    for key, value in table.items():
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise _fail(path, key, f"unknown key; {hint}allowed: {', '.join(KEYS)}")
        if key in ("select", "extend-select", "ignore"):
            setattr(config, key.replace("-", "_"), _validate_selectors(path, key, value))
        elif key in ("exclude", "extend-exclude"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise _fail(path, key, "must be a list of glob patterns")
            setattr(config, key.replace("-", "_"), value)
        elif key == "per-file-ignores":
            if not isinstance(value, dict):
                raise _fail(path, key, 'must be a table of glob = ["FSD001", ...]')
            for pattern, codes in value.items():
                _validate_selectors(path, f"{key}.{pattern!r}", codes)
            config.per_file_ignores = dict(value)
        elif key == "unsafe-fixes":
            if not isinstance(value, bool):
                raise _fail(path, key, "must be true or false")
            config.unsafe_fixes = value
        elif key == "launch":
            config.launch = _validate_launch(path, value)
        elif key == "target-torch-version":
            try:
                config.target_torch_version = check_version(value)
            except ValueError:
                raise _fail(path, key, VERSION_RULE) from None
    return config


def misnamed_tables(path: str, data: dict) -> List[str]:
    """Warnings for tables that look meant for fsdp-lint but are not read
    (``[tool.fsdp_lint]``, ``[tool.fsdplint]``, a top-level ``[fsdp-lint]``)."""
    found = []
    tool = data.get("tool")
    for prefix, table in (("tool.", tool if isinstance(tool, dict) else {}), ("", data)):
        for name in table:
            if prefix and name == TABLE:
                continue
            if difflib.get_close_matches(name.lower(), [TABLE], n=1, cutoff=0.8):
                found.append(f"{path}: [{prefix}{name}] is not read: the table is named [tool.{TABLE}]")
    return found


def load(path: str, notes: Optional[List[str]] = None) -> Optional[Config]:
    """The config in ``path`` (a pyproject.toml), or None when it has no [tool.fsdp-lint] table.
    Warnings (a misnamed table) are added to ``notes``."""
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    if notes is not None:
        notes.extend(misnamed_tables(path, data))
    tool = data.get("tool", {})
    table = tool.get(TABLE) if isinstance(tool, dict) else None
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.{TABLE}] must be a table")
    return parse_table(path, table, os.path.dirname(os.path.abspath(path)))


class ConfigFinder:
    """Nearest config for a folder, cached per folder (one walk per folder per run)."""

    def __init__(self, explicit: Optional[str] = None):
        self._cache: Dict[str, Config] = {}
        self.notes: List[str] = []  # warnings met so far (a misnamed table), for the caller to show
        self._shown = 0
        self._explicit = load(explicit, self.notes) if explicit else None
        if explicit and self._explicit is None:
            self._explicit = Config(path=explicit, root=os.path.dirname(os.path.abspath(explicit)))

    def new_notes(self) -> List[str]:
        """The warnings not asked for yet (each is shown once)."""
        fresh = self.notes[self._shown :]
        self._shown = len(self.notes)
        return fresh

    def for_directory(self, directory: str) -> Config:
        if self._explicit is not None:
            return self._explicit
        directory = os.path.abspath(directory)
        if directory in self._cache:
            return self._cache[directory]
        candidate = os.path.join(directory, "pyproject.toml")
        config = load(candidate, self.notes) if os.path.isfile(candidate) else None
        if config is None:
            parent = os.path.dirname(directory)
            config = Config(root=directory) if parent == directory else self.for_directory(parent)
        self._cache[directory] = config
        return config

    def for_file(self, path: str) -> Config:
        return self.for_directory(os.path.dirname(os.path.abspath(path)))
