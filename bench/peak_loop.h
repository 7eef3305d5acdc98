// Timing of the register-only peak loops (peak_fma.cc, peak_native.cc): a loop runs on n
// threads at once, in chunks, for a fixed wall time, and its rate is the work of all threads
// over the wall time of the slowest (docs/performance.md §2).
#ifndef LPATTN_BENCH_PEAK_LOOP_H_
#define LPATTN_BENCH_PEAK_LOOP_H_

#include <cstdint>
#include <functional>

namespace benchmark::internal {
class Benchmark;
}  // namespace benchmark::internal

namespace lpattn::bench {

// The shape every peak benchmark takes: `<name>/threads:1` and `/threads:2`, wall time in ms.
// Returns b.
benchmark::internal::Benchmark* AsPeakBenchmark(benchmark::internal::Benchmark* b);

// One chunk of a peak loop: `iterations` rounds on the calling thread; returns the operations
// done (2 per multiply-accumulate) and writes a value to *sink so that nothing is optimised out.
using PeakChunk = std::function<double(int64_t iterations, float* sink)>;

// Runs body(t) for t in [0, threads) on as many threads at once; the caller runs t = 0.
void RunConcurrently(int threads, const std::function<void(int)>& body);

// threads, or every hardware thread when threads <= 0.
int ResolveThreads(int threads);

// One timed round: every thread runs chunks until `seconds` have passed since they all
// started. Returns G operations per second.
double TimedRoundRate(int threads, double seconds, const PeakChunk& chunk);

// The best of four 50 ms rounds (the first absorbs clock ramp-up; the best is the least
// disturbed by whatever else shares the machine).
double BestRoundRate(int threads, const PeakChunk& chunk);

}  // namespace lpattn::bench

#endif  // LPATTN_BENCH_PEAK_LOOP_H_
