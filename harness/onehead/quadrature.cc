#include "harness/onehead/quadrature.h"

#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>
#include <stdexcept>
#include <string>

namespace lpattn::onehead {
namespace {

// P_n(x) and P_n'(x) by the three-term recurrence (n >= 1).
void Legendre(int n, double x, double& p, double& dp) {
  double p_prev = 1.0, p_cur = x;
  for (int k = 2; k <= n; ++k) {
    const double p_next = ((2.0 * k - 1.0) * x * p_cur - (k - 1.0) * p_prev) / k;
    p_prev = p_cur;
    p_cur = p_next;
  }
  p = p_cur;
  dp = n * (x * p_cur - p_prev) / (x * x - 1.0);
}

// Roots of P_n on (-1, 1) by Newton from Tricomi's approximation, mapped to [0, 1] with
// weights 2 / ((1 - x^2) P_n'(x)^2) / 2. Symmetry halves the work.
QuadratureRule Compute(int n) {
  QuadratureRule rule;
  rule.nodes.resize(n);
  rule.weights.resize(n);
  const double pi = std::numbers::pi;
  for (int i = 0; i < (n + 1) / 2; ++i) {
    const double theta = pi * (i + 0.75) / (n + 0.5);
    double x = std::cos(theta) * (1.0 - (n - 1.0) / (8.0 * n * n * n));
    double p = 0.0, dp = 1.0;
    for (int iteration = 0; iteration < 100; ++iteration) {
      Legendre(n, x, p, dp);
      const double dx = p / dp;
      x -= dx;
      if (std::fabs(dx) <= 1e-16 * std::fabs(x) + 1e-300) break;
    }
    Legendre(n, x, p, dp);
    const double w = 1.0 / ((1.0 - x * x) * dp * dp);  // half of 2 / ((1 - x^2) P'^2)
    // x is the i-th largest root: its mirror -x is the i-th smallest.
    rule.nodes[n - 1 - i] = 0.5 * (1.0 + x);
    rule.nodes[i] = 0.5 * (1.0 - x);
    rule.weights[n - 1 - i] = w;
    rule.weights[i] = w;
  }
  return rule;
}

}  // namespace

const QuadratureRule& GaussLegendre(int order) {
  if (order < 1 || order > kMaxQuadratureOrder) {
    throw std::invalid_argument("Gauss-Legendre order must be in [1, " +
                                std::to_string(kMaxQuadratureOrder) + "], got " +
                                std::to_string(order));
  }
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<const QuadratureRule>> rules;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto found = rules.find(order);
    if (found != rules.end()) return *found->second;
  }
  auto rule = std::make_unique<const QuadratureRule>(Compute(order));
  const std::lock_guard<std::mutex> lock(mutex);
  return *rules.try_emplace(order, std::move(rule)).first->second;
}

}  // namespace lpattn::onehead
