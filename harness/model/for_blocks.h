// Fixed blocks run in parallel (docs/harness.md §1.6): the cut of a pass into blocks depends on
// its size alone, never on the thread count, and every output element has one writer, so the
// harness's results are bit-identical for any number of threads.
#ifndef LPATTN_HARNESS_MODEL_FOR_BLOCKS_H_
#define LPATTN_HARNESS_MODEL_FOR_BLOCKS_H_

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <algorithm>
#include <cstddef>

namespace lpattn::harness {

// Runs body(begin, end) on [0, n) cut into blocks of `block`, one task per block
// (simple_partitioner with grain 1), so the cut is the same for every thread count.
template <class Body>
void ForBlocks(size_t n, size_t block, const Body& body) {
  const size_t blocks = (n + block - 1) / block;
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, blocks, 1),
      [&](const tbb::blocked_range<size_t>& range) {
        for (size_t b = range.begin(); b != range.end(); ++b) {
          body(b * block, std::min(n, (b + 1) * block));
        }
      },
      tbb::simple_partitioner());
}

// Rows of N per sgemm call (forward and input gradient) and per block of the model's fused row
// passes: an eighth of them rounded up to whole 64s, at most 256. Each call packs its weight
// again, so taller calls cost less, and whole 64s suit oneDNN's kernels (on Zen 5 the small
// preset's step took 0.96-0.98x the time at 128 rows than at 64, and no gain at 96:
// docs/performance.md §4.16). N >= 512 gives at least 6 blocks, and the split depends on N
// alone, never on the thread count.
inline size_t ProductRowBlock(size_t n) {
  return std::clamp<size_t>((n / 8 + 63) / 64 * 64, 64, 256);
}

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_MODEL_FOR_BLOCKS_H_
