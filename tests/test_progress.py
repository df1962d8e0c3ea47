"""Progress on a terminal: ``N/TOTAL files checked`` on standard error while a long run
lasts, only when standard error is a terminal; never when it is piped."""

import io
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

from fsdp_lint.output.progress import CLEAR, Progress

ROOT = Path(__file__).resolve().parent.parent
BAD = ROOT / "fixtures" / "FSD001" / "fix" / "read_only.py"


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_printer_waits_throttles_and_erases():
    now = [0.0]
    stream = _Terminal()
    progress = Progress(4, stream, delay=0.5, interval=0.1, clock=lambda: now[0])
    progress.update(1)
    assert stream.getvalue() == ""  # a short run never draws
    now[0] = 0.6
    progress.update(2)
    assert stream.getvalue() == f"{CLEAR}2/4 files checked"
    now[0] = 0.65
    progress.update(3)  # too soon after the last draw
    assert stream.getvalue().count("files checked") == 1
    progress.update(4)  # the last one is always drawn
    assert stream.getvalue().endswith(f"{CLEAR}4/4 files checked")
    progress.finish()
    assert stream.getvalue().endswith(CLEAR)


def test_progress_printer_is_silent_off_a_terminal():
    stream = io.StringIO()  # a pipe or a file: isatty() is False
    progress = Progress(4, stream, delay=0, clock=lambda: 10.0)
    for done in range(1, 5):
        progress.update(done)
    progress.finish()
    assert stream.getvalue() == ""


def _tree(tmp_path, count=80):
    for index in range(count):
        shutil.copy(BAD, tmp_path / f"m{index:02}.py")
    return tmp_path


def test_progress_shows_on_a_terminal_and_not_when_piped(tmp_path):
    tree = _tree(tmp_path)
    command = [sys.executable, "-m", "fsdp_lint", "check", "--no-cache", "-j", "1", str(tree)]
    piped = subprocess.run(command, capture_output=True, text=True)
    assert piped.returncode == 1
    assert "files checked" not in piped.stderr and "\x1b[K" not in piped.stderr + piped.stdout

    leader, follower = pty.openpty()
    report = tmp_path / "report.txt"  # a file: a pipe nobody reads would fill and block the run
    try:
        with open(report, "wb") as stdout:
            run = subprocess.Popen(command, stdout=stdout, stderr=follower)
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            seen += chunk
        run.wait(timeout=300)
    finally:
        os.close(leader)
    assert run.returncode == 1
    text = seen.decode()
    assert "/80 files checked" in text, text  # the run lasts well past the half-second delay
    assert text.endswith(CLEAR)  # erased before the report
    out = report.read_text()
    assert "FSD001" in out and "files checked" not in out  # standard output holds the report only
