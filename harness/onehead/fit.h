// The fits the one-head experiments report: least-squares lines (with R^2), power laws as lines
// in log-log, and the two-term law error ~ A u^p + B v^q of frozen transfer.
#ifndef LPATTN_HARNESS_ONEHEAD_FIT_H_
#define LPATTN_HARNESS_ONEHEAD_FIT_H_

#include <vector>

namespace lpattn::onehead {

struct LineFit {
  double slope = 0.0, intercept = 0.0, r2 = 0.0;
};
// y ~ slope x + intercept by least squares. Throws std::invalid_argument for fewer than two
// points, sizes that differ, or x all equal.
LineFit FitLine(const std::vector<double>& x, const std::vector<double>& y);
// log y ~ slope log x + intercept (the exponent of y ~ x^slope); every x, y must be > 0.
LineFit FitPowerLaw(const std::vector<double>& x, const std::vector<double>& y);

struct TwoTermFit {
  double A = 0.0, p = 0.0, B = 0.0, q = 0.0;
  double relative_rms = 0.0;  // sqrt(mean ((e - fit) / e)^2)
};
// e ~ A u^p + B v^q with A, B >= 0 and exponents in [-3, 0]: for each (p, q) on a grid (then a
// finer one around the best) A and B solve the relative least squares in closed form.
// Every e, u, v must be > 0; at least four points.
TwoTermFit FitTwoTerm(const std::vector<double>& u, const std::vector<double>& v,
                      const std::vector<double>& e);
// The same law with the exponents given (theory's p = q = -1: e ~ A / u + B / v): only A and B
// are fitted. The same requirements.
TwoTermFit FitTwoTermWithExponents(const std::vector<double>& u, const std::vector<double>& v,
                                   const std::vector<double>& e, double p, double q);

}  // namespace lpattn::onehead

#endif  // LPATTN_HARNESS_ONEHEAD_FIT_H_
