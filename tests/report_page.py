"""Reading a ``verify --report`` page back (stdlib ``html.parser``) and opening it in a real
headless browser; shared by tests/test_html_report.py, tests/test_verify_program.py and
scripts/report_screenshot.py."""

from __future__ import annotations

import os
import re
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Dict, List, Optional

CHROMIUM = "/usr/bin/chromium"
EXTERNAL = re.compile(r"^\s*(https?:)?//", re.I)


class Page(HTMLParser):
    """The sections of a report page (``<section data-rule=...>``), the ``<svg>`` plots and
    the text inside each, and every attribute that would load something from elsewhere."""

    def __init__(self, text: str):
        super().__init__()
        self.sections: List[dict] = []  # {"id", "class", "rule", "svgs", "text"}
        self.external: List[str] = []
        self.scripts = 0
        self.svgs = 0
        self._depth = 0  # <section> nesting inside the current one
        self._current: Optional[dict] = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attributes: Dict[str, str] = {k: v or "" for k, v in attrs}
        for name in ("src", "href", "xlink:href", "action", "data"):
            if EXTERNAL.match(attributes.get(name, "")):
                self.external.append(f"<{tag} {name}={attributes[name]}>")
        if tag == "link" or "url(http" in attributes.get("style", ""):
            self.external.append(f"<{tag}>")
        if tag == "script":
            self.scripts += 1
        if tag == "svg":
            self.svgs += 1
            if self._current is not None:
                self._current["svgs"] += 1
        if tag == "section":
            if self._current is None:
                self._current = {"id": attributes.get("id", ""), "class": attributes.get("class", ""),
                                 "rule": attributes.get("data-rule", ""), "svgs": 0, "text": []}
                self.sections.append(self._current)
            else:
                self._depth += 1

    def handle_endtag(self, tag):
        if tag == "section" and self._current is not None:
            if self._depth:
                self._depth -= 1
            else:
                self._current["text"] = " ".join(self._current["text"])
                self._current = None

    def handle_data(self, data):
        if self._current is not None and data.strip():
            self._current["text"].append(data.strip())

    def of_class(self, name: str) -> List[dict]:
        return [s for s in self.sections if name in s["class"].split()]


# .ci/run installs Chromium in the background while the suite runs, and names a file that
# holds the install's exit status once it is done: the browser test waits for it
INSTALL_STATUS = "FSDP_LINT_CHROMIUM_INSTALL_STATUS"


def chromium_available(wait: float = 900.0) -> bool:
    """Whether Chromium is there; while .ci/run's background install is under way (the
    status file it names does not exist yet), wait for it, up to ``wait`` seconds."""
    status = os.environ.get(INSTALL_STATUS)
    if status and not os.access(CHROMIUM, os.X_OK):
        deadline = time.monotonic() + wait
        while not os.path.exists(status) and time.monotonic() < deadline:
            time.sleep(1.0)
    return os.access(CHROMIUM, os.X_OK)


def _chromium(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    # root (CI) needs --no-sandbox; no GPU on these machines
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", "--enable-logging=stderr", "--v=0", *args],
                          capture_output=True, text=True, timeout=timeout)


def console_messages(stderr: str) -> List[str]:
    """The page's console output (errors, uncaught exceptions, logs) in Chromium's log: a
    report page has no script, so any is a failure."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def open_in_browser(page: Path) -> tuple:
    """(the DOM after the page loaded, its console messages)."""
    done = _chromium("--dump-dom", page.resolve().as_uri())
    return done.stdout, console_messages(done.stderr)


def screenshot(page: Path, png: Path, width: int = 1280, height: int = 2000) -> Path:
    done = _chromium(f"--window-size={width},{height}", f"--screenshot={png}", page.resolve().as_uri())
    if not png.exists():
        raise RuntimeError(f"chromium wrote no screenshot: {done.stderr[-2000:]}")
    return png
