"""Runs one scenario program inside one torchrun rank and records how that rank ended.

``python -m fsdp_lint.verify.rank_shim PROGRAM LOG_DIR``: the program runs as a child
process with this rank's environment; its output goes to ``LOG_DIR/rank<N>.log`` and its
end (exit status or signal) to ``LOG_DIR/rank<N>.exit.json``.  A SIGTERM from the
launcher (another rank failed, or the verifier's timeout) is passed on to the program
and recorded as such.  No torch import here.
"""

import json
import os
import signal
import subprocess
import sys
import time


def main(argv):
    program, log_dir = argv[0], argv[1]
    rank = os.environ.get("RANK", "0")
    record = {"rank": int(rank), "terminated": False}
    with open(os.path.join(log_dir, f"rank{rank}.log"), "wb") as log:
        child = subprocess.Popen([sys.executable, program], stdout=log, stderr=subprocess.STDOUT)

        def forward(signum, _frame):
            record["terminated"] = True
            record["terminated_at"] = time.time()
            try:
                child.send_signal(signum)
            except OSError:
                pass

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        returncode = child.wait()
    record["returncode"] = returncode
    if returncode < 0:
        record["signal"] = signal.Signals(-returncode).name
    record["ended_at"] = time.time()
    path = os.path.join(log_dir, f"rank{rank}.exit.json")
    with open(path + ".tmp", "w") as handle:
        json.dump(record, handle)
    os.replace(path + ".tmp", path)
    return 0 if returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
