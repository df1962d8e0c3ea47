"""fsdp-lint's benchmark: whole-process wall times, medians over repetitions, ratios
against the peers found installed, in one run.

    python bench/run.py                       # torch/, the ML-library and the dense corpora
    python bench/run.py --tree src/ --repeat 7
    python bench/run.py --peers-bin /path/to/venv/bin --markdown docs/benchmark.md

``--as-checkout`` times the trees as repository checkouts (the project index on: a tree
without ``pyproject.toml`` or ``.git`` is linted file by file, as the corpora are by default).

Corpora: the installed torch's own source tree (found without importing torch), and, when
built, the ML-library corpus (``shared/bench/ml-corpus.sh DEST``) and the dense corpus
(``shared/bench/dense-corpus.sh DEST``) given with ``--ml`` and ``--dense`` (defaults:
/work/corpus/ml, /work/corpus/dense; a missing one is skipped and said so).

Timed commands (each a fresh process, output discarded), run alternately (one of each per
round, so load changes hit all of them alike):
- fsdp-lint cold (``--no-cache``) and warm (cache filled by an untimed run first);
- flake8 with fsdp-lint's plugin (``--select FSD``; flake8 still runs its default checkers);
- ruff ``--select E,F`` (``pip install ruff``; looked up in ``--peers-bin``, next to this
  Python, then on PATH), TorchFix and plain flake8 when asked for (``--with``);
- a bare libcst parse of the same files (the floor for a libcst linter), in as many processes;
- one file alone (``--file``): fsdp-lint on it as a whole process.
Each row: median, spread (min-max), runs, ratio to fsdp-lint cold (medians of the same run),
peak memory (largest resident set of the timed process itself, ``wait4``).  The load average
before and after is printed with the table (the machine may be shared).
No assertion here: the numbers go to a table.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
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


def timed(command, cwd=None, limit=None, env=None):
    """(seconds, peak RSS in MiB) of one whole process (None when it ran past ``limit``)."""
    start = time.perf_counter()
    # a session of its own, so a run given up is ended with its workers (a process pool's
    # children outlive a killed parent)
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    while True:
        pid, _, usage = os.wait4(proc.pid, 0 if limit is None else os.WNOHANG)
        if pid:
            proc.returncode = 0  # reaped here: Popen must not wait again
            return time.perf_counter() - start, usage.ru_maxrss / 1024
        if time.perf_counter() - start > limit:
            os.killpg(proc.pid, signal.SIGKILL)
            os.wait4(proc.pid, 0)
            proc.returncode = -9
            return None
        time.sleep(0.01)


def python_files(tree: Path):
    return sorted(p for p in tree.rglob("*.py") if p.is_file() and ".downloads" not in p.parts)


def generated_tree(target: Path, count: int) -> Path:
    sources = [p for p in sorted((ROOT / "fixtures").rglob("*.py")) if "quiet" not in p.parts]
    target.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        source = sources[index % len(sources)]
        (target / f"m{index:04d}.py").write_text(f"# generated copy {index} of {source.name}\n" + source.read_text())
    return target


def find(name, peers_bin):
    for folder in (peers_bin, str(Path(sys.executable).parent)):
        if folder:
            candidate = Path(folder) / name
            if candidate.exists():
                return str(candidate)
    return shutil.which(name)


def load() -> str:
    try:
        return " / ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


class Row:
    def __init__(self, title, command, runs, limit=None, env=None, cwd=None):
        self.title, self.command, self.runs, self.limit, self.env, self.cwd = title, command, runs, limit, env, cwd
        self.times, self.peak, self.timed_out = [], 0.0, False

    def run_once(self):
        if self.timed_out or len(self.times) >= self.runs:
            return
        got = timed(self.command, cwd=self.cwd, limit=self.limit, env=self.env)
        if got is None:
            self.timed_out = True
            return
        self.times.append(got[0])
        self.peak = max(self.peak, got[1])

    def median(self):
        return statistics.median(self.times) if self.times else None


def bench_tree(label, tree: Path, args, lines, single_file=None):
    files = python_files(tree)
    line_count = sum(len(p.read_bytes().splitlines()) for p in files)
    listing = Path(tempfile.mkdtemp()) / "files.txt"
    listing.write_text("\n".join(map(str, files)))
    jobs = str(args.jobs)
    cache = tempfile.mkdtemp(prefix="fsdp-lint-bench-cache-")
    me = [sys.executable, "-m", "fsdp_lint", "check", "--exit-zero", "-j", jobs]
    rows = [Row("fsdp-lint (cold, --no-cache)", me + ["--no-cache", str(tree)], args.repeat)]
    subprocess.run(me + ["--cache-dir", cache, str(tree)], stdout=subprocess.DEVNULL)
    rows.append(Row("fsdp-lint (warm cache)", me + ["--cache-dir", cache, str(tree)], args.repeat))
    for baseline in args.baseline:  # another fsdp-lint, timed in the same rounds
        folder = str(Path(baseline).resolve())  # run from there: ``-m`` puts the working folder first
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (folder, os.environ.get("PYTHONPATH")))))
        rows.append(Row(f"fsdp-lint at {Path(baseline).name} (cold, --no-cache)",
                        me + ["--no-cache", str(tree.resolve())], args.repeat, env=env, cwd=folder))
    ruff = find("ruff", args.peers_bin)
    if ruff:
        rows.append(Row("ruff --select E,F", [ruff, "check", "--select", "E,F", "--exit-zero", "--no-cache", str(tree)],
                        args.repeat))
    else:
        print("ruff not found: pip install ruff (or --peers-bin)", flush=True)
    if args.peer_repeat:  # 0: the slow peers are left out
        rows.append(Row("flake8 --select FSD (fsdp-lint plugin)",
                        [sys.executable, "-m", "flake8", "--select", "FSD", "-j", jobs, str(tree)],
                        args.peer_repeat, args.peer_limit))
    if args.bare_parse and args.peer_repeat:
        rows.append(Row(f"bare libcst parse ({jobs} processes)",
                        [sys.executable, "-c", PARSE, str(listing), jobs], args.peer_repeat, args.peer_limit))
    extra = {
        "torchfix": ("TorchFix", [str(tree)]),
        "flake8": ("flake8 (default plugins)", ["-j", jobs, str(tree)]),
    }
    for name in args.with_peer:
        binary = find(name, args.peers_bin)
        if binary and name in extra:
            rows.append(Row(extra[name][0], [binary, *extra[name][1]], args.peer_repeat, args.peer_limit))
    if single_file is not None:
        rows.append(Row(f"fsdp-lint, one file: {single_file.relative_to(tree)} ({single_file.stat().st_size // 1024} KB)",
                        [sys.executable, "-m", "fsdp_lint", "check", "--exit-zero", "--no-cache", str(single_file)],
                        args.repeat))
    before = load()
    for _ in range(max(r.runs for r in rows)):
        for row in rows:  # alternating: one run of each per round
            row.run_once()
    after = load()
    shutil.rmtree(cache, ignore_errors=True)
    base = rows[0].median()
    out = [f"### {label}: {len(files)} files, {line_count:,} lines", "",
           f"Load average (1/5/15 min) before: {before}; after: {after}.", "",
           "| command | median s | spread s | runs | vs fsdp-lint cold | lines/s | peak MiB |",
           "|---|---|---|---|---|---|---|"]
    for row in rows:
        median = row.median()
        if median is None:
            out.append(f"| {row.title} | over {row.limit} s | | 0 | | | |")
            continue
        spread = f"{min(row.times):.2f}-{max(row.times):.2f}"
        lines_per_s = "" if row.title.startswith("fsdp-lint, one file") else f"{line_count / median:,.0f}"
        out.append(f"| {row.title} | {median:.2f} | {spread} | {len(row.times)} | {median / base:.2f}x | "
                   f"{lines_per_s} | {row.peak:.0f} |")
    lines.extend(out + [""])
    print("\n".join(out) + "\n", flush=True)
    return {row.title: row for row in rows}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", action="append", help="a folder to lint (repeatable); default: torch/ and the corpora")
    parser.add_argument("--ml", default="/work/corpus/ml", help="the ML-library corpus (ml-corpus.sh)")
    parser.add_argument("--dense", default="/work/corpus/dense", help="the dense corpus (dense-corpus.sh)")
    parser.add_argument("--file", default="peft-0.21.2/tests/test_custom_models.py",
                        help="a file of the dense corpus timed alone")
    parser.add_argument("--repeat", type=int, default=5, help="runs of fsdp-lint and ruff")
    parser.add_argument("--peer-repeat", type=int, default=1,
                        help="runs of the slow peers (flake8, libcst parse; 0 leaves them out)")
    parser.add_argument("--baseline", action="append", default=[],
                        help="a folder holding another fsdp_lint package (e.g. an older commit's, from git "
                             "archive): timed cold in the same rounds, with PYTHONPATH set to it (repeatable)")
    parser.add_argument("--peer-limit", type=float, default=300.0, help="seconds before a slow peer's run is given up")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--generated", type=int, default=0, help="files in an every-file-a-candidate tree (0: skip)")
    parser.add_argument("--peers-bin", default=None, help="a folder holding ruff/flake8/torchfix (e.g. a venv's bin)")
    parser.add_argument("--with", dest="with_peer", action="append", default=[],
                        help="also time this peer: torchfix, flake8 (default plugins)")
    parser.add_argument("--no-bare-parse", dest="bare_parse", action="store_false")
    parser.add_argument("--only", action="append", default=[], choices=["torch", "ml", "dense"],
                        help="time only these default trees (repeatable)")
    parser.add_argument("--markdown", default=None, help="also write the tables to this file")
    parser.add_argument("--as-checkout", action="store_true",
                        help="time each tree as a repository checkout: an empty .git folder at its top for the run "
                             "(removed after; a tree that has one already is left alone), so fsdp-lint's project "
                             "index (helpers in other files, what other files pass) is on for every file")
    args = parser.parse_args(argv)
    trees = [(str(t), Path(t), None) for t in args.tree or []]
    if not trees:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        wanted = set(args.only or ["torch", "ml", "dense"])
        if "torch" not in wanted:
            spec = None
        if spec is not None and spec.origin:
            torch_dir = Path(spec.origin).parent  # found without importing torch
            trees.append((f"torch/ (installed source tree)", torch_dir, None))
        elif "torch" in wanted:
            print("torch is not installed: the torch tree is skipped", flush=True)
        for label, folder in (("ML-library corpus (ml-corpus.sh)", args.ml), ("dense corpus (dense-corpus.sh)", args.dense)):
            if ("ml" if "ML" in label else "dense") not in wanted:
                continue
            path = Path(folder)
            if not path.is_dir():
                print(f"{folder} missing: build it with shared/bench/{'ml' if 'ML' in label else 'dense'}-corpus.sh", flush=True)
                continue
            single = path / args.file if "dense" in label and (path / args.file).is_file() else None
            trees.append((label, path, single))
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"
    lines = [f"Machine: {machine}; {args.jobs} jobs; whole-process wall times; rounds alternate the commands.", ""]
    print("\n".join(lines), flush=True)
    results = {}
    for label, tree, single in trees:
        marker = tree / ".git"
        made = args.as_checkout and not marker.exists() and not (tree / "pyproject.toml").exists()
        if made:
            marker.mkdir()
            label += ", as a checkout (project index on)"
        try:
            results[label] = bench_tree(label, tree, args, lines, single)
        finally:
            if made:
                marker.rmdir()
    goals(results, lines)
    if args.generated:
        with tempfile.TemporaryDirectory() as folder:
            tree = generated_tree(Path(folder) / "generated", args.generated)
            bench_tree(f"generated: {args.generated} fixture copies, every file has FSDP call sites", tree, args, lines)
    if args.markdown:
        write_tables(Path(args.markdown), lines)


def goals(results, lines) -> None:
    """Issue #16's goals, judged from the rows just measured (medians of the same run)."""
    out = ["### Goals (issue #16), from the rows above", "",
           "| goal | measured | |", "|---|---|---|"]

    def ratio(label, limit):
        rows = results.get(label)
        if not rows or "ruff --select E,F" not in rows:
            return
        mine, ruff = rows["fsdp-lint (cold, --no-cache)"].median(), rows["ruff --select E,F"].median()
        if mine is None or ruff is None:
            return
        verdict = "met" if mine <= limit * ruff else "missed"
        out.append(f"| {label}: fsdp-lint <= {limit}x ruff E,F | {mine:.2f} s vs {ruff:.2f} s ({mine / ruff:.2f}x) | {verdict} |")

    ratio("dense corpus (dense-corpus.sh)", 1.0)
    ratio("ML-library corpus (ml-corpus.sh)", 0.5)
    ratio("torch/ (installed source tree)", 1.0)
    for rows in results.values():
        for title, row in rows.items():
            if title.startswith("fsdp-lint, one file") and row.median() is not None:
                verdict = "met" if row.median() <= 0.5 else "missed"
                out.append(f"| {title[len('fsdp-lint, one file: '):]} as a whole process <= 0.5 s | "
                           f"{row.median():.2f} s | {verdict} |")
    peak = max((row.peak for rows in results.values() for title, row in rows.items() if title.startswith("fsdp-lint")),
               default=None)
    if peak is not None:
        out.append(f"| fsdp-lint peak memory <= 150 MiB (every row) | {peak:.0f} MiB | {'met' if peak <= 150 else 'missed'} |")
    lines.extend(out + [""])
    print("\n".join(out) + "\n", flush=True)


BEGIN, END = "<!-- bench/run.py: tables begin -->", "<!-- bench/run.py: tables end -->"


def write_tables(path: Path, lines) -> None:
    """The tables go between the BEGIN/END comments of ``path`` (the prose around them is
    kept); a file without them is written whole."""
    tables = "\n".join(lines).rstrip() + "\n"
    old = path.read_text() if path.exists() else ""
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        path.write_text(f"{head}{BEGIN}\n{tables}{END}{tail}")
    else:
        path.write_text(tables)


if __name__ == "__main__":
    main()
