// K-interval attention (docs/math.md §2): option validation and parsing, the row-level
// transform (forward limits, surrogate gradients, the zero row-sum identity) and the fp64
// attention reference against central finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/kinterval.h"
#include "kernels/reference.h"
#include "tests/kernels/attention_case.h"

namespace lpattn {
namespace {

using Vec = std::vector<double>;

Vec RandomScores(size_t n, uint32_t seed, double lo = -3.0, double hi = 3.0) {
  return test::Uniform(n, seed, lo, hi);
}

KIntervalOptions Options(const std::string& text) { return ParseKInterval(text); }

Vec Forward(const KIntervalOptions& o, const Vec& s, KIntervalRowStats* stats = nullptr) {
  Vec p(s.size());
  const KIntervalRowStats st = KIntervalRowForward(o, s.data(), s.size(), p.data());
  if (stats != nullptr) *stats = st;
  return p;
}

Vec Backward(const KIntervalOptions& o, const Vec& s, const Vec& g) {
  Vec p(s.size()), ds(s.size());
  const KIntervalRowStats st = KIntervalRowForward(o, s.data(), s.size(), p.data());
  KIntervalRowBackward(o, s.data(), s.size(), st, g.data(), ds.data());
  return ds;
}

// ---- options ---------------------------------------------------------------------------------

TEST(KIntervalOptions, RejectsInvalidCombinations) {
  for (const char* bad : {"K=0", "K=65", "K=2.5", "cal=window,W=0", "cal=window,W=-1",
                          "round=nearest,ste=exact", "ste=prob,detach=1", "ste=exact,slope=grid",
                          "ste=weight,jac=grid", "cal=median", "round=floor", "ste=none",
                          "detach=2", "Q=3", "K"}) {
    EXPECT_THROW(ParseKInterval(bad), std::invalid_argument) << bad;
  }
  try {
    ParseKInterval("round=nearest,ste=exact");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("nearest"), std::string::npos) << e.what();
  }
}

TEST(KIntervalOptions, ParsesAndFormatsBothSeparators) {
  const KIntervalOptions o = Options("K=16,cal=window,W=6,round=nearest,ste=weight,slope=grid,detach=1");
  EXPECT_EQ(o.K, 16);
  EXPECT_EQ(o.calibration, KIntervalCalibration::kWindow);
  EXPECT_EQ(o.window, 6.0);
  EXPECT_EQ(o.rounding, KIntervalRounding::kNearest);
  EXPECT_EQ(o.surrogate, KIntervalSurrogate::kWeight);
  EXPECT_TRUE(o.weight_slope_from_grid);
  EXPECT_TRUE(o.detach_extrema);
  const std::string text = FormatKInterval(o);
  EXPECT_EQ(text, "K=16:cal=window:W=6:round=nearest:ste=weight:slope=grid:detach=1");
  const KIntervalOptions back = Options(text);
  EXPECT_EQ(FormatKInterval(back), text);
  EXPECT_EQ(FormatKInterval(Options("")), "K=4:cal=minmax:round=lerp:ste=exact");
  EXPECT_EQ(Options(FormatKInterval(Options("cal=window,W=0.1234567890123"))).window,
            0.1234567890123);
}

// ---- forward ---------------------------------------------------------------------------------

// Grid values in a format are the format's values: a score on node k gets weight
// round(exp(u_k)), and coarser formats move the row further from the fp32 grid.
TEST(KIntervalRow, LowPrecisionGridHoldsRoundedValues) {
  const std::vector<double> s = {0.0, -1.0, -2.0, -3.0, -4.0};  // R = 4, K = 4: every node
  std::vector<double> exact(s.size());
  const KIntervalRowStats fp32 = KIntervalRowForward(Options("K=4"), s.data(), s.size(), exact.data());
  for (const char* format : {"bf16", "fp8e4m3", "fp8e5m2", "int8"}) {
    const KIntervalOptions o = Options(std::string("K=4,grid=") + format);
    EXPECT_EQ(FormatKInterval(ParseKInterval(FormatKInterval(o))), FormatKInterval(o));
    std::vector<double> p(s.size());
    const KIntervalRowStats st = KIntervalRowForward(o, s.data(), s.size(), p.data());
    double moved = 0.0;
    for (size_t j = 0; j < s.size(); ++j) {
      const quant::Format f = *quant::ParseFormat(format);
      const float want = quant::RoundToFormat(f, float(std::exp(s[j])), quant::UnitScale(f));
      EXPECT_NEAR(p[j] * st.Z, want, 1e-12) << format << " node " << j;
      moved = std::max(moved, std::abs(p[j] - exact[j]));
    }
    EXPECT_GT(moved, 0.0) << format;
  }
  EXPECT_EQ(fp32.Z, std::exp(0.0) + std::exp(-1.0) + std::exp(-2.0) + std::exp(-3.0) + std::exp(-4.0));
  EXPECT_THROW(ParseKInterval("K=4,grid=int4"), std::invalid_argument);
}

TEST(KIntervalRow, GridEndsAndNormalisation) {
  const Vec s = RandomScores(37, 1);
  for (const char* text : {"K=4", "K=4,round=nearest,ste=weight", "K=1", "K=64"}) {
    KIntervalRowStats st;
    const Vec p = Forward(Options(text), s, &st);
    double sum = 0.0;
    for (double x : p) sum += x;
    EXPECT_NEAR(sum, 1.0, 1e-12) << text;
    EXPECT_EQ(st.m, *std::max_element(s.begin(), s.end()));
    EXPECT_EQ(st.a, *std::min_element(s.begin(), s.end()));
    EXPECT_NEAR(p[st.argmax] * st.Z, 1.0, 1e-12) << text;                   // E_K = 1
    EXPECT_NEAR(p[st.argmin] * st.Z, std::exp(-(st.m - st.a)), 1e-12) << text;  // E_0
    EXPECT_GE(st.Z, 1.0);
  }
}

TEST(KIntervalRow, NearestTakesGridValuesTiesUp) {
  // R = 4, K = 4: h = 1, nodes at u = -4 .. 0. u = -1.5 is a tie: rounds up to the node -1.
  const Vec s = {0.0, -4.0, -1.5, -2.2, -0.4};
  KIntervalRowStats st;
  const Vec p = Forward(Options("K=4,round=nearest,ste=weight"), s, &st);
  const double expected[] = {1.0, std::exp(-4.0), std::exp(-1.0), std::exp(-2.0), 1.0};
  for (size_t j = 0; j < s.size(); ++j) EXPECT_NEAR(p[j] * st.Z, expected[j], 1e-12) << j;
}

TEST(KIntervalRow, WindowGivesZeroBelowTheWindow) {
  const Vec s = {5.0, 4.0, -2.9, -3.5, -10.0, 1.0};
  KIntervalRowStats st;
  const Vec p = Forward(Options("K=4,cal=window,W=8"), s, &st);
  EXPECT_EQ(st.R, 8.0);
  EXPECT_EQ(p[3], 0.0);  // u = -8.5 < -W
  EXPECT_EQ(p[4], 0.0);
  EXPECT_GT(p[2], 0.0);  // u = -7.9: inside
}

TEST(KIntervalRow, DegenerateRowsAreUniform) {
  for (const Vec& s : {Vec{2.5}, Vec{1.0, 1.0, 1.0}}) {
    KIntervalRowStats st;
    const Vec p = Forward(Options("K=4"), s, &st);
    EXPECT_EQ(st.R, 0.0);
    for (double x : p) EXPECT_DOUBLE_EQ(x, 1.0 / double(s.size()));
    const Vec ds = Backward(Options("K=4"), s, RandomScores(s.size(), 3));
    for (double x : ds) EXPECT_TRUE(std::isfinite(x));
  }
}

TEST(KIntervalRow, HugeScoresStayFinite) {
  const Vec s = {1e4, -1e4, 0.0, 5e3, -1e4 + 1.0};
  for (const char* text : {"K=4", "K=4,cal=window", "K=16,round=nearest,ste=prob",
                           "K=4,ste=weight"}) {
    const Vec p = Forward(Options(text), s);
    const Vec ds = Backward(Options(text), s, RandomScores(s.size(), 4));
    for (size_t j = 0; j < s.size(); ++j) {
      EXPECT_TRUE(std::isfinite(p[j])) << text;
      EXPECT_TRUE(std::isfinite(ds[j])) << text;
    }
  }
}

// Lerp draws chords of exp between K + 1 nodes: the error against softmax falls as K grows.
TEST(KIntervalRow, LerpApproachesSoftmaxAsKGrows) {
  const Vec s = RandomScores(64, 5, -4.0, 4.0);
  Vec softmax(s.size());
  const double m = *std::max_element(s.begin(), s.end());
  double z = 0.0;
  for (size_t j = 0; j < s.size(); ++j) z += softmax[j] = std::exp(s[j] - m);
  for (double& x : softmax) x /= z;
  const double R = m - *std::min_element(s.begin(), s.end());
  double previous = 1e9, at16 = 0.0;
  for (int K : {1, 2, 4, 8, 16, 32, 64}) {
    const Vec p = Forward(Options("K=" + std::to_string(K)), s);
    double err = 0.0;
    for (size_t j = 0; j < s.size(); ++j) err = std::max(err, std::abs(p[j] - softmax[j]));
    EXPECT_LT(err, previous) << "K=" << K;
    // A chord of exp over an interval of width h errs by at most h^2 / 8 relative to exp;
    // normalising at most doubles that on p <= 1.
    const double h = R / K;
    EXPECT_LT(err, h * h / 4) << "K=" << K;
    if (K == 16) at16 = err;
    previous = err;
  }
  EXPECT_LT(previous, at16 / 8);  // second order in h: 4x the intervals, ~16x less error
}

// ---- backward --------------------------------------------------------------------------------

// L = sum_j c_j p_j(s): the lerp + exact surrogate is the true derivative away from nodes.
void ExpectExactSurrogateMatchesDifferences(const std::string& text, const Vec& s0) {
  const KIntervalOptions o = Options(text);
  const Vec c = RandomScores(s0.size(), 7, -1.0, 1.0);
  auto loss = [&](const Vec& s) {
    const Vec p = Forward(o, s);
    double sum = 0.0;
    for (size_t j = 0; j < s.size(); ++j) sum += c[j] * p[j];
    return sum;
  };
  const Vec ds = Backward(o, s0, c);  // dL/dp_j = c_j
  const double step = 1e-6;
  for (size_t j = 0; j < s0.size(); ++j) {
    Vec plus = s0, minus = s0;
    plus[j] += step;
    minus[j] -= step;
    const double fd = (loss(plus) - loss(minus)) / (2 * step);
    EXPECT_NEAR(ds[j], fd, 1e-7 * (1.0 + std::abs(fd))) << text << " entry " << j;
  }
}

TEST(KIntervalRow, ExactSurrogateMatchesFiniteDifferences) {
  const Vec s = RandomScores(23, 8);
  for (const char* text : {"K=1", "K=4", "K=16", "K=4,cal=window,W=4", "K=8,cal=window,W=8"}) {
    ExpectExactSurrogateMatchesDifferences(text, s);
  }
  // A window that cuts the row: entries below it have zero weight and zero gradient.
  ExpectExactSurrogateMatchesDifferences("K=4,cal=window,W=2.5", s);
}

double RowSum(const Vec& v) {
  double sum = 0.0;
  for (double x : v) sum += x;
  return sum;
}

TEST(KIntervalRow, ZeroRowSumHoldsWithoutDetachAndFailsWithIt) {
  const Vec s = RandomScores(31, 9), g = RandomScores(31, 10, -1.0, 1.0);
  for (const char* text : {"K=4", "K=4,cal=window", "K=4,ste=weight", "K=4,ste=weight,slope=grid",
                           "K=4,round=nearest,ste=weight", "K=4,ste=prob"}) {
    const Vec ds = Backward(Options(text), s, g);
    EXPECT_NEAR(RowSum(ds), 0.0, 1e-12) << text;
  }
  for (const char* text : {"K=4,detach=1", "K=4,ste=weight,detach=1"}) {
    const Vec ds = Backward(Options(text), s, g);
    EXPECT_GT(std::abs(RowSum(ds)), 1e-3) << text;
  }
}

TEST(KIntervalRow, ProbSurrogateIsSoftmaxJacobian) {
  const Vec s = RandomScores(12, 11), g = RandomScores(12, 12, -1.0, 1.0);
  Vec pi(s.size());
  const double m = *std::max_element(s.begin(), s.end());
  double z = 0.0;
  for (size_t j = 0; j < s.size(); ++j) z += pi[j] = std::exp(s[j] - m);
  double pi_g = 0.0;
  for (size_t j = 0; j < s.size(); ++j) pi_g += (pi[j] /= z) * g[j];
  const Vec ds = Backward(Options("K=4,round=nearest,ste=prob"), s, g);
  for (size_t j = 0; j < s.size(); ++j) EXPECT_NEAR(ds[j], pi[j] * (g[j] - pi_g), 1e-14);
  // jac=grid: the same form at the quantized probabilities.
  const Vec p = Forward(Options("K=4,ste=prob,jac=grid"), s);
  double p_g = 0.0;
  for (size_t j = 0; j < s.size(); ++j) p_g += p[j] * g[j];
  const Vec ds_grid = Backward(Options("K=4,ste=prob,jac=grid"), s, g);
  for (size_t j = 0; j < s.size(); ++j) EXPECT_NEAR(ds_grid[j], p[j] * (g[j] - p_g), 1e-14);
}

// ---- the attention reference ---------------------------------------------------------------

// L = sum(w * O) against central differences over every element of Q, K and V.
void ExpectReferenceMatchesDifferences(const std::string& text, bool causal) {
  const KIntervalOptions kint = Options(text);
  const AttentionShape shape{1, 2, 1, 5, 7, 4};  // GQA group of 2, Tq != Tk
  AttentionOptions options;
  options.causal = causal;
  ReferenceInputs in{RandomScores(1 * 2 * 5 * 4, 20, -1.5, 1.5),
                     RandomScores(1 * 1 * 7 * 4, 21, -1.5, 1.5),
                     RandomScores(1 * 1 * 7 * 4, 22, -1.0, 1.0),
                     {}};
  const Vec w = RandomScores(in.q.size(), 23, -1.0, 1.0);
  auto loss = [&] {
    const Vec o = ReferenceKIntervalForward(shape, options, kint, in).o;
    double sum = 0.0;
    for (size_t i = 0; i < o.size(); ++i) sum += w[i] * o[i];
    return sum;
  };
  const ReferenceGradients g = ReferenceKIntervalBackward(shape, options, kint, in, w);
  const double step = 1e-6;
  auto check = [&](Vec& x, const Vec& grad, const char* name) {
    for (size_t i = 0; i < x.size(); ++i) {
      const double saved = x[i];
      x[i] = saved + step;
      const double up = loss();
      x[i] = saved - step;
      const double down = loss();
      x[i] = saved;
      const double fd = (up - down) / (2 * step);
      EXPECT_NEAR(grad[i], fd, 1e-7 * (1.0 + std::abs(fd))) << text << " " << name << i;
    }
  };
  check(in.q, g.dq, "dq");
  check(in.k, g.dk, "dk");
  check(in.v, g.dv, "dv");
}

TEST(KIntervalReference, ExactSurrogateMatchesFiniteDifferences) {
  for (bool causal : {false, true}) {
    ExpectReferenceMatchesDifferences("K=4", causal);
    ExpectReferenceMatchesDifferences("K=2,cal=window,W=3", causal);
  }
}

TEST(KIntervalReference, RejectsSinks) {
  const AttentionShape shape{1, 1, 1, 2, 2, 2};
  AttentionOptions options;
  options.sink = SinkMode::kOffByOne;
  const ReferenceInputs in{Vec(4, 0.1), Vec(4, 0.2), Vec(4, 0.3), {}};
  EXPECT_THROW(ReferenceKIntervalForward(shape, options, KIntervalOptions{}, in),
               std::invalid_argument);
}

}  // namespace
}  // namespace lpattn
