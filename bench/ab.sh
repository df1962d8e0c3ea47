#!/usr/bin/env bash
# A/B of two fsdp-lint trees and ruff on one folder: whole processes, alternating (one run
# of each per round, so a change in load hits all three alike), pinned to two cores.
#   bench/ab.sh OLD_SRC NEW_SRC TREE ROUNDS [SITE]
# OLD_SRC / NEW_SRC: folders holding a `fsdp_lint/` package (e.g. `git archive HEAD~1
# fsdp_lint | tar -x -C /tmp/old`); SITE: where libcst and ruff are installed (PYTHONPATH
# entry and its bin/; default: this Python's environment and ruff on PATH).
# Prints each command's median and spread and the ratios to ruff; no assertion.
set -euo pipefail
old=$(realpath "$1"); new=$(realpath "$2"); tree=$(realpath "$3"); rounds=$4; site=${5:-}
ruff=$( [ -n "$site" ] && echo "$site/bin/ruff" || command -v ruff )
times=$(mktemp)
cd /tmp  # not a folder holding a fsdp_lint package: PYTHONPATH decides which tree runs
for _ in $(seq "$rounds"); do
  for v in old new ruff; do
    src=$old; [ $v = new ] && src=$new
    start=$(date +%s%N)
    if [ $v = ruff ]; then
      taskset -c 0,1 "$ruff" check --select E,F --no-cache -q "$tree" >/dev/null 2>&1 || true
    else
      PYTHONPATH="$src${site:+:$site}" taskset -c 0,1 python3 -m fsdp_lint --no-cache --jobs 2 "$tree" >/dev/null 2>&1 || true
    fi
    echo "$v $(( ($(date +%s%N) - start) / 1000000 ))" >> "$times"
  done
done
python3 - "$times" "$(basename "$tree")" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
median = {}
for v in ("old", "new", "ruff"):
    xs = sorted(int(t) / 1000 for k, t in rows if k == v)
    median[v] = statistics.median(xs)
    print(f"{sys.argv[2]} {v}: median {median[v]:.2f} s, spread {xs[0]:.2f}-{xs[-1]:.2f}, n {len(xs)}")
print(f"ratio to ruff: old {median['old'] / median['ruff']:.2f}x, new {median['new'] / median['ruff']:.2f}x")
PY
rm -f "$times"
