// The FMA peak that benchmarks divide by to report `peak_frac` (docs/performance.md):
// a register-only fp32 FMA loop, run on the best Highway target this CPU supports.
#ifndef LPATTN_BENCH_PEAK_FMA_H_
#define LPATTN_BENCH_PEAK_FMA_H_

#include <cstdint>
#include <string>

namespace lpattn::bench {

// Runs `iterations` rounds of the FMA loop on each of `threads` threads at once and returns
// the FLOPs done by all of them (2 per lane per FMA).
double RunFmaLoop(int threads, int64_t iterations);

// GFLOP/s of the FMA loop on `threads` concurrent threads. Measured once per thread count
// and process (about 0.2 s, best of a few rounds), then cached. It always runs on the best
// target of the CPU, whatever lpattn::SelectTarget has chosen for the kernels.
double MeasuredPeakGflops(int threads);

// The Highway target the FMA loop runs on ("AVX2", ...).
std::string PeakFmaTarget();

}  // namespace lpattn::bench

#endif  // LPATTN_BENCH_PEAK_FMA_H_
