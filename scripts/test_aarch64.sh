#!/usr/bin/env bash
# Cross-builds lpattn for aarch64 and runs its kernel and quantizer tests under qemu-aarch64
# (docs/design.md §10): the shared library and lpattn_kernel_tests only (no harness, command,
# benchmarks or Python package), on Highway's NEON target (and the SVE targets with
# LPATTN_ARM_SVE=ON in CMAKE_ARGS).
#   scripts/test_aarch64.sh [BUILD_DIR]   (default build-aarch64; `make test-aarch64`)
# CTEST_ARGS in the environment is passed to ctest: CI narrows the tests with a -R filter (the
# whole suite takes about half an hour under emulation on 2 cores).
set -euo pipefail

source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${1:-$source_dir/build-aarch64}
jobs=$(nproc 2>/dev/null || echo 2)

bash "$source_dir/scripts/setup_aarch64.sh" "$build_dir"
build_dir=$(cd "$build_dir" && pwd)

start=$SECONDS
echo "== configuring $build_dir for aarch64"
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of words
cmake -S "$source_dir" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_TOOLCHAIN_FILE="$source_dir/cmake/toolchain-aarch64.cmake" \
      -DLPATTN_AARCH64_SYSROOT="$build_dir/sysroot" \
      -DLPATTN_BUILD_CLI=OFF -DLPATTN_BUILD_BENCH=OFF -DLPATTN_BUILD_PYTHON=OFF \
      ${CMAKE_ARGS:-} >"$build_dir/configure.log"
cmake --build "$build_dir" -j"$jobs" --target lpattn_kernel_tests
echo "== built in $((SECONDS - start)) s"

start=$SECONDS
echo "== kernel tests under qemu-aarch64 ${CTEST_ARGS:-(all)}"
# shellcheck disable=SC2086
ctest --test-dir "$build_dir" --output-on-failure -j"$jobs" ${CTEST_ARGS:-}
echo "== tests ran in $((SECONDS - start)) s"
