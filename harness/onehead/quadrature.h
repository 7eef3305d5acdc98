// Gauss-Legendre quadrature (docs/harness.md §5): the population risk integrates over the
// threshold alpha, and transforms without a closed form integrate over x, with rules of a
// chosen order. Nodes and weights are computed (Newton on the Legendre recurrence), not tabulated.
#ifndef LPATTN_HARNESS_ONEHEAD_QUADRATURE_H_
#define LPATTN_HARNESS_ONEHEAD_QUADRATURE_H_

#include <vector>

namespace lpattn::onehead {

// A rule on [0, 1]: integral_0^1 f ~ sum_i weights[i] f(nodes[i]); nodes ascending.
struct QuadratureRule {
  std::vector<double> nodes, weights;
};

// The largest order GaussLegendre accepts (its cost is quadratic in the order).
constexpr int kMaxQuadratureOrder = 50000;

// The order-point Gauss-Legendre rule on [0, 1]: exact for polynomials of degree 2 order - 1.
// Rules are computed once per order and kept (safe to call from many threads). Throws
// std::invalid_argument for an order outside [1, kMaxQuadratureOrder].
const QuadratureRule& GaussLegendre(int order);

}  // namespace lpattn::onehead

#endif  // LPATTN_HARNESS_ONEHEAD_QUADRATURE_H_
