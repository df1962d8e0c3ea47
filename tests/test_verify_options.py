"""``fsdp-lint verify`` options that are decided before anything runs (no torch needed)."""

from fsdp_lint.verify.launcher import Topology
from fsdp_lint.verify.logs import failure_line, is_warning_line


def test_one_node_is_standalone():
    assert Topology(nproc=2).torchrun_args(3, "FSD001-flagged") == ["--standalone", "--nproc_per_node=2"]


def test_several_nodes_pass_through_to_torchrun_one_port_and_run_id_per_program():
    topology = Topology(nproc=4, nnodes=2, node_rank=1, rdzv_backend="c10d", rdzv_endpoint="head:29500",
                        rdzv_id="job7")
    assert topology.world_size == 8 and topology.multi_node
    assert topology.torchrun_args(3, "FSD102-fixed") == [
        "--nnodes=2", "--nproc_per_node=4", "--node-rank=1", "--rdzv-backend=c10d",
        "--rdzv-endpoint=head:29503", "--rdzv-id=job7-FSD102-fixed",
    ]
    defaults = Topology(nproc=1, nnodes=2, rdzv_endpoint="10.0.0.1:29400").torchrun_args(0, "FSD004-flagged")
    assert "--rdzv-backend=c10d" in defaults and "--rdzv-id=fsdp-lint-verify-FSD004-flagged" in defaults
    assert not any(a.startswith("--node-rank") for a in defaults)


def test_several_nodes_need_an_endpoint(cli):
    result = cli("verify", "FSD004", "--nnodes", "2")
    assert result.returncode == 2 and "--rdzv-endpoint" in result.stderr


def test_bad_values_are_usage_errors(cli):
    for args in (["--nproc", "0"], ["--timeout", "-1"], ["--nnodes", "x"]):
        result = cli("verify", "FSD004", *args)
        assert result.returncode == 2, args


def test_warning_lines():
    assert is_warning_line("/t/fsdp/_unshard_param_utils.py:290: UserWarning: offload_to_cpu=True and ...")
    assert is_warning_line("  warnings.warn(")
    assert not is_warning_line("[rank0]: RuntimeError: setStorage: sizes [4096] ... storage of size 0")
    assert failure_line("RuntimeError: a\nFutureWarning: b\n[W] destroy_process_group() was not called\n") == (
        "RuntimeError: a"
    )


def test_verify_help_lists_every_option_the_command_accepts(cli):
    """`verify --help` left out `--program`, `-m`, `--steps`, `--src`, `--no-checksums` and
    `--format sarif` (the --program mode's parser): every option string and choice of both
    parsers must be in it."""
    from fsdp_lint.verify.command import _parser
    from fsdp_lint.verify.program.options import program_parser

    result = cli("verify", "--help")
    assert result.returncode == 0
    for parser in (_parser(), program_parser()):
        for action in parser._actions:
            for option in action.option_strings:
                assert option in result.stdout, option
            for choice in action.choices or ():
                assert str(choice) in result.stdout, (action.option_strings, choice)
    for needed in ("--program", "-m MODULE", "--steps", "--src", "--no-checksums", "sarif", "--verbose"):
        assert needed in result.stdout, needed
    assert "go to torchrun" in result.stdout


def test_skipped_reason_is_one_short_line_unless_verbose(cli, tmp_path):
    """A SKIPPED reason with source citations (accelerate's FSDP plugin on CPU) is shortened
    to its first clause in the text table; --verbose and --format json keep it whole."""
    import json

    import pytest

    pytest.importorskip("torch")
    from fsdp_lint.scenarios.registry import ACCELERATE_FSDP_NEEDS_AN_ACCELERATOR as WHY

    short = "accelerate 1.15.0 enables its FSDP plugin only over an accelerator's process group"
    table = cli("verify", "FSD101", "--form", "accelerate", "--log-dir", tmp_path / "a")
    assert table.returncode == 0, table.stderr
    [row] = [line for line in table.stdout.splitlines() if line.startswith("| FSD101 (accelerate)")]
    assert row.endswith(f"| SKIPPED ({short}) |") and "state.py" not in table.stdout
    assert "--verbose" in table.stderr
    verbose = cli("verify", "FSD101", "--form", "accelerate", "--verbose", "--log-dir", tmp_path / "b")
    assert f"SKIPPED ({WHY})" in verbose.stdout
    data = json.loads(cli("verify", "FSD101", "--form", "accelerate", "--format", "json",
                          "--log-dir", tmp_path / "c").stdout)
    assert [r["reason"] for r in data["results"]] == [WHY]


def test_observe_lines_name_each_programs_layer_verdicts():
    """``verify --observe`` in text: one line per program with the layer's verdicts."""
    from fsdp_lint.rules import lookup
    from fsdp_lint.verify.command import layer_lines
    from fsdp_lint.verify.judge import Judgement

    def report(findings, missed=(), status="OK"):
        return {"job": {"status": status}, "missed": list(missed), "findings": [
            {"code": code, "verdict": verdict, "location": {"row": row}} for code, verdict, row in findings
        ]}

    j = Judgement("CONFIRMED", "x", "y")
    j.layer = {"flagged": report([("FSD001", "CONFIRMED", 27)]), "fixed": report([], status="ERROR")}
    plain = Judgement("CONFIRMED", "x", "y")
    lines = layer_lines([(lookup("FSD001"), j, None), (lookup("FSD002"), plain, None)])
    assert lines == [
        "[FSD001] runtime layer, flagged program: FSD001 CONFIRMED at line 27",
        "[FSD001] runtime layer, fixed program (job ERROR): no finding",
    ]
