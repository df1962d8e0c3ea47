"""torch versions as fsdp-lint compares them (target versions, fixed-in releases, the
verifier's installed torch): no ``packaging`` needed."""

from __future__ import annotations

import re
from typing import Tuple


def version_tuple(text: str) -> Tuple[int, ...]:
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)``; ``"2.1"`` -> ``(2, 1, 0)``; pre-release tags
    (``2.14.0a0``) count as the release."""
    parts = []
    for piece in text.split("+")[0].split(".")[:3]:
        match = re.match(r"\d+", piece)
        parts.append(int(match.group()) if match else 0)
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts)
