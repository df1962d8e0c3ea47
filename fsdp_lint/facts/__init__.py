"""Facts about one module, computed once in a single libcst traversal and shared by all rules.

- ``index``: the traversal itself; it fills a ``ModuleFacts``.
- ``model``: the records the traversal produces (call sites, loops, guards, with-blocks).
- ``imports``: which dotted names resolve to which qualified names (import aliases).
- ``torch_api``: the qualified names of the torch APIs the rules care about.
- ``summon``: binding a ``summon_full_params`` call's arguments to the real signature.
- ``offload``: whether the module keeps FSDP parameters on the CPU.
"""

from fsdp_lint.facts.model import ModuleFacts  # noqa: F401
