// Value gates (docs/math.md §1.2): the fp64 reference against central finite differences,
// the SIMD pass against the reference on every target, thread independence, zero values and
// bad calls.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/reference.h"
#include "kernels/value_gate.h"
#include "tests/kernels/attention_case.h"

namespace lpattn {
namespace {

using Vec = std::vector<double>;
using test::Layout;
using test::OwnedTensor;

Vec Uniform(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  return test::Uniform(n, seed, lo, hi);
}

ReferenceValueGateParams Params(ValueGateKind kind, int64_t heads, int64_t dim) {
  ReferenceValueGateParams p;
  p.kind = kind;
  p.alpha = Uniform(size_t(heads), 1, -1.0, 1.0);
  p.beta = Uniform(size_t(heads), 2, -0.5, 0.5);
  p.w = Uniform(size_t(heads * dim), 3, -0.5, 0.5);
  p.b = Uniform(size_t(heads), 4, -0.5, 0.5);
  return p;
}

// V-only shapes: batch, kv_heads, kv_len, head_dim (heads and q_len unused).
AttentionShape ValueShape(int64_t batch, int64_t kv_heads, int64_t tokens, int64_t dim) {
  return {batch, kv_heads, kv_heads, tokens, tokens, dim};
}

TEST(ValueGateReference, MatchesFiniteDifferences) {
  const AttentionShape shape = ValueShape(2, 2, 5, 3);
  for (const ValueGateKind kind : {ValueGateKind::kNorm, ValueGateKind::kProjection}) {
    ReferenceValueGateParams params = Params(kind, 2, 3);
    Vec v = Uniform(2 * 2 * 5 * 3, 5);
    const Vec w = Uniform(v.size(), 6);
    auto loss = [&] {
      const Vec out = ReferenceValueGateForward(shape, params, v);
      double sum = 0.0;
      for (size_t i = 0; i < out.size(); ++i) sum += w[i] * out[i];
      return sum;
    };
    const ReferenceValueGateGrads g = ReferenceValueGateBackward(shape, params, v, w);
    auto check = [&](Vec& x, const Vec& grad, const char* name) {
      ASSERT_EQ(grad.size(), x.size()) << name;
      for (size_t i = 0; i < x.size(); ++i) {
        const double saved = x[i];
        x[i] = saved + 1e-6;
        const double up = loss();
        x[i] = saved - 1e-6;
        const double down = loss();
        x[i] = saved;
        const double fd = (up - down) / 2e-6;
        EXPECT_NEAR(grad[i], fd, 1e-8 * (1.0 + std::abs(fd))) << name << i;
      }
    };
    check(v, g.dv, "dv");
    if (kind == ValueGateKind::kNorm) {
      check(params.alpha, g.alpha, "alpha");
      check(params.beta, g.beta, "beta");
    } else {
      check(params.w, g.w, "w");
      check(params.b, g.b, "b");
    }
  }
}

// The kernel's parameters as floats, and the reference's (the same values in double).
struct GateCase {
  AttentionShape shape;
  ValueGateKind kind;
  std::vector<float> alpha, beta, w, b;
  OwnedTensor v, d_gated;
  GateCase(const AttentionShape& s, ValueGateKind k, Layout layout)
      : shape(s), kind(k), v(s.batch, s.kv_heads, s.kv_len, s.head_dim, layout),
        d_gated(s.batch, s.kv_heads, s.kv_len, s.head_dim, layout) {
    const ReferenceValueGateParams p = Params(k, s.kv_heads, s.head_dim);
    alpha.assign(p.alpha.begin(), p.alpha.end());
    beta.assign(p.beta.begin(), p.beta.end());
    w.assign(p.w.begin(), p.w.end());
    b.assign(p.b.begin(), p.b.end());
    std::mt19937 rng(9);
    v.FillNormal(rng);
    d_gated.FillNormal(rng);
  }
  ValueGateParams Kernel() const { return {kind, alpha.data(), beta.data(), w.data(), b.data()}; }
  ReferenceValueGateParams Reference() const {
    ReferenceValueGateParams p;
    p.kind = kind;
    p.alpha.assign(alpha.begin(), alpha.end());
    p.beta.assign(beta.begin(), beta.end());
    p.w.assign(w.begin(), w.end());
    p.b.assign(b.begin(), b.end());
    return p;
  }
};

struct GateRun {
  OwnedTensor gated, dv;
  std::vector<float> gates, alpha, beta, w, b;
};

GateRun RunGate(const GateCase& c, Layout layout, int threads = 0) {
  const AttentionShape& s = c.shape;
  GateRun run{OwnedTensor(s.batch, s.kv_heads, s.kv_len, s.head_dim, layout),
              OwnedTensor(s.batch, s.kv_heads, s.kv_len, s.head_dim, layout),
              std::vector<float>(size_t(s.batch * s.kv_heads * s.kv_len)),
              std::vector<float>(size_t(s.kv_heads)), std::vector<float>(size_t(s.kv_heads)),
              std::vector<float>(size_t(s.kv_heads * s.head_dim)),
              std::vector<float>(size_t(s.kv_heads))};
  ValueGateForward(s, c.Kernel(), c.v.cview(), run.gated.view(), run.gates.data(), threads);
  ValueGateBackward(s, c.Kernel(), c.v.cview(), c.d_gated.cview(), run.dv.view(),
                    {run.alpha.data(), run.beta.data(), run.w.data(), run.b.data()}, threads);
  return run;
}

double MaxError(const std::vector<float>& kernel, const Vec& ref) {
  return test::ScaledMaxError(test::ToDouble(kernel), ref);
}

TEST(ValueGateKernel, MatchesReferenceOnEveryTarget) {
  for (const ValueGateKind kind : {ValueGateKind::kNorm, ValueGateKind::kProjection}) {
    for (const int64_t dim : {3, 16, 64, 80}) {
      for (const Layout layout : {Layout::kBHTD, Layout::kBTHD}) {
        const GateCase c(ValueShape(2, 3, 300, dim), kind, layout);
        Vec gates;
        const Vec gated = ReferenceValueGateForward(c.shape, c.Reference(), c.v.Dense(), &gates);
        const ReferenceValueGateGrads ref =
            ReferenceValueGateBackward(c.shape, c.Reference(), c.v.Dense(), c.d_gated.Dense());
        for (const std::string& target : test::SupportedTargets()) {
          const test::ScopedTarget pin(target);
          ASSERT_TRUE(pin.ok);
          const GateRun run = RunGate(c, layout);
          const std::string where = target + " D" + std::to_string(dim) +
                                    (kind == ValueGateKind::kNorm ? " norm" : " projection");
          EXPECT_LE(test::ScaledMaxError(run.gated.Dense(), gated), 1e-6) << where;
          EXPECT_LE(MaxError(run.gates, gates), 1e-6) << where;
          EXPECT_LE(test::ScaledMaxError(run.dv.Dense(), ref.dv), 1e-5) << where;
          // Parameter gradients sum 600 per-value float terms (in double): 1e-4.
          if (kind == ValueGateKind::kNorm) {
            EXPECT_LE(MaxError(run.alpha, ref.alpha), 1e-4) << where;
            EXPECT_LE(MaxError(run.beta, ref.beta), 1e-4) << where;
          } else {
            EXPECT_LE(MaxError(run.w, ref.w), 1e-4) << where;
            EXPECT_LE(MaxError(run.b, ref.b), 1e-4) << where;
          }
        }
      }
    }
  }
}

TEST(ValueGateKernel, ResultsDoNotDependOnTheThreadCount) {
  const GateCase c(ValueShape(2, 2, 1000, 64), ValueGateKind::kProjection, Layout::kBHTD);
  const GateRun one = RunGate(c, Layout::kBHTD, 1), two = RunGate(c, Layout::kBHTD, 2);
  EXPECT_EQ(one.gated.storage, two.gated.storage);
  EXPECT_EQ(one.dv.storage, two.dv.storage);
  EXPECT_EQ(one.w, two.w);
  EXPECT_EQ(one.b, two.b);
}

TEST(ValueGateKernel, ZeroValuesGiveFiniteGradients) {
  GateCase c(ValueShape(1, 1, 4, 8), ValueGateKind::kNorm, Layout::kBHTD);
  std::fill(c.v.storage.begin(), c.v.storage.end(), 0.0f);
  const GateRun run = RunGate(c, Layout::kBHTD);
  const float g = 1.0f / (1.0f + std::exp(-c.beta[0]));  // ||v|| = 0: z = beta
  for (const float x : run.gates) EXPECT_FLOAT_EQ(x, g);
  for (const float x : run.gated.storage) EXPECT_EQ(x, 0.0f);
  for (size_t i = 0; i < run.dv.storage.size(); ++i) {
    EXPECT_FLOAT_EQ(run.dv.storage[i], g * c.d_gated.storage[i]);  // no dz/dv term at v = 0
  }
  EXPECT_EQ(run.alpha[0], 0.0f);
  EXPECT_EQ(run.beta[0], 0.0f);  // dv~ . v = 0
}

TEST(ValueGateKernel, RejectsBadCallsBeforeAnyWork) {
  const GateCase c(ValueShape(1, 2, 4, 8), ValueGateKind::kNorm, Layout::kBHTD);
  OwnedTensor out(1, 2, 4, 8, Layout::kBHTD);
  std::fill(out.storage.begin(), out.storage.end(), 7.0f);
  auto expect_rejected = [&](const ValueGateParams& params, const char* fragment) {
    try {
      ValueGateForward(c.shape, params, c.v.cview(), out.view());
      ADD_FAILURE() << "accepted: " << fragment;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
    for (const float x : out.storage) ASSERT_EQ(x, 7.0f);
  };
  ValueGateParams no_alpha = c.Kernel();
  no_alpha.alpha = nullptr;
  expect_rejected(no_alpha, "alpha is null");
  const std::vector<float> nan_beta = {0.0f, NAN};
  ValueGateParams bad_beta = c.Kernel();
  bad_beta.beta = nan_beta.data();
  expect_rejected(bad_beta, "beta[1]");
  ValueGateParams no_w = c.Kernel();
  no_w.kind = ValueGateKind::kProjection;
  no_w.w = nullptr;
  expect_rejected(no_w, "w is null");
  EXPECT_THROW(ValueGateForward(ValueShape(1, 2, 4, 0), c.Kernel(), c.v.cview(), out.view()),
               std::invalid_argument);
}

}  // namespace
}  // namespace lpattn
