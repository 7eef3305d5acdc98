#!/usr/bin/env bash
# Cross-builds lpattn for aarch64 and runs its kernel and quantizer tests under qemu-aarch64
# (docs/design.md §11): the shared library and lpattn_kernel_tests only (no harness, command or
# Python package), with Highway's NEON and SVE targets (-DLPATTN_ARM_SVE=OFF in CMAKE_ARGS
# leaves NEON alone).
#   scripts/test_aarch64.sh [--ci | --bench] [BUILD_DIR]   (default build-aarch64)
# Every kernel test by default (`make test-aarch64`); --ci runs the subset below, which CI
# (.ci/run) runs. Either runs twice: on qemu's `max` CPU with 256-bit SVE, where dispatch takes
# the SVE target (and the tests that pin each supported target run NEON too), then with
# `max,sve=off`, where NEON is all the CPU has. LPATTN_QEMU_CPUS in the environment replaces that
# list of qemu CPUs (e.g. LPATTN_QEMU_CPUS=max,sve-max-vq=2 for the SVE run alone); CTEST_ARGS is
# passed to ctest. --bench (`make bench-aarch64`) builds lpattn_bench in the same tree instead
# and runs it under qemu with BENCH_ARGS (default: one small exact forward) on each of those
# CPUs: emulated timings say nothing of an ARM CPU's speed, so this only shows the suite builds
# and runs there; on an ARM machine `make bench` builds and runs it natively.
set -euo pipefail

# The CI subset, a few minutes under emulation: every suite of the row-level math, the options,
# the quantizers and codecs (each Highway target's vector codec against the scalar one), the C
# API, the checks of bad input and non-finite values, the native-path registry (no family off
# x86); the exact kernel against the reference on every target for query lengths up to 65 (the
# grid's 1000-token shapes are left out); and per variant one forward and one backward on other
# layouts and lengths, the low-precision paths and the KV cache's 16-bit and quantized reads.
# Left out: the long grids over shapes, formats and thread counts (determinism, decode splits,
# the cache's decode steps), which the full run covers.
# One pattern each, joined with '|' into ctest's -R: no groups, as CMake's regular expressions
# take at most 9 of them.
ci_patterns=(
  '^Quant' '^Reference' '^KIntervalRow\.' '^KIntervalOptions\.' '^KIntervalReference\.'
  '^ThresholdRow\.' '^ThresholdOptions\.' '^ThresholdReference\.' '^ThresholdTheory\.'
  '^ValueGate' '^PrecisionOptions\.' '^LowPrecisionBackwardOptions\.' '^CApi\.' '^NativePaths\.'
  '^BufferPool\.' '^ValidationTest\.' '^NonFinite\.' '^PreparedKv\.' '^KvCacheTransforms\.'
  '^Grid/ExactGridTest\..*/T[127]_' '^Grid/ExactGridTest\..*/T6[345]_'
  '^ExactKernels\.BatchTokenHeadDimLayout$' '^ExactKernels\.QueryLengthDiffersFromKeyLength$'
  '^ExactKernels\.DispatchInfoIsConsistent$'
  '^KIntervalKernel\.MatchesReferenceOnOtherLayoutsAndLengths$'
  '^KIntervalKernel\.MatchesReferenceWithALowPrecisionGrid$'
  '^ThresholdKernel\.ForwardMatchesReferenceOnOtherLayoutsAndLengths$'
  '^ThresholdKernel\.BackwardMatchesReferenceOnOtherLayoutsAndLengths$'
  '^PrecisionKernels\.NativeAndSimulatedPathsAgree$'
  '^PrecisionKernels\.ErrorAgainstFp32FollowsTheFormatsResolution$'
  '^KvCache\.SixteenBitQueriesAndOutputs$' '^KvCache\.ReadsBackWhatTheInCallQuantizerMakes$'
)
ci_tests=$(IFS='|'; echo "${ci_patterns[*]}")
ctest_filter=()
target=lpattn_kernel_tests
if [[ ${1:-} == --ci ]]; then
  # The dense sweep of every format's encoder takes half a minute under emulation.
  ctest_filter=(-R "$ci_tests" -E '^QuantFormat\.EncodeMatchesNearestValueOverADenseSweep$')
  shift
elif [[ ${1:-} == --bench ]]; then
  target=lpattn_bench
  shift
fi

source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${1:-$source_dir/build-aarch64}
jobs=$(nproc 2>/dev/null || echo 2)

bash "$source_dir/scripts/setup_aarch64.sh" "$build_dir"
build_dir=$(cd "$build_dir" && pwd)

# Emulated SVE runs the kernels' products several times slower than emulated NEON (qemu
# executes each SVE load and FMA out of line): the longest test took about 13 minutes there, so
# each test gets LPATTN_QEMU_TIMEOUT seconds (default 1800) instead of the native build's 600.
timeout=${LPATTN_QEMU_TIMEOUT:-1800}

start=$SECONDS
echo "== configuring $build_dir for aarch64"
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of words
cmake -S "$source_dir" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_TOOLCHAIN_FILE="$source_dir/cmake/toolchain-aarch64.cmake" \
      -DLPATTN_AARCH64_SYSROOT="$build_dir/sysroot" \
      -DLPATTN_BUILD_CLI=OFF -DLPATTN_BUILD_PYTHON=OFF \
      -DLPATTN_TEST_TIMEOUT="$timeout" ${CMAKE_ARGS:-} >"$build_dir/configure.log"
cmake --build "$build_dir" -j"$jobs" --target "$target"
echo "== built in $((SECONDS - start)) s"

# cmake/qemu_aarch64.sh, ctest's emulator, reads the CPU from LPATTN_QEMU_CPU.
read -r -a cpus <<<"${LPATTN_QEMU_CPUS:-max,sve-max-vq=2 max,sve=off}"
for cpu in "${cpus[@]}"; do
  start=$SECONDS
  if [[ $target == lpattn_bench ]]; then
    bench_args=${BENCH_ARGS:-"--benchmark_filter=^exact_fwd/N:256/D:64/H:8/causal:1/threads:1\$ --benchmark_min_time=0.05"}
    echo "== lpattn_bench under qemu-aarch64 -cpu $cpu (emulated: timings are not an ARM CPU's): $bench_args"
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of words
    LPATTN_QEMU_CPU=$cpu bash "$source_dir/cmake/qemu_aarch64.sh" qemu-aarch64 \
        "$build_dir/sysroot" "$cpu" "$build_dir/lpattn_bench" $bench_args
  else
    echo "== kernel tests under qemu-aarch64 -cpu $cpu: ${ctest_filter[*]:-all} ${CTEST_ARGS:-}"
    # shellcheck disable=SC2086
    LPATTN_QEMU_CPU=$cpu ctest --test-dir "$build_dir" --output-on-failure -j"$jobs" \
      "${ctest_filter[@]}" ${CTEST_ARGS:-}
  fi
  echo "== ran in $((SECONDS - start)) s on -cpu $cpu"
done
