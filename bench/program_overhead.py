"""Overhead of ``fsdp-lint verify --program``'s runtime layer on step time.

    python bench/program_overhead.py [--device cpu|cuda] [--repeat 3]

The FSD002 scenario (a training loop that summons the full parameters every step, 40 timed
steps after 2 warm-up steps) runs alternately without the layer (the verifier's plain
launcher) and with it (``verify --program``, default checks on); each run reports its median
step time (the scenario's own measurement, written by its harness).  Printed: the median of
each side over the repetitions and the ratio.  No assertion: the numbers go to the report.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def _step_time(log_dir: Path) -> float:
    times = [json.loads((log_dir / f"rank{r}.json").read_text())["step_time"] for r in range(2)]
    return max(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-checksums", action="store_true")
    args = parser.parse_args()
    import torch

    from fsdp_lint.rules import lookup
    from fsdp_lint.scenarios.registry import scenario_for
    from fsdp_lint.verify.command import prepare
    from fsdp_lint.verify.launcher import launch

    root = Path(tempfile.mkdtemp(prefix="fsdp-lint-overhead-"))
    flagged, _, problem = prepare(lookup("FSD002"), scenario_for("FSD002", args.device), root / "programs")
    assert problem is None, problem
    backend = "nccl" if args.device == "cuda" else "gloo"
    plain, layered = [], []
    for i in range(args.repeat):
        out = root / f"plain{i}"
        launch(str(flagged), str(out), 2, backend, args.device, 600)
        plain.append(_step_time(out))
        out = root / f"layer{i}"
        command = [sys.executable, "-m", "fsdp_lint", "verify", "--program", str(flagged), "--device", args.device,
                   "--format", "json", "--log-dir", str(out)] + (["--no-checksums"] if args.no_checksums else [])
        subprocess.run(command, capture_output=True, text=True)
        layered.append(_step_time(out))
        print(f"run {i + 1}: without the layer {plain[-1] * 1000:.2f} ms/step, "
              f"with it {layered[-1] * 1000:.2f} ms/step", flush=True)
    a, b = statistics.median(plain), statistics.median(layered)
    print(f"FSD002 scenario, {args.device}, 2 ranks, torch {torch.__version__}, {platform.machine()}, "
          f"{args.repeat} runs each: median step {a * 1000:.2f} ms without the layer, {b * 1000:.2f} ms with it: "
          f"{100 * (b / a - 1):+.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
