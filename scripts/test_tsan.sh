#!/usr/bin/env bash
# ThreadSanitizer over the kernel and trainer tests (docs/design.md §5). Debian's libtbb is not
# instrumented, so TSan cannot see its task hand-offs and reports every parallel_for as a race
# on TBB's own task objects; oneTBB's sources are annotated for TSan when built with it. This
# builds Debian's own oneTBB source (the installed version, checksum-verified) with
# TBB_SANITIZE=thread, builds lpattn's tests with -fsanitize=thread against it, and runs them.
#   scripts/test_tsan.sh [BUILD_DIR]   (default build-tsan; `make test-tsan`)
# GTEST_FILTER in the environment narrows the tests as usual. oneDNN's OpenMP runtime (libgomp)
# is not instrumented either: the tests run with OMP_NUM_THREADS=1, so oneDNN's products stay
# on the calling thread and every cross-thread hand-off TSan checks is TBB's or lpattn's own.
set -euo pipefail

source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${1:-$source_dir/build-tsan}
jobs=$(nproc 2>/dev/null || echo 2)
mkdir -p "$build_dir"
build_dir=$(cd "$build_dir" && pwd)

# Debian 12's oneTBB; the orig tarball's SHA-256 as its .dsc lists it.
tbb_version=2021.8.0
tbb_sha256=7e9111b8bb59c8800bf6d0b06afe7b0891937443d2dae1ee1101c8e2ede6a7ef
installed=$(dpkg-query -W -f='${Version}' libtbb-dev 2>/dev/null || true)
if [[ ${installed%%-*} != "$tbb_version" ]]; then
  echo "test_tsan: libtbb-dev is '${installed:-not installed}', this script builds oneTBB" \
       "$tbb_version (Debian 12's); run scripts/setup.sh" >&2
  exit 1
fi

cache=${LPATTN_DATA_DIR:-$HOME/.cache/lpattn}
tarball=$cache/onetbb_$tbb_version.orig.tar.xz
if ! echo "$tbb_sha256  $tarball" | sha256sum --check --status 2>/dev/null; then
  mkdir -p "$cache"
  echo "== fetching Debian's oneTBB $tbb_version source"
  curl -fsS -o "$tarball.tmp" \
    "http://deb.debian.org/debian/pool/main/o/onetbb/onetbb_$tbb_version.orig.tar.xz"
  echo "$tbb_sha256  $tarball.tmp" | sha256sum --check --status || {
    echo "test_tsan: checksum mismatch for $tarball.tmp" >&2
    exit 1
  }
  mv "$tarball.tmp" "$tarball"
fi

tbb_prefix=$build_dir/onetbb-tsan
if [[ ! -f $tbb_prefix/lib/cmake/TBB/TBBConfig.cmake ]]; then
  echo "== building oneTBB $tbb_version with TBB_SANITIZE=thread"
  rm -rf "$build_dir/onetbb-src" "$build_dir/onetbb-build"
  mkdir -p "$build_dir/onetbb-src"
  tar -xf "$tarball" -C "$build_dir/onetbb-src" --strip-components=1
  cmake -S "$build_dir/onetbb-src" -B "$build_dir/onetbb-build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DTBB_SANITIZE=thread -DTBB_TEST=OFF -DTBB_EXAMPLES=OFF -DTBB_STRICT=OFF \
        -DTBBMALLOC_BUILD=OFF -DCMAKE_INSTALL_PREFIX="$tbb_prefix" \
        -DCMAKE_INSTALL_LIBDIR=lib >"$build_dir/onetbb-configure.log"
  cmake --build "$build_dir/onetbb-build" -j"$jobs" >"$build_dir/onetbb-build.log"
  cmake --install "$build_dir/onetbb-build" >"$build_dir/onetbb-install.log"
fi

echo "== building lpattn's tests with -fsanitize=thread against it"
cmake -S "$source_dir" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLPATTN_TSAN=ON \
      -DLPATTN_BUILD_BENCH=OFF -DCMAKE_PREFIX_PATH="$tbb_prefix" >"$build_dir/configure.log"
cmake --build "$build_dir" -j"$jobs" --target lpattn_kernel_tests lpattn_harness_tests
for test in lpattn_kernel_tests lpattn_harness_tests; do
  if ! ldd "$build_dir/$test" | grep -q "$tbb_prefix/lib/libtbb.so"; then
    echo "test_tsan: $test does not load the instrumented oneTBB:" >&2
    ldd "$build_dir/$test" | grep tbb >&2
    exit 1
  fi
done

export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
export OMP_NUM_THREADS=1
for test in lpattn_kernel_tests lpattn_harness_tests; do
  echo "== $test under ThreadSanitizer"
  start=$SECONDS
  (cd "$build_dir" && "./$test" --gtest_brief=1)
  echo "== $test: clean ($((SECONDS - start)) s)"
done
