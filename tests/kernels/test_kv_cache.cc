// The KV cache (docs/design.md §9): appended tokens read back as the in-call quantizer makes
// them, forwards over ragged batches of cached sequences against the in-call kernel and the
// fp64 reference, decode steps against the full causal forward, and bad calls rejected with
// nothing changed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/kv_cache.h"
#include "kernels/skeleton/tile_sizes.h"
#include "quant/format.h"
#include "quant/quantizer.h"
#include "tests/kernels/attention_case.h"
#include "tests/kernels/kv_cache_case.h"

namespace lpattn::test {
namespace {

TEST(KvCache, ReadsBackWhatTheInCallQuantizerMakes) {
  for (const FormatPair& f : kFormats) {
    const int64_t kv_heads = 3, dim = 40, tokens = 53;
    KvCache cache(Config(f, 2, kv_heads, dim, 64));
    KvCache paged = MakeCache(f, 2, kv_heads, dim, 64, {16, PagedLayout::kTokenMajor});
    const OwnedTensor k = Tokens(kv_heads, tokens, dim, 1), v = Tokens(kv_heads, tokens, dim, 2);
    AppendInChunks(cache, 1, k, v);
    AppendInChunks(paged, 1, k, v);
    EXPECT_EQ(cache.Length(1), tokens) << Name(f);
    EXPECT_EQ(cache.Length(0), 0) << Name(f);
    OwnedTensor k_read(1, kv_heads, tokens, dim, Layout::kBTHD);
    OwnedTensor v_read(1, kv_heads, tokens, dim, Layout::kBTHD);
    cache.Read(1, 0, tokens, k_read.view(), v_read.view());
    OwnedTensor k_paged(1, kv_heads, tokens, dim, Layout::kBTHD);
    OwnedTensor v_paged(1, kv_heads, tokens, dim, Layout::kBTHD);
    paged.Read(1, 0, tokens, k_paged.view(), v_paged.view());
    EXPECT_EQ(k_paged.storage, k_read.storage) << Name(f);
    EXPECT_EQ(v_paged.storage, v_read.storage) << Name(f);
    const std::vector<float> k_want = Dequantized(k, f.k), v_want = Dequantized(v, f.v);
    for (int64_t h = 0; h < kv_heads; ++h) {
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t c = 0; c < dim; ++c) {
          const size_t i = k.offset(0, h, t, c);
          ASSERT_EQ(k_read.at(0, h, t, c), k_want[i]) << Name(f) << " K " << h << " " << t;
          ASSERT_EQ(v_read.at(0, h, t, c), v_want[i]) << Name(f) << " V " << h << " " << t;
        }
      }
    }
    // The bytes held: one an element for the 8-bit formats (plus a scale a token).
    const size_t elements = size_t(2 * kv_heads * 64 * dim);
    const size_t per_element = size_t(quant::FormatBytes(f.k) + quant::FormatBytes(f.v));
    EXPECT_GE(cache.StorageBytes(), elements * per_element) << Name(f);
    EXPECT_LE(cache.StorageBytes(), elements * per_element + elements / dim * 12) << Name(f);
  }
}

// A ragged batch: slots of different lengths named out of order, two consecutive slots of one
// length (one kernel call), GQA, sinks, a head dimension on and one off the native tiles, q_len
// 1 and 3, contiguous and paged. Each sequence must match the in-call kernel on its own K and
// V with the same precision, and the fp64 reference.
TEST(KvCache, RaggedForwardMatchesTheInCallKernelAndTheReference) {
  const int64_t kLengths[] = {1700, 1700, 77, 2100};
  const int64_t kCall[] = {0, 1, 3, 2};
  for (const FormatPair& f : kFormats) {
    for (const auto& [q_len, dim] : {std::pair<int64_t, int64_t>{1, 64}, {3, 80}}) {
      const int64_t heads = 8, kv_heads = 2, batch = 4;
      // Each slot's sequence (one sink array for all), its in-call output and its reference.
      std::vector<AttentionCase> cases;
      std::vector<KernelOutputs> in_call;
      std::vector<ReferenceForwardResult> refs;
      for (int64_t s = 0; s < 4; ++s) {
        cases.emplace_back(AttentionShape{1, heads, kv_heads, q_len, kLengths[s], dim}, true,
                           SinkMode::kLearned, Layout::kBHTD, uint32_t(11 + s));
        AttentionCase& c = cases.back();
        c.sink_logits = cases[0].sink_logits;
        c.options.sink_logits = c.sink_logits.data();
        c.options.precision = InCallPrecision(f);
        in_call.push_back(c.Run(false));
        refs.push_back(c.ReferenceForward());
      }
      // The call's Q: sequence b is slot kCall[b]'s case's Q.
      OwnedTensor q(batch, heads, q_len, dim, Layout::kBTHD);
      for (int64_t b = 0; b < batch; ++b) {
        const OwnedTensor& src = cases[size_t(kCall[b])].q;
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t t = 0; t < q_len; ++t)
            for (int64_t c = 0; c < dim; ++c) q.at(b, h, t, c) = src.at(0, h, t, c);
      }
      const AttentionShape shape{batch, heads, kv_heads, q_len, 1, dim};
      for (const CacheLayout& layout : kLayouts) {
        KvCache cache = MakeCache(f, 4, kv_heads, dim, 2200, layout);
        for (int64_t s = 0; s < 4; ++s) AppendInChunks(cache, s, cases[size_t(s)].k, cases[size_t(s)].v);
        OwnedTensor o(batch, heads, q_len, dim, Layout::kBTHD);
        std::vector<float> lse(size_t(batch * heads * q_len));
        ExactForward(shape, cases[0].options, q.cview(), cache, o.view(), lse.data(), kCall);
        for (int64_t b = 0; b < batch; ++b) {
          const size_t s = size_t(kCall[b]);
          const std::string what = Name(f) + layout.Name() + " q_len " + std::to_string(q_len) +
                                   " sequence " + std::to_string(s);
          std::vector<double> got, got_lse;
          for (int64_t h = 0; h < heads; ++h) {
            for (int64_t t = 0; t < q_len; ++t) {
              got_lse.push_back(lse[size_t((b * heads + h) * q_len + t)]);
              for (int64_t d = 0; d < dim; ++d) got.push_back(o.at(b, h, t, d));
            }
          }
          EXPECT_LE(ScaledMaxError(got, in_call[s].o.Dense()), 1e-6) << what;
          EXPECT_LE(ScaledMaxError(got, refs[s].o), 1e-6) << what;
          EXPECT_LE(ScaledMaxError(got_lse, refs[s].lse), 1e-5) << what;
        }
      }
    }
  }
}

// Ragged queries (q_offsets): a chunk of prefill, a decode step and a draft of 3 in one call,
// Q and O as [total, heads, head_dim] tokens; each sequence as the in-call forward alone.
TEST(KvCache, RaggedQueriesMatchEachSequenceAlone) {
  const int64_t kLengths[] = {300, 1700, 90}, kQueries[] = {5, 1, 3}, kOffsets[] = {0, 5, 6, 9};
  const int64_t kCall[] = {2, 0, 1};  // slot of each sequence: 90, 300 and 1700 keys
  for (const FormatPair& f : {kFormats[0], kFormats[1], kFormats[3]}) {
    for (const CacheLayout& layout : {kLayouts[0], kLayouts[2]}) {
      const int64_t heads = 8, kv_heads = 2, dim = 64, batch = 3, total = kOffsets[batch];
      KvCache cache = MakeCache(f, 3, kv_heads, dim, 1800, layout);
      std::vector<AttentionCase> cases;
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t s = kCall[b];
        cases.emplace_back(AttentionShape{1, heads, kv_heads, kQueries[b], kLengths[s], dim}, true,
                           SinkMode::kNone, Layout::kBHTD, uint32_t(31 + b));
        cases.back().options.precision = InCallPrecision(f);
      }
      for (int64_t b = 0; b < batch; ++b) AppendInChunks(cache, kCall[b], cases[size_t(b)].k, cases[size_t(b)].v);
      OwnedTensor q(1, heads, total, dim, Layout::kBTHD), o(1, heads, total, dim, Layout::kBTHD);
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t i = 0; i < kQueries[b]; ++i)
            for (int64_t c = 0; c < dim; ++c) q.at(0, h, kOffsets[b] + i, c) = cases[size_t(b)].q.at(0, h, i, c);
      std::vector<float> lse(static_cast<size_t>(heads * total), 0.0f);
      const AttentionShape shape{batch, heads, kv_heads, 1, 1, dim};
      ExactForward(shape, cases[0].options, q.cview(), cache, o.view(), lse.data(), kCall, kOffsets);
      for (int64_t b = 0; b < batch; ++b) {
        const KernelOutputs want = cases[size_t(b)].Run(false);
        const std::string what = Name(f) + layout.Name() + " sequence " + std::to_string(b);
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t i = 0; i < kQueries[b]; ++i) {
            const size_t row = size_t(h * kQueries[b] + i);
            EXPECT_NEAR(lse[size_t(heads * kOffsets[b]) + row], want.lse[row], 1e-5) << what;
            for (int64_t c = 0; c < dim; ++c) {
              ASSERT_NEAR(o.at(0, h, kOffsets[b] + i, c), want.o.at(0, h, i, c), 1e-6) << what;
            }
          }
        }
      }
      const int64_t not_from_zero[] = {1, 5, 6, 9}, empty[] = {0, 5, 5, 9};
      EXPECT_THROW(ExactForward(shape, cases[0].options, q.cview(), cache, o.view(), lse.data(),
                                kCall, not_from_zero),
                   std::invalid_argument);
      EXPECT_THROW(ExactForward(shape, cases[0].options, q.cview(), cache, o.view(), lse.data(),
                                kCall, empty),
                   std::invalid_argument);
    }
  }
}

// A prefill chunk of 200 queries per head (3 tiles of each of 4 query heads per kv head) decodes
// the cache's coded K and V once per call (docs/design.md §8), from contiguous rows and through
// both paged layouts' block tables, int8 V included: the in-call forward of the same precision.
TEST(KvCache, PrefillChunkDecodedOnceMatchesTheInCallKernel) {
  const int64_t heads = 8, kv_heads = 2, dim = 64, queries = 200, length = 600;
  ASSERT_TRUE(DecodesKvOnce(1, heads, kv_heads, queries, length, dim));
  for (const FormatPair& f : kFormats) {
    for (const CacheLayout& layout : {kLayouts[0], kLayouts[2], kLayouts[3]}) {
      const std::string what = Name(f) + layout.Name();
      AttentionCase c({1, heads, kv_heads, queries, length, dim}, true, SinkMode::kLearned,
                      Layout::kBHTD, 41);
      c.options.precision = InCallPrecision(f);
      const KernelOutputs want = c.Run(false);
      KvCache cache = MakeCache(f, 1, kv_heads, dim, length, layout);
      AppendInChunks(cache, 0, c.k, c.v);
      OwnedTensor o(1, heads, queries, dim, Layout::kBHTD);
      std::vector<float> lse(size_t(heads * queries), 0.0f);
      const AttentionShape shape{1, heads, kv_heads, queries, 1, dim};
      ExactForward(shape, c.options, c.q.cview(), cache, o.view(), lse.data());
      for (size_t r = 0; r < lse.size(); ++r) EXPECT_NEAR(lse[r], want.lse[r], 1e-5) << what;
      EXPECT_LE(ScaledMaxError(o.Dense(), want.o.Dense()), 1e-6) << what;
    }
  }
}

// A paged cache's forward reads the same codes as the contiguous one's, one block's run of
// rows at a time: the same bits for every format and layout, for a decode step and a draft of
// 4 (the decode tiles) and a chunk of 7, over 1001 keys (an odd tail, runs cut by the blocks
// inside each key tile).
TEST(KvCache, PagedForwardGivesTheContiguousBits) {
  for (const FormatPair& f : kFormats) {
    for (const int64_t q_len : {1, 4, 7}) {
      const int64_t heads = 8, kv_heads = 2, dim = 64, tokens = 1001;
      AttentionCase c({1, heads, kv_heads, q_len, tokens, dim}, true, SinkMode::kOffByOne,
                      Layout::kBHTD, uint32_t(40 + q_len));
      c.options.threads = 2;
      const AttentionShape shape{1, heads, kv_heads, q_len, 1, dim};
      const auto forward = [&](const CacheLayout& layout, std::vector<float>& lse) {
        KvCache cache = MakeCache(f, 1, kv_heads, dim, 1100, layout);
        AppendInChunks(cache, 0, c.k, c.v);
        OwnedTensor o(1, heads, q_len, dim, Layout::kBHTD);
        lse.assign(size_t(heads * q_len), 0.0f);
        c.options.precision = CachePrecision(cache.config());
        ExactForward(shape, c.options, c.q.cview(), cache, o.view(), lse.data());
        return o.storage;
      };
      std::vector<float> lse_want, lse;
      const std::vector<float> want = forward(kLayouts[0], lse_want);
      for (const CacheLayout& layout : kLayouts) {
        const std::string what = Name(f) + layout.Name() + " q_len " + std::to_string(q_len);
        EXPECT_EQ(forward(layout, lse), want) << what;
        EXPECT_EQ(lse, lse_want) << what;
      }
    }
  }
}

// docs/design.md §9: a paged pool's blocks are padded apart by about 512 bytes of rows, never
// more than 1/32 of a block, and not at all where a block holds fewer than 32 rows; the
// padded pool holds what the unpadded one would (PagedForwardGivesTheContiguousBits).
TEST(KvCache, PagedPoolPadsItsBlocksByAtMostAThirtySecond) {
  for (const FormatPair& f : kFormats) {
    for (const int64_t kv_heads : {1, 8}) {
      for (const int64_t block_size : {16, 128}) {
        const int64_t blocks = 6, dim = 128;
        KvCacheConfig contiguous = Config(f, 1, kv_heads, dim, blocks * block_size);
        KvCacheConfig paged = contiguous;
        paged.block_size = block_size;
        paged.blocks = blocks;
        const size_t unpadded = KvCache(contiguous).StorageBytes();
        const size_t bytes = KvCache(paged).StorageBytes();
        const std::string what = Name(f) + " kv_heads " + std::to_string(kv_heads) +
                                 " block " + std::to_string(block_size);
        if (kv_heads * block_size < 32) {
          EXPECT_EQ(bytes, unpadded) << what;
        } else {
          EXPECT_GT(bytes, unpadded) << what;
          EXPECT_LE(bytes, unpadded + unpadded / 32) << what;
        }
      }
    }
  }
}

// An engine's loop: prefill, then one query per step against the cache as it grows; step t's
// output is row t of the full causal forward over the whole sequence (same precision).
TEST(KvCache, DecodeStepsMatchTheFullCausalForward) {
  for (const FormatPair& f : {kFormats[0], kFormats[1], kFormats[3], kFormats[4]}) {
    const int64_t heads = 4, kv_heads = 2, dim = 64, total = 1600, prefill = 1590;
    AttentionCase full({1, heads, kv_heads, total, total, dim}, true, SinkMode::kOffByOne,
                       Layout::kBHTD, 5);
    full.options.precision = InCallPrecision(f);
    const KernelOutputs want = full.Run(false);
    KvCache cache(Config(f, 1, kv_heads, dim, total));
    AppendRange(cache, 0, full.k, full.v, 0, prefill);
    for (int64_t t = prefill; t < total; ++t) {
      AppendRange(cache, 0, full.k, full.v, t, 1);
      const AttentionShape step{1, heads, kv_heads, 1, 1, dim};
      const ConstTensor q{full.q.storage.data() + t * full.q.strides.token, full.q.strides};
      OwnedTensor o(1, heads, 1, dim, Layout::kBHTD);
      std::vector<float> lse(static_cast<size_t>(heads), 0.0f);
      ExactForward(step, full.options, q, cache, o.view(), lse.data());
      for (int64_t h = 0; h < heads; ++h) {
        const size_t row = size_t(h * total + t);
        EXPECT_NEAR(lse[size_t(h)], want.lse[row], 1e-5f * (1.0f + std::abs(want.lse[row])))
            << Name(f) << " step " << t;
        for (int64_t d = 0; d < dim; ++d) {
          ASSERT_NEAR(o.at(0, h, 0, d), want.o.at(0, h, t, d), 2e-6) << Name(f) << " step " << t;
        }
      }
    }
    // Rolling back drafted tokens and appending others reads the new ones.
    cache.Truncate(0, prefill);
    EXPECT_EQ(cache.Length(0), prefill);
    const OwnedTensor other = Tokens(kv_heads, 1, dim, 99);
    cache.Append(0, 1, other.cview(), other.cview());
    OwnedTensor back(1, kv_heads, 1, dim, Layout::kBHTD);
    cache.Read(0, prefill, 1, back.view(), {});
    const std::vector<float> expected = Dequantized(other, f.k);
    EXPECT_EQ(back.storage, expected) << Name(f);
  }
}

// A fork shares its parent's prefix blocks: sequence 1 names sequence 0's first two blocks and
// their 64 tokens, then appends its own tokens into a block of its own. Its forward is the
// in-call forward over the parent's prefix and its own suffix; the parent is unchanged.
TEST(KvCache, ForkedSequencesShareTheirPrefixBlocks) {
  for (const FormatPair& f : {kFormats[0], kFormats[3], kFormats[4]}) {
    const int64_t heads = 4, kv_heads = 2, dim = 64, block = 32, prefix = 64, parent = 100;
    const int64_t suffix = 30, total = prefix + suffix;
    KvCacheConfig config = Config(f, 2, kv_heads, dim, 256);
    config.block_size = block;
    config.blocks = 8;
    KvCache cache(config);
    const int32_t parent_blocks[] = {5, 2, 7, 0};
    cache.SetBlockTable(0, parent_blocks, 4);
    const OwnedTensor k0 = Tokens(kv_heads, parent, dim, 21), v0 = Tokens(kv_heads, parent, dim, 22);
    AppendInChunks(cache, 0, k0, v0);
    const int32_t child_blocks[] = {5, 2, 3};  // the prefix's blocks, then its own
    cache.SetBlockTable(1, child_blocks, 3, prefix);
    EXPECT_EQ(cache.Length(1), prefix);
    const OwnedTensor k1 = Tokens(kv_heads, suffix, dim, 23), v1 = Tokens(kv_heads, suffix, dim, 24);
    AppendRange(cache, 1, k1, v1, 0, suffix);

    // The child's whole K and V, for the in-call forward.
    AttentionCase want({1, heads, kv_heads, 2, total, dim}, true, SinkMode::kNone, Layout::kBHTD, 9);
    want.options.precision = InCallPrecision(f);
    for (int64_t h = 0; h < kv_heads; ++h) {
      for (int64_t t = 0; t < total; ++t) {
        for (int64_t c = 0; c < dim; ++c) {
          want.k.at(0, h, t, c) = t < prefix ? k0.at(0, h, t, c) : k1.at(0, h, t - prefix, c);
          want.v.at(0, h, t, c) = t < prefix ? v0.at(0, h, t, c) : v1.at(0, h, t - prefix, c);
        }
      }
    }
    const KernelOutputs in_call = want.Run(false);
    OwnedTensor o(1, heads, 2, dim, Layout::kBHTD);
    std::vector<float> lse(static_cast<size_t>(heads * 2), 0.0f);
    const int64_t child = 1;
    ExactForward(want.shape, want.options, want.q.cview(), cache, o.view(), lse.data(), &child);
    EXPECT_LE(ScaledMaxError(o.Dense(), in_call.o.Dense()), 1e-6) << Name(f);
    // The parent still reads its own 100 tokens.
    OwnedTensor k_back(1, kv_heads, parent, dim, Layout::kBHTD);
    cache.Read(0, 0, parent, k_back.view(), {});
    EXPECT_EQ(k_back.storage, Dequantized(k0, f.k)) << Name(f);
  }
}

// The softcap (docs/math.md §1.3) reaches the cached forward, since it lives in the transform:
// a decode step against a paged int8 cache equals the in-call forward with the same cap.
TEST(KvCache, SoftcapAppliesToCachedForwards) {
  const FormatPair f{Format::kInt8, Format::kInt8};
  AttentionCase c({1, 8, 2, 1, 1800, 64}, true, SinkMode::kNone, Layout::kBHTD, 41);
  c.options.precision = InCallPrecision(f);
  c.options.scale = 0.6f;
  c.options.softcap = 2.0f;
  const KernelOutputs want = c.Run(false);
  KvCache cache = MakeCache(f, 1, 2, 64, 1800, {16, PagedLayout::kHeadMajor});
  AppendInChunks(cache, 0, c.k, c.v);
  OwnedTensor o(1, 8, 1, 64, Layout::kBHTD);
  std::vector<float> lse(8);
  ExactForward(c.shape, c.options, c.q.cview(), cache, o.view(), lse.data());
  EXPECT_LE(ScaledMaxError(o.Dense(), want.o.Dense()), 1e-6);
  AttentionOptions uncapped = c.options;
  uncapped.softcap = 0.0f;
  OwnedTensor plain(1, 8, 1, 64, Layout::kBHTD);
  ExactForward(c.shape, uncapped, c.q.cview(), cache, plain.view(), lse.data());
  EXPECT_GT(ScaledMaxError(plain.Dense(), want.o.Dense()), 1e-3);
  // ALiBi (docs/math.md §1.4) too: each row's position is its sequence's last.
  const std::vector<float> slopes = AlibiSlopes(8);
  c.options.alibi_slopes = slopes.data();
  const KernelOutputs biased = c.Run(false);
  ExactForward(c.shape, c.options, c.q.cview(), cache, o.view(), lse.data());
  EXPECT_LE(ScaledMaxError(o.Dense(), biased.o.Dense()), 1e-6);
  EXPECT_GT(ScaledMaxError(biased.o.Dense(), want.o.Dense()), 1e-3);
  // And a sliding window (§1.5): the step sees its last 300 keys.
  c.options.window = 300;
  const KernelOutputs windowed = c.Run(false);
  ExactForward(c.shape, c.options, c.q.cview(), cache, o.view(), lse.data());
  EXPECT_LE(ScaledMaxError(o.Dense(), windowed.o.Dense()), 1e-6);
  EXPECT_GT(ScaledMaxError(windowed.o.Dense(), biased.o.Dense()), 1e-3);
}

// An engine's bf16 or fp16 activations: Q read exactly, O rounded once; the same bits as the
// float forward on Q's values with its O rounded, in the plain and the ragged layout.
TEST(KvCache, SixteenBitQueriesAndOutputs) {
  const FormatPair f{Format::kBf16, Format::kBf16};
  const int64_t heads = 8, kv_heads = 2, dim = 64;
  KvCache cache = MakeCache(f, 2, kv_heads, dim, 1700, {0});
  for (int64_t s = 0; s < 2; ++s) {
    const OwnedTensor k = Tokens(kv_heads, 1600 + 50 * s, dim, uint32_t(60 + s));
    AppendRange(cache, s, k, k, 0, k.tokens);
  }
  const int64_t offsets[] = {0, 3, 4};
  for (const bool ragged : {false, true}) {
    for (const auto& [q_format, o_format] :
         {std::pair<Format, Format>{Format::kBf16, Format::kFp16}, {Format::kFp16, Format::kBf16}}) {
      const int64_t batch = 2, q_len = ragged ? 1 : 2, total = ragged ? 4 : 2;
      const int64_t outer = ragged ? 1 : batch;
      const Strides strides = ragged ? ContiguousBTHD(heads, total, dim) : ContiguousBHTD(heads, q_len, dim);
      const size_t n = size_t(outer * heads * total * dim);
      std::vector<uint16_t> q16(n), o16(n, 0x7777);
      std::vector<float> q32(n);
      std::mt19937 rng(3);
      std::normal_distribution<float> normal;
      for (size_t i = 0; i < n; ++i) {
        q16[i] = q_format == Format::kBf16 ? quant::EncodeBf16(normal(rng)) : quant::EncodeFp16(normal(rng));
        q32[i] = q_format == Format::kBf16 ? quant::DecodeBf16(q16[i]) : quant::DecodeFp16(q16[i]);
      }
      AttentionOptions options;
      options.causal = true;
      const AttentionShape shape{batch, heads, kv_heads, q_len, 1, dim};
      const int64_t* q_offsets = ragged ? offsets : nullptr;
      std::vector<float> o32(n), lse32(size_t(heads * total * outer)), lse16(lse32.size());
      ExactForward(shape, options, {q32.data(), strides}, cache, {o32.data(), strides}, lse32.data(),
                   nullptr, q_offsets);
      ExactForward(shape, options, ConstTensor16{q16.data(), strides, q_format}, cache,
                   Tensor16{o16.data(), strides, o_format}, lse16.data(), nullptr, q_offsets);
      EXPECT_EQ(lse16, lse32);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t want = o_format == Format::kBf16 ? quant::EncodeBf16(o32[i]) : quant::EncodeFp16(o32[i]);
        ASSERT_EQ(o16[i], want) << (ragged ? "ragged " : "") << i;
      }
      // A format other than bf16 or fp16, or a slot that does not exist: O untouched.
      std::vector<uint16_t> untouched(n, 0x7777);
      EXPECT_THROW(ExactForward(shape, options, ConstTensor16{q16.data(), strides, Format::kInt8}, cache,
                                Tensor16{untouched.data(), strides, o_format}, lse16.data(), nullptr,
                                q_offsets),
                   std::invalid_argument);
      const int64_t missing[] = {0, 9};
      EXPECT_THROW(ExactForward(shape, options, ConstTensor16{q16.data(), strides, q_format}, cache,
                                Tensor16{untouched.data(), strides, o_format}, lse16.data(), missing,
                                q_offsets),
                   std::invalid_argument);
      EXPECT_EQ(untouched, std::vector<uint16_t>(n, 0x7777));
    }
  }
}

TEST(KvCache, RejectsBadBlockTablesAndChangesNothing) {
  const FormatPair f{Format::kBf16, Format::kBf16};
  KvCacheConfig config = Config(f, 2, 1, 8, 64);
  EXPECT_THROW(KvCache(Config(f, 2, 1, 8, 64)).SetBlockTable(0, nullptr, 0),
               std::invalid_argument);  // contiguous
  for (const int64_t bad : {-16, 3, 48, 2048}) {
    config.block_size = bad;
    config.blocks = 4;
    EXPECT_THROW(KvCache{config}, std::invalid_argument) << "block_size " << bad;
  }
  config.block_size = 16;
  config.blocks = 0;
  EXPECT_THROW(KvCache{config}, std::invalid_argument);
  config.blocks = 6;
  KvCache cache(config);
  const int32_t table[] = {4, 1};
  cache.SetBlockTable(0, table, 2);
  const OwnedTensor k = Tokens(1, 40, 8, 5);
  EXPECT_THROW(AppendRange(cache, 0, k, k, 0, 33), std::invalid_argument);  // 2 blocks: 32
  EXPECT_EQ(cache.Length(0), 0);
  AppendRange(cache, 0, k, k, 0, 20);
  const auto table_is = [&](std::vector<int32_t> want, const char* what) {
    int64_t count = 0;
    const int32_t* got = cache.BlockTable(0, &count);
    EXPECT_EQ(std::vector<int32_t>(got, got + count), want) << what;
    EXPECT_EQ(cache.Length(0), 20) << what;
  };
  const int32_t out_of_range[] = {4, 6}, negative[] = {-1, 4}, twice[] = {4, 1, 4};
  const int32_t too_many[] = {0, 1, 2, 3, 5};
  EXPECT_THROW(cache.SetBlockTable(0, out_of_range, 2), std::invalid_argument);
  table_is({4, 1}, "out of range");
  EXPECT_THROW(cache.SetBlockTable(0, negative, 2), std::invalid_argument);
  EXPECT_THROW(cache.SetBlockTable(0, twice, 3), std::invalid_argument);
  table_is({4, 1}, "repeated");
  EXPECT_THROW(cache.SetBlockTable(0, too_many, 5), std::invalid_argument);  // 64 / 16 = 4
  EXPECT_THROW(cache.SetBlockTable(0, table, 1), std::invalid_argument);  // 20 tokens > 16
  EXPECT_THROW(cache.SetBlockTable(0, table, 2, 33), std::invalid_argument);
  EXPECT_THROW(cache.SetBlockTable(0, nullptr, 2), std::invalid_argument);
  table_is({4, 1}, "too small");
  // Sharing across slots is allowed; so is growing a table, keeping what its blocks hold.
  cache.SetBlockTable(1, table, 2, 16);
  const int32_t grown[] = {4, 1, 0};
  cache.SetBlockTable(0, grown, 3);
  table_is({4, 1, 0}, "grown");
  OwnedTensor back(1, 1, 20, 8, Layout::kBHTD);
  cache.Read(0, 0, 20, back.view(), {});
  OwnedTensor first(1, 1, 20, 8, Layout::kBHTD);
  for (int64_t t = 0; t < 20; ++t)
    for (int64_t c = 0; c < 8; ++c) first.at(0, 0, t, c) = k.at(0, 0, t, c);
  EXPECT_EQ(back.storage, Dequantized(first, f.k));
}

TEST(KvCache, RejectsBadCallsAndChangesNothing) {
  const FormatPair f{Format::kInt8, Format::kFp8E4M3};
  const int64_t kv_heads = 2, dim = 16;
  KvCache cache(Config(f, 2, kv_heads, dim, 8));
  const OwnedTensor k = Tokens(kv_heads, 9, dim, 3), v = Tokens(kv_heads, 9, dim, 4);
  AppendRange(cache, 0, k, v, 0, 5);
  OwnedTensor before(1, kv_heads, 5, dim, Layout::kBHTD);
  cache.Read(0, 0, 5, before.view(), {});
  const auto unchanged = [&](const char* what) {
    EXPECT_EQ(cache.Length(0), 5) << what;
    OwnedTensor now(1, kv_heads, 5, dim, Layout::kBHTD);
    cache.Read(0, 0, 5, now.view(), {});
    EXPECT_EQ(now.storage, before.storage) << what;
  };
  EXPECT_THROW(AppendRange(cache, 0, k, v, 0, 4), std::invalid_argument);  // 9 > capacity 8
  unchanged("overflow");
  EXPECT_THROW(AppendRange(cache, 2, k, v, 0, 1), std::invalid_argument);  // no slot 2
  EXPECT_THROW(AppendRange(cache, -1, k, v, 0, 1), std::invalid_argument);
  EXPECT_THROW(cache.Append(0, 1, {nullptr, k.strides}, v.cview()), std::invalid_argument);
  EXPECT_THROW(cache.Append(0, 0, k.cview(), v.cview()), std::invalid_argument);
  OwnedTensor bad_v = v;
  bad_v.at(0, 1, 0, 3) = NAN;  // no fp8 scale for it: K is not stored either
  EXPECT_THROW(cache.Append(0, 1, k.cview(), bad_v.cview()), std::invalid_argument);
  unchanged("non-finite V");
  EXPECT_THROW(cache.Truncate(0, 6), std::invalid_argument);
  EXPECT_THROW(cache.Truncate(0, -1), std::invalid_argument);
  unchanged("truncate");
  OwnedTensor out(1, kv_heads, 4, dim, Layout::kBHTD);
  EXPECT_THROW(cache.Read(0, 2, 4, out.view(), {}), std::invalid_argument);  // past the length
  EXPECT_THROW(KvCache(Config(f, 0, 1, 16, 8)), std::invalid_argument);
  EXPECT_THROW(KvCache(Config(f, 1, 1, kMaxHeadDim + 1, 8)), std::invalid_argument);

  // Forwards: every rejection before anything is written.
  AttentionOptions options;
  options.precision = CachePrecision(cache.config());
  const AttentionShape shape{1, 4, kv_heads, 1, 1, dim};
  OwnedTensor q(1, 4, 1, dim, Layout::kBHTD), o(1, 4, 1, dim, Layout::kBHTD);
  std::vector<float> lse(4, 7.0f);
  std::fill(o.storage.begin(), o.storage.end(), 7.0f);
  const auto rejected = [&](const AttentionShape& s, const AttentionOptions& opt,
                            const int64_t* slots, float* l, const char* what) {
    EXPECT_THROW(ExactForward(s, opt, q.cview(), cache, o.view(), l, slots), std::invalid_argument)
        << what;
    for (float x : o.storage) ASSERT_EQ(x, 7.0f) << what;
    for (float x : lse) ASSERT_EQ(x, 7.0f) << what;
  };
  AttentionOptions other = options;
  other.precision = ParsePrecision("qk=int8,pv=bf16");
  rejected(shape, other, nullptr, lse.data(), "formats other than the cache's");
  AttentionShape heads = shape;
  heads.kv_heads = 1;
  rejected(heads, options, nullptr, lse.data(), "kv_heads");
  const int64_t empty_slot = 1, no_slot = 5;
  rejected(shape, options, &empty_slot, lse.data(), "empty slot");
  rejected(shape, options, &no_slot, lse.data(), "slot out of range");
  AttentionShape three = shape;
  three.batch = 3;
  rejected(three, options, nullptr, lse.data(), "more sequences than slots");
  rejected(shape, options, nullptr, nullptr, "null lse");
  ExactForward(shape, options, q.cview(), cache, o.view(), lse.data());
  EXPECT_NE(lse[0], 7.0f);
  // The default precision means the cache's formats: the same outputs.
  OwnedTensor o_default(1, 4, 1, dim, Layout::kBHTD);
  std::vector<float> lse_default(4);
  ExactForward(shape, AttentionOptions{}, q.cview(), cache, o_default.view(), lse_default.data());
  EXPECT_EQ(o_default.storage, o.storage);
}

}  // namespace
}  // namespace lpattn::test
