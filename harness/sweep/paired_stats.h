// Statistics of paired gaps (docs/harness.md §3.5): the mean and sample standard deviation of
// per-seed gaps, a 95% paired t interval, a percentile bootstrap interval over seeds, and the
// verdict the report prints from them.
#ifndef LPATTN_HARNESS_SWEEP_PAIRED_STATS_H_
#define LPATTN_HARNESS_SWEEP_PAIRED_STATS_H_

#include <optional>
#include <string>
#include <vector>

namespace lpattn::harness {

// The p-quantile (0 < p < 1) of Student's t distribution with df >= 1 degrees of freedom, to
// about 1e-10 relative error (bisection on the CDF written with the regularized incomplete beta).
double StudentTQuantile(double p, int df);

struct Interval {
  double low = 0.0, high = 0.0;
  bool Covers(double x) const { return low <= x && x <= high; }
};

// The summary of n paired differences (this arm minus the reference, one per seed).
struct PairedSummary {
  size_t n = 0;
  std::optional<double> mean;
  std::optional<double> std_dev;    // sample standard deviation (n - 1); n >= 2
  std::optional<Interval> t95;      // mean ± t(0.975, n - 1) std / sqrt(n); n >= 2
  std::optional<Interval> bootstrap95;  // 2.5th and 97.5th percentiles of resampled means; n >= 2
};

// Fixed resampling (10000 resamples, a fixed seed), so a report is reproduced exactly.
inline constexpr int kBootstrapResamples = 10000;
PairedSummary SummarizePaired(const std::vector<double>& differences);

// The report's verdict on a gap (positive = higher loss than the reference): "within noise" when
// the t interval covers 0, "worse" or "better" when it lies above or below 0, and "n=1: no
// interval" / "no paired seeds" when there is no interval.
std::string Verdict(const PairedSummary& summary);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_SWEEP_PAIRED_STATS_H_
