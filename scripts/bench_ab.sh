#!/bin/bash
# Interleaved A/B rounds of lpattn_bench between two builds (docs/performance.md §4.7): on a
# noisy host only alternating rounds compare. Prints each benchmark's median time per build,
# the ratio and every round.
#   scripts/bench_ab.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR 'FILTER' [ROUNDS=5]
set -euo pipefail
if [[ $# -lt 3 ]]; then
  echo "usage: $0 BEFORE_BUILD_DIR AFTER_BUILD_DIR FILTER [ROUNDS]" >&2
  exit 2
fi
before="$1/lpattn_bench"; after="$2/lpattn_bench"; filter="$3"; rounds="${4:-5}"
for exe in "$before" "$after"; do
  [[ -x "$exe" ]] || { echo "$0: no benchmark binary at $exe" >&2; exit 2; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq "$rounds"); do
  "$before" --benchmark_filter="$filter" --benchmark_min_time=1 --benchmark_format=json \
    > "$out/before_$r.json" 2>/dev/null
  "$after" --benchmark_filter="$filter" --benchmark_min_time=1 --benchmark_format=json \
    > "$out/after_$r.json" 2>/dev/null
done
python3 - "$out" <<'PY'
import collections, glob, json, os, statistics, sys
times = collections.defaultdict(lambda: collections.defaultdict(list))
for path in sorted(glob.glob(os.path.join(sys.argv[1], '*.json'))):
    which = os.path.basename(path).split('_')[0]
    for b in json.load(open(path))['benchmarks']:
        times[b['name']][which].append(b['real_time'])
for name, t in times.items():
    before, after = statistics.median(t['before']), statistics.median(t['after'])
    rounds = lambda xs: ' '.join('%.2f' % x for x in sorted(xs))
    print(f"{name}\n  before {before:.2f}  after {after:.2f}  after/before {after / before:.3f}"
          f"   rounds before [{rounds(t['before'])}] after [{rounds(t['after'])}]")
PY
