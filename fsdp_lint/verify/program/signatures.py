"""Exception texts that identify a rule's hazard when the user's job raises them.

Each pattern is PyTorch's own message (see /docs and the rules' "Why is this bad?").
"""

from __future__ import annotations

import re
from typing import Optional

EXCEPTION_RULES = (
    ("FSD004", re.compile(r"writeback=True and rank0_only=True is not supported")),
    ("FSD009", re.compile(r"with_grads=True, use_orig_params=\w+, offload_to_cpu=\w+ is not supported")),
    ("FSD010", re.compile(r"offload_to_cpu=True and NO_SHARD is not supported")),
    ("FSD008", re.compile(r"Cannot manually unshard parameters during forward/backward")),
    ("FSD003", re.compile(r"setStorage: sizes \[\d+\].*storage of size 0")),
    ("FSD007", re.compile(r"Expects tensor to be unsharded")),
    ("FSD103", re.compile(r"FSDP-managed module with parameter CPU offloading enabled has parameters on")),
)

# pytorch#188989's aftermath: the forward/backward after a summon that freed the full
# parameters' storage (FSD003) fails in FSDP's next all-gather
AFTER_FREED_STORAGE = re.compile(r"Output 0 of Split is a view and is being modified inplace")


def rule_of_exception(text: str) -> Optional[str]:
    for code, pattern in EXCEPTION_RULES:
        if pattern.search(text):
            return code
    return None
