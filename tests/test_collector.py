"""The ``fsdp-lint`` command tunes the garbage collector for its own process
(``fsdp_lint.collector``); ``main`` called from another program leaves that program's alone."""

import gc

import pytest

from fsdp_lint import cli
from fsdp_lint.collector import FIRST_THRESHOLD


@pytest.fixture
def collector_restored():
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)
    gc.unfreeze()


def test_the_command_raises_the_first_threshold_and_freezes_what_is_alive(collector_restored, monkeypatch):
    gc.set_threshold(700, 10, 10)
    gc.unfreeze()
    seen = {}

    def fake_main(argv=None):
        seen["threshold"], seen["frozen"] = gc.get_threshold(), gc.get_freeze_count()
        return 0

    monkeypatch.setattr(cli, "main", fake_main)
    assert cli.console() == 0
    assert seen["threshold"] == (FIRST_THRESHOLD, 10, 10)
    assert seen["frozen"] > 0


def test_main_called_in_process_keeps_the_callers_collector(collector_restored, capsys):
    gc.set_threshold(700, 10, 10)
    gc.unfreeze()
    assert cli.main(["--version"]) == 0
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0
