// The loss's rows (softmax and cross-entropy over the vocabulary), vectorised with Highway and
// dispatched per call: scalar exp and a double sum made them a tenth of a `small` step's
// non-product time (docs/performance.md §4.22).
#ifndef LPATTN_HARNESS_MODEL_CROSS_ENTROPY_ROWS_H_
#define LPATTN_HARNESS_MODEL_CROSS_ENTROPY_ROWS_H_

#include <cstddef>
#include <cstdint>

namespace lpattn::harness {

// For each of `rows` rows of V logits: probs = softmax (the row's max subtracted, the sum of
// exponentials in float lanes), loss = log(sum) - (logit[target] - max), which stays finite
// when probs[target] underflows.
void CrossEntropyRowsSimd(float* probs, float* losses, const float* logits,
                          const uint8_t* targets, size_t rows, size_t V);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_MODEL_CROSS_ENTROPY_ROWS_H_
