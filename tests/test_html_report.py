"""``fsdp-lint verify --report FILE``: one self-contained HTML page with plots.

No torchrun job of its own: the rules page is the one the session's shared ``verify
--observe`` run wrote (tests/conftest.py passes it ``--report``), the program pages are
built from that run's runtime-layer reports of two scenario programs (their events and
logs are in its log folder), and the rule-by-torch grid from the committed records.  Every
page is read back with ``html.parser`` (runs everywhere); the browser test opens the same
pages in headless Chromium (``/usr/bin/chromium``, installed by ``.ci/run``; skipped where
absent) and keeps a screenshot of each in its pytest tmp path.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from fsdp_lint.verify import html_report, records
from fsdp_lint.verify.scenario import label
from tests.report_page import CHROMIUM, Page, chromium_available, open_in_browser, screenshot

# the three interpreters of the 2026-11-30 CPU matrix (torch 2.11, 2.13, 2.14.1), 2 ranks
MATRIX = (
    "2026-11-30-gloo-cpu-2ranks-torch-2.11.0-cu130-imported.json",
    "2026-11-30-gloo-cpu-2ranks-torch-2.13.0-cpu.json",
    "2026-11-30-gloo-cpu-2ranks-torch-2.14.1-cu130.json",
)


def _anchor(key: str) -> str:
    return "rule-" + "".join(c if c.isalnum() else "-" for c in key).strip("-")


def check_rules_page(page: Page, results) -> None:
    """Every result (code, form, verdict) has its section; every one whose programs ran has
    a plot in it; nothing is loaded from elsewhere."""
    assert page.external == [] and page.scripts == 0
    sections = {s["id"]: s for s in page.of_class("rule")}
    for result in results:
        key = label(result["code"], result.get("form") or "")
        section = sections.get(_anchor(key))
        assert section is not None, f"no section for {key}: {sorted(sections)}"
        assert section["rule"] == result["code"] and result["verdict"] in section["text"]
        if result["verdict"] != "SKIPPED":
            assert section["svgs"] >= 1, f"{key} ({result['verdict']}) has no plot"


# -- parser level (everywhere) ---------------------------------------------------------


def test_matrix_of_committed_records_is_a_rule_by_torch_grid(tmp_path):
    matrix = [r for r in records.load() if r["_file"] in MATRIX]
    assert len(matrix) == 3
    path = html_report.write_rules(str(tmp_path / "matrix.html"), matrix)
    page = Page(path.read_text(encoding="utf-8"))
    grid = page.of_class("job")
    assert len(grid) == 1 and grid[0]["id"] == "matrix" and grid[0]["svgs"] == 1
    for record in matrix:  # a column per torch, a row per rule, each cell its verdict
        assert f"torch {record['torch']['version']}" in grid[0]["text"]
    assert "NOT REPRODUCED" in grid[0]["text"]  # FSD001 on 2.14.1
    for record in matrix:
        check_rules_page(page, record["results"])
    fsd002 = next(s for s in page.of_class("rule") if s["rule"] == "FSD002")
    assert "median step time per rank" in fsd002["text"]  # the records hold each rank's median
    fsd006 = next(s for s in page.of_class("rule") if s["rule"] == "FSD006")
    assert "host memory growth per rank" in fsd006["text"] and "full model" in fsd006["text"]


def test_one_record_has_no_grid_and_a_missing_plot_fails_the_check(tmp_path):
    record = next(r for r in records.load() if r["_file"] == MATRIX[1])
    text = html_report.write_rules(str(tmp_path / "one.html"), [record]).read_text(encoding="utf-8")
    page = Page(text)
    assert not [s for s in page.of_class("job") if s["id"] == "matrix"]
    check_rules_page(page, record["results"])
    first_svg = text.index("<svg")  # the check can fail: a rule section without its plot
    broken = text[:first_svg] + text[text.index("</svg>", first_svg) + len("</svg>"):]
    with pytest.raises(AssertionError, match="has no plot"):
        check_rules_page(Page(broken), record["results"])
    with pytest.raises(AssertionError):
        check_rules_page(Page(text.replace("</style>", '</style><img src="https://cdn.example/x.png">')),
                         record["results"])


def test_report_without_matplotlib_fails_in_one_line_before_running_anything(tmp_path):
    """The extra is checked first: no probe, no torchrun job."""
    hide = (
        "import sys, importlib.abc\n"
        "class Hide(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'matplotlib':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "from fsdp_lint.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    for argv in (["verify", "FSD001", "--report", str(tmp_path / "r.html")],
                 ["verify", "--program", str(tmp_path / "train.py"), "--report", str(tmp_path / "r.html")]):
        done = subprocess.run([sys.executable, "-c", hide, *argv], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "'report' extra" in lines[0] and "pip install 'fsdp-lint[report]'" in lines[0]
        assert not (tmp_path / "r.html").exists()


def test_the_linter_never_imports_matplotlib(tmp_path):
    target = tmp_path / "train.py"
    target.write_text("import torch\n")
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "fsdp_lint", "check", str(target)],
                          capture_output=True, text=True, timeout=120)
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "fsdp_lint.engine" in imported  # the check did import the linter
    assert not {name for name in imported if name.split(".")[0] in ("matplotlib", "torch")}


# -- the shared verify run (slow: waits for it) -----------------------------------------


def _program_pages(run, folder):
    """``verify --program`` pages of two scenario programs as the shared run's layer ran them:
    FSD002's flagged one (optimizer steps, a summon every step) and FSD104's (a hang)."""
    pages = {}
    for code in ("FSD002", "FSD104"):
        row = run.rows(codes=[code], forms=[""])[(code, "")]
        report = row["layer"]["flagged"]
        pages[code] = (html_report.write_program(str(folder / f"{code}-program.html"), report,
                                                 {"version": "test", "commit": None}, 12.5), report)
    return pages


def check_program_page(page: Page, report) -> None:
    assert page.external == [] and page.scripts == 0
    job = page.of_class("job")
    assert len(job) == 1 and job[0]["svgs"] >= 1
    findings = page.of_class("finding")
    assert len(findings) == len(report["findings"]) + len(report["missed"])
    for section, item in zip(findings, report["findings"] + report["missed"]):
        assert section["rule"] == item["code"] and item["verdict"] in section["text"] and section["svgs"] == 1


@pytest.mark.slow
def test_rules_report_of_the_shared_run(verify_every_rule_on_cpu):
    run = verify_every_rule_on_cpu
    assert run.report.exists(), run.result.stderr[-3000:]
    assert f"report written: {run.report}" in run.result.stderr
    page = Page(run.report.read_text(encoding="utf-8"))
    check_rules_page(page, run.data["results"])
    sections = {s["id"]: s for s in page.of_class("rule")}
    fsd002 = sections[_anchor("FSD002")]["text"]
    assert "time per step" in fsd002 and "bytes all-gathered per step" in fsd002  # the scenario's per-step lists
    fsd001 = sections[_anchor("FSD001")]["text"]
    assert "local shard elements changed" in fsd001
    fsd104 = sections[_anchor("FSD104")]["text"]  # the hang: each rank's lane, blocked in its collective
    assert "when the flagged program hung" in fsd104
    assert "rank 0" in fsd104 and "rank 1" in fsd104 and fsd104.count("blocked in ") >= 2


@pytest.mark.slow
def test_program_reports_of_the_shared_runs_layer(verify_every_rule_on_cpu, tmp_path):
    for code, (path, report) in _program_pages(verify_every_rule_on_cpu, tmp_path).items():
        page = Page(path.read_text(encoding="utf-8"))
        check_program_page(page, report)
        assert any(s["rule"] == code and "CONFIRMED" in s["text"] for s in page.of_class("finding"))
        job = page.of_class("job")[0]["text"]
        if code == "FSD002":
            assert "time between optimizer steps" in job
        else:
            assert "when the job hung" in job and job.count("blocked in ") >= 2


# -- a real browser -----------------------------------------------------------------------


@pytest.mark.slow
def test_reports_load_in_headless_chromium(verify_every_rule_on_cpu, tmp_path):
    """Each page loads without a console message, its sections and plots are in the DOM the
    browser built, and a screenshot of it is kept as a test artefact (``report-*.png`` in
    this test's pytest tmp path, printed below)."""
    if not chromium_available():  # asked after the shared run: .ci/run's install had that long
        pytest.skip(f"no Chromium at {CHROMIUM} (.ci/run installs Debian's chromium package; the "
                    "parser-level checks of the same pages run without it)")
    noisy = tmp_path / "noisy.html"  # the console check can fail: a page that logs an error
    noisy.write_text('<!DOCTYPE html><html><body><script>console.error("deliberate")</script></body></html>')
    assert any("deliberate" in line for line in open_in_browser(noisy)[1])

    run = verify_every_rule_on_cpu
    pages = [("rules", run.report, lambda page: check_rules_page(page, run.data["results"]))]
    for code, (path, report) in _program_pages(run, tmp_path).items():
        pages.append((f"program-{code}", path, lambda page, report=report: check_program_page(page, report)))
    for name, path, check in pages:
        dom, console = open_in_browser(path)
        assert console == [], console
        assert "</section>" in dom, dom[:2000]
        check(Page(dom))  # the browser's own DOM: every section and plot is there
        png = screenshot(path, tmp_path / f"report-{name}.png")
        assert png.stat().st_size > 10_000
        print(f"screenshot: {png}")
