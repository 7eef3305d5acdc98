// The native paths' registry (native_paths.h).
#include "kernels/native/native_paths.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "kernels/native/cpu_features.h"

namespace lpattn::native {
namespace detail {
std::atomic<uint32_t> enabled_paths{kUnresolved};
}  // namespace detail

namespace {

constexpr uint32_t kPathCount = static_cast<uint32_t>(NativePath::kCount);

// The families the library has kernels for today: the int8 products' u8 x s8 tile on
// avx512_vnni (AVX3 code) and avx_vnni (AVX2 code), and the vpdpwssd pair tile
// (kernels/native/int_matmul_tile-inl.h); the AMX bf16 and int8 tiles, with the weight pairs'
// conversion in avx512_bf16 (kernels/native/amx_products.cc); avx512_bf16's dot tiles
// (kernels/native/bf16_dot_products.cc). avx512_fp16 is detected and
// reported so that a user sees what the CPU offers (docs/design.md §4 says why no kernel uses it).
// None is compiled off x86-64 (docs/design.md §11).
bool Compiled(NativePath path) {
  return LPATTN_NATIVE_X86 &&
         (path == NativePath::kAvx512Vnni || path == NativePath::kAvxVnni ||
          path == NativePath::kAmxBf16 || path == NativePath::kAvx512Bf16 ||
          path == NativePath::kAmxInt8);
}

// Whether the CPU (and OS, and for AMX the kernel's permission) has the family; `note` gets
// why not when the cpuid bit is there but the family cannot be used.
bool OnCpu(NativePath path, std::string* note) {
  const CpuFeatures& f = DetectedCpuFeatures();
  const auto amx = [&](bool bit) {
    if (!bit) return false;
    const AmxPermission& permission = RequestAmxPermission();
    if (!permission.granted && note != nullptr) *note = permission.reason;
    return permission.granted;
  };
  switch (path) {
    case NativePath::kAvx512Vnni: return f.avx512_vnni;
    case NativePath::kAvxVnni: return f.avx_vnni;
    case NativePath::kAvx512Bf16: return f.avx512_bf16;
    case NativePath::kAvx512Fp16: return f.avx512_fp16;
    case NativePath::kAmxBf16: return amx(f.amx_bf16);
    case NativePath::kAmxInt8: return amx(f.amx_int8);
    case NativePath::kCount: break;
  }
  return false;
}

uint32_t CpuMask() {
  uint32_t mask = 0;
  for (uint32_t p = 0; p < kPathCount; ++p) {
    if (OnCpu(static_cast<NativePath>(p), nullptr)) mask |= 1u << p;
  }
  return mask;
}

// Parses "", "none" or a ','-separated list of names into a mask within the CPU's; false on
// an unknown name or one the CPU lacks (`problem` says which).
bool ParseSelection(const std::string& names, uint32_t* mask, std::string* problem) {
  const uint32_t cpu = CpuMask();
  if (names.empty()) {
    *mask = cpu;
    return true;
  }
  *mask = 0;
  if (names == "none") return true;
  std::stringstream items(names);
  std::string item;
  while (std::getline(items, item, ',')) {
    uint32_t bit = 0;
    bool known = false;
    for (uint32_t p = 0; p < kPathCount; ++p) {
      if (item == NativePathName(static_cast<NativePath>(p))) {
        bit = 1u << p;
        known = true;
      }
    }
    if (!known || (cpu & bit) == 0) {
      *problem = known ? "'" + item + "' is not available on this CPU" : "unknown path '" + item + "'";
      return false;
    }
    *mask |= bit;
  }
  return true;
}

std::mutex g_mutex;
std::string g_selection_note;  // what LPATTN_NATIVE or SelectNativePaths chose, for the info

}  // namespace

const char* NativePathName(NativePath path) {
  switch (path) {
    case NativePath::kAvx512Vnni: return "avx512_vnni";
    case NativePath::kAvxVnni: return "avx_vnni";
    case NativePath::kAvx512Bf16: return "avx512_bf16";
    case NativePath::kAvx512Fp16: return "avx512_fp16";
    case NativePath::kAmxBf16: return "amx_bf16";
    case NativePath::kAmxInt8: return "amx_int8";
    case NativePath::kCount: break;
  }
  return "?";
}

uint32_t detail::ResolveEnabledPaths() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  uint32_t mask = enabled_paths.load(std::memory_order_relaxed);
  if ((mask & kUnresolved) == 0) return mask;
  std::string problem;
  const char* env = std::getenv("LPATTN_NATIVE");
  if (env == nullptr || !ParseSelection(env, &mask, &problem)) {
    if (env != nullptr) {
      std::fprintf(stderr, "lpattn: LPATTN_NATIVE=%s ignored: %s\n", env, problem.c_str());
    }
    mask = CpuMask();
  } else if (*env != '\0') {
    g_selection_note = std::string("selected by LPATTN_NATIVE=") + env;
  }
  enabled_paths.store(mask, std::memory_order_relaxed);
  return mask;
}

std::vector<NativePathState> NativePathStates() {
  const uint32_t mask = detail::enabled_paths.load(std::memory_order_relaxed) & detail::kUnresolved
                            ? detail::ResolveEnabledPaths()
                            : detail::enabled_paths.load(std::memory_order_relaxed);
  std::vector<NativePathState> states;
  for (uint32_t p = 0; p < kPathCount; ++p) {
    NativePathState state;
    state.path = static_cast<NativePath>(p);
    state.compiled = Compiled(state.path);
    state.cpu = OnCpu(state.path, &state.note);
    if (!LPATTN_NATIVE_X86) state.note = "not compiled: an x86-64 family, this build is not x86-64";
    state.enabled = (mask >> p) & 1u;
    if (state.cpu && !state.enabled) {
      const std::lock_guard<std::mutex> lock(g_mutex);
      state.note = g_selection_note.empty() ? "not selected" : g_selection_note;
    }
    states.push_back(state);
  }
  return states;
}

bool SelectNativePaths(const std::string& names) {
  uint32_t mask = 0;
  std::string problem;
  if (!ParseSelection(names, &mask, &problem)) return false;
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_selection_note = names.empty() ? "" : "selected by SelectNativePaths(\"" + names + "\")";
  detail::enabled_paths.store(mask, std::memory_order_relaxed);
  return true;
}

void NativeFamilyNotCompiled(const char* function) {
  std::fprintf(stderr, "lpattn: %s called, but its x86-64 family is not compiled in this build\n",
               function);
  std::abort();
}

void ForceAmxRefusalForTest(bool refuse) {
  SetAmxRefusalForTest(refuse);
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_selection_note.clear();
  detail::enabled_paths.store(CpuMask(), std::memory_order_relaxed);
}

}  // namespace lpattn::native
