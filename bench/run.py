"""fsdp-lint's benchmark: whole-process wall times, medians over repetitions, ratios
against the peers found installed, in one run.

    python bench/run.py                       # the installed torch's torch/ and torch/distributed
    python bench/run.py --tree src/ --repeat 7
    python bench/run.py --peers-bin /path/to/venv/bin --markdown docs/benchmark.md

Timed commands (each a fresh process, output discarded):
- fsdp-lint cold (``--no-cache``) and warm (cache filled by an untimed run first);
- flake8 with fsdp-lint's plugin (``--select FSD``; flake8 still runs its default checkers);
- peers when found: TorchFix (``torchfix``), plain flake8, ruff ``--select E,F``;
- a bare libcst parse of the same files (the floor for a libcst linter), in as many processes.
On a generated tree where every file has FSDP call sites: lines per second.
Peak memory is the largest resident set of the timed process itself (``wait4``).
No assertion here: the numbers go to a table.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARSE = (
    "import sys, libcst\n"
    "from concurrent.futures import ProcessPoolExecutor\n"
    "def parse(path):\n"
    "    try:\n"
    "        libcst.parse_module(open(path, 'rb').read())\n"
    "    except Exception:\n"
    "        pass\n"
    "files = [line.strip() for line in open(sys.argv[1]) if line.strip()]\n"
    "jobs = int(sys.argv[2])\n"
    "if jobs > 1:\n"
    "    with ProcessPoolExecutor(jobs) as pool:\n"
    "        list(pool.map(parse, files, chunksize=8))\n"
    "else:\n"
    "    list(map(parse, files))\n"
)


def timed(command, cwd=None):
    """(seconds, peak RSS in MiB) of one whole process."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024


def measure(command, repeat, cwd=None):
    runs = [timed(command, cwd) for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs), repeat


def python_files(tree: Path):
    return sorted(p for p in tree.rglob("*.py") if p.is_file())


def generated_tree(target: Path, count: int) -> Path:
    sources = [p for p in sorted((ROOT / "fixtures").rglob("*.py")) if "quiet" not in p.parts]
    target.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        source = sources[index % len(sources)]
        (target / f"m{index:04d}.py").write_text(f"# generated copy {index} of {source.name}\n" + source.read_text())
    return target


def find(name, peers_bin):
    if peers_bin:
        candidate = Path(peers_bin) / name
        if candidate.exists():
            return str(candidate)
    return shutil.which(name)


def bench_tree(label, tree: Path, args, lines):
    files = python_files(tree)
    line_count = sum(len(p.read_bytes().splitlines()) for p in files)
    listing = Path(tempfile.mkdtemp()) / "files.txt"
    listing.write_text("\n".join(map(str, files)))
    jobs = str(args.jobs)
    cache = tempfile.mkdtemp(prefix="fsdp-lint-bench-cache-")
    me = [sys.executable, "-m", "fsdp_lint", "check", "--exit-zero", "-j", jobs]
    rows = []
    rows.append(("fsdp-lint (cold, --no-cache)", measure(me + ["--no-cache", str(tree)], args.repeat)))
    subprocess.run(me + ["--cache-dir", cache, str(tree)], stdout=subprocess.DEVNULL)
    rows.append(("fsdp-lint (warm cache)", measure(me + ["--cache-dir", cache, str(tree)], args.repeat)))
    rows.append(("flake8 --select FSD (fsdp-lint plugin)",
                 measure([sys.executable, "-m", "flake8", "--select", "FSD", "-j", jobs, str(tree)], args.peer_repeat)))
    if args.bare_parse:
        rows.append((f"bare libcst parse ({jobs} processes)",
                     measure([sys.executable, "-c", PARSE, str(listing), jobs], args.peer_repeat)))
    peers = [
        ("TorchFix", "torchfix", [str(tree)]),
        ("flake8 (default plugins)", "flake8", ["-j", jobs, str(tree)]),
        ("ruff --select E,F", "ruff", ["check", "--select", "E,F", "--exit-zero", "--no-cache", str(tree)]),
    ]
    for title, name, extra in peers:
        if name in args.skip:
            continue
        binary = find(name, args.peers_bin)
        if binary:
            rows.append((title, measure([binary, *extra], args.peer_repeat)))
    shutil.rmtree(cache, ignore_errors=True)
    base = rows[0][1][0]
    out = [f"### {label}: {len(files)} files, {line_count:,} lines", "",
           "| command | median s | runs | vs fsdp-lint cold | lines/s | peak MiB |",
           "|---|---|---|---|---|---|"]
    for title, (seconds, rss, runs) in rows:
        out.append(f"| {title} | {seconds:.2f} | {runs} | {seconds / base:.1f}x | {line_count / seconds:,.0f} | {rss:.0f} |")
    lines.extend(out + [""])
    print("\n".join(out) + "\n", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", action="append", help="a folder to lint (repeatable); default: torch/ and torch/distributed")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each fsdp-lint command")
    parser.add_argument("--peer-repeat", type=int, default=3, help="runs of each peer (TorchFix is slow)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--generated", type=int, default=2000, help="files in the every-file-a-candidate tree (0: skip)")
    parser.add_argument("--peers-bin", default=None, help="a folder holding torchfix/ruff/flake8 (e.g. a venv's bin)")
    parser.add_argument("--skip", action="append", default=[], help="peer to leave out (torchfix, flake8, ruff)")
    parser.add_argument("--no-bare-parse", dest="bare_parse", action="store_false")
    parser.add_argument("--markdown", default=None, help="also write the tables to this file")
    args = parser.parse_args(argv)
    trees = [Path(t) for t in args.tree or []]
    if not trees:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.origin:
            parser.error("torch is not installed: name a --tree")
        torch_dir = Path(spec.origin).parent  # found without importing torch
        trees = [torch_dir, torch_dir / "distributed"]
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"
    lines = ["# Benchmark", "", f"Machine: {machine}; {args.jobs} jobs; medians of whole-process wall times.", ""]
    print("\n".join(lines), flush=True)
    for tree in trees:
        bench_tree(str(tree), tree, args, lines)
    if args.generated:
        with tempfile.TemporaryDirectory() as folder:
            tree = generated_tree(Path(folder) / "generated", args.generated)
            bench_tree(f"generated: {args.generated} fixture copies, every file has FSDP call sites", tree, args, lines)
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
