"""Reading a rank's log: which line says why the program failed, which lines are Python
warnings (never evidence of a hazard on their own).  Used by the launcher (an outcome's
description), the judge and the records, which need nothing else of the launcher."""

from __future__ import annotations

import re

# The line that says why a rank failed: an exception, a fatal error.
_FAILURE = re.compile(
    r"^(\[rank\d+\]:\s*)?([A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Failure)\b(:.*)?$|Fatal Python error:.*)"
)
# Lines that never explain a failure (Python warnings and their source lines, teardown notes).
_NOISE = re.compile(
    r"(\b\w*Warning\b|^\s*warnings\.warn\(|destroy_process_group\(\) was not called|^\s*File \"|"
    r"^\s*\^+\s*$|^\s*~+\s*$)"
)


def is_warning_line(line: str) -> bool:
    """A line of a Python warning: never evidence of a hazard on its own."""
    return bool(re.search(r"\b\w*Warning\b(:|\s*\()", line)) or line.lstrip().startswith("warnings.warn(")


def failure_line(text: str) -> str:
    """The line of a log that says why the program failed: its last exception line, else
    its last line that is not a warning or a teardown note."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if _FAILURE.match(line) and not is_warning_line(line):
            return line
    for line in reversed(lines):
        if not _NOISE.search(line):
            return line
    return ""
