"""What the editor may set, and the lint settings built from it and ``[tool.fsdp-lint]``.

The client sends settings in ``initializationOptions`` and ``workspace/didChangeConfiguration``
(flat, or under an ``"fsdp-lint"`` key), in camelCase as editors do:

    select, extendSelect, ignore   rule codes, prefixes or names (as the command line's)
    unsafeFixes                    true: "fix all" applies unsafe fixes too
    configuration                  a pyproject.toml to use instead of searching up from each file
    debounceMs                     wait this long after the last change before linting (default 100)

Like command-line options, they win over the ``pyproject.toml`` of each file (found and
validated by ``fsdp_lint.config``; the layering is ``fsdp_lint.check.Settings``'s).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

from fsdp_lint.check import Overrides, Settings
from fsdp_lint.config import ConfigFinder
from fsdp_lint.rules import UnknownRuleError, matching

DEFAULT_DEBOUNCE_MS = 100
SECTION_KEYS = ("fsdp-lint", "fsdpLint", "fsdp_lint")


@dataclass
class ClientSettings:
    # select, extendSelect, ignore, unsafeFixes: the command line's options, in the same shape
    overrides: Overrides = field(default_factory=Overrides)
    configuration: Optional[str] = None
    debounce_ms: int = DEFAULT_DEBOUNCE_MS

    def lint_settings(self) -> Settings:
        """Fresh settings: a new ``ConfigFinder`` reads every ``pyproject.toml`` again.
        Raises ``ConfigError`` for an invalid explicit configuration file."""
        return Settings(finder=ConfigFinder(self.configuration), overrides=self.overrides, long_lived=True)


def _selectors(raw: Any, key: str, problems: List[str]) -> Optional[List[str]]:
    if raw is None:
        return None
    if isinstance(raw, str):
        raw = [part.strip() for part in raw.split(",") if part.strip()]
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        problems.append(f"{key}: must be a list of rule codes, prefixes or names")
        return None
    good = []
    for item in raw:
        try:
            matching(item)
        except UnknownRuleError as exc:
            problems.append(f"{key}: {exc}")
            continue
        good.append(item)
    return good


def parse_client_settings(raw: Any) -> Tuple[ClientSettings, List[str]]:
    """The settings in ``raw`` and what was wrong with it (wrong entries are left out)."""
    settings = ClientSettings()
    problems: List[str] = []
    if not isinstance(raw, dict):
        return settings, problems
    for key in SECTION_KEYS:
        if isinstance(raw.get(key), dict):
            raw = raw[key]
            break
    overrides = settings.overrides
    select = _selectors(raw.get("select"), "select", problems)
    overrides.select = select if select else None
    overrides.extend_select = _selectors(raw.get("extendSelect"), "extendSelect", problems) or []
    overrides.ignore = _selectors(raw.get("ignore"), "ignore", problems) or []
    unsafe = raw.get("unsafeFixes")
    if unsafe is not None:
        if isinstance(unsafe, bool):
            overrides.unsafe_fixes = unsafe
        else:
            problems.append("unsafeFixes: must be true or false")
    configuration = raw.get("configuration")
    if configuration is not None:
        if isinstance(configuration, str) and configuration:
            settings.configuration = configuration
        else:
            problems.append("configuration: must be the path of a pyproject.toml")
    debounce = raw.get("debounceMs")
    if debounce is not None:
        if isinstance(debounce, (int, float)) and not isinstance(debounce, bool) and 0 <= debounce <= 10_000:
            settings.debounce_ms = int(debounce)
        else:
            problems.append("debounceMs: must be a number of milliseconds from 0 to 10000")
    return settings, problems
