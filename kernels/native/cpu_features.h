// What this CPU and its operating system let the native low-precision paths use
// (docs/design.md §4): the instruction families Highway 1.0.3 has no operations for (VNNI,
// AVX512_BF16, AVX512_FP16, AMX), read from cpuid and xgetbv once per process, and the Linux
// permission AMX tile data needs before its first use.
#ifndef LPATTN_KERNELS_NATIVE_CPU_FEATURES_H_
#define LPATTN_KERNELS_NATIVE_CPU_FEATURES_H_

#include <string>

// The native families are x86-64 code (cpuid, AVX-512 and AMX intrinsics); on other
// architectures none is compiled, the features read as absent and a family's kernel entry is a
// stub that is never reached (docs/design.md §11).
#if defined(__x86_64__)
#define LPATTN_NATIVE_X86 1
#else
#define LPATTN_NATIVE_X86 0
#endif

namespace lpattn::native {

struct CpuFeatures {
  // cpuid bits, each usable only with the OS's support for the register state it needs
  // (xgetbv: the AVX-512 state for the avx512 ones, the AVX state for avx_vnni).
  bool avx512f = false, avx512bw = false, avx512vl = false;
  bool avx512_vnni = false, avx512_bf16 = false, avx512_fp16 = false, avx_vnni = false;
  // AMX: the cpuid bits and the OS's support for the tile state (xgetbv bits 17 and 18). Using
  // tiles also needs the process's permission (RequestAmxPermission).
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  // cpuid's vendor is AMD: some choices follow measured differences between vendors' cores
  // (bf16_pair_products.h's dot tiles, a decode step's requests for rows ahead).
  bool amd = false;
};

// cpuid leaf 7 (subleaves 0 and 1) and xgetbv, read on first use; all false off x86-64.
const CpuFeatures& DetectedCpuFeatures();

// The outcome of asking Linux for AMX tile data (arch_prctl(ARCH_REQ_XCOMP_PERM,
// XFEATURE_XTILEDATA)), asked once per process on first use. `granted` is false on a CPU
// without AMX, when the kernel refuses (older kernels, seccomp, a full signal stack), or when
// the refusal is forced (LPATTN_AMX=off in the environment, or SetAmxRefusalForTest);
// `reason` says which.
struct AmxPermission {
  bool granted = false;
  std::string reason;  // empty when granted
};
const AmxPermission& RequestAmxPermission();

// For tests of the fallback: while `refuse` holds, RequestAmxPermission reports a refusal, as
// if the kernel had refused (native::ForceAmxRefusalForTest also re-reads the enabled paths).
void SetAmxRefusalForTest(bool refuse);

}  // namespace lpattn::native

#endif  // LPATTN_KERNELS_NATIVE_CPU_FEATURES_H_
