// cpuid, xgetbv and the AMX permission (cpu_features.h).
#include "kernels/native/cpu_features.h"

#if LPATTN_NATIVE_X86
#include <cpuid.h>
#endif
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace lpattn::native {
namespace {

#if LPATTN_NATIVE_X86
// Linux's arch_prctl request for a dynamically enabled state component, and AMX tile data's
// component number (asm/prctl.h; glibc 2.36 has no wrapper).
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

bool Bit(uint32_t word, int bit) { return (word >> bit) & 1u; }

uint64_t Xgetbv0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}

CpuFeatures Detect() {
  CpuFeatures f;
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {  // the vendor string: ebx, edx, ecx
    f.amd = ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u;  // "AuthenticAMD"
  }
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !Bit(ecx, 27)) return f;  // no OSXSAVE
  const uint64_t xcr0 = Xgetbv0();
  const bool avx_state = (xcr0 & 0x6) == 0x6;                 // XMM and YMM
  const bool avx512_state = avx_state && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool tile_state = (xcr0 & 0x60000) == 0x60000;         // XTILECFG and XTILEDATA
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  f.avx512f = avx512_state && Bit(ebx, 16);
  f.avx512bw = avx512_state && Bit(ebx, 30);
  f.avx512vl = avx512_state && Bit(ebx, 31);
  f.avx512_vnni = f.avx512f && Bit(ecx, 11);
  f.avx512_fp16 = f.avx512f && Bit(edx, 23);
  f.amx_tile = tile_state && Bit(edx, 24);
  f.amx_bf16 = f.amx_tile && Bit(edx, 22);
  f.amx_int8 = f.amx_tile && Bit(edx, 25);
  const uint32_t max_subleaf = eax;
  if (max_subleaf >= 1) {
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    f.avx_vnni = avx_state && Bit(eax, 4);
    f.avx512_bf16 = f.avx512f && Bit(eax, 5);
  }
  return f;
}
#else
CpuFeatures Detect() { return {}; }  // no x86 family on this architecture
#endif

std::atomic<bool> g_force_refusal{false};

AmxPermission Ask() {
  AmxPermission p;
  if (!DetectedCpuFeatures().amx_tile) {
    p.reason = "this CPU (or its OS) has no AMX tile state";
    return p;
  }
  if (const char* env = std::getenv("LPATTN_AMX"); env != nullptr && std::strcmp(env, "off") == 0) {
    p.reason = "LPATTN_AMX=off in the environment";
    return p;
  }
#if LPATTN_NATIVE_X86
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    p.reason = std::string("Linux refused AMX tile data (arch_prctl: ") + std::strerror(errno) + ")";
    return p;
  }
  p.granted = true;
#endif
  return p;
}

}  // namespace

const CpuFeatures& DetectedCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

const AmxPermission& RequestAmxPermission() {
  static const AmxPermission asked = Ask();
  static const AmxPermission refused{false, "refused for a test (ForceAmxRefusalForTest)"};
  return g_force_refusal.load(std::memory_order_acquire) ? refused : asked;
}

void SetAmxRefusalForTest(bool refuse) { g_force_refusal.store(refuse, std::memory_order_release); }

}  // namespace lpattn::native
