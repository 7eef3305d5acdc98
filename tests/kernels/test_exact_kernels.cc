// The SIMD exact-attention kernels (docs/math.md §1, §1.1) against the fp64 reference, on every
// Highway target this CPU supports.
//
// Error bounds (inputs N(0, 1), fp32 kernels, fp64 reference), as max |kernel - ref| divided
// by (1 + max |ref|) over the whole tensor:
//   O and lse: 1e-5; dQ, dK, dV and d(sink): 2e-5.
// Measured worst cases over every case of this file on SSE4 and AVX2: O 1.2e-6, lse 5.6e-7,
// dQ 2.0e-6, dK 1.6e-6, dV 1.4e-6, d(sink) 3.8e-7 (fp32 rounding of D-long dot products and
// of sums over up to 1000 keys or queries), so the bounds leave a 10x margin.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "tests/kernels/attention_case.h"

namespace lpattn::test {
namespace {

constexpr double kForwardBound = 1e-5;
constexpr double kBackwardBound = 2e-5;

// Runs the case on every supported target and checks all outputs against the reference.
void ExpectMatchesReference(const AttentionCase& c, bool with_backward = true) {
  const ReferenceForwardResult ref = c.ReferenceForward();
  ReferenceGradients grads;
  if (with_backward) grads = c.ReferenceBackward();
  for (const std::string& target : SupportedTargets()) {
    SCOPED_TRACE("target " + target);
    ScopedTarget pin(target);
    ASSERT_TRUE(pin.ok);
    ASSERT_EQ(GetDispatchInfo().chosen, target);
    const KernelOutputs out = c.Run(with_backward);
    EXPECT_LE(ScaledMaxError(out.o.Dense(), ref.o), kForwardBound) << "O";
    EXPECT_LE(ScaledMaxError(ToDouble(out.lse), ref.lse), kForwardBound) << "lse";
    if (!with_backward) continue;
    EXPECT_LE(ScaledMaxError(out.dq.Dense(), grads.dq), kBackwardBound) << "dQ";
    EXPECT_LE(ScaledMaxError(out.dk.Dense(), grads.dk), kBackwardBound) << "dK";
    EXPECT_LE(ScaledMaxError(out.dv.Dense(), grads.dv), kBackwardBound) << "dV";
    if (c.options.sink == SinkMode::kLearned) {
      EXPECT_LE(ScaledMaxError(ToDouble(out.d_sink), grads.d_sink), kBackwardBound) << "d_sink";
    }
  }
}

AttentionShape Shape(int64_t batch, int64_t heads, int64_t kv_heads, int64_t q_len,
                     int64_t kv_len, int64_t dim) {
  return {batch, heads, kv_heads, q_len, kv_len, dim};
}

// A case of the score options' tests (§1.3, §1.4): the backward is checked too unless it is a
// decode shape.
struct ScoreOptionCase {
  AttentionShape shape;
  bool causal;
  SinkMode sink;
  Layout layout;
  bool backward;
  float softcap;
};

// §1.3 logit softcap, with scores scaled up so that the cap bends them: self-attention,
// causal GQA with a learned sink in [B, T, H, D], Tq != Tk, and decode shapes that take the
// grouped tile and split-KV (forward only there), on every target.
TEST(ExactKernels, Softcap) {
  const ScoreOptionCase cases[] = {
      {Shape(1, 2, 1, 65, 65, 64), false, SinkMode::kNone, Layout::kBHTD, true, 2.0f},
      {Shape(2, 4, 2, 100, 130, 80), true, SinkMode::kLearned, Layout::kBTHD, true, 2.0f},
      {Shape(1, 8, 2, 1, 2000, 64), true, SinkMode::kOffByOne, Layout::kBHTD, false, 2.0f},
      {Shape(1, 8, 2, 3, 1700, 128), true, SinkMode::kLearned, Layout::kBTHD, false, 2.0f},
  };
  for (const ScoreOptionCase& k : cases) {
    AttentionCase c(k.shape, k.causal, k.sink, k.layout, 17);
    c.options.scale = 0.6f;  // scores of a few units against a cap of 2
    c.options.softcap = k.softcap;
    SCOPED_TRACE("Tq " + std::to_string(k.shape.q_len) + " Tk " + std::to_string(k.shape.kv_len));
    ExpectMatchesReference(c, k.backward);
  }
  // And with bf16 operands, the cap applied to the products of the codes.
  AttentionCase c(Shape(1, 4, 2, 70, 90, 64), true, SinkMode::kNone, Layout::kBHTD, 5);
  c.options.scale = 0.6f;
  c.options.softcap = 2.0f;
  c.options.precision = ParsePrecision("qk=bf16,pv=bf16");
  ExpectMatchesReference(c, false);
}

// §1.4 ALiBi (slopes large enough to matter over these lengths), alone and under a softcap:
// full and causal attention (the bias is symmetric in |i' - j|), Tq != Tk both ways, GQA with
// sinks in [B, T, H, D], and the decode shapes (grouped rows of several query heads, split-KV),
// on every target.
TEST(ExactKernels, Alibi) {
  const ScoreOptionCase cases[] = {
      {Shape(1, 4, 2, 65, 65, 64), false, SinkMode::kNone, Layout::kBHTD, true, 0.0f},
      {Shape(2, 4, 2, 100, 130, 80), true, SinkMode::kLearned, Layout::kBTHD, true, 0.0f},
      {Shape(1, 4, 4, 120, 70, 32), true, SinkMode::kNone, Layout::kBHTD, true, 3.0f},
      {Shape(1, 8, 2, 1, 2000, 64), true, SinkMode::kOffByOne, Layout::kBHTD, false, 0.0f},
      {Shape(1, 8, 2, 3, 1700, 128), true, SinkMode::kLearned, Layout::kBTHD, false, 3.0f},
  };
  for (const ScoreOptionCase& k : cases) {
    AttentionCase c(k.shape, k.causal, k.sink, k.layout, 23);
    std::vector<float> slopes = AlibiSlopes(k.shape.heads);
    for (float& m : slopes) m *= 4.0f;  // a bias of several units within tens of keys
    c.options.alibi_slopes = slopes.data();
    c.options.softcap = k.softcap;
    SCOPED_TRACE("Tq " + std::to_string(k.shape.q_len) + " Tk " + std::to_string(k.shape.kv_len));
    ExpectMatchesReference(c, k.backward);
  }
}

// §1.5 sliding window: windows inside one tile, across tiles and longer than the sequence,
// causal and not, Tq != Tk, sinks (gpt-oss's combination), GQA, with the softcap and ALiBi on
// top, and the decode shapes (split-KV blocks before the window drop out), on every target.
TEST(ExactKernels, SlidingWindow) {
  struct Case {
    AttentionShape shape;
    bool causal;
    SinkMode sink;
    Layout layout;
    bool backward;
    int64_t window;
    bool options;  // softcap and ALiBi too
    bool softcap_only = false;  // the softcap without ALiBi (the window's vector set-up)
  };
  const Case cases[] = {
      {Shape(1, 2, 1, 200, 200, 64), true, SinkMode::kNone, Layout::kBHTD, true, 17, false},
      {Shape(2, 4, 2, 150, 260, 80), true, SinkMode::kLearned, Layout::kBTHD, true, 100, false},
      {Shape(1, 4, 2, 130, 130, 32), false, SinkMode::kOffByOne, Layout::kBHTD, true, 40, true},
      {Shape(1, 2, 2, 70, 50, 16), true, SinkMode::kNone, Layout::kBHTD, true, 1, false},
      {Shape(1, 2, 1, 60, 60, 8), true, SinkMode::kLearned, Layout::kBHTD, true, 500, true},
      {Shape(1, 8, 2, 1, 3000, 64), true, SinkMode::kLearned, Layout::kBHTD, false, 1000, false},
      {Shape(1, 8, 2, 3, 5000, 128), true, SinkMode::kNone, Layout::kBTHD, false, 128, true},
      {Shape(1, 2, 1, 230, 300, 64), true, SinkMode::kLearned, Layout::kBHTD, true, 70, true, true},
  };
  for (const Case& k : cases) {
    AttentionCase c(k.shape, k.causal, k.sink, k.layout, 29);
    c.options.window = k.window;
    const std::vector<float> slopes = AlibiSlopes(k.shape.heads);
    if (k.options) {
      c.options.softcap = 2.0f;
      if (!k.softcap_only) c.options.alibi_slopes = slopes.data();
    }
    SCOPED_TRACE("Tq " + std::to_string(k.shape.q_len) + " Tk " + std::to_string(k.shape.kv_len) +
                 " W " + std::to_string(k.window));
    ExpectMatchesReference(c, k.backward);
  }
}

// The shape grid of the issue: T x D x causal, self-attention, two query heads sharing one
// kv head so GQA indexing is always exercised.
class ExactGridTest : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, bool>> {};

TEST_P(ExactGridTest, MatchesReferenceOnEveryTarget) {
  const auto [t, dim, causal] = GetParam();
  ExpectMatchesReference(
      AttentionCase(Shape(1, 2, 1, t, t, dim), causal, SinkMode::kNone, Layout::kBHTD));
}

INSTANTIATE_TEST_SUITE_P(
    Grid, ExactGridTest,
    ::testing::Combine(::testing::Values(1, 2, 7, 63, 64, 65, 257, 1000),
                       ::testing::Values(1, 3, 8, 16, 64, 80, 128, 256), ::testing::Bool()),
    [](const auto& info) {
      return "T" + std::to_string(std::get<0>(info.param)) + "_D" +
             std::to_string(std::get<1>(info.param)) +
             (std::get<2>(info.param) ? "_causal" : "_full");
    });

TEST(ExactKernels, QueryLengthDiffersFromKeyLength) {
  for (bool causal : {false, true}) {
    // More keys than queries (a decode step with a cache) and more queries than keys (rows
    // 0 .. Tq - Tk - 1 see nothing under the bottom-right causal mask).
    ExpectMatchesReference(AttentionCase(Shape(1, 2, 2, 65, 200, 64), causal, SinkMode::kNone,
                                         Layout::kBHTD));
    ExpectMatchesReference(AttentionCase(Shape(1, 2, 2, 200, 65, 80), causal, SinkMode::kNone,
                                         Layout::kBHTD));
    ExpectMatchesReference(AttentionCase(Shape(2, 1, 1, 1, 300, 16), causal, SinkMode::kNone,
                                         Layout::kBHTD));
    // The same within one tile (the whole-head backward), with a GQA group of two.
    ExpectMatchesReference(AttentionCase(Shape(1, 2, 1, 20, 90, 32), causal, SinkMode::kNone,
                                         Layout::kBHTD));
    ExpectMatchesReference(AttentionCase(Shape(1, 2, 1, 90, 20, 24), causal, SinkMode::kNone,
                                         Layout::kBHTD));
  }
}

TEST(ExactKernels, GroupedQueryAttention) {
  for (bool causal : {false, true}) {
    ExpectMatchesReference(
        AttentionCase(Shape(2, 8, 2, 100, 100, 32), causal, SinkMode::kNone, Layout::kBHTD));
    ExpectMatchesReference(
        AttentionCase(Shape(1, 6, 1, 70, 130, 24), causal, SinkMode::kNone, Layout::kBHTD));
  }
}

TEST(ExactKernels, SinkAndOffByOne) {
  for (SinkMode sink : {SinkMode::kLearned, SinkMode::kOffByOne}) {
    for (bool causal : {false, true}) {
      ExpectMatchesReference(
          AttentionCase(Shape(2, 4, 2, 90, 90, 64), causal, sink, Layout::kBHTD));
      // Rows with no visible key but a sink: O = 0, A = 1.
      ExpectMatchesReference(
          AttentionCase(Shape(1, 2, 1, 130, 40, 8), causal, sink, Layout::kBHTD));
    }
  }
}

TEST(ExactKernels, BatchTokenHeadDimLayout) {
  for (bool causal : {false, true}) {
    ExpectMatchesReference(
        AttentionCase(Shape(2, 4, 2, 77, 77, 64), causal, SinkMode::kLearned, Layout::kBTHD));
    ExpectMatchesReference(
        AttentionCase(Shape(3, 3, 3, 40, 129, 3), causal, SinkMode::kNone, Layout::kBTHD));
  }
}

TEST(ExactKernels, ExplicitScale) {
  AttentionCase c(Shape(1, 2, 1, 100, 100, 64), true, SinkMode::kNone, Layout::kBHTD);
  c.options.scale = 0.5f;
  ExpectMatchesReference(c);
}

TEST(ExactKernels, DispatchInfoIsConsistent) {
  const DispatchInfo info = GetDispatchInfo();
  ASSERT_FALSE(info.compiled.empty());
  ASSERT_FALSE(info.supported.empty());
  for (const std::string& t : info.supported) {
    EXPECT_NE(std::find(info.compiled.begin(), info.compiled.end(), t), info.compiled.end());
  }
  EXPECT_NE(std::find(info.supported.begin(), info.supported.end(), info.chosen),
            info.supported.end());
  EXPECT_FALSE(SelectTarget("NO_SUCH_TARGET"));
  EXPECT_EQ(GetDispatchInfo().chosen, info.chosen);
  // Pinning a target changes the chosen one, not what the CPU is reported to support.
  ScopedTarget pin(info.supported.back());
  EXPECT_EQ(GetDispatchInfo().chosen, info.supported.back());
  EXPECT_EQ(GetDispatchInfo().supported, info.supported);
}

}  // namespace
}  // namespace lpattn::test
