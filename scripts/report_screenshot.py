"""The README's screenshot of a ``verify --report`` page, made from committed records.

    python scripts/report_screenshot.py [--records DIR] [--rules FSD001,FSD002,FSD006]
                                        [--out docs/images/verify-report.png] [--html PAGE]

Renders the report of the 2026-11-30 CPU matrix (torch 2.11, 2.13 and 2.14.1, gloo, 2
ranks; ``fsdp_lint/verify/records/``), cut to a few rules so that the page's first screen
shows the environment, the rule-by-torch grid and plots, and takes the screenshot with
headless Chromium (``/usr/bin/chromium``: ``apt-get install chromium``).  Needs the
``report`` extra (matplotlib).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fsdp_lint.verify import html_report, records  # noqa: E402
from tests.report_page import chromium_available, screenshot  # noqa: E402

MATRIX = (
    "2026-11-30-gloo-cpu-2ranks-torch-2.11.0-cu130-imported.json",
    "2026-11-30-gloo-cpu-2ranks-torch-2.13.0-cpu.json",
    "2026-11-30-gloo-cpu-2ranks-torch-2.14.1-cu130.json",
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/report_screenshot.py")
    parser.add_argument("--records", type=Path, default=records.SHIPPED)
    parser.add_argument("--files", nargs="*", default=list(MATRIX), help="record files in --records (default: "
                        "the 2026-11-30 CPU matrix)")
    parser.add_argument("--rules", default="FSD001,FSD002,FSD006", help="comma-separated codes kept ('' = all)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "verify-report.png")
    parser.add_argument("--html", type=Path, default=None, help="keep the page here (default: a temp folder)")
    parser.add_argument("--height", type=int, default=2300)
    args = parser.parse_args(argv)
    problem = html_report.missing()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    if not chromium_available():
        print("needs /usr/bin/chromium (apt-get install chromium)", file=sys.stderr)
        return 2
    chosen = [r for r in records.load(args.records) if r["_file"] in args.files]
    codes = {c.strip() for c in args.rules.split(",") if c.strip()}
    for record in chosen:
        if codes:
            record["results"] = [r for r in record["results"] if r["code"] in codes]
    page = args.html or Path(tempfile.mkdtemp(prefix="fsdp-lint-report-")) / "report.html"
    html_report.write_rules(str(page), chosen)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    print(screenshot(page, args.out, height=args.height))
    return 0


if __name__ == "__main__":
    sys.exit(main())
