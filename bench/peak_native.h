// The peaks of the native instruction families (peak_native.cc), for `peak_frac` of kernels
// that compute in them (docs/performance.md §2).
#ifndef LPATTN_BENCH_PEAK_NATIVE_H_
#define LPATTN_BENCH_PEAK_NATIVE_H_

#include <string>
#include <vector>

namespace lpattn::bench {

// The peak loops this CPU can run ("peak_bf16dot", "peak_amx_bf16", ...), in a fixed order.
std::vector<std::string> NativePeakFamilies();

// G operations (FLOPs or integer ops, 2 per multiply-accumulate) per second of a family's loop
// on `threads` threads at once: the best of four 50 ms rounds, measured once per process and
// cached. 0 for a family this CPU lacks.
double MeasuredNativePeak(const std::string& family, int threads);

}  // namespace lpattn::bench

#endif  // LPATTN_BENCH_PEAK_NATIVE_H_
