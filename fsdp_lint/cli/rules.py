"""``fsdp-lint rules``: every rule, as a table or JSON."""

from __future__ import annotations

import argparse
import json
from typing import Sequence

from fsdp_lint.rules import ALL_RULES

RULES_LEGEND = """
Fix column:
  fix    every finding of the rule comes with a fix
  fix*   some findings come with a fix (where the rule can tell what the code meant)
  (none) the rule has no fix; its documentation says what to change
Fixes marked safe are applied by `--fix`; unsafe ones need `--fix --unsafe-fixes`.
`fsdp-lint rule CODE` says which fixes a rule has and when they are unsafe.
"""


def rule_json(rule, with_doc: bool = False) -> dict:
    data = {
        "code": rule.code,
        "name": rule.name,
        "summary": rule.summary,
        "fix": rule.fix_availability,
        "hazard_fixed_in": rule.hazard_fixed_in,
        "paths_fixed_in": dict(rule.paths_fixed_in),
        "paths_on_by_default": sorted(rule.paths_on_by_default),
        "url": rule.url(),
    }
    if with_doc:
        data["explanation"] = rule.doc
    return data


def run(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="fsdp-lint rules", description="List all rules.")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
    if args.format == "json":
        print(json.dumps([rule_json(rule) for rule in ALL_RULES], indent=2))
        return 0
    print(f"{'Code':<8}{'Name':<46}{'Fix':<6}Summary")
    for rule in ALL_RULES:
        fix = {"always": "fix", "sometimes": "fix*", "never": ""}[rule.fix_availability]
        print(f"{rule.code}  {rule.name:<45} {fix:<5} {rule.summary}")
    print(RULES_LEGEND, end="")
    return 0
