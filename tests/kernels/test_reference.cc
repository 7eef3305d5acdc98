// Tests of the fp64 references of docs/math.md §1 and §1.1 (kernels/reference/reference.cc): the backward
// against central finite differences of the forward, and the forward against facts that hold
// by construction (rows of P sum to 1 - A, one visible key copies its value row, ...).
#include "kernels/reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <iomanip>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/attention.h"

namespace lpattn {
namespace {

std::vector<double> RandomNormal(size_t count, std::mt19937_64& rng, double stddev = 1.0) {
  std::normal_distribution<double> normal(0.0, stddev);
  std::vector<double> values(count);
  for (double& value : values) value = normal(rng);
  return values;
}

size_t QueryElements(const AttentionShape& s) {
  return static_cast<size_t>(s.batch * s.heads * s.q_len * s.head_dim);
}
size_t KeyElements(const AttentionShape& s) {
  return static_cast<size_t>(s.batch * s.kv_heads * s.kv_len * s.head_dim);
}

ReferenceInputs RandomInputs(const AttentionShape& s, std::mt19937_64& rng) {
  ReferenceInputs inputs;
  inputs.q = RandomNormal(QueryElements(s), rng);
  inputs.k = RandomNormal(KeyElements(s), rng);
  inputs.v = RandomNormal(KeyElements(s), rng);
  inputs.sink_logits = RandomNormal(static_cast<size_t>(s.heads), rng);
  return inputs;
}

// Index of element d of row (b, h, t) in a dense [batch, heads, tokens, dim] vector.
size_t DenseIndex(int64_t heads, int64_t tokens, int64_t dim, int64_t b, int64_t h, int64_t t,
                  int64_t d) {
  return static_cast<size_t>(((b * heads + h) * tokens + t) * dim + d);
}

size_t QIndex(const AttentionShape& s, int64_t b, int64_t h, int64_t i, int64_t d) {
  return DenseIndex(s.heads, s.q_len, s.head_dim, b, h, i, d);
}
size_t KvIndex(const AttentionShape& s, int64_t b, int64_t kv_h, int64_t j, int64_t d) {
  return DenseIndex(s.kv_heads, s.kv_len, s.head_dim, b, kv_h, j, d);
}

// §0: N_i for a bottom-right aligned causal mask.
int64_t VisibleKeys(const AttentionShape& s, bool causal, int64_t i) {
  if (!causal) return s.kv_len;
  return std::clamp<int64_t>(i + (s.kv_len - s.q_len) + 1, 0, s.kv_len);
}

// ---- backward against finite differences ---------------------------------------------------

struct GradientCase {
  std::string name;
  AttentionShape shape;
  bool causal;
  SinkMode sink;
  std::optional<float> scale;
};

// Names the case in gtest's output instead of dumping its bytes.
void PrintTo(const GradientCase& c, std::ostream* os) { *os << c.name; }

std::string SinkName(SinkMode sink) {
  switch (sink) {
    case SinkMode::kNone:
      return "NoSink";
    case SinkMode::kLearned:
      return "LearnedSink";
    case SinkMode::kOffByOne:
      return "OffByOne";
  }
  return "Unknown";
}

std::vector<GradientCase> GradientCases() {
  struct NamedShape {
    std::string name;
    AttentionShape shape;
    std::optional<float> scale;
  };
  const std::vector<NamedShape> shapes = {
      // GQA with more keys than queries.
      {"Gqa_Tq5_Tk7", {.batch = 2, .heads = 4, .kv_heads = 2, .q_len = 5, .kv_len = 7,
                       .head_dim = 3}, std::nullopt},
      // Tq > Tk: under the causal mask rows 0 and 1 see no key.
      {"Gqa_Tq7_Tk5", {.batch = 2, .heads = 4, .kv_heads = 2, .q_len = 7, .kv_len = 5,
                       .head_dim = 3}, std::nullopt},
      // Multi-query (one kv head), square, explicit scale.
      {"Mqa_Tq4_Tk4_Scale07", {.batch = 1, .heads = 3, .kv_heads = 1, .q_len = 4, .kv_len = 4,
                               .head_dim = 5}, 0.7f},
  };
  std::vector<GradientCase> cases;
  for (const NamedShape& named : shapes) {
    for (bool causal : {false, true}) {
      for (SinkMode sink : {SinkMode::kNone, SinkMode::kLearned, SinkMode::kOffByOne}) {
        cases.push_back({named.name + (causal ? "_Causal_" : "_Full_") + SinkName(sink),
                         named.shape, causal, sink, named.scale});
      }
    }
  }
  return cases;
}

class ReferenceGradientTest : public ::testing::TestWithParam<GradientCase> {};

// L = sum(dO * O): its gradient with respect to O is dO, so the analytic backward with that dO
// must match dL/dx for every input element x.
double Loss(const AttentionShape& shape, const AttentionOptions& options,
            const ReferenceInputs& inputs, const std::vector<double>& d_o) {
  const ReferenceForwardResult forward = ReferenceExactForward(shape, options, inputs);
  double loss = 0.0;
  for (size_t n = 0; n < d_o.size(); ++n) loss += d_o[n] * forward.o[n];
  return loss;
}

// Compares analytic[n] with the central difference (L(x + h) - L(x - h)) / 2h for each element
// of *values (one of the inputs' vectors), and returns the largest absolute error.
//
// Tolerance: the central difference has truncation error ~h^2 |L'''| ~ 1e-12 and rounding
// error ~eps |L| / h ~ 1e-9 at h = 1e-6, so 1e-7 (1 + |g|) leaves two orders of margin, while a
// wrong term in the backward (a missing Delta, a dropped scale, a wrong GQA head) errs by O(1).
constexpr double kStep = 1e-6;
constexpr double kTolerance = 1e-7;

double CheckAgainstFiniteDifferences(const AttentionShape& shape, const AttentionOptions& options,
                                     ReferenceInputs& inputs, std::vector<double>* values,
                                     const std::vector<double>& analytic,
                                     const std::vector<double>& d_o, const char* what) {
  EXPECT_EQ(values->size(), analytic.size()) << what;
  double max_error = 0.0;
  for (size_t n = 0; n < values->size(); ++n) {
    const double saved = (*values)[n];
    (*values)[n] = saved + kStep;
    const double loss_plus = Loss(shape, options, inputs, d_o);
    (*values)[n] = saved - kStep;
    const double loss_minus = Loss(shape, options, inputs, d_o);
    (*values)[n] = saved;
    const double numeric = (loss_plus - loss_minus) / (2.0 * kStep);
    const double error = std::abs(numeric - analytic[n]);
    max_error = std::max(max_error, error);
    EXPECT_LE(error, kTolerance * (1.0 + std::abs(analytic[n])))
        << what << "[" << n << "]: analytic " << analytic[n] << ", numeric " << numeric;
  }
  return max_error;
}

double MaxAbs(const std::vector<double>& values) {
  double result = 0.0;
  for (double value : values) result = std::max(result, std::abs(value));
  return result;
}

TEST_P(ReferenceGradientTest, BackwardMatchesCentralDifferences) {
  const GradientCase& c = GetParam();
  std::mt19937_64 rng(20240611);
  ReferenceInputs inputs = RandomInputs(c.shape, rng);
  const std::vector<double> d_o = RandomNormal(QueryElements(c.shape), rng);
  AttentionOptions options;
  options.causal = c.causal;
  options.sink = c.sink;
  options.scale = c.scale;

  const ReferenceGradients grads = ReferenceExactBackward(c.shape, options, inputs, d_o);
  // The comparison is only meaningful if the gradients are not all (near) zero.
  ASSERT_GT(MaxAbs(grads.dq), 1e-2);
  ASSERT_GT(MaxAbs(grads.dk), 1e-2);
  ASSERT_GT(MaxAbs(grads.dv), 1e-2);

  double max_error = 0.0;
  max_error = std::max(max_error, CheckAgainstFiniteDifferences(c.shape, options, inputs,
                                                                &inputs.q, grads.dq, d_o, "dq"));
  max_error = std::max(max_error, CheckAgainstFiniteDifferences(c.shape, options, inputs,
                                                                &inputs.k, grads.dk, d_o, "dk"));
  max_error = std::max(max_error, CheckAgainstFiniteDifferences(c.shape, options, inputs,
                                                                &inputs.v, grads.dv, d_o, "dv"));
  ASSERT_EQ(grads.d_sink.size(), static_cast<size_t>(c.shape.heads));
  if (c.sink == SinkMode::kLearned) {
    ASSERT_GT(MaxAbs(grads.d_sink), 1e-3);
    max_error = std::max(
        max_error, CheckAgainstFiniteDifferences(c.shape, options, inputs, &inputs.sink_logits,
                                                 grads.d_sink, d_o, "d_sink"));
  } else {
    // A fixed (off-by-one) or absent sink has no parameter: d_sink is all zeros.
    for (double g : grads.d_sink) EXPECT_EQ(g, 0.0);
  }
  std::ostringstream formatted;
  formatted << std::scientific << std::setprecision(2) << max_error;
  RecordProperty("max_abs_error", formatted.str());
}

INSTANTIATE_TEST_SUITE_P(Reference, ReferenceGradientTest, ::testing::ValuesIn(GradientCases()),
                         [](const ::testing::TestParamInfo<GradientCase>& info) {
                           return info.param.name;
                         });

// §1.3-§1.5: the score options' backward against their forward's central differences
// (the softcap with scores large enough, scale 2.5, that tanh bends them; ALiBi's bias a
// constant of the inputs, so the backward has no term of its own, alone and under the cap),
// causal and not, with a learned sink; and each option moves the output.
TEST(ReferenceGradient, ScoreOptionsBackwardMatchesCentralDifferences) {
  const AttentionShape shape{.batch = 1, .heads = 4, .kv_heads = 2, .q_len = 5, .kv_len = 7,
                             .head_dim = 3};
  const std::vector<float> slopes = {0.9f, 0.5f, 0.25f, 0.1f};
  struct Options {
    float scale, softcap;
    const float* alibi;
    int64_t window;
  };
  for (const Options& o : {Options{2.5f, 1.5f, nullptr, 0}, Options{1.0f, 0.0f, slopes.data(), 0},
                           Options{1.0f, 1.5f, slopes.data(), 0}, Options{1.0f, 0.0f, nullptr, 3},
                           Options{2.5f, 1.5f, slopes.data(), 2}}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::string(causal ? "causal" : "full") + " softcap " +
                   std::to_string(o.softcap) + (o.alibi != nullptr ? " alibi" : ""));
      std::mt19937_64 rng(5);
      ReferenceInputs inputs = RandomInputs(shape, rng);
      const std::vector<double> d_o = RandomNormal(QueryElements(shape), rng);
      AttentionOptions options;
      options.causal = causal;
      options.sink = SinkMode::kLearned;
      options.scale = o.scale;
      options.softcap = o.softcap;
      options.alibi_slopes = o.alibi;
      options.window = o.window;
      const ReferenceGradients grads = ReferenceExactBackward(shape, options, inputs, d_o);
      ASSERT_GT(MaxAbs(grads.dq), 1e-2);
      CheckAgainstFiniteDifferences(shape, options, inputs, &inputs.q, grads.dq, d_o, "dq");
      CheckAgainstFiniteDifferences(shape, options, inputs, &inputs.k, grads.dk, d_o, "dk");
      CheckAgainstFiniteDifferences(shape, options, inputs, &inputs.v, grads.dv, d_o, "dv");
      CheckAgainstFiniteDifferences(shape, options, inputs, &inputs.sink_logits, grads.d_sink,
                                    d_o, "d_sink");
      AttentionOptions plain = options;
      plain.softcap = 0.0f;
      plain.alibi_slopes = nullptr;
      plain.window = 0;
      const std::vector<double> with = ReferenceExactForward(shape, options, inputs).o;
      const std::vector<double> without = ReferenceExactForward(shape, plain, inputs).o;
      double difference = 0.0;
      for (size_t n = 0; n < with.size(); ++n) {
        difference = std::max(difference, std::abs(with[n] - without[n]));
      }
      EXPECT_GT(difference, 1e-2);
    }
  }
}

// ---- forward sanity ------------------------------------------------------------------------

// With every value row equal to (1, ..., 1), o_i = sum_j p_ij in every component: the row sum
// of P is 1 without a sink and 1 - A_i with one (§1.1), where A_i is computed here naively as
// exp(tau) / (exp(tau) + sum_j exp(s_ij)). lse is checked against the naive log-sum-exp too.
TEST(ReferenceForward, RowsOfPSumToOneMinusAbstention) {
  const AttentionShape shape{.batch = 2, .heads = 4, .kv_heads = 2, .q_len = 6, .kv_len = 4,
                             .head_dim = 3};
  std::mt19937_64 rng(7);
  ReferenceInputs inputs = RandomInputs(shape, rng);
  inputs.v.assign(KeyElements(shape), 1.0);
  // The default scale 1/sqrt(D), rounded to float as every kernel receives it.
  const double scale = static_cast<double>(ResolvedScale(shape, AttentionOptions{}));

  for (bool causal : {false, true}) {
    for (SinkMode sink : {SinkMode::kNone, SinkMode::kLearned, SinkMode::kOffByOne}) {
      SCOPED_TRACE((causal ? "causal " : "full ") + SinkName(sink));
      AttentionOptions options;
      options.causal = causal;
      options.sink = sink;
      const ReferenceForwardResult forward = ReferenceExactForward(shape, options, inputs);
      for (int64_t b = 0; b < shape.batch; ++b) {
        for (int64_t h = 0; h < shape.heads; ++h) {
          const int64_t kv_h = h / (shape.heads / shape.kv_heads);
          for (int64_t i = 0; i < shape.q_len; ++i) {
            double sum_exp = 0.0;
            for (int64_t j = 0; j < VisibleKeys(shape, causal, i); ++j) {
              double dot = 0.0;
              for (int64_t d = 0; d < shape.head_dim; ++d) {
                dot +=
                    inputs.q[QIndex(shape, b, h, i, d)] * inputs.k[KvIndex(shape, b, kv_h, j, d)];
              }
              sum_exp += std::exp(scale * dot);
            }
            double sink_exp = 0.0;
            if (sink == SinkMode::kLearned) sink_exp = std::exp(inputs.sink_logits[h]);
            if (sink == SinkMode::kOffByOne) sink_exp = 1.0;
            const double denominator = sum_exp + sink_exp;
            // A row with no key and no sink outputs zeros (checked in NoVisibleKey below).
            const double expected_sum =
                denominator == 0.0 ? 0.0 : 1.0 - sink_exp / denominator;
            const size_t row = static_cast<size_t>((b * shape.heads + h) * shape.q_len + i);
            for (int64_t d = 0; d < shape.head_dim; ++d) {
              EXPECT_NEAR(forward.o[row * shape.head_dim + d], expected_sum, 1e-14)
                  << "b=" << b << " h=" << h << " i=" << i;
            }
            if (denominator > 0.0) {
              EXPECT_NEAR(forward.lse[row], std::log(denominator), 1e-13);
            }
          }
        }
      }
    }
  }
}

// Causal row i = Tq - Tk sees only key 0, so p = 1 exactly and o equals that value row.
TEST(ReferenceForward, OneVisibleKeyCopiesItsValueRow) {
  for (int64_t q_len : {4, 6}) {
    const AttentionShape shape{.batch = 2, .heads = 4, .kv_heads = 2, .q_len = q_len,
                               .kv_len = 4, .head_dim = 5};
    std::mt19937_64 rng(11);
    const ReferenceInputs inputs = RandomInputs(shape, rng);
    AttentionOptions options;
    options.causal = true;
    const ReferenceForwardResult forward = ReferenceExactForward(shape, options, inputs);
    const int64_t row_with_one_key = shape.q_len - shape.kv_len;
    for (int64_t b = 0; b < shape.batch; ++b) {
      for (int64_t h = 0; h < shape.heads; ++h) {
        const int64_t kv_h = h / (shape.heads / shape.kv_heads);
        for (int64_t d = 0; d < shape.head_dim; ++d) {
          EXPECT_EQ(forward.o[QIndex(shape, b, h, row_with_one_key, d)],
                    inputs.v[KvIndex(shape, b, kv_h, 0, d)]);
        }
      }
    }
  }
}

// Scores of +-1e4 overflow a naive exp; the max subtraction keeps everything finite. Scale 1,
// q = (1, 0) and k_j = (s_j, 0) make the scores exactly s_j.
TEST(ReferenceForward, HugeScoresGiveFiniteOutput) {
  const std::vector<double> scores = {1e4, -1e4, 1e4 - 1.0, -5.0};
  const AttentionShape shape{.batch = 1, .heads = 1, .kv_heads = 1, .q_len = 1,
                             .kv_len = static_cast<int64_t>(scores.size()), .head_dim = 2};
  ReferenceInputs inputs;
  inputs.q = {1.0, 0.0};
  for (double s : scores) inputs.k.insert(inputs.k.end(), {s, 0.0});
  inputs.v = {1.0, 2.0, 30.0, 40.0, 5.0, 6.0, 700.0, 800.0};
  AttentionOptions options;
  options.scale = 1.0f;

  const ReferenceForwardResult forward = ReferenceExactForward(shape, options, inputs);
  // Only keys 0 and 2 carry weight: p = (1, e^-1) / (1 + e^-1); the others underflow to 0.
  const double p0 = 1.0 / (1.0 + std::exp(-1.0));
  const double p2 = std::exp(-1.0) / (1.0 + std::exp(-1.0));
  EXPECT_NEAR(forward.o[0], p0 * 1.0 + p2 * 5.0, 1e-13);
  EXPECT_NEAR(forward.o[1], p0 * 2.0 + p2 * 6.0, 1e-13);
  EXPECT_NEAR(forward.lse[0], 1e4 + std::log1p(std::exp(-1.0)), 1e-9);

  // All scores very negative with the off-by-one sink: the sink takes all the mass, o ~ 0.
  inputs.q = {-1.0, 0.0};
  inputs.k = {1e4, 0.0, 1e4, 0.0, 2e4, 0.0, 1e4, 0.0};
  options.sink = SinkMode::kOffByOne;
  const ReferenceForwardResult abstained = ReferenceExactForward(shape, options, inputs);
  EXPECT_EQ(abstained.o[0], 0.0);
  EXPECT_EQ(abstained.o[1], 0.0);
  EXPECT_EQ(abstained.lse[0], 0.0);

  const std::vector<double> d_o = {1.0, -1.0};
  const ReferenceGradients grads = ReferenceExactBackward(shape, options, inputs, d_o);
  for (double g : grads.dq) EXPECT_TRUE(std::isfinite(g));
  for (double g : grads.dk) EXPECT_TRUE(std::isfinite(g));
  for (double g : grads.dv) EXPECT_TRUE(std::isfinite(g));
}

// §0 / §1.1: with Tq > Tk under the causal mask, rows i < Tq - Tk see no key. They output zeros
// with lse = -inf without a sink and lse = tau_h with one (A_i = 1), and get zero gradients.
TEST(ReferenceForward, RowsWithNoVisibleKey) {
  const AttentionShape shape{.batch = 2, .heads = 2, .kv_heads = 1, .q_len = 6, .kv_len = 3,
                             .head_dim = 4};
  std::mt19937_64 rng(13);
  const ReferenceInputs inputs = RandomInputs(shape, rng);
  const std::vector<double> d_o = RandomNormal(QueryElements(shape), rng);
  const int64_t empty_rows = shape.q_len - shape.kv_len;

  for (SinkMode sink : {SinkMode::kNone, SinkMode::kLearned, SinkMode::kOffByOne}) {
    SCOPED_TRACE(SinkName(sink));
    AttentionOptions options;
    options.causal = true;
    options.sink = sink;
    const ReferenceForwardResult forward = ReferenceExactForward(shape, options, inputs);
    const ReferenceGradients grads = ReferenceExactBackward(shape, options, inputs, d_o);
    for (int64_t b = 0; b < shape.batch; ++b) {
      for (int64_t h = 0; h < shape.heads; ++h) {
        for (int64_t i = 0; i < shape.q_len; ++i) {
          const size_t row = static_cast<size_t>((b * shape.heads + h) * shape.q_len + i);
          if (i >= empty_rows) {
            EXPECT_TRUE(std::isfinite(forward.lse[row]));
            continue;
          }
          for (int64_t d = 0; d < shape.head_dim; ++d) {
            EXPECT_EQ(forward.o[row * shape.head_dim + d], 0.0);
            EXPECT_EQ(grads.dq[row * shape.head_dim + d], 0.0);
          }
          switch (sink) {
            case SinkMode::kNone:
              EXPECT_EQ(forward.lse[row], -std::numeric_limits<double>::infinity());
              break;
            case SinkMode::kLearned:
              EXPECT_EQ(forward.lse[row], inputs.sink_logits[h]);
              break;
            case SinkMode::kOffByOne:
              EXPECT_EQ(forward.lse[row], 0.0);
              break;
          }
        }
      }
    }
  }
}

// §0: GQA is the same computation as repeating each kv head for its group of query heads.
// Forward results are bit-identical (same arithmetic in the same order); dK and dV of a shared
// head are the sums of the repeated heads' gradients.
TEST(ReferenceForward, GqaEqualsRepeatedKvHeads) {
  const AttentionShape gqa{.batch = 2, .heads = 6, .kv_heads = 2, .q_len = 5, .kv_len = 7,
                           .head_dim = 4};
  AttentionShape repeated = gqa;
  repeated.kv_heads = gqa.heads;
  const int64_t group = gqa.heads / gqa.kv_heads;

  std::mt19937_64 rng(17);
  const ReferenceInputs gqa_inputs = RandomInputs(gqa, rng);
  const std::vector<double> d_o = RandomNormal(QueryElements(gqa), rng);
  ReferenceInputs repeated_inputs = gqa_inputs;
  repeated_inputs.k.assign(KeyElements(repeated), 0.0);
  repeated_inputs.v.assign(KeyElements(repeated), 0.0);
  for (int64_t b = 0; b < gqa.batch; ++b) {
    for (int64_t h = 0; h < gqa.heads; ++h) {
      for (int64_t j = 0; j < gqa.kv_len; ++j) {
        for (int64_t d = 0; d < gqa.head_dim; ++d) {
          const size_t from = KvIndex(gqa, b, h / group, j, d);
          const size_t to = KvIndex(repeated, b, h, j, d);
          repeated_inputs.k[to] = gqa_inputs.k[from];
          repeated_inputs.v[to] = gqa_inputs.v[from];
        }
      }
    }
  }

  for (bool causal : {false, true}) {
    AttentionOptions options;
    options.causal = causal;
    options.sink = SinkMode::kLearned;
    const ReferenceForwardResult a = ReferenceExactForward(gqa, options, gqa_inputs);
    const ReferenceForwardResult b = ReferenceExactForward(repeated, options, repeated_inputs);
    EXPECT_EQ(a.o, b.o);
    EXPECT_EQ(a.lse, b.lse);

    const ReferenceGradients ga = ReferenceExactBackward(gqa, options, gqa_inputs, d_o);
    const ReferenceGradients gb = ReferenceExactBackward(repeated, options, repeated_inputs, d_o);
    EXPECT_EQ(ga.dq, gb.dq);
    EXPECT_EQ(ga.d_sink, gb.d_sink);
    for (int64_t bi = 0; bi < gqa.batch; ++bi) {
      for (int64_t kv_h = 0; kv_h < gqa.kv_heads; ++kv_h) {
        for (int64_t j = 0; j < gqa.kv_len; ++j) {
          for (int64_t d = 0; d < gqa.head_dim; ++d) {
            double dk_sum = 0.0, dv_sum = 0.0;
            for (int64_t h = kv_h * group; h < (kv_h + 1) * group; ++h) {
              dk_sum += gb.dk[KvIndex(repeated, bi, h, j, d)];
              dv_sum += gb.dv[KvIndex(repeated, bi, h, j, d)];
            }
            const size_t idx = KvIndex(gqa, bi, kv_h, j, d);
            EXPECT_NEAR(ga.dk[idx], dk_sum, 1e-13);
            EXPECT_NEAR(ga.dv[idx], dv_sum, 1e-13);
          }
        }
      }
    }
  }
}

// §1.1: off-by-one is the learned sink with tau fixed at 0, except that it has no gradient.
TEST(ReferenceForward, OffByOneIsLearnedSinkAtZero) {
  const AttentionShape shape{.batch = 1, .heads = 2, .kv_heads = 2, .q_len = 3, .kv_len = 5,
                             .head_dim = 4};
  std::mt19937_64 rng(19);
  ReferenceInputs inputs = RandomInputs(shape, rng);
  inputs.sink_logits.assign(static_cast<size_t>(shape.heads), 0.0);
  const std::vector<double> d_o = RandomNormal(QueryElements(shape), rng);
  AttentionOptions learned, off_by_one;
  learned.sink = SinkMode::kLearned;
  off_by_one.sink = SinkMode::kOffByOne;
  EXPECT_EQ(ReferenceExactForward(shape, learned, inputs).o,
            ReferenceExactForward(shape, off_by_one, inputs).o);
  const ReferenceGradients gl = ReferenceExactBackward(shape, learned, inputs, d_o);
  const ReferenceGradients go = ReferenceExactBackward(shape, off_by_one, inputs, d_o);
  EXPECT_EQ(gl.dq, go.dq);
  EXPECT_EQ(gl.dk, go.dk);
  EXPECT_EQ(gl.dv, go.dv);
  EXPECT_GT(MaxAbs(gl.d_sink), 0.0);
  EXPECT_EQ(MaxAbs(go.d_sink), 0.0);
}

// DenseFromView reads a [B, T, H, D] float buffer in [B, H, T, D] order.
TEST(ReferenceHelpers, DenseFromViewGathersStridedLayouts) {
  const int64_t batch = 2, heads = 3, tokens = 4, dim = 5;
  std::vector<float> bthd(static_cast<size_t>(batch * tokens * heads * dim));
  for (size_t n = 0; n < bthd.size(); ++n) bthd[n] = static_cast<float>(n);
  const ConstTensor view{bthd.data(), ContiguousBTHD(heads, tokens, dim)};
  const std::vector<double> dense = DenseFromView(view, batch, heads, tokens, dim);
  ASSERT_EQ(dense.size(), bthd.size());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t d = 0; d < dim; ++d) {
          const double expected = static_cast<double>(((b * tokens + t) * heads + h) * dim + d);
          EXPECT_EQ(dense[DenseIndex(heads, tokens, dim, b, h, t, d)], expected);
        }
      }
    }
  }
}

}  // namespace
}  // namespace lpattn
