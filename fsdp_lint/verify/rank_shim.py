"""Runs one scenario program inside one torchrun rank and records how that rank ended.

``python -m fsdp_lint.verify.rank_shim PROGRAM LOG_DIR``: the program runs as a child
process with this rank's environment; its output goes to ``LOG_DIR/rank<N>.log``, its
process id to ``LOG_DIR/rank<N>.pid`` and its end (exit status or signal) to
``LOG_DIR/rank<N>.exit.json``.  The program starts with ``faulthandler`` registered on
SIGUSR1: at the timeout the launcher sends it SIGUSR1 and every thread's stack lands in
the log (where each rank is blocked).  A SIGTERM or SIGINT from the launcher (another rank
failed, the verifier's timeout, Ctrl-C) is passed on to the program and recorded as such.
No torch import here.
"""

import json
import os
import signal
import subprocess
import sys
import time

# Started as ``python -c BOOT PROGRAM``: the program runs as ``__main__`` from its own folder.
BOOT = (
    "import faulthandler, os, runpy, signal, sys\n"
    "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
    "sys.argv = sys.argv[1:]\n"
    "sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def _write_json(path, data):
    with open(path + ".tmp", "w") as handle:
        json.dump(data, handle)
    os.replace(path + ".tmp", path)


def main(argv):
    program, log_dir = argv[0], argv[1]
    rank = os.environ.get("RANK", "0")
    record = {"rank": int(rank), "terminated": False}
    child = None

    def forward(signum, _frame):
        record["terminated"] = True
        record["terminated_at"] = time.time()
        if child is not None:
            try:
                child.send_signal(signum)
            except OSError:
                pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    with open(os.path.join(log_dir, f"rank{rank}.log"), "wb") as log:
        child = subprocess.Popen([sys.executable, "-c", BOOT, program], stdout=log, stderr=subprocess.STDOUT)
        with open(os.path.join(log_dir, f"rank{rank}.pid"), "w") as handle:
            handle.write(str(child.pid))
        if record["terminated"]:  # stopped before the program started
            child.terminate()
        returncode = child.wait()
    record["returncode"] = returncode
    if returncode < 0:
        record["signal"] = signal.Signals(-returncode).name
    record["ended_at"] = time.time()
    _write_json(os.path.join(log_dir, f"rank{rank}.exit.json"), record)
    return 0 if returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
