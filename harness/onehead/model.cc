#include "harness/onehead/model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "harness/onehead/quadrature.h"

namespace lpattn::onehead {
namespace {

// J_k = integral_0^L u^k e^{-beta u} du for k = 0, 1, 2, beta >= 0, L >= 0. For beta L <= 1 the
// series L^{k+1} sum_j (-beta L)^j / (j! (k + 1 + j)) (no division by beta, so beta = 0 is
// fine); beyond, k! / beta^{k+1} (1 - e^{-z} sum_{j<=k} z^j / j!) with z = beta L.
void DecayMoments(double beta, double L, double J[3]) {
  const double z = beta * L;
  if (z <= 1.0) {
    for (int k = 0; k < 3; ++k) {
      double term = 1.0, sum = 1.0 / (k + 1);
      for (int j = 1; j < 40; ++j) {
        term *= -z / j;
        sum += term / (k + 1 + j);
        if (std::fabs(term) < 1e-18) break;
      }
      J[k] = sum * std::pow(L, k + 1);
    }
    return;
  }
  const double e = std::exp(-z);
  J[0] = -std::expm1(-z) / beta;
  J[1] = (1.0 - e * (1.0 + z)) / (beta * beta);
  J[2] = 2.0 * (1.0 - e * (1.0 + z + 0.5 * z * z)) / (beta * beta * beta);
}

// One side of alpha: integral of d^k e^{s(x)} over it, d = x - alpha, as e^{log_scale} m[k].
struct Side {
  double log_scale = -std::numeric_limits<double>::infinity();
  double m[3] = {0.0, 0.0, 0.0};
};

// x in [0, alpha), s = -b x.
Side NegativeSide(double b, double alpha) {
  Side side;
  if (alpha <= 0.0) return side;
  double J[3];
  if (b >= 0.0) {  // u = x: d = u - alpha
    DecayMoments(b, alpha, J);
    side.log_scale = 0.0;
    side.m[0] = J[0];
    side.m[1] = J[1] - alpha * J[0];
    side.m[2] = J[2] - 2.0 * alpha * J[1] + alpha * alpha * J[0];
  } else {  // v = alpha - x: s = -b alpha - |b| v, d = -v
    DecayMoments(-b, alpha, J);
    side.log_scale = -b * alpha;
    side.m[0] = J[0];
    side.m[1] = -J[1];
    side.m[2] = J[2];
  }
  return side;
}

// x in [alpha, 1], s = a - b x.
Side PositiveSide(double a, double b, double alpha) {
  Side side;
  const double L = 1.0 - alpha;
  if (L <= 0.0) return side;
  double J[3];
  if (b >= 0.0) {  // u = x - alpha = d: s = a - b alpha - b u
    DecayMoments(b, L, J);
    side.log_scale = a - b * alpha;
    side.m[0] = J[0];
    side.m[1] = J[1];
    side.m[2] = J[2];
  } else {  // v = 1 - x: s = a - b - |b| v, d = L - v
    DecayMoments(-b, L, J);
    side.log_scale = a - b;
    side.m[0] = J[0];
    side.m[1] = L * J[0] - J[1];
    side.m[2] = L * L * J[0] - 2.0 * L * J[1] + J[2];
  }
  return side;
}

}  // namespace

double Ratio(const Params& p) { return p.a / p.b; }
double EndpointCoordinate(const Params& p) { return p.a - p.b - std::log(p.b); }

std::string RowTransform::Name() const {
  switch (kind) {
    case Kind::kExact:
      return "exact";
    case Kind::kKInterval:
      return "kint:" + FormatKInterval(kint);
    case Kind::kThreshold:
      return "tda:" + FormatThreshold(tda);
  }
  return "";
}

double RowTransform::Tau(int64_t keys) const {
  return kind == Kind::kThreshold ? ThresholdTau(tda, keys, 1) : 0.0;
}

RowTransform ParseRowTransform(const std::string& text) {
  RowTransform transform;
  if (text == "exact") return transform;
  if (text == "kint" || text.rfind("kint:", 0) == 0) {
    transform.kind = RowTransform::Kind::kKInterval;
    transform.kint = ParseKInterval(text.size() > 5 ? text.substr(5) : "");
    return transform;
  }
  if (text == "tda" || text.rfind("tda:", 0) == 0) {
    transform.kind = RowTransform::Kind::kThreshold;
    transform.tda = ParseThreshold(text.size() > 4 ? text.substr(4) : "views=1");
    if (text.size() <= 4) transform.tda.views = 1;
    if (transform.tda.views != 1) {
      throw std::invalid_argument("onehead: tda needs views=1 (the one-head model has one score "
                                  "per point), got '" + text + "'");
    }
    return transform;
  }
  throw std::invalid_argument("onehead: unknown row transform '" + text +
                              "' (expected exact, kint:<options> or tda:<options>)");
}

Estimate RowEstimate(const RowTransform& transform, const Params& params, const double* x,
                     const uint8_t* y, const double* mass, size_t n, double tau,
                     RowWorkspace& ws) {
  ws.s.resize(n);
  ws.w.resize(n);
  ws.ds.resize(n);
  for (size_t i = 0; i < n; ++i) ws.s[i] = params.a * y[i] - params.b * x[i];
  Estimate estimate;
  // w: the transform's weights, times the mass; total: their sum.
  KIntervalRowStats stats;
  switch (transform.kind) {
    case RowTransform::Kind::kExact: {
      const double max = *std::max_element(ws.s.begin(), ws.s.end());
      for (size_t i = 0; i < n; ++i) ws.w[i] = std::exp(ws.s[i] - max);
      break;
    }
    case RowTransform::Kind::kKInterval:
      stats = KIntervalRowForward(transform.kint, ws.s.data(), n, ws.w.data());
      break;
    case RowTransform::Kind::kThreshold:
      ThresholdRowForward(transform.tda, tau, ws.s.data(), n, ws.w.data());
      break;
  }
  if (mass != nullptr) {
    for (size_t i = 0; i < n; ++i) ws.w[i] *= mass[i];
  }
  double total = 0.0, first = 0.0;
  for (size_t i = 0; i < n; ++i) {
    total += ws.w[i];
    first += ws.w[i] * x[i];
  }
  if (!(total > 0.0)) {  // thresholded with no survivor: the output is 0, and so its gradient
    estimate.empty = true;
    return estimate;
  }
  const double F = first / total;
  estimate.F = F;
  if (transform.kind == RowTransform::Kind::kExact) {
    // dF/ds_i = w_i (x_i - F): dF/db = -Var_w(x), summed as squares (no cancellation).
    for (size_t i = 0; i < n; ++i) {
      const double centred = x[i] - F, share = ws.w[i] / total;
      estimate.dF_da += share * centred * y[i];
      estimate.dF_db -= share * centred * centred;
    }
    return estimate;
  }
  // dF/d(transform weight i) = mass_i (x_i - F) / total, through the transform's backward
  // (for K-interval the weights are its row API's p = w^ / Z).
  ws.g.resize(n);
  for (size_t i = 0; i < n; ++i) ws.g[i] = (mass ? mass[i] : 1.0) * (x[i] - F) / total;
  if (transform.kind == RowTransform::Kind::kKInterval) {
    KIntervalRowBackward(transform.kint, ws.s.data(), n, stats, ws.g.data(), ws.ds.data());
  } else {
    ThresholdRowBackward(transform.tda, tau, ws.s.data(), n, ws.g.data(), ws.ds.data());
  }
  for (size_t i = 0; i < n; ++i) {
    estimate.dF_da += ws.ds[i] * y[i];
    estimate.dF_db -= ws.ds[i] * x[i];
  }
  return estimate;
}

Estimate PopulationEstimateExact(const Params& params, double alpha) {
  const Side neg = NegativeSide(params.b, alpha);
  const Side pos = PositiveSide(params.a, params.b, alpha);
  const double top = std::max(neg.log_scale, pos.log_scale);
  const double cn = std::exp(neg.log_scale - top), cp = std::exp(pos.log_scale - top);
  const double M0 = cn * neg.m[0] + cp * pos.m[0];
  const double mean_d = (cn * neg.m[1] + cp * pos.m[1]) / M0;
  const double mean_d2 = (cn * neg.m[2] + cp * pos.m[2]) / M0;
  const double mean_y = cp * pos.m[0] / M0;
  const double mean_dy = cp * pos.m[1] / M0;
  Estimate estimate;
  estimate.F = alpha + mean_d;
  estimate.dF_da = mean_dy - mean_d * mean_y;
  estimate.dF_db = -std::max(mean_d2 - mean_d * mean_d, 0.0);
  return estimate;
}

Estimate PopulationEstimateByQuadrature(const RowTransform& transform, const Params& params,
                                        double alpha, int x_order, RowWorkspace& ws) {
  const QuadratureRule& rule = GaussLegendre(x_order);
  const size_t n = rule.nodes.size();
  thread_local std::vector<double> x, mass;
  thread_local std::vector<uint8_t> y;
  x.resize(2 * n);
  mass.resize(2 * n);
  y.resize(2 * n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = alpha * rule.nodes[i];
    mass[i] = alpha * rule.weights[i];
    y[i] = 0;
    x[n + i] = alpha + (1.0 - alpha) * rule.nodes[i];
    mass[n + i] = (1.0 - alpha) * rule.weights[i];
    y[n + i] = 1;
  }
  return RowEstimate(transform, params, x.data(), y.data(), mass.data(), 2 * n,
                     transform.Tau(transform.tau_keys), ws);
}

}  // namespace lpattn::onehead
