// pfold (docs/math.md §4.3): a KvCache's int8 V with its token scales folded into P's int8
// codes, so that P V runs on u8 x s8 dot products. The option against the fp64 reference with
// P rounded to int8, the integer product against the float one on the same folded codes, the
// same bits on any thread count and layout, and every call that cannot take it rejected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/kinterval.h"
#include "kernels/kv_cache.h"
#include "kernels/native/native_paths.h"
#include "kernels/threshold.h"
#include "tests/kernels/attention_case.h"
#include "tests/kernels/kv_cache_case.h"

namespace lpattn::test {
namespace {

const FormatPair kInt8Cache{Format::kInt8, Format::kInt8};

// O of q against an int8 cache of c's K and V in `layout`, with the precision `text` on top
// of the cache's formats.
std::vector<float> CachedOutput(const AttentionCase& c, const CacheLayout& layout,
                                const std::string& text, int threads = 1) {
  const AttentionShape& s = c.shape;
  KvCache cache = MakeCache(kInt8Cache, 1, s.kv_heads, s.head_dim, s.kv_len + 30, layout);
  AppendInChunks(cache, 0, c.k, c.v);
  AttentionOptions options = c.options;
  options.precision = CachePrecision(cache.config(), ParsePrecision(text));
  options.threads = threads;
  OwnedTensor o(1, s.heads, s.q_len, s.head_dim, Layout::kBHTD);
  std::vector<float> lse(size_t(s.heads * s.q_len));
  const AttentionShape call{1, s.heads, s.kv_heads, s.q_len, 1, s.head_dim};
  ExactForward(call, options, c.q.cview(), cache, o.view(), lse.data());
  return o.storage;
}

// Folding gives each row of each key tile its own scale for P's codes, where p=int8 alone
// codes every weight on 1/127: against the fp64 reference with P unrounded, the folded
// outputs are the closer ones (by 1.8-2.9x on these cases), and the unfolded ones are the
// reference's with P rounded to int8. Decode tiles (q_len 1, the integer product where D is
// a multiple of 64) and prefill tiles (q_len 7, the float product), D on and off the integer
// product, contiguous and paged.
TEST(KvCachePfold, RoundsPMoreFinelyThanInt8PAlone) {
  for (const int64_t dim : {64, 128, 80}) {
    for (const int64_t q_len : {1, 7}) {
      AttentionCase c({1, 8, 2, q_len, 1001, dim}, true, SinkMode::kOffByOne, Layout::kBHTD,
                      uint32_t(60 + dim + q_len));
      c.options.precision = ParsePrecision("qk=int8,pv=int8,gran=token,p=int8");
      const std::vector<double> ref_rounded = c.ReferenceForward().o;
      c.options.precision = ParsePrecision("qk=int8,pv=int8,gran=token");
      const std::vector<double> ref = c.ReferenceForward().o;
      for (const CacheLayout& layout : {kLayouts[0], kLayouts[1], kLayouts[3]}) {
        const std::string what = "D " + std::to_string(dim) + " q_len " + std::to_string(q_len) +
                                 layout.Name();
        const std::vector<double> plain = ToDouble(CachedOutput(c, layout, "p=int8"));
        const std::vector<double> folded = ToDouble(CachedOutput(c, layout, "p=int8,pfold=1"));
        EXPECT_LE(ScaledMaxError(plain, ref_rounded), 1e-6) << what;
        const double plain_error = ScaledMaxError(plain, ref);
        const double folded_error = ScaledMaxError(folded, ref);
        EXPECT_LE(folded_error, 3e-3) << what;
        EXPECT_LT(folded_error, 0.7 * plain_error) << what;
      }
    }
  }
}

// The u8 x s8 product sums the folded codes exactly and scales each sum once; the float
// product (avx512_vnni selected off) multiplies the same codes by their token's scales: the
// same outputs up to fp32 rounding. Either way a layout or thread count changes no bit. GQA
// groups of 4 and of 1 (decode tiles of 4 rows and of 1).
TEST(KvCachePfold, IntegerProductMatchesTheFloatOneOnTheSameCodes) {
  if (!native::NativePathEnabled(native::NativePath::kAvx512Vnni)) {
    GTEST_SKIP() << "pfold's u8 x s8 product not run: this CPU lacks avx512_vnni (the float "
                    "product it falls back to is tested above)";
  }
  for (const int64_t dim : {64, 128}) {
    for (const int64_t kv_heads : {2, 8}) {
      AttentionCase c({1, 8, kv_heads, 1, 1500, dim}, true, SinkMode::kNone, Layout::kBHTD,
                      uint32_t(70 + dim + kv_heads));
      const std::string what = "D " + std::to_string(dim) + " Hkv " + std::to_string(kv_heads);
      const std::vector<float> integer = CachedOutput(c, kLayouts[0], "p=int8,pfold=1");
      ASSERT_TRUE(SelectNativePaths("none"));
      const std::vector<float> floats = CachedOutput(c, kLayouts[0], "p=int8,pfold=1");
      ASSERT_TRUE(SelectNativePaths(""));
      EXPECT_LE(ScaledMaxError(ToDouble(integer), ToDouble(floats)), 1e-6) << what;
      EXPECT_NE(integer, floats) << what << ": the integer product did not run";
      for (const CacheLayout& layout : kLayouts) {
        for (const int threads : {1, 2}) {
          EXPECT_EQ(CachedOutput(c, layout, "p=int8,pfold=1", threads), integer)
              << what << layout.Name() << " threads " << threads;
        }
      }
    }
  }
}

// Zero rows of V (a token scale of 0, the whole tile's too) weigh nothing and divide by
// nothing, and leave the other rows' codes their range.
TEST(KvCachePfold, ZeroValueRowsGiveZeroOutputs) {
  AttentionCase c({1, 4, 1, 1, 100, 64}, true, SinkMode::kNone, Layout::kBHTD, 5);
  for (float& x : c.v.storage) x = 0.0f;
  for (const char* text : {"p=int8,pfold=1", "p=int8"}) {
    for (const float x : CachedOutput(c, kLayouts[0], text)) ASSERT_EQ(x, 0.0f) << text;
  }
  for (int64_t t = 0; t < 100; t += 2) {  // every other token's row nonzero
    for (int64_t d = 0; d < 64; ++d) c.v.at(0, 0, t, d) = float(d % 7) - 3.0f;
  }
  const std::vector<float> folded = CachedOutput(c, kLayouts[0], "p=int8,pfold=1");
  for (const float x : folded) ASSERT_TRUE(std::isfinite(x));
  // A zero row's scale of 1 (the in-call quantizer's) would set S_i and put the real rows'
  // weights 1/42 of the code range: outputs off by a fifth. The cache holds 0 for it.
  EXPECT_LE(ScaledMaxError(ToDouble(folded), ToDouble(CachedOutput(c, kLayouts[0], ""))), 3e-3);
}

// K-interval attention's weights (on its grid) take the fold too: its statistics are those
// of the unrounded weights (the same bits as with P unrounded) and O is within the fold's
// resolution of the unrounded one, on the integer product (q_len 1) and the float one (5).
TEST(KvCachePfold, KIntervalTakesItToo) {
  const KIntervalOptions kint = ParseKInterval("K=16");
  for (const int64_t q_len : {1, 5}) {
    AttentionCase c({1, 8, 2, q_len, 1000, 128}, true, SinkMode::kNone, Layout::kBHTD,
                    uint32_t(80 + q_len));
    KvCache cache = MakeCache(kInt8Cache, 1, 2, 128, 1000, kLayouts[0]);
    AppendInChunks(cache, 0, c.k, c.v);
    const size_t rows = size_t(8 * q_len);
    const auto run = [&](const char* text) {
      KIntervalRun r{OwnedTensor(1, 8, q_len, 128, Layout::kBHTD), std::vector<float>(rows),
                     std::vector<float>(rows), std::vector<float>(rows), std::vector<float>(rows),
                     std::vector<int32_t>(rows), std::vector<int32_t>(rows)};
      AttentionOptions options = c.options;
      options.precision = CachePrecision(cache.config(), ParsePrecision(text));
      KIntervalForward({1, 8, 2, q_len, 1, 128}, options, kint, c.q.cview(), cache, r.o.view(),
                       r.saved());
      return r;
    };
    const KIntervalRun folded = run("p=int8,pfold=1"), unrounded = run("");
    const std::string what = "q_len " + std::to_string(q_len);
    EXPECT_EQ(folded.m, unrounded.m) << what;
    EXPECT_EQ(folded.Z, unrounded.Z) << what;
    EXPECT_LE(ScaledMaxError(folded.o.Dense(), unrounded.o.Dense()), 3e-3) << what;
    EXPECT_NE(folded.o.storage, unrounded.o.storage) << what << ": nothing was rounded";
  }
}

TEST(KvCachePfold, RejectsEveryCallThatCannotTakeIt) {
  EXPECT_THROW(ParsePrecision("pfold=1"), std::invalid_argument);  // P not int8
  EXPECT_THROW(ParsePrecision("p=bf16,pfold=1"), std::invalid_argument);
  EXPECT_THROW(ParsePrecision("p=int8,pfold=yes"), std::invalid_argument);
  EXPECT_EQ(FormatPrecision(ParsePrecision("p=int8,pfold=1")), "p=int8:pfold=1");
  EXPECT_EQ(FormatPrecision(ParsePrecision("p=int8,pfold=0")), "p=int8");

  AttentionCase c({1, 4, 2, 1, 40, 16}, true, SinkMode::kNone, Layout::kBHTD, 9);
  c.options.precision = ParsePrecision("qk=int8,pv=int8,gran=token,p=int8,pfold=1");
  EXPECT_THROW(c.Run(false), std::invalid_argument);  // in-call K and V: no cache

  const AttentionShape shape{1, 4, 2, 1, 1, 16};
  OwnedTensor o(1, 4, 1, 16, Layout::kBHTD);
  std::fill(o.storage.begin(), o.storage.end(), 7.0f);
  std::vector<float> lse(4, 7.0f);
  const auto rejected = [&](const KvCache& cache, const char* what) {
    AttentionOptions options;
    options.precision = CachePrecision(cache.config(), ParsePrecision("p=int8,pfold=1"));
    EXPECT_THROW(ExactForward(shape, options, c.q.cview(), cache, o.view(), lse.data()),
                 std::invalid_argument)
        << what;
    for (float x : o.storage) ASSERT_EQ(x, 7.0f) << what;
    for (float x : lse) ASSERT_EQ(x, 7.0f) << what;
  };
  for (const Format v : {Format::kFp32, Format::kBf16, Format::kFp8E4M3}) {
    KvCache cache(Config({Format::kInt8, v}, 1, 2, 16, 40));
    AppendInChunks(cache, 0, c.k, c.v);
    rejected(cache, quant::FormatName(v));
  }
  // Thresholded attention's weights are signed: no unsigned codes for them.
  KvCache cache(Config(kInt8Cache, 1, 2, 16, 40));
  AppendInChunks(cache, 0, c.k, c.v);
  AttentionOptions options;
  options.precision = CachePrecision(cache.config(), ParsePrecision("p=int8,pfold=1"));
  ThresholdOptions threshold;
  ThresholdCachedArgs args;
  args.q[0] = c.q.cview();
  args.o = o.view();
  EXPECT_THROW(ThresholdForward(shape, options, threshold, cache, args), std::invalid_argument);
  for (float x : o.storage) ASSERT_EQ(x, 7.0f);
}

}  // namespace
}  // namespace lpattn::test
