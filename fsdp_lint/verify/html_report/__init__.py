"""``fsdp-lint verify --report FILE``: the run as one self-contained HTML page with plots
(``page.py`` builds it, ``plots.py`` draws with matplotlib, the ``report`` extra).

The command side imports only this module: ``missing()`` says, without importing
matplotlib, whether the extra is installed (checked before any program runs), and
``write_rules``/``write_program`` load the page's modules only when a report is written,
so neither the linter nor a ``verify`` run without ``--report`` pays for matplotlib.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Optional, Sequence

MISSING = ("--report needs matplotlib, which is fsdp-lint's 'report' extra: "
           "pip install 'fsdp-lint[report]' (in the fsdp-lint clone: pip install '.[report]')")


def missing() -> Optional[str]:
    """Why ``--report`` cannot be written here (matplotlib absent), or None."""
    try:
        found = importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):
        found = False
    return None if found else MISSING


def _page():
    # matplotlib is an optional extra and costs about 0.4 s to import: only --report loads it
    import fsdp_lint.verify.html_report.page as page

    return page


def _write(path: str, text: str) -> Path:
    target = Path(path)
    if target.parent and not target.parent.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)
    return target


def write_rules(path: str, records: Sequence[dict]) -> Path:
    """The report of ``verify [CODES]``: one record (``records.build``) per interpreter."""
    return _write(path, _page().rules_page(records))


def write_program(path: str, report: dict, source: Optional[dict] = None, seconds: Optional[float] = None) -> Path:
    """The report of ``verify --program``: ``report`` as ``program.report.to_json`` gives it."""
    return _write(path, _page().program_page(report, source, seconds))
