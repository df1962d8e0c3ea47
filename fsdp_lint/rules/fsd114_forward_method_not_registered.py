"""FSD114 forward-method-not-registered."""

from __future__ import annotations

from fsdp_lint.rules.base import FIX_NEVER, Rule


class ForwardMethodNotRegistered(Rule):
    code = "FSD114"
    name = "forward-method-not-registered"
    summary = "TODO: what it flags, in one line"
    fix_availability = FIX_NEVER
    markers = (("TODO_identifier",),)
    doc = """\
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

## Fix safety
No automatic fix.

## References
- TODO
"""

    def check(self, facts, report):
        raise NotImplementedError("TODO: FSD114's check")
