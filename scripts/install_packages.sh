#!/usr/bin/env bash
# Installs those of the named Debian packages (host architecture) that are missing, with
# apt-get as root or through sudo; with all present it says so and changes nothing. Used by
# scripts/setup.sh and scripts/setup_aarch64.sh.
#   scripts/install_packages.sh NAME PACKAGE...   (NAME prefixes the messages)
set -euo pipefail

name=$1
shift
if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "$name: dpkg-query not found; this script supports Debian 12. Install: $*" >&2
  exit 1
fi

missing=()
for package in "$@"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  if [[ $status != "install ok installed" ]]; then
    missing+=("$package")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "$name: all $# required packages are present"
  exit 0
fi

echo "$name: missing ${missing[*]}"
if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "$name: not root and no sudo; as root, run:" >&2
  echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi

# Wait for another apt/dpkg run to finish instead of failing on its lock.
apt_get=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600)
"${apt_get[@]}" update
"${apt_get[@]}" install -y --no-install-recommends "${missing[@]}"
echo "$name: done"
