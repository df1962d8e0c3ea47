"""Start a new rule: ``python scripts/new_rule.py FSD109 my-rule-name``.

Creates, ready for the rule's logic (ruff's ``add_rule`` idea):
- ``fsdp_lint/rules/fsd109_my_rule_name.py``: the rule class with code, name, markers and a doc
  in ruff's sections (What it does / Why is this bad? / Example / Use instead / Known
  problems / Fix safety / References) whose examples the tests run, and an empty ``check``;
- ``fixtures/FSD109/{fires,quiet,fix}/`` with ``fires/expected.txt``;
- ``fsdp_lint/scenarios/fsd109_my_rule_name.py``: a scenario program stub using ``_harness``,
  and its entry in ``fsdp_lint/scenarios/registry.py``;
- the README's rule-table row.
Every TODO left in them makes the test suite fail until the rule is written.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

RULE = '''"""{code} {name}."""

from __future__ import annotations

from fsdp_lint.rules.base import FIX_NEVER, Rule


class {cls}(Rule):
    code = "{code}"
    name = "{name}"
    summary = "TODO: what it flags, in one line"
    fix_availability = FIX_NEVER
    markers = (("TODO_identifier",),)
    # What every finding needs, for the gate in front of libcst (``Rule.gate_facts``,
    # ``gate_calls``, ``gate_arguments``, ``gate_names``, ``gate_sites``: see ``Rule``;
    # without them the rule runs on every file its markers let through):
    # gate_facts = ("fsdp2_wrap",)
    # gate_calls = frozenset({{"TODO_method"}})
    # gate_sites = True  # the findings stand at those calls
    doc = """\\
## What it does
TODO

## Why is this bad?
TODO: the runtime signature (exception text, corruption, hang, wasted all-gathers) and
where it was measured.

## Example
```python
TODO = "code that fires"
```

## Use instead
```python
TODO = "code that does not fire"
```

## Known problems
TODO: what the rule assumes when the file does not show enough (a model whose origin it
cannot follow, configuration set in another file or by a launcher, helpers of other modules,
rank tests or loops it does not recognise, the target torch version): where it stays quiet,
where it assumes the worst, and how to make it see (`[tool.fsdp-lint] launch`, `# noqa`).

## Fix safety
No automatic fix.

## References
- TODO
"""

    def check(self, facts, report):
        raise NotImplementedError("TODO: {code}'s check")
'''

SCENARIO = '''"""{code} scenario: the pattern {name} flags, as a small FSDP program (TODO)."""

import torch

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    net = _harness.mlp()
    raise NotImplementedError("TODO: {code}'s scenario; report with _harness.report(hazard=..., detail=...)")
    _harness.finish()


if __name__ == "__main__":
    main()
'''


def _class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))


def create(root: Path, code: str, name: str) -> list:
    if not re.fullmatch(r"FSD\d{3}", code) or not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name):
        raise ValueError("usage: new_rule.py FSDNNN kebab-case-name")
    stem = f"{code.lower()}_{name.replace('-', '_')}"
    rule = root / "fsdp_lint" / "rules" / f"{stem}.py"
    scenario = root / "fsdp_lint" / "scenarios" / f"{stem}.py"
    fixtures = root / "fixtures" / code
    if rule.exists() or fixtures.exists():
        raise FileExistsError(f"{code} exists already")
    rule.write_text(RULE.format(code=code, name=name, cls=_class_name(name)))
    scenario.write_text(SCENARIO.format(code=code, name=name))
    for folder in ("fires", "quiet", "fix"):
        (fixtures / folder).mkdir(parents=True)
    (fixtures / "fires" / "expected.txt").write_text("")
    registry = root / "fsdp_lint" / "scenarios" / "registry.py"
    text = registry.read_text()
    entry = f'    "{code}": Scenario(\n        program="{stem}.py",\n        hazard="TODO",\n    ),\n'
    end = text.index("\n}\n", text.index("SCENARIOS"))
    registry.write_text(text[: end + 1] + entry + text[end + 1 :])
    readme = root / "README.md"
    lines = readme.read_text().splitlines(keepends=True)
    last_row = max(i for i, line in enumerate(lines) if re.match(r"\| FSD\d{3} \|", line))
    lines.insert(last_row + 1, f"| {code} | `{name}` | none | TODO: what it flags |\n")
    readme.write_text("".join(lines))
    return [rule, scenario, fixtures, registry, readme]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("code")
    parser.add_argument("name")
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    args = parser.parse_args(argv)
    try:
        made = create(Path(args.root), args.code, args.name)
    except (ValueError, FileExistsError) as exc:
        print(f"new_rule.py: {exc}", file=sys.stderr)
        return 2
    for path in made:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
