// Thresholded (differential) attention (docs/math.md §3): the options, and the row-level
// transform that the fp64 reference, the one-head estimator and other small models share. One
// row of scores and its threshold go in, the kept exceedances come out; weight gradients go in,
// score gradients come out.
#ifndef LPATTN_KERNELS_THRESHOLD_H_
#define LPATTN_KERNELS_THRESHOLD_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/attention.h"

namespace lpattn {

struct ThresholdOptions {
  int views = 2;             // 1: plain thresholded attention; 2: differential (a1 - lambda a2)
  int power = 2;             // p: weights max(s - tau, 0)^p, p in {1, 2, 3}
  double beta = 1.0;         // threshold scale (>= 0)
  double kappa = 1.0;        // expected spurious survivors per row under the null (> 0)
  bool l2_normalize = true;  // scores are cosines q^ . k^ (times the score scale)
};

// Throws std::invalid_argument naming the problem: views not 1 or 2, p not 1, 2 or 3, beta
// negative or not finite, kappa not finite and > 0.
void ValidateThreshold(const ThresholdOptions& options);

// Parses "views=2,p=2,beta=1,kappa=1,l2=1" (',' or ':' between items; every item optional).
// Validates the result; throws std::invalid_argument on an unknown key or a bad value.
ThresholdOptions ParseThreshold(const std::string& text);
// The canonical text of options (every item, ':' between items), which parses back to them.
std::string FormatThreshold(const ThresholdOptions& options);

// The score scale of thresholded attention: options.scale, or 1 when unset (§3: scores are
// cosines, no 1 / sqrt(D)).
double ThresholdScale(const AttentionOptions& options);

// §3: tau = beta * sqrt(2 * max(ln(visible_keys / kappa), 0) / head_dim) for a row that sees
// visible_keys keys, and its derivative tau / beta (computed without dividing by beta).
double ThresholdTau(const ThresholdOptions& options, int64_t visible_keys, int64_t head_dim);
double ThresholdTauPerBeta(const ThresholdOptions& options, int64_t visible_keys,
                           int64_t head_dim);

// §3: lambda = clamp(lambda_param, 0, 1), and d lambda / d lambda_param: 1 inside [0, 1]
// (ends included), 0 outside.
double ClampLambda(double lambda_param);
double LambdaSlope(double lambda_param);

// §3 forward of one row of n scores: a_j = max(s_j - tau, 0)^p (a NaN score gives a NaN
// weight). Returns the survivors, the entries with s_j > tau.
size_t ThresholdRowForward(const ThresholdOptions& options, double tau, const double* s, size_t n,
                           double* a);

// §3 backward of the same row: da_j = dL/da_j in, ds_j = da_j * p * max(s_j - tau, 0)^(p-1) out
// (0 at and below tau, also for p = 1). Returns sum_j ds_j, which is -dL/dtau.
double ThresholdRowBackward(const ThresholdOptions& options, double tau, const double* s,
                            size_t n, const double* da, double* ds);

// ---- the SIMD kernel ---------------------------------------------------------------------

// View t's queries and keys are q[t] and k[t], shaped and strided like exact attention's Q and
// K; view 2's are read only with views = 2, and so is lambda_param ([heads], clamped to
// [0, 1] per §3). survivors, when not null, receives the nonzero weights of each row and view,
// [views][batch, heads, q_len] (the exact zeros among a row's visible entries are its visible
// keys minus its survivors).
struct ThresholdForwardArgs {
  ConstTensor q[2], k[2], v;
  const float* lambda_param = nullptr;
  Tensor o;
  int32_t* survivors = nullptr;
};

// §3 forward on the tiled skeleton: the L2 normalisation of Q and K (option) into scratch,
// then per tile one dense score product per view and a P V that skips tiles without survivors
// and accumulates sparse ones entry by entry. Uses options.causal, ThresholdScale(options) and
// options.threads; a sink is rejected (§3 has none), as is kv_len >= 2^24 (survivor counts
// travel as floats). Throws std::invalid_argument before any work on bad arguments.
void ThresholdForward(const AttentionShape& shape, const AttentionOptions& options,
                      const ThresholdOptions& threshold, const ThresholdForwardArgs& args);

// The backward's arguments: the forward's inputs, d_o (dL/dy); dq, dk (per view) and dv are
// overwritten; d_lambda ([heads], views = 2) is written; d_beta, when not null, receives
// dL/dbeta (a learnable beta, §3).
struct ThresholdBackwardArgs {
  ConstTensor q[2], k[2], v, d_o;
  const float* lambda_param = nullptr;
  Tensor dq[2], dk[2], dv;
  float* d_lambda = nullptr;
  float* d_beta = nullptr;
};

// §3 backward: per view, dS = c dP p max(s - tau, 0)^(p-1) (c = 1, -lambda) on the tiled
// skeleton, dV = sum over views of c a^T dO, the row sums that d lambda and d beta need, then
// the L2-normalisation backward into dq and dk. The same checks as ThresholdForward.
void ThresholdBackward(const AttentionShape& shape, const AttentionOptions& options,
                       const ThresholdOptions& threshold, const ThresholdBackwardArgs& args);

}  // namespace lpattn

#endif  // LPATTN_KERNELS_THRESHOLD_H_
