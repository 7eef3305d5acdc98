// The AdamW update of a span of parameters, vectorised with Highway and dispatched per call
// (docs/harness.md §1.2): its divisions and square root made the scalar loop's step cost
// bound by the divider at SSE2's width (docs/performance.md §4.22).
#ifndef LPATTN_HARNESS_TRAIN_ADAMW_UPDATE_H_
#define LPATTN_HARNESS_TRAIN_ADAMW_UPDATE_H_

#include <cstddef>

namespace lpattn::harness {

// The per-step scalars of the update.
struct AdamConstants {
  float beta1, beta2, eps, lr, bias1, bias2, clip;
};

// For each of n elements: g = grads * clip; m = beta1 m + (1 - beta1) g; v = beta2 v +
// (1 - beta2) g^2; params -= lr (m / bias1 / (sqrt(v / bias2) + eps) + decay params). The
// same operations in every lane, so a run's results do not depend on where a span starts or
// on the thread count; the compiler may fuse a multiply and an add on a target with FMA, so
// they may differ between CPUs in the last bit.
void AdamWUpdateSimd(const AdamConstants& k, float decay, size_t n, const float* grads,
                     float* params, float* m, float* v);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_TRAIN_ADAMW_UPDATE_H_
