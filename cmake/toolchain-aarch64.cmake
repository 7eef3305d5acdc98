# Cross build for aarch64 with Debian's cross compiler, tests run under qemu-user
# (docs/design.md §11). The libraries lpattn finds (Highway, oneTBB, GoogleTest) come from the
# arm64 sysroot scripts/setup_aarch64.sh unpacks; the compiler keeps its own arm64 libc and
# libstdc++ (/usr/aarch64-linux-gnu), which are the same Debian 12 versions.
#   cmake -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake
#         [-DLPATTN_AARCH64_SYSROOT=DIR] [-DLPATTN_QEMU_SVE_VQ=N]
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# The sysroot defaults to the one beside the build tree; the cache keeps it for try_compile.
set(LPATTN_AARCH64_SYSROOT "${CMAKE_BINARY_DIR}/sysroot" CACHE PATH
    "arm64 libraries unpacked by scripts/setup_aarch64.sh")
# qemu's SVE vector length in 128-bit quadwords (2: 256-bit vectors), which the SVE target
# (LPATTN_ARM_SVE) runs with; the NEON code runs the same under any length.
set(LPATTN_QEMU_SVE_VQ 2 CACHE STRING "qemu-aarch64 -cpu max,sve-max-vq=N")
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES LPATTN_AARCH64_SYSROOT)

# Headers, libraries and CMake packages from the sysroot (and the compiler's own directory);
# programs (ctest, python3 for the docs tests) from the host.
set(CMAKE_FIND_ROOT_PATH "${LPATTN_AARCH64_SYSROOT}" /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# The sysroot's libraries link each other (libhwy_contrib needs libhwy); the linker finds them
# there, and the test programs find them at run time through qemu's -L.
set(LPATTN_AARCH64_LIBDIRS
    "${LPATTN_AARCH64_SYSROOT}/usr/lib/aarch64-linux-gnu"
    "${LPATTN_AARCH64_SYSROOT}/lib/aarch64-linux-gnu")
foreach(dir IN LISTS LPATTN_AARCH64_LIBDIRS)
  string(APPEND CMAKE_EXE_LINKER_FLAGS_INIT " -Wl,-rpath-link,${dir}")
  string(APPEND CMAKE_SHARED_LINKER_FLAGS_INIT " -Wl,-rpath-link,${dir}")
endforeach()

# ctest (and gtest_discover_tests at build time) run the test programs under qemu, with the
# sysroot as the root their loader and libraries are looked up in, through
# cmake/qemu_aarch64.sh: -cpu max offers every extension qemu emulates, SVE and SVE2 among them;
# LPATTN_QEMU_CPU in the environment names another CPU (max,sve=off: NEON only).
find_program(LPATTN_QEMU_AARCH64 qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR
    "${CMAKE_CURRENT_LIST_DIR}/qemu_aarch64.sh;${LPATTN_QEMU_AARCH64};${LPATTN_AARCH64_SYSROOT};max,sve-max-vq=${LPATTN_QEMU_SVE_VQ}")
