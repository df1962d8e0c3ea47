"""torchrun jobs started from one process that has imported torchrun already.

Each program the verifier runs is its own torchrun job.  Started as ``python -m
torch.distributed.run``, every job first imports torch in its launcher process (about 2 CPU
seconds, a third of a two-rank CPU job's cost) before it starts the ranks.  A host process
(``HOST``, one per interpreter, started on first use) imports ``torch.distributed.run`` once;
for each job it forks a child that becomes the leader of a new session (as
``start_new_session=True`` makes it), points its standard streams at the job's
``launcher.log``, takes the job's environment and working folder, and calls torchrun's own
``main`` with the job's arguments: the code the ``torchrun`` command runs, the same agent,
rendezvous and rank processes (each rank is a fresh interpreter, as with the command).  The
host reports each child's pid when it starts and its exit status when it ends; ``Job`` gives
the launcher the ``Popen`` calls it uses (``pid``, ``wait``, ``poll``, ``returncode``).

The host runs in a session of its own (a Ctrl-C at the terminal does not reach it), ignores
SIGINT, and exits when its standard input closes (the verifier ended).  Without ``os.fork``
(Windows), with ``FSDP_LINT_TORCHRUN_HOST=0``, or when the host cannot start, each job is
started as ``python -m torch.distributed.run`` instead.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import threading
import time
from typing import Dict, List, Optional

HOST_ENV = "FSDP_LINT_TORCHRUN_HOST"

# Run by the host interpreter (``python -c``); imports nothing of fsdp-lint.  Protocol: one
# JSON job per line on stdin ({"argv", "env", "cwd", "log"}); on stdout "ready", then
# "started PID" for each job in the order received and "exited PID CODE" when it ends.
HOST = r"""
import json, os, select, signal, sys, traceback
signal.signal(signal.SIGINT, signal.SIG_IGN)
import torch.distributed.run as torchrun


def child(job):
    code = 1
    try:
        os.setsid()
        log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.argv = ["torchrun", *job["argv"]]
        try:
            torchrun.main(job["argv"])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def say(line):
    os.write(1, (line + "\n").encode())


say("ready")
buffer, running = b"", set()
while True:
    readable, _, _ = select.select([0], [], [], 0.05 if running else None)
    if readable:
        data = os.read(0, 65536)
        if not data:
            break
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            pid = os.fork()
            if pid == 0:
                child(json.loads(line))
            running.add(pid)
            say(f"started {pid}")
    for pid in list(running):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            running.discard(pid)
            say(f"exited {pid} {os.waitstatus_to_exitcode(status)}")
"""


class Host:
    """One host interpreter and what it has said."""

    def __init__(self, python: str, env: Dict[str, str]):
        self.proc = subprocess.Popen(
            [python, "-c", HOST], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, start_new_session=True,
        )
        self.lock = threading.Lock()
        self.buffer = b""
        self.started: List[int] = []
        self.exits: Dict[int, int] = {}
        self.ended = False
        self.ready = self._read_until(lambda line: line == "ready", 300.0)

    def _lines(self, timeout: float) -> List[str]:
        """Lines the host wrote within ``timeout`` seconds ([] if none; ``ended`` at EOF)."""
        if self.ended:
            return []
        fd = self.proc.stdout.fileno()
        readable, _, _ = select.select([fd], [], [], max(timeout, 0.0))
        if not readable:
            return []
        data = os.read(fd, 65536)
        if not data:
            self.ended = True
            return []
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        return [line.decode() for line in lines]

    def _read_until(self, wanted, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while not self.ended:
            for line in self._lines(end - time.monotonic()):
                kind, _, rest = line.partition(" ")
                if kind == "started":
                    self.started.append(int(rest))
                elif kind == "exited":
                    pid, code = rest.split()
                    self.exits[int(pid)] = int(code)
                if wanted(line):
                    return True
            if time.monotonic() >= end:
                return False
        return False

    def start(self, argv: List[str], env: Dict[str, str], cwd: str, log: str) -> Optional[int]:
        with self.lock:
            if self.ended or self.proc.poll() is not None:
                return None
            job = json.dumps({"argv": argv, "env": env, "cwd": cwd, "log": log})
            try:
                self.proc.stdin.write(job.encode() + b"\n")
                self.proc.stdin.flush()
            except OSError:
                return None
            if not self._read_until(lambda line: line.startswith("started "), 60.0):
                return None
            return self.started.pop(0)

    def exit_code(self, pid: int, timeout: Optional[float]) -> Optional[int]:
        """The job's exit code, None if it has not ended within ``timeout`` seconds."""
        with self.lock:
            if pid not in self.exits:
                self._read_until(lambda line: line.startswith(f"exited {pid} "), 1e9 if timeout is None else timeout)
            if pid in self.exits:
                return self.exits[pid]
            if self.ended and not _alive(pid):  # the host died first: the status is lost
                self.exits[pid] = -1
                return -1
            return None

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


class Job:
    """A job the host started, seen through the ``subprocess.Popen`` calls the launcher uses."""

    def __init__(self, host: Host, pid: int, args: List[str]):
        self.host, self.pid, self.args = host, pid, args
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        return self.wait(0.0, raise_timeout=False)

    def wait(self, timeout: Optional[float] = None, raise_timeout: bool = True) -> Optional[int]:
        if self.returncode is None:
            self.returncode = self.host.exit_code(self.pid, timeout)
            if self.returncode is None and raise_timeout:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode


_HOSTS: Dict[str, Optional[Host]] = {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def wanted() -> bool:
    return hasattr(os, "fork") and os.environ.get(HOST_ENV, "1") != "0"


def start(python: str, host_env: Dict[str, str], argv: List[str], env: Dict[str, str], log: str) -> Optional[Job]:
    """``torchrun ARGV`` as a child of ``python``'s host, or None (start it as a command)."""
    if not wanted():
        return None
    if python not in _HOSTS:
        host = Host(python, host_env)
        _HOSTS[python] = host if host.ready else None
        if not host.ready:
            host.close()
    host = _HOSTS[python]
    pid = host.start(argv, env, os.getcwd(), log) if host is not None else None
    return Job(host, pid, ["torchrun", *argv]) if pid is not None else None


@atexit.register
def _close_hosts() -> None:
    for host in _HOSTS.values():
        if host is not None:
            host.close()
    _HOSTS.clear()
