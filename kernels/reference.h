// fp64 scalar references of docs/math.md, written literally from the math, without tiling.
// They are the ground truth of every test. Tensors are dense and row-major:
//   q, o, d_o, dq: [batch, heads, q_len, head_dim]
//   k, v, dk, dv:  [batch, kv_heads, kv_len, head_dim]
//   lse:           [batch, heads, q_len]
//   sink_logits, d_sink: [heads]
// Every reference honours options.precision (§4) as the kernels do: the operands it quantizes
// go through the same quantizers (quant/, in float) first, then everything runs in fp64; the
// backward's gradients are taken at the dequantized operands (straight-through).
#ifndef LPATTN_KERNELS_REFERENCE_H_
#define LPATTN_KERNELS_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "kernels/kinterval.h"
#include "kernels/threshold.h"
#include "kernels/value_gate.h"

namespace lpattn {

struct ReferenceInputs {
  std::vector<double> q, k, v;
  std::vector<double> sink_logits;  // used with SinkMode::kLearned only
};

struct ReferenceForwardResult {
  std::vector<double> o;
  std::vector<double> lse;
};

struct ReferenceGradients {
  std::vector<double> dq, dk, dv;
  std::vector<double> d_sink;  // [heads]; zeros unless SinkMode::kLearned
};

// Uses options.causal, options.scale (default 1/sqrt(D)) and options.sink; the sink logits
// come from inputs.sink_logits (options.sink_logits and options.threads are ignored).
// §1 and §1.1 forward.
ReferenceForwardResult ReferenceExactForward(const AttentionShape& shape,
                                             const AttentionOptions& options,
                                             const ReferenceInputs& inputs);
// §1 and §1.1 backward (recomputes P; Delta_i = dO_i . o_i).
ReferenceGradients ReferenceExactBackward(const AttentionShape& shape,
                                          const AttentionOptions& options,
                                          const ReferenceInputs& inputs,
                                          const std::vector<double>& d_o);

// §2 K-interval attention: each row's visible scores through KIntervalRowForward and
// KIntervalRowBackward (the row-level API the kernels are tested against). Uses
// options.causal and options.scale; sinks are not defined for K-interval attention and are
// rejected. `stats` holds each row's saved statistics, [batch, heads, q_len] (rows with no
// visible key keep default values and output zeros).
struct ReferenceKIntervalForwardResult {
  std::vector<double> o;
  std::vector<KIntervalRowStats> stats;
};
ReferenceKIntervalForwardResult ReferenceKIntervalForward(const AttentionShape& shape,
                                                          const AttentionOptions& options,
                                                          const KIntervalOptions& kint,
                                                          const ReferenceInputs& inputs);
// dV_j += p_ij dO_i, g_ij = dO_i . v_j, ds_i = KIntervalRowBackward(g_i),
// dQ_i += scale ds_ij k_j, dK_j += scale ds_ij q_i.
ReferenceGradients ReferenceKIntervalBackward(const AttentionShape& shape,
                                              const AttentionOptions& options,
                                              const KIntervalOptions& kint,
                                              const ReferenceInputs& inputs,
                                              const std::vector<double>& d_o);

// §3 thresholded (differential) attention, each row through ThresholdRowForward and
// ThresholdRowBackward. Uses options.causal and ThresholdScale(options); sinks are rejected.
// View t has queries q[t] and keys k[t] (dense, like q and k above); view 2 is read only with
// views = 2. lambda_param is [heads]. Rows with no visible key output zeros.
struct ReferenceThresholdInputs {
  std::vector<double> q[2], k[2], v;
  std::vector<double> lambda_param;  // [heads]; used with views = 2
};
struct ReferenceThresholdForwardResult {
  std::vector<double> o;
  // Survivors (s > tau) per row and view, [views][batch, heads, q_len].
  std::vector<int64_t> survivors;
  int64_t visible_entries = 0;  // visible (row, key) pairs, summed over views
  int64_t zero_entries = 0;     // those with weight exactly 0
};
ReferenceThresholdForwardResult ReferenceThresholdForward(const AttentionShape& shape,
                                                          const AttentionOptions& options,
                                                          const ThresholdOptions& threshold,
                                                          const ReferenceThresholdInputs& inputs);
struct ReferenceThresholdGradients {
  std::vector<double> dq[2], dk[2], dv;  // view 2's empty with views = 1
  std::vector<double> d_lambda;          // [heads]; zeros with views = 1
  double d_beta = 0.0;
};
ReferenceThresholdGradients ReferenceThresholdBackward(const AttentionShape& shape,
                                                       const AttentionOptions& options,
                                                       const ThresholdOptions& threshold,
                                                       const ReferenceThresholdInputs& inputs,
                                                       const std::vector<double>& d_o);

// §1.2 value gates over a dense V [batch, kv_heads, kv_len, head_dim]: v~ = g v with
// g = sigmoid(alpha ||v|| + beta) or sigmoid(w . v + b), per kv head.
struct ReferenceValueGateParams {
  ValueGateKind kind = ValueGateKind::kNorm;
  std::vector<double> alpha, beta;  // [kv_heads], norm gate
  std::vector<double> w, b;         // [kv_heads * head_dim], [kv_heads], projection gate
};
struct ReferenceValueGateGrads {
  std::vector<double> dv;
  std::vector<double> alpha, beta, w, b;  // only the gate kind's
};
// Returns v~; gates (if not null) receives g [batch, kv_heads, kv_len].
std::vector<double> ReferenceValueGateForward(const AttentionShape& shape,
                                              const ReferenceValueGateParams& params,
                                              const std::vector<double>& v,
                                              std::vector<double>* gates = nullptr);
ReferenceValueGateGrads ReferenceValueGateBackward(const AttentionShape& shape,
                                                   const ReferenceValueGateParams& params,
                                                   const std::vector<double>& v,
                                                   const std::vector<double>& d_v_gated);

// Gathers a strided float view of shape [batch, heads, tokens, dim] into the dense row-major
// double layout the references take, so tests can compare kernels on any stride choice.
std::vector<double> DenseFromView(ConstTensor t, int64_t batch, int64_t heads, int64_t tokens,
                                  int64_t dim);

}  // namespace lpattn

#endif  // LPATTN_KERNELS_REFERENCE_H_
