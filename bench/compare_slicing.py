"""Lints every candidate file of a tree twice, libcst parsing the whole text and parsing
only the slice (``fsdp_lint.slicing``), and prints every difference in the diagnostics
(codes, positions, messages, fixes).  A correctness check for slicing, not a benchmark.

    python bench/compare_slicing.py /work/corpus/ml /work/corpus/dense [--all] [--no-screen]

A candidate is a file that reaches libcst: some rule's markers occur in it and the ``ast``
screen keeps a rule (``screen.live_rules_and_sites``); the slice is built as the engine
builds it, from the screen's candidate sites.  ``--all`` slices every candidate, not only
large ones (the default threshold).  ``--no-screen`` lints every file the markers and the
compiled names pass with every rule they select, and slices without the screen's sites (the
closure alone): a harder test of the closure, on far more files.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fsdp_lint import screen
from fsdp_lint.engine import ast_confirms, lint_text_sliced, wanted_rules
from fsdp_lint.rules import ALL_RULES
from fsdp_lint.slicing import MIN_CHARS, slice_text


def seen(diagnostics):
    return [
        (d.code, d.location, d.end_location, d.message, d.statement_rows,
         None if d.fix is None else (d.fix.applicability, d.fix.message, d.fix.edits))
        for d in diagnostics
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", nargs="+")
    parser.add_argument("--all", action="store_true", help="slice files of any size")
    parser.add_argument("--no-screen", action="store_true", help="every selected rule, the closure without sites")
    args = parser.parse_args(argv)
    if args.no_screen:
        screen.live_rules_and_sites = lambda tree, rules: (list(rules), None)
    threshold = 0 if args.all else MIN_CHARS
    files = candidates = sliced = findings = differ = 0
    whole_chars = slice_chars = 0
    whole_s = sliced_s = 0.0
    for tree in args.trees:
        for path in sorted(Path(tree).rglob("*.py")):
            if ".downloads" in path.parts or not path.is_file():
                continue
            files += 1
            text = path.read_text(encoding="utf-8", errors="replace")
            active = wanted_rules(text, ALL_RULES)
            if not active or not ast_confirms(text, active):
                continue
            module = screen.parse(text)
            live, sites = screen.live_rules_and_sites(module, active)
            if not live:
                continue
            candidates += 1
            piece = slice_text(text, live, threshold, 1.0 if threshold == 0 else 0.8, module, sites)
            if piece is not None:
                sliced += 1
                whole_chars += len(text)
                slice_chars += len(piece.text)
            start = time.process_time()
            whole = lint_text_sliced(text, str(path), ALL_RULES, None).diagnostics
            middle = time.process_time()
            part = lint_text_sliced(text, str(path), ALL_RULES, threshold).diagnostics
            whole_s += middle - start
            sliced_s += time.process_time() - middle
            findings += len(whole)
            if seen(whole) != seen(part):
                differ += 1
                print(f"DIFFERENT: {path}", flush=True)
                for line in sorted(set(seen(whole)) ^ set(seen(part)), key=str):
                    print("   ", "whole " if line in seen(whole) else "sliced", line, flush=True)
    print(
        f"{files} files, {candidates} candidates, {sliced} sliced ({slice_chars:,} of {whole_chars:,} characters "
        f"kept), {findings} diagnostics without slicing; files that differ: {differ}; "
        f"lint CPU time {whole_s:.1f} s whole vs {sliced_s:.1f} s sliced"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
