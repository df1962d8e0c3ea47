"""Start a program under torchrun and collect each rank's outcome: exit status or signal,
its report (``rank<N>.json``), its log, and at a timeout its stack (``faulthandler``).

One node: ``torchrun --standalone --nproc_per_node=N``.  Several nodes: ``--nnodes``,
``--node-rank``, ``--rdzv-backend``, ``--rdzv-endpoint`` and ``--rdzv-id`` go to torchrun as
given (torchrun and its rendezvous are the distributed engine); each node collects the
ranks that ran on it.

torchrun runs in a process group of its own.  At the timeout every local rank's program
gets SIGUSR1 (its stack is dumped into its log), then the whole group SIGTERM, then
SIGKILL, so a hung collective never outlives the verifier.  The same stop happens when the
verifier itself is interrupted (Ctrl-C, SIGTERM): the exception goes on after the stop.

``probe`` asks an interpreter what its torch is (version, build, CUDA devices) in a child
process: the verifier's own process never imports torch.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from fsdp_lint.verify.logs import failure_line

# NVLink multicast stays off: a program that uses it can take a shared host's GPUs down.
SAFE_GPU_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
DUMP_MARK = "(most recent call first)"

# Run by each interpreter: its torch, and the versions of the distributions named in argv
# (the scenarios' ``packages``) from package metadata, without importing anything of fsdp-lint.
PROBE = """\
import json, platform, sys
from importlib import metadata
import torch
def installed(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
names = []
if torch.cuda.is_available():
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
print(json.dumps({
    "version": torch.__version__, "cuda": torch.version.cuda,
    "git_version": getattr(torch.version, "git_version", None), "debug": bool(torch.version.debug),
    "device_names": names, "cuda_devices": len(names), "python": platform.python_version(),
    "packages": {name: installed(name) for name in sys.argv[1:]},
}))
"""

@dataclass
class Topology:
    """Where the ranks run: ``nproc`` per node; several nodes through torchrun's rendezvous."""

    nproc: int = 2
    nnodes: int = 1
    node_rank: Optional[int] = None
    rdzv_backend: Optional[str] = None
    rdzv_endpoint: Optional[str] = None
    rdzv_id: Optional[str] = None

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1 or self.rdzv_endpoint is not None

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    def torchrun_args(self, index: int = 0, tag: str = "") -> List[str]:
        """torchrun's topology options for the ``index``-th program of this verifier run.

        Each program is its own torchrun job: its rendezvous id gets ``tag`` appended and its
        port is the endpoint's port plus ``index``, so a node that starts the next program
        early never joins the store of the previous one while its host is shutting down."""
        if not self.multi_node:
            return ["--standalone", f"--nproc_per_node={self.nproc}"]
        args = [f"--nnodes={self.nnodes}", f"--nproc_per_node={self.nproc}"]
        if self.node_rank is not None:
            args.append(f"--node-rank={self.node_rank}")
        args.append(f"--rdzv-backend={self.rdzv_backend or 'c10d'}")
        if self.rdzv_endpoint:
            host, _, port = self.rdzv_endpoint.rpartition(":")
            if host and port.isdigit():
                args.append(f"--rdzv-endpoint={host}:{int(port) + index}")
            else:
                args.append(f"--rdzv-endpoint={self.rdzv_endpoint}")
        run_id = self.rdzv_id or "fsdp-lint-verify"
        args.append(f"--rdzv-id={run_id}-{tag}" if tag else f"--rdzv-id={run_id}")
        return args


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
        why = failure_line(self.log_text())
        return f"exit {self.returncode}: {why[:160]}" if why else f"exit {self.returncode}"


@dataclass
class ProgramOutcome:
    program: str
    log_dir: str
    ranks: List[RankOutcome] = field(default_factory=list)
    timed_out: bool = False
    seconds: float = 0.0
    launcher_error: Optional[str] = None
    timeout: float = 0.0

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


def _package_path(python: str, scratch: str) -> str:
    """A folder holding this fsdp_lint package, for another interpreter's PYTHONPATH (a link,
    so that nothing else of this interpreter's site-packages leaks into the other one)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    folder = os.path.join(scratch, "_fsdp_lint_path")
    link = os.path.join(folder, "fsdp_lint")
    if not os.path.islink(link):
        os.makedirs(folder, exist_ok=True)
        os.symlink(package, link)
    return folder


def child_env(python: str, scratch: str, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(SAFE_GPU_ENV)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    if os.path.abspath(python) != os.path.abspath(sys.executable):  # venvs: links to one binary
        env["PYTHONPATH"] = os.pathsep.join(
            [_package_path(python, scratch)] + [p for p in [env.get("PYTHONPATH")] if p]
        )
    env.update(extra or {})
    return env


def probe(python: str, scratch: str, packages: Sequence[str] = ()) -> Tuple[Optional[dict], Optional[str]]:
    """(what the interpreter's torch says about itself and which version of each of
    ``packages`` it has, or why it cannot say): the verifier's own process never imports torch."""
    try:
        done = subprocess.run(
            [python, "-c", PROBE, *packages], capture_output=True, text=True, timeout=300,
            env=child_env(python, scratch),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"cannot run {python}: {exc}"
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return None, f"torch is not importable by {python} ({lines[-1].strip() if lines else done.returncode})"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]), None


def launch(
    program: str,
    log_dir: str,
    nproc: int = 2,
    backend: str = "gloo",
    device: str = "cpu",
    timeout: float = 180.0,
    env: Optional[Dict[str, str]] = None,
    python: Optional[str] = None,
    topology: Optional[Topology] = None,
    index: int = 0,
    tag: str = "",
) -> ProgramOutcome:
    os.makedirs(log_dir, exist_ok=True)
    python = python or sys.executable
    topology = topology or Topology(nproc=nproc)
    outcome = ProgramOutcome(program, log_dir, timeout=timeout)
    run_env = child_env(
        python,
        os.path.dirname(os.path.abspath(log_dir)),
        {"FSDP_LINT_BACKEND": backend, "FSDP_LINT_DEVICE": device, "FSDP_LINT_RESULT_DIR": log_dir, **(env or {})},
    )
    command = [
        python, "-m", "torch.distributed.run", *topology.torchrun_args(index, tag),
        "-m", "fsdp_lint.verify.rank_shim", program, log_dir,
    ]
    start = time.monotonic()
    deadline = None
    with open(os.path.join(log_dir, "launcher.log"), "wb") as launcher_log:
        try:
            proc = subprocess.Popen(
                command, stdout=launcher_log, stderr=subprocess.STDOUT, env=run_env, start_new_session=True
            )
        except OSError as exc:
            outcome.launcher_error = f"cannot start torchrun: {exc}"
            return outcome
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            outcome.timed_out = True
            deadline = time.time()
            dump_stacks(log_dir)
            stop_group(proc)
        except BaseException:  # Ctrl-C, SIGTERM: no torchrun job or rank outlives the verifier
            stop_group(proc)
            raise
    outcome.seconds = time.monotonic() - start
    for rank in _local_ranks(log_dir, topology):
        outcome.ranks.append(_rank_outcome(log_dir, rank, deadline))
    if not outcome.timed_out and all(r.returncode is None for r in outcome.ranks):
        with open(os.path.join(log_dir, "launcher.log"), encoding="utf-8", errors="replace") as handle:
            tail = [line for line in handle.read().splitlines() if line.strip()][-3:]
        outcome.launcher_error = f"torchrun exited {proc.returncode} before any rank ran: " + " | ".join(tail)
    return outcome


def _local_ranks(log_dir: str, topology: Topology) -> List[int]:
    """Global ranks that ran here: every rank on one node; on several nodes the ranks whose
    files this node holds (the rendezvous, not ``--node-rank``, assigns them)."""
    if not topology.multi_node:
        return list(range(topology.nproc))
    found = sorted(
        {int(m.group(1)) for name in os.listdir(log_dir) for m in [re.match(r"rank(\d+)\.log$", name)] if m}
    )
    if found:
        return found
    first = (topology.node_rank or 0) * topology.nproc
    return list(range(first, first + topology.nproc))


def _read_pid(path: str) -> Optional[int]:
    try:
        with open(path) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def dump_stacks(log_dir: str, wait: float = 10.0) -> None:
    """Ask every local rank's program for its stack (SIGUSR1 -> faulthandler) and give the
    dumps up to ``wait`` seconds to land in the logs."""
    waiting = []
    for name in sorted(os.listdir(log_dir)):
        match = re.match(r"rank(\d+)\.pid$", name)
        if not match:
            continue
        pid = _read_pid(os.path.join(log_dir, name))
        if pid is None or os.path.exists(os.path.join(log_dir, f"rank{match.group(1)}.exit.json")):
            continue
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError:
            continue
        waiting.append(os.path.join(log_dir, f"rank{match.group(1)}.log"))
    end = time.monotonic() + wait
    while waiting and time.monotonic() < end:
        waiting = [path for path in waiting if not _has_dump(path)]
        if waiting:
            time.sleep(0.2)


def _has_dump(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return DUMP_MARK in handle.read()
    except OSError:
        return False


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to torchrun's whole process group (agent, rank shims, programs), SIGKILL to
    whatever is left of it after a grace period."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except OSError:
        return
    try:
        proc.wait(timeout=10.0)
    except subprocess.TimeoutExpired:
        pass
    end = time.monotonic() + 5.0
    while time.monotonic() < end and _group_alive(proc.pid):
        time.sleep(0.1)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except OSError:
        return False
    return True


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
