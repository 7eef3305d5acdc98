// The harness's one source of randomness: a counter-based generator, so that every draw is a
// pure function of (seed, stream, index), reproducible across platforms, thread counts and
// resumes (docs/design.md §5).
#ifndef LPATTN_HARNESS_COMMON_COUNTER_RNG_H_
#define LPATTN_HARNESS_COMMON_COUNTER_RNG_H_

#include <cstdint>

namespace lpattn::harness {

// A counter-based generator (SplitMix64): its output depends only on (seed, stream, index), so
// windows are reproducible across platforms, thread counts and resumes.
uint64_t SplitMix64(uint64_t seed, uint64_t stream, uint64_t index);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_COMMON_COUNTER_RNG_H_
