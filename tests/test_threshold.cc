// Thresholded (differential) attention (spec/kernels.md §3): option validation and parsing, the
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
#include "tests/attention_case.h"

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

// ---- the SIMD kernel against the reference ---------------------------------------------------

namespace simd {

using test::AttentionCase;
using test::Layout;
using test::OwnedTensor;

// Two views' inputs: view 1 and V from one case in `layout`, view 2's Q and K from another in
// the other layout (the views' strides are independent).
struct TwoViewCase {
  AttentionCase first, second;
  std::vector<float> lambda_param;
  TwoViewCase(const AttentionShape& shape, bool causal, Layout layout, uint32_t seed = 1)
      : first(shape, causal, SinkMode::kNone, layout, seed),
        second(shape, causal, SinkMode::kNone,
               layout == Layout::kBHTD ? Layout::kBTHD : Layout::kBHTD, seed + 100) {
    for (int64_t h = 0; h < shape.heads; ++h) lambda_param.push_back(0.2f + 0.5f * float(h % 2));
  }
  const AttentionShape& shape() const { return first.shape; }
  const AttentionOptions& options() const { return first.options; }
  ReferenceThresholdInputs Dense() const {
    ReferenceThresholdInputs in;
    in.q[0] = first.q.Dense();
    in.k[0] = first.k.Dense();
    in.q[1] = second.q.Dense();
    in.k[1] = second.k.Dense();
    in.v = first.v.Dense();
    in.lambda_param.assign(lambda_param.begin(), lambda_param.end());
    return in;
  }
};

struct ThresholdRun {
  OwnedTensor o;
  std::vector<int32_t> survivors;
};

ThresholdRun RunForward(const TwoViewCase& c, const ThresholdOptions& threshold, Layout layout,
                        int threads = 0) {
  const AttentionShape& s = c.shape();
  ThresholdRun run{OwnedTensor(s.batch, s.heads, s.q_len, s.head_dim, layout),
                   std::vector<int32_t>(size_t(threshold.views * s.batch * s.heads * s.q_len), -1)};
  ThresholdForwardArgs args;
  args.q[0] = c.first.q.cview();
  args.k[0] = c.first.k.cview();
  args.q[1] = c.second.q.cview();
  args.k[1] = c.second.k.cview();
  args.v = c.first.v.cview();
  args.lambda_param = c.lambda_param.data();
  args.o = run.o.view();
  args.survivors = run.survivors.data();
  AttentionOptions options = c.options();
  options.threads = threads;
  ThresholdForward(s, options, threshold, args);
  return run;
}

// O within 1e-5 of the reference (over 1 + max |O|) on every target; survivors per row equal
// but for entries whose score lies within float rounding of tau (at most 1% of rows + 1 differ,
// by at most 2 each).
void ExpectForwardMatchesReference(const AttentionShape& shape, bool causal, Layout layout,
                                   const std::string& text, const Precision& precision = {}) {
  const ThresholdOptions threshold = ParseThreshold(text);
  TwoViewCase c(shape, causal, layout);
  c.first.options.precision = precision;
  const ReferenceThresholdForwardResult ref =
      ReferenceThresholdForward(shape, c.options(), threshold, c.Dense());
  for (const std::string& target : test::SupportedTargets()) {
    const test::ScopedTarget pin(target);
    ASSERT_TRUE(pin.ok) << target;
    const ThresholdRun run = RunForward(c, threshold, layout);
    const std::string where = text + " on " + target + (causal ? " causal" : " full") + " T" +
                              std::to_string(shape.q_len) + "x" + std::to_string(shape.kv_len) +
                              " D" + std::to_string(shape.head_dim);
    EXPECT_LE(test::ScaledMaxError(run.o.Dense(), ref.o), 1e-5) << where;
    size_t differing = 0;
    for (size_t r = 0; r < ref.survivors.size(); ++r) {
      const int64_t diff = std::abs(int64_t(run.survivors[r]) - ref.survivors[r]);
      EXPECT_LE(diff, 2) << where << " row " << r;
      differing += diff != 0 ? 1 : 0;
    }
    EXPECT_LE(differing, ref.survivors.size() / 100 + 1) << where;
  }
}

// beta = 0 keeps every positive cosine (dense tiles), beta = 1 is the null-model threshold
// (nearly every tile skipped or sparse), beta = 0.5 mixes the two.
const char* const kForwardOptions[] = {"views=2,p=2,beta=0", "views=2,p=2,beta=0.5",
                                       "views=2,p=2", "views=1,p=1,beta=0.5",
                                       "views=2,p=3,beta=0.3", "views=1,p=2,beta=0.2,l2=0"};

TEST(ThresholdKernel, ForwardMatchesReferenceOverShapes) {
  for (int64_t t : {1, 2, 7, 64, 65, 257}) {
    for (int64_t dim : {3, 16, 64, 80}) {
      for (bool causal : {false, true}) {
        for (const char* text : kForwardOptions) {
          ExpectForwardMatchesReference({1, 2, 1, t, t, dim}, causal, Layout::kBHTD, text);
        }
      }
    }
  }
}

TEST(ThresholdKernel, ForwardMatchesReferenceOnOtherLayoutsAndLengths) {
  for (bool causal : {false, true}) {
    for (const char* text : {"views=2,p=2,beta=0.3", "views=1,p=1,beta=0.6"}) {
      ExpectForwardMatchesReference({2, 4, 2, 100, 100, 32}, causal, Layout::kBTHD, text);
      ExpectForwardMatchesReference({1, 2, 2, 40, 150, 16}, causal, Layout::kBHTD, text);
      ExpectForwardMatchesReference({1, 2, 1, 150, 40, 24}, causal, Layout::kBHTD, text);
    }
  }
}

TEST(ThresholdKernel, ForwardDoesNotDependOnTheThreadCount) {
  const TwoViewCase c({2, 4, 2, 300, 300, 64}, true, Layout::kBHTD);
  const ThresholdOptions threshold = ParseThreshold("views=2,beta=0.4");
  const ThresholdRun one = RunForward(c, threshold, Layout::kBHTD, 1);
  const ThresholdRun two = RunForward(c, threshold, Layout::kBHTD, 2);
  EXPECT_EQ(one.o.storage, two.o.storage);
  EXPECT_EQ(one.survivors, two.survivors);
}

TEST(ThresholdKernel, AllZeroRowsGiveZerosNotNaN) {
  TwoViewCase c({1, 2, 1, 70, 70, 16}, true, Layout::kBHTD);
  std::fill(c.first.q.storage.begin(), c.first.q.storage.end(), 0.0f);
  std::fill(c.second.k.storage.begin(), c.second.k.storage.end(), 0.0f);
  const ThresholdRun run = RunForward(c, ParseThreshold("views=2,beta=0.2"), Layout::kBHTD);
  for (const float x : run.o.storage) EXPECT_EQ(x, 0.0f);
  for (const int32_t n : run.survivors) EXPECT_EQ(n, 0);
}

struct ThresholdGradRun {
  OwnedTensor dq[2], dk[2], dv;
  std::vector<float> d_lambda;
  float d_beta = 0.0f;
};

ThresholdGradRun RunBackward(const TwoViewCase& c, const ThresholdOptions& threshold,
                             Layout layout, int threads = 0) {
  const AttentionShape& s = c.shape();
  ThresholdGradRun run;
  ThresholdBackwardArgs args;
  for (int t = 0; t < 2; ++t) {
    run.dq[t] = OwnedTensor(s.batch, s.heads, s.q_len, s.head_dim, layout);
    run.dk[t] = OwnedTensor(s.batch, s.kv_heads, s.kv_len, s.head_dim, layout);
    args.dq[t] = run.dq[t].view();
    args.dk[t] = run.dk[t].view();
  }
  run.dv = OwnedTensor(s.batch, s.kv_heads, s.kv_len, s.head_dim, layout);
  run.d_lambda.assign(size_t(s.heads), -1.0f);
  args.q[0] = c.first.q.cview();
  args.k[0] = c.first.k.cview();
  args.q[1] = c.second.q.cview();
  args.k[1] = c.second.k.cview();
  args.v = c.first.v.cview();
  args.d_o = c.first.d_o.cview();
  args.lambda_param = c.lambda_param.data();
  args.dv = run.dv.view();
  args.d_lambda = run.d_lambda.data();
  args.d_beta = &run.d_beta;
  AttentionOptions options = c.options();
  options.threads = threads;
  ThresholdBackward(s, options, threshold, args);
  return run;
}

// Rows of a [rows x dim] gradient whose error exceeds 2e-5 (over 1 + max |ref|).
size_t BadRows(const std::vector<double>& kernel, const std::vector<double>& ref, size_t dim) {
  double scale = 0.0;
  for (double x : ref) scale = std::max(scale, std::abs(x));
  size_t bad = 0;
  for (size_t r = 0; r < ref.size() / dim; ++r) {
    double err = 0.0;
    for (size_t c = 0; c < dim; ++c) {
      err = std::max(err, std::abs(kernel[r * dim + c] - ref[r * dim + c]) / (1.0 + scale));
      if (std::isnan(kernel[r * dim + c]) != std::isnan(ref[r * dim + c])) err = INFINITY;
    }
    bad += err > 2e-5 ? 1 : 0;
  }
  return bad;
}

// Every gradient within 2e-5 of the reference on every target. p = 1's slope jumps at tau, so
// there a score within float rounding of tau may take the other side: up to 1% of rows + 1 of
// each gradient may differ (and d beta gets a looser bound).
void ExpectBackwardMatchesReference(const AttentionShape& shape, bool causal, Layout layout,
                                    const std::string& text, const Precision& precision = {}) {
  const ThresholdOptions threshold = ParseThreshold(text);
  TwoViewCase c(shape, causal, layout);
  c.first.options.precision = precision;
  const ReferenceThresholdGradients ref =
      ReferenceThresholdBackward(shape, c.options(), threshold, c.Dense(), c.first.d_o.Dense());
  const size_t dim = size_t(shape.head_dim);
  for (const std::string& target : test::SupportedTargets()) {
    const test::ScopedTarget pin(target);
    ASSERT_TRUE(pin.ok) << target;
    const ThresholdGradRun run = RunBackward(c, threshold, layout);
    const std::string where = text + " on " + target + (causal ? " causal" : " full") + " T" +
                              std::to_string(shape.q_len) + "x" + std::to_string(shape.kv_len) +
                              " D" + std::to_string(shape.head_dim);
    const size_t q_rows = ref.dv.size() / dim, flips = threshold.power == 1 ? q_rows / 100 + 1 : 0;
    for (int t = 0; t < threshold.views; ++t) {
      EXPECT_LE(BadRows(run.dq[t].Dense(), ref.dq[t], dim), flips) << where << " dq" << t;
      EXPECT_LE(BadRows(run.dk[t].Dense(), ref.dk[t], dim), flips) << where << " dk" << t;
    }
    EXPECT_LE(BadRows(run.dv.Dense(), ref.dv, dim), flips) << where << " dv";
    const double beta_tolerance = threshold.power == 1 ? 1e-2 : 1e-4;
    EXPECT_NEAR(run.d_beta, ref.d_beta, beta_tolerance * (1.0 + std::abs(ref.d_beta))) << where;
    if (threshold.views == 2) {
      for (size_t h = 0; h < ref.d_lambda.size(); ++h) {
        EXPECT_NEAR(run.d_lambda[h], ref.d_lambda[h], 1e-4 * (1.0 + std::abs(ref.d_lambda[h])))
            << where << " head " << h;
      }
    }
  }
}

// §4: low-precision operands, one and two views, forward and backward; the reference quantizes
// the same operands (both views' Q and K) with the same quantizers.
TEST(ThresholdKernel, MatchesReferenceWithLowPrecisionOperands) {
  for (const char* precision : {"qk=int8,pv=int8", "qk=fp8e4m3,pv=fp8e5m2,gran=token",
                                "qk=bf16,pv=fp16", "qk=int8,gran=channel,smooth_k=1,pv=fp8e4m3"}) {
    for (const char* text : {"views=2,p=2,beta=0.3", "views=1,p=3,beta=0.2,l2=0"}) {
      for (bool causal : {false, true}) {
        ExpectForwardMatchesReference({1, 2, 1, 65, 65, 32}, causal, Layout::kBTHD, text,
                                      ParsePrecision(precision));
        ExpectBackwardMatchesReference({1, 2, 1, 70, 130, 16}, causal, Layout::kBHTD, text,
                                       ParsePrecision(precision));
      }
    }
  }
}

// §4 P quantization: the combined weights a1 - lambda a2 (signed, at most 1 in magnitude with
// cosine scores) rounded before P V; the backward uses them unrounded.
TEST(ThresholdKernel, MatchesReferenceWithRoundedWeights) {
  for (const char* precision : {"p=int8", "p=fp8e4m3", "qk=int8,pv=int8,p=bf16"}) {
    for (const char* text : {"views=2,p=2,beta=0", "views=2,p=2,beta=0.3", "views=1,p=1,beta=0.2"}) {
      for (bool causal : {false, true}) {
        ExpectForwardMatchesReference({1, 2, 1, 65, 65, 32}, causal, Layout::kBTHD, text,
                                      ParsePrecision(precision));
        ExpectBackwardMatchesReference({1, 2, 1, 70, 130, 16}, causal, Layout::kBHTD, text,
                                       ParsePrecision(precision));
      }
    }
  }
}

TEST(ThresholdKernel, BackwardMatchesReferenceOverShapes) {
  for (int64_t t : {1, 7, 64, 130}) {
    for (int64_t dim : {3, 16, 64}) {
      for (bool causal : {false, true}) {
        for (const char* text : kForwardOptions) {
          ExpectBackwardMatchesReference({1, 2, 1, t, t, dim}, causal, Layout::kBHTD, text);
        }
      }
    }
  }
}

TEST(ThresholdKernel, BackwardMatchesReferenceOnOtherLayoutsAndLengths) {
  for (bool causal : {false, true}) {
    for (const char* text : {"views=2,p=2,beta=0.3", "views=1,p=3,beta=0.6"}) {
      ExpectBackwardMatchesReference({2, 4, 2, 100, 100, 32}, causal, Layout::kBTHD, text);
      ExpectBackwardMatchesReference({1, 2, 2, 40, 150, 16}, causal, Layout::kBHTD, text);
      ExpectBackwardMatchesReference({1, 2, 1, 150, 40, 24}, causal, Layout::kBHTD, text);
    }
  }
}

TEST(ThresholdKernel, BackwardDoesNotDependOnTheThreadCount) {
  const TwoViewCase c({2, 4, 2, 300, 300, 64}, true, Layout::kBHTD);
  const ThresholdOptions threshold = ParseThreshold("views=2,beta=0.4");
  const ThresholdGradRun one = RunBackward(c, threshold, Layout::kBHTD, 1);
  const ThresholdGradRun two = RunBackward(c, threshold, Layout::kBHTD, 2);
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(one.dq[t].storage, two.dq[t].storage);
    EXPECT_EQ(one.dk[t].storage, two.dk[t].storage);
  }
  EXPECT_EQ(one.dv.storage, two.dv.storage);
  EXPECT_EQ(one.d_lambda, two.d_lambda);
  EXPECT_EQ(one.d_beta, two.d_beta);
}

TEST(ThresholdKernel, LambdaOutsideTheUnitIntervalGetsZeroGradient) {
  TwoViewCase c({1, 2, 1, 50, 50, 16}, true, Layout::kBHTD);
  c.lambda_param = {1.5f, -0.2f};
  const ThresholdGradRun run = RunBackward(c, ParseThreshold("views=2,beta=0.2"), Layout::kBHTD);
  EXPECT_EQ(run.d_lambda, std::vector<float>({0.0f, 0.0f}));
  c.lambda_param = {1.0f, 0.0f};  // the ends are inside
  const ThresholdGradRun ends = RunBackward(c, ParseThreshold("views=2,beta=0.2"), Layout::kBHTD);
  EXPECT_NE(ends.d_lambda[0], 0.0f);
  EXPECT_NE(ends.d_lambda[1], 0.0f);
}

TEST(ThresholdKernel, RejectsBadCallsBeforeAnyWork) {
  const TwoViewCase c({1, 2, 1, 8, 8, 4}, false, Layout::kBHTD);
  OwnedTensor o(1, 2, 8, 4, Layout::kBHTD);
  std::fill(o.storage.begin(), o.storage.end(), 7.0f);
  ThresholdForwardArgs args;
  args.q[0] = c.first.q.cview();
  args.k[0] = c.first.k.cview();
  args.q[1] = c.second.q.cview();
  args.k[1] = c.second.k.cview();
  args.v = c.first.v.cview();
  args.lambda_param = c.lambda_param.data();
  args.o = o.view();
  auto expect_rejected = [&](const AttentionOptions& options, const ThresholdOptions& threshold,
                             const ThresholdForwardArgs& a, const char* fragment) {
    try {
      ThresholdForward(c.shape(), options, threshold, a);
      ADD_FAILURE() << "accepted a call that should fail with '" << fragment << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
    for (const float x : o.storage) ASSERT_EQ(x, 7.0f);  // nothing written
  };
  const ThresholdOptions two_views;
  AttentionOptions sink;
  sink.sink = SinkMode::kOffByOne;
  expect_rejected(sink, two_views, args, "sinks");
  ThresholdForwardArgs no_lambda = args;
  no_lambda.lambda_param = nullptr;
  expect_rejected({}, two_views, no_lambda, "lambda_param is null");
  std::vector<float> nan_lambda = {0.5f, NAN};
  ThresholdForwardArgs bad_lambda = args;
  bad_lambda.lambda_param = nan_lambda.data();
  expect_rejected({}, two_views, bad_lambda, "lambda_param[1]");
  ThresholdForwardArgs no_k2 = args;
  no_k2.k[1] = {};
  expect_rejected({}, two_views, no_k2, "k[1].data is null");
  ThresholdOptions bad_power;
  bad_power.power = 5;
  expect_rejected({}, bad_power, args, "p must be");
  // One view reads neither view 2 nor lambda.
  ThresholdOptions one_view;
  one_view.views = 1;
  EXPECT_NO_THROW(ThresholdForward(c.shape(), {}, one_view, no_lambda));
}

}  // namespace simd

}  // namespace
}  // namespace lpattn
