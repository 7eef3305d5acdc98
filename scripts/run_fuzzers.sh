#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, docs/design.md §10) in build-fuzz with clang and
# runs each for SECONDS_PER_TARGET seconds on a scratch copy of its seed corpus
# (tests/fuzz/corpus/<target>) with its dictionary, so the repository is not modified. Prints
# the executions that ran clean per target and the CPU; fails on any finding (a crash, a
# sanitizer report, a mismatch beyond the bound, a leak or a timeout), whose input is kept
# under build-fuzz/findings/<target>/.
#   scripts/run_fuzzers.sh SECONDS_PER_TARGET [TARGET...]   (make test-fuzz, make fuzz)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ $# -lt 1 || ! $1 =~ ^[0-9]+$ || $1 -lt 1 ]]; then
  echo "usage: $0 SECONDS_PER_TARGET [TARGET...]" >&2
  exit 2
fi
seconds=$1
shift
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=(fuzz_kernels fuzz_options fuzz_config fuzz_checkpoint fuzz_corpus)
fi
build=build-fuzz
jobs=$(nproc 2>/dev/null || echo 2)

for tool in clang-14 clang++-14; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "run_fuzzers: $tool not found (scripts/setup.sh installs clang-14 and libclang-rt-14-dev)" >&2
    exit 1
  fi
done
# Objects are shared through ccache with other clones (the Makefile sets the same).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
mkdir -p "$build"
if ! { CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
         -DLPATTN_FUZZ=ON &&
       cmake --build "$build" --target "${targets[@]}" -j"$jobs"; } >"$build/build.log" 2>&1; then
  tail -n 60 "$build/build.log" >&2
  echo "run_fuzzers: the build failed ($build/build.log)" >&2
  exit 1
fi

# The CPU, and which of the vector extensions the native Highway target depends on it has
# (a virtual machine's model name can be as short as "AMD EPYC").
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n1)
isa=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | tr ' ' '\n' |
      grep -x -E 'avx2|avx512f|avx512_vnni|avx_vnni|avx512_bf16|amx_tile' | paste -sd ' ' || true)
echo "run_fuzzers: ${seconds}s per target on ${cpu:-unknown CPU} ($(nproc) CPUs; ${isa:-no AVX2})"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=()
summary=()
for target in "${targets[@]}"; do
  corpus="$scratch/$target"
  mkdir -p "$corpus" "$build/findings/$target"
  cp -r "tests/fuzz/corpus/$target/." "$corpus/"
  dict=()
  [[ -f tests/fuzz/$target.dict ]] && dict=(-dict="tests/fuzz/$target.dict")
  log="$build/findings/$target.log"
  # The kernel target's cases are large (tensors of up to ~40k values, one byte each); the
  # others read text and small files. TMPDIR: where the targets write their scratch files.
  max_len=4096
  [[ $target == fuzz_kernels ]] && max_len=65536
  status=0
  TMPDIR="$scratch" "$build/$target" "${dict[@]}" -max_total_time="$seconds" -timeout=60 \
    -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$build/findings/$target/" \
    "$corpus" >"$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units:[[:space:]]*//p' "$log" | tail -n1)
  time=$(sed -n 's/^stat::average_exec_per_sec:[[:space:]]*//p' "$log" | tail -n1)
  if [[ $status -ne 0 ]]; then
    failed+=("$target")
    summary+=("$(printf '%-16s FINDING (exit %d): see %s and %s' "$target" "$status" "$log" \
                 "$build/findings/$target/")")
    tail -n 40 "$log" >&2
  else
    summary+=("$(printf '%-16s %10s executions clean in %ss (%s/s)' "$target" "${runs:-?}" \
                 "$seconds" "${time:-?}")")
  fi
done
printf '%s\n' "${summary[@]}"
if [[ ${#failed[@]} -ne 0 ]]; then
  echo "run_fuzzers: findings in ${failed[*]}" >&2
  exit 1
fi
echo "run_fuzzers: all ${#targets[@]} targets ran clean"
