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

import sys
from importlib import metadata
from pathlib import Path
from typing import List, Optional

from fsdp_lint.rules import ALL_RULES
from fsdp_lint.scenarios.registry import variants
from fsdp_lint.verify.records import load
from fsdp_lint.verify.scenario import version_tuple

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


def _rows(code: str, records: List[dict]):
    for record in records:
        for result in record["results"]:
            if result["code"] == code:
                yield record, result


def verification_table(rule, records: Optional[List[dict]] = None) -> str:
    records = load() if records is None else records
    rows = [
        f"| {record['torch']['version']} | {_where(record)} | {_cell(_machine(record))} | {result['verdict']} "
        f"| {_cell(_what(result))} | {_source(record)} |"
        for record, result in _rows(rule.code, records)
    ]
    if not rows:
        return "Not run by the verifier yet.\n"
    head = (
        "| torch | backend/device | machine | verdict | what the flagged program did | record |\n"
        "|---|---|---|---|---|---|"
    )
    return head + "\n" + "\n".join(rows) + "\n"


def scenario_lines(rule) -> str:
    lines = []
    for scenario in variants(rule.code):
        needs = [f"devices: {', '.join(scenario.devices)}"]
        if scenario.min_ranks > 1:
            needs.append(f"at least {scenario.min_ranks} ranks")
        if scenario.real_cpu_offload:
            needs.append("real CPU parameter offload (CUDA)")
        needs += [f"torch >= {v} on {d}" for d, v in scenario.torch_min.items()]
        fixed = f"; hazard fixed in torch {scenario.hazard_fixed_in}" if scenario.hazard_fixed_in else ""
        lines.append(
            f"- `fsdp_lint/scenarios/{scenario.program}` ({'; '.join(needs)}{fixed}): {scenario.hazard}."
        )
    return "\n".join(lines) + "\n" if lines else "No runtime scenario.\n"


def render_rule(rule, records: Optional[List[dict]] = None) -> str:
    known = f"\nHazard fixed in torch {rule.hazard_fixed_in}.\n" if rule.hazard_fixed_in else ""
    return (
        f"# {rule.name} ({rule.code})\n\n{FIX_WORDS[rule.fix_availability]}\n{known}\n{rule.doc}\n"
        f"## Verified (`fsdp-lint verify {rule.code}`)\n"
        f"{scenario_lines(rule)}\n"
        f"{verification_table(rule, records)}"
    )


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
    lines = [f"- {result['verdict']} on {_where(record)} ({_source(record)})" for record, result in same]
    reproduced = any(result["verdict"] == "CONFIRMED" for _, result in same)
    verdict = "reproduced" if reproduced else "not reproduced"
    return text + f"The hazard was {verdict} on this version:\n" + "\n".join(lines) + "\n"


def render_for_user(rule) -> str:
    """``fsdp-lint rule``: the page, then the user's own torch."""
    return render_rule(rule) + "\n## On your torch\n" + on_your_torch(rule, installed_torch())


INTRO = """# Runtime verification

Each table below is one run of `fsdp-lint verify --record DIR`, rendered from its record in
`fsdp_lint/verify/records/` (`python -m fsdp_lint.docs docs`; never edited by hand). A
record holds the fsdp-lint version and commit, a hash of every scenario file, the torch
version and build, the backend, devices, ranks and date, and every rank's exit and evidence.
CPU runs use gloo; GPU runs use NCCL with NVLink multicast off. `fsdp-lint verify`
reproduces them on your own torch and hardware; `fsdp-lint verify --python PATH --python
PATH` compares torch versions.

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

What a scenario needs (devices, ranks, real CPU offload, torch version) is declared in
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
        cells = []
        for record in records:
            found = [res["verdict"] for res in record["results"] if res["code"] == rule.code]
            cells.append(found[0] if found else "-")
        parts.append(f"| {rule.code} | " + " | ".join(cells) + " |")
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
                f"| {result['code']} | {result['verdict']} | {_cell(result['flagged'])} | {_cell(result['fixed'])} "
                f"| {_cell(result['reason'])} |"
            )
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
    path.write_text(render_verification(records), encoding="utf-8")
    written.append(path)
    return written


if __name__ == "__main__":
    for written in write_docs(Path(sys.argv[1] if len(sys.argv) > 1 else "docs")):
        print(written)
