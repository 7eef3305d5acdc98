// Split-KV decode over K and V that lay a token's kv heads side by side (token-major pages,
// [B, T, H, D] tensors): tasks that walk several kv heads' tiles in lockstep through each key
// tile (docs/design.md §8). The plan's span by shape and strides; the spanned forwards giving
// the bits of the same call over a head-major layout, which no task spans (every cache format,
// exact and K-interval, any thread count), and the fp64 reference's values.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/entry/decode_plan.h"
#include "kernels/kinterval.h"
#include "kernels/kv_cache.h"
#include "kernels/skeleton/tile_sizes.h"
#include "tests/kernels/attention_case.h"
#include "tests/kernels/kv_cache_case.h"

namespace lpattn::test {
namespace {

TEST(SpannedDecode, ThePlanSpansKvHeadsThatLieSideBySide) {
  const size_t heads = 8, tokens = 5 * kKeyBlock, dim = 64;  // 5 key blocks
  AttentionProblem p{};
  p.batch = 4, p.heads = heads, p.kv_heads = heads, p.q_len = 4, p.kv_len = tokens, p.dim = dim;
  p.key_block = kKeyBlock;
  const Strides bthd = ContiguousBTHD(int64_t(heads), int64_t(tokens), int64_t(dim));
  const Strides bhtd = ContiguousBHTD(int64_t(heads), int64_t(tokens), int64_t(dim));
  ForwardArgs args{};
  args.k.strides = args.v.strides = bthd;
  EXPECT_EQ(SpanHeads(p, args), 8u);  // 4 batches x 5 blocks: 20 tasks
  p.batch = 2;
  EXPECT_EQ(SpanHeads(p, args), 4u);  // 2 x 5 would be 10 tasks: 2 x 2 x 5
  p.batch = 1;
  EXPECT_EQ(SpanHeads(p, args), 2u);  // at least two heads whatever the task count
  p.batch = 4;
  args.k.strides = bhtd;
  EXPECT_EQ(SpanHeads(p, args), 8u);  // V alone side by side
  args.v.strides = bhtd;
  EXPECT_EQ(SpanHeads(p, args), 1u);  // a head's rows contiguous: a task per head
  args.k.strides = args.v.strides = bthd;
  p.q_len = kSpanRows + 1;
  EXPECT_EQ(SpanHeads(p, args), 1u);  // tiles too tall to hold one per head
  p.q_len = 1;
  p.key_block = 0;
  EXPECT_EQ(SpanHeads(p, args), 1u);  // no split-KV
  p.key_block = kKeyBlock, p.kv_len = kKeyBlock;
  EXPECT_EQ(SpanHeads(p, args), 1u);  // one block
  p.kv_len = tokens, p.heads = 4 * heads;
  EXPECT_EQ(SpanHeads(p, args), 1u);  // ungrouped query heads: several tiles per kv head
  p.heads = heads;

  // A KvCache's pages: token-major codes, head-major codes, and int8 K's own rows.
  args.k.strides = args.v.strides = bhtd;
  const float floats[1] = {};
  const int32_t table[1] = {};
  p.k_codes.floats = p.v_codes.floats = floats;
  p.k_codes.block_tables = p.v_codes.block_tables = table;
  p.k_codes.strides = p.v_codes.strides = {0, int64_t(dim), int64_t(heads * dim)};
  EXPECT_EQ(SpanHeads(p, args), 8u);
  p.k_codes.strides = p.v_codes.strides = {0, int64_t(16 * dim), int64_t(dim)};
  EXPECT_EQ(SpanHeads(p, args), 1u);
  const int8_t rows[1] = {};
  p.k_codes = {};
  p.int_qk.k_rows = rows;
  p.int_qk.block_tables = table;
  p.int_qk.block_shift = 4;
  p.int_qk.row_strides = {int64_t(16 * heads), 1, int64_t(heads)};
  EXPECT_EQ(SpanHeads(p, args), 8u);
  p.int_qk.row_strides = {int64_t(16 * heads), 16, 1};
  EXPECT_EQ(SpanHeads(p, args), 1u);
}

// A cache of the case's sequences (each one a copy of c's K and V, offset by the slot).
KvCache CacheOf(const FormatPair& f, const std::vector<AttentionCase>& cases,
                const CacheLayout& layout) {
  const AttentionShape& s = cases[0].shape;
  KvCache cache = MakeCache(f, int64_t(cases.size()), s.kv_heads, s.head_dim, s.kv_len, layout);
  for (size_t b = 0; b < cases.size(); ++b) {
    AppendRange(cache, int64_t(b), cases[b].k, cases[b].v, 0, s.kv_len);
  }
  return cache;
}

// The call's Q: sequence b's rows are cases[b]'s.
OwnedTensor QueriesOf(const std::vector<AttentionCase>& cases) {
  const AttentionShape& s = cases[0].shape;
  OwnedTensor q(int64_t(cases.size()), s.heads, s.q_len, s.head_dim, Layout::kBHTD);
  for (size_t b = 0; b < cases.size(); ++b) {
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t t = 0; t < s.q_len; ++t)
        for (int64_t c = 0; c < s.head_dim; ++c) {
          q.at(int64_t(b), h, t, c) = cases[b].q.at(0, h, t, c);
        }
  }
  return q;
}

struct CachedRun {
  std::vector<float> o, lse;
};

CachedRun RunCached(const std::vector<AttentionCase>& cases, const KvCache& cache,
                    const OwnedTensor& q, int threads, const std::string& base = "") {
  const AttentionShape& s = cases[0].shape;
  const int64_t batch = int64_t(cases.size());
  AttentionOptions options = cases[0].options;
  options.precision = CachePrecision(cache.config(), ParsePrecision(base));
  options.threads = threads;
  OwnedTensor o(batch, s.heads, s.q_len, s.head_dim, Layout::kBHTD);
  CachedRun run{{}, std::vector<float>(size_t(batch * s.heads * s.q_len))};
  ExactForward({batch, s.heads, s.kv_heads, s.q_len, 1, s.head_dim}, options, q.cview(), cache,
               o.view(), run.lse.data());
  run.o = o.storage;
  return run;
}

// 4 sequences of 8 kv heads and 5 key blocks: 20 tasks of 8 heads each. Every format, decode
// tiles of 4 rows (q_len 1 at G = 4, q_len 2 at G = 2), sinks, 1 and 2 threads.
TEST(SpannedDecode, TokenMajorPagesGiveTheHeadMajorBits) {
  const int64_t kv_heads = 8, dim = 64, tokens = 4 * int64_t(kKeyBlock) + 100;
  for (const int64_t q_len : {1, 2}) {
    const int64_t heads = kv_heads * 4 / q_len;
    std::vector<AttentionCase> cases;
    for (uint32_t b = 0; b < 4; ++b) {
      cases.emplace_back(AttentionShape{1, heads, kv_heads, q_len, tokens, dim}, true,
                         SinkMode::kOffByOne, Layout::kBHTD, 60 + b);
    }
    const OwnedTensor q = QueriesOf(cases);
    for (const FormatPair& f : kFormats) {
      const std::string what = Name(f) + " q_len " + std::to_string(q_len);
      const CachedRun want =
          RunCached(cases, CacheOf(f, cases, {16, PagedLayout::kHeadMajor}), q, 2);
      for (const CacheLayout layout : {CacheLayout{16, PagedLayout::kTokenMajor},
                                       CacheLayout{128, PagedLayout::kTokenMajor}}) {
        const KvCache cache = CacheOf(f, cases, layout);
        for (const int threads : {1, 2}) {
          const CachedRun got = RunCached(cases, cache, q, threads);
          EXPECT_EQ(got.o, want.o) << what << layout.Name() << " threads " << threads;
          EXPECT_EQ(got.lse, want.lse) << what << layout.Name() << " threads " << threads;
        }
      }
      if (f.k != Format::kFp32 || f.v != Format::kFp32) continue;
      const ReferenceForwardResult ref = cases[3].ReferenceForward();  // the last sequence's
      const size_t rows = size_t(heads * q_len);
      std::vector<double> got(want.o.end() - ptrdiff_t(rows * size_t(dim)), want.o.end());
      EXPECT_LE(ScaledMaxError(got, ref.o), 1e-6) << what;
    }
  }
}

// The products beside the few-query ones: a head dimension off whole vectors (P V as a
// register-tiled product into each head's accumulator) and pfold's integer P V.
TEST(SpannedDecode, OtherValueProductsGiveTheHeadMajorBits) {
  struct Variant {
    int64_t dim;
    FormatPair format;
    const char* base;
  };
  for (const Variant& x : {Variant{80, kFormats[0], ""}, Variant{80, kFormats[3], ""},
                           Variant{128, kFormats[3], "p=int8,pfold=1"}}) {
    std::vector<AttentionCase> cases;
    for (uint32_t b = 0; b < 4; ++b) {
      cases.emplace_back(AttentionShape{1, 32, 8, 1, 4 * int64_t(kKeyBlock) + 9, x.dim}, true,
                         SinkMode::kNone, Layout::kBHTD, 80 + b);
    }
    const OwnedTensor q = QueriesOf(cases);
    const std::string what = Name(x.format) + " D " + std::to_string(x.dim) + " " + x.base;
    const CachedRun want =
        RunCached(cases, CacheOf(x.format, cases, {16, PagedLayout::kHeadMajor}), q, 2, x.base);
    const CachedRun got =
        RunCached(cases, CacheOf(x.format, cases, {16, PagedLayout::kTokenMajor}), q, 2, x.base);
    EXPECT_EQ(got.o, want.o) << what;
    EXPECT_EQ(got.lse, want.lse) << what;
  }
}

// K-interval attention's statistics pass and weighting pass both spanned: the same m, Z and
// outputs as over head-major pages.
TEST(SpannedDecode, KIntervalStatisticsAndWeightsGiveTheHeadMajorBits) {
  const int64_t heads = 16, kv_heads = 8, tokens = 4 * int64_t(kKeyBlock) + 40, dim = 64;
  const KIntervalOptions kint = ParseKInterval("K=16");
  std::vector<AttentionCase> cases;
  for (uint32_t b = 0; b < 4; ++b) {
    cases.emplace_back(AttentionShape{1, heads, kv_heads, 1, tokens, dim}, true, SinkMode::kNone,
                       Layout::kBHTD, 70 + b);
  }
  const OwnedTensor q = QueriesOf(cases);
  const size_t rows = size_t(4 * heads);
  for (const FormatPair& f : {kFormats[0], kFormats[3]}) {
    const auto run = [&](const CacheLayout& layout) {
      const KvCache cache = CacheOf(f, cases, layout);
      KIntervalRun r{OwnedTensor(4, heads, 1, dim, Layout::kBHTD), std::vector<float>(rows),
                     std::vector<float>(rows), std::vector<float>(rows), std::vector<float>(rows),
                     std::vector<int32_t>(rows), std::vector<int32_t>(rows)};
      AttentionOptions options = cases[0].options;
      options.precision = CachePrecision(cache.config());
      options.threads = 2;
      KIntervalForward({4, heads, kv_heads, 1, 1, dim}, options, kint, q.cview(), cache, r.o.view(),
                       r.saved());
      return r;
    };
    const KIntervalRun want = run({16, PagedLayout::kHeadMajor});
    const KIntervalRun got = run({16, PagedLayout::kTokenMajor});
    EXPECT_EQ(got.o.storage, want.o.storage) << Name(f);
    EXPECT_EQ(got.m, want.m) << Name(f);
    EXPECT_EQ(got.Z, want.Z) << Name(f);
    EXPECT_EQ(got.argmax, want.argmax) << Name(f);
  }
}

// An engine's own [B, T, H, D] K and V (no cache), as the in-call forward reads them: the bits
// of the same values in [B, H, T, D].
TEST(SpannedDecode, BatchTokenHeadTensorsGiveTheHeadMajorBits) {
  const AttentionShape shape{4, 16, 8, 1, 3 * int64_t(kKeyBlock) + 7, 64};
  AttentionCase c(shape, true, SinkMode::kOffByOne, Layout::kBHTD, 90);
  const auto in_layout = [&](const OwnedTensor& t, Layout layout) {
    OwnedTensor out(t.batch, t.heads, t.tokens, t.dim, layout);
    for (int64_t b = 0; b < t.batch; ++b)
      for (int64_t h = 0; h < t.heads; ++h)
        for (int64_t s = 0; s < t.tokens; ++s)
          for (int64_t d = 0; d < t.dim; ++d) out.at(b, h, s, d) = t.at(b, h, s, d);
    return out;
  };
  const OwnedTensor k = in_layout(c.k, Layout::kBTHD), v = in_layout(c.v, Layout::kBTHD);
  for (const char* precision : {"", "qk=int8,pv=int8,gran=token"}) {
    c.options.precision = ParsePrecision(precision);
    const KernelOutputs want = c.Run(false);
    OwnedTensor o(shape.batch, shape.heads, shape.q_len, shape.head_dim, Layout::kBHTD);
    std::vector<float> lse(want.lse.size());
    ExactForward(shape, c.options, {c.q.cview(), k.cview(), v.cview(), o.view(), lse.data()});
    EXPECT_EQ(o.storage, want.o.storage) << precision;
    EXPECT_EQ(lse, want.lse) << precision;
  }
}

}  // namespace
}  // namespace lpattn::test
