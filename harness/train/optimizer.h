// AdamW with a linear warm-up then cosine decay to a floor, and global gradient-norm clipping
// (docs/harness.md §1: beta1 0.9, beta2 0.95, eps 1e-8, weight decay on matrices only).
#ifndef LPATTN_HARNESS_TRAIN_OPTIMIZER_H_
#define LPATTN_HARNESS_TRAIN_OPTIMIZER_H_

#include <cstdint>
#include <vector>

#include "harness/model/config.h"
#include "harness/model/model.h"

namespace lpattn::harness {

// Learning rate of optimiser step `step` (0-based) of `config.steps`.
float LearningRate(const TrainConfig& config, int64_t step);

// sqrt(sum g^2), accumulated in double in a fixed order.
double GradientNorm(const std::vector<float>& grads);

struct AdamState {
  std::vector<float> m, v;
};

// One AdamW step (the step-th, 0-based) over every tensor; the gradient is scaled so that its
// global norm is at most config.grad_clip. Returns the pre-clipping gradient norm. A gradient
// whose norm is not finite (a diverged step) changes nothing: params and state stay as they
// were, so a run that stops there keeps its last finite weights (docs/harness.md §3.2).
double AdamWStep(const TrainConfig& config, int64_t step, const std::vector<ParamTensor>& tensors,
                 const std::vector<float>& grads, std::vector<float>& params, AdamState& state);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_TRAIN_OPTIMIZER_H_
