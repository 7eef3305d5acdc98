// The one-head threshold estimator (docs/harness.md §5): two parameters, a and b, score each
// labelled point x_i, y_i of a context as s_i = a y_i - b x_i, and the estimate of the
// threshold is F = sum_i w_i x_i with w = RowTransform(s). Everything is double precision.
#ifndef LPATTN_HARNESS_ONEHEAD_MODEL_H_
#define LPATTN_HARNESS_ONEHEAD_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kinterval.h"
#include "kernels/threshold.h"

namespace lpattn::onehead {

// b is the attention scale mu; the ratio is a / b and the endpoint coordinate
// c = a - b - log b (defined for b > 0).
struct Params {
  double a = 0.0, b = 0.0;
};
double Ratio(const Params& p);
double EndpointCoordinate(const Params& p);

// The row transform, chosen like a harness arm: "exact" (softmax), "kint:<options>" (the
// K-interval transform of kernels/kinterval.h with its surrogate gradient) or "tda:<options>"
// (thresholded, kernels/threshold.h, one view). The thresholded weights are normalised by their
// sum, so the estimate stays an average of the kept points; a row with no survivor estimates 0
// with zero gradient (the kernel's output there). Its threshold is tau(N) of docs/math.md §3 with head_dim 1
// (the model's score is one product, not a cosine of D-vectors); where N is infinite (the
// population), tau is taken at tau_keys keys.
struct RowTransform {
  enum class Kind { kExact, kKInterval, kThreshold };
  Kind kind = Kind::kExact;
  KIntervalOptions kint;
  ThresholdOptions tda;
  int64_t tau_keys = 1024;  // thresholded: the N of the population's tau

  std::string Name() const;  // the canonical text, which ParseRowTransform reads back
  bool HasClosedForm() const { return kind == Kind::kExact; }
  double Tau(int64_t keys) const;  // thresholded: tau at `keys` keys; 0 for the others
};

// Throws std::invalid_argument on an unknown name, bad options, or two views (the model has
// one score per point).
RowTransform ParseRowTransform(const std::string& text);

// The estimate and its gradient for one context.
struct Estimate {
  double F = 0.0;
  double dF_da = 0.0, dF_db = 0.0;
  bool empty = false;  // thresholded: no point survived (F = 0)
};

// Scratch for RowEstimate, reused across calls by one thread.
struct RowWorkspace {
  std::vector<double> s, w, g, ds;
};

// F and its gradient for a row of n >= 1 points x (in [0, 1]) with labels y (0 or 1). With
// `mass` (quadrature weights of a population row), point i counts mass[i] times: F =
// sum_i mass_i w_i x_i / sum_i mass_i w_i. tau is the thresholded transform's threshold.
// Gradients are exact for softmax and the transform's own backward (surrogate) for the others:
// dF/da = sum_i dF/ds_i y_i, dF/db = -sum_i dF/ds_i x_i.
Estimate RowEstimate(const RowTransform& transform, const Params& params, const double* x,
                     const uint8_t* y, const double* mass, size_t n, double tau,
                     RowWorkspace& workspace);

// The population estimate (N -> infinity, x ~ U[0, 1], clean labels) under softmax, in closed
// form: moments of x - alpha under e^{s(x)} on [0, alpha) and [alpha, 1] from the incomplete
// gamma integrals of u^k e^{-beta u}, k <= 2, scaled so that no exponential overflows.
// dF/da = Cov_w(x, y), dF/db = -Var_w(x). alpha in [0, 1].
Estimate PopulationEstimateExact(const Params& params, double alpha);

// The same limit for any transform by Gauss-Legendre quadrature over x of order x_order on
// each side of alpha (a row of 2 x_order points weighted by the rule). Exact for softmax as
// x_order grows; the only way for the others.
Estimate PopulationEstimateByQuadrature(const RowTransform& transform, const Params& params,
                                        double alpha, int x_order, RowWorkspace& workspace);

}  // namespace lpattn::onehead

#endif  // LPATTN_HARNESS_ONEHEAD_MODEL_H_
