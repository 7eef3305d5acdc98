// Thresholded (differential) attention (docs/math.md §3): option validation and parsing, the
// row-level transform, the fp64 reference against central finite differences (through the L2
// normalisation, lambda and beta), clamping, all-zero rows, and the null-model survivor bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/reference.h"
#include "kernels/threshold.h"
#include "tests/kernels/attention_case.h"

namespace lpattn {
namespace {

using Vec = std::vector<double>;

Vec Uniform(size_t n, uint32_t seed, double lo, double hi) {
  return test::Uniform(n, seed, lo, hi);
}

// ---- options ---------------------------------------------------------------------------------

TEST(ThresholdOptions, ParsesAndFormatsBothSeparators) {
  const ThresholdOptions o = ParseThreshold("views=1,p=3:beta=0.5,kappa=2,l2=0");
  EXPECT_EQ(o.views, 1);
  EXPECT_EQ(o.power, 3);
  EXPECT_EQ(o.beta, 0.5);
  EXPECT_EQ(o.kappa, 2.0);
  EXPECT_FALSE(o.l2_normalize);
  EXPECT_EQ(FormatThreshold(o), "views=1:p=3:beta=0.5:kappa=2:l2=0");
  EXPECT_EQ(FormatThreshold(ParseThreshold("")), "views=2:p=2:beta=1:kappa=1:l2=1");
  const ThresholdOptions back = ParseThreshold(FormatThreshold(o));
  EXPECT_EQ(FormatThreshold(back), FormatThreshold(o));
}

TEST(ThresholdOptions, RejectsBadValuesWithTheirName) {
  for (const char* bad : {"views=3", "p=0", "p=4", "p=2.5", "beta=-1", "beta=inf", "kappa=0",
                          "kappa=nan", "l2=2", "lambda=1", "p", "p=two"}) {
    try {
      ParseThreshold(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("thresholded"), std::string::npos) << e.what();
    }
  }
}

// ---- the row transform -----------------------------------------------------------------------

TEST(ThresholdRow, TauFollowsTheSpecFormula) {
  ThresholdOptions o;
  EXPECT_EQ(ThresholdTau(o, 1, 64), 0.0);  // causal row 0: ln(1) = 0
  EXPECT_NEAR(ThresholdTau(o, 1024, 64), std::sqrt(2.0 * std::log(1024.0) / 64.0), 1e-15);
  o.kappa = 4.0;
  EXPECT_EQ(ThresholdTau(o, 3, 64), 0.0);  // N < kappa: max(ln, 0) = 0
  EXPECT_NEAR(ThresholdTau(o, 400, 16), std::sqrt(2.0 * std::log(100.0) / 16.0), 1e-15);
  o.beta = 0.0;
  EXPECT_EQ(ThresholdTau(o, 400, 16), 0.0);
  EXPECT_NEAR(ThresholdTauPerBeta(o, 400, 16), std::sqrt(2.0 * std::log(100.0) / 16.0), 1e-15);
}

TEST(ThresholdRow, KeepsOnlyExceedancesToThePowerP) {
  const Vec s = {-0.5, 0.1, 0.3, 0.3 + 1e-12, 0.9, NAN};
  for (int p = 1; p <= 3; ++p) {
    ThresholdOptions o;
    o.power = p;
    Vec a(s.size());
    EXPECT_EQ(ThresholdRowForward(o, 0.3, s.data(), s.size(), a.data()), 2u) << p;
    EXPECT_EQ(a[0], 0.0);
    EXPECT_EQ(a[1], 0.0);
    EXPECT_EQ(a[2], 0.0);  // at tau exactly: not a survivor
    EXPECT_NEAR(a[4], std::pow(0.6, p), 1e-15);
    EXPECT_TRUE(std::isnan(a[5]));
    const Vec da = {1.0, 1.0, 1.0, 1.0, 2.0, 1.0};
    Vec ds(s.size());
    const double sum = ThresholdRowBackward(o, 0.3, s.data(), s.size(), da.data(), ds.data());
    EXPECT_EQ(ds[0], 0.0);
    EXPECT_EQ(ds[2], 0.0);  // the kink itself takes the zero side, also for p = 1
    EXPECT_NEAR(ds[4], 2.0 * p * std::pow(0.6, p - 1), 1e-14);
    EXPECT_EQ(ds[5], 0.0);
    EXPECT_NEAR(sum, ds[3] + ds[4], 1e-15);
  }
}

TEST(ThresholdRow, LambdaIsClampedAndHasNoSlopeOutside) {
  EXPECT_EQ(ClampLambda(-0.3), 0.0);
  EXPECT_EQ(ClampLambda(0.4), 0.4);
  EXPECT_EQ(ClampLambda(1.7), 1.0);
  EXPECT_EQ(LambdaSlope(-0.3), 0.0);
  EXPECT_EQ(LambdaSlope(0.0), 1.0);
  EXPECT_EQ(LambdaSlope(1.0), 1.0);
  EXPECT_EQ(LambdaSlope(1.7), 0.0);
}

// ---- the attention reference ---------------------------------------------------------------

struct ThresholdCase {
  AttentionShape shape{1, 2, 1, 5, 7, 4};  // GQA group of 2, Tq != Tk
  AttentionOptions options;
  ThresholdOptions threshold;
  ReferenceThresholdInputs in;

  explicit ThresholdCase(const ThresholdOptions& t, bool causal, uint32_t seed = 30)
      : threshold(t) {
    options.causal = causal;
    const size_t nq = size_t(shape.batch * shape.heads * shape.q_len * shape.head_dim);
    const size_t nk = size_t(shape.batch * shape.kv_heads * shape.kv_len * shape.head_dim);
    for (int v = 0; v < 2; ++v) {
      in.q[v] = Uniform(nq, seed + 2 * v, -1.5, 1.5);
      in.k[v] = Uniform(nk, seed + 2 * v + 1, -1.5, 1.5);
    }
    in.v = Uniform(nk, seed + 5, -1.0, 1.0);
    in.lambda_param = {0.3, 0.7};
  }
};

// The smallest |s - tau| over every visible entry of every view: finite differences across a
// kink (p = 1) or a survivor boundary would be meaningless.
double DistanceToThreshold(const ThresholdCase& c) {
  double nearest = 1e9;
  const auto& s = c.shape;
  for (int t = 0; t < c.threshold.views; ++t) {
    ThresholdOptions o = c.threshold;
    for (int64_t h = 0; h < s.heads; ++h) {
      for (int64_t i = 0; i < s.q_len; ++i) {
        const int64_t visible = c.options.causal ? std::min(s.kv_len, i + 1 + s.kv_len - s.q_len)
                                                 : s.kv_len;
        const double tau = ThresholdTau(o, visible, s.head_dim);
        const double* q = &c.in.q[t][size_t((h * s.q_len + i) * s.head_dim)];
        double qn = 0.0;
        for (int64_t d = 0; d < s.head_dim; ++d) qn += q[d] * q[d];
        for (int64_t j = 0; j < visible; ++j) {
          const double* k = &c.in.k[t][size_t(j * s.head_dim)];
          double kn = 0.0, dot = 0.0;
          for (int64_t d = 0; d < s.head_dim; ++d) kn += k[d] * k[d], dot += q[d] * k[d];
          const double score = o.l2_normalize ? dot / std::sqrt(qn * kn) : dot;
          nearest = std::min(nearest, std::abs(score * ThresholdScale(c.options) - tau));
        }
      }
    }
  }
  return nearest;
}

// L = sum(w * O) against central differences over every input, lambda and beta.
void ExpectReferenceMatchesDifferences(const std::string& text, bool causal) {
  ThresholdCase c(ParseThreshold(text), causal);
  ASSERT_GT(DistanceToThreshold(c), 1e-4) << text << ": pick another seed";
  const Vec w = Uniform(c.in.q[0].size(), 40, -1.0, 1.0);
  auto loss = [&] {
    const ReferenceThresholdForwardResult r =
        ReferenceThresholdForward(c.shape, c.options, c.threshold, c.in);
    double sum = 0.0;
    for (size_t i = 0; i < r.o.size(); ++i) sum += w[i] * r.o[i];
    return sum;
  };
  const ReferenceThresholdForwardResult fwd =
      ReferenceThresholdForward(c.shape, c.options, c.threshold, c.in);
  ASSERT_LT(fwd.zero_entries, fwd.visible_entries) << text << ": every weight is zero";
  ASSERT_GT(fwd.zero_entries, 0) << text << ": nothing is thresholded away";
  const ReferenceThresholdGradients g =
      ReferenceThresholdBackward(c.shape, c.options, c.threshold, c.in, w);
  const double step = 1e-6;
  auto difference = [&](double& x) {
    const double saved = x;
    x = saved + step;
    const double up = loss();
    x = saved - step;
    const double down = loss();
    x = saved;
    return (up - down) / (2 * step);
  };
  auto check = [&](Vec& x, const Vec& grad, const std::string& name) {
    for (size_t i = 0; i < x.size(); ++i) {
      const double fd = difference(x[i]);
      EXPECT_NEAR(grad[i], fd, 1e-7 * (1.0 + std::abs(fd))) << text << " " << name << i;
    }
  };
  for (int t = 0; t < c.threshold.views; ++t) {
    check(c.in.q[t], g.dq[t], "dq" + std::to_string(t + 1) + "_");
    check(c.in.k[t], g.dk[t], "dk" + std::to_string(t + 1) + "_");
  }
  check(c.in.v, g.dv, "dv");
  if (c.threshold.views == 2) check(c.in.lambda_param, g.d_lambda, "d_lambda");
  const double fd_beta = difference(c.threshold.beta);
  EXPECT_NEAR(g.d_beta, fd_beta, 1e-7 * (1.0 + std::abs(fd_beta))) << text << " d_beta";
}

TEST(ThresholdReference, MatchesFiniteDifferences) {
  for (bool causal : {false, true}) {
    for (const char* text : {"views=2,p=2,beta=0.4", "views=2,p=3,beta=0.3",
                             "views=1,p=2,beta=0.5", "views=2,p=1,beta=0.4",
                             "views=2,p=2,beta=0.2,l2=0", "views=1,p=1,beta=0.3,kappa=2"}) {
      ExpectReferenceMatchesDifferences(text, causal);
    }
  }
}

TEST(ThresholdReference, LambdaOutsideTheUnitIntervalIsClampedWithZeroGradient) {
  ThresholdCase c(ParseThreshold("views=2,beta=0.3"), false);
  const Vec w = Uniform(c.in.q[0].size(), 41, -1.0, 1.0);
  c.in.lambda_param = {1.0, 0.0};
  const Vec at_ends = ReferenceThresholdForward(c.shape, c.options, c.threshold, c.in).o;
  const ReferenceThresholdGradients inside =
      ReferenceThresholdBackward(c.shape, c.options, c.threshold, c.in, w);
  c.in.lambda_param = {1.8, -0.4};
  EXPECT_EQ(ReferenceThresholdForward(c.shape, c.options, c.threshold, c.in).o, at_ends);
  const ReferenceThresholdGradients outside =
      ReferenceThresholdBackward(c.shape, c.options, c.threshold, c.in, w);
  EXPECT_NE(inside.d_lambda[0], 0.0);
  EXPECT_NE(inside.d_lambda[1], 0.0);
  EXPECT_EQ(outside.d_lambda, Vec({0.0, 0.0}));
  EXPECT_EQ(outside.dv, inside.dv);  // the rest sees the same clamped lambda
}

TEST(ThresholdReference, AllZeroRowsGiveZerosNotNaN) {
  ThresholdCase c(ParseThreshold("views=2,beta=0.3"), true);
  std::fill(c.in.q[0].begin(), c.in.q[0].end(), 0.0);  // every query of view 1 is zero
  std::fill(c.in.k[1].begin(), c.in.k[1].end(), 0.0);  // every key of view 2 is zero
  const ReferenceThresholdForwardResult r =
      ReferenceThresholdForward(c.shape, c.options, c.threshold, c.in);
  for (const double x : r.o) EXPECT_EQ(x, 0.0);
  EXPECT_EQ(r.zero_entries, r.visible_entries);
  const ReferenceThresholdGradients g = ReferenceThresholdBackward(
      c.shape, c.options, c.threshold, c.in, Uniform(c.in.q[0].size(), 42, -1.0, 1.0));
  for (const Vec* grads : {&g.dq[0], &g.dk[0], &g.dq[1], &g.dk[1], &g.dv}) {
    for (const double x : *grads) EXPECT_EQ(x, 0.0);
  }
}

TEST(ThresholdReference, RejectsSinksAndMissingLambdas) {
  ThresholdCase c(ThresholdOptions{}, false);
  c.options.sink = SinkMode::kOffByOne;
  EXPECT_THROW(ReferenceThresholdForward(c.shape, c.options, c.threshold, c.in),
               std::invalid_argument);
  c.options.sink = SinkMode::kNone;
  c.in.lambda_param = {0.5};  // one head's worth for two heads
  EXPECT_THROW(ReferenceThresholdForward(c.shape, c.options, c.threshold, c.in),
               std::invalid_argument);
}

// ---- theory: the null model ----------------------------------------------------------------

// §3: with random unit vectors (variance 1/D per coordinate) the expected number of spurious
// survivors per row is at most kappa at beta = 1, flat in the row length. Seeded Monte Carlo
// over 64 rows per length; the bound is asserted with a 25% allowance for sampling error (the
// measured means sit far below it).
TEST(ThresholdTheory, NullModelSurvivorsStayAtMostKappa) {
  constexpr int D = 64, kRows = 64;
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto unit = [&] {
    Vec x(D);
    double norm = 0.0;
    for (double& c : x) norm += (c = normal(rng)) * c;
    for (double& c : x) c /= std::sqrt(norm);
    return x;
  };
  for (const double kappa : {1.0, 4.0}) {
    ThresholdOptions o;
    o.kappa = kappa;
    for (const int N : {64, 256, 1024, 4096}) {
      std::vector<Vec> keys(N);
      for (Vec& k : keys) k = unit();
      const double tau = ThresholdTau(o, N, D);
      size_t survivors = 0;
      Vec s(N), a(N);
      for (int r = 0; r < kRows; ++r) {
        const Vec q = unit();
        for (int j = 0; j < N; ++j) {
          double dot = 0.0;
          for (int d = 0; d < D; ++d) dot += q[size_t(d)] * keys[size_t(j)][size_t(d)];
          s[size_t(j)] = dot;
        }
        survivors += ThresholdRowForward(o, tau, s.data(), s.size(), a.data());
      }
      const double mean = double(survivors) / kRows;
      EXPECT_LE(mean, 1.25 * kappa) << "N=" << N << " kappa=" << kappa;
      RecordProperty("survivors_N" + std::to_string(N) + "_kappa" + std::to_string(int(kappa)),
                     std::to_string(mean));
    }
  }
}

}  // namespace
}  // namespace lpattn
