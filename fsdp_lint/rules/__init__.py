"""All rules, one module each (``fsdNNN_<name>.py``); ``ALL_RULES`` is the registry, in code order."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Dict, Iterable, List, Optional, Sequence, Type

from fsdp_lint.rules.base import Rule
from fsdp_lint.versions import version_tuple


def _discover() -> List[Type[Rule]]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("fsd"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        found.extend(
            value
            for value in vars(module).values()
            if isinstance(value, type) and issubclass(value, Rule) and value is not Rule
            and value.__module__ == module.__name__
        )
    return sorted(found, key=lambda rule: rule.code)


ALL_RULES: List[Type[Rule]] = _discover()
BY_CODE: Dict[str, Type[Rule]] = {rule.code: rule for rule in ALL_RULES}
BY_NAME: Dict[str, Type[Rule]] = {rule.name: rule for rule in ALL_RULES}


# Checks the engine runs itself, not rule modules, on only when a selector names them (as
# ruff's RUF100): code -> name.  ``ALL`` and ``FSD`` never select them; their code, their
# name or a longer prefix (``FSD8``) does.
OPT_IN: Dict[str, str] = {"FSD800": "unused-noqa"}
OPT_IN_DOCS: Dict[str, str] = {
    "FSD800": """# FSD800 unused-noqa

Opt-in: select it by code or name (`--extend-select FSD800`, `extend-select = ["unused-noqa"]`);
`ALL` and `FSD` leave it off. Fix: safe.

## What it does
Reports the codes and rule names in a `# noqa: ...` list that suppressed no finding of this run
(ruff's RUF100), and `FSDnnn` codes no rule has.

## Why is this bad?
A stale `# noqa: FSD001` hides the next real finding on that statement.

## Example
```python
with FSDP.summon_full_params(model, writeback=False):  # noqa: FSD001
    ...
```

## Use instead
```python
with FSDP.summon_full_params(model, writeback=False):
    ...
```

## Fix safety
Safe: it removes only codes that suppressed nothing (the whole directive when none is left and no
text follows the list).

Other tools' codes (`F401`), a bare `# noqa` and codes of rules not selected in the run are left
alone; a file that did not parse is not judged.
""",
}


class UnknownRuleError(ValueError):
    pass


def _names_opt_in(selector: str, code: str) -> bool:
    key = selector.strip()
    return key.lower() == OPT_IN[code] or (len(key) > 3 and code.startswith(key.upper()))


def opt_in_selected(code: str, select: Sequence[str], ignore: Iterable[str]) -> bool:
    """Whether the opt-in check ``code`` runs under this selection (see ``OPT_IN``)."""
    if not any(_names_opt_in(selector, code) for selector in select):
        return False
    return not any(
        selector.strip().upper() in ("ALL", "FSD") or _names_opt_in(selector, code) for selector in ignore
    )


def lookup(code_or_name: str) -> Type[Rule]:
    key = code_or_name.strip()
    rule = BY_CODE.get(key.upper()) or BY_NAME.get(key.lower())
    if rule is None:
        raise UnknownRuleError(f"unknown rule {code_or_name!r}")
    return rule


def matching(selector: str) -> List[Type[Rule]]:
    """Rules matched by a code, a code prefix (``FSD``, ``FSD00``), a name or ``ALL``."""
    key = selector.strip()
    if key.upper() == "ALL":
        return list(ALL_RULES)
    if key.lower() in BY_NAME:
        return [BY_NAME[key.lower()]]
    hits = [rule for rule in ALL_RULES if rule.code.startswith(key.upper())]
    if not hits and any(_names_opt_in(key, code) for code in OPT_IN):
        return []  # an opt-in check only (FSD800): no rule module
    if not hits or not key.upper().startswith("FSD"):
        raise UnknownRuleError(f"unknown rule selector {selector!r}")
    return hits


def select_rules(select: Sequence[str] = (), ignore: Iterable[str] = ()) -> List[Type[Rule]]:
    chosen = {rule.code: rule for sel in (select or ["ALL"]) for rule in matching(sel)}
    for sel in ignore:
        for rule in matching(sel):
            chosen.pop(rule.code, None)
    return [chosen[code] for code in sorted(chosen)]


def for_target(rules: Iterable[Type[Rule]], target: Optional[str]) -> List[Type[Rule]]:
    """The rules as they run on code that targets torch ``target`` (None: not said): a rule
    whose hazard was fixed by then is off, and a rule with a path fixed later than the
    target carries the version (``Rule.for_target``)."""
    if not target:
        return list(rules)
    version = version_tuple(target)
    return [
        rule.for_target(target) for rule in rules
        if not (rule.hazard_fixed_in and version_tuple(rule.hazard_fixed_in) <= version)
    ]
