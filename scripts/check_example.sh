#!/usr/bin/env bash
# Builds and runs the examples against an installed lpattn, both ways a user would:
# find_package(lpattn) in CMake (examples/c_api and examples/cpp_api), and pkg-config with a
# plain C compiler (examples/c_api).
#   scripts/check_example.sh BUILD_DIR     (a built lpattn build tree)
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
example_dir="$source_dir/examples/c_api"

work=$(mktemp -d "${TMPDIR:-/tmp}/lpattn-example.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

echo "== install $build_dir into $prefix"
cmake --install "$build_dir" --prefix "$prefix" >"$work/install.log" || {
  cat "$work/install.log" >&2
  exit 1
}
libdir=$(dirname "$(find "$prefix" -name 'liblpattn.so' -print -quit)")
[[ -d $libdir ]] || { echo "liblpattn.so was not installed" >&2; exit 1; }

echo "== find_package(lpattn): configure, build, run"
# The example's build tree lives under $work, so the build-time RPATH points into $prefix.
cmake -S "$example_dir" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" || {
  cat "$work/configure.log" >&2
  exit 1
}
cmake --build "$work/cmake-build" >"$work/build.log" || { cat "$work/build.log" >&2; exit 1; }
"$work/cmake-build/lpattn_c_api_example"

echo "== find_package(lpattn) from C++: configure, build, run"
cmake -S "$source_dir/examples/cpp_api" -B "$work/cpp-build" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release >"$work/configure-cpp.log" || {
  cat "$work/configure-cpp.log" >&2
  exit 1
}
cmake --build "$work/cpp-build" >"$work/build-cpp.log" || { cat "$work/build-cpp.log" >&2; exit 1; }
"$work/cpp-build/lpattn_cpp_api_example"

echo "== pkg-config lpattn: compile with cc, run"
pc_flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs lpattn)
echo "pkg-config --cflags --libs lpattn: $pc_flags"
# shellcheck disable=SC2086  # pc_flags is a list of flags
"${CC:-cc}" -std=c99 -Wall -Wextra -Werror "$example_dir/main.c" -o "$work/example_pc" \
  $pc_flags -lm
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/example_pc"

echo "== examples_installed: ok"
