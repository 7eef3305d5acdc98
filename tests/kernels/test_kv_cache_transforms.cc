// K-interval and thresholded attention over a KvCache (docs/design.md §9): ragged batches of
// cached sequences in every format and layout against each sequence's in-call forward with the
// same precision and the fp64 reference, decode steps against the full causal forward, the C
// API, keys-only caches, and bad calls rejected with nothing written.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/kinterval.h"
#include "kernels/kv_cache.h"
#include "kernels/lpattn.h"
#include "kernels/reference.h"
#include "kernels/threshold.h"
#include "kernels/skeleton/tile_sizes.h"
#include "tests/kernels/attention_case.h"
#include "tests/kernels/kv_cache_case.h"
#include "tests/kernels/threshold_case.h"

namespace lpattn::test {
namespace {

// Slots of different lengths (two consecutive ones of one length: one kernel run; the longest
// past the decode plan's split-KV threshold), named out of order.
const int64_t kLengths[] = {1700, 1700, 77, 2100};
const int64_t kCall[] = {0, 1, 3, 2};

// Q of the call, [batch, heads, q_len, dim]: sequence b's is slot kCall[b]'s case's.
OwnedTensor CallQueries(const std::vector<OwnedTensor>& per_slot, int64_t batch) {
  const OwnedTensor& any = per_slot[0];
  OwnedTensor q(batch, any.heads, any.tokens, any.dim, Layout::kBTHD);
  for (int64_t b = 0; b < batch; ++b) {
    const OwnedTensor& src = per_slot[size_t(kCall[b])];
    for (int64_t h = 0; h < q.heads; ++h)
      for (int64_t t = 0; t < q.tokens; ++t)
        for (int64_t c = 0; c < q.dim; ++c) q.at(b, h, t, c) = src.at(0, h, t, c);
  }
  return q;
}

// Sequence b's rows of a call's O, in [heads, q_len, dim] order.
std::vector<double> SequenceRows(const OwnedTensor& o, int64_t b) {
  std::vector<double> rows;
  for (int64_t h = 0; h < o.heads; ++h)
    for (int64_t t = 0; t < o.tokens; ++t)
      for (int64_t d = 0; d < o.dim; ++d) rows.push_back(o.at(b, h, t, d));
  return rows;
}

// ---- K-interval ------------------------------------------------------------------------------

// Each sequence's O and saved statistics match its in-call forward at the same precision (K
// and V quantized per token, as the cache holds them) and, in fp32, the reference.
TEST(KvCacheKInterval, RaggedForwardMatchesTheInCallKernelAndTheReference) {
  for (const char* text : {"K=4", "K=16,cal=window,W=2"}) {
    const KIntervalOptions kint = ParseKInterval(text);
    for (const FormatPair& f : kFormats) {
      for (const auto& [q_len, dim] : {std::pair<int64_t, int64_t>{1, 64}, {3, 80}}) {
        const int64_t heads = 8, kv_heads = 2, batch = 4;
        std::vector<AttentionCase> cases;
        std::vector<KIntervalRun> in_call;
        std::vector<OwnedTensor> queries;
        for (int64_t s = 0; s < 4; ++s) {
          cases.emplace_back(AttentionShape{1, heads, kv_heads, q_len, kLengths[s], dim}, true,
                             SinkMode::kNone, Layout::kBHTD, uint32_t(41 + s));
          cases.back().options.precision = InCallPrecision(f);
          in_call.push_back(RunKIntervalForward(cases.back(), kint, Layout::kBHTD));
          queries.push_back(cases.back().q);
        }
        const OwnedTensor q = CallQueries(queries, batch);
        const AttentionShape shape{batch, heads, kv_heads, q_len, 1, dim};
        for (const CacheLayout& layout : {kLayouts[0], kLayouts[1], kLayouts[3]}) {
          KvCache cache = MakeCache(f, 4, kv_heads, dim, 2200, layout);
          for (int64_t s = 0; s < 4; ++s) {
            AppendInChunks(cache, s, cases[size_t(s)].k, cases[size_t(s)].v);
          }
          OwnedTensor o(batch, heads, q_len, dim, Layout::kBTHD);
          const size_t rows = size_t(batch * heads * q_len);
          KIntervalRun got{OwnedTensor(), std::vector<float>(rows), std::vector<float>(rows),
                           std::vector<float>(rows), std::vector<float>(rows),
                           std::vector<int32_t>(rows), std::vector<int32_t>(rows)};
          KIntervalForward(shape, cases[0].options, kint, q.cview(), cache, o.view(), got.saved(),
                           kCall);
          for (int64_t b = 0; b < batch; ++b) {
            const size_t s = size_t(kCall[b]), first = size_t(b * heads * q_len);
            const std::string what = std::string(text) + " " + Name(f) + layout.Name() +
                                     " q_len " + std::to_string(q_len) + " slot " +
                                     std::to_string(s);
            const KIntervalRun& want = in_call[s];
            EXPECT_LE(ScaledMaxError(SequenceRows(o, b), want.o.Dense()), 1e-5) << what;
            for (size_t r = 0; r < size_t(heads * q_len); ++r) {
              ASSERT_NEAR(got.m[first + r], want.m[r], 1e-5 * (1 + std::abs(want.m[r]))) << what;
              ASSERT_NEAR(got.R[first + r], want.R[r], 1e-5 * (1 + want.R[r])) << what;
              ASSERT_NEAR(got.Z[first + r], want.Z[r], 1e-5 * want.Z[r]) << what;
              ASSERT_NEAR(got.lse_exact[first + r], want.lse_exact[r],
                          1e-5 * (1 + std::abs(want.lse_exact[r])))
                  << what;
              ASSERT_EQ(got.argmax[first + r], want.argmax[r]) << what << " row " << r;
              ASSERT_EQ(got.argmin[first + r], want.argmin[r]) << what << " row " << r;
            }
            if (f.k == Format::kFp32 && f.v == Format::kFp32) {
              const ReferenceKIntervalForwardResult ref = ReferenceKIntervalForward(
                  cases[s].shape, cases[s].options, kint, cases[s].DenseInputs());
              EXPECT_LE(ScaledMaxError(SequenceRows(o, b), ref.o), 1e-5) << what;
            }
          }
        }
      }
    }
  }
}

// A prefill chunk of 200 queries per head against a cache decodes its codes once per call
// (docs/design.md §8), the statistics pass included: the in-call forward, every format pair,
// contiguous and paged.
TEST(KvCacheKInterval, PrefillChunkDecodedOnceMatchesTheInCallKernel) {
  const KIntervalOptions kint = ParseKInterval("K=4,cal=window,W=2");
  const int64_t heads = 8, kv_heads = 2, dim = 64, queries = 200, length = 600;
  ASSERT_TRUE(DecodesKvOnce(1, heads, kv_heads, queries, length, dim));
  const size_t rows = size_t(heads * queries);
  for (const FormatPair& f : kFormats) {
    AttentionCase c({1, heads, kv_heads, queries, length, dim}, true, SinkMode::kNone,
                    Layout::kBHTD, 43);
    c.options.precision = InCallPrecision(f);
    const KIntervalRun want = RunKIntervalForward(c, kint, Layout::kBHTD);
    for (const CacheLayout& layout : {kLayouts[0], kLayouts[2]}) {
      const std::string what = Name(f) + layout.Name();
      KvCache cache = MakeCache(f, 1, kv_heads, dim, length, layout);
      AppendInChunks(cache, 0, c.k, c.v);
      OwnedTensor o(1, heads, queries, dim, Layout::kBHTD);
      KIntervalRun got{OwnedTensor(), std::vector<float>(rows), std::vector<float>(rows),
                       std::vector<float>(rows), std::vector<float>(rows),
                       std::vector<int32_t>(rows), std::vector<int32_t>(rows)};
      KIntervalForward({1, heads, kv_heads, queries, 1, dim}, c.options, kint, c.q.cview(),
                       cache, o.view(), got.saved());
      EXPECT_LE(ScaledMaxError(o.Dense(), want.o.Dense()), 1e-5) << what;
      for (size_t r = 0; r < rows; ++r) {
        ASSERT_NEAR(got.m[r], want.m[r], 1e-5 * (1 + std::abs(want.m[r]))) << what;
        ASSERT_NEAR(got.Z[r], want.Z[r], 1e-5 * want.Z[r]) << what;
        ASSERT_EQ(got.argmax[r], want.argmax[r]) << what << " row " << r;
      }
    }
  }
}

// An engine's loop: step t's output and statistics are row t of the full causal forward over
// the whole sequence (ragged queries through q_offsets, a single sequence of one query).
TEST(KvCacheKInterval, DecodeStepsMatchTheFullCausalForward) {
  // Lerp weights are continuous in the scores, which the two tilings sum in other orders.
  const KIntervalOptions kint = ParseKInterval("K=4,cal=window,W=2");
  for (const FormatPair& f : {kFormats[0], kFormats[1], kFormats[3], kFormats[4]}) {
    const int64_t heads = 4, kv_heads = 2, dim = 64, total = 1610, prefill = 1600;
    AttentionCase full({1, heads, kv_heads, total, total, dim}, true, SinkMode::kNone,
                       Layout::kBHTD, 5);
    full.options.precision = InCallPrecision(f);
    const KIntervalRun want = RunKIntervalForward(full, kint, Layout::kBHTD);
    KvCache cache = MakeCache(f, 1, kv_heads, dim, total, kLayouts[2]);
    AppendRange(cache, 0, full.k, full.v, 0, prefill);
    const int64_t offsets[] = {0, 1};
    for (int64_t t = prefill; t < total; ++t) {
      AppendRange(cache, 0, full.k, full.v, t, 1);
      const ConstTensor q{full.q.storage.data() + t * full.q.strides.token, full.q.strides};
      OwnedTensor o(1, heads, 1, dim, Layout::kBTHD);
      KIntervalRun got{OwnedTensor(), std::vector<float>(heads), std::vector<float>(heads),
                       std::vector<float>(heads), std::vector<float>(heads),
                       std::vector<int32_t>(heads), std::vector<int32_t>(heads)};
      KIntervalForward({1, heads, kv_heads, 1, 1, dim}, full.options, kint, q, cache, o.view(),
                       got.saved(), nullptr, offsets);
      for (int64_t h = 0; h < heads; ++h) {
        const size_t row = size_t(h * total + t);
        const std::string what = Name(f) + " step " + std::to_string(t);
        EXPECT_EQ(got.argmax[size_t(h)], want.argmax[row]) << what;
        EXPECT_NEAR(got.m[size_t(h)], want.m[row], 1e-5 * (1 + std::abs(want.m[row]))) << what;
        for (int64_t d = 0; d < dim; ++d) {
          ASSERT_NEAR(o.at(0, h, 0, d), want.o.at(0, h, t, d), 1e-5) << what;
        }
      }
    }
  }
}

// ---- thresholded attention -----------------------------------------------------------------

// Ragged queries (a prefill chunk, a decode step, a draft of 3) against slots named out of
// order, one and two views, with and without the L2 normalisation: each sequence's O and
// survivors are its in-call forward's with the cache's formats per token, and in fp32 the
// reference's.
TEST(KvCacheThreshold, RaggedForwardMatchesTheInCallKernelAndTheReference) {
  const int64_t lengths[] = {300, 1700, 90}, counts[] = {5, 1, 3}, offsets[] = {0, 5, 6, 9};
  const int64_t call[] = {2, 0, 1};  // the slot of each sequence: 90, 300 and 1700 keys
  const int64_t heads = 8, kv_heads = 2, dim = 64, batch = 3, total = offsets[batch];
  for (const char* text : {"views=1,beta=0.5", "views=2,p=2,beta=0.5", "views=2,l2=0,beta=2"}) {
    const ThresholdOptions threshold = ParseThreshold(text);
    for (const FormatPair& f : {kFormats[0], kFormats[1], kFormats[3], kFormats[4], kFormats[7]}) {
      std::vector<TwoViewCase> seqs;  // each sequence's in-call inputs, [B, H, T, D] for view 1
      for (int64_t b = 0; b < batch; ++b) {
        seqs.emplace_back(AttentionShape{1, heads, kv_heads, counts[b], lengths[call[b]], dim},
                          true, Layout::kBHTD, uint32_t(61 + b));
        seqs.back().first.options.precision = InCallPrecision(f);
      }
      const std::vector<float>& lambda = seqs[0].lambda_param;  // every case's
      for (const CacheLayout& layout : {kLayouts[0], kLayouts[2], kLayouts[3]}) {
        KvCache cache = MakeCache(f, 3, kv_heads, dim, 1800, layout);
        KvCacheConfig keys_config = cache.config();
        keys_config.keys_only = true;
        KvCache second = MakeCache(f, 3, kv_heads, dim, 1800, layout);
        for (int64_t b = 0; b < batch; ++b) {
          AppendInChunks(cache, call[b], seqs[size_t(b)].first.k, seqs[size_t(b)].first.v);
          AppendInChunks(second, call[b], seqs[size_t(b)].second.k, seqs[size_t(b)].second.v);
        }
        OwnedTensor q1(1, heads, total, dim, Layout::kBTHD), q2(1, heads, total, dim, Layout::kBTHD);
        OwnedTensor o(1, heads, total, dim, Layout::kBTHD);
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < counts[b]; ++i)
              for (int64_t c = 0; c < dim; ++c) {
                q1.at(0, h, offsets[b] + i, c) = seqs[size_t(b)].first.q.at(0, h, i, c);
                q2.at(0, h, offsets[b] + i, c) = seqs[size_t(b)].second.q.at(0, h, i, c);
              }
        ThresholdCachedArgs args;
        args.q[0] = q1.cview();
        args.q[1] = q2.cview();
        args.second_keys = &second;
        args.lambda_param = lambda.data();
        args.o = o.view();
        std::vector<int32_t> survivors(size_t(threshold.views * heads * total), -1);
        args.survivors = survivors.data();
        AttentionOptions options;
        options.causal = true;
        ThresholdForward({batch, heads, kv_heads, 1, 1, dim}, options, threshold, cache, args,
                         call, offsets);
        for (int64_t b = 0; b < batch; ++b) {
          const TwoViewCase& c = seqs[size_t(b)];
          const ThresholdRun want = RunForward(c, threshold, Layout::kBHTD);
          const std::string what = std::string(text) + " " + Name(f) + layout.Name() +
                                   " sequence " + std::to_string(b);
          std::vector<double> got;
          for (int64_t h = 0; h < heads; ++h) {
            for (int64_t i = 0; i < counts[b]; ++i) {
              for (int64_t d = 0; d < dim; ++d) got.push_back(o.at(0, h, offsets[b] + i, d));
              for (int t = 0; t < threshold.views; ++t) {
                const size_t at = size_t(t * heads * total + heads * offsets[b] + h * counts[b] + i);
                ASSERT_EQ(survivors[at], want.survivors[size_t((t * heads + h) * counts[b] + i)])
                    << what << " view " << t << " head " << h << " query " << i;
              }
            }
          }
          EXPECT_LE(ScaledMaxError(got, want.o.Dense()), 1e-6) << what;
          if (f.k == Format::kFp32 && f.v == Format::kFp32) {
            const ReferenceThresholdForwardResult ref =
                ReferenceThresholdForward(c.shape(), c.options(), threshold, c.Dense());
            EXPECT_LE(ScaledMaxError(got, ref.o), 1e-5) << what;
          }
        }
        // The second view's keys in a keys-only cache give the same result.
        if (threshold.views == 2 && layout.block_size == 0) {
          KvCache keys(keys_config);
          for (int64_t b = 0; b < batch; ++b) {
            AppendInChunks(keys, call[b], seqs[size_t(b)].second.k, seqs[size_t(b)].second.k);
          }
          EXPECT_LT(keys.StorageBytes(), second.StorageBytes()) << text;
          OwnedTensor o_keys(1, heads, total, dim, Layout::kBTHD);
          args.second_keys = &keys;
          args.o = o_keys.view();
          args.survivors = nullptr;
          ThresholdForward({batch, heads, kv_heads, 1, 1, dim}, options, threshold, cache, args,
                           call, offsets);
          EXPECT_EQ(o_keys.storage, o.storage) << text << " " << Name(f);
        }
      }
    }
  }
}

// ---- keys-only caches and bad calls ----------------------------------------------------------

TEST(KvCacheTransforms, KeysOnlyCachesHoldNoValues) {
  KvCacheConfig config = Config(kFormats[3], 1, 2, 16, 32);
  config.keys_only = true;
  KvCache keys(config);
  const OwnedTensor k = Tokens(2, 5, 16, 3);
  keys.Append(0, 5, k.cview(), {});  // v is not read
  EXPECT_EQ(keys.Length(0), 5);
  OwnedTensor k_read(1, 2, 5, 16, Layout::kBHTD), v_read(1, 2, 5, 16, Layout::kBHTD);
  keys.Read(0, 0, 5, k_read.view(), {});
  EXPECT_EQ(ToDouble(k_read.storage), ToDouble(Dequantized(k, Format::kInt8)));
  EXPECT_THROW(keys.Read(0, 0, 5, k_read.view(), v_read.view()), std::invalid_argument);
  // Exact and K-interval attention read values: a keys-only cache is refused.
  const AttentionShape shape{1, 2, 2, 1, 1, 16};
  OwnedTensor q = Tokens(2, 1, 16, 4), o(1, 2, 1, 16, Layout::kBHTD);
  std::vector<float> lse(2);
  EXPECT_THROW(ExactForward(shape, {}, q.cview(), keys, o.view(), lse.data()),
               std::invalid_argument);
  KIntervalRun saved{OwnedTensor(), std::vector<float>(2), std::vector<float>(2),
                     std::vector<float>(2), std::vector<float>(2), std::vector<int32_t>(2),
                     std::vector<int32_t>(2)};
  EXPECT_THROW(KIntervalForward(shape, {}, {}, q.cview(), keys, o.view(), saved.saved()),
               std::invalid_argument);
}

TEST(KvCacheTransforms, RejectBadCallsAndWriteNothing) {
  const int64_t heads = 4, kv_heads = 2, dim = 16;
  const FormatPair f = kFormats[0];
  KvCache cache(Config(f, 2, kv_heads, dim, 64)), second(Config(f, 2, kv_heads, dim, 64));
  KvCache narrow(Config(f, 2, 1, dim, 64));
  for (int64_t s = 0; s < 2; ++s) {
    const OwnedTensor k = Tokens(kv_heads, 20, dim, uint32_t(s)), v = Tokens(kv_heads, 20, dim, 9);
    cache.Append(s, 20, k.cview(), v.cview());
    second.Append(s, s == 0 ? 20 : 19, k.cview(), v.cview());  // slot 1 one key short
    const OwnedTensor k1 = Tokens(1, 20, dim, 7);
    narrow.Append(s, 20, k1.cview(), k1.cview());
  }
  const AttentionShape shape{2, heads, kv_heads, 1, 1, dim};
  const OwnedTensor q(2, heads, 1, dim, Layout::kBHTD);
  OwnedTensor o(2, heads, 1, dim, Layout::kBHTD);
  std::fill(o.storage.begin(), o.storage.end(), 7.0f);
  const std::vector<float> untouched = o.storage;
  const std::vector<float> lambda(size_t(heads), 0.5f);
  const ThresholdOptions two_views = ParseThreshold("views=2");
  const auto tda = [&](const KvCache* keys, const float* lambda_param, const int64_t* slots,
                       const AttentionOptions& options) {
    ThresholdCachedArgs args;
    args.q[0] = args.q[1] = q.cview();
    args.second_keys = keys;
    args.lambda_param = lambda_param;
    args.o = o.view();
    ThresholdForward(shape, options, two_views, cache, args, slots);
  };
  const int64_t first_only[] = {0, 0};
  AttentionOptions sink;
  sink.sink = SinkMode::kOffByOne;
  EXPECT_THROW(tda(nullptr, lambda.data(), nullptr, {}), std::invalid_argument);  // no view 2
  EXPECT_THROW(tda(&second, nullptr, nullptr, {}), std::invalid_argument);      // no lambda
  EXPECT_THROW(tda(&second, lambda.data(), nullptr, {}), std::invalid_argument);  // lengths
  EXPECT_THROW(tda(&narrow, lambda.data(), nullptr, {}), std::invalid_argument);  // kv heads
  EXPECT_THROW(tda(&second, lambda.data(), first_only, sink), std::invalid_argument);
  tda(&second, lambda.data(), first_only, {});  // slot 0 twice: same lengths, runs
  EXPECT_NE(o.storage, untouched);
  std::fill(o.storage.begin(), o.storage.end(), 7.0f);

  KIntervalRun saved{OwnedTensor(), std::vector<float>(8), std::vector<float>(8),
                     std::vector<float>(8), std::vector<float>(8), std::vector<int32_t>(8),
                     std::vector<int32_t>(8)};
  const KIntervalOptions kint;
  EXPECT_THROW(KIntervalForward(shape, sink, kint, q.cview(), cache, o.view(), saved.saved()),
               std::invalid_argument);
  KIntervalSaved no_argmin = saved.saved();
  no_argmin.argmin = nullptr;
  EXPECT_THROW(KIntervalForward(shape, {}, kint, q.cview(), cache, o.view(), no_argmin),
               std::invalid_argument);
  AttentionOptions other_format;
  other_format.precision = ParsePrecision("qk=bf16,pv=bf16");
  EXPECT_THROW(
      KIntervalForward(shape, other_format, kint, q.cview(), cache, o.view(), saved.saved()),
      std::invalid_argument);
  const int64_t out_of_range[] = {0, 2};
  EXPECT_THROW(KIntervalForward(shape, {}, kint, q.cview(), cache, o.view(), saved.saved(),
                                out_of_range),
               std::invalid_argument);
  EXPECT_EQ(o.storage, untouched);
}

// ---- the C API ---------------------------------------------------------------------------------

// lpattn_kint_forward_cached and lpattn_tda_forward_cached give the C++ calls' results, and
// report bad calls with a message.
TEST(KvCacheTransforms, CApiMatchesTheCppCalls) {
  const int64_t heads = 4, kv_heads = 2, dim = 32, tokens = 70;
  lpattn_kv_cache_config config;
  lpattn_kv_cache_default_config(&config);
  EXPECT_EQ(config.keys_only, 0);
  config.sequences = 1;
  config.kv_heads = kv_heads;
  config.head_dim = dim;
  config.capacity = 128;
  config.k_format = "int8";
  config.v_format = "bf16";
  config.block_size = 16;
  config.blocks = 8;
  lpattn_kv_cache *cache = nullptr, *keys = nullptr;
  ASSERT_EQ(lpattn_kv_cache_create(&config, &cache), LPATTN_OK) << lpattn_last_error();
  config.keys_only = 1;
  ASSERT_EQ(lpattn_kv_cache_create(&config, &keys), LPATTN_OK) << lpattn_last_error();
  const int32_t blocks[] = {7, 1, 4, 2, 0};
  ASSERT_EQ(lpattn_kv_cache_set_block_table(cache, 0, blocks, 5, -1), LPATTN_OK);
  ASSERT_EQ(lpattn_kv_cache_set_block_table(keys, 0, blocks, 5, -1), LPATTN_OK);
  const OwnedTensor k = Tokens(kv_heads, tokens, dim, 1), v = Tokens(kv_heads, tokens, dim, 2);
  const OwnedTensor k2 = Tokens(kv_heads, tokens, dim, 3);
  const auto c_view = [](const OwnedTensor& t) {
    return lpattn_const_tensor{t.storage.data(), t.strides.batch, t.strides.head,
                               t.strides.token};
  };
  ASSERT_EQ(lpattn_kv_cache_append(cache, 0, tokens, c_view(k), c_view(v)), LPATTN_OK);
  ASSERT_EQ(lpattn_kv_cache_append(keys, 0, tokens, c_view(k2), lpattn_const_tensor{}), LPATTN_OK)
      << lpattn_last_error();
  // The same caches through the C++ API.
  KvCacheConfig cpp_config{1, kv_heads, dim, 128, Format::kInt8, Format::kBf16, 16, 8};
  KvCache cpp_cache(cpp_config);
  cpp_config.keys_only = true;
  KvCache cpp_keys(cpp_config);
  cpp_cache.SetBlockTable(0, blocks, 5);
  cpp_keys.SetBlockTable(0, blocks, 5);
  cpp_cache.Append(0, tokens, k.cview(), v.cview());
  cpp_keys.Append(0, tokens, k2.cview(), {});

  const AttentionShape shape{1, heads, kv_heads, 2, 1, dim};
  const OwnedTensor q = Tokens(heads, 2, dim, 4), q2 = Tokens(heads, 2, dim, 5);
  OwnedTensor o_c(1, heads, 2, dim, Layout::kBHTD), o_cpp(1, heads, 2, dim, Layout::kBHTD);
  const auto c_out = [](OwnedTensor& t) {
    return lpattn_tensor{t.storage.data(), t.strides.batch, t.strides.head, t.strides.token};
  };
  lpattn_shape c_shape{1, heads, kv_heads, 2, 1, dim};
  lpattn_options options;
  lpattn_default_options(&options);
  options.causal = 1;

  // K-interval.
  KIntervalRun c_saved{OwnedTensor(), std::vector<float>(8), std::vector<float>(8),
                       std::vector<float>(8), std::vector<float>(8), std::vector<int32_t>(8),
                       std::vector<int32_t>(8)};
  KIntervalRun cpp_saved = c_saved;
  const KIntervalSaved s = c_saved.saved();
  ASSERT_EQ(lpattn_kint_forward_cached(&c_shape, &options, "K=8", c_view(q), cache, nullptr,
                                       nullptr, c_out(o_c),
                                       {s.m, s.R, s.Z, s.lse_exact, s.argmax, s.argmin}),
            LPATTN_OK)
      << lpattn_last_error();
  AttentionOptions cpp_options;
  cpp_options.causal = true;
  KIntervalForward(shape, cpp_options, ParseKInterval("K=8"), q.cview(), cpp_cache,
                   o_cpp.view(), cpp_saved.saved());
  EXPECT_EQ(o_c.storage, o_cpp.storage);
  EXPECT_EQ(c_saved.argmax, cpp_saved.argmax);
  EXPECT_EQ(lpattn_kint_forward_cached(&c_shape, &options, "K=0", c_view(q), cache, nullptr,
                                       nullptr, c_out(o_c),
                                       {s.m, s.R, s.Z, s.lse_exact, s.argmax, s.argmin}),
            LPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lpattn_last_error()).find("lpattn_kint_forward_cached"),
            std::string::npos)
      << lpattn_last_error();

  // Thresholded, two views.
  const std::vector<float> lambda(size_t(heads), 0.3f);
  std::vector<int32_t> c_survivors(size_t(2 * heads * 2)), cpp_survivors(c_survivors.size());
  ASSERT_EQ(lpattn_tda_forward_cached(&c_shape, &options, "views=2,beta=0.5", c_view(q),
                                      c_view(q2), cache, keys, nullptr, nullptr, lambda.data(),
                                      c_out(o_c), c_survivors.data()),
            LPATTN_OK)
      << lpattn_last_error();
  ThresholdCachedArgs args;
  args.q[0] = q.cview();
  args.q[1] = q2.cview();
  args.second_keys = &cpp_keys;
  args.lambda_param = lambda.data();
  args.o = o_cpp.view();
  args.survivors = cpp_survivors.data();
  ThresholdForward(shape, cpp_options, ParseThreshold("views=2,beta=0.5"), cpp_cache,
                   args);
  EXPECT_EQ(o_c.storage, o_cpp.storage);
  EXPECT_EQ(c_survivors, cpp_survivors);
  EXPECT_EQ(lpattn_tda_forward_cached(&c_shape, &options, "views=2", c_view(q), c_view(q2), cache,
                                      nullptr, nullptr, nullptr, lambda.data(), c_out(o_c),
                                      nullptr),
            LPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lpattn_last_error()).find("second_keys"), std::string::npos)
      << lpattn_last_error();
  lpattn_kv_cache_free(keys);
  lpattn_kv_cache_free(cache);
}

}  // namespace
}  // namespace lpattn::test
