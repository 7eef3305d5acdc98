// Value gates (docs/math.md §1.2): each value is scaled by a gate in (0, 1) computed from
// that value alone, v~_j = g_j v_j, before attention reads it. A gate depends on v_j only, so
// the pass can run once when a value is written to a KV cache; it is one fused pass over V.
//   norm gate:       g_j = sigmoid(alpha_h * ||v_j|| + beta_h)   (2 parameters per kv head)
//   projection gate: g_j = sigmoid(w_h . v_j + b_h)              (D + 1 parameters per kv head)
#ifndef LPATTN_KERNELS_VALUE_GATE_H_
#define LPATTN_KERNELS_VALUE_GATE_H_

#include <cstdint>
#include <string>

#include "kernels/attention.h"

namespace lpattn {

enum class ValueGateKind { kNorm, kProjection };

// The gate's parameters, per kv head h: alpha[h], beta[h] (norm gate) or w[h * D + c], b[h]
// (projection gate). The other kind's pointers are ignored.
struct ValueGateParams {
  ValueGateKind kind = ValueGateKind::kNorm;
  const float* alpha = nullptr;
  const float* beta = nullptr;
  const float* w = nullptr;
  const float* b = nullptr;
};

// Their gradients, laid out like the parameters; summed over batch and tokens, overwritten.
struct ValueGateGrads {
  float* alpha = nullptr;
  float* beta = nullptr;
  float* w = nullptr;
  float* b = nullptr;
};

// V's shape: batch, kv_heads, kv_len and head_dim of an attention shape (heads and q_len are
// not read). gates, when not null, receives g, dense [batch, kv_heads, kv_len]. Runs in the
// caller's TBB arena (threads = 0) or a private one of `threads`. Throws
// std::invalid_argument before any work on null pointers, bad sizes, strides or parameters
// that are not finite.
void ValueGateForward(const AttentionShape& shape, const ValueGateParams& params, ConstTensor v,
                      Tensor v_gated, float* gates = nullptr, int threads = 0);

// d_v_gated = dL/dv~ in; dv (overwritten) and the parameter gradients out:
//   dz_j = (dv~_j . v_j) g_j (1 - g_j);  dv_j = g_j dv~_j + dz_j dz/dv_j with dz/dv_j =
//   alpha v_j / ||v_j|| (norm gate; 0 at v_j = 0) or w (projection gate);
//   d alpha = sum dz ||v||, d beta = sum dz, d w = sum dz v, d b = sum dz.
// Sums run in a fixed order, so results do not depend on the thread count.
void ValueGateBackward(const AttentionShape& shape, const ValueGateParams& params, ConstTensor v,
                       ConstTensor d_v_gated, Tensor dv, const ValueGateGrads& grads,
                       int threads = 0);

}  // namespace lpattn

#endif  // LPATTN_KERNELS_VALUE_GATE_H_
