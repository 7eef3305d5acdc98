// The register-only FMA loop behind `peak_frac` (docs/performance.md), compiled for every
// Highway target, plus the `peak_fma/threads:<n>` benchmark that reports it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <latch>
#include <map>
#include <mutex>
#include <string>
#include <thread>
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

// Keeps the loops' results observable.
volatile float g_sink = 0.0f;

// Runs body(t) for t in [0, threads) on as many threads at once; the caller runs t = 0.
template <class Body>
void RunConcurrently(int threads, const Body& body) {
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
  body(0);
  for (std::thread& thread : pool) thread.join();
}

int ResolveThreads(int threads) {
  return threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// One timed round: every thread runs chunks of the loop until `seconds` have passed since
// they all started. Returns GFLOP/s over the wall time of the slowest thread.
double TimedRoundGflops(int threads, double seconds) {
  using Clock = std::chrono::steady_clock;
  constexpr int64_t kChunk = int64_t{1} << 14;  // tens of microseconds per chunk
  std::vector<double> flops(static_cast<size_t>(threads), 0.0);
  std::vector<float> sinks(static_cast<size_t>(threads), 0.0f);
  std::vector<Clock::time_point> ends(static_cast<size_t>(threads));
  std::latch start_line(threads);
  Clock::time_point start;
  std::atomic<bool> started{false};
  RunConcurrently(threads, [&](int t) {
    start_line.arrive_and_wait();
    if (t == 0) {
      start = Clock::now();
      started.store(true, std::memory_order_release);
    }
    while (!started.load(std::memory_order_acquire)) {
    }
    const Clock::time_point deadline =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    double done = 0.0;
    do {
      done += FmaLoopOnBestTarget(kChunk, 1e-3f, &sinks[static_cast<size_t>(t)]);
    } while (Clock::now() < deadline);
    flops[static_cast<size_t>(t)] = done;
    ends[static_cast<size_t>(t)] = Clock::now();
  });
  double total = 0.0;
  float sink = 0.0f;
  for (int t = 0; t < threads; ++t) {
    total += flops[static_cast<size_t>(t)];
    sink += sinks[static_cast<size_t>(t)];
  }
  g_sink = sink;
  const Clock::time_point last = *std::max_element(ends.begin(), ends.end());
  return total * 1e-9 / std::chrono::duration<double>(last - start).count();
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
  float sink = 0.0f;
  for (int t = 0; t < threads; ++t) {
    total += flops[static_cast<size_t>(t)];
    sink += sinks[static_cast<size_t>(t)];
  }
  g_sink = sink;
  return total;
}

double MeasuredPeakGflops(int threads) {
  threads = ResolveThreads(threads);
  static std::mutex mutex;
  static std::map<int, double> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = cache.find(threads); it != cache.end()) return it->second;
  // Best of four 50 ms rounds: the first absorbs clock ramp-up, and the best is the least
  // disturbed by whatever else shares the machine.
  double best = 0.0;
  for (int round = 0; round < 4; ++round) best = std::max(best, TimedRoundGflops(threads, 0.05));
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

BENCHMARK(BM_PeakFma)
    ->Name("peak_fma")
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace lpattn::bench
#endif  // HWY_ONCE
