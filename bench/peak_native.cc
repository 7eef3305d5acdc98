// Register-only peak loops of the native instruction families (docs/performance.md §2), each
// the denominator of `peak_frac` for kernels that compute in that family, and each a
// benchmark present only where this CPU has the family:
//   peak_bf16dot   vdpbf16ps zmm         2 x 32 FLOPs per instruction
//   peak_fp16fma   vfmadd231ph zmm       2 x 32 FLOPs
//   peak_vnni      vpdpbusd zmm (u8 x s8) 2 x 64 ops (the u8 x s8 int8 tile, AVX3)
//   peak_vnni16    vpdpwssd zmm (int16)   2 x 32 ops (the int16 pair tile, AVX3)
//   peak_avxvnni   vpdpbusd ymm (VEX)     2 x 32 ops (the u8 x s8 int8 tile, AVX2)
//   peak_amx_bf16  tdpbf16ps             2 x 16 x 16 x 32 FLOPs
//   peak_amx_int8  tdpbusd               2 x 16 x 16 x 64 ops
// Each vector loop runs twelve independent accumulator chains (enough in flight for two
// pipes of latency 4-5); the AMX loops keep four accumulator tiles and two operand tiles of
// each side in registers. The functions carry their ISA as a target attribute, so the file
// needs no ISA flags and runs on any x86-64 CPU: a family the CPU lacks is never called. Off
// x86-64 no family exists and the file registers no benchmark (docs/design.md §11).
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <utility>

#include <benchmark/benchmark.h>

#include "bench/peak_loop.h"
#include "bench/peak_native.h"
#include "kernels/native/cpu_features.h"
#include "kernels/native/native_paths.h"

#if LPATTN_NATIVE_X86
#include <immintrin.h>

#include "kernels/native/amx_tiles.h"

// GCC 12's _mm512_set1_epi8 and _epi16 start from an uninitialised vector that every lane
// then overwrites, and -Wuninitialized flags it (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace lpattn::bench {
namespace {

struct Family {
  const char* benchmark;   // the benchmark's name
  const char* counter;     // GFLOPS or GOPS
  native::NativePath path; // what the CPU must have
  double (*loop)(int64_t, float*);
};

#if LPATTN_NATIVE_X86

#define LPATTN_TWELVE(op) \
  op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11)

__attribute__((target("avx512f,avx512bf16"))) double Bf16DotLoop(int64_t n, float* sink) {
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3a83);  // bf16 ~1e-3
#define DECLARE(i) __m512 acc##i = _mm512_set1_ps(float(i));
  LPATTN_TWELVE(DECLARE)
#undef DECLARE
  for (int64_t it = 0; it < n; ++it) {
#define STEP(i) acc##i = _mm512_dpbf16_ps(acc##i, a, b);
    LPATTN_TWELVE(STEP)
#undef STEP
  }
  __m512 sum = _mm512_setzero_ps();
#define ADD(i) sum = _mm512_add_ps(sum, acc##i);
  LPATTN_TWELVE(ADD)
#undef ADD
  *sink = _mm512_reduce_add_ps(sum);
  return 2.0 * 32.0 * 12.0 * double(n);
}

__attribute__((target("avx512f,avx512fp16"))) double Fp16FmaLoop(int64_t n, float* sink) {
  // a <- a * m + c converges to c / (1 - m): values stay normal however long it runs.
  const __m512h m = _mm512_set1_ph((_Float16)0.999f);
  const __m512h c = _mm512_set1_ph((_Float16)0.001f);
#define DECLARE(i) __m512h acc##i = _mm512_set1_ph((_Float16)(0.1f * float(i)));
  LPATTN_TWELVE(DECLARE)
#undef DECLARE
  for (int64_t it = 0; it < n; ++it) {
#define STEP(i) acc##i = _mm512_fmadd_ph(acc##i, m, c);
    LPATTN_TWELVE(STEP)
#undef STEP
  }
  __m512h sum = _mm512_setzero_ph();
#define ADD(i) sum = _mm512_add_ph(sum, acc##i);
  LPATTN_TWELVE(ADD)
#undef ADD
  *sink = float(_mm512_reduce_add_ph(sum));
  return 2.0 * 32.0 * 12.0 * double(n);
}

template <bool kWords>
__attribute__((target("avx512f,avx512vnni"))) double VnniLoop(int64_t n, float* sink) {
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
#define DECLARE(i) __m512i acc##i = _mm512_set1_epi32(i);
  LPATTN_TWELVE(DECLARE)
#undef DECLARE
  for (int64_t it = 0; it < n; ++it) {
    if constexpr (kWords) {
#define STEP(i) acc##i = _mm512_dpwssd_epi32(acc##i, a, b);
      LPATTN_TWELVE(STEP)
#undef STEP
    } else {
#define STEP(i) acc##i = _mm512_dpbusd_epi32(acc##i, a, b);
      LPATTN_TWELVE(STEP)
#undef STEP
    }
  }
  __m512i sum = _mm512_setzero_si512();
#define ADD(i) sum = _mm512_add_epi32(sum, acc##i);
  LPATTN_TWELVE(ADD)
#undef ADD
  *sink = float(_mm512_reduce_add_epi32(sum));
  return 2.0 * (kWords ? 32.0 : 64.0) * 12.0 * double(n);
}

__attribute__((target("avx2,avxvnni"))) double AvxVnniLoop(int64_t n, float* sink) {
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
#define DECLARE(i) __m256i acc##i = _mm256_set1_epi32(i);
  LPATTN_TWELVE(DECLARE)
#undef DECLARE
  for (int64_t it = 0; it < n; ++it) {
#define STEP(i) acc##i = _mm256_dpbusd_avx_epi32(acc##i, a, b);
    LPATTN_TWELVE(STEP)
#undef STEP
  }
  __m256i sum = _mm256_setzero_si256();
#define ADD(i) sum = _mm256_add_epi32(sum, acc##i);
  LPATTN_TWELVE(ADD)
#undef ADD
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sum);
  int32_t total = 0;
  for (const int32_t x : lanes) total += x;
  *sink = float(total);
  return 2.0 * 32.0 * 12.0 * double(n);
}
#undef LPATTN_TWELVE

// Operands of the AMX loops: zeros (a tile product takes the same time whatever its values).
alignas(64) const uint16_t kBf16Zeros[16 * 32] = {};
alignas(64) const uint8_t kInt8Zeros[16 * 64] = {};

// Four tile products a round (2 x 2 accumulator tiles), bf16 (tdpbf16ps) or u8 x s8 (tdpbusd).
template <bool kInt8>
__attribute__((target("amx-tile,amx-bf16,amx-int8"))) double AmxLoop(int64_t n, float* sink) {
  const void* operand = kInt8 ? static_cast<const void*>(kInt8Zeros) : kBf16Zeros;
  const native::AmxTiles tiles;  // the library's palette: eight tiles of 16 rows x 64 bytes
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  for (int64_t it = 0; it < n; ++it) {
    if constexpr (kInt8) {
      _tile_dpbusd(0, 4, 6);
      _tile_dpbusd(1, 4, 7);
      _tile_dpbusd(2, 5, 6);
      _tile_dpbusd(3, 5, 7);
    } else {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  alignas(64) float out[16 * 16];  // int32 sums for kInt8: only their bits reach the sink
  _tile_stored(0, out, 64);
  *sink = out[0];
  return 2.0 * 16 * 16 * (kInt8 ? 64 : 32) * 4.0 * double(n);
}

const Family kFamilyTable[] = {
    {"peak_bf16dot", "GFLOPS", native::NativePath::kAvx512Bf16, Bf16DotLoop},
    {"peak_fp16fma", "GFLOPS", native::NativePath::kAvx512Fp16, Fp16FmaLoop},
    {"peak_vnni", "GOPS", native::NativePath::kAvx512Vnni, VnniLoop<false>},
    {"peak_vnni16", "GOPS", native::NativePath::kAvx512Vnni, VnniLoop<true>},
    {"peak_avxvnni", "GOPS", native::NativePath::kAvxVnni, AvxVnniLoop},
    {"peak_amx_bf16", "GFLOPS", native::NativePath::kAmxBf16, AmxLoop<false>},
    {"peak_amx_int8", "GOPS", native::NativePath::kAmxInt8, AmxLoop<true>},
};
const std::span<const Family> kFamilies(kFamilyTable);
#else
const std::span<const Family> kFamilies;
#endif  // LPATTN_NATIVE_X86

bool OnThisCpu(native::NativePath path) {
  for (const native::NativePathState& state : native::NativePathStates()) {
    if (state.path == path) return state.cpu;
  }
  return false;
}

const Family* FindFamily(const std::string& name) {
  for (const Family& family : kFamilies) {
    if (name == family.benchmark) return &family;
  }
  return nullptr;
}

// The loop itself as a benchmark, about 10 ms per iteration; peak_frac against the cached
// peak of the same family and thread count (near 1: the peak still holds).
void BM_PeakNative(benchmark::State& state, const Family* family) {
  const int threads = static_cast<int>(state.range(0));
  const double peak = MeasuredNativePeak(family->benchmark, threads);
  const int64_t iterations = family->path == native::NativePath::kAmxBf16 ||
                                     family->path == native::NativePath::kAmxInt8
                                 ? int64_t{1} << 18
                                 : int64_t{5} << 20;
  double ops = 0.0;
  for (auto _ : state) {
    std::vector<double> done(static_cast<size_t>(threads), 0.0);
    std::vector<float> sinks(static_cast<size_t>(threads), 0.0f);
    RunConcurrently(threads, [&](int t) {
      done[size_t(t)] = family->loop(iterations, &sinks[size_t(t)]);
    });
    ops = 0.0;
    for (const double x : done) ops += x;
    benchmark::DoNotOptimize(sinks.data());
  }
  const double giga = ops * 1e-9 * static_cast<double>(state.iterations());
  state.counters[family->counter] = benchmark::Counter(giga, benchmark::Counter::kIsRate);
  state.counters["peak_frac"] = benchmark::Counter(giga / peak, benchmark::Counter::kIsRate);
}

// Registered at static initialisation, like BENCHMARK, for the families this CPU has.
const bool kRegistered = [] {
  for (const Family& family : kFamilies) {
    if (!OnThisCpu(family.path)) continue;
    AsPeakBenchmark(benchmark::RegisterBenchmark(family.benchmark, BM_PeakNative, &family));
  }
  return true;
}();

}  // namespace

std::vector<std::string> NativePeakFamilies() {
  std::vector<std::string> names;
  for (const Family& family : kFamilies) {
    if (OnThisCpu(family.path)) names.emplace_back(family.benchmark);
  }
  return names;
}

double MeasuredNativePeak(const std::string& family_name, int threads) {
  const Family* family = FindFamily(family_name);
  if (family == nullptr || !OnThisCpu(family->path)) return 0.0;
  threads = ResolveThreads(threads);
  static std::mutex mutex;
  static std::map<std::pair<std::string, int>, double> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(family_name, threads);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  const double best = BestRoundRate(threads, [family](int64_t iterations, float* sink) {
    return family->loop(iterations, sink);
  });
  cache.emplace(key, best);
  return best;
}

}  // namespace lpattn::bench
