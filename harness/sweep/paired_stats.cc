// Paired-gap statistics for sweep reports (docs/harness.md §3.5).
#include "harness/sweep/paired_stats.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "harness/common/counter_rng.h"

namespace lpattn::harness {
namespace {

// The continued fraction of the regularized incomplete beta I_x(a, b) (modified Lentz), valid
// for x < (a + 1) / (a + b + 2); the caller uses the symmetry I_x(a, b) = 1 - I_{1-x}(b, a).
double BetaContinuedFraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300;
  double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
  d = 1.0 / (std::fabs(d) < kTiny ? kTiny : d);
  double h = d;
  for (int m = 1; m <= 500; ++m) {
    const double m2 = 2.0 * m;
    for (const double coefficient :
         {m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
          -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))}) {
      d = 1.0 + coefficient * d;
      d = 1.0 / (std::fabs(d) < kTiny ? kTiny : d);
      c = 1.0 + coefficient / c;
      if (std::fabs(c) < kTiny) c = kTiny;
      h *= d * c;
    }
    if (std::fabs(d * c - 1.0) < 1e-15) break;
  }
  return h;
}

double RegularizedBeta(double a, double b, double x) {
  if (x <= 0.0) return 0.0;
  if (x >= 1.0) return 1.0;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) +
                                a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1.0) / (a + b + 2.0)) return front * BetaContinuedFraction(a, b, x) / a;
  return 1.0 - front * BetaContinuedFraction(b, a, 1.0 - x) / b;
}

// P(T <= t) for t >= 0.
double StudentTCdf(double t, int df) {
  const double nu = double(df);
  return 1.0 - 0.5 * RegularizedBeta(nu / 2.0, 0.5, nu / (nu + t * t));
}

double MeanOf(const std::vector<double>& values) {
  double sum = 0.0;
  for (const double v : values) sum += v;
  return sum / double(values.size());
}

}  // namespace

double StudentTQuantile(double p, int df) {
  if (!(p > 0.0 && p < 1.0) || df < 1) {
    throw std::invalid_argument("StudentTQuantile: need 0 < p < 1 and df >= 1");
  }
  if (p < 0.5) return -StudentTQuantile(1.0 - p, df);
  double low = 0.0, high = 1.0;
  while (StudentTCdf(high, df) < p) high *= 2.0;
  for (int i = 0; i < 200 && high - low > 1e-12 * high; ++i) {
    const double mid = 0.5 * (low + high);
    (StudentTCdf(mid, df) < p ? low : high) = mid;
  }
  return 0.5 * (low + high);
}

PairedSummary SummarizePaired(const std::vector<double>& differences) {
  PairedSummary s;
  s.n = differences.size();
  if (s.n == 0) return s;
  const double mean = MeanOf(differences);
  s.mean = mean;
  if (s.n < 2) return s;
  double squares = 0.0;
  for (const double v : differences) squares += (v - mean) * (v - mean);
  const double std_dev = std::sqrt(squares / double(s.n - 1));
  s.std_dev = std_dev;
  const double half = StudentTQuantile(0.975, int(s.n) - 1) * std_dev / std::sqrt(double(s.n));
  s.t95 = Interval{mean - half, mean + half};

  // Percentile bootstrap over seeds: resample the n differences with replacement.
  constexpr uint64_t kBootstrapSeed = 0x6c7061747462ull;  // fixed: reports reproduce exactly
  std::vector<double> means(kBootstrapResamples), sample(s.n);
  for (int r = 0; r < kBootstrapResamples; ++r) {
    for (size_t i = 0; i < s.n; ++i) {
      sample[i] = differences[SplitMix64(kBootstrapSeed, uint64_t(r), i) % s.n];
    }
    means[size_t(r)] = MeanOf(sample);
  }
  std::sort(means.begin(), means.end());
  const auto at = [&](double q) {  // the q-quantile, linear between order statistics
    const double position = q * double(means.size() - 1);
    const size_t below = size_t(position);
    const size_t above = std::min(below + 1, means.size() - 1);
    return means[below] + (position - double(below)) * (means[above] - means[below]);
  };
  s.bootstrap95 = Interval{at(0.025), at(0.975)};
  return s;
}

std::string Verdict(const PairedSummary& summary) {
  if (summary.n == 0) return "no paired seeds";
  if (!summary.t95) return "n=1: no interval";
  if (summary.t95->Covers(0.0)) return "within noise";
  return summary.t95->low > 0.0 ? "worse" : "better";
}

}  // namespace lpattn::harness
