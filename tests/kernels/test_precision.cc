// The precision option (docs/math.md §4) on the exact kernels: its text, the simulation path against
// the reference (which quantizes the same operands with the same quantizers), what it costs in
// accuracy, and bad input. K-interval and thresholded kernels are checked with low-precision
// operands in their own suites.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/entry/decode_plan.h"
#include "kernels/native/bf16_pair_products.h"
#include "kernels/native/native_paths.h"
#include "kernels/precision.h"
#include "kernels/prepared_kv.h"
#include "kernels/skeleton/tile_sizes.h"
#include "tests/kernels/attention_case.h"

namespace lpattn::test {
namespace {

TEST(PrecisionOptions, ParsesAndFormatsBack) {
  const Precision p = ParsePrecision("qk=int8,pv=fp8e4m3,gran=token:smooth_k=1");
  EXPECT_EQ(p.qk, quant::Format::kInt8);
  EXPECT_EQ(p.pv, quant::Format::kFp8E4M3);
  EXPECT_EQ(p.granularity, quant::Granularity::kToken);
  EXPECT_TRUE(p.smooth_k);
  EXPECT_EQ(FormatPrecision(p), "qk=int8:pv=fp8e4m3:gran=token:smooth_k=1");
  EXPECT_EQ(FormatPrecision(ParsePrecision(FormatPrecision(p))), FormatPrecision(p));
  EXPECT_EQ(FormatPrecision(ParsePrecision("")), "");
  EXPECT_EQ(ParsePrecision("path=sim").path, ComputePath::kSimulated);
  EXPECT_EQ(ParsePrecision("p=int8").p, quant::Format::kInt8);
  EXPECT_FALSE(ParsePrecision("p=int8").IsFp32());
  EXPECT_EQ(ParsePrecision("p=int8").PScale(), 1.0f / 127.0f);
  EXPECT_EQ(FormatPrecision(ParsePrecision("pv=bf16,p=fp8e4m3")), "pv=bf16:p=fp8e4m3");
  EXPECT_EQ(FormatPrecision(ParsePrecision("qk=bf16,path=sim")), "qk=bf16:path=sim");
  EXPECT_TRUE(ParsePrecision("qk=fp32,pv=fp32").IsFp32());
  EXPECT_EQ(ParsePrecision("block=32").block, 32);
  // Q cannot take per-channel scales (they would sit inside the dot product): per token.
  EXPECT_EQ(ParsePrecision("gran=channel").QuerySpec().granularity, quant::Granularity::kToken);
  EXPECT_EQ(ParsePrecision("gran=channel").KeySpec().granularity, quant::Granularity::kChannel);
  // V may take its own granularity; it follows gran otherwise.
  const Precision v = ParsePrecision("qk=int8,pv=int8,gran=token,vgran=channel");
  EXPECT_EQ(v.KeySpec().granularity, quant::Granularity::kToken);
  EXPECT_EQ(v.ValueSpec().granularity, quant::Granularity::kChannel);
  EXPECT_EQ(ParsePrecision("gran=tensor").ValueSpec().granularity, quant::Granularity::kTensor);
  EXPECT_EQ(FormatPrecision(v), "qk=int8:pv=int8:gran=token:vgran=channel");
  EXPECT_EQ(FormatPrecision(ParsePrecision(FormatPrecision(v))), FormatPrecision(v));
}

TEST(PrecisionOptions, RejectsBadTextNamingTheItem) {
  for (const char* text : {"qk=int4", "pv=", "gran=row", "block=0", "block=2.5", "smooth_k=yes",
                           "p=int4", "qk", "path=fast", "vgran=column"}) {
    try {
      ParsePrecision(text);
      ADD_FAILURE() << "accepted " << text;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("precision"), std::string::npos) << e.what();
    }
  }
  try {
    ParsePrecision("qk=int4");
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fp8e4m3"), std::string::npos) << e.what();
  }
}

// Forward and backward against the reference on every target, with the fp32 bounds of
// test_exact_kernels.cc: the quantized operands are exact inputs to both.
void ExpectMatchesReference(AttentionCase c, const std::string& precision) {
  c.options.precision = ParsePrecision(precision);
  const ReferenceForwardResult ref = c.ReferenceForward();
  const ReferenceGradients grads = c.ReferenceBackward();
  for (const std::string& target : SupportedTargets()) {
    SCOPED_TRACE(precision + " on " + target);
    ScopedTarget pin(target);
    ASSERT_TRUE(pin.ok);
    const KernelOutputs out = c.Run();
    EXPECT_LE(ScaledMaxError(out.o.Dense(), ref.o), 1e-5) << "O";
    EXPECT_LE(ScaledMaxError(ToDouble(out.lse), ref.lse), 1e-5) << "lse";
    EXPECT_LE(ScaledMaxError(out.dq.Dense(), grads.dq), 2e-5) << "dQ";
    EXPECT_LE(ScaledMaxError(out.dk.Dense(), grads.dk), 2e-5) << "dK";
    EXPECT_LE(ScaledMaxError(out.dv.Dense(), grads.dv), 2e-5) << "dV";
  }
}

const char* const kPrecisions[] = {
    "qk=int8,pv=int8",          "qk=int8,gran=tensor",       "qk=fp8e4m3,pv=fp8e4m3,gran=token",
    "qk=fp8e5m2,pv=bf16,block=16", "qk=bf16,pv=bf16",        "qk=fp16,pv=fp16",
    "qk=int8,pv=int8,gran=channel,smooth_k=1"};

TEST(PrecisionKernels, ExactMatchesReferenceWithEveryFormatAndGranularity) {
  for (const char* precision : kPrecisions) {
    for (bool causal : {false, true}) {
      ExpectMatchesReference(AttentionCase({1, 2, 1, 65, 65, 64}, causal, SinkMode::kNone,
                                           Layout::kBHTD),
                             precision);
      ExpectMatchesReference(AttentionCase({2, 4, 2, 70, 130, 32}, causal, SinkMode::kLearned,
                                           Layout::kBTHD, 3),
                             precision);
    }
  }
}

// Case c's forward with `precision` on the simulation path, then on the native path (where
// c's precision is left).
std::pair<KernelOutputs, KernelOutputs> SimulatedAndNative(AttentionCase& c,
                                                           const std::string& precision) {
  c.options.precision = ParsePrecision(precision + ",path=sim");
  KernelOutputs simulated = c.Run(false);
  c.options.precision = ParsePrecision(precision);
  return {std::move(simulated), c.Run(false)};
}

// The native path (bf16/fp16 K and V decoded tile by tile in the forward, fp8 ones with their
// token scales; int8 Q K^T, and int8 P V with p = int8 and V's scale per tensor or per channel,
// as exact integer sums scaled once; bf16 products on AMX tiles where the CPU has them) and the
// simulation path give the same numbers up to fp32 rounding.
// Odd head dimensions exercise the decoder's tails and the int8 path's padded channel pair;
// D 40 a cast Q's rows packed in vector blocks and their tail columns (PackTransposed).
TEST(PrecisionKernels, NativeAndSimulatedPathsAgree) {
  for (const char* precision : {"qk=bf16,pv=bf16", "qk=fp16,pv=fp16", "qk=bf16,pv=int8",
                                "qk=int8,pv=fp16", "qk=fp16,pv=bf16,gran=token",
                                "qk=int8,pv=int8,gran=tensor", "qk=int8,pv=bf16,block=16",
                                "qk=int8,pv=int8,p=int8,gran=tensor", "pv=int8,p=int8,gran=tensor",
                                "qk=int8,pv=int8,p=int8,gran=token,vgran=channel",
                                "pv=int8,p=int8,vgran=channel",
                                "qk=fp8e4m3,pv=fp8e4m3,gran=token", "qk=fp8e5m2,pv=fp8e4m3,block=16",
                                "qk=bf16,pv=fp8e5m2,gran=tensor", "qk=bf16,pv=bf16,p=bf16"}) {
    for (const AttentionShape shape : {AttentionShape{1, 2, 1, 65, 65, 64},
                                       AttentionShape{2, 4, 2, 70, 130, 3},
                                       AttentionShape{1, 2, 2, 130, 40, 80},
                                       AttentionShape{1, 1, 1, 20, 20, 40}}) {
      AttentionCase c(shape, true, SinkMode::kNone, Layout::kBTHD, 5);
      for (const std::string& target : SupportedTargets()) {
        SCOPED_TRACE(std::string(precision) + " on " + target + " D" +
                     std::to_string(shape.head_dim));
        ScopedTarget pin(target);
        ASSERT_TRUE(pin.ok);
        const auto [simulated, native] = SimulatedAndNative(c, precision);
        EXPECT_LE(ScaledMaxError(native.o.Dense(), simulated.o.Dense()), 1e-6);
        EXPECT_LE(ScaledMaxError(ToDouble(native.lse), ToDouble(simulated.lse)), 1e-6);
      }
    }
  }
}

// K and V prepared once give the forward's very bits, hold half of fp32's bytes in bf16, and do
// not need the float K and V afterwards.
TEST(PreparedKv, ForwardMatchesThePlainCallAndHoldsLessStorage) {
  const AttentionShape shape{2, 4, 2, 70, 130, 32};
  for (const char* precision : {"", "qk=bf16,pv=bf16", "qk=int8,pv=int8", "qk=int8,pv=fp16",
                                "qk=fp8e4m3,pv=fp8e4m3,gran=token", "qk=int8,pv=bf16,path=sim",
                                "qk=int8,pv=int8,p=int8,gran=tensor",
                                "qk=int8,pv=int8,p=int8,gran=token,vgran=channel"}) {
    AttentionCase c(shape, true, SinkMode::kLearned, Layout::kBTHD, 4);
    c.options.precision = ParsePrecision(precision);
    for (const std::string& target : SupportedTargets()) {
      SCOPED_TRACE(std::string(precision) + " on " + target);
      ScopedTarget pin(target);
      ASSERT_TRUE(pin.ok);
      const KernelOutputs plain = c.Run(false);
      AttentionCase scratch = c;  // K and V are overwritten once prepared
      const PreparedKv kv(shape, c.options.precision, scratch.k.cview(), scratch.v.cview());
      for (float& x : scratch.k.storage) x = NAN;
      for (float& x : scratch.v.storage) x = NAN;
      OwnedTensor o(2, 4, 70, 32, Layout::kBTHD);
      std::vector<float> lse(2 * 4 * 70);
      ExactForward(shape, c.options, c.q.cview(), kv, o.view(), lse.data());
      const bool coded = std::string(precision).find("bf16,pv=bf16") != std::string::npos;
      if (coded) EXPECT_EQ(kv.StorageBytes(), size_t(2 * 2 * 130 * 32 * 2 * 2));
      if (std::string(precision).find("sim") != std::string::npos || std::string(precision).empty()) {
        EXPECT_EQ(kv.StorageBytes(), size_t(2 * 2 * 130 * 32 * 4 * 2));
      }
      if (std::string(precision).find("fp8") != std::string::npos) {
        // fp8 codes, one byte an element, and a scale per token, for K and for V.
        EXPECT_EQ(kv.StorageBytes(), size_t(2 * (2 * 2 * 130 * 32 + 2 * 2 * 130 * 4)));
      }
      if (std::string(precision).find("vgran=channel") != std::string::npos) {
        // Both integer paths, with per-token K scales and one V scale per (batch, kv head,
        // channel), one byte an element: K as int8 rows with their code sums, V as int8 quads
        // of keys (130 keys padded to 33 quads; head_dim 32 already a multiple of 32).
        const size_t k_bytes = 2 * 2 * 130 * 32 + 2 * 2 * 130 * 4;
        const size_t v_bytes = 2 * 2 * 33 * 4 * 32;
        EXPECT_EQ(kv.StorageBytes(),
                  k_bytes + v_bytes + size_t(2 * 2 * 130 * 4 + 2 * 2 * 32 * 4));
      }
      EXPECT_EQ(o.storage, plain.o.storage);
      EXPECT_EQ(lse, plain.lse);
    }
  }
}

TEST(PreparedKv, RejectsAnotherPrecisionOrShape) {
  const AttentionShape shape{1, 2, 2, 16, 16, 8};
  AttentionCase c(shape, false, SinkMode::kNone, Layout::kBHTD);
  const PreparedKv kv(shape, ParsePrecision("qk=bf16"), c.k.cview(), c.v.cview());
  OwnedTensor o(1, 2, 16, 8, Layout::kBHTD);
  std::vector<float> lse(32);
  EXPECT_THROW(ExactForward(shape, c.options, c.q.cview(), kv, o.view(), lse.data()),
               std::invalid_argument);
  c.options.precision = ParsePrecision("qk=bf16");
  AttentionShape longer = shape;
  longer.kv_len = 17;
  EXPECT_THROW(ExactForward(longer, c.options, c.q.cview(), kv, o.view(), lse.data()),
               std::invalid_argument);
  EXPECT_NO_THROW(ExactForward(shape, c.options, c.q.cview(), kv, o.view(), lse.data()));
  c.k.at(0, 1, 3, 2) = NAN;
  EXPECT_THROW(PreparedKv(shape, ParsePrecision("qk=int8"), c.k.cview(), c.v.cview()),
               std::invalid_argument);
}

// §4 P quantization (the weights fed to P V, each relative to its row's running max): O against a
// reference that rounds the same weights. The kernel's fp32 weight and the reference's rounded
// fp64 one may fall on either side of a rounding boundary; such a flip moves one row of O by one
// step of the format, so up to 1% + 1 rows may differ, each by at most 0.05 (over 1 + max |O|).
// lse does not change (Z sums the unrounded weights), and the backward uses P unrounded (its
// Delta = dO . o takes the rounded forward's o).
void ExpectRoundedWeightsMatchReference(AttentionCase c, const std::string& precision) {
  c.options.precision = ParsePrecision(precision);
  const ReferenceForwardResult ref = c.ReferenceForward();
  const ReferenceGradients grads = c.ReferenceBackward();
  AttentionCase unrounded = c;
  unrounded.options.precision.p = quant::Format::kFp32;
  const std::vector<double> o_unrounded = unrounded.ReferenceForward().o;
  const size_t dim = size_t(c.shape.head_dim), rows = ref.o.size() / dim;
  for (const std::string& target : SupportedTargets()) {
    SCOPED_TRACE(precision + " on " + target);
    ScopedTarget pin(target);
    ASSERT_TRUE(pin.ok);
    const KernelOutputs out = c.Run();
    const std::vector<double> o = out.o.Dense();
    double scale = 0.0;
    for (double x : ref.o) scale = std::max(scale, std::abs(x));
    size_t flipped = 0;
    for (size_t r = 0; r < rows; ++r) {
      double err = 0.0;
      for (size_t x = 0; x < dim; ++x) err = std::max(err, std::abs(o[r * dim + x] - ref.o[r * dim + x]));
      err /= 1.0 + scale;
      EXPECT_LE(err, 0.05) << "row " << r;
      flipped += err > 1e-5 ? 1 : 0;
    }
    EXPECT_LE(flipped, rows / 100 + 1);
    EXPECT_LE(ScaledMaxError(ToDouble(out.lse), ref.lse), 1e-5) << "lse";
    EXPECT_GT(ScaledMaxError(o, o_unrounded), 1e-4) << "rounding P changed nothing";
    EXPECT_LE(ScaledMaxError(out.dq.Dense(), grads.dq), 1e-3) << "dQ";
    EXPECT_LE(ScaledMaxError(out.dk.Dense(), grads.dk), 1e-3) << "dK";
    EXPECT_LE(ScaledMaxError(out.dv.Dense(), grads.dv), 1e-3) << "dV";
  }
}

// A sliding window (docs/math.md §1.5) starts most rows' visible keys inside a block of
// kBlockKeys keys: the block's max must still join the running max P is rounded against. The
// reference skipped the block's start when its first key was hidden, and rounded against -inf
// (NaN weights) or the sink alone (a fuzzing finding).
TEST(PrecisionKernels, RoundedWeightsWithASlidingWindowMatchTheReference) {
  for (const char* precision : {"p=int8", "p=fp8e4m3", "p=bf16"}) {
    for (SinkMode sink : {SinkMode::kNone, SinkMode::kLearned, SinkMode::kOffByOne}) {
      for (int64_t window : {7, 60}) {
        AttentionCase c({1, 4, 2, 17, 130, 16}, window == 7, sink, Layout::kBHTD, 5);
        c.options.window = window;
        ExpectRoundedWeightsMatchReference(c, precision);
      }
    }
  }
}

// docs/design.md §8: a forward with kDecodeOnceTiles query tiles per kv head or more decodes
// its coded K and V once per call (in the call: takes their rounded fp32 copies), a decode step
// or a short prefill per key tile, and a copy over kMaxDecodedBytes is not made.
TEST(PrecisionKernels, PrefillDecodesCodedKvOnceByTheShape) {
  EXPECT_TRUE(DecodesKvOnce(1, 4, 1, 200, 200, 80));     // 3 tiles x a group of 4
  EXPECT_TRUE(DecodesKvOnce(2, 2, 2, 4 * kTileQ, 400, 64));
  EXPECT_FALSE(DecodesKvOnce(2, 2, 2, 3 * kTileQ, 400, 64));
  EXPECT_FALSE(DecodesKvOnce(1, 32, 8, 1, 32768, 128));  // a decode step: one grouped tile
  EXPECT_FALSE(DecodesKvOnce(1, 32, 8, 16, 32768, 128));
  EXPECT_TRUE(DecodesKvOnce(1, 32, 8, 97, 2048, 128));  // two tiles x a group of 4, 2 MiB
  EXPECT_FALSE(DecodesKvOnce(1, 32, 8, 97, 2049, 128));  // a head's K and V over 2 MiB
  EXPECT_FALSE(DecodesKvOnce(1, 8, 8, 4096, 4096, 128));
  EXPECT_TRUE(DecodesKvOnce(1, 8, 8, 4096, 4096, 64));
  EXPECT_FALSE(DecodesKvOnce(512, 8, 8, 4096, 4096, 32));  // 2 GiB a side

  AttentionProblem p{};
  p.batch = 1, p.heads = 4, p.kv_heads = 1, p.q_len = 400, p.kv_len = 400, p.dim = 64;
  EXPECT_FALSE(DecodesOnce(p, true));  // fp32 K and V: nothing to decode
  const uint16_t codes[1] = {};
  const float floats[1] = {};
  p.k_codes.data = codes;
  p.v_codes.floats = floats;  // a KvCache's fp32 V is read where it lies
  EXPECT_TRUE(DecodesOnce(p, true));
  EXPECT_FALSE(DecodesOnce(p, false));
  p.amx_qk = AmxScores::kBf16;  // the tiles read K's codes
  EXPECT_FALSE(DecodesOnce(p, true));
  p.v_codes = {};
  const uint8_t bytes[1] = {};
  p.v_codes.codes8 = bytes;
  EXPECT_TRUE(DecodesOnce(p, false));
  p.q_len = 10;  // one tile of each of 4 query heads: decoded per tile
  EXPECT_FALSE(DecodesOnce(p, false));
}

// fp16 and fp8 K on the score tiles: their rows are built once where enough query tiles would
// each convert every key tile, without decoding's 2 MiB cap a head (the rows are read in
// place), up to the same total.
TEST(PrecisionKernels, PrefillBuildsScoreTileKeyRowsOnceByTheShape) {
  EXPECT_TRUE(BuildsKeyRowsOnce(1, 8, 8, 4096, 4096, 4 * 128));  // 32 MiB of fp16 split rows
  EXPECT_FALSE(BuildsKeyRowsOnce(1, 8, 8, 3 * kTileQ, 4096, 128));
  EXPECT_TRUE(BuildsKeyRowsOnce(1, 4, 1, 200, 200, 64));  // 3 tiles x a group of 4
  EXPECT_FALSE(BuildsKeyRowsOnce(1, 32, 8, 1, 32768, 128));  // a decode step
  EXPECT_FALSE(BuildsKeyRowsOnce(64, 8, 8, 4096, 4096, 4 * 128));  // 2 GiB of rows

  AttentionProblem p{};
  p.batch = 1, p.heads = 4, p.kv_heads = 1, p.q_len = 400, p.kv_len = 400, p.dim = 64;
  const uint16_t codes[1] = {};
  p.k_codes.data = codes;
  p.k_codes.fp16 = true;
  EXPECT_FALSE(BuildsAmxKeyRows(p));  // no score tiles: decoded instead
  p.amx_qk = AmxScores::kBf16;  // bf16 codes are the rows already
  EXPECT_FALSE(BuildsAmxKeyRows(p));
  p.amx_qk = AmxScores::kFp16;
  EXPECT_TRUE(BuildsAmxKeyRows(p));
  p.amx_qk = AmxScores::kFp8;
  EXPECT_TRUE(BuildsAmxKeyRows(p));
  const int32_t table[1] = {};
  p.k_codes.block_tables = table;  // paged: converted per tile
  EXPECT_FALSE(BuildsAmxKeyRows(p));
  p.k_codes.block_tables = nullptr;
  p.q_len = 10;
  EXPECT_FALSE(BuildsAmxKeyRows(p));
}

// Decoded once or per tile, K and V take the decoders' values, which are the simulation's
// rounded ones bit for bit: so the native forward in the call, against prepared codes and the
// simulation give the same bits at prefill shapes (on a CPU whose AMX tiles read bf16 codes,
// the same values summed in another order). Strided [B, T, H, D] K and V, odd head dimensions
// (padded rows), GQA and tensor, token and block scales for fp8.
TEST(PrecisionKernels, PrefillDecodedOnceGivesTheDecodersBits) {
  // bf16 on pair tiles (AMX or the dot tiles) sums in another order than the decoded path.
  const bool tiles = native::Bf16PairsEnabled();
  for (const AttentionShape shape : {AttentionShape{1, 4, 1, 200, 200, 80},
                                     AttentionShape{2, 2, 2, 400, 400, 35},
                                     AttentionShape{1, 2, 1, 300, 150, 32}}) {
    ASSERT_TRUE(DecodesKvOnce(size_t(shape.batch), size_t(shape.heads), size_t(shape.kv_heads),
                              size_t(shape.q_len), size_t(shape.kv_len), size_t(shape.head_dim)));
    AttentionCase c(shape, shape.q_len == shape.kv_len, SinkMode::kLearned, Layout::kBTHD, 6);
    for (const char* precision :
         {"qk=bf16,pv=bf16", "qk=fp16,pv=fp16", "qk=fp8e4m3,pv=fp8e4m3,gran=token",
          "qk=fp8e5m2,pv=bf16,block=16", "qk=bf16,pv=fp8e4m3,gran=tensor",
          "qk=bf16,pv=bf16,p=bf16"}) {
      for (const std::string& target : SupportedTargets()) {
        SCOPED_TRACE(std::string(precision) + " on " + target + " D" +
                     std::to_string(shape.head_dim));
        ScopedTarget pin(target);
        ASSERT_TRUE(pin.ok);
        const auto [simulated, in_call] = SimulatedAndNative(c, precision);
        const PreparedKv kv(shape, c.options.precision, c.k.cview(), c.v.cview());
        OwnedTensor o(shape.batch, shape.heads, shape.q_len, shape.head_dim, Layout::kBTHD);
        std::vector<float> lse(size_t(shape.batch * shape.heads * shape.q_len));
        ExactForward(shape, c.options, c.q.cview(), kv, o.view(), lse.data());
        if (tiles) {
          // With p=bf16 a weight whose fp32 score differs by an ulp may round to the other
          // bf16 neighbour: O moves by one bf16 step (2^-8) of one weight.
          const double bound =
              std::string(precision).find("p=bf16") != std::string::npos ? 2e-3 : 1e-6;
          EXPECT_LE(ScaledMaxError(in_call.o.Dense(), simulated.o.Dense()), bound);
          EXPECT_LE(ScaledMaxError(o.Dense(), simulated.o.Dense()), bound);
          continue;
        }
        EXPECT_EQ(in_call.o.storage, simulated.o.storage);
        EXPECT_EQ(in_call.lse, simulated.lse);
        EXPECT_EQ(o.storage, simulated.o.storage);
        EXPECT_EQ(lse, simulated.lse);
      }
    }
  }
}

TEST(PrecisionKernels, RoundedWeightsMatchTheReference) {
  for (const char* precision : {"p=int8", "p=fp8e4m3", "p=fp8e5m2", "p=bf16",
                                "qk=int8,pv=int8,p=int8", "qk=bf16,pv=bf16,p=fp8e4m3",
                                "qk=bf16,pv=bf16,p=bf16",  // on AMX tiles where the CPU has them
                                "qk=int8,pv=int8,p=int8,gran=tensor"}) {
    for (bool causal : {false, true}) {
      ExpectRoundedWeightsMatchReference(
          AttentionCase({1, 2, 1, 65, 65, 64}, causal, SinkMode::kNone, Layout::kBHTD), precision);
      ExpectRoundedWeightsMatchReference(
          AttentionCase({2, 4, 2, 70, 130, 32}, causal, SinkMode::kLearned, Layout::kBTHD, 3),
          precision);
    }
  }
}

// fp32 written out is the default, the backward's (docs/math.md §4.2) too: the same bits.
TEST(PrecisionKernels, ExplicitFp32IsTheDefaultBitForBit) {
  AttentionCase c({1, 2, 1, 65, 65, 32}, true, SinkMode::kNone, Layout::kBHTD);
  const KernelOutputs plain = c.Run();
  c.options.precision =
      ParsePrecision("qk=fp32,pv=fp32,gran=token,smooth_k=1,bwd=fp32,bwd_dp=fp32");
  const KernelOutputs explicit_fp32 = c.Run();
  EXPECT_EQ(plain.o.storage, explicit_fp32.o.storage);
  EXPECT_EQ(plain.dq.storage, explicit_fp32.dq.storage);
  EXPECT_EQ(plain.dk.storage, explicit_fp32.dk.storage);
  EXPECT_EQ(plain.dv.storage, explicit_fp32.dv.storage);
}

// What quantization costs O, relative to fp32 (relative L2): bf16 about its 2^-9 step, int8
// per block around 1%, fp8 e4m3 a few percent; and none of them is free.
TEST(PrecisionKernels, ErrorAgainstFp32FollowsTheFormatsResolution) {
  AttentionCase c({1, 4, 4, 256, 256, 64}, true, SinkMode::kNone, Layout::kBHTD, 9);
  const std::vector<double> exact = c.ReferenceForward().o;
  auto error = [&](const char* precision) {
    c.options.precision = ParsePrecision(precision);
    const std::vector<double> o = c.Run(false).o.Dense();
    double num = 0, den = 0;
    for (size_t i = 0; i < o.size(); ++i) {
      num += (o[i] - exact[i]) * (o[i] - exact[i]);
      den += exact[i] * exact[i];
    }
    return std::sqrt(num / den);
  };
  const double bf16 = error("qk=bf16,pv=bf16"), int8 = error("qk=int8,pv=int8");
  const double e4m3 = error("qk=fp8e4m3,pv=fp8e4m3");
  EXPECT_GT(bf16, 1e-4);
  EXPECT_LT(bf16, 4e-3);
  EXPECT_GT(int8, bf16);
  EXPECT_LT(int8, 3e-2);
  EXPECT_GT(e4m3, int8);
  EXPECT_LT(e4m3, 1e-1);
}

TEST(PrecisionKernels, BadInputIsRejectedBeforeAnyWork) {
  AttentionCase c({1, 2, 1, 16, 16, 8}, false, SinkMode::kNone, Layout::kBHTD);
  c.options.precision.qk = quant::Format::kInt8;
  c.options.precision.block = 0;
  EXPECT_THROW(c.Run(false), std::invalid_argument);
  c.options.precision.block = 64;
  c.k.at(0, 0, 5, 3) = NAN;  // an int8 scale cannot be NaN
  OwnedTensor o(1, 2, 16, 8, Layout::kBHTD);
  std::vector<float> lse(32, 7.0f);
  for (float& x : o.storage) x = 7.0f;
  try {
    ExactForward(c.shape, c.options, {c.q.cview(), c.k.cview(), c.v.cview(), o.view(), lse.data()});
    ADD_FAILURE() << "NaN in K accepted by an int8 quantizer";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("quantized K"), std::string::npos) << e.what();
  }
  for (float x : o.storage) EXPECT_EQ(x, 7.0f);
  for (float x : lse) EXPECT_EQ(x, 7.0f);
}

}  // namespace
}  // namespace lpattn::test
