// The native instruction families (kernels/native/, docs/design.md §4): cpuid and xgetbv
// agree with what Linux reports in /proc/cpuinfo, AMX tile data is granted and its tiles
// compute what a scalar loop computes, a refused permission takes AMX off cleanly, the
// selection API narrows the families, and the int8 products give the same bits with and
// without their VNNI tile. A test of a family this CPU lacks is skipped with the family's name.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/native/cpu_features.h"
#include "kernels/native/native_paths.h"
#include "kernels/prepared_kv.h"
#include "tests/kernels/attention_case.h"

namespace lpattn::test {
namespace {

std::set<std::string> ProcCpuinfoFlags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

const native::NativePathState& StateOf(const std::vector<native::NativePathState>& states,
                                       native::NativePath path) {
  for (const auto& state : states) {
    if (state.path == path) return state;
  }
  throw std::logic_error("no state for a native path");
}

TEST(NativePaths, CpuFeaturesMatchProcCpuinfo) {
  const std::set<std::string> flags = ProcCpuinfoFlags();
  ASSERT_FALSE(flags.empty()) << "/proc/cpuinfo has no flags line";
  const native::CpuFeatures& f = native::DetectedCpuFeatures();
  const std::pair<const char*, bool> expected[] = {
      {"avx512f", f.avx512f},         {"avx512bw", f.avx512bw},     {"avx512vl", f.avx512vl},
      {"avx512_vnni", f.avx512_vnni}, {"avx512_bf16", f.avx512_bf16}, {"avx512_fp16", f.avx512_fp16},
      {"avx_vnni", f.avx_vnni},       {"amx_tile", f.amx_tile},     {"amx_bf16", f.amx_bf16},
      {"amx_int8", f.amx_int8}};
  for (const auto& [flag, detected] : expected) {
    EXPECT_EQ(flags.count(flag) == 1, detected) << flag;
  }
}

TEST(NativePaths, InfoListsEveryFamilyAndHowEachOperandIsMultiplied) {
  const DispatchInfo info = GetDispatchInfo();
  std::set<std::string> names;
  for (const NativePathInfo& path : info.native) {
    names.insert(path.name);
    EXPECT_TRUE(!path.enabled || path.cpu) << path.name;
  }
  EXPECT_EQ(names, (std::set<std::string>{"avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16",
                                          "amx_bf16", "amx_int8"}));
  ASSERT_FALSE(info.products.empty());
  EXPECT_NE(info.products[1].find("int8 Q K^T"), std::string::npos);
}

// tdpbf16ps on one 16 x 16 tile over 32 bf16 pairs against the same sums in a scalar loop
// (exact here: small integers, whose products and sums fp32 holds exactly).
__attribute__((target("amx-tile,amx-bf16"))) void AmxBf16Tile(const uint16_t* a, const uint16_t* b,
                                                                float* c) {
  alignas(64) uint8_t config[64] = {};
  config[0] = 1;  // palette 1
  for (int t = 0; t < 3; ++t) {
    config[16 + 2 * t] = 64;  // bytes per row: 16 fp32 or 32 bf16
    config[48 + t] = 16;      // rows
  }
  _tile_loadconfig(config);
  _tile_zero(0);
  _tile_loadd(1, a, 64);
  _tile_loadd(2, b, 64);
  _tile_dpbf16ps(0, 1, 2);
  _tile_stored(0, c, 64);
  _tile_release();
}

uint16_t Bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return uint16_t(bits >> 16);  // exact for the small integers used here
}

TEST(NativePaths, AmxBf16TileComputesTheScalarSums) {
  const auto states = native::NativePathStates();
  if (!StateOf(states, native::NativePath::kAmxBf16).cpu) {
    GTEST_SKIP() << "amx_bf16 not run on this CPU: "
                 << (native::DetectedCpuFeatures().amx_bf16
                         ? native::RequestAmxPermission().reason
                         : std::string("the CPU lacks it"));
  }
  // A: 16 rows x 32 bf16; B: 16 rows of 16 pairs (B[k/2][n][k%2] = b(k, n)), VNNI layout.
  std::vector<uint16_t> a(16 * 32), b(16 * 32);
  std::vector<float> av(16 * 32), bv(32 * 16);
  for (int m = 0; m < 16; ++m) {
    for (int k = 0; k < 32; ++k) av[m * 32 + k] = float((m * 7 + k * 3) % 9 - 4);
  }
  for (int k = 0; k < 32; ++k) {
    for (int n = 0; n < 16; ++n) bv[k * 16 + n] = float((k * 5 + n * 11) % 7 - 3);
  }
  for (int i = 0; i < 16 * 32; ++i) a[i] = Bf16(av[i]);
  for (int k = 0; k < 32; ++k) {
    for (int n = 0; n < 16; ++n) b[(k / 2) * 32 + n * 2 + k % 2] = Bf16(bv[k * 16 + n]);
  }
  alignas(64) float c[16 * 16];
  AmxBf16Tile(a.data(), b.data(), c);
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 16; ++n) {
      float sum = 0.0f;
      for (int k = 0; k < 32; ++k) sum += av[m * 32 + k] * bv[k * 16 + n];
      EXPECT_EQ(c[m * 16 + n], sum) << m << "," << n;
    }
  }
}

TEST(NativePaths, RefusedAmxPermissionTakesAmxOffAndKernelsStillRun) {
  native::ForceAmxRefusalForTest(true);
  const auto states = native::NativePathStates();
  for (const native::NativePath path : {native::NativePath::kAmxBf16, native::NativePath::kAmxInt8}) {
    const native::NativePathState& state = StateOf(states, path);
    EXPECT_FALSE(state.cpu);
    EXPECT_FALSE(state.enabled);
    EXPECT_FALSE(native::NativePathEnabled(path));
    if (native::DetectedCpuFeatures().amx_tile) {
      EXPECT_NE(state.note.find("refused"), std::string::npos) << state.note;
    }
  }
  EXPECT_FALSE(SelectNativePaths("amx_bf16"));
  // Everything else runs as before: a native int8 prepared forward against the reference.
  AttentionCase c({1, 2, 2, 37, 37, 16}, true, SinkMode::kNone, Layout::kBHTD);
  c.options.precision = ParsePrecision("qk=int8,pv=int8,p=int8,gran=tensor");
  const KernelOutputs out = c.Run(false);
  EXPECT_LE(ScaledMaxError(out.o.Dense(), c.ReferenceForward().o), 0.05);
  native::ForceAmxRefusalForTest(false);
  EXPECT_EQ(StateOf(native::NativePathStates(), native::NativePath::kAmxBf16).cpu,
            native::DetectedCpuFeatures().amx_bf16 && native::RequestAmxPermission().granted);
}

TEST(NativePaths, SelectionNarrowsTheEnabledFamilies) {
  EXPECT_FALSE(SelectNativePaths("avx1024_vnni"));
  EXPECT_FALSE(SelectNativePaths("avx512_vnni,nonsense"));
  ASSERT_TRUE(SelectNativePaths("none"));
  for (const NativePathInfo& path : GetDispatchInfo().native) {
    EXPECT_FALSE(path.enabled) << path.name;
    if (path.cpu) EXPECT_NE(path.note.find("none"), std::string::npos) << path.note;
  }
  ASSERT_TRUE(SelectNativePaths(""));
  for (const NativePathInfo& path : GetDispatchInfo().native) {
    EXPECT_EQ(path.enabled, path.cpu) << path.name;
  }
}

// The VNNI tile and Highway's pmaddwd sum the same int16 pair products exactly in int32, so
// the int8 paths give identical bits with the tile on or off.
TEST(NativePaths, Int8ProductsAreBitIdenticalWithAndWithoutVnni) {
  const DispatchInfo info = GetDispatchInfo();
  bool vnni = false;
  for (const NativePathInfo& path : info.native) vnni |= path.name == "avx512_vnni" && path.cpu;
  bool avx3 = false;
  for (const std::string& target : info.supported) avx3 |= target == "AVX3";
  if (!vnni || !avx3) GTEST_SKIP() << "avx512_vnni not run on this CPU: the CPU lacks it";
  const ScopedTarget target("AVX3");
  ASSERT_TRUE(target.ok);
  for (const char* precision : {"qk=int8,pv=int8,p=int8,gran=tensor", "qk=int8,pv=bf16,gran=token",
                                "qk=int8,pv=int8,p=int8,gran=token,vgran=channel"}) {
    AttentionCase c({2, 4, 2, 131, 200, 72}, true, SinkMode::kLearned, Layout::kBTHD, 3);
    c.options.precision = ParsePrecision(precision);
    ASSERT_TRUE(SelectNativePaths(""));
    const KernelOutputs with = c.Run(false);
    ASSERT_TRUE(SelectNativePaths("none"));
    const KernelOutputs without = c.Run(false);
    ASSERT_TRUE(SelectNativePaths(""));
    EXPECT_EQ(with.o.storage, without.o.storage) << precision;
    EXPECT_EQ(with.lse, without.lse) << precision;
  }
}

}  // namespace
}  // namespace lpattn::test
