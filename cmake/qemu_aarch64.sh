#!/bin/sh
# The emulator ctest (and GoogleTest's discovery) runs the aarch64 test programs under
# (cmake/toolchain-aarch64.cmake, docs/design.md §11): qemu-aarch64 with the sysroot's loader and
# libraries, on the CPU that LPATTN_QEMU_CPU names, by default every extension qemu emulates with
# 256-bit SVE vectors, where dispatch takes the SVE target; `max,sve=off` leaves NEON.
#   qemu_aarch64.sh QEMU SYSROOT DEFAULT_CPU PROGRAM [ARGS...]
qemu=$1 sysroot=$2 cpu=$3
shift 3
exec "$qemu" -L "$sysroot" -cpu "${LPATTN_QEMU_CPU:-$cpu}" "$@"
