// The triad bandwidth (peak_bw.h) and the `peak_bw/threads:<n>` benchmark that reports it.
#include "bench/peak_bw.h"

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

#include "bench/peak_loop.h"

namespace lpattn::bench {
namespace {

// Floats per array: twice the last-level cache as the OS reports it, at least 128 MiB and at
// most 512 MiB (a VM may report the host's whole L3).
size_t ArrayFloats() {
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const size_t bytes = std::clamp<size_t>(llc > 0 ? 2 * size_t(llc) : 0, size_t(128) << 20,
                                          size_t(512) << 20);
  return bytes / sizeof(float);
}

struct Arrays {
  size_t n;
  std::unique_ptr<float[]> a, b, c;
};

// The arrays, first touched (written) by the thread that will stream each slice.
Arrays& TriadArrays(int threads) {
  static Arrays arrays{ArrayFloats(), nullptr, nullptr, nullptr};
  if (!arrays.a) {
    arrays.a.reset(new float[arrays.n]);
    arrays.b.reset(new float[arrays.n]);
    arrays.c.reset(new float[arrays.n]);
    RunConcurrently(threads, [&](int t) {
      const size_t begin = arrays.n * size_t(t) / size_t(threads);
      const size_t end = arrays.n * size_t(t + 1) / size_t(threads);
      std::fill(arrays.a.get() + begin, arrays.a.get() + end, 0.0f);
      std::fill(arrays.b.get() + begin, arrays.b.get() + end, 1.0f);
      std::fill(arrays.c.get() + begin, arrays.c.get() + end, 2.0f);
    });
  }
  return arrays;
}

// One triad pass on `threads` threads; returns its bytes (3 arrays, as STREAM counts them).
double TriadPass(int threads, float scale) {
  Arrays& arrays = TriadArrays(threads);
  RunConcurrently(threads, [&](int t) {
    const size_t begin = arrays.n * size_t(t) / size_t(threads);
    const size_t end = arrays.n * size_t(t + 1) / size_t(threads);
    float* a = arrays.a.get();
    const float* b = arrays.b.get();
    const float* c = arrays.c.get();
    for (size_t i = begin; i < end; ++i) a[i] = b[i] + scale * c[i];
  });
  benchmark::DoNotOptimize(arrays.a[arrays.n / 2]);
  return 3.0 * double(arrays.n) * sizeof(float);
}

}  // namespace

double MeasuredPeakBandwidth(int threads) {
  threads = ResolveThreads(threads);
  static std::mutex mutex;
  static std::map<int, double> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = cache.find(threads); it != cache.end()) return it->second;
  double best = 0.0;
  for (int pass = 0; pass < 4; ++pass) {  // the first also faults the pages in
    const auto start = std::chrono::steady_clock::now();
    const double bytes = TriadPass(threads, 3.0f);
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
    best = std::max(best, bytes / seconds.count() * 1e-9);
  }
  cache.emplace(threads, best);
  return best;
}

namespace {

// peak_bw/threads:<n>: the triad itself as a benchmark; bw_frac near 1 says the cached
// bandwidth still holds.
void BM_PeakBandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const double peak = MeasuredPeakBandwidth(threads);
  double bytes = 0.0;
  for (auto _ : state) bytes += TriadPass(threads, 3.0f);
  state.counters["GBps"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsRate);
  state.counters["bw_frac"] = benchmark::Counter(bytes * 1e-9 / peak, benchmark::Counter::kIsRate);
}

const bool kRegistered =
    AsPeakBenchmark(benchmark::RegisterBenchmark("peak_bw", BM_PeakBandwidth)) != nullptr;

}  // namespace
}  // namespace lpattn::bench
