#!/usr/bin/env bash
# Installs lpattn's build, test and plotting dependencies on Debian 12 (apt-get), only those
# that are missing. With everything present it prints one line and changes nothing.
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  libhwy-dev libtbb-dev
  libbenchmark-dev libgtest-dev
  libcli11-dev nlohmann-json3-dev
  python3 python3-matplotlib
)

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "setup: dpkg-query not found; this script supports Debian 12. Install: ${packages[*]}" >&2
  exit 1
fi

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  if [[ $status != "install ok installed" ]]; then
    missing+=("$package")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#packages[@]} required packages are present"
  exit 0
fi

echo "setup: missing ${missing[*]}"
if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "setup: not root and no sudo; as root, run:" >&2
  echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi

# Wait for another apt/dpkg run to finish instead of failing on its lock.
apt_get=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600)
"${apt_get[@]}" update
"${apt_get[@]}" install -y --no-install-recommends "${missing[@]}"
echo "setup: done"
