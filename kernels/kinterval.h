// K-interval attention (docs/math.md §2): the options, and the row-level transform that the
// fp64 reference, the one-head estimator and other small models share. One row of visible
// scores goes in, probabilities come out; probability gradients go in, score gradients (under
// the chosen surrogate) come out.
#ifndef LPATTN_KERNELS_KINTERVAL_H_
#define LPATTN_KERNELS_KINTERVAL_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/attention.h"

namespace lpattn {

enum class KIntervalCalibration { kMinMax, kWindow };  // R = m - a, or R = W
enum class KIntervalRounding { kLerp, kNearest };      // chord between nodes, or nearest node
enum class KIntervalSurrogate { kExact, kWeight, kProb };

struct KIntervalOptions {
  int K = 4;  // intervals: K + 1 grid values, 1 <= K <= 64
  KIntervalCalibration calibration = KIntervalCalibration::kMinMax;
  double window = 8.0;  // W of the window calibration (> 0)
  KIntervalRounding rounding = KIntervalRounding::kLerp;
  KIntervalSurrogate surrogate = KIntervalSurrogate::kExact;
  bool weight_slope_from_grid = false;  // weight surrogate: slope w^_j instead of exp(u_j)
  bool prob_jacobian_at_grid = false;   // prob surrogate: Jacobian at p^ instead of pi
  bool detach_extrema = false;          // exact and weight surrogates: drop the dm, da terms
  // The grid values E_k stored in a low-precision format (§2's option: a low-precision exp
  // unit): each E_k rounded as quant rounds (int8 through the scale 1/127). Reconstruction,
  // slopes and calibration terms all use the rounded table.
  quant::Format grid = quant::Format::kFp32;
};

// Throws std::invalid_argument naming the problem: K outside [1, 64], W <= 0 or not finite,
// nearest rounding with the exact surrogate, or a variant option on a surrogate that has no
// use for it (detach with prob, the slope option without weight, the Jacobian one without prob).
void ValidateKInterval(const KIntervalOptions& options);

// Parses "K=4,cal=window,W=8,round=nearest,ste=prob" (',' or ':' between items; every item
// optional): K, cal=minmax|window, W, round=lerp|nearest, ste=exact|weight|prob,
// slope=exp|grid (weight), jac=pi|grid (prob), detach=0|1, grid=FORMAT (fp32, bf16, fp16,
// fp8e4m3, fp8e5m2, int8). Validates the result; throws
// std::invalid_argument on an unknown key or value.
KIntervalOptions ParseKInterval(const std::string& text);
// The canonical text of options (every item, ':' between items), which parses back to them.
std::string FormatKInterval(const KIntervalOptions& options);

// What the forward of one row keeps for its backward.
struct KIntervalRowStats {
  double m = 0.0, a = 0.0;  // row max and min of the visible scores
  double R = 0.0;           // the window width: m - a (minmax) or W (window)
  double Z = 0.0;           // sum of the reconstructed weights (>= 1)
  size_t argmax = 0, argmin = 0;  // lowest index on ties
};

// §2 forward of one row of n >= 1 visible scores s: writes p_j = w^_j / Z. A degenerate row
// (R = 0) gives every entry w^ = 1.
KIntervalRowStats KIntervalRowForward(const KIntervalOptions& options, const double* s, size_t n,
                                      double* p);

// §2 backward of the same row: g_j = dL/dp_j in (dO_i . v_j in attention), ds_j = dL/ds_j out
// under options.surrogate. In a degenerate row the calibration terms are 0 and the exact and
// weight surrogates take the slope exp(u_j) = 1, which is exact softmax's gradient there.
// g_bar, if given, replaces sum_j p_j g_j (attention passes dO_i . o_i, which differs from it
// when the forward rounded P before P V, docs/math.md §4). corrections, if given, receives the
// extrema terms (dm for the argmax, da for the argmin; 0 when there are none) instead of ds
// (the kernels add them after rounding dS, docs/math.md §4.2).
void KIntervalRowBackward(const KIntervalOptions& options, const double* s, size_t n,
                          const KIntervalRowStats& stats, const double* g, double* ds,
                          const double* g_bar = nullptr, double* corrections = nullptr);

// ---- the SIMD kernel ---------------------------------------------------------------------

// What the forward saves per row for the backward, each [batch, heads, q_len]: the row max m,
// the window width R, the normaliser Z, lse of the exact softmax (for the prob surrogate), and
// the argmax and argmin key indices. Rows with no visible key: m = -inf, R = Z = 0.
struct KIntervalSaved {
  float* m = nullptr;
  float* R = nullptr;
  float* Z = nullptr;
  float* lse_exact = nullptr;
  int32_t* argmax = nullptr;
  int32_t* argmin = nullptr;
};

struct KIntervalForwardArgs {
  ConstTensor q, k, v;
  Tensor o;
  KIntervalSaved saved;
};

// §2 forward on the tiled skeleton: a statistics pass, then the weights and P V. Uses
// options.causal, options.scale and options.threads; a sink is rejected (§2 defines none), as
// is kv_len >= 2^24 (key indices travel as floats). Throws std::invalid_argument before any
// work on bad arguments.
void KIntervalForward(const AttentionShape& shape, const AttentionOptions& options,
                      const KIntervalOptions& kint, const KIntervalForwardArgs& args);

// The backward's arguments: the forward's inputs, its output o and saved statistics (read
// only), d_o; dq, dk, dv are overwritten.
struct KIntervalBackwardArgs {
  ConstTensor q, k, v, o, d_o;
  KIntervalSaved saved;
  Tensor dq, dk, dv;
};

// §2 backward under kint.surrogate (with its variants and detach): the elementwise dS on the
// tiled skeleton, a terms pass for the row sums the surrogate needs, and the calibration
// terms added at each row's argmax and argmin. The same checks as KIntervalForward.
void KIntervalBackward(const AttentionShape& shape, const AttentionOptions& options,
                       const KIntervalOptions& kint, const KIntervalBackwardArgs& args);

}  // namespace lpattn

#endif  // LPATTN_KERNELS_KINTERVAL_H_
