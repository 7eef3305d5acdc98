// The low-precision backward (docs/math.md §4.2) on the exact kernels: the bwd and bwd_dp
// options, the kernels against the fp64 reference that rounds the same operands, P and dS blocks
// the same way, what each format costs the gradients, and what it refuses. The K-interval and
// thresholded backwards with it are checked in test_kinterval_kernel.cc and
// test_threshold_kernel.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/precision.h"
#include "tests/kernels/attention_case.h"

namespace lpattn::test {
namespace {

using quant::Format;

TEST(LowPrecisionBackwardOptions, ParseFormatAndDefaultTheDpProduct) {
  const Precision bf16 = ParsePrecision("bwd=bf16");
  EXPECT_EQ(bf16.bwd, Format::kBf16);
  EXPECT_EQ(bf16.BackwardDpFormat(), Format::kBf16);
  EXPECT_TRUE(bf16.IsFp32());  // the forward is untouched
  EXPECT_FALSE(bf16.BackwardIsFp32());
  // int8 keeps dO V^T in 16 bits unless told otherwise.
  EXPECT_EQ(ParsePrecision("bwd=int8").BackwardDpFormat(), Format::kBf16);
  EXPECT_EQ(ParsePrecision("bwd=int8,bwd_dp=int8").BackwardDpFormat(), Format::kInt8);
  EXPECT_EQ(ParsePrecision("bwd_dp=fp16").bwd, Format::kFp32);
  EXPECT_FALSE(ParsePrecision("bwd_dp=fp16").BackwardIsFp32());
  EXPECT_TRUE(ParsePrecision("bwd=fp32").BackwardIsFp32());
  // Sums over tokens take a scale per channel, dP's operands one per token; fp16 is scaled.
  EXPECT_EQ(ParsePrecision("bwd=int8").BackwardTokenSumSpec().granularity,
            quant::Granularity::kChannel);
  EXPECT_EQ(ParsePrecision("bwd=int8").BackwardDpSpec().granularity, quant::Granularity::kToken);
  EXPECT_TRUE(ParsePrecision("bwd=fp16").BackwardTokenSumSpec().scale_casts);
  EXPECT_FALSE(ParsePrecision("bwd=bf16").BackwardTokenSumSpec().scale_casts);
  for (const char* text : {"qk=bf16,bwd=int8,bwd_dp=int8", "bwd=fp16", "p=bf16:bwd=bf16"}) {
    EXPECT_EQ(FormatPrecision(ParsePrecision(FormatPrecision(ParsePrecision(text)))),
              FormatPrecision(ParsePrecision(text)));
  }
  EXPECT_EQ(FormatPrecision(ParsePrecision("bwd=int8,bwd_dp=int8")), "bwd=int8:bwd_dp=int8");
  for (const char* text : {"bwd=fp8e4m3", "bwd_dp=fp8e5m2", "bwd=int4", "bwd="}) {
    EXPECT_THROW(ParsePrecision(text), std::invalid_argument) << text;
  }
}

// The kernels against the reference on every target. Both round the same operand copies, but
// P and dS come from fp32 products in one and fp64 in the other, so an entry within rounding of
// a midpoint of its format may round the other way (about one in 10^4 does): each such flip
// moves one dQ and one dK row (or one dV row) by one step of the format. So every row must
// match within 2e-5 (over 1 + max |ref|) but 2% + 2 of them, which stay within `flip` (a few
// steps), and the rounding must move the gradients by more than ten times the row tolerance.
void ExpectMatchesReference(AttentionCase c, const std::string& precision, double flip) {
  const ReferenceGradients fp32 = c.ReferenceBackward();
  c.options.precision = ParsePrecision(precision);
  const ReferenceGradients grads = c.ReferenceBackward();
  EXPECT_GT(ScaledMaxError(grads.dq, fp32.dq) + ScaledMaxError(grads.dv, fp32.dv), 2e-4)
      << precision << ": the rounding changed too little to test";
  const size_t dim = size_t(c.shape.head_dim);
  for (const std::string& target : SupportedTargets()) {
    SCOPED_TRACE(precision + " on " + target + " T" + std::to_string(c.shape.q_len) + "x" +
                 std::to_string(c.shape.kv_len) + (c.options.causal ? " causal" : ""));
    ScopedTarget pin(target);
    ASSERT_TRUE(pin.ok);
    const KernelOutputs out = c.Run();
    const struct {
      const char* name;
      RowMismatch m;
      size_t rows;
    } results[] = {{"dQ", CompareGradientRows(out.dq.Dense(), grads.dq, dim), grads.dq.size() / dim},
                   {"dK", CompareGradientRows(out.dk.Dense(), grads.dk, dim), grads.dk.size() / dim},
                   {"dV", CompareGradientRows(out.dv.Dense(), grads.dv, dim), grads.dv.size() / dim}};
    for (const auto& r : results) {
      EXPECT_LE(r.m.bad, r.rows / 50 + 2) << r.name << " worst " << r.m.worst;
      EXPECT_LE(r.m.worst, flip) << r.name;
    }
    if (c.options.sink == SinkMode::kLearned) {  // Delta from the unrounded dO: no flips
      EXPECT_LE(ScaledMaxError(ToDouble(out.d_sink), grads.d_sink), 2e-5) << "d sink";
    }
  }
}

// Short sequences (the whole-head pass: one query block, two key blocks), long ones (the
// query and key passes over several blocks, GQA, learned sinks), causal and not.
TEST(LowPrecisionBackward, ExactMatchesReferenceInEveryFormat) {
  std::vector<BackwardFormatCase> cases(std::begin(kBackwardFormats), std::end(kBackwardFormats));
  cases.insert(cases.end(), {{"bwd_dp=bf16", 4e-3},
                             {"qk=bf16,pv=bf16,p=bf16,bwd=bf16", 4e-3},
                             {"qk=int8,pv=int8,gran=token,bwd=int8", 2e-2}});
  for (const auto& [precision, flip] : cases) {
    for (bool causal : {false, true}) {
      ExpectMatchesReference(
          AttentionCase({1, 2, 1, 65, 90, 64}, causal, SinkMode::kNone, Layout::kBHTD),
          precision, flip);
      ExpectMatchesReference(
          AttentionCase({2, 4, 2, 200, 230, 32}, causal, SinkMode::kLearned, Layout::kBTHD, 3),
          precision, flip);
    }
  }
}

// Relative L2 error of the gradients against the fp32 backward, at a training-like scale of dO.
double GradientError(AttentionCase c, const std::string& precision) {
  const ReferenceGradients exact = c.ReferenceBackward();
  c.options.precision = ParsePrecision(precision);
  const KernelOutputs out = c.Run();
  double num = 0, den = 0;
  const auto add = [&](const std::vector<double>& got, const std::vector<double>& want) {
    for (size_t i = 0; i < want.size(); ++i) {
      num += (got[i] - want[i]) * (got[i] - want[i]);
      den += want[i] * want[i];
    }
  };
  add(out.dq.Dense(), exact.dq);
  add(out.dk.Dense(), exact.dk);
  add(out.dv.Dense(), exact.dv);
  return std::sqrt(num / den);
}

// What each format costs: fp16 (11 bits, scaled) below bf16 (8 bits) below int8; int8 with dO
// V^T in int8 too costs more than with it in bf16 (why bf16 is bwd=int8's default, as in
// SageBwd). dO is scaled to 1e-5, where gradients of a mean loss live: a plain fp16 cast would
// lose them to subnormals, the scaled one does not.
TEST(LowPrecisionBackward, ErrorFollowsTheFormatsResolution) {
  AttentionCase c({1, 4, 2, 256, 256, 64}, true, SinkMode::kNone, Layout::kBHTD, 9);
  for (float& x : c.d_o.storage) x *= 1e-5f;
  const double bf16 = GradientError(c, "bwd=bf16"), fp16 = GradientError(c, "bwd=fp16");
  const double int8 = GradientError(c, "bwd=int8");
  const double int8_dp = GradientError(c, "bwd=int8,bwd_dp=int8");
  RecordProperty("bf16", std::to_string(bf16));
  RecordProperty("fp16", std::to_string(fp16));
  RecordProperty("int8", std::to_string(int8));
  RecordProperty("int8_dp_int8", std::to_string(int8_dp));
  EXPECT_GT(fp16, 1e-5);
  EXPECT_LT(fp16, bf16);
  EXPECT_GT(bf16, 1e-4);
  EXPECT_LT(bf16, 1e-2);
  EXPECT_GT(int8, bf16);
  EXPECT_LT(int8, 5e-2);
  EXPECT_GT(int8_dp, int8);
}

// The forward ignores bwd (bwd=fp32 written out is the default: PrecisionKernels'
// ExplicitFp32IsTheDefaultBitForBit).
TEST(LowPrecisionBackward, TheForwardIgnoresIt) {
  AttentionCase c({1, 2, 1, 130, 130, 32}, true, SinkMode::kNone, Layout::kBHTD);
  const KernelOutputs plain = c.Run();
  c.options.precision = ParsePrecision("bwd=int8");
  const KernelOutputs int8 = c.Run();
  EXPECT_EQ(plain.o.storage, int8.o.storage);
  EXPECT_NE(plain.dq.storage, int8.dq.storage);
}

// A scaled format cannot scale a non-finite dO: a clear error before any gradient is written.
TEST(LowPrecisionBackward, RefusesWhatItCannotRound) {
  AttentionCase c({1, 2, 1, 16, 16, 8}, false, SinkMode::kNone, Layout::kBHTD);
  c.options.precision = ParsePrecision("bwd=int8");
  c.d_o.storage[5] = NAN;
  try {
    c.Run();
    ADD_FAILURE() << "a NaN dO was scaled";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("dO"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lpattn::test
