// The timing of the peak loops (peak_loop.h).
#include "bench/peak_loop.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <latch>
#include <thread>
#include <vector>

namespace lpattn::bench {

void RunConcurrently(int threads, const std::function<void(int)>& body) {
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
  body(0);
  for (std::thread& thread : pool) thread.join();
}

int ResolveThreads(int threads) {
  return threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

double TimedRoundRate(int threads, double seconds, const PeakChunk& chunk) {
  using Clock = std::chrono::steady_clock;
  constexpr int64_t kChunk = int64_t{1} << 14;  // tens of microseconds per chunk
  std::vector<double> ops(static_cast<size_t>(threads), 0.0);
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
      done += chunk(kChunk, &sinks[static_cast<size_t>(t)]);
    } while (Clock::now() < deadline);
    ops[static_cast<size_t>(t)] = done;
    ends[static_cast<size_t>(t)] = Clock::now();
  });
  double total = 0.0;
  for (const double x : ops) total += x;
  static volatile float sink;
  for (const float x : sinks) sink = sink + x;
  const Clock::time_point last = *std::max_element(ends.begin(), ends.end());
  return total * 1e-9 / std::chrono::duration<double>(last - start).count();
}

double BestRoundRate(int threads, const PeakChunk& chunk) {
  double best = 0.0;
  for (int round = 0; round < 4; ++round) best = std::max(best, TimedRoundRate(threads, 0.05, chunk));
  return best;
}

benchmark::internal::Benchmark* AsPeakBenchmark(benchmark::internal::Benchmark* b) {
  return b->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
}

}  // namespace lpattn::bench
