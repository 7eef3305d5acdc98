// K-interval attention (spec/kernels.md §2): option validation and parsing, the row-level
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
#include "tests/attention_case.h"

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

// ---- the SIMD kernel against the reference ---------------------------------------------------

namespace simd {

using test::AttentionCase;
using test::Layout;
using test::OwnedTensor;

struct KIntervalRun {
  OwnedTensor o;
  std::vector<float> m, R, Z, lse_exact;
  std::vector<int32_t> argmax, argmin;
};

KIntervalRun RunKernel(const AttentionCase& c, const KIntervalOptions& kint, Layout layout) {
  const AttentionShape& s = c.shape;
  const size_t rows = size_t(s.batch * s.heads * s.q_len);
  KIntervalRun run{OwnedTensor(s.batch, s.heads, s.q_len, s.head_dim, layout),
                   std::vector<float>(rows), std::vector<float>(rows), std::vector<float>(rows),
                   std::vector<float>(rows), std::vector<int32_t>(rows),
                   std::vector<int32_t>(rows)};
  KIntervalForwardArgs args{c.q.cview(), c.k.cview(), c.v.cview(), run.o.view(),
                            {run.m.data(), run.R.data(), run.Z.data(), run.lse_exact.data(),
                             run.argmax.data(), run.argmin.data()}};
  KIntervalForward(s, c.options, kint, args);
  return run;
}

// Per row with a visible key: m, R and argmax/argmin as the reference has them, and O (error
// over 1 + max |O|) and Z within kRowTolerance. Lerp is continuous in the scores, so every row
// must match. Nearest jumps where float and double round a coordinate lying within rounding
// of a half-node differently, which moves one weight by a factor e^{+-h}: up to `flips` rows
// (1% + 1) may differ there, each still bounded by kFlipTolerance.
constexpr double kRowTolerance = 1e-5;
constexpr double kFlipTolerance = 0.5;

void ExpectMatchesReference(const AttentionShape& shape, bool causal, Layout layout,
                            const std::string& text, const Precision& precision = {}) {
  const KIntervalOptions kint = Options(text);
  AttentionCase c(shape, causal, SinkMode::kNone, layout);
  c.options.precision = precision;
  const ReferenceKIntervalForwardResult ref =
      ReferenceKIntervalForward(shape, c.options, kint, c.DenseInputs());
  double o_scale = 0.0;
  for (double x : ref.o) o_scale = std::max(o_scale, std::abs(x));
  const size_t dim = size_t(shape.head_dim), rows = ref.stats.size();
  // A rounded grid jumps too: a grid value within rounding of a midpoint of its format may
  // round either way in float and in double.
  const bool jumps = kint.rounding == KIntervalRounding::kNearest ||
                     kint.grid != quant::Format::kFp32 || precision.p != quant::Format::kFp32;
  const size_t flips = jumps ? rows / 100 + 1 : 0;
  for (const std::string& target : test::SupportedTargets()) {
    const test::ScopedTarget pin(target);
    ASSERT_TRUE(pin.ok) << target;
    const KIntervalRun run = RunKernel(c, kint, layout);
    const std::vector<double> o = run.o.Dense();
    const std::string where = text + " on " + target + (causal ? " causal" : " full") + " T" +
                              std::to_string(shape.q_len) + "x" + std::to_string(shape.kv_len) +
                              " D" + std::to_string(shape.head_dim);
    size_t differing = 0;
    for (size_t r = 0; r < rows; ++r) {
      double err = 0.0;
      for (size_t x = 0; x < dim; ++x) {
        err = std::max(err, std::abs(o[r * dim + x] - ref.o[r * dim + x]) / (1.0 + o_scale));
      }
      const KIntervalRowStats& st = ref.stats[r];
      if (st.Z == 0.0) {  // no visible key: zeros and an empty row
        EXPECT_EQ(run.Z[r], 0.0f) << where << " row " << r;
        EXPECT_EQ(err, 0.0) << where << " row " << r;
        continue;
      }
      ASSERT_NEAR(run.m[r], st.m, 1e-5 * (1.0 + std::abs(st.m))) << where << " row " << r;
      ASSERT_NEAR(run.R[r], st.R, 1e-5 * (1.0 + st.R)) << where << " row " << r;
      ASSERT_EQ(size_t(run.argmax[r]), st.argmax) << where << " row " << r;
      ASSERT_EQ(size_t(run.argmin[r]), st.argmin) << where << " row " << r;
      const double z_err = std::abs(run.Z[r] - st.Z) / st.Z;
      if (err > kRowTolerance || z_err > kRowTolerance) {
        ++differing;
        EXPECT_LE(err, kFlipTolerance) << where << " row " << r;
      }
    }
    EXPECT_LE(differing, flips) << where;
  }
}

const char* const kLerpOptions[] = {"K=1", "K=2", "K=4", "K=16", "K=64", "K=4,cal=window",
                                    "K=16,cal=window,W=2"};
const char* const kNearestOptions[] = {"K=4,round=nearest,ste=weight",
                                       "K=16,cal=window,W=3,round=nearest,ste=prob",
                                       "K=64,round=nearest,ste=weight"};

TEST(KIntervalKernel, MatchesReferenceOverShapes) {
  for (int64_t t : {1, 2, 7, 64, 65, 257}) {
    for (int64_t dim : {3, 16, 64, 80}) {
      for (bool causal : {false, true}) {
        const AttentionShape shape{1, 2, 1, t, t, dim};
        for (const char* text : kLerpOptions) {
          ExpectMatchesReference(shape, causal, Layout::kBHTD, text);
        }
        for (const char* text : kNearestOptions) {
          ExpectMatchesReference(shape, causal, Layout::kBHTD, text);
        }
      }
    }
  }
}


TEST(KIntervalKernel, MatchesReferenceOnOtherLayoutsAndLengths) {
  for (bool causal : {false, true}) {
    for (const char* text : {"K=4", "K=16,cal=window,W=2", "K=4,round=nearest,ste=weight"}) {
      ExpectMatchesReference({2, 4, 2, 100, 100, 32}, causal, Layout::kBTHD, text);
      ExpectMatchesReference({1, 2, 2, 40, 150, 16}, causal, Layout::kBHTD, text);
      ExpectMatchesReference({1, 2, 1, 150, 40, 24}, causal, Layout::kBHTD, text);
    }
  }
}

// Rows of a [rows x dim] gradient whose error exceeds kRowTolerance (over 1 + max |ref|), and
// the largest error of any row.
struct RowErrors {
  size_t bad = 0;
  double worst = 0.0;
};
RowErrors CompareRows(const std::vector<double>& kernel, const std::vector<double>& ref,
                      size_t dim) {
  double scale = 0.0;
  for (double x : ref) scale = std::max(scale, std::abs(x));
  RowErrors e;
  for (size_t r = 0; r < ref.size() / dim; ++r) {
    double err = 0.0;
    for (size_t c = 0; c < dim; ++c) {
      err = std::max(err, std::abs(kernel[r * dim + c] - ref[r * dim + c]) / (1.0 + scale));
      if (std::isnan(kernel[r * dim + c]) != std::isnan(ref[r * dim + c])) err = INFINITY;
    }
    e.bad += err > kRowTolerance ? 1 : 0;
    e.worst = std::max(e.worst, err);
  }
  return e;
}

// dQ, dK, dV of the kernel (after its own forward) against the reference backward, row by row
// within kRowTolerance. Two places are discontinuous, and float and double may land on either
// side: a score within rounding of an interior node under the exact surrogate (the chord's
// slope jumps there), and the half-nodes of nearest (the weight jumps). Each such entry moves
// one dQ row and one dK row (and, for nearest, one dV row), so those may differ in up to
// 1% + 2 of their rows, each within kFlipTolerance; everything else must match.
void ExpectBackwardMatchesReference(const AttentionShape& shape, bool causal, Layout layout,
                                    const std::string& text, const Precision& precision = {}) {
  const KIntervalOptions kint = Options(text);
  const bool nearest = kint.rounding == KIntervalRounding::kNearest ||
                       kint.grid != quant::Format::kFp32 || precision.p != quant::Format::kFp32;
  const bool jumps = nearest || kint.surrogate == KIntervalSurrogate::kExact;
  AttentionCase c(shape, causal, SinkMode::kNone, layout);
  c.options.precision = precision;
  const ReferenceGradients ref =
      ReferenceKIntervalBackward(shape, c.options, kint, c.DenseInputs(), c.d_o.Dense());
  const size_t dim = size_t(shape.head_dim);
  for (const std::string& target : test::SupportedTargets()) {
    const test::ScopedTarget pin(target);
    ASSERT_TRUE(pin.ok) << target;
    KIntervalRun run = RunKernel(c, kint, layout);
    OwnedTensor dq(shape.batch, shape.heads, shape.q_len, shape.head_dim, layout);
    OwnedTensor dk(shape.batch, shape.kv_heads, shape.kv_len, shape.head_dim, layout);
    OwnedTensor dv(shape.batch, shape.kv_heads, shape.kv_len, shape.head_dim, layout);
    KIntervalBackwardArgs args{c.q.cview(), c.k.cview(), c.v.cview(), run.o.cview(),
                               c.d_o.cview(),
                               {run.m.data(), run.R.data(), run.Z.data(), run.lse_exact.data(),
                                run.argmax.data(), run.argmin.data()},
                               dq.view(), dk.view(), dv.view()};
    KIntervalBackward(shape, c.options, kint, args);
    const std::string where = text + " on " + target + (causal ? " causal" : " full") + " T" +
                              std::to_string(shape.q_len) + "x" + std::to_string(shape.kv_len) +
                              " D" + std::to_string(shape.head_dim);
    const struct {
      const char* name;
      RowErrors errors;
      size_t rows;
      bool may_jump;
    } grads[] = {{"dq", CompareRows(dq.Dense(), ref.dq, dim), ref.dq.size() / dim, jumps},
                 {"dk", CompareRows(dk.Dense(), ref.dk, dim), ref.dk.size() / dim, jumps},
                 {"dv", CompareRows(dv.Dense(), ref.dv, dim), ref.dv.size() / dim, nearest}};
    // A flipped value of a rounded grid changes the chord of every entry in its two intervals
    // across the row, so more gradient rows move, each by little: up to 10% + 2 of the rows,
    // within 1e-3.
    const bool rounded_grid = kint.grid != quant::Format::kFp32 || precision.p != quant::Format::kFp32;
    for (const auto& g : grads) {
      const size_t allowed = !g.may_jump ? 0 : rounded_grid ? g.rows / 10 + 2 : g.rows / 100 + 2;
      EXPECT_LE(g.errors.bad, allowed) << g.name << " " << where << " worst " << g.errors.worst;
      const double worst = !g.may_jump ? kRowTolerance : rounded_grid ? 1e-3 : kFlipTolerance;
      EXPECT_LE(g.errors.worst, worst) << g.name << " " << where;
    }
  }
}

// Every surrogate and variant, lerp and nearest, short sequences (the whole-head backward)
// and long ones (the query and key passes).
TEST(KIntervalKernel, BackwardMatchesReference) {
  const char* const options[] = {
      "K=4",           "K=16,cal=window,W=3",         "K=4,detach=1",
      "K=1",           "K=4,ste=weight",              "K=4,cal=window,ste=weight,slope=grid",
      "K=4,ste=prob",  "K=16,ste=prob,jac=grid",      "K=4,round=nearest,ste=weight",
      "K=4,cal=window,W=3,round=nearest,ste=prob",    "K=64,ste=weight,detach=1"};
  for (const char* text : options) {
    for (bool causal : {false, true}) {
      ExpectBackwardMatchesReference({1, 2, 1, 33, 33, 16}, causal, Layout::kBHTD, text);
      ExpectBackwardMatchesReference({1, 2, 1, 130, 130, 24}, causal, Layout::kBHTD, text);
    }
  }
  for (bool causal : {false, true}) {
    ExpectBackwardMatchesReference({2, 4, 2, 70, 120, 32}, causal, Layout::kBTHD, "K=4");
    ExpectBackwardMatchesReference({1, 2, 2, 150, 40, 8}, causal, Layout::kBHTD, "K=8,ste=prob");
    ExpectBackwardMatchesReference({1, 1, 1, 1, 1, 3}, causal, Layout::kBHTD, "K=4");
  }
}

// §4: low-precision operands under every calibration, forward and backward; the reference
// quantizes the same operands with the same quantizers.
TEST(KIntervalKernel, MatchesReferenceWithLowPrecisionOperands) {
  for (const char* precision : {"qk=int8,pv=int8", "qk=fp8e4m3,pv=fp8e5m2,gran=token",
                                "qk=bf16,pv=fp16", "qk=bf16,pv=fp16,path=sim",
                                "qk=int8,gran=channel,smooth_k=1,pv=fp8e4m3"}) {
    for (const char* text : {"K=4", "K=16,cal=window,W=3,ste=weight", "K=4,ste=prob"}) {
      for (bool causal : {false, true}) {
        ExpectMatchesReference({1, 2, 1, 65, 65, 32}, causal, Layout::kBTHD, text,
                               ParsePrecision(precision));
        ExpectBackwardMatchesReference({1, 2, 1, 70, 130, 16}, causal, Layout::kBHTD, text,
                                       ParsePrecision(precision));
      }
    }
  }
}

// §2's option: the grid values in a low-precision format, forward and backward, every
// reconstruction; the kernel rounds its float E_k as the reference rounds its double ones.
TEST(KIntervalKernel, MatchesReferenceWithALowPrecisionGrid) {
  for (const char* text : {"K=4,grid=bf16", "K=16,cal=window,W=3,grid=fp8e4m3,ste=weight",
                           "K=8,round=nearest,ste=prob,grid=int8", "K=32,grid=fp16",
                           "K=4,grid=fp8e5m2,detach=1"}) {
    for (bool causal : {false, true}) {
      ExpectMatchesReference({1, 2, 1, 65, 65, 32}, causal, Layout::kBHTD, text);
      ExpectBackwardMatchesReference({1, 2, 1, 70, 130, 16}, causal, Layout::kBTHD, text);
    }
  }
}

// §4 P quantization under K-interval attention: the weights w^ (at most 1) rounded before P V,
// forward and backward (whose g_bar is dO . o of the rounded forward), against the reference;
// with int8 P and a per-tensor int8 V the kernel's P V is the integer product.
TEST(KIntervalKernel, MatchesReferenceWithRoundedWeights) {
  for (const char* precision : {"p=int8", "p=fp8e4m3", "qk=int8,pv=int8,p=bf16",
                                "qk=int8,pv=int8,p=int8,gran=tensor"}) {
    // (Lerp: nearest's own flips at half-nodes move a row's Z, and with it every dV row.)
    for (const char* text : {"K=4", "K=16,cal=window,W=3,ste=weight", "K=4,ste=prob,jac=grid",
                             "K=8,ste=prob"}) {
      for (bool causal : {false, true}) {
        ExpectMatchesReference({1, 2, 1, 65, 65, 32}, causal, Layout::kBTHD, text,
                               ParsePrecision(precision));
        ExpectBackwardMatchesReference({1, 2, 1, 70, 130, 16}, causal, Layout::kBHTD, text,
                                       ParsePrecision(precision));
      }
    }
  }
}

// The same bits for 1 and 3 threads, forward and backward (fixed tiles, one writer per row).
// Rows longer than the workspace's score cache (8192 keys) recompute their scores: in the
// forward's weighting pass, and (prob surrogate, whose dS waits for its row sum) in the
// backward's query side after its terms; the other surrogates take dS and the terms in one sweep.
TEST(KIntervalKernel, MatchesReferenceBeyondTheScoreCache) {
  for (bool causal : {false, true}) {
    for (const char* text : {"K=4", "K=16,cal=window,W=2", "K=4,ste=prob"}) {  // lerp: no flips
      ExpectMatchesReference({1, 1, 1, 5, 8300, 8}, causal, Layout::kBHTD, text);
      ExpectBackwardMatchesReference({1, 1, 1, 5, 8300, 8}, causal, Layout::kBHTD, text);
    }
  }
}

TEST(KIntervalKernel, ResultsDoNotDependOnTheThreadCount) {
  AttentionCase c({2, 4, 2, 150, 150, 32}, true, SinkMode::kNone, Layout::kBHTD);
  const KIntervalOptions kint = Options("K=4");
  std::vector<std::vector<float>> results[2];
  for (int t = 0; t < 2; ++t) {
    c.options.threads = t == 0 ? 1 : 3;
    KIntervalRun run = RunKernel(c, kint, Layout::kBHTD);
    OwnedTensor dq(2, 4, 150, 32, Layout::kBHTD), dk(2, 2, 150, 32, Layout::kBHTD),
        dv(2, 2, 150, 32, Layout::kBHTD);
    KIntervalBackward(c.shape, c.options, kint,
                      {c.q.cview(), c.k.cview(), c.v.cview(), run.o.cview(), c.d_o.cview(),
                       {run.m.data(), run.R.data(), run.Z.data(), run.lse_exact.data(),
                        run.argmax.data(), run.argmin.data()},
                       dq.view(), dk.view(), dv.view()});
    results[t] = {run.o.storage, dq.storage, dk.storage, dv.storage};
  }
  EXPECT_EQ(results[0], results[1]);
}

TEST(KIntervalKernel, RejectsBadCallsBeforeAnyWork) {
  const AttentionCase c({1, 1, 1, 4, 4, 8}, false, SinkMode::kNone, Layout::kBHTD);
  KIntervalOptions bad;
  bad.K = 0;
  EXPECT_THROW(RunKernel(c, bad, Layout::kBHTD), std::invalid_argument);
  AttentionCase with_sink({1, 1, 1, 4, 4, 8}, false, SinkMode::kOffByOne, Layout::kBHTD);
  EXPECT_THROW(RunKernel(with_sink, KIntervalOptions{}, Layout::kBHTD), std::invalid_argument);
  std::vector<float> o(32), stats(4);
  std::vector<int32_t> index(4);
  KIntervalForwardArgs args{c.q.cview(), c.k.cview(), c.v.cview(), {o.data(), ContiguousBHTD(1, 4, 8)},
                            {stats.data(), stats.data(), nullptr, stats.data(), index.data(),
                             index.data()}};
  try {
    KIntervalForward(c.shape, c.options, KIntervalOptions{}, args);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("saved.Z"), std::string::npos) << e.what();
  }
}

}  // namespace simd

}  // namespace
}  // namespace lpattn
