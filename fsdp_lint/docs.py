"""Rule documentation as users read it: ``fsdp-lint rule FSD001`` and ``docs/rules/*.md``.

A rule's page is its own ruff-style text plus the verifier's results, rendered from the
machine-written records in ``fsdp_lint/verify/records/`` (``fsdp-lint verify --record``).
One command renders every page and ``docs/verification.md`` from the records::

    python -m fsdp_lint.docs docs

and a test fails when the committed docs differ from what the records give.  ``fsdp-lint
rule`` adds what only the user's machine knows: the installed torch (package metadata, torch
is not imported) and whether the records show the hazard on that version.
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path
from typing import List, Optional

from fsdp_lint.rules import ALL_RULES
from fsdp_lint.scenarios.registry import forms, variants
from fsdp_lint.verify.records import form_of, load
from fsdp_lint.verify.scenario import installed_versions, label, spec_matches
from fsdp_lint.versions import version_tuple

FIX_WORDS = {"always": "Fix is always available.", "sometimes": "Fix is sometimes available.", "never": "No automatic fix."}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _where(record: dict) -> str:
    nodes = f", {record['nnodes']} nodes" if record.get("nnodes", 1) > 1 else ""
    count = record["world_size"]
    return f"{record['backend']}/{record['device']}, {count} rank{'' if count == 1 else 's'}{nodes}"


def _machine(record: dict) -> str:
    names = record.get("device_names") or []
    if names:
        counts: dict = {}
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        return ", ".join(f"{n} x {name}" for name, n in counts.items())
    return record.get("machine", "")


def _source(record: dict) -> str:
    if record["provenance"] == "imported":
        return f"imported, {record['date'][:10]}"
    commit = (record["fsdp_lint"].get("commit") or "")[:9]
    dirty = "+changes" if record["fsdp_lint"].get("dirty") else ""
    return f"{record['date'][:10]}, fsdp-lint {record['fsdp_lint']['version']} {commit}{dirty}".strip()


def _what(result: dict) -> str:
    if result["verdict"] == "SKIPPED":
        return result["reason"]
    if result["verdict"] in ("CONFIRMED",):
        return result["flagged"]
    return f"{result['flagged']} ({result['reason']})" if result["reason"] else result["flagged"]


def _rows(code: str, records: List[dict], form: Optional[str] = None):
    """(record, result) of ``code``: of one form, or of every form (``form=None``)."""
    for record in records:
        for result in record["results"]:
            if result["code"] == code and (form is None or form_of(result) == form):
                yield record, result


def _versions(record: dict, code: str, form: str) -> str:
    """``2.11.0+cu130``, and for a framework form ``2.11.0+cu130, accelerate 1.15.0`` (what the
    record's probe found of the form's packages)."""
    text = str(record["torch"]["version"])
    found = record.get("packages") or {}
    names = {name for s in variants(code) if s.form == form for name in s.packages}
    for name in sorted(names):
        if found.get(name):
            text += f", {name} {found[name]}"
    return text


def verification_table(rule, records: Optional[List[dict]] = None, form: str = "") -> str:
    """The rule's results in every record, for one scenario form (``""``: plain torch)."""
    records = load() if records is None else records
    rows = [
        f"| {_versions(record, rule.code, form)} | {_where(record)} | {_cell(_machine(record))} | {result['verdict']} "
        f"| {_cell(_what(result))} | {_source(record)} |"
        for record, result in _rows(rule.code, records, form)
    ]
    if not rows:
        return "Not run by the verifier yet.\n"
    head = (
        "| torch | backend/device | machine | verdict | what the flagged program did | record |\n"
        "|---|---|---|---|---|---|"
    )
    return head + "\n" + "\n".join(rows) + "\n"


def scenario_lines(rule, form: str = "") -> str:
    lines = []
    for scenario in variants(rule.code):
        if scenario.form != form:
            continue
        needs = [f"devices: {', '.join(scenario.devices)}"]
        if scenario.min_ranks > 1:
            needs.append(f"at least {scenario.min_ranks} ranks")
        if scenario.real_cpu_offload:
            needs.append("real CPU parameter offload (CUDA)")
        needs += [f"torch >= {v} on {d}" for d, v in scenario.torch_min.items()]
        needs += [f"{name}{spec}" for name, spec in scenario.packages.items()]
        fixed = f"; hazard fixed in torch {scenario.hazard_fixed_in}" if scenario.hazard_fixed_in else ""
        lines.append(
            f"- `fsdp_lint/scenarios/{scenario.program}` ({'; '.join(needs)}{fixed}): {scenario.hazard}."
        )
    return "\n".join(lines) + "\n" if lines else "No runtime scenario.\n"


def not_on_lines(rule, form: str) -> str:
    """Why a form cannot run on a device (``not_on``), where it says more than the devices."""
    lines = []
    for scenario in variants(rule.code):
        if scenario.form == form:
            lines += [f"  Not on {device}: {why}." for device, why in scenario.not_on.items()]
    return "".join(line + "\n" for line in lines)


def render_rule(rule, records: Optional[List[dict]] = None) -> str:
    """The rule's page: its text, then each scenario form (the plain torch one first, then one
    section per framework form, ``FSD104 (accelerate)``) with its results."""
    records = load() if records is None else records
    known = f"\nHazard fixed in torch {rule.hazard_fixed_in}.\n" if rule.hazard_fixed_in else ""
    known += "".join(
        f"\nThe {path} path's hazard was fixed in torch {release}: it reports "
        + ("unless `target-torch-version` is " + release + " or later"
           if path in rule.paths_on_by_default else f"only with `target-torch-version` below {release}")
        + ".\n"
        for path, release in rule.paths_fixed_in.items()
    )
    page = (
        f"# {rule.name} ({rule.code})\n\n{FIX_WORDS[rule.fix_availability]}\n{known}\n{rule.doc}\n"
        f"## Verified (`fsdp-lint verify {rule.code}`)\n"
        f"{scenario_lines(rule)}\n"
        f"{verification_table(rule, records)}"
    )
    for form in forms(rule.code):
        if form:
            page += (
                f"\n### {label(rule.code, form)}\n"
                f"{scenario_lines(rule, form)}{not_on_lines(rule, form)}\n"
                f"{verification_table(rule, records, form)}"
            )
    return page


def installed_torch() -> Optional[str]:
    """The installed torch's version from its package metadata (torch is not imported)."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def on_your_torch(rule, version: Optional[str], records: Optional[List[dict]] = None) -> str:
    """Whether the records show this rule's hazard on the torch the user has."""
    records = load() if records is None else records
    if version is None:
        return (
            "torch is not installed here (no package metadata); the linter does not need it, "
            f"`fsdp-lint verify {rule.code}` does.\n"
        )
    same = [
        (record, result) for record, result in _rows(rule.code, records)
        if record["torch"]["version"] and version_tuple(record["torch"]["version"]) == version_tuple(version)
    ]
    text = f"Installed: torch {version} (package metadata).\n"
    if not same:
        seen = sorted({r["torch"]["version"] for r, _ in _rows(rule.code, records) if r["torch"]["version"]})
        return text + (
            f"No record for this torch version (recorded: {', '.join(seen) or 'none'}); "
            f"`fsdp-lint verify {rule.code}` checks it on your machine.\n"
        )
    lines = [
        f"- {label(rule.code, form_of(result))}: {result['verdict']} on {_where(record)} ({_source(record)})"
        for record, result in same
    ]
    reproduced = any(result["verdict"] == "CONFIRMED" for _, result in same)
    verdict = "reproduced" if reproduced else "not reproduced"
    return text + f"The hazard was {verdict} on this version:\n" + "\n".join(lines) + "\n" + _paths_on(rule, version)


def _paths_on(rule, version: str) -> str:
    """For a rule with paths fixed in some release (``paths_fixed_in``): which of its paths a
    verdict on ``version`` speaks for, so that a CONFIRMED is not read as confirming a path
    that was measured clean there."""
    if not rule.paths_fixed_in:
        return ""
    fixed = {path: release for path, release in rule.paths_fixed_in.items()
             if version_tuple(version) >= version_tuple(release)}
    if not fixed:
        return ""
    lines = []
    for path, release in sorted(fixed.items()):
        default = " (reported by default, when no `target-torch-version` is set)" if path in rule.paths_on_by_default \
            else ""
        lines.append(f"- the `{path}` path{default} is fixed from torch {release} and was measured clean (the "
                     "versions are in the doc above): the verdict does not confirm it on this version "
                     f"(`target-torch-version` {release} or later turns it off)")
    open_paths = "the rule's other paths" if len(fixed) == len(rule.paths_fixed_in) else \
        "the paths not listed here"
    return (f"Which paths: a CONFIRMED here is for {open_paths}, not these:\n" + "\n".join(lines) + "\n")


def framework_forms(rule, installed: Optional[dict] = None) -> List[dict]:
    """The rule's framework forms (those that need a framework's package; a form of torch
    alone, FSD104's ``load``, is not one) with what each needs and what is installed here
    (package metadata; nothing is imported)."""
    out = []
    for form in forms(rule.code):
        needs: dict = {}
        for scenario in variants(rule.code):
            if scenario.form == form:
                needs.update(scenario.packages)
        if not form or not needs:
            continue
        found = installed if installed is not None else installed_versions(needs)
        out.append({"form": form, "label": label(rule.code, form), "packages": needs,
                    "installed": {name: found.get(name) for name in needs}})
    return out


def on_your_frameworks(rule, installed: Optional[dict] = None) -> str:
    """Which of the frameworks the rule's forms need are installed here, and whether
    ``fsdp-lint verify`` can run those forms with them."""
    lines = []
    for item in framework_forms(rule, installed):
        for name, spec in item["packages"].items():
            have = item["installed"][name]
            if have is None:
                state = "not installed (`pip install '.[verify-frameworks]'` from the clone); verify skips it"
            elif spec_matches(have, spec):
                state = f"installed: {name} {have}"
            else:
                state = f"found {name} {have}; verify skips it"
            lines.append(f"- {item['label']} needs {name}{spec}: {state}")
    return "".join(line + "\n" for line in lines)


def render_for_user(rule) -> str:
    """``fsdp-lint rule``: the page, then the user's own torch (and frameworks)."""
    text = render_rule(rule) + "\n## On your torch\n" + on_your_torch(rule, installed_torch())
    frameworks = on_your_frameworks(rule)
    return text + ("\n## Frameworks here\n" + frameworks if frameworks else "")


INTRO = """# Runtime verification

Each table below is one run of `fsdp-lint verify --record DIR`, rendered from its record in
`fsdp_lint/verify/records/` (`python -m fsdp_lint.docs docs`; never edited by hand). A
record holds the fsdp-lint version and commit, a hash of every scenario file, the torch
version and build, the backend, devices, ranks and date, and every rank's exit and evidence.
CPU runs use gloo; GPU runs use NCCL with NVLink multicast off. `fsdp-lint verify`
reproduces them on your own torch and hardware; `fsdp-lint verify --python PATH --python
PATH` compares torch versions.

Some rules have several scenario *forms*: the plain torch program, and the same hazard
reached through a framework's own call, each run and judged on its own and shown as its own
row (`FSD104 (accelerate)`). A framework form needs that framework, pinned to the version
the rule's documentation cites (`pip install '.[verify-frameworks]'` from the clone); where the
target interpreter lacks it, or where the framework cannot use FSDP on the device, the form
is SKIPPED with the reason. A record names the framework versions its interpreter had.

Records marked *imported* come from runs made before records existed: they hold only the
verdict table of that run (no commit, no scenario hashes, no per-rank entries), and their
scenarios and judge were older than today's.

## Making records

```bash
fsdp-lint verify --record fsdp_lint/verify/records                     # CPU, gloo, 2 ranks
fsdp-lint verify --device cuda --record fsdp_lint/verify/records       # 2 GPUs, NCCL
fsdp-lint verify --device cuda --nproc 1 --record fsdp_lint/verify/records  # 1 GPU
fsdp-lint verify --python venv-a/bin/python --python venv-b/bin/python --record fsdp_lint/verify/records
python -m fsdp_lint.docs docs                                           # then render the docs
```

What a scenario needs (devices, ranks, real CPU offload, torch version, frameworks) is declared in
`fsdp_lint/scenarios/registry.py`; where it is not met the verdict is SKIPPED with the
reason, decided before anything runs. Several nodes: run the same command on every node with
`--nnodes N --node-rank R --rdzv-endpoint HOST:PORT --rdzv-id ID` (torchrun's c10d
rendezvous; each program uses its own port, counting up from PORT); each node judges the
ranks that ran on it.

## Torch versions

`--python PATH` (repeated) prints one table, rule by torch version. The matrix test
(`tests/test_verify_matrix.py`, markers `slow` and `matrix`) runs when
`FSDP_LINT_MATRIX_PYTHON` names a second interpreter; CI does not run it: the torch 2.14.1
wheel from the package index is the CUDA build (about 5.4 GB installed, minutes to install)
and would take a large share of CI's 20 minutes on every push for a result that changes only
when a scenario or torch changes. The records of both versions are in this page.
"""


def _column(record: dict) -> str:
    mark = " (imported)" if record["provenance"] == "imported" else ""
    return f"{record['torch']['version']} {_where(record)}{mark}"


def render_verification(records: Optional[List[dict]] = None) -> str:
    records = load() if records is None else records
    parts = [INTRO, "## Verdicts by run\n"]
    heads = [_column(r) for r in records]
    parts.append("| rule | " + " | ".join(heads) + " |\n|---|" + "---|" * len(heads))
    for rule in ALL_RULES:
        for form in forms(rule.code) or ("",):
            cells = []
            for record in records:
                found = [res["verdict"] for res in record["results"]
                         if res["code"] == rule.code and form_of(res) == form]
                cells.append(found[0] if found else "-")
            parts.append(f"| {label(rule.code, form)} | " + " | ".join(cells) + " |")
    parts.append("")
    for record in records:
        parts.append(f"## torch {record['torch']['version']}, {_where(record)}: {_cell(_machine(record))}\n")
        if record["provenance"] == "imported":
            parts.append(f"Imported: {record['note']}\n")
        else:
            build = record["torch"]
            cuda = f", CUDA {build['cuda']}" if build.get("cuda") else ""
            parts.append(
                f"Recorded {record['date']} by fsdp-lint {record['fsdp_lint']['version']} "
                f"(commit {record['fsdp_lint'].get('commit') or 'unknown'}"
                f"{', with uncommitted changes' if record['fsdp_lint'].get('dirty') else ''}); "
                f"torch {build['version']}{cuda}, Python {record.get('python')}; {record.get('machine', '')}; "
                f"`{' '.join(record.get('command') or [])}`.\n"
            )
        parts.append("| rule | verdict | flagged program | fixed program | reason |\n|---|---|---|---|---|")
        for result in record["results"]:
            parts.append(
                f"| {label(result['code'], form_of(result))} | {result['verdict']} | {_cell(result['flagged'])} | {_cell(result['fixed'])} "
                f"| {_cell(result['reason'])} |"
            )
        parts.append("")
    return "\n".join(parts)


PROGRAM_RECORDS = Path(__file__).resolve().parent / "verify" / "records" / "program"

PROGRAM_INTRO = """## Every scenario as a user program (`verify --program`)

Each scenario's flagged and fixed program run as a user's own job through `fsdp-lint verify
--program` (`python -m fsdp_lint.verify.program.table --device DEVICE --nproc N --record
fsdp_lint/verify/records/program [CODES]`). PASS: the flagged program's finding of the rule
is CONFIRMED at the scenario's line and the fixed program shows nothing for the rule. On
CPU/gloo the same runs are the test `tests/test_verify_program.py`.
"""


def load_program_records(folder: Path = PROGRAM_RECORDS) -> List[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]


def render_program_records(records: List[dict]) -> str:
    parts = [PROGRAM_INTRO]
    for record in records:
        source = record["fsdp_lint"]
        names = ", ".join(record.get("device_names") or [])
        parts.append(f"### torch {record['torch']}, {record['device']}, {record['nproc']} ranks: {names}\n")
        note = f" {record['provenance'][0].upper()}{record['provenance'][1:]}." if record.get("provenance") else ""
        parts.append(f"Run {record['date']} by fsdp-lint {source.get('version')} (commit {source.get('commit')}"
                     f"{', with uncommitted changes' if source.get('dirty') else ''}); "
                     f"`{' '.join(record['command'])}`.{note}\n")
        parts.append("| rule | flagged program | fixed program | result |\n|---|---|---|---|")
        for row in record["rows"]:
            parts.append(f"| {row['code']} | {_cell(row['flagged'])} | {_cell(row['fixed'])} | {_cell(row['result'])} |")
        parts.append("")
    return "\n".join(parts)


def write_docs(folder: Path) -> List[Path]:
    records = load()
    written = []
    (folder / "rules").mkdir(parents=True, exist_ok=True)
    for rule in ALL_RULES:
        path = folder / "rules" / f"{rule.code}.md"
        path.write_text(render_rule(rule, records), encoding="utf-8")
        written.append(path)
    path = folder / "verification.md"
    path.write_text(render_verification(records) + "\n" + render_program_records(load_program_records()),
                    encoding="utf-8")
    written.append(path)
    return written


if __name__ == "__main__":
    for written in write_docs(Path(sys.argv[1] if len(sys.argv) > 1 else "docs")):
        print(written)
