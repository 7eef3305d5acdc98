// The native instruction families (kernels/native/, docs/design.md §4): cpuid and xgetbv
// agree with what Linux reports in /proc/cpuinfo, AMX tile data is granted and its tiles
// compute what a scalar loop computes, a refused permission takes AMX off cleanly, the
// selection API narrows the families, and the int8 products give the same bits with and
// without their VNNI tile. A test of a family this CPU lacks is skipped with the family's name.
// Off x86-64 no family is compiled (docs/design.md §11), and the tests say so by name.
#include <gtest/gtest.h>

#include "kernels/native/cpu_features.h"  // LPATTN_NATIVE_X86

#if LPATTN_NATIVE_X86
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/attention.h"
#include "kernels/kinterval.h"
#include "kernels/native/amx_products.h"
#include "kernels/native/bf16_pair_products.h"
#include "kernels/native/buffer_pool.h"
#include "kernels/native/cpu_features.h"
#include "kernels/native/huge_pages.h"
#include "kernels/native/native_paths.h"
#include "kernels/prepared_kv.h"
#include "kernels/skeleton/tile_sizes.h"
#include "tests/kernels/attention_case.h"

namespace lpattn::test {
namespace {

const native::NativePathState& StateOf(const std::vector<native::NativePathState>& states,
                                       native::NativePath path) {
  for (const auto& state : states) {
    if (state.path == path) return state;
  }
  throw std::logic_error("no state for a native path");
}

// run() with every native family this CPU has enabled, then with none (the Highway paths), and
// the full selection restored: {native, highway}.
template <class Run>
auto NativeAndHighway(const Run& run) {
  EXPECT_TRUE(SelectNativePaths(""));
  auto native = run();
  EXPECT_TRUE(SelectNativePaths("none"));
  auto highway = run();
  EXPECT_TRUE(SelectNativePaths(""));
  return std::pair{std::move(native), std::move(highway)};
}

#if LPATTN_NATIVE_X86
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
  // The vendor, as /proc/cpuinfo's vendor_id names it.
  std::ifstream in("/proc/cpuinfo");
  std::string line, vendor;
  while (vendor.empty() && std::getline(in, line)) {
    if (line.rfind("vendor_id", 0) == 0) vendor = line.substr(line.find(':') + 2);
  }
  EXPECT_EQ(vendor == "AuthenticAMD", f.amd) << vendor;
}
#else
// Every family is reported, none compiled, on the CPU or enabled, each with a note that says it
// was not compiled; selecting one is refused, "none" and "" are accepted.
TEST(NativePaths, NoFamilyIsCompiledOffX86) {
  const DispatchInfo info = GetDispatchInfo();
  EXPECT_EQ(info.native.size(), size_t(native::NativePath::kCount));
  for (const NativePathInfo& path : info.native) {
    EXPECT_FALSE(path.compiled) << path.name;
    EXPECT_FALSE(path.cpu) << path.name;
    EXPECT_FALSE(path.enabled) << path.name;
    EXPECT_NE(path.note.find("not compiled"), std::string::npos) << path.name << ": " << path.note;
  }
  EXPECT_FALSE(SelectNativePaths("amx_bf16"));
  EXPECT_FALSE(SelectNativePaths("avx512_vnni"));
  EXPECT_TRUE(SelectNativePaths("none"));
  EXPECT_TRUE(SelectNativePaths(""));
}

#if defined(__aarch64__)
// On aarch64 dispatch takes SVE where the build compiled it (LPATTN_ARM_SVE, docs/design.md
// §11) and the CPU has it (qemu's -cpu max; not with sve=off), NEON otherwise. The targets are
// printed, so a log says which one the other tests ran on.
TEST(NativePaths, Aarch64DispatchTakesSveWhereTheCpuHasIt) {
  const DispatchInfo info = GetDispatchInfo();
  const auto has = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  std::printf("compiled:");
  for (const std::string& t : info.compiled) std::printf(" %s", t.c_str());
  std::printf("; supported:");
  for (const std::string& t : info.supported) std::printf(" %s", t.c_str());
  std::printf("; chosen: %s\n", info.chosen.c_str());
  EXPECT_TRUE(has(info.compiled, "NEON"));
  EXPECT_EQ(info.chosen, has(info.supported, "SVE") ? "SVE" : "NEON");
}
#endif
#endif

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

#if LPATTN_NATIVE_X86
// tdpbf16ps on one 16 x 16 tile over 32 bf16 pairs against the same sums in a scalar loop
// (exact here: small integers, whose products and sums fp32 holds exactly).
__attribute__((target("amx-tile,amx-bf16"))) void AmxBf16Tile(const uint16_t* a, const uint16_t* b,
                                                                float* c) {
  const native::AmxTiles tiles;  // every tile 16 rows x 64 bytes
  _tile_zero(0);
  _tile_loadd(1, a, 64);
  _tile_loadd(2, b, 64);
  _tile_dpbf16ps(0, 1, 2);
  _tile_stored(0, c, 64);
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
#endif  // LPATTN_NATIVE_X86

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
// The int8 products on each VNNI family, in the Highway target that takes it (avx512_vnni:
// AVX3 or AVX3_DL, avx_vnni: AVX2), against the int16 pair tile without one: the integer sums are exact
// either way, so the outputs agree bit for bit. D 72 and 36 take the u8 x s8 tile (vpdpbusd on
// K rows and biased Q quads, P's codes on V quads) whatever AMX does, 64 too with amx_int8
// selected off; 70 the vpdpwssd pair tile (AVX3). K and V prepared for a u8 x s8 tile are also
// read by the pair tile once the family is selected off.
TEST(NativePaths, Int8ProductsAreBitIdenticalWithAndWithoutVnni) {
  const DispatchInfo info = GetDispatchInfo();
  std::set<std::string> on_cpu, targets(info.supported.begin(), info.supported.end());
  for (const NativePathInfo& path : info.native) {
    if (path.cpu) on_cpu.insert(path.name);
  }
  int runs = 0;
  // avx512_vnni in the AVX-512 target this build has: AVX3, or AVX3_DL in a build of the
  // machine's own static target (kernels/native/x86_targets.h).
  const char* avx512 = targets.count("AVX3_DL") ? "AVX3_DL" : "AVX3";
  for (const auto& [family, target_name] : {std::pair{"avx512_vnni", avx512}, std::pair{"avx_vnni", "AVX2"}}) {
    if (!on_cpu.count(family) || !targets.count(target_name)) {
      std::printf("%s not run: %s\n", family,
                  on_cpu.count(family) ? "this build has no such Highway target" : "the CPU lacks it");
      continue;
    }
    ++runs;
    const ScopedTarget target(target_name);
    ASSERT_TRUE(target.ok);
    for (const char* precision : {"qk=int8,pv=int8,p=int8,gran=tensor", "qk=int8,pv=bf16,gran=token",
                                  "qk=int8,pv=int8,p=int8,gran=token,vgran=channel"}) {
      for (const int64_t dim : {72, 36, 64, 70}) {
        AttentionCase c({2, 4, 2, 131, 200, dim}, true, SinkMode::kLearned, Layout::kBTHD, 3);
        c.options.precision = ParsePrecision(precision);
        const std::string what = std::string(family) + " " + precision + " D " + std::to_string(dim);
        ASSERT_TRUE(SelectNativePaths(family));
        const KernelOutputs with = c.Run(false);
        const PreparedKv prepared(c.shape, c.options.precision, c.k.cview(), c.v.cview());
        ASSERT_TRUE(SelectNativePaths("none"));
        const KernelOutputs without = c.Run(false);
        OwnedTensor o(2, 4, 131, dim, Layout::kBTHD);
        std::vector<float> lse(with.lse.size());
        ExactForward(c.shape, c.options, c.q.cview(), prepared, o.view(), lse.data());
        ASSERT_TRUE(SelectNativePaths(""));
        EXPECT_EQ(with.o.storage, without.o.storage) << what;
        EXPECT_EQ(with.lse, without.lse) << what;
        EXPECT_EQ(o.storage, without.o.storage) << what;
      }
    }
  }
  if (runs == 0) GTEST_SKIP() << "neither avx512_vnni nor avx_vnni run (see above why)";
}

bool AmxBf16Enabled() { return native::NativePathEnabled(native::NativePath::kAmxBf16); }

// The bf16 pair products' engines (kernels/native/bf16_pair_products.h) this CPU can run, each
// called directly: AMX tiles, and avx512_bf16's dot tiles (wherever the CPU has avx512_bf16,
// whether or not the library takes them there). Prints each engine that is not run, by name.
enum class PairEngine { kAmx, kDot };
std::vector<PairEngine> PairEnginesOnThisCpu() {
  std::vector<PairEngine> engines;
  if (AmxBf16Enabled()) {
    engines.push_back(PairEngine::kAmx);
  } else {
    std::printf("amx_bf16 tiles not run: this CPU lacks amx_bf16\n");
  }
  if (StateOf(native::NativePathStates(), native::NativePath::kAvx512Bf16).cpu) {
    engines.push_back(PairEngine::kDot);
  } else {
    std::printf("avx512_bf16 dot tiles not run: this CPU lacks avx512_bf16\n");
  }
  return engines;
}
const char* EngineName(PairEngine e) { return e == PairEngine::kAmx ? "amx_bf16" : "dot"; }


// The score tile against sums in double of the same bf16 values: every row count of a 48-key
// tile (full 16-key blocks, the copied tail, pairs of blocks and single ones), column counts
// that are not whole pairs of 16-query blocks, strided keys, and each head dimension it takes.
TEST(NativePaths, Bf16PairScoreTilesMatchDoubleSums) {
  const std::vector<PairEngine> engines = PairEnginesOnThisCpu();
  if (engines.empty()) GTEST_SKIP() << "neither amx_bf16 nor avx512_bf16 run: the CPU lacks both";
  for (const PairEngine engine : engines) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr size_t kWidth = 96;
  for (const size_t dim : {32, 64, 96, 128, 256}) {
    for (const size_t rows : {1, 7, 16, 17, 31, 32, 33, 47, 48}) {
      for (const size_t cols : {16, 32, 48, 96}) {
        const size_t key_stride = dim + 32;  // a strided view of the codes
        std::vector<uint16_t> keys(rows * key_stride), pairs(dim * kWidth, 0), tail(16 * dim);
        std::vector<float> kf(rows * dim), qf(cols * dim);
        for (size_t j = 0; j < rows; ++j) {
          for (size_t c = 0; c < dim; ++c) {
            keys[j * key_stride + c] = quant::EncodeBf16(normal(rng));
            kf[j * dim + c] = quant::DecodeBf16(keys[j * key_stride + c]);
          }
        }
        for (size_t i = 0; i < cols; ++i) {
          for (size_t c = 0; c < dim; ++c) {
            const uint16_t code = quant::EncodeBf16(normal(rng));
            pairs[(c / 2) * 2 * kWidth + 2 * i + c % 2] = code;
            qf[i * dim + c] = quant::DecodeBf16(code);
          }
        }
        std::vector<float> out(48 * kWidth, -1.0f), scaled(48 * kWidth, -1.0f);
        std::vector<float> row_scale(rows), col_scale(kWidth);
        for (size_t j = 0; j < rows; ++j) row_scale[j] = 0.5f + float(j % 5);
        for (size_t i = 0; i < kWidth; ++i) col_scale[i] = 0.25f * float(1 + i % 3);
        const float scale = 0.125f;
        if (engine == PairEngine::kAmx) {
          const native::AmxTiles tiles;
          native::AmxBf16ScoreTile(keys.data(), key_stride, rows, pairs.data(), kWidth, cols, dim,
                                   scale, out.data(), kWidth, tail.data());
          native::AmxBf16ScaledScoreTile(keys.data(), key_stride, rows, pairs.data(), kWidth, cols,
                                         dim, row_scale.data(), col_scale.data(), scaled.data(),
                                         kWidth, tail.data());
        } else {
          native::DotBf16ScoreTile(keys.data(), key_stride, rows, pairs.data(), kWidth, cols, dim,
                                   scale, nullptr, nullptr, out.data(), kWidth);
          native::DotBf16ScoreTile(keys.data(), key_stride, rows, pairs.data(), kWidth, cols, dim,
                                   1.0f, row_scale.data(), col_scale.data(), scaled.data(), kWidth);
        }
        const std::string what = std::string(EngineName(engine)) + " dim " + std::to_string(dim) +
                                 " rows " + std::to_string(rows) + " cols " + std::to_string(cols);
        double worst = 0.0, worst_scaled = 0.0;
        for (size_t j = 0; j < rows; ++j) {
          for (size_t i = 0; i < cols; ++i) {
            double sum = 0.0;
            for (size_t c = 0; c < dim; ++c) sum += double(kf[j * dim + c]) * qf[i * dim + c];
            worst = std::max(worst, std::abs(out[j * kWidth + i] - scale * sum) / (1.0 + std::abs(scale * sum)));
            const double s = sum * (double(row_scale[j]) * col_scale[i]);
            worst_scaled = std::max(worst_scaled, std::abs(scaled[j * kWidth + i] - s) / (1.0 + std::abs(s)));
          }
        }
        EXPECT_LE(worst, 1e-5) << what;
        EXPECT_LE(worst_scaled, 1e-5) << what << " (scaled)";
        // Rows past `rows` up to the next 16 are zeros (the padded tail); none beyond.
        for (size_t j = rows; j < (rows + 15) / 16 * 16; ++j) EXPECT_EQ(out[j * kWidth], 0.0f) << what;
        for (size_t j = (rows + 15) / 16 * 16; j < 48; ++j) EXPECT_EQ(out[j * kWidth], -1.0f) << what;
      }
    }
  }
  }
}

// The whole kernels with bf16, fp16 (split into two bf16) and fp8 (decoded to bf16) Q and K:
// AMX tiles for the score product against the Highway path (decoded K, fp32 products) and
// against the reference, exact and K-interval, causal and not, GQA, sinks, [B, T, H, D]
// strides, key counts with tails, each head dimension the tiles take and one they do not
// (which falls back), through the per-call and the prepared K/V.
TEST(NativePaths, Bf16PairScoresMatchTheHighwayPathAndTheReference) {
  if (!native::Bf16PairsEnabled()) {
    GTEST_SKIP() << "bf16 pair scores not run: this CPU takes neither amx_bf16 nor avx512_bf16's "
                    "dot tiles";
  }
  struct Case {
    AttentionShape shape;
    bool causal;
    SinkMode sink;
    Layout layout;
  };
  const Case cases[] = {
      {{1, 2, 2, 100, 100, 64}, true, SinkMode::kNone, Layout::kBHTD},
      {{2, 4, 2, 37, 301, 32}, true, SinkMode::kLearned, Layout::kBTHD},
      {{1, 2, 1, 130, 49, 128}, false, SinkMode::kOffByOne, Layout::kBHTD},
      {{1, 1, 1, 17, 17, 256}, true, SinkMode::kNone, Layout::kBTHD},
      {{1, 2, 2, 64, 64, 80}, true, SinkMode::kNone, Layout::kBHTD},  // 80: not taken
  };
  for (const char* precision : {"qk=bf16,pv=bf16", "qk=fp16,pv=fp16", "qk=fp8e4m3,pv=fp8e4m3",
                                "qk=fp8e5m2,pv=bf16,gran=tensor"}) {
  for (const Case& k : cases) {
    AttentionCase c(k.shape, k.causal, k.sink, k.layout, 11);
    c.options.precision = ParsePrecision(precision);
    ASSERT_TRUE(SelectNativePaths(""));
    const KernelOutputs amx = c.Run(false);
    PreparedKv prepared(c.shape, c.options.precision, c.k.cview(), c.v.cview());
    KernelOutputs amx_prepared;
    amx_prepared.o = OwnedTensor(k.shape.batch, k.shape.heads, k.shape.q_len, k.shape.head_dim, k.layout);
    amx_prepared.lse.assign(amx.lse.size(), 0.0f);
    ExactForward(c.shape, c.options, c.q.cview(), prepared, amx_prepared.o.view(), amx_prepared.lse.data());
    ASSERT_TRUE(SelectNativePaths("none"));
    const KernelOutputs highway = c.Run(false);
    ASSERT_TRUE(SelectNativePaths(""));
    const std::string what = std::string(precision) + " D " + std::to_string(k.shape.head_dim) +
                             " Tk " + std::to_string(k.shape.kv_len);
    EXPECT_LE(ScaledMaxError(amx.o.Dense(), highway.o.Dense()), 1e-6) << what;
    EXPECT_LE(ScaledMaxError(ToDouble(amx.lse), ToDouble(highway.lse)), 1e-6) << what;
    EXPECT_EQ(amx.o.storage, amx_prepared.o.storage) << what;
    // bf16 takes the tiles on either engine wherever the head dimension allows: their sums
    // group the additions differently, so some bits of O or of the LSE differ.
    if (std::string(precision) == "qk=bf16,pv=bf16" && k.shape.head_dim % 32 == 0) {
      EXPECT_TRUE(amx.lse != highway.lse || amx.o.storage != highway.o.storage)
          << what << ": the tiles did not run";
    }
    const ReferenceForwardResult ref = c.ReferenceForward();
    EXPECT_LE(ScaledMaxError(amx.o.Dense(), ref.o), 1e-5) << what;
    EXPECT_LE(ScaledMaxError(ToDouble(amx.lse), ref.lse), 1e-5) << what;
  }
  // K-interval (its statistics pass and weighting pass both take the score seam).
  for (const char* kint : {"K=4,cal=minmax,round=lerp", "K=16,cal=window,round=nearest,ste=prob"}) {
    const AttentionShape shape{1, 4, 2, 90, 150, 64};
    AttentionCase c(shape, true, SinkMode::kNone, Layout::kBHTD, 5);
    c.options.precision = ParsePrecision(precision);
    const KIntervalOptions options = ParseKInterval(kint);
    const auto [amx, highway] = NativeAndHighway(
        [&] { return RunKIntervalForward(c, options, Layout::kBHTD).o.Dense(); });
    // Nearest may round a score within float rounding of a half-node the other way.
    EXPECT_LE(ScaledMaxError(amx, highway), std::string(kint).find("nearest") != std::string::npos ? 0.5 : 1e-5)
        << precision << " " << kint;
  }
  }
}

// fp16 and fp8 K's score-tile rows built once per call (a prefill with many query tiles per kv
// head; docs/design.md §8) hold exactly the codes each key tile's conversion makes: the first
// query tile's rows of O and the LSE are bit for bit those of a call with that tile alone,
// which converts K per key tile (not causal, so a query's row does not depend on the others).
TEST(NativePaths, KeyRowsBuiltOnceMatchThePerTileConversion) {
  if (!native::Bf16PairsEnabled()) {
    GTEST_SKIP() << "key rows built once not run: this CPU takes neither amx_bf16 nor "
                    "avx512_bf16's dot tiles";
  }
  // Q scaled per token, so that its rows are quantized alike in both calls.
  std::vector<const char*> precisions = {"qk=fp8e4m3,pv=fp8e4m3,gran=token",
                                         "qk=fp8e5m2,pv=bf16,gran=token"};
  if (native::Bf16PairsOnAmx()) {
    precisions.push_back("qk=fp16,pv=fp16");
  } else {
    std::printf("fp16's key rows not run: its split takes amx_bf16's tiles only, which this CPU "
                "lacks\n");
  }
  constexpr int64_t kTile = int64_t(kTileQ);
  ASSERT_TRUE(BuildsKeyRowsOnce(1, 2, 1, 4 * kTile + 7, 300, 4 * 64));
  ASSERT_FALSE(BuildsKeyRowsOnce(1, 2, 1, kTile, 300, 4 * 64));
  for (const char* precision : precisions) {
    for (const int64_t dim : {64, 128}) {
      const AttentionShape whole{1, 2, 1, 4 * kTile + 7, 300, dim};
      AttentionCase c(whole, false, SinkMode::kNone, Layout::kBHTD, 21);
      c.options.precision = ParsePrecision(precision);
      ASSERT_TRUE(SelectNativePaths(""));
      const KernelOutputs built = c.Run(false);
      const AttentionShape one{1, 2, 1, kTile, 300, dim};
      OwnedTensor q(1, 2, kTile, dim, Layout::kBHTD), o(1, 2, kTile, dim, Layout::kBHTD);
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t t = 0; t < kTile; ++t) {
          for (int64_t x = 0; x < dim; ++x) q.at(0, h, t, x) = c.q.at(0, h, t, x);
        }
      }
      std::vector<float> lse(size_t(2 * kTile));
      ExactForward(one, c.options, {q.cview(), c.k.cview(), c.v.cview(), o.view(), lse.data()});
      const std::string what = std::string(precision) + " D " + std::to_string(dim);
      size_t differing = 0;
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t t = 0; t < kTile; ++t) {
          differing += built.lse[size_t(h * whole.q_len + t)] != lse[size_t(h * kTile + t)];
          for (int64_t x = 0; x < dim; ++x) differing += built.o.at(0, h, t, x) != o.at(0, h, t, x);
        }
      }
      EXPECT_EQ(differing, 0u) << what;
      const ReferenceForwardResult ref = c.ReferenceForward();
      EXPECT_LE(ScaledMaxError(built.o.Dense(), ref.o), 1e-5) << what;
    }
  }
}

// The operand pool (kernels/native/buffer_pool.h): a released large block comes back to the
// next request of its size class, small ones are plain allocations, and concurrent use from
// many threads neither loses nor shares a block.
TEST(BufferPool, ReleasedBlocksAreReusedAndNeverShared) {
  const size_t big = native::kPooledBytes + 12345;
  void* first = native::PoolAllocate(big);
  std::memset(first, 1, big);
  native::PoolRelease(first, big);
  void* again = native::PoolAllocate(big + 1);  // the same power-of-two class
  EXPECT_EQ(again, first);
  native::PoolRelease(again, big + 1);
  void* small = native::PoolAllocate(64);
  native::PoolRelease(small, 64);
  std::vector<std::thread> threads;
  std::vector<std::vector<void*>> held(4);
  for (size_t t = 0; t < held.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 8; ++i) {
        void* block = native::PoolAllocate(big);
        std::memset(block, int(t), 4096);
        held[t].push_back(block);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::set<void*> distinct;
  for (const auto& blocks : held) distinct.insert(blocks.begin(), blocks.end());
  EXPECT_EQ(distinct.size(), 32u);
  for (auto& blocks : held) {
    for (void* block : blocks) native::PoolRelease(block, big);
  }
}

// A KvCache's storage (kernels/native/huge_pages.h): a large block starts on a 2 MiB boundary
// (so the kernel can back it with huge pages) and is usable to its last byte, through the
// allocator a vector takes as well; a small block is a plain allocation.
TEST(HugePages, LargeBlocksAreAlignedAndUsable) {
  const size_t bytes = 2 * native::kHugePageBytes + 12345;
  auto* block = static_cast<unsigned char*>(native::HugePageAllocate(bytes));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(block) % native::kHugePageBytes, 0u);
  std::memset(block, 7, bytes);
  EXPECT_EQ(block[bytes - 1], 7);
  native::HugePageRelease(block, bytes);
  void* small = native::HugePageAllocate(100);
  std::memset(small, 1, 100);
  native::HugePageRelease(small, 100);
  std::vector<float, native::HugePageAllocator<float>> rows(native::kHugePageBytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(rows.data()) % native::kHugePageBytes, 0u);
  rows.back() = 3.0f;
  EXPECT_EQ(rows.front() + rows.back(), 3.0f);
}

// docs/math.md §4.2's bf16 backward on AMX tiles against the same backward on the register
// tiles (the products' operands and P and dS are the same bf16 values, only the order of the
// fp32 additions differs) and against the reference: every product on tiles with qk = bf16,
// S on the register tiles without it; GQA, sinks, causal, head dimensions 32 to 256, lengths
// with partial tiles and short ones (which leave the whole-head pass for the two passes).
// K-interval's forward and backward on c (operands in BHTD): dQ, dK and dV, end to end.
std::vector<double> KIntervalGradients(const AttentionCase& c, const KIntervalOptions& options) {
  const AttentionShape& s = c.shape;
  KIntervalRun forward = RunKIntervalForward(c, options, Layout::kBHTD);
  OwnedTensor dq(s.batch, s.heads, s.q_len, s.head_dim, Layout::kBHTD);
  OwnedTensor dk(s.batch, s.kv_heads, s.kv_len, s.head_dim, Layout::kBHTD);
  OwnedTensor dv(s.batch, s.kv_heads, s.kv_len, s.head_dim, Layout::kBHTD);
  KIntervalBackward(s, c.options, options,
                    {c.q.cview(), c.k.cview(), c.v.cview(), forward.o.cview(), c.d_o.cview(),
                     forward.saved(), dq.view(), dk.view(), dv.view()});
  std::vector<double> all = dq.Dense();
  for (const OwnedTensor* t : {&dk, &dv}) {
    const std::vector<double> more = t->Dense();
    all.insert(all.end(), more.begin(), more.end());
  }
  return all;
}

// One backward case on the bf16 pair products (AMX tiles, or avx512_bf16's dot tiles) or AMX
// int8 tiles against the Highway path (all native families off) and the
// reference. The scores' fp32 sums differ in order, so an entry of P or dS within rounding of
// a midpoint of its format may round the other way: a few rows may move by one step of it
// (a bf16 step, or 1/127 of the block's largest entry for int8).
struct AmxBackwardCase {
  AttentionShape shape;
  bool causal;
  SinkMode sink;
  const char* precision;
};
void ExpectAmxBackwardMatches(const AmxBackwardCase& k, double step, double moved_rows) {
  AttentionCase c(k.shape, k.causal, k.sink, Layout::kBTHD, 13);
  c.options.precision = ParsePrecision(k.precision);
  const std::string what = std::string(k.precision) + " D " + std::to_string(k.shape.head_dim) +
                           " T " + std::to_string(k.shape.q_len) + "x" +
                           std::to_string(k.shape.kv_len);
  const auto [amx, highway] = NativeAndHighway([&] { return c.Run(); });
  EXPECT_NE(amx.dq.storage, highway.dq.storage) << what << ": the tiles did not run";
  const size_t dim = size_t(k.shape.head_dim);
  for (const auto& [name, got, want] :
       {std::tuple{"dQ", amx.dq.Dense(), highway.dq.Dense()},
        std::tuple{"dK", amx.dk.Dense(), highway.dk.Dense()},
        std::tuple{"dV", amx.dv.Dense(), highway.dv.Dense()}}) {
    const RowMismatch m = CompareGradientRows(got, want, dim);
    EXPECT_LE(m.bad, size_t(moved_rows * double(want.size() / dim)) + 2)
        << what << " " << name << " worst " << m.worst;
    EXPECT_LE(m.worst, step) << what << " " << name;
  }
  EXPECT_LE(ScaledMaxError(ToDouble(amx.d_sink), ToDouble(highway.d_sink)), 1e-5) << what;
  const ReferenceGradients ref = c.ReferenceBackward();
  EXPECT_LE(ScaledMaxError(amx.dq.Dense(), ref.dq), step) << what;
  EXPECT_LE(ScaledMaxError(amx.dk.Dense(), ref.dk), step) << what;
  EXPECT_LE(ScaledMaxError(amx.dv.Dense(), ref.dv), step) << what;
}

// Every case spans more than one tile: the dot tiles leave shorter sequences to the register
// tiles' whole-head pass (BackwardTilesApply).
TEST(NativePaths, Bf16PairBackwardMatchesTheHighwayPathAndTheReference) {
  if (!native::Bf16PairsEnabled()) {
    GTEST_SKIP() << "bf16 pair backward not run: this CPU takes neither amx_bf16 nor "
                    "avx512_bf16's dot tiles";
  }
  const AmxBackwardCase cases[] = {
      {{1, 2, 2, 200, 230, 64}, true, SinkMode::kNone, "bwd=bf16"},
      {{2, 4, 2, 130, 97, 32}, false, SinkMode::kLearned, "qk=bf16,pv=bf16,p=bf16,bwd=bf16"},
      {{1, 2, 1, 100, 110, 128}, true, SinkMode::kNone, "qk=bf16,pv=bf16,bwd=bf16"},
      {{1, 1, 1, 97, 49, 256}, true, SinkMode::kOffByOne, "qk=bf16,bwd=bf16"},
  };
  for (const AmxBackwardCase& k : cases) ExpectAmxBackwardMatches(k, 4e-3, 0.02);
  // An inf in dO (bf16 keeps it) takes the register tiles, which give the same bits as with
  // the tiles turned off.
  {
    AttentionCase c({1, 2, 1, 100, 100, 64}, true, SinkMode::kNone, Layout::kBHTD, 3);
    c.options.precision = ParsePrecision("qk=bf16,bwd=bf16");
    c.d_o.storage[70] = INFINITY;
    const auto [amx, highway] = NativeAndHighway([&] { return c.Run(); });
    const auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
    };
    EXPECT_TRUE(same_bits(amx.dq.storage, highway.dq.storage));
    EXPECT_TRUE(same_bits(amx.dk.storage, highway.dk.storage));
    EXPECT_TRUE(same_bits(amx.dv.storage, highway.dv.storage));
  }
  // K-interval: its terms (fused into the query side) and extrema corrections, on tiles.
  for (const char* kint : {"K=4", "K=8,ste=prob"}) {
    const AttentionShape shape{1, 2, 1, 150, 200, 64};
    AttentionCase c(shape, true, SinkMode::kNone, Layout::kBHTD, 5);
    c.options.precision = ParsePrecision("qk=bf16,bwd=bf16");
    const auto [amx, highway] =
        NativeAndHighway([&] { return KIntervalGradients(c, ParseKInterval(kint)); });
    EXPECT_NE(amx, highway) << kint << ": the tiles did not run";
    EXPECT_LE(ScaledMaxError(amx, highway), 4e-3) << kint;
  }
}

// bwd=int8 with dP in bf16: dV, dK and dQ on AMX int8 tiles (P and dS as int8 quads with their
// block's scale, Q, K and dO as int8 codes per channel, exact int32 sums), dP on bf16 tiles;
// or, where the bf16 pair products take avx512_bf16's dot tiles, all four there (the int8
// codes as bf16 values: the same exact sums).
TEST(NativePaths, Int8BackwardMatchesTheHighwayPathAndTheReference) {
  const bool on_amx = AmxBf16Enabled() && native::NativePathEnabled(native::NativePath::kAmxInt8);
  if (!on_amx && !native::Bf16PairsEnabled()) {
    GTEST_SKIP() << "int8 backward on tiles not run: this CPU takes neither amx_bf16 with "
                    "amx_int8 nor avx512_bf16's dot tiles";
  }
  const AmxBackwardCase cases[] = {
      {{1, 2, 2, 200, 230, 64}, true, SinkMode::kNone, "bwd=int8"},
      {{2, 4, 2, 130, 97, 64}, false, SinkMode::kLearned, "qk=int8,pv=int8,gran=token,bwd=int8"},
      {{1, 2, 1, 100, 110, 128}, true, SinkMode::kNone, "qk=bf16,bwd=int8"},
      {{1, 1, 1, 97, 49, 256}, true, SinkMode::kOffByOne, "bwd=int8"},
  };
  for (const AmxBackwardCase& k : cases) ExpectAmxBackwardMatches(k, 2e-2, 0.02);
  // K-interval's terms and corrections, as for bf16.
  AttentionCase c({1, 2, 1, 150, 200, 64}, true, SinkMode::kNone, Layout::kBHTD, 5);
  c.options.precision = ParsePrecision("bwd=int8");
  const auto [amx, highway] =
      NativeAndHighway([&] { return KIntervalGradients(c, ParseKInterval("K=4")); });
  EXPECT_NE(amx, highway) << "the tiles did not run";
  EXPECT_LE(ScaledMaxError(amx, highway), 2e-2);
}

// The weight pairs against the bf16 codec on each weight: every key count of a tile, both
// depths, column counts that are and are not whole pairs of 16-query blocks.
TEST(NativePaths, AmxBf16WeightPairsRoundAsTheCodec) {
  if (!native::NativePathEnabled(native::NativePath::kAvx512Bf16)) {
    GTEST_SKIP() << "avx512_bf16 not run on this CPU: the CPU lacks it";
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  constexpr size_t kWidth = 96;
  std::vector<float> weights(48 * kWidth);
  for (float& w : weights) w = unit(rng);
  weights[5] = 1.0f + 1.0f / 256;  // exactly half way between two bf16 values: to even
  for (const size_t nk : {1, 17, 32, 33, 47, 48}) {
    for (const size_t cols : {16, 48, 96}) {
      const size_t depth = nk > 32 ? 64 : 32;
      std::vector<uint16_t> pairs(depth / 2 * 2 * kWidth, 0xffff);
      native::AmxBf16WeightPairs(weights.data(), nk, cols, kWidth, depth, pairs.data());
      for (size_t j = 0; j < depth; ++j) {
        for (size_t i = 0; i < cols; ++i) {
          const uint16_t expected = j < nk ? quant::EncodeBf16(weights[j * kWidth + i]) : 0;
          ASSERT_EQ(pairs[(j / 2) * 2 * kWidth + 2 * i + j % 2], expected)
              << "key " << j << " query " << i << " nk " << nk;
        }
      }
    }
  }
}

// Both engines accumulate exact small-integer sums; the dot tiles also over counts that are not
// whole blocks: 61 rows (fours and a 1-row rest), 80 and 112 columns (5 vectors; 6 and 1), a
// depth of 46 or of one pair.
TEST(NativePaths, Bf16PairMatMulsAccumulate) {
  const std::vector<PairEngine> engines = PairEnginesOnThisCpu();
  if (engines.empty()) GTEST_SKIP() << "neither amx_bf16 nor avx512_bf16 run: the CPU lacks both";
  for (const PairEngine engine : engines) {
  for (const auto [kRows, kCols, kDepth] : {std::array<size_t, 3>{64, 96, 64}, {61, 80, 46},
                                            {3, 112, 2}}) {
  if (engine == PairEngine::kAmx && kDepth % 32 != 0) continue;
  std::vector<uint16_t> a(kRows * kDepth), b(kDepth / 2 * 2 * kCols), tail(16 * kDepth);
  std::vector<float> c(kRows * kCols), expected(kRows * kCols);
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t k = 0; k < kDepth; ++k) a[r * kDepth + k] = quant::EncodeBf16(float(int(r + k) % 5 - 2));
  }
  for (size_t k = 0; k < kDepth; ++k) {
    for (size_t n = 0; n < kCols; ++n) {
      b[(k / 2) * 2 * kCols + 2 * n + k % 2] = quant::EncodeBf16(float(int(3 * k + n) % 7 - 3));
    }
  }
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t n = 0; n < kCols; ++n) {
      c[r * kCols + n] = float(r) - float(n);
      double sum = c[r * kCols + n];
      for (size_t k = 0; k < kDepth; ++k) {
        sum += double(quant::DecodeBf16(a[r * kDepth + k])) *
               quant::DecodeBf16(b[(k / 2) * 2 * kCols + 2 * n + k % 2]);
      }
      expected[r * kCols + n] = float(sum);
    }
  }
  if (engine == PairEngine::kAmx) {
    const native::AmxTiles tiles;
    native::AmxBf16MatMul(a.data(), kDepth, kRows, b.data(), 2 * kCols, kCols, kDepth, true,
                          c.data(), kCols, tail.data());
  } else {
    native::DotBf16MatMul(a.data(), kDepth, kRows, b.data(), 2 * kCols, kCols, kDepth, true,
                          c.data(), kCols);
  }
  // Small integers: every sum is exact.
  EXPECT_EQ(c, expected) << EngineName(engine) << " " << kRows << " x " << kCols << " x " << kDepth;
  }
  }
}

// P V on tiles (pv=bf16 with p=bf16): against the Highway path, whose bf16-rounded weights may
// round the other way where its fp32 scores differ from the tiles' by an ulp (one row of O then
// moves by one bf16 step of one weight), per call and prepared, with exact and K-interval
// attention; a V with a NaN takes the Highway path (the tiles would spread it to rows that do
// not see its key); a prepared V keeps working when the tiles are turned off after preparing.
void ExpectRowsClose(const std::vector<double>& x, const std::vector<double>& y, size_t dim,
                     const std::string& what) {
  double scale = 0.0;
  for (const double v : y) scale = std::max(scale, std::abs(v));
  const size_t rows = y.size() / dim;
  size_t moved = 0;
  for (size_t r = 0; r < rows; ++r) {
    double err = 0.0;
    for (size_t c = 0; c < dim; ++c) err = std::max(err, std::abs(x[r * dim + c] - y[r * dim + c]));
    err /= 1.0 + scale;
    EXPECT_LE(err, 0.05) << what << " row " << r;
    moved += err > 1e-5 ? 1 : 0;
  }
  EXPECT_LE(moved, rows / 100 + 1) << what;
}

TEST(NativePaths, Bf16PairWeightsTimesValuesMatchTheHighwayPath) {
  if (!native::Bf16PairsEnabled() || !native::NativePathEnabled(native::NativePath::kAvx512Bf16)) {
    GTEST_SKIP() << "bf16 pair P V not run: this CPU takes neither amx_bf16 (with avx512_bf16) "
                    "nor avx512_bf16's dot tiles";
  }
  const char* precision = "qk=bf16,pv=bf16,p=bf16";
  const AttentionShape shapes[] = {{1, 2, 2, 100, 100, 64}, {2, 4, 2, 37, 301, 32},
                                   {1, 2, 1, 130, 49, 128}, {1, 1, 1, 17, 17, 256}};
  for (const AttentionShape& shape : shapes) {
    for (const bool causal : {true, false}) {
      AttentionCase c(shape, causal, causal ? SinkMode::kLearned : SinkMode::kNone, Layout::kBTHD, 13);
      c.options.precision = ParsePrecision(precision);
      const std::string what = "D " + std::to_string(shape.head_dim) + " Tk " + std::to_string(shape.kv_len);
      ASSERT_TRUE(SelectNativePaths(""));
      const KernelOutputs tiles = c.Run(false);
      PreparedKv prepared(c.shape, c.options.precision, c.k.cview(), c.v.cview());
      OwnedTensor o_prepared(shape.batch, shape.heads, shape.q_len, shape.head_dim, Layout::kBTHD);
      std::vector<float> lse_prepared(tiles.lse.size());
      ExactForward(c.shape, c.options, c.q.cview(), prepared, o_prepared.view(), lse_prepared.data());
      EXPECT_EQ(tiles.o.storage, o_prepared.storage) << what;
      ASSERT_TRUE(SelectNativePaths("none"));
      const KernelOutputs highway = c.Run(false);
      // The prepared V^T, decoded, after the tiles were turned off.
      OwnedTensor o_off(shape.batch, shape.heads, shape.q_len, shape.head_dim, Layout::kBTHD);
      ExactForward(c.shape, c.options, c.q.cview(), prepared, o_off.view(), lse_prepared.data());
      ASSERT_TRUE(SelectNativePaths(""));
      ExpectRowsClose(tiles.o.Dense(), highway.o.Dense(), size_t(shape.head_dim), what);
      ExpectRowsClose(o_off.Dense(), highway.o.Dense(), size_t(shape.head_dim), what + " off");
      EXPECT_LE(ScaledMaxError(ToDouble(tiles.lse), ToDouble(highway.lse)), 1e-6) << what;
    }
  }
  // A NaN in V: only the rows that see its key are NaN, as on every other path.
  AttentionCase c({1, 1, 1, 64, 64, 64}, true, SinkMode::kNone, Layout::kBHTD, 2);
  c.options.precision = ParsePrecision(precision);
  c.v.at(0, 0, 40, 3) = std::numeric_limits<float>::quiet_NaN();
  const KernelOutputs out = c.Run(false);
  for (int64_t i = 0; i < 64; ++i) {
    EXPECT_EQ(std::isnan(out.o.at(0, 0, i, 3)), i >= 40) << "row " << i;
    EXPECT_FALSE(std::isnan(out.o.at(0, 0, i, 4))) << "row " << i;
  }
  // K-interval's weights on the tiles.
  const AttentionShape shape{1, 4, 2, 90, 150, 64};
  AttentionCase k(shape, true, SinkMode::kNone, Layout::kBHTD, 5);
  k.options.precision = ParsePrecision(precision);
  const KIntervalOptions options = ParseKInterval("K=16,cal=window,round=lerp");
  const auto [tiles, highway] = NativeAndHighway(
      [&] { return RunKIntervalForward(k, options, Layout::kBHTD).o.Dense(); });
  ExpectRowsClose(tiles, highway, 64, "K-interval");
}

// The int8 score product on tiles, and the int8 P V product (p = int8, V per tensor or per
// channel), sum the same int8 products exactly in int32 and scale them by the same expressions
// as the Highway integer tile: the outputs are bit-identical, per call and prepared, and with K
// rows and V^T prepared for the tiles that are turned off afterwards.
TEST(NativePaths, AmxInt8ScoresAreBitIdenticalToTheHighwayIntegerTile) {
  if (!native::NativePathEnabled(native::NativePath::kAmxInt8)) {
    GTEST_SKIP() << "amx_int8 not run on this CPU: the CPU lacks it";
  }
  struct Case {
    AttentionShape shape;
    const char* precision;
  };
  const Case cases[] = {
      {{1, 2, 2, 100, 100, 64}, "qk=int8,pv=int8,p=int8,gran=tensor"},
      {{2, 4, 2, 37, 301, 128}, "qk=int8,pv=bf16,gran=token"},
      {{1, 2, 1, 130, 49, 256}, "qk=int8,pv=int8,p=int8,gran=token,vgran=channel"},
      {{1, 1, 1, 17, 17, 64}, "qk=int8,gran=block,block=4"},
      {{1, 2, 2, 64, 64, 96}, "qk=int8,pv=int8"},  // 96: not taken by the tiles
      {{1, 4, 2, 200, 333, 64}, "pv=int8,p=int8,vgran=channel"},  // P V alone on the tiles
  };
  for (const Case& k : cases) {
    AttentionCase c(k.shape, true, SinkMode::kLearned, Layout::kBTHD, 17);
    c.options.precision = ParsePrecision(k.precision);
    ASSERT_TRUE(SelectNativePaths(""));
    const KernelOutputs tiles = c.Run(false);
    PreparedKv prepared(c.shape, c.options.precision, c.k.cview(), c.v.cview());
    OwnedTensor o(k.shape.batch, k.shape.heads, k.shape.q_len, k.shape.head_dim, Layout::kBTHD);
    std::vector<float> lse(tiles.lse.size());
    ExactForward(c.shape, c.options, c.q.cview(), prepared, o.view(), lse.data());
    EXPECT_EQ(o.storage, tiles.o.storage) << k.precision;
    ASSERT_TRUE(SelectNativePaths("avx512_vnni"));
    const KernelOutputs highway = c.Run(false);
    OwnedTensor o_off(k.shape.batch, k.shape.heads, k.shape.q_len, k.shape.head_dim, Layout::kBTHD);
    ExactForward(c.shape, c.options, c.q.cview(), prepared, o_off.view(), lse.data());
    ASSERT_TRUE(SelectNativePaths(""));
    EXPECT_EQ(tiles.o.storage, highway.o.storage) << k.precision;
    EXPECT_EQ(tiles.lse, highway.lse) << k.precision;
    EXPECT_EQ(o_off.storage, highway.o.storage) << k.precision;
  }
}

}  // namespace
}  // namespace lpattn::test
