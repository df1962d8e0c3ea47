"""``fsdp-lint verify --program``: the user's own job under torchrun with the runtime layer.

Slow tests run real torchrun jobs on CPU/gloo: every scenario's flagged program (CONFIRMED
for its rule at its line) and fixed program (nothing for its rule), the multi-file example
whose offload the static check cannot see, and programs that fail for their own reasons.
The fast tests feed the evidence and join stages with event files and findings.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fsdp_lint.diagnostics import Diagnostic, Location
from fsdp_lint.verify.launcher import ProgramOutcome, RankOutcome
from fsdp_lint.verify.program.evidence import collect
from fsdp_lint.verify.program.join import CONFIRMED, ERROR, MISSED, NOT_REACHED, RAN_CLEAN, join
from fsdp_lint.verify.program.options import OptionsError, parse, wants_program
from fsdp_lint.verify.program.report import RunInfo, exit_status, render, to_sarif
from tests.report_page import Page

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "offload_in_config"

# the line of each scenario's flagged program where the hazard is (found by its text)
HAZARD_LINE = {
    "FSD001": "with FSDP.summon_full_params(model, offload_to_cpu=True):",
    "FSD002": "with FSDP.summon_full_params(model, writeback=False):",
    "FSD003": "with FSDP.summon_full_params(model, offload_to_cpu=True, writeback=False):",
    "FSD004": "with FSDP.summon_full_params(model, rank0_only=True):",
    "FSD005": "with FSDP.summon_full_params(model, rank0_only=True, writeback=False):",
    "FSD007": "loss.backward()",
    "FSD008": "with FSDP.summon_full_params(model, writeback=False):",
    "FSD009": "with FSDP.summon_full_params(model, with_grads=True",
    "FSD010": "with FSDP.summon_full_params(model, offload_to_cpu=True, rank0_only=True",
    "FSD011": "with FSDP.summon_full_params(model, writeback=False):",
    "FSD012": "FSDP.summon_full_params(model, writeback=False)",
    "FSD101": "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
    "FSD102": "torch.nn.utils.clip_grad_norm_(",
    "FSD104": "state = model.state_dict()",
}


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _verify(cli, program: Path, log_dir: Path, *extra, timeout=180, cwd=None):
    result = cli("verify", "--program", program, "--format", "json", "--timeout", timeout,
                 "--log-dir", log_dir, *extra, cwd=cwd)
    assert result.stdout.strip(), result.stderr
    return result.returncode, json.loads(result.stdout), result.stderr


# -- real jobs (torchrun, CPU/gloo) --------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("code", sorted(HAZARD_LINE))
def test_scenario_flagged_is_confirmed_and_fixed_reports_nothing(verify_every_rule_on_cpu, code):
    """The runtime layer of ``verify --program`` on each rule's own flagged and fixed
    programs, as the session's ``verify --observe`` ran them (one torchrun job each, shared
    with the scenario's verdict): the flagged one is CONFIRMED at the hazard's line with
    evidence, the fixed one gets neither a confirmation nor a miss of the rule."""
    row = verify_every_rule_on_cpu.rows(codes=[code], forms=[""])[(code, "")]
    assert row["verdict"] == "CONFIRMED", row
    flagged_text = (verify_every_rule_on_cpu.log_dir / code / "flagged.py").read_text()
    line = _line_of(flagged_text, HAZARD_LINE[code])

    report = row["layer"]["flagged"]
    confirmed = [f for f in report["findings"] if f["code"] == code and f["verdict"] == CONFIRMED]
    assert confirmed, json.dumps(report, indent=1)
    assert line in {f["location"]["row"] for f in confirmed}, (line, confirmed)
    assert all(f["evidence"] for f in confirmed)
    assert report["job"]["status"] == "OK", report["job"]
    assert report["summary"][CONFIRMED] >= 1  # what makes ``verify --program`` exit 1

    report = row["layer"]["fixed"]
    assert report["job"]["status"] == "OK", report["job"]
    assert not [f for f in report["findings"] if f["code"] == code and f["verdict"] == CONFIRMED], report
    assert not [m for m in report["missed"] if m["code"] == code], report["missed"]


@pytest.mark.slow
def test_offload_in_config_is_missed_by_static_analysis(cli, tmp_path):
    page = tmp_path / "job.html"  # --report on a real job (tests/test_html_report.py checks the page in depth)
    status, report, stderr = _verify(cli, EXAMPLE / "train.py", tmp_path / "logs", "--report", page,
                                     "--", "--steps", "4")
    assert f"report written: {page}" in stderr
    read_back = Page(page.read_text(encoding="utf-8"))
    assert read_back.external == [] and read_back.of_class("job")[0]["svgs"] >= 1  # how each rank ended
    missed_sections = [s for s in read_back.of_class("finding") if "MISSED BY STATIC ANALYSIS" in s["text"]]
    assert {s["rule"] for s in missed_sections} >= {"FSD001"} and all(s["svgs"] == 1 for s in missed_sections)
    summon_line = _line_of((EXAMPLE / "checkpoint_utils.py").read_text(), "summon_full_params(")
    missed = [m for m in report["missed"] if m["code"] == "FSD001"]
    assert missed, json.dumps(report, indent=1)
    assert missed[0]["site"]["row"] == summon_line
    assert os.path.samefile(missed[0]["site"]["filename"], EXAMPLE / "checkpoint_utils.py")
    assert not [f for f in report["findings"] if f["code"] == "FSD001"]  # the static pass cannot see it
    assert report["job"]["status"] == "OK"
    assert status == 1


CRASHING = '''\
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def load_batch(step):
    rows = [1.0, 2.0, 3.0]
    return torch.tensor(rows[step])


def main():
    dist.init_process_group("gloo")
    model = FSDP(torch.nn.Linear(4, 4), device_id=torch.device("cpu"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(5):
        model(torch.randn(2, 4) * load_batch(step)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    with FSDP.summon_full_params(model, rank0_only=True):  # export after training: never reached
        pass


if __name__ == "__main__":
    main()
'''

EARLY_EXIT = '''\
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def main():
    dist.init_process_group("gloo")
    model = FSDP(torch.nn.Linear(4, 4), device_id=torch.device("cpu"))
    if dist.get_rank() == 1:
        sys.exit(0)  # "nothing left to do on this rank"
    model(torch.randn(2, 4)).sum().backward()


if __name__ == "__main__":
    main()
'''


@pytest.mark.slow
def test_program_that_crashes_for_its_own_reason_is_error_with_its_traceback(cli, tmp_path):
    program = tmp_path / "train.py"
    program.write_text(CRASHING)
    status, report, _ = _verify(cli, program, tmp_path / "logs")
    assert status == 2
    assert report["job"]["status"] == "ERROR"
    assert "IndexError" in report["job"]["error"]
    assert "load_batch" in report["job"]["traceback"] and "rows[step]" in report["job"]["traceback"]
    # the FSD004 summon after the crash never ran: not a false CONFIRMED
    fsd004 = [f for f in report["findings"] if f["code"] == "FSD004"]
    assert fsd004 and all(f["verdict"] == NOT_REACHED for f in fsd004)
    assert not report["missed"]


@pytest.mark.slow
def test_steps_stop_the_job_after_n_optimizer_steps(cli, tmp_path):
    program = tmp_path / "train.py"
    program.write_text(CRASHING)  # crashes at its 4th step; --steps 2 stops it before
    status, report, _ = _verify(cli, program, tmp_path / "logs", "--steps", "2")
    assert report["job"]["status"] == "OK", report["job"]
    assert report["job"]["optimizer_steps"] == 2
    assert {r["end"] for r in report["job"]["ranks"]} == {"stopped"}
    assert [f["verdict"] for f in report["findings"] if f["code"] == "FSD004"] == [NOT_REACHED]
    assert status == 0


@pytest.mark.slow
def test_rank_that_exits_early_while_the_other_waits_is_error(cli, tmp_path):
    program = tmp_path / "train.py"
    program.write_text(EARLY_EXIT)
    status, report, _ = _verify(cli, program, tmp_path / "logs", timeout=40)
    assert status == 2
    assert report["job"]["status"] == "ERROR"
    assert not [f for f in report["findings"] if f["verdict"] == CONFIRMED]
    assert not report["missed"]


DIES_AT_THE_WRAP = '''\
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def main():
    dist.init_process_group("gloo")
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = FSDP(model)
    for _ in range(3):
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
'''

SUMMON_RAISES_ON_ENTRY = '''\
import torch
import torch.distributed as dist
from torch.distributed.fsdp import CPUOffload
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def main():
    dist.init_process_group("gloo")
    model = FSDP(torch.nn.Linear(8, 8), device_id=torch.device("cpu"),
                 cpu_offload=CPUOffload(offload_params=True))
    with FSDP.summon_full_params(model):
        total = sum(p.sum().item() for p in model.parameters())
    print(total)


if __name__ == "__main__":
    main()
'''

RANK0_HELPER_SUMMON = '''\
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def count_params(model):
    with FSDP.summon_full_params(model, writeback=False):
        return sum(p.numel() for p in model.parameters())


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = FSDP(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 2)), device_id=torch.device("cpu"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if rank == 0:
        print("parameters:", count_params(model))
    counts = [torch.zeros(1) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, torch.tensor([128.0]))
    for _ in range(3):
        model(torch.randn(4, 64)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
'''


@pytest.mark.slow
@pytest.mark.parametrize("program, code, needle, error", [
    (DIES_AT_THE_WRAP, "FSD101", "optimizer = torch.optim.SGD", "FSDP needs a non-CPU accelerator device"),
    (SUMMON_RAISES_ON_ENTRY, "FSD001", "with FSDP.summon_full_params(model):",
     "Cannot access accelerator device when none is available"),
])
def test_site_that_ran_but_never_reached_its_window_is_error_not_ran_clean(cli, tmp_path, program, code, needle,
                                                                           error):
    path = tmp_path / "train.py"
    path.write_text(program)
    status, report, _ = _verify(cli, path, tmp_path / "logs", timeout=60)
    assert report["job"]["status"] == "ERROR" and error in report["job"]["error"], report["job"]
    mine = [f for f in report["findings"] if f["code"] == code]
    assert [f["location"]["row"] for f in mine] == [_line_of(program, needle)]
    assert mine[0]["verdict"] == "ERROR", mine
    assert error in mine[0]["evidence"][0] and "never reached" in mine[0]["evidence"][0]
    assert not [f for f in report["findings"] if f["verdict"] == RAN_CLEAN]
    assert status == 2


@pytest.mark.slow
def test_rank_divergent_summon_in_a_helper_is_fsd104_missed_not_error(cli, tmp_path):
    path = tmp_path / "train.py"
    path.write_text(RANK0_HELPER_SUMMON)
    status, report, _ = _verify(cli, path, tmp_path / "logs", timeout=60)
    assert report["job"]["status"] == "OK", report["job"]
    summon = _line_of(RANK0_HELPER_SUMMON, "with FSDP.summon_full_params(model, writeback=False):")
    assert ("FSD104", summon) in [(m["code"], m["site"]["row"]) for m in report["missed"]], report["missed"]
    assert status == 1


# -- command line ----------------------------------------------------------------------


def test_program_options_and_torchrun_options():
    argv = ["--program", "train.py", "--nproc", "4", "--master-port", "29611", "--max-restarts=0",
            "--steps", "3", "--", "--lr", "0.1", "--nproc", "9"]
    assert wants_program(argv)
    opts = parse(argv)
    assert (opts.program, opts.nproc, opts.steps) == ("train.py", 4, 3)
    assert opts.program_args == ["--lr", "0.1", "--nproc", "9"]
    assert opts.torchrun_env == {"PET_MASTER_PORT": "29611", "PET_MAX_RESTARTS": "0"}
    assert parse(["-m", "pkg.train"]).module == "pkg.train"
    assert not wants_program(["FSD001", "--nproc", "2"])
    assert not wants_program(["FSD001", "--", "--program"])
    with pytest.raises(OptionsError):
        parse(["--program", "t.py", "--nproc-per-node", "2"])
    with pytest.raises(OptionsError):
        parse(["--program", "t.py", "stray"])


def test_module_target_is_found_without_importing_it(tmp_path, monkeypatch):
    from fsdp_lint.verify.program.command import module_file, source_paths

    package = tmp_path / "trainer"
    package.mkdir()
    (package / "__init__.py").write_text("raise SystemExit('imported!')\n")
    (package / "main.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path)
    assert module_file("trainer.main") == package / "main.py"
    paths, problem = source_paths(parse(["-m", "trainer.main"]))
    assert problem is None and paths == [str(package)]
    assert source_paths(parse(["-m", "nowhere.main"]))[1]


def test_missing_program_is_a_usage_error(cli, tmp_path):
    result = cli("verify", "--program", tmp_path / "nope.py")
    assert result.returncode == 2
    assert "no such program" in result.stderr


# -- evidence and join, from event files -----------------------------------------------


def _events(tmp_path, per_rank, exits=None, hung=False):
    outcome = ProgramOutcome("train.py", str(tmp_path), timed_out=hung)
    for rank, rows in per_rank.items():
        with open(tmp_path / f"rank{rank}.events.jsonl", "w") as handle:
            for row in rows:
                handle.write(json.dumps(row) + "\n")
        (tmp_path / f"rank{rank}.log").write_text("")
        code = (exits or {}).get(rank, 0)
        outcome.ranks.append(RankOutcome(rank, returncode=None if hung else code, hung=hung,
                                         log_path=str(tmp_path / f"rank{rank}.log")))
    return outcome


def _finding(code, path, row, end_row=None):
    return Diagnostic(code, code.lower(), f"{code} message", str(path), Location(row, 5),
                      Location(end_row or row, 30))


def _steps(n):
    return [{"e": "step", "step": i + 1, "t": float(i)} for i in range(n)]


def test_summon_every_step_is_fsd002_and_a_guarded_one_is_not(tmp_path):
    every = [{"e": "summon_exit", "site": ["/w/train.py", 30], "index": i, "step": i, "seconds": 0.01}
             for i in range(10)]
    guarded = [{"e": "summon_exit", "site": ["/w/train.py", 40], "index": 0, "step": 0, "seconds": 0.01}]
    rows = _steps(10) + every + guarded + [{"e": "exit", "code": 0}]
    job = collect(_events(tmp_path, {0: rows, 1: rows}), 2)
    v = join([_finding("FSD002", "/w/train.py", 30), _finding("FSD002", "/w/train.py", 40)], job)
    assert [r.verdict for r in v.results] == [CONFIRMED, RAN_CLEAN]
    assert "entered in 10 of 10 optimizer steps" in v.results[0].evidence[0]
    assert job.error is None and not v.missed


def test_divergent_shards_after_rank0_only_edit_is_fsd005(tmp_path):
    def exit_row(changed):
        return {"e": "summon_exit", "site": ["/w/edit.py", 7], "index": 0, "options": {"rank0_only": True},
                "shard_changed": changed, "wrote": None}

    job = collect(_events(tmp_path, {0: [exit_row(False)], 1: [exit_row(True)]}), 2)
    v = join([], job)
    assert [(h.rule, h.site) for h in v.missed] == [("FSD005", ("/w/edit.py", 7))]
    assert "changed on rank(s) 1 and not on rank(s) 0" in v.missed[0].evidence[0]
    same = collect(_events(tmp_path, {0: [exit_row(True)], 1: [exit_row(True)]}), 2)
    assert not same.hazards


def test_local_norms_against_the_global_norm_is_fsd102(tmp_path):
    def clip(norm):
        return {"e": "clip", "site": ["/w/t.py", 9], "index": 0, "sharded": 6, "norm": norm, "norm_type": 2.0}

    job = collect(_events(tmp_path, {0: [clip(3.0)], 1: [clip(4.0)]}), 2)
    assert [h.rule for h in job.hazards] == ["FSD102"]
    assert "the norm over all shards is 5.0000" in job.hazards[0].evidence[0]


def test_full_copy_in_host_memory_on_every_rank_is_fsd006(tmp_path):
    def exit_row(host):
        return {"e": "summon_exit", "site": ["/w/t.py", 4], "index": 0, "options": {"offload_to_cpu": True},
                "full_bytes": 4 << 20, "host_bytes": host, "host_growth": host}

    job = collect(_events(tmp_path, {0: [exit_row(4 << 20)], 1: [exit_row(4 << 20)]}), 2)
    assert [(h.rule, sorted(h.ranks)) for h in job.hazards] == [("FSD006", [0, 1])]
    assert "held 4.00 MiB of full parameters in host memory" in job.hazards[0].evidence[0]
    assert not collect(_events(tmp_path, {0: [exit_row(4 << 20)], 1: [exit_row(0)]}), 2).hazards


def test_collective_on_one_rank_explains_the_hang(tmp_path):
    save = {"e": "collective", "api": "state_dict", "site": ["/w/t.py", 15], "index": 0}
    (tmp_path / "rank0.stacks.txt").write_text("Thread 0x1 (most recent call first):\n")
    job = collect(_events(tmp_path, {0: [save], 1: []}, hung=True), 2)
    assert [(h.rule, h.site) for h in job.hazards] == [("FSD104", ("/w/t.py", 15))]
    assert "1 time(s) by rank 0, 0 time(s) by rank 1" in job.hazards[0].evidence[0]
    assert job.error is None
    assert job.stacks == [str(tmp_path / "rank0.stacks.txt")]


def test_hang_without_a_one_rank_collective_is_error(tmp_path):
    both = {"e": "collective", "api": "barrier", "site": ["/w/t.py", 15], "index": 0}
    job = collect(_events(tmp_path, {0: [both], 1: [both]}, hung=True), 2)
    assert not job.hazards
    assert job.error and "stopped making progress" in job.error


def test_unrelated_exception_is_error_and_hazard_exception_is_not(tmp_path):
    crash = {"e": "exception", "rule": None, "site": ["/w/t.py", 3], "message": "KeyError: 'lr'",
             "traceback": "Traceback (most recent call last):\nKeyError: 'lr'\n"}
    job = collect(_events(tmp_path, {0: [crash], 1: [crash]}, exits={0: 1, 1: 1}), 2)
    assert job.error == "rank 0: KeyError: 'lr'" and "KeyError" in job.error_traceback
    hazard = dict(crash, rule="FSD004", message="NotImplementedError: writeback=True and rank0_only=True is not "
                  "supported yet")
    job = collect(_events(tmp_path, {0: [hazard], 1: [hazard]}, exits={0: 1, 1: 1}), 2)
    assert job.error is None
    assert [(h.rule, sorted(h.ranks)) for h in job.hazards] == [("FSD004", [0, 1])]


def test_join_verdicts_and_missed(tmp_path):
    rows = [
        {"e": "hazard", "rule": "FSD012", "site": ["/w/a.py", 12], "evidence": "never entered"},
        {"e": "summon_enter", "site": ["/w/a.py", 20], "index": 0},
        {"e": "summon_exit", "site": ["/w/a.py", 20], "index": 0, "shard_changed": False, "wrote": False},
        {"e": "hazard", "rule": "FSD001", "site": ["/w/b.py", 5], "evidence": "shard changed"},
    ]
    job = collect(_events(tmp_path, {0: rows}), 1)
    findings = [
        _finding("FSD012", "/w/a.py", 11, 13),  # multi-line call: any of its rows matches
        _finding("FSD001", "/w/a.py", 20),
        _finding("FSD004", "/w/a.py", 30),
    ]
    v = join(findings, job)
    assert [r.verdict for r in v.results] == [CONFIRMED, RAN_CLEAN, NOT_REACHED]
    assert [(h.rule, h.site) for h in v.missed] == [("FSD001", ("/w/b.py", 5))]
    assert exit_status(v) == 1
    info = RunInfo("a.py", "2.13.0", 1, "gloo", "cpu", str(tmp_path), 1.0)
    text = render(v, info, "text")
    assert "FSD012 CONFIRMED" in text and MISSED in text and "b.py:5: FSD001" in text
    assert json.loads(render(v, info, "json"))["summary"] == {
        CONFIRMED: 1, RAN_CLEAN: 1, NOT_REACHED: 1, ERROR: 0, MISSED: 1}


def test_ran_clean_needs_the_rules_observation_window(tmp_path):
    """A site that appears in the events is not RAN CLEAN until the moment its hazard would
    show was reached: the optimizer's first step (FSD101), the summon block's exit (FSD001,
    FSD004), three optimizer steps (FSD002), every rank's clip (FSD102)."""
    crash = {"e": "exception", "rule": None, "site": ["/w/t.py", 10],
             "message": "RuntimeError: FSDP needs a non-CPU accelerator device, but no accelerator device is detected.",
             "traceback": "Traceback (most recent call last):\nRuntimeError: FSDP needs a non-CPU accelerator device\n"}
    rows = [
        {"e": "optimizer", "site": ["/w/t.py", 9], "kind": "SGD"},
        {"e": "summon_enter", "site": ["/w/t.py", 20], "index": 0, "options": {"writeback": True}},
        {"e": "summon_enter", "site": ["/w/t.py", 30], "index": 0, "options": {"writeback": True}},
        {"e": "summon_exit", "site": ["/w/t.py", 30], "index": 0, "options": {"writeback": True}},  # no checksums
        {"e": "clip", "site": ["/w/t.py", 40], "index": 0, "sharded": 0, "count": 4},
        crash,
    ]
    findings = [_finding("FSD101", "/w/t.py", 9), _finding("FSD001", "/w/t.py", 20),
                _finding("FSD004", "/w/t.py", 20), _finding("FSD001", "/w/t.py", 30),
                _finding("FSD004", "/w/t.py", 30), _finding("FSD002", "/w/t.py", 30),
                _finding("FSD102", "/w/t.py", 40), _finding("FSD107", "/w/t.py", 10)]
    job = collect(_events(tmp_path, {0: rows, 1: rows}, exits={0: 1, 1: 1}), 2)
    assert job.error and "FSDP needs a non-CPU accelerator device" in job.error
    v = join(findings, job)
    verdicts = {(r.finding.code, r.finding.location.row): r.verdict for r in v.results}
    assert verdicts == {
        ("FSD101", 9): ERROR,  # built, never stepped: the job died at the wrap
        ("FSD001", 20): ERROR, ("FSD004", 20): ERROR,  # entered, never exited
        ("FSD001", 30): ERROR,  # exited, but without the shard checksums FSD001 is measured by
        ("FSD004", 30): RAN_CLEAN,  # the entry validated the options: FSD004's window
        ("FSD002", 30): ERROR,  # 0 optimizer steps
        ("FSD102", 40): ERROR,  # no sharded parameters clipped
        ("FSD107", 10): ERROR,  # the crash line: the layer does not observe FSD107
    }
    error = next(r for r in v.results if r.finding.code == "FSD101")
    assert "first step of the optimizer" in error.evidence[0]
    assert "FSDP needs a non-CPU accelerator device" in error.evidence[0]
    text = render(v, RunInfo("t.py", "2.13.0", 2, "gloo", "cpu", str(tmp_path), 1.0), "text")
    assert "FSD101 ERROR" in text and "FSD101 RAN CLEAN" not in text and "FSD001 RAN CLEAN" not in text

    # the same sites in a job that ended normally before the window: NOT REACHED, said why
    clean = [row for row in rows if row is not crash] + [{"e": "exit", "code": 0}]
    v = join(findings[:1], collect(_events(tmp_path, {0: clean, 1: clean}), 2))
    assert [r.verdict for r in v.results] == [NOT_REACHED]
    assert "the site ran, but never reached the first step" in v.results[0].evidence[0]

    # and once the windows are reached, RAN CLEAN
    stepped = [
        {"e": "optimizer", "site": ["/w/t.py", 9], "kind": "SGD"},
        {"e": "first_step", "site": ["/w/t.py", 9], "wrapped": True},
        *_steps(3),
        {"e": "summon_exit", "site": ["/w/t.py", 30], "index": 0, "shard_changed": False, "wrote": False},
        {"e": "exit", "code": 0},
    ]
    v = join([_finding("FSD101", "/w/t.py", 9), _finding("FSD001", "/w/t.py", 30), _finding("FSD002", "/w/t.py", 30)],
             collect(_events(tmp_path, {0: stepped, 1: stepped}), 2))
    assert [r.verdict for r in v.results] == [RAN_CLEAN] * 3


def test_gloo_abort_on_a_collective_mismatch_is_explained_by_the_one_rank_collective(tmp_path):
    """gloo kills the rank that receives a different collective (SIGABRT, its text only in the
    log); the summon rank 0 alone entered is FSD104, not an unexplained ERROR."""
    summon = {"e": "summon_enter", "site": ["/w/helpers.py", 7], "index": 0}
    gather = {"e": "collective", "api": "all_gather", "site": ["/w/t.py", 19], "index": 0}
    reset = {"e": "exception", "rule": None, "site": ["/w/helpers.py", 7],
             "message": "RuntimeError: [pair.cc:537] Read error: Connection reset by peer."}
    outcome = _events(tmp_path, {0: [summon, reset, {"e": "exit", "code": 1}], 1: [gather]})
    outcome.ranks[0].terminated, outcome.ranks[0].returncode, outcome.ranks[0].signal = True, -15, "SIGTERM"
    outcome.ranks[1].returncode, outcome.ranks[1].signal = -6, "SIGABRT"
    (tmp_path / "rank1.log").write_text(
        "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n  what():  [enforce fail at "
        "gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. 4290 vs 2. Received data size doesn't "
        "match expected size. Is there a distributed collective mismatch in your code?\nFatal Python error: Aborted\n")
    job = collect(outcome, 2)
    assert job.error is None, job.error
    assert [end.state for end in job.ranks] == ["terminated", "communication"]
    v = join([], job)
    assert ("FSD104", ("/w/helpers.py", 7)) in [(h.rule, h.site) for h in v.missed]
    assert exit_status(v) == 1


def test_sarif_output_is_valid(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    rows = [{"e": "hazard", "rule": "FSD001", "site": ["/w/b.py", 5], "evidence": "shard changed"}]
    v = join([_finding("FSD012", "/w/a.py", 11)], collect(_events(tmp_path, {0: rows}), 1))
    sarif = to_sarif(v, RunInfo("a.py", "2.13.0", 1, "gloo", "cpu", str(tmp_path), 1.0))
    schema = json.loads((ROOT / "tests" / "data" / "sarif-2.1.0.json").read_text())
    jsonschema.validate(sarif, schema)
    assert [(r["ruleId"], r["properties"]["verdict"], r["level"]) for r in sarif["runs"][0]["results"]] == [
        ("FSD012", NOT_REACHED, "note"), ("FSD001", MISSED, "error")]


# -- the runtime layer, in this process (no torchrun, nothing patched) --------------------


def _layer_events(tmp_path):
    return [json.loads(line) for line in (tmp_path / "rank0.events.jsonl").read_text().splitlines()]


def test_layer_attributes_aftermath_exceptions_to_the_call_that_caused_them(tmp_path):
    pytest.importorskip("torch")
    from fsdp_lint.verify.program.observe import Layer

    layer = Layer(str(tmp_path), 0, None, True)
    layer.offload_move_site = ("/w/train.py", 13)
    layer.freed_site = ("/w/train.py", 20)
    for text in (
        "An FSDP-managed module with parameter CPU offloading enabled has parameters on cuda:0. Make sure to not "
        "move the module from CPU when offloading parameters.",
        "Output 0 of Split is a view and is being modified inplace. This view is the output of a function that "
        "returns multiple views.",
        "the data loader ran dry",
    ):
        try:
            raise RuntimeError(text)
        except RuntimeError as exc:
            here = exc.__traceback__.tb_lineno
            layer.exception(exc)
    rows = _layer_events(tmp_path)
    assert [(r["rule"], r["site"]) for r in rows] == [
        ("FSD103", ["/w/train.py", 13]), ("FSD003", ["/w/train.py", 20]), (None, [__file__, here])]
    assert rows[0]["also"] == [[__file__, here]]
    assert "observe.py" not in rows[2]["traceback"] and "the data loader ran dry" in rows[2]["traceback"]


def test_summon_created_and_never_entered_is_recorded_once_dropped(tmp_path):
    pytest.importorskip("torch")
    from fsdp_lint.verify.program.observe import Layer, ObservedSummon

    layer = Layer(str(tmp_path), 0, None, True)
    entered = ObservedSummon(layer, None, (), {}, ("/w/t.py", 5))
    entered.entered = True  # as __enter__ marks it
    ObservedSummon(layer, None, (), {"writeback": False}, ("/w/t.py", 9))  # a bare statement: dropped at once
    del entered
    assert [(r["rule"], r["site"]) for r in _layer_events(tmp_path)] == [("FSD012", ["/w/t.py", 9])]


def _fake_offloaded_summon(tmp_path, monkeypatch, *, offload_params, block):
    """One ``summon_full_params`` of a module whose FSDP unit keeps its shard in host memory
    for a GPU (CPUOffload(offload_params=True)), FSDP itself replaced by a no-op context."""
    torch = pytest.importorskip("torch")
    from contextlib import nullcontext
    from types import SimpleNamespace

    from fsdp_lint.verify.program.observe import Layer, ObservedSummon

    tmp_path.mkdir(exist_ok=True)
    module = torch.nn.Linear(16, 16)
    flat = torch.zeros(4096)
    flat._local_shard = flat
    handle = SimpleNamespace(flat_param=flat, _offload_params=offload_params, device=torch.device("cuda", 0))
    layer = Layer(str(tmp_path), 0, None, True)
    monkeypatch.setattr(layer, "fsdp1_handles", lambda m, recurse=True: [handle])
    summon = ObservedSummon(layer, lambda *a, **k: nullcontext(), (module,), {}, ("/w/train.py", 7))
    with summon:
        block(module)
    return [r for r in _layer_events(tmp_path) if r.get("rule")]


def test_read_only_writeback_summon_under_real_cpu_offload_is_fsd001(tmp_path, monkeypatch):
    rows = _fake_offloaded_summon(tmp_path, monkeypatch, offload_params=True, block=lambda m: m.weight.sum())
    assert [(r["rule"], r["site"]) for r in rows] == [("FSD001", ["/w/train.py", 7])]
    assert "copied its 0.02 MiB slice back into its host-resident shards" in rows[0]["evidence"]


def test_writeback_summon_that_edits_or_has_no_offload_is_not_fsd001(tmp_path, monkeypatch):
    def edit(m):
        with __import__("torch").no_grad():
            m.weight.add_(1.0)

    assert _fake_offloaded_summon(tmp_path / "a", monkeypatch, offload_params=True, block=edit) == []
    assert _fake_offloaded_summon(tmp_path / "b", monkeypatch, offload_params=False, block=lambda m: m.weight.sum()) == []
