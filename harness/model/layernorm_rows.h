// SIMD LayerNorm rows (Highway, dynamic dispatch); layers.cc splits the rows into fixed blocks
// and calls these per block. Sums run across vector lanes, so their order depends on the
// chosen target: results are identical run to run on one machine, not across CPUs.
#ifndef LPATTN_HARNESS_MODEL_LAYERNORM_ROWS_H_
#define LPATTN_HARNESS_MODEL_LAYERNORM_ROWS_H_

#include <cstddef>

namespace lpattn::harness {

// For each of `rows` rows of C: out = (inp - mean) * rstd * weight + bias, saving mean and
// rstd = 1 / sqrt(var + eps).
void LayerNormForwardRows(float* out, float* mean, float* rstd, const float* inp,
                          const float* weight, const float* bias, size_t rows, size_t C,
                          float eps);
// dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = weight * dout.
void LayerNormBackwardRows(float* dinp, const float* dout, const float* inp, const float* weight,
                           const float* mean, const float* rstd, size_t rows, size_t C);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_MODEL_LAYERNORM_ROWS_H_
