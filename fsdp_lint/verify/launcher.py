"""Start a program under torchrun and collect each rank's outcome: exit status or signal,
its report (``rank<N>.json``), its log, and at a timeout its stack (``faulthandler``).

One node: ``torchrun --standalone --nproc_per_node=N``.  Several nodes: ``--nnodes``,
``--node-rank``, ``--rdzv-backend``, ``--rdzv-endpoint`` and ``--rdzv-id`` go to torchrun as
given (torchrun and its rendezvous are the distributed engine); each node collects the
ranks that ran on it.  Each job is torchrun's own ``main``, run in a child of a host process
that imported torchrun once per interpreter (``torchrun_host``: about 2 CPU seconds less per
job), or as ``python -m torch.distributed.run`` where that host is switched off or cannot run.

torchrun runs in a process group of its own.  At the timeout every local rank's program
gets SIGUSR1 (its stack is dumped into its log), then the whole group SIGTERM, then
SIGKILL, so a hung collective never outlives the verifier.  The same stop happens when the
verifier itself is interrupted (Ctrl-C, SIGTERM): the exception goes on after the stop.

A hang is also found before the timeout, on CPU (gloo) and one node, where it can be proved
(``ProgressWatch``): every local rank that is still alive has used less than 2% of a CPU
for ``QUIET_WINDOW`` seconds (its whole process tree, every thread, from ``/proc``), no
thread of it is in uninterruptible I/O or stopped, and its stack dump shows its main thread
waiting inside ``torch.distributed``.  A gloo collective's work is done by the CPUs of
these processes: with every rank waiting in one and none computing, none can ever return.
The job is then stopped as at the timeout, and the outcome says which of the two decided
(``ProgramOutcome.hang_decided``).  Without ``/proc``, on GPUs (a rank may wait on its GPU
with an idle CPU) or over several nodes (the other nodes' ranks are not visible here), only
the timeout decides.

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

from fsdp_lint.verify import torchrun_host
from fsdp_lint.verify.logs import failure_line
from fsdp_lint.verify.stacks import all_dumps, waits_in_torch_distributed

# NVLink multicast stays off: a program that uses it can take a shared host's GPUs down.
SAFE_GPU_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
DUMP_MARK = "(most recent call first)"

# Early hang detection (``ProgressWatch``).  A rank blocked in a gloo collective uses about
# 0.5% of a CPU (torch's background threads: measured 1 clock tick per ~2 s on torch 2.13);
# a rank doing any work, even on an oversubscribed machine, uses many times 2%.  Five
# seconds of that quiet is many scheduler periods: a runnable rank starved of the CPU shows
# in state R and in its clock ticks long before.  The stack check makes a quiet rank that
# sleeps, reads a file or waits for anything other than a peer never count as hung.
QUIET_WINDOW = 5.0
QUIET_CPU_SHARE = 0.02
POLL_SECONDS = 0.5
MAX_PROBES = 3  # stack dumps of a quiet job that turned out not to be hung: then only the timeout

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
    hung: bool = False  # still running when the hang was decided (the timeout, or no progress)
    report: Optional[dict] = None
    log_path: str = ""
    hung_why: str = "killed at the timeout"  # how it was stopped, when hung

    def log_text(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""

    def describe(self) -> str:
        if self.hung:
            return f"hung, {self.hung_why}"
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
    # how a hang (``timed_out``) was decided: "the 60 s timeout", or "no rank progressed for 5 s"
    hang_decided: str = ""

    @property
    def early_hang(self) -> bool:
        """Stopped as hung before the timeout (``ProgressWatch``)."""
        return self.timed_out and self.hang_decided.startswith("no rank progressed")

    def hang_words(self) -> str:
        """``at the 60 s timeout`` or ``no rank progressed for 5 s``: what stopped a hung job."""
        if self.early_hang:
            return self.hang_decided
        seconds = f"{self.timeout:.0f} s " if self.timeout else ""
        return f"at the {seconds}timeout"

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
    quiet: float = QUIET_WINDOW,
) -> ProgramOutcome:
    """Run ``program`` under torchrun until it ends, ``timeout`` seconds pass, or (CPU, one
    node, ``quiet`` > 0) it is proved hung after ``quiet`` seconds without progress."""
    os.makedirs(log_dir, exist_ok=True)
    python = python or sys.executable
    topology = topology or Topology(nproc=nproc)
    outcome = ProgramOutcome(program, log_dir, timeout=timeout)
    run_env = child_env(
        python,
        os.path.dirname(os.path.abspath(log_dir)),
        {"FSDP_LINT_BACKEND": backend, "FSDP_LINT_DEVICE": device, "FSDP_LINT_RESULT_DIR": log_dir, **(env or {})},
    )
    torchrun_args = [*topology.torchrun_args(index, tag), "-m", "fsdp_lint.verify.rank_shim", program, log_dir]
    start = time.monotonic()
    deadline = None
    launcher_path = os.path.join(log_dir, "launcher.log")
    with open(launcher_path, "wb") as launcher_log:
        try:
            # torchrun's main in a child of a process that imported it once (``torchrun_host``),
            # else the command
            proc = torchrun_host.start(
                python, child_env(python, os.path.dirname(os.path.abspath(log_dir))), torchrun_args, run_env,
                launcher_path,
            ) or subprocess.Popen(
                [python, "-m", "torch.distributed.run", *torchrun_args], stdout=launcher_log,
                stderr=subprocess.STDOUT, env=run_env, start_new_session=True,
            )
        except OSError as exc:
            outcome.launcher_error = f"cannot start torchrun: {exc}"
            return outcome
        watch = None
        if quiet and device == "cpu" and not topology.multi_node and ProgressWatch.available():
            watch = ProgressWatch(log_dir, _local_ranks(log_dir, topology), quiet)
        try:
            hang = _wait(proc, start + timeout, watch, log_dir)
            if hang is not None:
                outcome.timed_out = True
                outcome.hang_decided = hang or f"the {timeout:.0f} s timeout"
                deadline = time.time()
                if not hang:  # at the timeout; a hang found early has its stacks already
                    dump_stacks(log_dir)
                stop_group(proc)
        except BaseException:  # Ctrl-C, SIGTERM: no torchrun job or rank outlives the verifier
            stop_group(proc)
            raise
    outcome.seconds = time.monotonic() - start
    for rank in _local_ranks(log_dir, topology):
        outcome.ranks.append(_rank_outcome(log_dir, rank, deadline))
        if outcome.early_hang:
            outcome.ranks[-1].hung_why = f"stopped after {outcome.hang_decided}"
    if not outcome.timed_out and all(r.returncode is None for r in outcome.ranks):
        with open(os.path.join(log_dir, "launcher.log"), encoding="utf-8", errors="replace") as handle:
            tail = [line for line in handle.read().splitlines() if line.strip()][-3:]
        outcome.launcher_error = f"torchrun exited {proc.returncode} before any rank ran: " + " | ".join(tail)
    return outcome


def _wait(proc: subprocess.Popen, end: float, watch: Optional["ProgressWatch"], log_dir: str) -> Optional[str]:
    """Wait for torchrun to exit: None when it did; "" at the timeout (``end``, monotonic);
    how the hang was decided when ``watch`` proved it earlier."""
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return ""
        try:
            proc.wait(timeout=min(POLL_SECONDS, left) if watch else left)
            return None
        except subprocess.TimeoutExpired:
            pass
        if watch is None:
            continue
        quiet = watch.quiet_for(time.monotonic())
        if quiet is None:
            continue
        dump_stacks(log_dir)
        if watch.confirmed():
            return f"no rank progressed for {quiet:.0f} s"
        watch.not_hung(time.monotonic())


class ProgressWatch:
    """Decides, from ``/proc``, whether a CPU job's local ranks have stopped making progress.

    ``quiet_for(now)`` says for how long every live rank has been quiet (less than
    ``QUIET_CPU_SHARE`` of a CPU over its process tree, no thread in state D or T), once that
    is at least the window and every rank has started; the launcher then dumps the stacks
    and ``confirmed()`` checks that every live rank's main thread waits in torch.distributed.
    A quiet job that is not hung (sleeping, reading) backs off: the window doubles, and after
    ``MAX_PROBES`` the timeout alone decides."""

    def __init__(self, log_dir: str, ranks: Sequence[int], window: float = QUIET_WINDOW):
        self.log_dir = log_dir
        self.ranks = list(ranks)
        self.window = window
        self.hz = os.sysconf("SC_CLK_TCK")
        self.samples: Dict[int, List[Tuple[float, int]]] = {}
        self.first: Dict[int, int] = {}
        self.probes = 0
        self.alive: List[int] = []

    @staticmethod
    def available() -> bool:
        try:
            return os.path.isdir("/proc/self/task") and os.sysconf("SC_CLK_TCK") > 0
        except (OSError, ValueError, AttributeError):
            return False

    def quiet_for(self, now: float) -> Optional[float]:
        if self.probes >= MAX_PROBES:
            return None
        alive = []
        for rank in self.ranks:
            if os.path.exists(os.path.join(self.log_dir, f"rank{rank}.exit.json")):
                self.samples.pop(rank, None)
                continue
            pid = _read_pid(os.path.join(self.log_dir, f"rank{rank}.pid"))
            if pid is None:  # not started yet: nothing to judge
                self.samples.clear()
                return None
            usage = _tree_usage(pid)
            if usage is None:  # ending now: its exit record follows
                self.samples.clear()
                return None
            ticks, busy = usage
            self.first.setdefault(rank, ticks)
            history = self.samples.setdefault(rank, [])
            if busy:  # doing I/O or stopped: not waiting on a peer
                history.clear()
            history.append((now, ticks))
            while len(history) > 1 and history[1][0] <= now - self.window:
                history.pop(0)
            alive.append(rank)
        self.alive = alive
        if not alive or not any(self.samples[r][-1][1] > self.first[r] for r in alive):
            return None  # no rank left to wait, or none past its start
        allowed = QUIET_CPU_SHARE * self.window * self.hz
        quiet = []
        for rank in alive:
            (since, ticks), (_, last) = self.samples[rank][0], self.samples[rank][-1]
            if now - since < self.window or last - ticks >= allowed:
                return None
            quiet.append(now - since)
        return min(quiet)

    def confirmed(self) -> bool:
        """Every rank alive when the stacks were asked for is still alive and waits in a
        torch.distributed call (its last stack dump)."""
        for rank in self.alive:
            if os.path.exists(os.path.join(self.log_dir, f"rank{rank}.exit.json")):
                return False
            try:
                with open(os.path.join(self.log_dir, f"rank{rank}.log"), encoding="utf-8", errors="replace") as handle:
                    text = handle.read()
            except OSError:
                return False
            if not waits_in_torch_distributed(text):
                return False
        return True

    def not_hung(self, now: float) -> None:
        self.probes += 1
        self.window *= 2
        for history in self.samples.values():
            del history[:-1]


def _tree_usage(pid: int) -> Optional[Tuple[int, bool]]:
    """(clock ticks used by ``pid`` and its descendants, every thread; whether any thread of
    them is in uninterruptible I/O or stopped), or None when ``pid`` is gone."""
    children: Dict[int, List[int]] = {}
    stats: Dict[int, List[str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat_fields(f"/proc/{name}/stat")
        if fields is None:
            continue
        stats[int(name)] = fields
        children.setdefault(int(fields[1]), []).append(int(name))
    if pid not in stats or stats[pid][0] == "Z":
        return None
    ticks, busy, todo = 0, False, [pid]
    while todo:
        current = todo.pop()
        fields = stats.get(current)
        if fields is None:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime + stime: every thread of the process
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            tasks = []
        for task in tasks:
            state = _stat_fields(f"/proc/{current}/task/{task}/stat")
            if state is not None and state[0] in ("D", "T", "t"):
                busy = True
        todo.extend(children.get(current, []))
    return ticks, busy


def _stat_fields(path: str) -> Optional[List[str]]:
    """The fields of a ``/proc/.../stat`` after the command name (state first)."""
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    _, _, rest = text.rpartition(")")
    fields = rest.split()
    return fields if len(fields) > 12 else None


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
        path = os.path.join(log_dir, f"rank{match.group(1)}.log")
        before = _dumps(path)
        if not _catches(pid, signal.SIGUSR1):
            continue  # still starting (faulthandler not registered yet): the signal would kill it
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError:
            continue
        waiting.append((path, before))
    end = time.monotonic() + wait
    while waiting and time.monotonic() < end:
        waiting = [(path, before) for path, before in waiting if _dumps(path) <= before]
        if waiting:
            time.sleep(0.2)


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (its ``SigCgt`` mask in
    /proc/PID/status).  A rank's program registers faulthandler for SIGUSR1 as it starts;
    before that (a slow start on a loaded machine) SIGUSR1's default action ends it.
    Without /proc the answer is yes, as before."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return True


def _dumps(path: str) -> int:
    """How many stack dumps the log holds (a job can be asked more than once)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return len(all_dumps(handle.read()))
    except OSError:
        return 0


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
