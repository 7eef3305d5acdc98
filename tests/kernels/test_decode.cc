// Decode (docs/design.md §8, docs/math.md §5): few queries per head against many keys, with
// the GQA group's query heads in one tile and the keys split into blocks merged exactly; in
// every cache format, through the per-call and the prepared K and V, against the reference.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/prepared_kv.h"
#include "tests/kernels/attention_case.h"

namespace lpattn::test {
namespace {

std::vector<double> ToDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

KernelOutputs RunPrepared(const AttentionCase& c, Layout layout) {
  const AttentionShape& s = c.shape;
  const PreparedKv prepared(s, c.options.precision, c.k.cview(), c.v.cview());
  KernelOutputs out;
  out.o = OwnedTensor(s.batch, s.heads, s.q_len, s.head_dim, layout);
  out.lse.assign(size_t(s.batch * s.heads * s.q_len), 0.0f);
  ExactForward(s, c.options, c.q.cview(), prepared, out.o.view(), out.lse.data());
  return out;
}

struct DecodeCase {
  AttentionShape shape;
  bool causal;
  SinkMode sink;
  Layout layout;
};

// Shapes that take the grouped tile (q_len 1 in either layout, q_len 4 in [B, H, T, D], and in
// [B, T, H, D] through copies of Q and O) or not (no GQA), with and without split keys (over
// 1536), tails of key tiles and blocks, and head dimensions on and off the native tiles.
const DecodeCase kCases[] = {
    {{2, 8, 2, 1, 1700, 64}, true, SinkMode::kLearned, Layout::kBHTD},
    {{1, 8, 2, 1, 4000, 128}, true, SinkMode::kNone, Layout::kBTHD},
    {{1, 6, 2, 4, 3100, 80}, true, SinkMode::kOffByOne, Layout::kBHTD},
    {{1, 4, 2, 4, 1600, 64}, true, SinkMode::kLearned, Layout::kBTHD},
    {{1, 2, 2, 1, 2000, 32}, false, SinkMode::kNone, Layout::kBHTD},
    {{2, 4, 1, 3, 77, 64}, true, SinkMode::kLearned, Layout::kBHTD},
    {{2, 8, 2, 3, 1700, 64}, true, SinkMode::kLearned, Layout::kBTHD},
};

std::string Describe(const DecodeCase& k, const char* precision) {
  const AttentionShape& s = k.shape;
  return std::string(precision) + " H " + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) +
         " Tq " + std::to_string(s.q_len) + " Tk " + std::to_string(s.kv_len) + " D " +
         std::to_string(s.head_dim) + (k.layout == Layout::kBTHD ? " BTHD" : " BHTD");
}

TEST(Decode, MatchesTheReferenceInEveryCacheFormat) {
  // Tolerances over the reference of the same precision: fp32 sums (errors up to 3e-7 seen); a
  // P rounded to bf16 or int8 against each block's running max instead of the row's, whose
  // roundings differ (docs/math.md §4; up to 1.8e-4 and 2.8e-3 seen, against 0.03 for a
  // dropped block).
  const std::pair<const char*, double> kFormats[] = {
      {"", 1e-6},
      {"qk=bf16,pv=bf16", 1e-6},
      {"qk=bf16,pv=bf16,p=bf16", 1e-3},
      {"qk=fp16,pv=fp16", 1e-6},
      {"qk=int8,pv=int8,p=int8,gran=token,vgran=channel", 6e-3},
      {"qk=fp8e4m3,pv=fp8e4m3,gran=token", 1e-6},
  };
  for (const auto& [precision, tolerance] : kFormats) {
    for (const DecodeCase& k : kCases) {
      AttentionCase c(k.shape, k.causal, k.sink, k.layout, 7);
      c.options.precision = ParsePrecision(precision);
      const std::string what = Describe(k, precision);
      const KernelOutputs in_call = c.Run(false);
      const KernelOutputs prepared = RunPrepared(c, k.layout);
      const ReferenceForwardResult ref = c.ReferenceForward();
      EXPECT_LE(ScaledMaxError(in_call.o.Dense(), ref.o), tolerance) << what;
      EXPECT_LE(ScaledMaxError(ToDouble(in_call.lse), ref.lse), 1e-5) << what;
      EXPECT_LE(ScaledMaxError(prepared.o.Dense(), ref.o), tolerance) << what;
      EXPECT_LE(ScaledMaxError(ToDouble(prepared.lse), ref.lse), 1e-5) << what;
    }
  }
}

// Tiles of at most 4 rows take softmax's four-row weighting (N / 4 keys a vector: 4 on AVX3,
// 2 on AVX2, the full-width loop on 4-lane targets), masked where the causal mask cuts the
// last key tile: against the reference on every target.
TEST(Decode, FourRowTilesMatchTheReferenceOnEveryTarget) {
  const DecodeCase kFourRows[] = {
      {{1, 2, 1, 2, 150, 64}, true, SinkMode::kLearned, Layout::kBHTD},
      {{1, 2, 2, 4, 101, 32}, true, SinkMode::kNone, Layout::kBHTD},
      {{1, 4, 1, 1, 1601, 64}, true, SinkMode::kOffByOne, Layout::kBHTD},
  };
  const std::pair<const char*, double> kFormats[] = {
      {"", 1e-6}, {"qk=int8,pv=int8,p=int8,gran=token,vgran=channel", 6e-3}};
  for (const std::string& target : SupportedTargets()) {
    const ScopedTarget pin(target);
    ASSERT_TRUE(pin.ok);
    for (const auto& [precision, tolerance] : kFormats) {
      for (const DecodeCase& k : kFourRows) {
        AttentionCase c(k.shape, k.causal, k.sink, k.layout, 5);
        c.options.precision = ParsePrecision(precision);
        const KernelOutputs out = c.Run(false);
        const ReferenceForwardResult ref = c.ReferenceForward();
        EXPECT_LE(ScaledMaxError(out.o.Dense(), ref.o), tolerance)
            << target << " " << Describe(k, precision);
        EXPECT_LE(ScaledMaxError(ToDouble(out.lse), ref.lse), 1e-5)
            << target << " " << Describe(k, precision);
      }
    }
  }
}

// The blocks and their merge order depend on the shape only: the same bits from 1, 2 or 3
// threads and from the caller's arena.
TEST(Decode, SplitKeysGiveTheSameBitsOnAnyThreadCount) {
  for (const DecodeCase& k : kCases) {
    AttentionCase c(k.shape, k.causal, k.sink, k.layout, 3);
    c.options.threads = 1;
    const KernelOutputs one = c.Run(false);
    for (const int threads : {2, 3, 0}) {
      c.options.threads = threads;
      const KernelOutputs other = c.Run(false);
      EXPECT_EQ(0, std::memcmp(one.o.storage.data(), other.o.storage.data(),
                               one.o.storage.size() * sizeof(float)))
          << Describe(k, "") << " threads " << threads;
      EXPECT_EQ(one.lse, other.lse) << Describe(k, "") << " threads " << threads;
    }
  }
}

// A decode tile of at most 4 rows takes the int8 path's dot-product scores and its P V on V's
// quads as they lie (docs/design.md §8); a tile of 5 takes the int16 pair tiles. Both make
// the same exact integer sums and scale them alike, so the rows they share come out in the
// same bits: non-causal, so that every row sees the same keys (and the same key blocks) in
// either call; tails of key tiles, quads and blocks, rows past nq in the small tile.
TEST(Decode, Int8DecodeTileGivesTheIntegerTilesBits) {
  const std::pair<AttentionShape, int64_t> kShapes[] = {  // (shape at q_len 5, rows compared)
      {{1, 3, 3, 5, 1700, 64}, 4}, {{2, 2, 2, 5, 77, 80}, 3}, {{1, 2, 1, 5, 3001, 128}, 1}};
  for (const char* precision : {"qk=int8,pv=int8,p=int8,gran=token,vgran=channel",
                                "qk=int8,pv=int8,p=int8,gran=tensor"}) {
    for (const auto& [shape, rows] : kShapes) {
      AttentionCase tile(shape, false, SinkMode::kLearned, Layout::kBHTD, 11);
      AttentionShape few_shape = shape;
      few_shape.q_len = rows;
      AttentionCase few(few_shape, false, SinkMode::kLearned, Layout::kBHTD, 11);
      few.k = tile.k;
      few.v = tile.v;
      few.sink_logits = tile.sink_logits;
      few.options.sink_logits = few.sink_logits.data();
      for (int64_t b = 0; b < shape.batch; ++b) {
        for (int64_t h = 0; h < shape.heads; ++h) {
          for (int64_t i = 0; i < shape.q_len; ++i) {
            for (int64_t c = 0; c < shape.head_dim; ++c) {
              // The rows only the tile has are small, so that a scale per tensor is Q's rows'.
              if (i >= rows) tile.q.at(b, h, i, c) *= 0.01f;
              if (i < rows) few.q.at(b, h, i, c) = tile.q.at(b, h, i, c);
            }
          }
        }
      }
      tile.options.precision = few.options.precision = ParsePrecision(precision);
      for (const std::string& target : SupportedTargets()) {
        const ScopedTarget pin(target);
        ASSERT_TRUE(pin.ok);
        const std::string what = target + " " + precision + " D " + std::to_string(shape.head_dim) +
                                 " Tk " + std::to_string(shape.kv_len) + " rows " + std::to_string(rows);
        for (const bool prepared : {false, true}) {
          const KernelOutputs a = prepared ? RunPrepared(tile, Layout::kBHTD) : tile.Run(false);
          const KernelOutputs z = prepared ? RunPrepared(few, Layout::kBHTD) : few.Run(false);
          for (int64_t b = 0; b < shape.batch; ++b) {
            for (int64_t h = 0; h < shape.heads; ++h) {
              for (int64_t i = 0; i < rows; ++i) {
                const size_t row_a = size_t((b * shape.heads + h) * shape.q_len + i);
                const size_t row_z = size_t((b * shape.heads + h) * rows + i);
                ASSERT_EQ(a.lse[row_a], z.lse[row_z]) << what << (prepared ? " prepared" : "");
                for (int64_t c = 0; c < shape.head_dim; ++c) {
                  ASSERT_EQ(a.o.at(b, h, i, c), z.o.at(b, h, i, c))
                      << what << (prepared ? " prepared" : "") << " row " << i << " channel " << c;
                }
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace lpattn::test
