#include "harness/onehead/population.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include <tbb/parallel_for.h>

#include "harness/onehead/quadrature.h"

namespace lpattn::onehead {
namespace {

// max(64, wanted) rounded up to a multiple of 16 (so that rules are reused), capped.
int AutoOrder(int order, double wanted) {
  if (order > 0) return order;
  wanted = std::min(std::max(64.0, std::ceil(wanted)), 1e9);
  return std::min(static_cast<int>(std::ceil(wanted / 16.0) * 16.0), kMaxQuadratureOrder);
}

}  // namespace

void ValidatePopulation(const PopulationOptions& options) {
  for (const int order : {options.order, options.x_order}) {
    if (order < 0 || order > kMaxQuadratureOrder) {
      throw std::invalid_argument("onehead: a quadrature order must be in [1, " +
                                  std::to_string(kMaxQuadratureOrder) +
                                  "] (0 for automatic), got " + std::to_string(order));
    }
  }
}

// Over alpha, the layer of width ~1/b near alpha = 1 needs about 10 b nodes (docs/harness.md §5). Over x,
// each side's integrand e^{-b |x - alpha|} peaks at the panel's end, where Gauss-Legendre nodes
// cluster: 2 sqrt(b) nodes give F and its gradient to ~1e-6 relative up to b = 4096
// (measured against the closed form).
int AlphaOrder(const PopulationOptions& options, const Params& params) {
  return AutoOrder(options.order, 10.0 * std::fabs(params.b));
}
int XOrder(const PopulationOptions& options, const Params& params) {
  return AutoOrder(options.x_order, 2.0 * std::sqrt(std::fabs(params.b)));
}

Estimate PopulationEstimate(const RowTransform& transform, const Params& params, double alpha,
                            const PopulationOptions& options) {
  if (transform.HasClosedForm() && !options.force_x_quadrature) {
    return PopulationEstimateExact(params, alpha);
  }
  thread_local RowWorkspace workspace;
  return PopulationEstimateByQuadrature(transform, params, alpha, XOrder(options, params),
                                        workspace);
}

Risk PopulationRisk(const RowTransform& transform, const Params& params,
                    const PopulationOptions& options) {
  ValidatePopulation(options);
  const QuadratureRule& rule = GaussLegendre(AlphaOrder(options, params));
  const size_t n = rule.nodes.size();
  std::vector<Risk> terms(n);
  tbb::parallel_for(tbb::blocked_range<size_t>(0, n, 16), [&](const tbb::blocked_range<size_t>& r) {
    for (size_t i = r.begin(); i != r.end(); ++i) {
      const double alpha = rule.nodes[i];
      const Estimate e = PopulationEstimate(transform, params, alpha, options);
      const double error = e.F - alpha, w = rule.weights[i];
      terms[i] = {w * error * error, 2.0 * w * error * e.dF_da, 2.0 * w * error * e.dF_db};
    }
  });
  Risk risk;
  for (const Risk& term : terms) {
    risk.value += term.value;
    risk.grad_a += term.grad_a;
    risk.grad_b += term.grad_b;
  }
  return risk;
}

double SupInteriorError(const RowTransform& transform, const Params& params,
                        const PopulationOptions& options) {
  double sup = 0.0;
  for (int i = 0; i <= 80; ++i) {
    const double alpha = 0.1 + 0.01 * i;
    sup = std::max(sup, std::fabs(PopulationEstimate(transform, params, alpha, options).F - alpha));
  }
  return sup;
}

std::vector<int64_t> RecordSteps(int64_t steps, int records) {
  std::vector<int64_t> out = {0};
  for (int i = 0; i <= records; ++i) {
    const double at = std::pow(double(steps), double(i) / std::max(records, 1));
    const int64_t step = std::clamp<int64_t>(std::llround(at), 1, steps);
    if (step > out.back()) out.push_back(step);
  }
  if (out.back() != steps) out.push_back(steps);
  return out;
}

void ValidateDescent(double step, int64_t steps) {
  if (!std::isfinite(step) || step <= 0.0) {
    throw std::invalid_argument("onehead: the step size must be finite and positive, got " +
                                std::to_string(step));
  }
  if (steps < 1) throw std::invalid_argument("onehead: steps must be >= 1");
}

std::vector<TrajectoryPoint> PopulationDescent(const RowTransform& transform, const Params& init,
                                               double step, int64_t steps, int records,
                                               const PopulationOptions& options,
                                               double hitting_risk, double* hitting_time) {
  ValidatePopulation(options);
  std::vector<TrajectoryPoint> trajectory;
  if (hitting_time) *hitting_time = std::nan("");
  Descend(
      init, step, steps, records,
      [&](const Params& params) { return PopulationRisk(transform, params, options); },
      [&](int64_t k, const Params& params, const Risk& risk, bool recorded) {
        if (hitting_time && std::isnan(*hitting_time) && risk.value <= hitting_risk) {
          *hitting_time = k * step;
        }
        if (recorded) {
          trajectory.push_back({k, k * step, params, risk.value, risk.grad_a, risk.grad_b});
        }
      });
  return trajectory;
}

}  // namespace lpattn::onehead
