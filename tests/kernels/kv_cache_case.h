// Caches for the KV cache's tests (docs/design.md §9): format pairs, layouts (contiguous, and
// paged pools whose tables scatter each slot's blocks), and sequences appended in uneven
// chunks as an engine appends them.
#ifndef LPATTN_TESTS_KERNELS_KV_CACHE_CASE_H_
#define LPATTN_TESTS_KERNELS_KV_CACHE_CASE_H_

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/kv_cache.h"
#include "quant/format.h"
#include "quant/quantizer.h"
#include "tests/kernels/attention_case.h"

namespace lpattn::test {

using quant::Format;

struct FormatPair {
  Format k, v;
};
inline const FormatPair kFormats[] = {
    {Format::kFp32, Format::kFp32},       {Format::kBf16, Format::kBf16},
    {Format::kFp16, Format::kFp16},       {Format::kInt8, Format::kInt8},
    {Format::kFp8E4M3, Format::kFp8E4M3}, {Format::kFp8E5M2, Format::kFp8E5M2},
    {Format::kBf16, Format::kInt8},       {Format::kInt8, Format::kFp32},
};

inline std::string Name(const FormatPair& f) {
  return std::string("k ") + quant::FormatName(f.k) + " v " + quant::FormatName(f.v);
}

// The in-call precision a cache of these formats matches: the same formats, scales per token.
inline Precision InCallPrecision(const FormatPair& f) {
  return ParsePrecision(std::string("qk=") + quant::FormatName(f.k) + ",pv=" +
                        quant::FormatName(f.v) + ",gran=token");
}

inline KvCacheConfig Config(const FormatPair& f, int64_t sequences, int64_t kv_heads, int64_t dim,
                     int64_t capacity) {
  return {sequences, kv_heads, dim, capacity, f.k, f.v};
}

// The contiguous layout, or a paged one with blocks of block_size tokens.
struct CacheLayout {
  int64_t block_size = 0;
  PagedLayout layout = PagedLayout::kHeadMajor;
  std::string Name() const {
    if (block_size == 0) return " contiguous";
    return std::string(layout == PagedLayout::kHeadMajor ? " head-major" : " token-major") +
           " paged " + std::to_string(block_size);
  }
};
inline const CacheLayout kLayouts[] = {{0},
                                {16, PagedLayout::kHeadMajor},
                                {64, PagedLayout::kHeadMajor},
                                {16, PagedLayout::kTokenMajor},
                                {128, PagedLayout::kTokenMajor}};

// A cache of the layout; a paged one gets a pool with a block to spare per slot and tables
// that scatter each slot's blocks over the pool (slots interleaved, each one's blocks in
// reverse order), so that no two consecutive blocks of a sequence are neighbours.
inline KvCache MakeCache(const FormatPair& f, int64_t sequences, int64_t kv_heads, int64_t dim,
                  int64_t capacity, const CacheLayout& layout) {
  KvCacheConfig config = Config(f, sequences, kv_heads, dim, capacity);
  if (layout.block_size == 0) return KvCache(config);
  const int64_t per_slot = (capacity + layout.block_size - 1) / layout.block_size;
  config.block_size = layout.block_size;
  config.blocks = sequences * (per_slot + 1);
  config.layout = layout.layout;
  KvCache cache(config);
  for (int64_t s = 0; s < sequences; ++s) {
    std::vector<int32_t> table;
    for (int64_t i = per_slot - 1; i >= 0; --i) table.push_back(int32_t(i * sequences + s));
    cache.SetBlockTable(s, table.data(), per_slot);
  }
  return cache;
}

// One sequence's K or V, [1, kv_heads, tokens, dim].
inline OwnedTensor Tokens(int64_t kv_heads, int64_t tokens, int64_t dim, uint32_t seed) {
  OwnedTensor t(1, kv_heads, tokens, dim, Layout::kBHTD);
  std::mt19937 rng(seed);
  t.FillNormal(rng);
  return t;
}

// Appends tokens [first, first + n) of a [1, kv_heads, T, dim] K and V.
inline void AppendRange(KvCache& cache, int64_t seq, const OwnedTensor& k, const OwnedTensor& v,
                 int64_t first, int64_t n) {
  const auto at = [&](const OwnedTensor& t) {
    return ConstTensor{t.storage.data() + first * t.strides.token, t.strides};
  };
  cache.Append(seq, n, at(k), at(v));
}

// Appends all of K and V in uneven chunks: a prefill, single tokens, then a second chunk.
inline void AppendInChunks(KvCache& cache, int64_t seq, const OwnedTensor& k, const OwnedTensor& v) {
  const int64_t total = k.tokens;
  int64_t done = std::min<int64_t>(total, 2 * total / 3 + 1);
  AppendRange(cache, seq, k, v, 0, done);
  for (int i = 0; i < 3 && done < total; ++i, ++done) AppendRange(cache, seq, k, v, done, 1);
  if (done < total) AppendRange(cache, seq, k, v, done, total - done);
}

inline std::vector<float> Dequantized(const OwnedTensor& t, Format format) {
  quant::QuantSpec spec;
  spec.format = format;
  spec.granularity = quant::Granularity::kToken;
  std::vector<float> out(t.storage.size());
  quant::QuantizeDequantize(spec, {t.storage.data(), 1, t.heads, t.tokens, t.dim, 0,
                                   t.strides.head, t.strides.token},
                            out.data(), "test");
  return out;
}

}  // namespace lpattn::test

#endif  // LPATTN_TESTS_KERNELS_KV_CACHE_CASE_H_
