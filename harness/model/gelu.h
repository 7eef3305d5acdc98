// SIMD tanh-GELU over a span (Highway, dynamic dispatch); layers.cc splits the work into
// fixed blocks and calls these per block.
#ifndef LPATTN_HARNESS_MODEL_GELU_H_
#define LPATTN_HARNESS_MODEL_GELU_H_

#include <cstddef>

namespace lpattn::harness {

// out[i] = gelu(inp[i]) for i < n.
void GeluForwardSimd(float* out, const float* inp, size_t n);
// dinp[i] (+)= dout[i] * gelu'(inp[i]) for i < n (= when accumulate is false).
void GeluBackwardSimd(float* dinp, const float* inp, const float* dout, size_t n,
                      bool accumulate);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_MODEL_GELU_H_
