#!/usr/bin/env bash
# Prepares the aarch64 cross build (docs/design.md §11): installs Debian's cross compiler and
# qemu-user on the host when missing, and unpacks the arm64 libraries lpattn's kernel tests and
# benchmarks build and run against (Highway, oneTBB, GoogleTest, Google Benchmark, and the C and
# C++ runtimes qemu loads them with) into a sysroot under the build directory.
#   scripts/setup_aarch64.sh [BUILD_DIR]   (default build-aarch64; `make setup-aarch64`)
# The arm64 packages are fetched with `apt-get download` against a private package index under
# BUILD_DIR/apt and unpacked with `dpkg -x`: nothing is installed as arm64 on the host, whose
# dpkg architectures and package set stay as they are (a multiarch install of libtbb-dev:arm64
# would upgrade the host's systemd). A second run with the sysroot in place changes nothing.
set -euo pipefail

source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${1:-$source_dir/build-aarch64}
mkdir -p "$build_dir"
build_dir=$(cd "$build_dir" && pwd)
sysroot=$build_dir/sysroot

# Host (amd64) tools: the cross compiler (it brings the arm64 libc headers and crt files it
# links with) and the user-mode emulator ctest runs the tests under.
host_packages=(g++-aarch64-linux-gnu qemu-user)
# arm64 packages for the sysroot: what the library and the kernel tests find with find_package
# and link, and the runtimes of those libraries for qemu's loader (-L sysroot).
arm64_packages=(
  libhwy-dev libhwy1
  libtbb-dev libtbb12 libtbbmalloc2 libtbbbind-2-5  # TBBTargets.cmake checks every library exists
  libgtest-dev
  libbenchmark-dev libbenchmark1debian  # lpattn_bench (scripts/test_aarch64.sh --bench)
  libc6 libstdc++6 libgcc-s1
)

bash "$source_dir/scripts/install_packages.sh" setup_aarch64 "${host_packages[@]}"

# The sysroot is complete when its stamp lists exactly these packages.
stamp=$sysroot/.lpattn-packages
if [[ -f $stamp && $(cat "$stamp") == "${arm64_packages[*]}" ]]; then
  echo "setup_aarch64: sysroot $sysroot has all ${#arm64_packages[@]} arm64 packages"
  exit 0
fi

# A private apt state for arm64 only: its own package lists, cache and (empty) status file, so
# the host's lists, architectures and installed packages are neither read nor changed. The
# sources are the host's (Debian 12's mirrors).
apt_dir=$build_dir/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
: >"$apt_dir/status"
apt_arm64=(apt-get -q -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir/cache"
           -o Dir::State::status="$apt_dir/status" -o APT::Architecture=arm64
           -o APT::Architectures::=arm64 -o APT::Sandbox::User=root)
echo "== arm64 package lists"
"${apt_arm64[@]}" update >"$apt_dir/update.log"
echo "== downloading ${arm64_packages[*]}"
rm -f "$apt_dir/debs"/*.deb
(cd "$apt_dir/debs" && "${apt_arm64[@]}" download "${arm64_packages[@]}" >"$apt_dir/download.log")

rm -rf "$sysroot"
mkdir -p "$sysroot"
for deb in "$apt_dir/debs"/*.deb; do
  dpkg -x "$deb" "$sysroot"
done
echo "${arm64_packages[*]}" >"$stamp"
echo "setup_aarch64: sysroot $sysroot ready"
