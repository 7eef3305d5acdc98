// The memory bandwidth that memory-bound benchmarks divide by to report `bw_frac`
// (docs/performance.md §1): a STREAM-style triad a = b + s c over buffers much larger than the
// last-level cache, counted as STREAM counts it (three arrays' bytes a pass).
#ifndef LPATTN_BENCH_PEAK_BW_H_
#define LPATTN_BENCH_PEAK_BW_H_

namespace lpattn::bench {

// GB/s of the triad on `threads` concurrent threads, each on its own slice of the arrays (the
// pages first touched by the thread that streams them). Measured once per thread count and
// process (best of a few passes), then cached.
double MeasuredPeakBandwidth(int threads);

}  // namespace lpattn::bench

#endif  // LPATTN_BENCH_PEAK_BW_H_
