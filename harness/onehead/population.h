// The population limit of the one-head model (docs/harness.md §5): the risk
// R(a, b) = integral_0^1 (F(alpha) - alpha)^2 d alpha and its gradient by Gauss-Legendre
// quadrature over alpha, with F in closed form (softmax) or by quadrature over x (the other
// transforms); and gradient descent on it.
#ifndef LPATTN_HARNESS_ONEHEAD_POPULATION_H_
#define LPATTN_HARNESS_ONEHEAD_POPULATION_H_

#include <cstdint>
#include <vector>

#include "harness/onehead/model.h"

namespace lpattn::onehead {

struct PopulationOptions {
  // Gauss-Legendre order over alpha; 0 picks max(64, 10 b) (rounded up to a multiple of 16),
  // enough for the layer of width ~1/b near alpha = 1.
  int order = 0;
  // Order over x on each side of alpha, for transforms without a closed form (or for softmax
  // when force_x_quadrature); 0 picks max(64, 2 sqrt(b)) the same way.
  int x_order = 0;
  bool force_x_quadrature = false;
};

// Throws std::invalid_argument for a negative order or one above kMaxQuadratureOrder.
void ValidatePopulation(const PopulationOptions& options);

// The orders options resolve to at params.
int AlphaOrder(const PopulationOptions& options, const Params& params);
int XOrder(const PopulationOptions& options, const Params& params);

// F(alpha) and its gradient in the population limit under the transform.
Estimate PopulationEstimate(const RowTransform& transform, const Params& params, double alpha,
                            const PopulationOptions& options);

struct Risk {
  double value = 0.0;
  double grad_a = 0.0, grad_b = 0.0;
};

// R(a, b) and its gradient (the transform's surrogate gradient for K-interval), TBB-parallel
// over the alpha nodes, summed in node order (the same result for any thread count).
Risk PopulationRisk(const RowTransform& transform, const Params& params,
                    const PopulationOptions& options);

// sup over interior alpha of |F(alpha) - alpha|: the max over 81 points evenly spaced on
// [0.1, 0.9].
double SupInteriorError(const RowTransform& transform, const Params& params,
                        const PopulationOptions& options);

// One recorded iterate of gradient descent: step k, time t = k * step size.
struct TrajectoryPoint {
  int64_t step = 0;
  double t = 0.0;
  Params params;
  double risk = 0.0, grad_a = 0.0, grad_b = 0.0;
};

// Steps recorded out of `steps`: 0, the last, and `records` more spaced evenly in log(step).
std::vector<int64_t> RecordSteps(int64_t steps, int records);

// Throws std::invalid_argument for a step size that is not finite and positive, or steps < 1.
void ValidateDescent(double step, int64_t steps);

// Gradient descent theta <- theta - step grad from init for `steps` steps, shared by the
// population and the finite runs: evaluate(params) returns the iterate's Risk, and
// visit(k, params, risk, recorded) sees every iterate k = 0 .. steps, with recorded true at
// RecordSteps(steps, records). The same checks as ValidateDescent.
template <class Evaluate, class Visit>
void Descend(const Params& init, double step, int64_t steps, int records,
             const Evaluate& evaluate, const Visit& visit) {
  ValidateDescent(step, steps);
  const std::vector<int64_t> record = RecordSteps(steps, records);
  Params params = init;
  size_t next = 0;
  for (int64_t k = 0; k <= steps; ++k) {
    const Risk risk = evaluate(params);
    const bool recorded = next < record.size() && record[next] == k;
    next += recorded;
    visit(k, params, risk, recorded);
    if (k == steps) break;
    params.a -= step * risk.grad_a;
    params.b -= step * risk.grad_b;
  }
}

// Gradient descent on the population risk from init (Descend), recording RecordSteps(steps,
// records). With hitting_time, it receives the first t = k * step at which R <= hitting_risk
// (NaN if never), checked at every step. The same checks as ValidateDescent.
std::vector<TrajectoryPoint> PopulationDescent(const RowTransform& transform, const Params& init,
                                               double step, int64_t steps, int records,
                                               const PopulationOptions& options,
                                               double hitting_risk = 0.0,
                                               double* hitting_time = nullptr);

}  // namespace lpattn::onehead

#endif  // LPATTN_HARNESS_ONEHEAD_POPULATION_H_
