"""``fsdp-lint rule CODE``: a rule's page, with what the verifier's records say about the
installed torch (its package metadata: ``fsdp_lint.docs``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from fsdp_lint.cli.rules import rule_json
from fsdp_lint.docs import framework_forms, installed_torch, on_your_torch, render_for_user
from fsdp_lint.rules import OPT_IN, OPT_IN_DOCS, UnknownRuleError, lookup


def run(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="fsdp-lint rule", description="Print a rule's documentation.")
    parser.add_argument("rule", help="code (FSD001) or name (summon-writeback-with-cpu-offload)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
    for code, name in OPT_IN.items():  # the engine's opt-in checks (FSD800): a page, no verifier
        if args.rule.strip().upper() == code or args.rule.strip().lower() == name:
            if args.format == "json":
                print(json.dumps({"code": code, "name": name, "opt_in": True, "doc": OPT_IN_DOCS[code]}, indent=2))
            else:
                print(OPT_IN_DOCS[code], end="")
            return 0
    try:
        rule = lookup(args.rule)
    except UnknownRuleError as exc:
        print(f"fsdp-lint: error: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        data = rule_json(rule, with_doc=True)
        data["installed_torch"] = installed_torch()
        data["on_installed_torch"] = on_your_torch(rule, data["installed_torch"])
        data["framework_forms"] = framework_forms(rule)
        print(json.dumps(data, indent=2))
    else:
        print(render_for_user(rule), end="")
    return 0
