// Thresholded (differential) attention's SIMD kernels against the fp64 reference (docs/math.md
// §3): one and two views over shapes, layouts and lengths, forward and backward, all-zero rows,
// low-precision operands, rounded weights, lambda outside [0, 1], thread counts and bad calls.
// The options, the row transform, the reference and the theory are tested in test_threshold.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/reference.h"
#include "kernels/threshold.h"
#include "tests/kernels/attention_case.h"
#include "tests/kernels/threshold_case.h"

namespace lpattn {
namespace {

// ---- the SIMD kernel against the reference ---------------------------------------------------

namespace simd {

using test::AttentionCase;
using test::Layout;
using test::OwnedTensor;

using test::RunForward;
using test::ThresholdRun;
using test::TwoViewCase;

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

// Decode (docs/design.md §8, docs/math.md §5): a GQA group's query heads in one tile (each row
// with its own tau and lambda; q_len 4 in [B, T, H, D] through copies of both views' queries),
// keys split into blocks whose outputs and survivor counts add (no normaliser).
TEST(ThresholdKernel, ForwardMatchesReferenceInDecode) {
  for (const char* text : {"views=2,p=2,beta=0.3", "views=1,p=1,beta=0.6", "views=2,p=2,beta=0"}) {
    ExpectForwardMatchesReference({1, 8, 2, 1, 4000, 64}, true, Layout::kBHTD, text);
    ExpectForwardMatchesReference({2, 4, 2, 4, 2000, 32}, true, Layout::kBTHD, text);
    ExpectForwardMatchesReference({1, 2, 2, 1, 1700, 80}, false, Layout::kBHTD, text);
  }
}

// A prefill's tiles, and a decode step's grouped rows and key blocks.
TEST(ThresholdKernel, ForwardDoesNotDependOnTheThreadCount) {
  for (const AttentionShape& shape :
       {AttentionShape{2, 4, 2, 300, 300, 64}, AttentionShape{1, 4, 2, 1, 5000, 64}}) {
    const TwoViewCase c(shape, true, Layout::kBHTD);
    const ThresholdOptions threshold = ParseThreshold("views=2,beta=0.4");
    const ThresholdRun one = RunForward(c, threshold, Layout::kBHTD, 1);
    const ThresholdRun three = RunForward(c, threshold, Layout::kBHTD, 3);
    EXPECT_EQ(one.o.storage, three.o.storage) << shape.kv_len;
    EXPECT_EQ(one.survivors, three.survivors) << shape.kv_len;
  }
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

// docs/math.md §4.2's low-precision backward on the sparse transform: each view's products
// take rounded operands (q^ and k^ after the L2 normalisation), P = c a and dS are rounded per
// block, on the survivor lists and on crowded tiles alike. As for the dense transforms
// (test_low_precision_backward.cc), an entry within rounding of a midpoint of its format may
// round the other way in the kernel (fp32 products) and the reference (fp64): every row must
// match within 2e-5 but 2% + 2 of them, which stay within `flip`; and the rounding must move
// the gradients by more than ten times that.
void ExpectLowPrecisionBackwardMatchesReference(const AttentionShape& shape, bool causal,
                                                const char* text, const char* precision,
                                                double flip) {
  const ThresholdOptions threshold = ParseThreshold(text);
  TwoViewCase c(shape, causal, Layout::kBHTD);
  const ReferenceThresholdGradients fp32 =
      ReferenceThresholdBackward(shape, c.options(), threshold, c.Dense(), c.first.d_o.Dense());
  c.first.options.precision = ParsePrecision(precision);
  const ReferenceThresholdGradients ref =
      ReferenceThresholdBackward(shape, c.options(), threshold, c.Dense(), c.first.d_o.Dense());
  EXPECT_GT(test::ScaledMaxError(ref.dq[0], fp32.dq[0]) + test::ScaledMaxError(ref.dv, fp32.dv),
            2e-4)
      << precision << ": the rounding changed too little to test";
  const size_t dim = size_t(shape.head_dim);
  for (const std::string& target : test::SupportedTargets()) {
    const test::ScopedTarget pin(target);
    ASSERT_TRUE(pin.ok) << target;
    const ThresholdGradRun run = RunBackward(c, threshold, Layout::kBHTD);
    const std::string where = std::string(text) + " " + precision + " on " + target +
                              (causal ? " causal" : " full") + " T" +
                              std::to_string(shape.q_len) + "x" + std::to_string(shape.kv_len);
    const auto expect_rows = [&](const char* name, const OwnedTensor& got,
                                 const std::vector<double>& want) {
      const test::RowMismatch m = test::CompareGradientRows(got.Dense(), want, dim);
      EXPECT_LE(m.bad, want.size() / dim / 50 + 2) << where << " " << name << " worst " << m.worst;
      EXPECT_LE(m.worst, flip) << where << " " << name;
    };
    for (int t = 0; t < threshold.views; ++t) {
      expect_rows(t == 0 ? "dq0" : "dq1", run.dq[t], ref.dq[t]);
      expect_rows(t == 0 ? "dk0" : "dk1", run.dk[t], ref.dk[t]);
    }
    expect_rows("dv", run.dv, ref.dv);
    // d beta and d lambda sum the unrounded dS and a dP (dP from the rounded dO and V).
    EXPECT_NEAR(run.d_beta, ref.d_beta, 1e-4 * (1.0 + std::abs(ref.d_beta))) << where;
    for (size_t h = 0; threshold.views == 2 && h < ref.d_lambda.size(); ++h) {
      EXPECT_NEAR(run.d_lambda[h], ref.d_lambda[h], 1e-4 * (1.0 + std::abs(ref.d_lambda[h])))
          << where << " head " << h;
    }
  }
}

// One query block and several key blocks; several of both with GQA. beta = 0 keeps most
// weights (crowded tiles), beta = 0.3 few (the survivor lists).
TEST(ThresholdKernel, LowPrecisionBackwardMatchesReference) {
  std::vector<test::BackwardFormatCase> cases(std::begin(test::kBackwardFormats),
                                               std::end(test::kBackwardFormats));
  cases.push_back({"qk=bf16,pv=bf16,bwd=bf16", 4e-3});
  for (const auto& [precision, flip] : cases) {
    for (const char* text :
         {"views=2,p=2,beta=0.3", "views=2,p=2,beta=0", "views=1,p=3,beta=0.2,l2=0"}) {
      for (bool causal : {false, true}) {
        ExpectLowPrecisionBackwardMatchesReference({1, 2, 1, 70, 130, 16}, causal, text,
                                                   precision, flip);
      }
    }
    ExpectLowPrecisionBackwardMatchesReference({2, 4, 2, 200, 230, 32}, true,
                                               "views=2,p=2,beta=0.3", precision, flip);
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
  ThresholdForwardArgs args = c.Args();
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
  AttentionOptions capped;
  capped.softcap = 30.0f;
  expect_rejected(capped, two_views, args, "softcap");
  const float slopes[2] = {0.5f, 0.25f};
  AttentionOptions biased;
  biased.alibi_slopes = slopes;
  expect_rejected(biased, two_views, args, "ALiBi");
  AttentionOptions windowed;
  windowed.window = 3;
  expect_rejected(windowed, two_views, args, "windows");
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
