#include "harness/onehead/fit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace lpattn::onehead {
namespace {

void CheckPositive(const std::vector<double>& values, const char* what) {
  for (const double v : values) {
    if (!(v > 0.0) || !std::isfinite(v)) {
      throw std::invalid_argument(std::string("onehead fit: every ") + what +
                                  " must be finite and > 0");
    }
  }
}

// For fixed exponents: A, B >= 0 minimising sum ((e - A U - B V) / e)^2, U = u^p, V = v^q.
// Returns the sum of squares.
double SolveAmplitudes(const std::vector<double>& u, const std::vector<double>& v,
                       const std::vector<double>& e, double p, double q, double& A, double& B) {
  double suu = 0, svv = 0, suv = 0, su = 0, sv = 0;
  const size_t n = e.size();
  std::vector<double> U(n), V(n);
  for (size_t i = 0; i < n; ++i) {
    U[i] = std::pow(u[i], p) / e[i];  // the rows of the relative problem: 1 ~ A U + B V
    V[i] = std::pow(v[i], q) / e[i];
    suu += U[i] * U[i];
    svv += V[i] * V[i];
    suv += U[i] * V[i];
    su += U[i];
    sv += V[i];
  }
  auto residual = [&](double a, double b) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += (1.0 - a * U[i] - b * V[i]) * (1.0 - a * U[i] - b * V[i]);
    return s;
  };
  double best = std::numeric_limits<double>::infinity();
  const double det = suu * svv - suv * suv;
  if (det > 1e-300 * suu * svv) {
    const double a = (su * svv - sv * suv) / det, b = (sv * suu - su * suv) / det;
    if (a >= 0 && b >= 0) {
      A = a;
      B = b;
      best = residual(a, b);
    }
  }
  // The boundary solutions (one amplitude 0), for when the free optimum is not admissible.
  const double a_only = su / suu, b_only = sv / svv;
  if (const double r = residual(a_only, 0.0); r < best) {
    best = r;
    A = a_only;
    B = 0.0;
  }
  if (const double r = residual(0.0, b_only); r < best) {
    best = r;
    A = 0.0;
    B = b_only;
  }
  return best;
}

}  // namespace

LineFit FitLine(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size() || x.size() < 2) {
    throw std::invalid_argument("onehead fit: a line needs two or more (x, y) pairs");
  }
  const double n = double(x.size());
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    mx += x[i] / n;
    my += y[i] / n;
  }
  double sxx = 0, sxy = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (!(sxx > 0.0)) throw std::invalid_argument("onehead fit: every x is the same");
  LineFit fit;
  fit.slope = sxy / sxx;
  fit.intercept = my - fit.slope * mx;
  fit.r2 = syy > 0.0 ? sxy * sxy / (sxx * syy) : 1.0;
  return fit;
}

LineFit FitPowerLaw(const std::vector<double>& x, const std::vector<double>& y) {
  CheckPositive(x, "x of a power law");
  CheckPositive(y, "y of a power law");
  std::vector<double> lx(x.size()), ly(y.size());
  std::transform(x.begin(), x.end(), lx.begin(), [](double v) { return std::log(v); });
  std::transform(y.begin(), y.end(), ly.begin(), [](double v) { return std::log(v); });
  return FitLine(lx, ly);
}

namespace {

void CheckTwoTerm(const std::vector<double>& u, const std::vector<double>& v,
                  const std::vector<double>& e) {
  if (u.size() != e.size() || v.size() != e.size() || e.size() < 4) {
    throw std::invalid_argument("onehead fit: the two-term law needs four or more points");
  }
  CheckPositive(u, "u");
  CheckPositive(v, "v");
  CheckPositive(e, "error");
}

}  // namespace

TwoTermFit FitTwoTermWithExponents(const std::vector<double>& u, const std::vector<double>& v,
                                   const std::vector<double>& e, double p, double q) {
  CheckTwoTerm(u, v, e);
  TwoTermFit fit{0.0, p, 0.0, q, 0.0};
  fit.relative_rms = std::sqrt(SolveAmplitudes(u, v, e, p, q, fit.A, fit.B) / double(e.size()));
  return fit;
}

TwoTermFit FitTwoTerm(const std::vector<double>& u, const std::vector<double>& v,
                      const std::vector<double>& e) {
  CheckTwoTerm(u, v, e);
  TwoTermFit fit;
  double best = std::numeric_limits<double>::infinity();
  auto search = [&](double p_lo, double p_hi, double q_lo, double q_hi, double h) {
    for (double p = p_lo; p <= p_hi + 1e-12; p += h) {
      for (double q = q_lo; q <= q_hi + 1e-12; q += h) {
        double A = 0, B = 0;
        const double r = SolveAmplitudes(u, v, e, p, q, A, B);
        if (r < best) {
          best = r;
          fit = {A, p, B, q, 0.0};
        }
      }
    }
  };
  search(-3.0, 0.0, -3.0, 0.0, 0.02);
  search(std::max(-3.0, fit.p - 0.02), std::min(0.0, fit.p + 0.02), std::max(-3.0, fit.q - 0.02),
         std::min(0.0, fit.q + 0.02), 0.001);
  fit.relative_rms = std::sqrt(best / double(e.size()));
  return fit;
}

}  // namespace lpattn::onehead
