"""The Rule base class: a rule's identity, documentation, examples and check.

Every rule lives in its own module under ``fsdp_lint/rules/`` and carries:
- ``code`` (``FSD`` + 3 digits) and a kebab-case ``name``, accepted wherever a code is;
- ``doc``: ruff's sections (What it does / Why is this bad? / Example / Use instead /
  Known problems / Fix safety / References); the code blocks under Example and Use instead
  are the rule's examples, and the test suite checks they behave as documented; Known
  problems says what the rule assumes when the file does not show enough;
- ``markers``: a text pre-filter; a file is parsed for this rule only when, for every
  group, it contains at least one of the group's strings;
- ``seed_names``: identifiers that make a statement a seed of the slice (``slicing``)
  besides the markers;
- ``marker_needs``: a first-group marker that counts only when a pattern also matches
  the text (``save_model`` gathers only where the file configures FSDP): what the rule's
  facts need besides the name, so a file without it could not be flagged for it;
- ``hazard_fixed_in``: the torch version whose runtime no longer shows the hazard (the
  rule is off for a target torch version from it on);
- ``paths_fixed_in``: the same for one path of a rule (path name -> release), with the
  opposite default: such a path reports only when the target torch version is set and
  older (``for_target``; ``reports_path`` in ``check``).  For hazards fixed long ago,
  where flagging code that runs on a current torch would be a false alarm;
- ``paths_on_by_default``: paths of ``paths_fixed_in`` fixed so recently that most code
  still runs on a torch with the hazard: they report when no target is set, and stop
  from their release on.

A rule's runtime scenario is declared on the verifier's side, keyed by the rule's code
(``fsdp_lint/scenarios/registry.py``): rules never import the verifier.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Dict, FrozenSet, List, Optional, Tuple

from fsdp_lint.versions import version_tuple

if TYPE_CHECKING:  # rule metadata must load without libcst (fast start-up)
    import libcst as cst

    from fsdp_lint.facts.model import ModuleFacts

FIX_ALWAYS = "always"
FIX_SOMETIMES = "sometimes"
FIX_NEVER = "never"

DOCS_URL = "https://github.com/fsdp-lint/fsdp-lint/blob/main/docs/rules/{code}.md"


@dataclass
class FixProposal:
    """Replace ``old`` (a node of the parsed module) with ``new``."""

    applicability: str  # "safe" or "unsafe"
    message: str
    old: cst.CSTNode
    new: cst.CSTNode
    # further replacements applied with this one (an import the fix leaves unused);
    # a None replacement deletes the statement's lines
    also: Tuple[Tuple[cst.CSTNode, Optional[cst.CSTNode]], ...] = ()


class Reporter:
    """Handed to ``Rule.check``; collects findings and answers position questions."""

    def __init__(self, positions: Callable[[cst.CSTNode], object]):
        self._positions = positions
        self.findings: List[Tuple[cst.CSTNode, str, Optional[FixProposal], Optional[cst.CSTNode]]] = []

    def __call__(self, node, message, fix=None, statement=None):
        self.findings.append((node, message, fix, statement))

    def row(self, node: cst.CSTNode) -> int:
        return self._positions(node).start.line


_CODE_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _word_char(char: str) -> bool:
    return char == "_" or char.isalnum()


def _has_word(text: str, word: str) -> bool:
    """``word`` occurs in ``text`` with no identifier character on either side (``str.find``
    runs at C speed; a regular expression with look-arounds was measured slower)."""
    at = text.find(word)
    while at != -1:
        end = at + len(word)
        if (at == 0 or not _word_char(text[at - 1])) and (end == len(text) or not _word_char(text[end])):
            return True
        at = text.find(word, at + 1)
    return False


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    fix_availability: ClassVar[str] = FIX_NEVER
    markers: ClassVar[Tuple[Tuple[str, ...], ...]] = ()
    marker_needs: ClassVar[Dict[str, "re.Pattern[str]"]] = {}
    # identifiers that make a statement hold one of the rule's sites for the slice of a large
    # file, besides its markers (FSD104: every ``torch.distributed`` collective)
    seed_names: ClassVar[FrozenSet[str]] = frozenset()
    # markers of ``marker_needs`` whose need (the text shows FSDP) a launch configuration
    # that turns FSDP on meets as well (``fsdp_lint.launch``)
    needs_met_by_launch: ClassVar[FrozenSet[str]] = frozenset()
    # marker groups that make the rule wanted, instead of ``markers``, in a file a launch
    # configuration starts with FSDP (the file itself then need not name FSDP: FSD101's
    # ``accelerator.prepare`` under an ``accelerate launch`` FSDP1 config)
    launch_markers: ClassVar[Tuple[Tuple[str, ...], ...]] = ()
    # what a project helper the file calls does (``facts.helper_summary.kinds_of``) that
    # makes the rule wanted whatever the markers say: a module sharded by a helper of
    # another file is sharded for every rule that reads the file's FSDP2 wraps, and one a
    # helper returns wrapped in FSDP1 is wrapped for every rule that reads the FSDP1 wraps
    project_kinds: ClassVar[FrozenSet[str]] = frozenset({"shards", "wraps"})
    # What can make the rule fire, declared for the gate in front of libcst: ``screen.py``
    # derives the rule's condition from it by one mechanism (``screen.declared``) when the
    # rule has no older hand-written one.  ``gate_facts``: facts of the file that every
    # finding needs ("fsdp2_wrap": a ``fully_shard`` the file shows, directly or through a
    # helper of the file or the project; "fsdp_wrap": an FSDP1 or FSDP2 wrap; "fsdp1_model":
    # an FSDP1 wrap, or a name annotated ``FullyShardedDataParallel``; "fsdp1_passed": that, or a
    # project file that names FSDP imports this one (it may pass an FSDP1 module to one of its
    # functions: ``Origins.external``); "fsdp2_passed": the same for "fsdp2_wrap" (a module
    # other files pass sharded by ``fully_shard``); "cpu_offload_named":
    # the code names ``CPUOffload``/``CPUOffloadPolicy`` or calls a project helper that offloads;
    # "fsdp_program": the file imports ``torch.distributed.fsdp``, wraps a module, or an
    # ``accelerate launch`` FSDP configuration starts it and it imports accelerate);
    # ``gate_calls``: names of functions or methods one of whose calls every finding needs
    # (a dotted name such as "torch.save": a call that may be that qualified name; a plain
    # one: any call of a function or method of that name); ``gate_helper_kinds``: or a call
    # of a helper of the file or the project that does one of these
    # (``facts.helper_summary.kinds_of``: "saves", "collective", ...);
    # ``gate_torch_only``: those calls must be torch's own (as far as the gate can tell:
    # ``summon_full_params`` on an FSDP1 name), not a same-named method of another library;
    # ``gate_class_methods``: or a call of a method (``x.name(...)``) that a class of the file
    # defines; ``gate_bare``: such a call standing alone as a statement (its value unused);
    # ``gate_formats``: or a field of an f-string with a format spec and no conversion
    # (``f"{norm:.4f}"``: a value formatted without a call);
    # ``gate_arguments``: parameters of that call one of which every finding needs passed
    # (name -> its index among the call's positional arguments as written: by keyword, by
    # position, or in a ``**`` dict where the file names it); ``gate_names``: identifiers
    # one of which every finding needs in the file's code; ``gate_receiver``: "wrapped",
    # the call's receiver (``m`` of ``m.half()``) is a name an FSDP wrap of the file binds or
    # (FSDP2) takes, in the call's own function (an attribute such as ``self.model``:
    # anywhere); ``gate_anchors``: the call stands in a function (or the module-level code)
    # that also does one of these ("process_group": ``init_process_group``; "fsdp_api": calls
    # a ``torch.distributed.fsdp`` API; "fsdp_wrap": wraps or shards a module, also through a
    # helper; "launched_prepare": ``prepare`` in a file an ``accelerate launch`` FSDP
    # configuration starts; "collective": a ``torch.distributed`` collective such as
    # ``dist.barrier()``; "backward": a ``.backward()`` call); ``gate_sites``: every finding
    # stands in the function (or the module-level code) of one of those calls, so the calls
    # seed the slice of a large file, whose units hold whole functions and methods (else the
    # slice keeps its whole closure).
    # Each must be a necessary condition of ``check``: tests/test_gate.py compares every
    # fixture and generated module with the gate on and off.
    gate_facts: ClassVar[Tuple[str, ...]] = ()
    gate_calls: ClassVar[FrozenSet[str]] = frozenset()
    gate_torch_only: ClassVar[bool] = False
    gate_bare: ClassVar[bool] = False
    gate_formats: ClassVar[bool] = False
    gate_arguments: ClassVar[Dict[str, int]] = {}
    gate_names: ClassVar[FrozenSet[str]] = frozenset()
    gate_receiver: ClassVar[str] = ""
    gate_helper_kinds: ClassVar[FrozenSet[str]] = frozenset()
    gate_class_methods: ClassVar[bool] = False
    gate_anchors: ClassVar[Tuple[str, ...]] = ()
    gate_sites: ClassVar[bool] = False
    # how many calls apart a site and the caller whose context decides it may stand (a
    # summon in a helper of the training loop's ``train_step``): the slice of a large file
    # keeps callers that many levels deep for the rule (``slicing``)
    caller_levels: ClassVar[int] = 1
    hazard_fixed_in: ClassVar[Optional[str]] = None
    paths_fixed_in: ClassVar[Dict[str, str]] = {}
    paths_on_by_default: ClassVar[FrozenSet[str]] = frozenset()
    target_torch: ClassVar[Optional[Tuple[int, ...]]] = None  # set by ``for_target``
    doc: ClassVar[str] = ""

    def check(self, facts: ModuleFacts, report: Reporter) -> None:  # pragma: no cover
        raise NotImplementedError

    # -- the target torch version -----------------------------------------------------
    @classmethod
    def for_target(cls, target: Optional[str]) -> type:
        """This rule as it runs for code that targets torch ``target`` (None: not said).
        Only a rule with ``paths_fixed_in`` depends on it: it gets a subclass carrying the
        version (``Settings`` drops such classes before it is pickled)."""
        if not cls.paths_fixed_in or not target:
            return cls
        return type(cls.__name__, (cls,), {"target_torch": version_tuple(target), "__module__": cls.__module__})

    @classmethod
    def reports_path(cls, path: str) -> bool:
        """Whether the path named in ``paths_fixed_in`` reports: the target torch is older
        than the release that fixed it; with no target set, whether it is on by default."""
        if cls.target_torch is None:
            return path in cls.paths_on_by_default
        return cls.target_torch < version_tuple(cls.paths_fixed_in[path])

    @classmethod
    def cache_tag(cls) -> str:
        """What identifies this rule's findings in the cache: its code, and the target
        torch version where it depends on it."""
        if cls.target_torch is None:
            return cls.code
        return f"{cls.code}@{'.'.join(map(str, cls.target_torch))}"

    # -- documentation --------------------------------------------------------------
    @classmethod
    def url(cls) -> str:
        return DOCS_URL.format(code=cls.code)

    @classmethod
    def section(cls, title: str) -> str:
        match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", cls.doc, re.S | re.M)
        return match.group(1).strip() if match else ""

    @classmethod
    def examples(cls, title: str) -> List[str]:
        return [block for block in _CODE_BLOCK.findall(cls.section(title))]

    @classmethod
    def wanted(cls, text: str, launched_fsdp: bool = False) -> bool:
        """Every marker group occurs in ``text``, and one of the first group's markers as a
        whole word (``load_state``, not ``load_state_dict``): the compiled-names stage
        (``screen.ast_confirms``) needs it as an identifier, and an identifier in code is a
        whole word of the text, so this drops only files that stage would drop, before
        anything is parsed.  A marker with an entry in ``marker_needs`` counts only where its
        pattern matches too, or, for ``needs_met_by_launch``, where the file is launched with
        FSDP (``launched_fsdp``), where also ``launch_markers`` all occur instead."""
        if launched_fsdp and cls.launch_markers and all(
                any(marker in text for marker in group) for group in cls.launch_markers):
            return True
        if not all(any(marker in text for marker in group) for group in cls.markers):
            return False
        if not cls.markers:
            return True
        for marker in cls.markers[0]:
            if _has_word(text, marker):
                need = cls.marker_needs.get(marker)
                if need is None or need.search(text) or (launched_fsdp and marker in cls.needs_met_by_launch):
                    return True
        return False
