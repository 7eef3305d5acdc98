// K-interval attention's SIMD kernels against the fp64 reference (docs/math.md §2): every
// calibration, reconstruction, surrogate and variant over shapes, layouts and lengths, forward
// and backward, with low-precision operands and grids, rounded weights, thread counts and bad
// calls. The options, the row transform and the reference itself are tested in test_kinterval.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
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

// ---- the SIMD kernel against the reference ---------------------------------------------------

namespace simd {

using test::AttentionCase;
using test::Layout;
using test::OwnedTensor;

using test::KIntervalRun;
KIntervalRun RunKernel(const AttentionCase& c, const KIntervalOptions& kint, Layout layout) {
  return test::RunKIntervalForward(c, kint, layout);
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
  const KIntervalOptions kint = ParseKInterval(text);
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

// dQ, dK, dV of the kernel (after its own forward) against the reference backward, row by row
// within kRowTolerance. Two places are discontinuous, and float and double may land on either
// side: a score within rounding of an interior node under the exact surrogate (the chord's
// slope jumps there), and the half-nodes of nearest (the weight jumps). Each such entry moves
// one dQ row and one dK row (and, for nearest, one dV row), so those may differ in up to
// 1% + 2 of their rows, each within kFlipTolerance; everything else must match.
void ExpectBackwardMatchesReference(const AttentionShape& shape, bool causal, Layout layout,
                                    const std::string& text, const Precision& precision = {}) {
  const KIntervalOptions kint = ParseKInterval(text);
  const bool nearest = kint.rounding == KIntervalRounding::kNearest ||
                       kint.grid != quant::Format::kFp32 || precision.p != quant::Format::kFp32;
  // A rounded backward (docs/math.md §4.2) flips an entry of P or dS lying within rounding of a
  // midpoint of its format: one step of the format moves a dV, dQ or dK row.
  const bool rounded_bwd = !precision.BackwardIsFp32();
  const bool jumps = nearest || kint.surrogate == KIntervalSurrogate::kExact || rounded_bwd;
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
                               c.d_o.cview(), run.saved(), dq.view(), dk.view(), dv.view()};
    KIntervalBackward(shape, c.options, kint, args);
    const std::string where = text + " on " + target + (causal ? " causal" : " full") + " T" +
                              std::to_string(shape.q_len) + "x" + std::to_string(shape.kv_len) +
                              " D" + std::to_string(shape.head_dim);
    const struct {
      const char* name;
      test::RowMismatch errors;
      size_t rows;
      bool may_jump;
    } grads[] = {{"dq", test::CompareGradientRows(dq.Dense(), ref.dq, dim, kRowTolerance), ref.dq.size() / dim, jumps},
                 {"dk", test::CompareGradientRows(dk.Dense(), ref.dk, dim, kRowTolerance), ref.dk.size() / dim, jumps},
                 {"dv", test::CompareGradientRows(dv.Dense(), ref.dv, dim, kRowTolerance), ref.dv.size() / dim,
                  nearest || rounded_bwd}};
    // A flipped value of a rounded grid changes the chord of every entry in its two intervals
    // across the row, so more gradient rows move, each by little: up to 10% + 2 of the rows,
    // within 1e-3.
    const bool rounded_grid = kint.grid != quant::Format::kFp32 || precision.p != quant::Format::kFp32;
    for (const auto& g : grads) {
      const size_t allowed = !g.may_jump                  ? 0
                             : rounded_grid || rounded_bwd ? g.rows / 10 + 2
                                                           : g.rows / 100 + 2;
      EXPECT_LE(g.errors.bad, allowed) << g.name << " " << where << " worst " << g.errors.worst;
      // A flip of the backward's rounding moves a row by a step of its format: up to 2e-2 (int8).
      const double worst = !g.may_jump    ? kRowTolerance
                           : rounded_bwd  ? 2e-2
                           : rounded_grid ? 1e-3
                                          : kFlipTolerance;
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
// An interval wider than float's exp range (h = W / K = 100 > 88, docs/math.md §2.2): the
// lerp weights come down from the upper node and stay finite; going up from E_k overflowed
// e^h and gave inf or NaN weights (a fuzzing finding).
TEST(KIntervalKernel, WideGridIntervalsMatchTheReference) {
  for (const char* text : {"K=4,cal=window,W=400", "K=1,cal=window,W=100",
                           "K=4,cal=window,W=400,ste=weight"}) {
    for (bool causal : {false, true}) {
      ExpectMatchesReference({1, 2, 1, 33, 33, 16}, causal, Layout::kBHTD, text);
      ExpectBackwardMatchesReference({1, 2, 1, 33, 33, 16}, causal, Layout::kBHTD, text);
    }
  }
}

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

// The low-precision backward (docs/math.md §4.2): the K-interval transform's dS goes through
// the same rounded products, whole-head and tiled.
TEST(KIntervalKernel, MatchesReferenceWithALowPrecisionBackward) {
  for (const char* bwd : {"bwd=bf16", "bwd=int8", "bwd=fp16,bwd_dp=bf16"}) {
    for (bool causal : {false, true}) {
      for (const char* text : {"K=4", "K=8,ste=prob"}) {
        ExpectBackwardMatchesReference({1, 2, 1, 70, 90, 16}, causal, Layout::kBHTD, text,
                                       ParsePrecision(bwd));
        ExpectBackwardMatchesReference({2, 2, 1, 150, 200, 32}, causal, Layout::kBTHD, text,
                                       ParsePrecision(bwd));
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

// Decode (docs/design.md §8, docs/math.md §5): a GQA group's query heads in one tile (q_len 1
// in either layout, 4 through [B, T, H, D] copies), keys split into blocks whose maxima and
// minima merge before they weigh; the backward reads the statistics the split saved. Lerp
// only: with thousands of keys a row, nearest's half-node flips (see above) are no longer rare.
TEST(KIntervalKernel, MatchesReferenceInDecode) {
  for (const char* text : {"K=4", "K=16,cal=window,W=2", "K=64,ste=prob"}) {
    ExpectMatchesReference({1, 8, 2, 1, 4000, 64}, true, Layout::kBHTD, text);
    ExpectMatchesReference({2, 4, 2, 4, 2000, 32}, true, Layout::kBTHD, text);
    ExpectMatchesReference({1, 6, 2, 1, 1700, 80}, false, Layout::kBTHD, text);
  }
  ExpectBackwardMatchesReference({1, 8, 2, 1, 2000, 32}, true, Layout::kBHTD, "K=4");
  ExpectBackwardMatchesReference({1, 4, 2, 3, 1800, 16}, true, Layout::kBHTD, "K=4,ste=prob");
}

// Issue 20: a query row holding +inf makes its scores +-inf or NaN, its max +inf and u = s - m
// NaN at the max. Every calibration must then give that row NaN (O and Z), as exact attention
// does; cal=window used to take the NaN u for "below the window" and output zeros with Z = 0.
TEST(KIntervalKernel, InfiniteQueryGivesNaNUnderEveryCalibration) {
  for (const char* text : {"K=4,cal=window", "K=4", "K=4,cal=window,round=nearest,ste=weight"}) {
    const KIntervalOptions kint = ParseKInterval(text);
    AttentionCase c({1, 1, 1, 8, 8, 4}, true, SinkMode::kNone, Layout::kBHTD);
    c.q.at(0, 0, 5, 2) = std::numeric_limits<float>::infinity();
    const ReferenceKIntervalForwardResult ref =
        ReferenceKIntervalForward(c.shape, c.options, kint, c.DenseInputs());
    EXPECT_TRUE(std::isnan(ref.stats[5].Z)) << text << ": the reference";
    for (const std::string& target : test::SupportedTargets()) {
      const test::ScopedTarget pin(target);
      const KIntervalRun run = RunKernel(c, kint, Layout::kBHTD);
      const std::string where = std::string(text) + " on " + target;
      EXPECT_TRUE(std::isnan(run.Z[5])) << where << ": Z = " << run.Z[5];
      for (int64_t i = 0; i < 8; ++i) {
        for (int64_t x = 0; x < 4; ++x) {
          EXPECT_EQ(std::isnan(run.o.at(0, 0, i, x)), i == 5) << where << " row " << i;
          EXPECT_EQ(std::isnan(ref.o[size_t(i * 4 + x)]), i == 5) << where << " reference row " << i;
        }
      }
    }
  }
}

TEST(KIntervalKernel, DecodeDoesNotDependOnTheThreadCount) {
  AttentionCase c({1, 8, 2, 1, 5000, 64}, true, SinkMode::kNone, Layout::kBHTD);
  const KIntervalOptions kint = ParseKInterval("K=4,cal=window,W=3");
  c.options.threads = 1;
  const KIntervalRun one = RunKernel(c, kint, Layout::kBHTD);
  c.options.threads = 3;
  const KIntervalRun three = RunKernel(c, kint, Layout::kBHTD);
  EXPECT_EQ(one.o.storage, three.o.storage);
  EXPECT_EQ(one.Z, three.Z);
  EXPECT_EQ(one.argmax, three.argmax);
}

TEST(KIntervalKernel, ResultsDoNotDependOnTheThreadCount) {
  AttentionCase c({2, 4, 2, 150, 150, 32}, true, SinkMode::kNone, Layout::kBHTD);
  const KIntervalOptions kint = ParseKInterval("K=4");
  std::vector<std::vector<float>> results[2];
  for (int t = 0; t < 2; ++t) {
    c.options.threads = t == 0 ? 1 : 3;
    KIntervalRun run = RunKernel(c, kint, Layout::kBHTD);
    OwnedTensor dq(2, 4, 150, 32, Layout::kBHTD), dk(2, 2, 150, 32, Layout::kBHTD),
        dv(2, 2, 150, 32, Layout::kBHTD);
    KIntervalBackward(c.shape, c.options, kint,
                      {c.q.cview(), c.k.cview(), c.v.cview(), run.o.cview(), c.d_o.cview(),
                       run.saved(), dq.view(), dk.view(), dv.view()});
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
  AttentionCase capped({1, 1, 1, 4, 4, 8}, false, SinkMode::kNone, Layout::kBHTD);
  capped.options.softcap = 30.0f;  // exact attention's option (docs/math.md §1.3)
  EXPECT_THROW(RunKernel(capped, KIntervalOptions{}, Layout::kBHTD), std::invalid_argument);
  AttentionCase biased({1, 1, 1, 4, 4, 8}, false, SinkMode::kNone, Layout::kBHTD);
  const float slope = 0.5f;
  biased.options.alibi_slopes = &slope;
  EXPECT_THROW(RunKernel(biased, KIntervalOptions{}, Layout::kBHTD), std::invalid_argument);
  AttentionCase windowed({1, 1, 1, 4, 4, 8}, true, SinkMode::kNone, Layout::kBHTD);
  windowed.options.window = 2;
  EXPECT_THROW(RunKernel(windowed, KIntervalOptions{}, Layout::kBHTD), std::invalid_argument);
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
