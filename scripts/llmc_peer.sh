#!/usr/bin/env bash
# llm.c's CPU trainer beside lpattn's training step, in one session (docs/performance.md §4):
# builds bench/peers/llmc_train_step.c against an llm.c checkout (train_gpt2.c, as its Makefile
# builds it: -Ofast -march=native -fopenmp -DOMP) and runs it and lpattn_bench's train_step on the
# `small` shape in interleaved rounds, both on THREADS threads. Not part of the build or tests.
#   scripts/llmc_peer.sh BUILD_DIR LLMC_DIR [ROUNDS] [THREADS]
# LLMC_DIR: a checkout of https://github.com/karpathy/llm.c (git clone; no other files needed).
set -euo pipefail

if [[ $# -lt 2 || $# -gt 4 ]]; then
  echo "usage: $0 BUILD_DIR LLMC_DIR [ROUNDS] [THREADS]" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
llmc_dir=$(cd "$2" && pwd)
rounds=${3:-3}
threads=${4:-2}
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[[ -e $llmc_dir/train_gpt2.c ]] || { echo "llmc_peer: no train_gpt2.c in $llmc_dir" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"${CC:-cc}" -Ofast -march=native -fopenmp -DOMP -Wno-unused-result -I"$llmc_dir" \
  "$source_dir/bench/peers/llmc_train_step.c" -lm -o "$work/llmc_train_step"

lscpu | grep -E 'Model name' || true
for ((r = 1; r <= rounds; ++r)); do
  echo "== round $r: llm.c"
  (cd "$work" && OMP_NUM_THREADS=$threads ./llmc_train_step 20 | tail -1)
  echo "== round $r: lpattn"
  "$build_dir/lpattn_bench" --benchmark_filter="^train_step/small/arm:exact(/precision:bf16)?/threads:$threads\$" \
    --benchmark_min_time=2 2>/dev/null | grep train_step
done
