// The native instruction families of the low-precision paths (docs/design.md §4): which the
// library has kernels for, which this CPU can take, and which are enabled now. The products'
// code asks NativePathEnabled once per call site and takes its native tile or the Highway one;
// SelectNativePaths (or LPATTN_NATIVE in the environment) narrows the set, for benchmarking
// the paths of one CPU against each other.
#ifndef LPATTN_KERNELS_NATIVE_NATIVE_PATHS_H_
#define LPATTN_KERNELS_NATIVE_NATIVE_PATHS_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace lpattn::native {

enum class NativePath : uint32_t {
  kAvx512Vnni,  // vpdpwssd / vpdpbusd on 512-bit vectors
  kAvxVnni,     // the VEX-encoded 256-bit VNNI of AVX-VNNI
  kAvx512Bf16,  // vdpbf16ps
  kAvx512Fp16,  // fp16 arithmetic on 512-bit vectors
  kAmxBf16,     // tdpbf16ps tiles
  kAmxInt8,     // tdpbusd and its signed variants
  kCount,
};

const char* NativePathName(NativePath path);

struct NativePathState {
  NativePath path = NativePath::kCount;
  bool compiled = false;  // the library has a kernel that uses it
  bool cpu = false;       // the CPU and its OS have it (for AMX: and Linux granted tile data)
  bool enabled = false;   // cpu, and not excluded by SelectNativePaths / LPATTN_NATIVE
  std::string note;       // why a family the CPU has is not usable, or what selected it off
};
std::vector<NativePathState> NativePathStates();

// Restricts the enabled paths to `names`: "" (every path the CPU has), "none", or a list
// separated by ',' of NativePathName values. Returns false, changing nothing, on an unknown
// name or a path this CPU cannot take. Not thread-safe with concurrent kernel calls.
bool SelectNativePaths(const std::string& names);

// For tests of the fallback: while `refuse` holds, AMX is treated as refused by Linux (its
// families are not on this CPU and not enabled); false restores what the CPU has. Either way the
// enabled set returns to the default (LPATTN_NATIVE and SelectNativePaths are forgotten).
void ForceAmxRefusalForTest(bool refuse);

// The body of a native family's entry point in a build without x86-64 (docs/design.md §11):
// unreachable, as NativePathEnabled is false for every family there; says which and aborts.
[[noreturn]] void NativeFamilyNotCompiled(const char* function);

namespace detail {
inline constexpr uint32_t kUnresolved = 1u << 31;
extern std::atomic<uint32_t> enabled_paths;  // a bit per NativePath, or kUnresolved
uint32_t ResolveEnabledPaths();               // reads the CPU and LPATTN_NATIVE once
}  // namespace detail

inline bool NativePathEnabled(NativePath path) {
  uint32_t mask = detail::enabled_paths.load(std::memory_order_relaxed);
  if (mask & detail::kUnresolved) mask = detail::ResolveEnabledPaths();
  return (mask >> static_cast<uint32_t>(path)) & 1u;
}

}  // namespace lpattn::native

#endif  // LPATTN_KERNELS_NATIVE_NATIVE_PATHS_H_
