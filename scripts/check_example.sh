#!/usr/bin/env bash
# Builds and runs the examples against an installed lpattn, both ways a user would:
# find_package(lpattn) in CMake (examples/c_api, examples/cpp_api and examples/engine), and
# pkg-config with a plain C compiler (examples/c_api). The engine serves checkpoints the
# installed `lpattn train` makes, and must match `lpattn logits` on their prompts.
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

echo "== the example engine: find_package(lpattn), checkpoints from the installed lpattn"
cmake -S "$source_dir/examples/engine" -B "$work/engine-build" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release >"$work/configure-engine.log" || {
  cat "$work/configure-engine.log" >&2
  exit 1
}
cmake --build "$work/engine-build" >"$work/build-engine.log" || {
  cat "$work/build-engine.log" >&2
  exit 1
}
engine="$work/engine-build/lpattn_engine"
lpattn="$prefix/bin/lpattn"
# Three arms the engine serves (a sink, ALiBi, a softcap and a window shorter than the prompts
# among them), trained briefly on the README; prompts of different lengths make ragged calls.
for arm in exact "sink:alibi=1,window=16,softcap=30" offbyone; do
  run="$work/run-${arm%%:*}"
  "$lpattn" train --preset tiny --steps 100 --eval-every 50 --arm "$arm" \
    --data "$source_dir/README.md" --out "$run" >"$work/train.log" 2>&1 || {
    cat "$work/train.log" >&2
    exit 1
  }
  "$lpattn" logits --checkpoint "$run/checkpoint.bin" --prompt "The kernels of lpattn are" \
    --prompt "int8 " --prompt "A K-interval grid approximates exp with" --out "$run/logits.json"
  # Every cache format (each against its default bound), contiguous and in pages of 16.
  for kv in fp32 bf16 fp16 int8 fp8e4m3 fp8e5m2; do
    "$engine" "$run/checkpoint.bin" --check "$run/logits.json" --kv "$kv" | tail -n 1
    "$engine" "$run/checkpoint.bin" --check "$run/logits.json" --kv "$kv" --block-size 16 \
      | tail -n 1
  done
done
"$engine" "$run/checkpoint.bin" --prompt "The " --prompt "int8 is" --tokens 24 --kv int8

# The Python package, when the build made it: imported from the install prefix, away from the
# build tree, it must load the installed liblpattn.so and agree with the build tree's.
if [[ -d $build_dir/python/lpattn ]]; then
  echo "== the installed Python package"
  python_dir=$(dirname "$(find "$prefix" -path '*/lpattn/_lpattn*.so' -print -quit)")
  [[ -d $python_dir ]] || { echo "the Python package was not installed" >&2; exit 1; }
  (cd "$work" && PYTHONPATH=$(dirname "$python_dir") /usr/bin/python3 - "$prefix" <<'PY'
import sys
import torch
import lpattn
assert lpattn.__file__.startswith(sys.argv[1]), lpattn.__file__
q, k, v = (torch.randn(1, 2, 9, 16) for _ in range(3))
o = lpattn.attention(q, k, v, causal=True)
s = (q @ k.transpose(-1, -2)) / 4.0
s = s.masked_fill(~torch.ones(9, 9, dtype=torch.bool).tril(), float("-inf"))
assert torch.allclose(o, torch.softmax(s, -1) @ v, atol=1e-5)
print(f"lpattn {lpattn.__version__} from {lpattn.__file__}: attention ok")
PY
  )
fi

echo "== examples_installed: ok"
