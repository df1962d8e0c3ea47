"""SARIF 2.1.0: tool and rule metadata (help text, help URI), results with regions, and
fixes as ``fixes[].artifactChanges[].replacements``."""

from __future__ import annotations

import json
import os
from typing import List

from fsdp_lint import __version__
from fsdp_lint.diagnostics import ENGINE_CODES, Diagnostic
from fsdp_lint.rules import ALL_RULES

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _uri(path: str) -> str:
    return path.replace(os.sep, "/")


def _rules():
    rules = [
        {
            "id": rule.code,
            "name": rule.name,
            "shortDescription": {"text": rule.summary},
            "fullDescription": {"text": rule.section("What it does")},
            "help": {"text": rule.doc, "markdown": rule.doc},
            "helpUri": rule.url(),
            "properties": {"fix": rule.fix_availability, "hazard_fixed_in": rule.hazard_fixed_in},
        }
        for rule in ALL_RULES
    ]
    for code, name in ENGINE_CODES:
        rules.append({"id": code, "name": name, "shortDescription": {"text": name.replace("-", " ")}})
    return rules


def _region(start, end) -> dict:
    return {"startLine": start.row, "startColumn": start.column, "endLine": end.row, "endColumn": end.column}


def _result(d: Diagnostic, index: dict) -> dict:
    result = {
        "ruleId": d.code,
        "ruleIndex": index[d.code],
        "level": "error",
        "message": {"text": d.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": _uri(d.filename)},
                    "region": _region(d.location, d.end_location),
                }
            }
        ],
    }
    if d.fix is not None:
        result["fixes"] = [
            {
                "description": {"text": f"{d.fix.message} ({d.fix.applicability})"},
                "artifactChanges": [
                    {
                        "artifactLocation": {"uri": _uri(d.filename)},
                        "replacements": [
                            {
                                "deletedRegion": _region(e.location, e.end_location),
                                "insertedContent": {"text": e.content},
                            }
                            for e in d.fix.edits
                        ],
                    }
                ],
            }
        ]
    return result


def render(diagnostics: List[Diagnostic], **_context) -> str:
    rules = _rules()
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "fsdp-lint",
                        "version": __version__,
                        "informationUri": "https://github.com/fsdp-lint/fsdp-lint",
                        "rules": rules,
                    }
                },
                "results": [_result(d, index) for d in diagnostics],
            }
        ],
    }
    return json.dumps(log, indent=2) + "\n"
