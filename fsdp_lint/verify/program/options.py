"""Command line of ``fsdp-lint verify --program``.

    fsdp-lint verify --program train.py [--nproc N] [OPTIONS] [TORCHRUN OPTIONS] [-- ARGS]
    fsdp-lint verify -m package.module  [--nproc N] [OPTIONS] [TORCHRUN OPTIONS] [-- ARGS]

Options this command does not know are torchrun's (``--master-port 29600``,
``--max-restarts 0``, ...): they are handed to torchrun through its ``PET_*`` environment
variables (torchrun reads every option from ``PET_<NAME>``), so the verifier's launcher
needs no change.  ``--standalone`` is always set (one node); ``--nproc-per-node`` is
``--nproc``.  Everything after ``--`` goes to the program.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Dict, List, Optional

REFUSED_TORCHRUN = {"NPROC_PER_NODE": "use --nproc", "STANDALONE": "always set", "NNODES": "one node only"}


class OptionsError(Exception):
    pass


@dataclass
class ProgramOptions:
    program: Optional[str]
    module: Optional[str]
    src: List[str]
    nproc: int
    steps: Optional[int]
    timeout: float
    output_format: str
    log_dir: Optional[str]
    checksums: bool
    device: Optional[str]
    backend: Optional[str]
    report: Optional[str] = None
    program_args: List[str] = field(default_factory=list)
    torchrun_env: Dict[str, str] = field(default_factory=dict)

    @property
    def target(self) -> str:
        return self.module or self.program or ""


def wants_program(argv: List[str]) -> bool:
    """True when ``fsdp-lint verify`` is asked to verify a program rather than the rules."""
    head = argv[: argv.index("--")] if "--" in argv else argv
    return any(a == "--program" or a.startswith("--program=") or a == "-m" for a in head)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fsdp-lint verify --program",
        allow_abbrev=False,
        description="Check a program, run it under torchrun with fsdp-lint's runtime layer, and report for every "
        "finding whether the job hit it (CONFIRMED / RAN CLEAN / NOT REACHED / ERROR), and hazards the check missed.",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--program", help="the training script (as for `torchrun train.py`)")
    target.add_argument("-m", dest="module", metavar="MODULE", help="run a module (as for `torchrun -m pkg.mod`)")
    parser.add_argument("--src", action="append", default=[],
                        help="files or folders to check statically (default: the program's folder); repeatable")
    parser.add_argument("--nproc", type=int, default=2, help="ranks (default 2)")
    parser.add_argument("--steps", type=int, default=None,
                        help="stop the job after this many optimizer steps (default: let it finish)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds before the job is stopped and every rank's stack dumped (default 600)")
    parser.add_argument("--format", dest="output_format", choices=("text", "json", "sarif"), default="text")
    parser.add_argument("--log-dir", default=None, help="where events and each rank's log are kept")
    parser.add_argument("--no-checksums", dest="checksums", action="store_false",
                        help="skip the checks that copy tensors (shard checksums around summon blocks)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="FSDP_LINT_DEVICE for programs built on fsdp-lint's scenario harness (default: cuda "
                        "when enough GPUs are visible, else cpu)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None, help="likewise FSDP_LINT_BACKEND")
    parser.add_argument("--report", metavar="FILE", default=None,
                        help="also write the job as one self-contained HTML page with plots (each finding's "
                        "evidence, when its site ran on each rank, where hung ranks were blocked); needs the "
                        "'report' extra (matplotlib)")
    return parser


def program_parser() -> argparse.ArgumentParser:
    """The parser of ``verify --program`` (``verify --help`` shows its help too)."""
    return _parser()


def _torchrun_env(extra: List[str]) -> Dict[str, str]:
    env: Dict[str, str] = {}
    i = 0
    while i < len(extra):
        item = extra[i]
        if not item.startswith("--"):
            raise OptionsError(f"unexpected argument {item!r} (program arguments go after `--`)")
        name, eq, value = item[2:].partition("=")
        if not eq:
            if i + 1 < len(extra) and not extra[i + 1].startswith("-"):
                value = extra[i + 1]
                i += 1
            else:
                value = "1"
        key = name.replace("-", "_").upper()
        if key in REFUSED_TORCHRUN:
            raise OptionsError(f"--{name}: {REFUSED_TORCHRUN[key]}")
        env["PET_" + key] = value
        i += 1
    return env


def parse(argv: List[str]) -> ProgramOptions:
    if "--" in argv:
        cut = argv.index("--")
        head, program_args = argv[:cut], argv[cut + 1:]
    else:
        head, program_args = argv, []
    args, extra = _parser().parse_known_args(head)
    if args.nproc < 1:
        raise OptionsError("--nproc must be at least 1")
    if args.steps is not None and args.steps < 1:
        raise OptionsError("--steps must be at least 1")
    return ProgramOptions(
        program=args.program,
        module=args.module,
        src=args.src,
        nproc=args.nproc,
        steps=args.steps,
        timeout=args.timeout,
        output_format=args.output_format,
        log_dir=args.log_dir,
        checksums=args.checksums,
        device=args.device,
        backend=args.backend,
        report=args.report,
        program_args=program_args,
        torchrun_env=_torchrun_env(extra),
    )
