// The Highway targets whose code adds x86 intrinsics to Highway's own (docs/design.md §4): AVX2
// and the AVX-512 targets, AVX3 and AVX3_DL. Release builds compile AVX3 (AVX3_DL is opt-in in
// Highway 1.0.3); a build that compiles only the machine's own static target (the sanitizer
// build, §4) gets AVX3_DL on a CPU with AVX-512 VNNI, VBMI2 and friends (Ice Lake, Zen 4 and
// later), and its code takes the same native tiles as AVX3's. Each macro reads HWY_TARGET where
// it is used, so an `#if` in a per-target header tests the target being compiled.
#ifndef LPATTN_KERNELS_NATIVE_X86_TARGETS_H_
#define LPATTN_KERNELS_NATIVE_X86_TARGETS_H_

#include "hwy/detect_targets.h"

#define LPATTN_AVX512_TARGET (HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL)
#define LPATTN_X86_VNNI_TARGET (LPATTN_AVX512_TARGET || HWY_TARGET == HWY_AVX2)

#endif  // LPATTN_KERNELS_NATIVE_X86_TARGETS_H_
