"""Where fsdp-lint's time goes on a tree, stage by stage, in one process (CPU seconds,
``time.perf_counter`` around each stage; the pool, start-up and reading are left out).

    python bench/stages.py /work/corpus/dense [--top 8]

Stages: text markers, the compiled-names stage, then for the files that pass both: the
slice (``ast`` parse and the closure), the libcst parse (of the slice, or of the whole text
when not sliced), the facts walk, the rules; and, for comparison, the libcst parse of the
whole text.  Prints totals and the most expensive files.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from fsdp_lint.engine import _parse, ast_confirms, wanted_rules
from fsdp_lint.rules import ALL_RULES
from fsdp_lint.slicing import MAX_SHARE, MIN_CHARS, slice_text


class _Quiet:
    def __call__(self, *args, **kwargs):
        pass

    def row(self, node):
        return 1


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", nargs="+")
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args(argv)
    import libcst  # noqa: F401 - its import is not a stage here

    from fsdp_lint.facts.index import index_module

    totals = dict(markers=0.0, names=0.0, slice=0.0, parse=0.0, facts=0.0, rules=0.0, whole_parse=0.0)
    files = candidates = sliced = chars = kept = 0
    rows = []
    for tree in args.trees:
        for path in sorted(Path(tree).rglob("*.py")):
            if ".downloads" in path.parts or not path.is_file():
                continue
            files += 1
            text = path.read_text(encoding="utf-8", errors="replace")
            t0 = time.perf_counter()
            active = wanted_rules(text, ALL_RULES)
            t1 = time.perf_counter()
            totals["markers"] += t1 - t0
            if not active:
                continue
            confirmed = ast_confirms(text, active)
            totals["names"] += time.perf_counter() - t1
            if not confirmed:
                continue
            candidates += 1
            t2 = time.perf_counter()
            piece = slice_text(text, active, MIN_CHARS, MAX_SHARE)
            t3 = time.perf_counter()
            module, error = _parse(text if piece is None else piece.text, str(path))
            t4 = time.perf_counter()
            if module is None:
                continue
            facts = index_module(module)
            t5 = time.perf_counter()
            for rule in active:
                rule().check(facts, _Quiet())
            t6 = time.perf_counter()
            _parse(text, str(path))
            t7 = time.perf_counter()
            chars += len(text)
            kept += len(text) if piece is None else len(piece.text)
            sliced += piece is not None
            for key, value in (("slice", t3 - t2), ("parse", t4 - t3), ("facts", t5 - t4), ("rules", t6 - t5),
                               ("whole_parse", t7 - t6)):
                totals[key] += value
            rows.append((t6 - t2, t7 - t6, len(text), 0 if piece is None else len(piece.text), str(path)))
    print(f"{files} files; {candidates} reach libcst ({chars:,} characters), {sliced} sliced; "
          f"libcst parses {kept:,} characters ({kept / max(chars, 1):.0%})")
    print("CPU seconds: " + ", ".join(f"{key} {value:.2f}" for key, value in totals.items()))
    rows.sort(reverse=True)
    for spent, whole, size, part, name in rows[: args.top]:
        share = f"slice {part / size:.0%}" if part else "whole"
        print(f"  {spent:6.2f} s (whole-file parse alone {whole:5.2f} s)  {size // 1024:4d} KB  {share:>10}  {name}")


if __name__ == "__main__":
    main()
