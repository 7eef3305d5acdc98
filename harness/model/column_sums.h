// Sums over the rows of a batch, for the weight gradients that are no product (biases and
// LayerNorm's parameters, docs/harness.md §1.6), vectorised with Highway across columns: each
// column is still summed over its rows in order, one lane each.
#ifndef LPATTN_HARNESS_MODEL_COLUMN_SUMS_H_
#define LPATTN_HARNESS_MODEL_COLUMN_SUMS_H_

#include <cstddef>

namespace lpattn::harness {

// sums[o] += rows[r * stride + o] over r in [0, N), in double, for o in [0, width).
void AddColumnSumsSimd(double* sums, const float* rows, size_t N, size_t stride, size_t width);

// LayerNorm's parameter gradients of channels [c0, c1) over N rows of C: dbias[c] += dout and
// dweight[c] += (inp - mean) rstd dout, in float, rows in order.
void AddLayerNormParamGradsSimd(float* dweight, float* dbias, const float* dout, const float* inp,
                                const float* mean, const float* rstd, size_t N, size_t C,
                                size_t c0, size_t c1);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_MODEL_COLUMN_SUMS_H_
