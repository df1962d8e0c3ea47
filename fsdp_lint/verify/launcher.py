"""Start a program under ``torchrun --standalone --nproc_per_node=N`` and collect each
rank's outcome: exit status or signal, its report (``rank<N>.json``), its log.

The launcher runs in a process group of its own; at the timeout the whole group gets
SIGTERM, then SIGKILL, so a hung collective never outlives the verifier.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

# NVLink multicast stays off: a program that uses it can take a shared host's GPUs down.
SAFE_GPU_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@dataclass
class RankOutcome:
    rank: int
    returncode: Optional[int] = None  # None: no record (killed before it could write one)
    signal: Optional[str] = None
    terminated: bool = False  # ended by the launcher (another rank failed, or the timeout)
    hung: bool = False  # still running at the timeout
    report: Optional[dict] = None
    log_path: str = ""

    def log_text(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""

    def describe(self) -> str:
        if self.hung:
            return "hung, killed at the timeout"
        if self.signal and not self.terminated:
            return f"killed by {self.signal}"
        if self.terminated:
            return "stopped by the launcher after another rank failed"
        if self.returncode is None:
            return "no exit record"
        if self.returncode == 0:
            return "exit 0"
        last = [line for line in self.log_text().splitlines() if line.strip()]
        return f"exit {self.returncode}: {last[-1].strip()[:160]}" if last else f"exit {self.returncode}"


@dataclass
class ProgramOutcome:
    program: str
    log_dir: str
    ranks: List[RankOutcome] = field(default_factory=list)
    timed_out: bool = False
    seconds: float = 0.0
    launcher_error: Optional[str] = None

    @property
    def clean(self) -> bool:
        return (
            self.launcher_error is None
            and not self.timed_out
            and bool(self.ranks)
            and all(r.returncode == 0 and r.report is not None for r in self.ranks)
        )

    def describe(self) -> str:
        if self.launcher_error:
            return f"launcher error: {self.launcher_error}"
        return "; ".join(f"rank {r.rank}: {r.describe()}" for r in self.ranks)


def launch(
    program: str,
    log_dir: str,
    nproc: int = 2,
    backend: str = "gloo",
    device: str = "cpu",
    timeout: float = 180.0,
    env: Optional[Dict[str, str]] = None,
) -> ProgramOutcome:
    os.makedirs(log_dir, exist_ok=True)
    outcome = ProgramOutcome(program, log_dir)
    child_env = dict(os.environ)
    child_env.update(SAFE_GPU_ENV)
    child_env.update(
        {
            "FSDP_LINT_BACKEND": backend,
            "FSDP_LINT_DEVICE": device,
            "FSDP_LINT_RESULT_DIR": log_dir,
            "OMP_NUM_THREADS": child_env.get("OMP_NUM_THREADS", "1"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    child_env.update(env or {})
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
        "-m", "fsdp_lint.verify.rank_shim", program, log_dir,
    ]
    start = time.monotonic()
    with open(os.path.join(log_dir, "launcher.log"), "wb") as launcher_log:
        try:
            proc = subprocess.Popen(
                command, stdout=launcher_log, stderr=subprocess.STDOUT, env=child_env, start_new_session=True
            )
        except OSError as exc:
            outcome.launcher_error = f"cannot start torchrun: {exc}"
            return outcome
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            outcome.timed_out = True
            deadline = time.time()
            _stop_group(proc)
        else:
            deadline = None
    outcome.seconds = time.monotonic() - start
    for rank in range(nproc):
        outcome.ranks.append(_rank_outcome(log_dir, rank, deadline))
    if not outcome.timed_out and all(r.returncode is None for r in outcome.ranks):
        with open(os.path.join(log_dir, "launcher.log"), encoding="utf-8", errors="replace") as handle:
            tail = [line for line in handle.read().splitlines() if line.strip()][-3:]
        outcome.launcher_error = f"torchrun exited {proc.returncode} before any rank ran: " + " | ".join(tail)
    return outcome


def _stop_group(proc: subprocess.Popen) -> None:
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _rank_outcome(log_dir: str, rank: int, deadline: Optional[float]) -> RankOutcome:
    outcome = RankOutcome(rank, log_path=os.path.join(log_dir, f"rank{rank}.log"))
    record = _read_json(os.path.join(log_dir, f"rank{rank}.exit.json"))
    if record is not None:
        outcome.returncode = record.get("returncode")
        outcome.signal = record.get("signal")
        outcome.terminated = bool(record.get("terminated"))
        if deadline is not None and record.get("ended_at", 0) >= deadline - 0.5:
            outcome.hung = True
    elif deadline is not None:
        outcome.hung = True
    outcome.report = _read_json(os.path.join(log_dir, f"rank{rank}.json"))
    return outcome


def _read_json(path: str):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None
