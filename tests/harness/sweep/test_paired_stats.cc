// Paired-gap statistics (harness/sweep/paired_stats.h) against published values.
#include "harness/sweep/paired_stats.h"

#include <cmath>
#include <stdexcept>

#include <gtest/gtest.h>

namespace lpattn::harness {
namespace {

TEST(PairedStats, StudentTQuantilesMatchTables) {
  // Two-sided 95% critical values (the 0.975 quantile), from standard tables.
  EXPECT_NEAR(StudentTQuantile(0.975, 1), 12.7062047, 1e-6);
  EXPECT_NEAR(StudentTQuantile(0.975, 2), 4.3026527, 1e-6);
  EXPECT_NEAR(StudentTQuantile(0.975, 4), 2.7764451, 1e-6);
  EXPECT_NEAR(StudentTQuantile(0.975, 9), 2.2621572, 1e-6);
  EXPECT_NEAR(StudentTQuantile(0.975, 30), 2.0422725, 1e-6);
  EXPECT_NEAR(StudentTQuantile(0.975, 100000), 1.959964, 1e-4);  // the normal's
  EXPECT_NEAR(StudentTQuantile(0.995, 3), 5.8409093, 1e-6);
  EXPECT_NEAR(StudentTQuantile(0.025, 2), -4.3026527, 1e-6);  // symmetric
  EXPECT_NEAR(StudentTQuantile(0.5, 7), 0.0, 1e-9);
  EXPECT_THROW(StudentTQuantile(1.0, 3), std::invalid_argument);
  EXPECT_THROW(StudentTQuantile(0.9, 0), std::invalid_argument);
}

TEST(PairedStats, SummaryOfGaps) {
  const PairedSummary s = SummarizePaired({0.1, 0.2, 0.0, 0.3});
  EXPECT_EQ(s.n, 4u);
  EXPECT_NEAR(*s.mean, 0.15, 1e-12);
  const double std_dev = std::sqrt((0.0025 + 0.0025 + 0.0225 + 0.0225) / 3.0);
  EXPECT_NEAR(*s.std_dev, std_dev, 1e-12);
  const double half = 3.1824463 * std_dev / 2.0;  // t(0.975, 3) std / sqrt(4)
  EXPECT_NEAR(s.t95->low, 0.15 - half, 1e-6);
  EXPECT_NEAR(s.t95->high, 0.15 + half, 1e-6);
  // The bootstrap interval is narrower than the t interval for so few seeds, inside the range
  // of the gaps, and reproduced exactly.
  EXPECT_GE(s.bootstrap95->low, 0.0);
  EXPECT_LE(s.bootstrap95->high, 0.3);
  EXPECT_GT(s.bootstrap95->low, s.t95->low);
  EXPECT_LT(s.bootstrap95->high, s.t95->high);
  const PairedSummary again = SummarizePaired({0.1, 0.2, 0.0, 0.3});
  EXPECT_EQ(again.bootstrap95->low, s.bootstrap95->low);
  EXPECT_EQ(again.bootstrap95->high, s.bootstrap95->high);
  EXPECT_EQ(Verdict(s), "within noise");
}

TEST(PairedStats, BootstrapOfManySeedsApproachesTheTInterval) {
  // 40 gaps: the percentile bootstrap and the t interval agree to within a few percent.
  std::vector<double> gaps;
  for (int i = 0; i < 40; ++i) gaps.push_back(0.05 + 0.02 * std::sin(1.7 * i));
  const PairedSummary s = SummarizePaired(gaps);
  const double t_width = s.t95->high - s.t95->low;
  const double b_width = s.bootstrap95->high - s.bootstrap95->low;
  EXPECT_NEAR(b_width / t_width, 1.0, 0.1);
  EXPECT_NEAR(0.5 * (s.bootstrap95->low + s.bootstrap95->high), *s.mean, 0.1 * t_width);
  EXPECT_EQ(Verdict(s), "worse");
}

TEST(PairedStats, VerdictsWithoutAnInterval) {
  EXPECT_EQ(Verdict(SummarizePaired({})), "no paired seeds");
  EXPECT_EQ(Verdict(SummarizePaired({0.2})), "n=1: no interval");
  EXPECT_FALSE(SummarizePaired({0.2}).bootstrap95.has_value());
  EXPECT_EQ(Verdict(SummarizePaired({-0.2, -0.21, -0.19})), "better");
  // Identical gaps: zero width, an interval that excludes 0 unless the gap is 0.
  EXPECT_EQ(Verdict(SummarizePaired({0.0, 0.0})), "within noise");
}

}  // namespace
}  // namespace lpattn::harness
