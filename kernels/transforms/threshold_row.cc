// Thresholded attention's options and its row-level transform (docs/math.md §3), in double,
// written literally from the math: the fp64 reference's rows and any small model's.
#include "kernels/threshold.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "kernels/transforms/option_text.h"

namespace lpattn {
namespace {

[[noreturn]] void Reject(const std::string& what) {
  throw std::invalid_argument("lpattn thresholded-attention options: " + what);
}

// p * x^(p - 1) for x > 0: the slope of x^p.
double PowerSlope(int p, double x) {
  return p == 1 ? 1.0 : p == 2 ? 2.0 * x : 3.0 * x * x;
}

}  // namespace

void ValidateThreshold(const ThresholdOptions& o) {
  if (o.views != 1 && o.views != 2) Reject("views must be 1 or 2, got " + std::to_string(o.views));
  if (o.power < 1 || o.power > 3) Reject("p must be 1, 2 or 3, got " + std::to_string(o.power));
  if (!(o.beta >= 0.0 && std::isfinite(o.beta))) {
    Reject("beta must be finite and >= 0, got " + std::to_string(o.beta));
  }
  if (!(o.kappa > 0.0 && std::isfinite(o.kappa))) {
    Reject("kappa must be finite and > 0, got " + std::to_string(o.kappa));
  }
}

ThresholdOptions ParseThreshold(const std::string& text) {
  ThresholdOptions o;
  ForEachOption(text, [&](const std::string& key, const std::string& value) {
    double x = 0.0;
    if (!ParseOptionNumber(value, x)) Reject("bad value '" + value + "' for " + key);
    auto integer = [&]() {
      if (x != std::floor(x) || std::fabs(x) > 1e9) Reject("bad value '" + value + "' for " + key);
      return int(x);
    };
    if (key == "views") {
      o.views = integer();
    } else if (key == "p") {
      o.power = integer();
    } else if (key == "beta") {
      o.beta = x;
    } else if (key == "kappa") {
      o.kappa = x;
    } else if (key == "l2") {
      const int flag = integer();
      if (flag != 0 && flag != 1) Reject("bad value '" + value + "' for l2 (0 or 1)");
      o.l2_normalize = flag == 1;
    } else {
      Reject("unknown option '" + key + "' (known: views, p, beta, kappa, l2)");
    }
  }, Reject);
  ValidateThreshold(o);
  return o;
}

std::string FormatThreshold(const ThresholdOptions& o) {
  std::ostringstream out;
  out << "views=" << o.views << ":p=" << o.power << ":beta=" << ShortestText(o.beta)
      << ":kappa=" << ShortestText(o.kappa) << ":l2=" << (o.l2_normalize ? 1 : 0);
  return out.str();
}

double ThresholdScale(const AttentionOptions& options) {
  return options.scale ? double(*options.scale) : 1.0;
}

double ThresholdTauPerBeta(const ThresholdOptions& o, int64_t visible_keys, int64_t head_dim) {
  const double log_ratio = std::log(double(visible_keys) / o.kappa);
  return std::sqrt(2.0 * std::max(log_ratio, 0.0) / double(head_dim));
}

double ThresholdTau(const ThresholdOptions& o, int64_t visible_keys, int64_t head_dim) {
  return o.beta * ThresholdTauPerBeta(o, visible_keys, head_dim);
}

double ClampLambda(double lambda_param) { return std::clamp(lambda_param, 0.0, 1.0); }

double LambdaSlope(double lambda_param) {
  return lambda_param >= 0.0 && lambda_param <= 1.0 ? 1.0 : 0.0;
}

size_t ThresholdRowForward(const ThresholdOptions& o, double tau, const double* s, size_t n,
                           double* a) {
  size_t survivors = 0;
  for (size_t j = 0; j < n; ++j) {
    if (std::isnan(s[j])) {
      a[j] = s[j];
    } else if (s[j] > tau) {
      a[j] = std::pow(s[j] - tau, o.power);
      ++survivors;
    } else {
      a[j] = 0.0;
    }
  }
  return survivors;
}

double ThresholdRowBackward(const ThresholdOptions& o, double tau, const double* s, size_t n,
                            const double* da, double* ds) {
  double sum = 0.0;
  for (size_t j = 0; j < n; ++j) {
    ds[j] = s[j] > tau ? da[j] * PowerSlope(o.power, s[j] - tau) : 0.0;
    sum += ds[j];
  }
  return sum;
}

}  // namespace lpattn
