// The register-only FMA loop behind `peak_frac` (docs/performance.md), compiled for every
// Highway target, plus the `peak_fma/threads:<n>` benchmark that reports it.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/peak_fma.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn::bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Twelve independent accumulator chains: two FMA pipes of latency 4 need eight in flight, and
// twelve plus the two constants still fit in 16 vector registers. a <- a * m + c converges to
// c / (1 - m), so values stay normal (no denormal slow path) however long it runs.
// Returns the FLOPs done, 2 per lane per MulAdd (targets without FMA do a mul and an add).
HWY_NOINLINE double FmaLoop(int64_t iterations, float seed, float* sink) {
  const hn::ScalableTag<float> d;
  const auto m = hn::Set(d, 0.999f);
  const auto c = hn::Set(d, seed);
  auto a0 = hn::Set(d, seed * 1.0f), a1 = hn::Set(d, seed * 2.0f);
  auto a2 = hn::Set(d, seed * 3.0f), a3 = hn::Set(d, seed * 4.0f);
  auto a4 = hn::Set(d, seed * 5.0f), a5 = hn::Set(d, seed * 6.0f);
  auto a6 = hn::Set(d, seed * 7.0f), a7 = hn::Set(d, seed * 8.0f);
  auto a8 = hn::Set(d, seed * 9.0f), a9 = hn::Set(d, seed * 10.0f);
  auto a10 = hn::Set(d, seed * 11.0f), a11 = hn::Set(d, seed * 12.0f);
  for (int64_t i = 0; i < iterations; ++i) {
    a0 = hn::MulAdd(a0, m, c);
    a1 = hn::MulAdd(a1, m, c);
    a2 = hn::MulAdd(a2, m, c);
    a3 = hn::MulAdd(a3, m, c);
    a4 = hn::MulAdd(a4, m, c);
    a5 = hn::MulAdd(a5, m, c);
    a6 = hn::MulAdd(a6, m, c);
    a7 = hn::MulAdd(a7, m, c);
    a8 = hn::MulAdd(a8, m, c);
    a9 = hn::MulAdd(a9, m, c);
    a10 = hn::MulAdd(a10, m, c);
    a11 = hn::MulAdd(a11, m, c);
  }
  const auto sum = hn::Add(
      hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7))),
      hn::Add(hn::Add(a8, a9), hn::Add(a10, a11)));
  *sink = hn::GetLane(hn::SumOfLanes(d, sum));
  return 2.0 * 12.0 * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iterations);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn::bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <benchmark/benchmark.h>

#include "bench/peak_fma.h"
#include "bench/peak_loop.h"

namespace lpattn::bench {

HWY_EXPORT(FmaLoop);

namespace {

// The CPU's targets, read during static initialisation, before main can call
// lpattn::SelectTarget (which narrows hwy::SupportedTargets() for the whole process): the
// peak is the CPU's, not the selected target's.
const int64_t kCpuTargets = hwy::SupportedTargets();

// Indexes the dispatch table directly: HWY_DYNAMIC_DISPATCH would follow SelectTarget.
double FmaLoopOnBestTarget(int64_t iterations, float seed, float* sink) {
  hwy::ChosenTarget best;
  best.Update(kCpuTargets);
  return HWY_DISPATCH_TABLE(FmaLoop)[best.GetIndex()](iterations, seed, sink);
}

}  // namespace

double RunFmaLoop(int threads, int64_t iterations) {
  threads = ResolveThreads(threads);
  std::vector<double> flops(static_cast<size_t>(threads), 0.0);
  std::vector<float> sinks(static_cast<size_t>(threads), 0.0f);
  RunConcurrently(threads, [&](int t) {
    flops[static_cast<size_t>(t)] =
        FmaLoopOnBestTarget(iterations, 1e-3f, &sinks[static_cast<size_t>(t)]);
  });
  double total = 0.0;
  for (const double x : flops) total += x;
  static volatile float sink;
  for (const float x : sinks) sink = sink + x;
  return total;
}

double MeasuredPeakGflops(int threads) {
  threads = ResolveThreads(threads);
  static std::mutex mutex;
  static std::map<int, double> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = cache.find(threads); it != cache.end()) return it->second;
  const double best = BestRoundRate(threads, [](int64_t iterations, float* sink) {
    return FmaLoopOnBestTarget(iterations, 1e-3f, sink);
  });
  cache.emplace(threads, best);
  return best;
}

std::string PeakFmaTarget() {
  const int64_t targets = kCpuTargets & HWY_TARGETS;
  return hwy::TargetName(targets & -targets);  // the lowest bit is the best target
}

namespace {

// peak_fma/threads:<n>: the loop itself as a benchmark, about 10 ms per iteration. peak_frac
// near 1 says the cached peak still holds; the gap is this run's noise.
void BM_PeakFma(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const double peak = MeasuredPeakGflops(threads);
  constexpr int64_t kIterations = int64_t{5} << 20;
  double flops_per_iteration = 0.0;
  for (auto _ : state) flops_per_iteration = RunFmaLoop(threads, kIterations);
  const double gflop = flops_per_iteration * 1e-9 * static_cast<double>(state.iterations());
  state.counters["GFLOPS"] = benchmark::Counter(gflop, benchmark::Counter::kIsRate);
  state.counters["peak_frac"] = benchmark::Counter(gflop / peak, benchmark::Counter::kIsRate);
}

const bool kRegistered =
    AsPeakBenchmark(benchmark::RegisterBenchmark("peak_fma", BM_PeakFma)) != nullptr;

}  // namespace
}  // namespace lpattn::bench
#endif  // HWY_ONCE
