"""A one-file run inside a project of 1,000 files, cold and warm (``fsdp_lint.project``).

    python bench/project_one_file.py                  # 1,000 files, 7 warm runs
    python bench/project_one_file.py --files 3000 --repeat 11

Generates a project in a temporary folder (``pyproject.toml``, a package ``proj/`` of
helper modules that save, gather, shard and do nothing, ``train.py`` importing 24 of them
and calling them under rank tests), then times ``fsdp-lint check train.py`` as a whole
process: once cold (empty cache: the imported helpers are summarized), then ``--repeat``
warm runs (cache filled: the summaries and the result are read back), and a warm run after
one imported helper changed (its summary is recomputed, the result re-linted).  Prints
medians (wall seconds).  No assertion here: the number goes to the report (the budget is
0.5 s warm).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEADER = (
    "import torch\nimport torch.distributed as dist\n"
    "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, fully_shard\n\n\n"
)
KINDS = [
    "def save_{i}(model, path):\n    torch.save(model.state_dict(), path)\n",
    "def count_{i}(model):\n    with FSDP.summon_full_params(model):\n        return sum(p.numel() for p in model.parameters())\n",
    "def shard_{i}(model, mesh):\n    for block in model.layers:\n        fully_shard(block, mesh=mesh)\n    fully_shard(model, mesh=mesh)\n",
    "def plain_{i}(x, y):\n    return [a + b for a, b in zip(x, y)]\n",
]


def build(folder: Path, files: int) -> Path:
    (folder / "pyproject.toml").write_text('[project]\nname = "bench"\nversion = "0"\n')
    package = folder / "proj"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for i in range(files - 2):
        body = "\n\n".join(KINDS[(i + k) % len(KINDS)].format(i=f"{i}_{k}") for k in range(6))
        (package / f"mod_{i:04d}.py").write_text(f'"""Helpers {i}."""\n' + HEADER + body + "\n" * 40)
    lines = [HEADER.rstrip("\n"), ""]
    calls = []
    for i in range(24):
        name = KINDS[i % len(KINDS)].split("(")[0][4:].format(i=f"{i}_0")
        lines.append(f"from proj.mod_{i:04d} import {name}")
        calls.append(name)
    lines += ["", "", "def main(net, path, mesh):", "    dist.init_process_group('nccl')", "    model = FSDP(net)"]
    for name in calls:
        args = "model, mesh" if name.startswith("shard") else "model, path" if name.startswith(("save", "plain")) else "model"
        lines += ["    if dist.get_rank() == 0:", f"        {name}({args})"]
    (folder / "train.py").write_text("\n".join(lines) + "\n")
    return folder / "train.py"


CPU = []  # CPU seconds (user + system) of each timed process, beside its wall time


def timed(command, cwd) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "project"
        folder.mkdir()
        train = build(folder, args.files)
        cache = Path(tmp) / "cache"
        command = [sys.executable, "-m", "fsdp_lint", "check", "--exit-zero", "--cache-dir", str(cache), str(train)]
        count = sum(1 for _ in folder.rglob("*.py"))
        cold = timed(command, folder)
        warm = [timed(command, folder) for _ in range(args.repeat)]
        warm_cpu = CPU[1:]
        helper = folder / "proj" / "mod_0000.py"
        changed = []
        for round_ in range(3):
            helper.write_text(helper.read_text() + f"\n# edit {round_}\n")
            os.utime(helper)
            changed.append(timed(command, folder))
        findings = subprocess.run(command, cwd=folder, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        print(f"project: {count} Python files; train.py imports 24 helpers; {findings}")
        print(f"cold (empty cache):          {cold:.3f} s")
        print(f"warm (median of {len(warm)}):        {statistics.median(warm):.3f} s  (min {min(warm):.3f}, max {max(warm):.3f})")
        print(f"after a helper edit (median): {statistics.median(changed):.3f} s")
        print(f"warm CPU time (median):      {statistics.median(warm_cpu):.3f} s (user + system of the process)")
        # the same file outside any project (no index): what the command line costs anyway
        alone = Path(tmp) / "alone"
        alone.mkdir()
        (alone / "train.py").write_text(train.read_text())
        control = [sys.executable, "-m", "fsdp_lint", "check", "--exit-zero", "--cache-dir", str(cache), "train.py"]
        timed(control, alone)
        plain = [timed(control, alone) for _ in range(args.repeat)]
        print(f"control, same file in no project, warm (median): {statistics.median(plain):.3f} s, "
              f"CPU {statistics.median(CPU[-len(plain):]):.3f} s")
        print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
