"""Where fsdp-lint's time goes on a tree, stage by stage, in one process (CPU seconds,
``time.process_time`` around each stage; the pool, start-up and reading are left out).

    python bench/stages.py /work/corpus/dense [--top 8]

Stages: text markers; the ``ast`` stage (one ``ast.parse``, the walk, the compiled-names
check and the screen of which rules can fire: ``screen.confirmed_live_rules``); then for the
files some rule can fire on: the slice (the closure over the same ``ast``), the libcst parse
(of the slice, or of the whole text when not sliced), the facts walk, the rules; and, for
comparison, the libcst parse of the whole text.  Prints totals and the most expensive files.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from fsdp_lint.engine import _parse, wanted_rules
from fsdp_lint.rules import ALL_RULES
from fsdp_lint.screen import Summary, fires, parse
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

    totals = dict(markers=0.0, ast=0.0, slice=0.0, parse=0.0, facts=0.0, rules=0.0, whole_parse=0.0)
    files = named = candidates = sliced = chars = kept = 0
    named_chars = 0
    rows = []
    for tree in args.trees:
        for path in sorted(Path(tree).rglob("*.py")):
            if ".downloads" in path.parts or not path.is_file():
                continue
            files += 1
            text = path.read_text(encoding="utf-8", errors="replace")
            t0 = time.process_time()
            active = wanted_rules(text, ALL_RULES)
            t1 = time.process_time()
            totals["markers"] += t1 - t0
            if not active:
                continue
            module = parse(text)
            live = active
            if module is not None:
                summary = Summary(module)
                if not summary.confirms(active, text):
                    live = []
                else:
                    named += 1
                    named_chars += len(text)
                    live = [r for r in active if fires(summary, r)]
            totals["ast"] += time.process_time() - t1
            if not live:
                continue
            active = live
            candidates += 1
            t2 = time.process_time()
            piece = slice_text(text, active, MIN_CHARS, MAX_SHARE, module)
            t3 = time.process_time()
            module, error = _parse(text if piece is None else piece.text, str(path))
            t4 = time.process_time()
            if module is None:
                continue
            facts = index_module(module)
            t5 = time.process_time()
            for rule in active:
                rule().check(facts, _Quiet())
            t6 = time.process_time()
            _parse(text, str(path))
            t7 = time.process_time()
            chars += len(text)
            kept += len(text) if piece is None else len(piece.text)
            sliced += piece is not None
            for key, value in (("slice", t3 - t2), ("parse", t4 - t3), ("facts", t5 - t4), ("rules", t6 - t5),
                               ("whole_parse", t7 - t6)):
                totals[key] += value
            rows.append((t6 - t2, t7 - t6, len(text), 0 if piece is None else len(piece.text),
                         f"{path} ({','.join(r.code for r in active)})"))
    print(f"{files} files; {named} pass the names check ({named_chars:,} characters); {candidates} have a rule "
          f"that can fire and reach libcst ({chars:,} characters), {sliced} sliced; libcst parses {kept:,} characters "
          f"({kept / max(chars, 1):.0%})")
    print("CPU seconds: " + ", ".join(f"{key} {value:.2f}" for key, value in totals.items()))
    rows.sort(reverse=True)
    for spent, whole, size, part, name in rows[: args.top]:
        share = f"slice {part / size:.0%}" if part else "whole"
        print(f"  {spent:6.2f} s (whole-file parse alone {whole:5.2f} s)  {size // 1024:4d} KB  {share:>10}  {name}")


if __name__ == "__main__":
    main()
