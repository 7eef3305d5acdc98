// The tiled skeleton's pieces that every pass shares: strided head rows, the per-thread
// workspace, operand packing and storing, the task grid and its TBB loop, each query's visible
// keys within a tile, and the backward's per-row parameters staged as vector lanes.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_SKELETON_TILE_WORKSPACE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_SKELETON_TILE_WORKSPACE_INL_H_
#undef LPATTN_KERNELS_SKELETON_TILE_WORKSPACE_INL_H_
#else
#define LPATTN_KERNELS_SKELETON_TILE_WORKSPACE_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "kernels/native/x86_targets.h"
#include "kernels/native/amx_products.h"
#include "kernels/native/bf16_pair_products.h"
#include "kernels/native/cpu_features.h"
#include "kernels/native/int_matmul_tile-inl.h"
#include "kernels/skeleton/attention_problem.h"
#include "kernels/skeleton/four_rows-inl.h"
#include "kernels/skeleton/lane_sums-inl.h"
#include "kernels/skeleton/matmul_tile-inl.h"
#include "kernels/skeleton/tile_sizes.h"
#include "kernels/skeleton/vector_slots-inl.h"
#include "quant/codec-inl.h"
#include "quant/format.h"
#include "tbb/blocked_range.h"
#include "tbb/parallel_for.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Head dimension rounded up to whole vectors: the column count of every D-wide tile.
HWY_INLINE size_t PaddedDim(size_t dim) {
  const hn::ScalableTag<float> d;
  return hwy::RoundUpTo(dim, hn::Lanes(d));
}

// Rows of one (batch, head) of a strided view.
struct HeadRows {
  const float* data;
  size_t token_stride;
  const uint16_t* codes = nullptr;  // 16-bit codes instead of data (CodedKv), same strides
  bool fp16 = false;
  const uint8_t* codes8 = nullptr;  // or 8-bit codes, with a scale per token
  const float* token_scales = nullptr;
  size_t scale_stride = 1;  // between rows' scales
  bool e5m2 = false;
  bool int8 = false;  // codes8 are int8 codes, not fp8
  bool no_nan = false;  // codes8 hold no NaN code (CodedKv::no_nan)
  // Paged (CodedKv::block_tables): this batch's block table, blocks of 2^block_shift tokens
  // block_stride elements (scale_block_stride scales) apart.
  const int32_t* block_table = nullptr;
  uint32_t block_shift = 0;
  size_t block_stride = 0, scale_block_stride = 0;

  // Where token t's row (its scale) lies, in elements (scales) from the head's first.
  size_t RowOffset(size_t t) const {
    if (block_table == nullptr) return t * token_stride;
    return size_t(block_table[t >> block_shift]) * block_stride +
           (t & ((size_t(1) << block_shift) - 1)) * token_stride;
  }
  size_t ScaleOffset(size_t t) const {
    if (block_table == nullptr) return t * scale_stride;
    return size_t(block_table[t >> block_shift]) * scale_block_stride +
           (t & ((size_t(1) << block_shift) - 1)) * scale_stride;
  }
  const float* row(size_t t) const { return data + RowOffset(t); }
  const uint16_t* code_row(size_t t) const { return codes + RowOffset(t); }
  const uint8_t* byte_row(size_t t) const { return codes8 + RowOffset(t); }
  float scale(size_t t) const { return token_scales[ScaleOffset(t)]; }
  bool coded() const { return codes != nullptr || codes8 != nullptr; }
  // Whether rows [first, first + n) are token_stride apart (a tile can be read in place).
  bool Contiguous(size_t first, size_t n) const {
    return block_table == nullptr || n == 0 || (first >> block_shift) == ((first + n - 1) >> block_shift);
  }
};
HWY_INLINE HeadRows RowsOf(const ConstTensor& t, size_t b, size_t h) {
  return {t.data + b * size_t(t.strides.batch) + h * size_t(t.strides.head),
          size_t(t.strides.token)};
}
// Rows of a head (K, V, or Q with fp8 codes): from the codes when the problem holds them, else
// from t.
HWY_INLINE HeadRows CodedRowsOf(const ConstTensor& t, const CodedKv& coded, size_t b, size_t h) {
  if (!coded.set()) return RowsOf(t, b, h);
  const size_t offset = b * size_t(coded.strides.batch) + h * size_t(coded.strides.head);
  HeadRows rows{nullptr, size_t(coded.strides.token)};
  if (coded.block_tables != nullptr) {
    rows.block_table = coded.block_tables + b * coded.table_stride;
    rows.block_shift = coded.block_shift;
    rows.block_stride = coded.block_stride;
    rows.scale_block_stride = coded.scale_block_stride;
  }
  if (coded.token_scales != nullptr) {  // 8-bit codes', or fp8 K's built AMX rows'
    const Strides& s = coded.scale_strides;
    rows.token_scales = coded.token_scales + b * size_t(s.batch) + h * size_t(s.head);
    rows.scale_stride = size_t(s.token);
  }
  if (coded.codes8 != nullptr) {
    rows.codes8 = coded.codes8 + offset;
    rows.e5m2 = coded.e5m2;
    rows.int8 = coded.int8;
    rows.no_nan = coded.no_nan;
  } else if (coded.data != nullptr) {
    rows.codes = coded.data + offset;
    rows.fp16 = coded.fp16;
  } else {
    rows.data = coded.floats + offset;
  }
  return rows;
}
// bytes bytes from src to dst in whole vectors and a scalar tail: a gathered row (a paged
// tile's), short enough that a call to memcpy would cost more than the copy.
HWY_INLINE void CopyBytes(const void* HWY_RESTRICT src, size_t bytes, void* HWY_RESTRICT dst) {
  const hn::ScalableTag<uint8_t> d;
  const size_t N = hn::Lanes(d);
  const uint8_t* from = static_cast<const uint8_t*>(src);
  uint8_t* to = static_cast<uint8_t*>(dst);
  size_t i = 0;
  for (; i + N <= bytes; i += N) hn::StoreU(hn::LoadU(d, from + i), d, to + i);
  for (; i < bytes; ++i) to[i] = from[i];
}

HWY_INLINE float* RowOf(const Tensor& t, size_t b, size_t h, size_t token) {
  return t.data + b * size_t(t.strides.batch) + h * size_t(t.strides.head) +
         token * size_t(t.strides.token);
}

// The next key tile's rows of a decode tile's K and V (either may be absent), asked for one
// key at a time as the tile's scores are computed (AskRowsAhead, from FewQueryScoresOf), so the
// requests spread over the tile's work rather than queueing up before it (docs/design.md §8).
// n = 0: nothing to ask for. Set per key tile by the forward's tile loop and cleared after
// the tile's scores, so no other product of the thread's workspace sees a stale one (the
// pointers name the task's HeadRows).
struct RowsAhead {
  const HeadRows* keys = nullptr;
  const HeadRows* values = nullptr;
  size_t first = 0, n = 0, dim = 0;
  // The int8 products' K codes (IntQk, apart from any HeadRows) of slice (b, kv_head):
  // asked for by FewQueryIntScores as FewQueryScoresOf asks for `keys`.
  const AttentionProblem* int_keys = nullptr;
  size_t b = 0, kv_head = 0;
  // Set by FlattenRowsAhead where every source is rows of codes: the next tile's first K and V
  // rows (either null) and the bytes between rows, or a paged source's base and code size, so
  // that a request is a few prefetches, not a row resolved through its HeadRows (docs/design.md
  // §8).
  // Row j lies at flat_rows + offset * flat_stride, offset j, or a paged source's RowOffset
  // (its rows' base and code size then).
  const char* flat_rows[2] = {nullptr, nullptr};
  size_t flat_stride[2] = {0, 0};
  const HeadRows* flat_pages[2] = {nullptr, nullptr};   // a paged source
  const HeadRows* flat_scaled[2] = {nullptr, nullptr};  // a source with a scale a row
  size_t flat_bytes[2] = {0, 0};                        // a row's bytes
  // int_keys' next tile in a flat request: its first row where contiguous (codes dim bytes
  // apart, scales and sums consecutive), else each key's row found through its block table.
  size_t flat_int_row = 0;
  bool flat_int_paged = false;
  bool flat = false, into_l1 = false;
};
// Where a decode tile's packed queries lie for the few-query score products: fp32 rows
// (FewQueryScores), or int16 or biased byte rows and their scales (FewQueryIntScores,
// FewQueryQuadScores), kFewQueries rows `dim` apart. The workspace's own buffers, or a spanned
// run's (tiled_forward-inl.h), packed once for all of its key tiles.
struct FewQueryPanel {
  float* rows = nullptr;
  float* scales = nullptr;
  int16_t* IntRows() const { return reinterpret_cast<int16_t*>(rows); }
  uint8_t* QuadRows() const { return reinterpret_cast<uint8_t*>(rows); }
};

// Per-thread scratch, O(tile * D), sized for the largest head dim, kept for the thread's life.
struct TileWorkspace {
  static constexpr size_t kPanel = kMaxHeadDim * kTileMax;  // transposed operand [D][tile]
  // A score-shaped tile: kTileQ x kTileK in the passes over long sequences, up to
  // kTileMax x kTileMax in the whole-head backward of short ones.
  static constexpr size_t kScores = kTileMax * kTileMax;
  static constexpr size_t kRows = kTileMax * kMaxHeadDim;   // D-wide tile [tile][Dpad]
  TileWorkspace()
      : panel_a(hwy::AllocateAligned<float>(kPanel)),
        panel_b(hwy::AllocateAligned<float>(kPanel)),
        scores(hwy::AllocateAligned<float>(kScores)),
        grads(hwy::AllocateAligned<float>(kScores)),
        slopes(hwy::AllocateAligned<float>(kScores)),
        acc_a(hwy::AllocateAligned<float>(kRows)),
        acc_b(hwy::AllocateAligned<float>(kRows)),
        acc_c(hwy::AllocateAligned<float>(kRows)),
        rows(hwy::AllocateAligned<float>(kRows)),
        rows2(hwy::AllocateAligned<float>(kRows)),
        key_rows(hwy::AllocateAligned<float>(kRows)),
        int_panel(hwy::AllocateAligned<int16_t>(kPanel)) {}
  hwy::AlignedFreeUniquePtr<float[]> panel_a, panel_b;
  hwy::AlignedFreeUniquePtr<float[]> scores, grads;
  hwy::AlignedFreeUniquePtr<float[]> slopes;  // a sparse transform's da/ds tile
  hwy::AlignedFreeUniquePtr<float[]> acc_a, acc_b, acc_c;  // accumulators
  hwy::AlignedFreeUniquePtr<float[]> rows, rows2;       // zero-padded operand rows
  hwy::AlignedFreeUniquePtr<float[]> key_rows;          // a decoded key tile (CodedKv)
  hwy::AlignedFreeUniquePtr<int16_t[]> int_panel;       // int8 queries' pair panel (IntQk)
  HWY_ALIGN float col_scale[kTileMax];                  // and their scales
  HWY_ALIGN int32_t weight_pairs[(kTileK / 2 + 1) * kTileQ];  // int8 P by key pair (IntPv)
  HWY_ALIGN float weight_scale[kTileQ];                 // P's scale per query
  HWY_ALIGN float value_scale[kMaxHeadDim + 32];        // V's scale per column
  HWY_ALIGN float visible[kTileMax];                    // per-row key limit, as float
  uint32_t range_begin[kTileMax], range_end[kTileMax];  // per-row inner ranges
  HWY_ALIGN float factor[kTileMax];
  HWY_ALIGN float row_a[kTileMax], row_b[kTileMax];     // per-row sums
  bool few_queries = false;  // the forward's query tile packed for FewQueryScores
  bool few_int_queries = false;  // ... for FewQueryIntScores or FewQueryQuadScores
  // Where those packed queries lie: rows2, or int_panel and col_scale, or a spanned run's own.
  FewQueryPanel few_panel;
  RowsAhead ahead;           // a decode tile's next rows, for FewQueryScores to ask for
  static constexpr size_t kMaxRowParams = 12;
  HWY_ALIGN float row_params[kMaxRowParams][kTileQ];    // staged per-row parameters

  // The score tiles of one query tile against its first `keys` keys ([keys][kTileQ], key-major),
  // kept from a statistics pass for the weighting pass so that Q K^T is computed once (and, in
  // the backward's query side, the score and dP tiles together: twice as many). The only
  // scratch that grows with the sequence: up to kMaxCachedKeys keys (3 MiB per thread in the
  // forward, 6 MiB in the backward); longer rows recompute their scores instead.
  static constexpr size_t kMaxCachedKeys = 8192;
  float* ScoreCache(size_t keys) {
    if (keys > score_cache_keys) {
      score_cache = hwy::AllocateAligned<float>(keys * kTileQ);
      score_cache_keys = keys;
    }
    return score_cache.get();
  }
  hwy::AlignedFreeUniquePtr<float[]> score_cache;
  size_t score_cache_keys = 0;

  // The AMX score product's bf16 operands (score_tile-inl.h): a query tile's pair panel
  // [depth / 2][kTileQ] words, one key tile's rows [kTileK][depth] and the tiles' scratch for a
  // last block of fewer than 16 rows, depth up to 4 D (the fp16 split). Allocated on a thread's
  // first AMX score tile.
  static constexpr size_t kAmxDepth = 4 * kMaxHeadDim;
  uint32_t* AmxQueryPairs() { return reinterpret_cast<uint32_t*>(AmxCodes()); }
  uint16_t* AmxKeyRows() { return AmxCodes() + kAmxDepth * kTileQ; }
  uint16_t* AmxTail() { return AmxCodes() + kAmxDepth * (kTileQ + kTileK); }
  uint16_t* AmxCodes() {
    if (!amx_codes) amx_codes = hwy::AllocateAligned<uint16_t>(kAmxDepth * (kTileQ + kTileK + 16));
    return amx_codes.get();
  }
  hwy::AlignedFreeUniquePtr<uint16_t[]> amx_codes;

  // A spanned split-KV task's scratch (tiled_forward-inl.h's SpannedKeyBlockTask), allocated
  // on first use: per head, an accumulator of up to kSpanRows rows of kMaxHeadDim columns and
  // a decode tile's packed queries (FewQueryPanel: kFewQueries rows of up to kMaxHeadDim
  // floats, kTileQ scales).
  static constexpr size_t kSpanAccumulator = kSpanRows * kMaxHeadDim;
  static constexpr size_t kSpanPanel = kFewQueries * kMaxHeadDim + kTileQ;
  float* SpanAccumulator(size_t head) { return SpanScratch() + head * kSpanAccumulator; }
  FewQueryPanel SpanPanel(size_t head) {
    float* panel = SpanScratch() + kSpanHeads * kSpanAccumulator + head * kSpanPanel;
    return {panel, panel + kFewQueries * kMaxHeadDim};
  }
  float* SpanScratch() {
    if (!span_scratch) {
      span_scratch = hwy::AllocateAligned<float>(kSpanHeads * (kSpanAccumulator + kSpanPanel));
    }
    return span_scratch.get();
  }
  hwy::AlignedFreeUniquePtr<float[]> span_scratch;

  // A paged int8 K tile's rows, sums and scales gathered for the integer products
  // (score_tile-inl.h's IntKeyRows); the rows allocated on first use.
  int8_t* GatheredKeyRows() {
    if (!gathered_keys) gathered_keys = hwy::AllocateAligned<int8_t>(kTileK * kMaxHeadDim);
    return gathered_keys.get();
  }
  hwy::AlignedFreeUniquePtr<int8_t[]> gathered_keys;
  HWY_ALIGN int32_t key_sums[kTileK];
  HWY_ALIGN float key_scales[kTileK];
  const int8_t* key_blocks[kTileK / 16 + 1];  // a paged K tile's 16-row blocks, for AMX tiles
};

// A packed row's factor: `factor`, divided by max(||row||, 1e-12) with unit_rows.
HWY_INLINE float RowFactor(const float* row, size_t dim, float factor, bool unit_rows) {
  if (!unit_rows) return factor;
  double norm = 0.0;
  for (size_t c = 0; c < dim; ++c) norm += double(row[c]) * row[c];
  return float(factor / std::max(std::sqrt(norm), 1e-12));
}

// Row `row` of dim values rounded to a float format's cast (bf16, fp16: scale 1), as quant's
// codecs round, into out (dim rounded up to whole vectors; zero past dim); `row` itself for
// fp32. Q's rounding as its tiles are packed (AttentionProblem::q_cast).
HWY_INLINE const float* CastRow(const float* row, size_t dim, quant::Format format,
                                float* HWY_RESTRICT out) {
  if (format == quant::Format::kFp32) return row;
  const hn::ScalableTag<float> d;
  const size_t padded = hwy::RoundUpTo(dim, hn::Lanes(d));
  std::copy(row, row + dim, out);
  std::fill(out + dim, out + padded, 0.0f);
  for (size_t c = 0; c < padded; c += hn::Lanes(d)) {
    hn::Store(quant::HWY_NAMESPACE::RoundLanesUnscaled(d, hn::Load(d, out + c), format), d,
              out + c);
  }
  return out;
}

#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
// panel[c0 + c][i0 + r] = factors[r] * rows[r][c0 + c] for a block of N rows and N columns
// (N lanes), transposed in registers: log2(N) rounds of ConcatEven/ConcatOdd over the block's
// vectors (row k's even and odd lanes after row k + 1's) leave vector c holding column c. The
// scalar stores they replace (N a vector) were 3% of a causal forward's time at D 64
// (docs/performance.md §4.14).
// With a cast, each loaded vector is rounded to it first (bf16 and fp16 Q), as CastRow rounds.
template <class D>
HWY_INLINE void PackTransposedBlock(D d, const float* const* rows, const float* factors,
                                    size_t c0, size_t width, float* HWY_RESTRICT out,
                                    quant::Format cast = quant::Format::kFp32) {
  constexpr size_t N = hn::MaxLanes(D());
  hn::Vec<D> v[N], next[N];
  for (size_t r = 0; r < N; ++r) v[r] = hn::LoadU(d, rows[r] + c0);
  if (cast != quant::Format::kFp32) {
    for (size_t r = 0; r < N; ++r) v[r] = quant::HWY_NAMESPACE::RoundLanesUnscaled(d, v[r], cast);
  }
  for (size_t round = 1; round < N; round *= 2) {
    for (size_t k = 0; k < N / 2; ++k) {
      next[k] = hn::ConcatEven(d, v[2 * k + 1], v[2 * k]);
      next[k + N / 2] = hn::ConcatOdd(d, v[2 * k + 1], v[2 * k]);
    }
    for (size_t r = 0; r < N; ++r) v[r] = next[r];
  }
  const auto f = hn::LoadU(d, factors);
  for (size_t c = 0; c < N; ++c) hn::StoreU(hn::Mul(v[c], f), d, out + (c0 + c) * width);
}
#endif

// panel[d][i] = factor * rows(first + i)[d] for i < n, zero for n <= i < width: the
// transposed operand of a score product, packed once per task. With unit_rows each row is
// also divided by max(||row||, 1e-12) (thresholded attention's L2-normalised queries); with a
// cast, each value is rounded to it first (CastRow). Whole blocks of N rows and columns are
// rounded and transposed in registers (PackTransposedBlock), the rest element by element; unit
// rows with a cast take the element path (their norm is the rounded row's).
HWY_INLINE void PackTransposed(const HeadRows& src, size_t first, size_t n, size_t dim,
                               float factor, size_t width, float* HWY_RESTRICT panel,
                               bool unit_rows = false,
                               quant::Format cast = quant::Format::kFp32) {
  std::fill(panel, panel + dim * width, 0.0f);
  size_t i0 = 0;
#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<float> d;
  constexpr size_t N = hn::MaxLanes(decltype(d)());
  const size_t block_dim = dim / N * N;
  if ((cast == quant::Format::kFp32 || !unit_rows) && block_dim != 0) {
    for (; i0 + N <= n; i0 += N) {
      const float* rows[N];
      HWY_ALIGN float factors[N];
      for (size_t r = 0; r < N; ++r) {
        rows[r] = src.row(first + i0 + r);
        factors[r] = RowFactor(rows[r], dim, factor, unit_rows);
      }
      for (size_t c0 = 0; c0 < block_dim; c0 += N) {
        PackTransposedBlock(d, rows, factors, c0, width, panel + i0, cast);
      }
      for (size_t r = 0; r < N; ++r) {
        for (size_t c = block_dim; c < dim; ++c) {
          panel[c * width + i0 + r] =
              factors[r] * quant::RoundToFormat(cast, rows[r][c], 1.0f);
        }
      }
    }
  }
#endif
  HWY_ALIGN float rounded[kMaxHeadDim + 64];
  for (size_t i = i0; i < n; ++i) {
    const float* row = CastRow(src.row(first + i), dim, cast, rounded);
    const float row_factor = RowFactor(row, dim, factor, unit_rows);
    for (size_t c = 0; c < dim; ++c) panel[c * width + i] = row_factor * row[c];
  }
}

// Right operand of a D-wide product: the rows themselves when D fills whole vectors, else a
// zero-padded copy (reading past D in the caller's memory is not allowed).
// Rows [first, first + n) of 16-bit codes decoded to fp32 rows of out_stride floats, zero
// beyond dim: the native bf16/fp16 path's conversion, one L1-sized tile at a time.
// bf16 widens by a shift (Highway's PromoteTo); fp16 by F16C's vcvtph2ps on AVX2 and AVX3,
// exact for every fp16 value. On SSE4, which has no F16C, Highway 1.0.3's emulated PromoteTo
// turns fp16 inf and NaN into finite values, so the codec's minifloat decoder runs there.
// 8-bit rows: each code's value times its token's scale, exactly the simulation's dequantized
// value (quant::QuantizeToCodes); fp8 with the codec's minifloat decoder, int8 (a KvCache's V)
// by conversion.
HWY_INLINE void DecodeByteRows(const HeadRows& src, size_t first, size_t n, size_t dim,
                              size_t out_stride, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(df)> d8;
  const size_t N = hn::Lanes(df);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* codes = src.byte_row(first + i);
    const float scale = src.scale(first + i);
    const auto vscale = hn::Set(df, scale);
    float* row = out + i * out_stride;
    size_t c = 0;
    if (src.int8) {
      const hn::Rebind<int8_t, decltype(df)> ds8;
      const int8_t* signed_codes = reinterpret_cast<const int8_t*>(codes);
      for (; c + N <= dim; c += N) {
        const auto value = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(ds8, signed_codes + c)));
        hn::StoreU(hn::Mul(value, vscale), df, row + c);
      }
      for (; c < dim; ++c) row[c] = float(signed_codes[c]) * scale;
    } else {
      namespace qn = quant::HWY_NAMESPACE;
      if (!src.e5m2 && src.no_nan) {  // 2^-8 of each value, the 2^8 in the scale
        const auto scale256 = hn::Set(df, scale * 256.0f);
        for (; c + N <= dim; c += N) {
          hn::StoreU(hn::Mul(qn::DecodeE4M3Over256(df, hn::LoadU(d8, codes + c)), scale256), df,
                     row + c);
        }
      }
      for (; c + N <= dim; c += N) {
        const auto bytes = hn::LoadU(d8, codes + c);
        const auto value = src.e5m2 ? qn::DecodeFp8Lanes<quant::kE5M2Layout>(df, bytes)
                                    : qn::DecodeFp8Lanes<quant::kE4M3Layout>(df, bytes);
        hn::StoreU(hn::Mul(value, vscale), df, row + c);
      }
      for (; c < dim; ++c) {
        row[c] = (src.e5m2 ? quant::DecodeE5M2(codes[c]) : quant::DecodeE4M3(codes[c])) * scale;
      }
    }
    std::fill(row + dim, row + out_stride, 0.0f);
  }
}

HWY_INLINE void DecodeRows(const HeadRows& src, size_t first, size_t n, size_t dim,
                           size_t out_stride, float* HWY_RESTRICT out) {
  if (src.codes8 != nullptr) {
    DecodeByteRows(src, first, n, dim, out_stride, out);
    return;
  }
  namespace qn = quant::HWY_NAMESPACE;
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  for (size_t i = 0; i < n; ++i) {
    const uint16_t* codes = src.code_row(first + i);
    float* row = out + i * out_stride;
    size_t c = 0;
    if (src.fp16) {
      for (; c + N <= dim; c += N) hn::StoreU(qn::LoadFp16Lanes(df, codes + c), df, row + c);
    } else {
      for (; c + N <= dim; c += N) hn::StoreU(qn::LoadBf16Lanes(df, codes + c), df, row + c);
    }
    for (; c < dim; ++c) row[c] = src.fp16 ? quant::DecodeFp16(codes[c]) : quant::DecodeBf16(codes[c]);
    std::fill(row + dim, row + out_stride, 0.0f);
  }
}

// Key rows [first, first + n) as a score product's left operand: in place, or decoded (or
// gathered, when paged rows cross a block).
HWY_INLINE LhsView KeyTile(const HeadRows& k, size_t first, size_t n, size_t dim,
                           float* HWY_RESTRICT scratch) {
  if (!k.coded() && k.Contiguous(first, n)) return {k.row(first), k.token_stride, 1};
  if (!k.coded()) {
    for (size_t i = 0; i < n; ++i) std::copy_n(k.row(first + i), dim, scratch + i * dim);
    return {scratch, dim, 1};
  }
  DecodeRows(k, first, n, dim, dim, scratch);
  return {scratch, dim, 1};
}

// Rows x cols of a tile (row stride `stride`) rounded in place to `format` with `scale`, exactly
// as quant's codecs round (x / scale, round, times scale).
HWY_INLINE void RoundTile(float* HWY_RESTRICT tile, size_t rows, size_t stride, size_t cols,
                          quant::Format format, float scale) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  if (scale == 1.0f) {  // the float formats' casts and P's fixed float scale: no division
    for (size_t r = 0; r < rows; ++r) {
      for (size_t c = 0; c < cols; c += N) {
        float* w = tile + r * stride + c;
        hn::StoreU(quant::HWY_NAMESPACE::RoundLanesUnscaled(d, hn::LoadU(d, w), format), d, w);
      }
    }
    return;
  }
  if (quant::InverseIsExact(scale)) {  // fp16's power-of-two block scales: no division
    const auto inverse = hn::Set(d, 1.0f / scale), vscale = hn::Set(d, scale);
    for (size_t r = 0; r < rows; ++r) {
      for (size_t c = 0; c < cols; c += N) {
        float* w = tile + r * stride + c;
        const auto x = hn::Mul(hn::LoadU(d, w), inverse);
        hn::StoreU(hn::Mul(quant::HWY_NAMESPACE::RoundLanesUnscaled(d, x, format), vscale), d, w);
      }
    }
    return;
  }
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; c += N) {
      float* w = tile + r * stride + c;
      hn::StoreU(quant::HWY_NAMESPACE::RoundLanes(d, hn::LoadU(d, w), format, scale), d, w);
    }
  }
}

// docs/math.md §4 P quantization: a key-major weight tile (nk rows of `columns` queries).
HWY_INLINE void RoundWeights(float* HWY_RESTRICT st, size_t nk, size_t columns,
                             quant::Format format, float scale) {
  RoundTile(st, nk, kTileQ, columns, format, scale);
}

// docs/math.md §4.3 (pfold): the weights of keys [j0, j0 + nk) of a key-major tile (`columns`
// wide) times their tokens' V scales s_j, each row then over its largest such product S_i
// (written to units[i], 0 for a row whose products are all 0), in place: P's int8 rounding
// then codes each row's w_ij s_j on the tile's own scale, [0, 1] to [0, 127].
HWY_INLINE void FoldTokenScales(const HeadRows& v, size_t j0, size_t nk, size_t columns,
                                float* HWY_RESTRICT tile, float* HWY_RESTRICT units) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  for (size_t c = 0; c < columns; c += N) {
    auto largest = hn::Zero(d);
    for (size_t j = 0; j < nk; ++j) {
      float* w = tile + j * kTileQ + c;
      const auto folded = hn::Mul(hn::LoadU(d, w), hn::Set(d, v.scale(j0 + j)));
      hn::StoreU(folded, d, w);
      largest = hn::Max(largest, folded);
    }
    hn::StoreU(largest, d, units + c);
    const auto positive = hn::Gt(largest, hn::Zero(d));
    const auto inverse = hn::IfThenElseZero(positive, hn::Div(hn::Set(d, 1.0f), largest));
    for (size_t j = 0; j < nk; ++j) {
      float* w = tile + j * kTileQ + c;
      hn::StoreU(hn::Mul(hn::LoadU(d, w), inverse), d, w);
    }
  }
}

// The rounded folded weights (codes times 1/127) back on the scale of each token's own
// values, times S_i / s_j, for the products that multiply a row of V by its token's scale:
// weight times value then gives code (S_i / 127) v's code, up to fp32 rounding, as the
// integer product does (a token scale of 0: a zero row, weight 0).
HWY_INLINE void UnfoldTokenScales(const HeadRows& v, size_t j0, size_t nk, size_t columns,
                                  const float* HWY_RESTRICT units, float* HWY_RESTRICT tile) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  for (size_t j = 0; j < nk; ++j) {
    const float s = v.scale(j0 + j);
    const auto inverse = hn::Set(d, s > 0.0f ? 1.0f / s : 0.0f);
    for (size_t c = 0; c < columns; c += N) {
      float* w = tile + j * kTileQ + c;
      hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, w), hn::LoadU(d, units + c)), inverse), d, w);
    }
  }
}

// docs/math.md §4.2: the scale of a block of the backward's P or dS whose largest magnitude is
// amax: 1 unscaled (bf16), else ScaleOfMax (int8's amax / FormatMax, fp16's power of two); 0
// for a block left as it is (no finite nonzero magnitude, or one below every scale).
HWY_INLINE float BackwardBlockScale(const BackwardRounding& r, float amax) {
  if (!r.scaled) return 1.0f;
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 0.0f;
  return quant::ScaleOfMax(r.format, amax);
}

// The largest magnitude in a block (rows x cols, `stride` apart), and with kPoison whether an
// entry was inf or NaN (a NaN sum of entry x 0). Four rows at a time into four chains: one
// chain of maxima and sums was bound by their latency (a tenth of a bwd=int8 backward's time).
struct BlockMagnitude {
  float amax;
  bool finite;
};
template <bool kPoison>
HWY_INLINE BlockMagnitude BlockAbsMax(const float* tile, size_t rows, size_t stride,
                                      size_t cols) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto zero = hn::Zero(d);
  auto m0 = zero, m1 = zero, m2 = zero, m3 = zero, p0 = zero, p1 = zero, p2 = zero, p3 = zero;
  for (size_t c = 0; c < cols; c += N) {
    const auto live = hn::FirstN(d, cols - c);
    const auto at = [&](size_t row) HWY_ATTR {
      return hn::IfThenElseZero(live, hn::LoadU(d, tile + row * stride + c));
    };
    size_t row = 0;
    for (; row + 4 <= rows; row += 4) {
      const auto x0 = at(row), x1 = at(row + 1), x2 = at(row + 2), x3 = at(row + 3);
      m0 = hn::Max(m0, hn::Abs(x0)), m1 = hn::Max(m1, hn::Abs(x1));
      m2 = hn::Max(m2, hn::Abs(x2)), m3 = hn::Max(m3, hn::Abs(x3));
      if constexpr (kPoison) {
        p0 = hn::Add(p0, hn::Mul(x0, zero)), p1 = hn::Add(p1, hn::Mul(x1, zero));
        p2 = hn::Add(p2, hn::Mul(x2, zero)), p3 = hn::Add(p3, hn::Mul(x3, zero));
      }
    }
    for (; row < rows; ++row) {
      const auto x = at(row);
      m0 = hn::Max(m0, hn::Abs(x));
      if constexpr (kPoison) p0 = hn::Add(p0, hn::Mul(x, zero));
    }
  }
  const auto m = hn::Max(hn::Max(m0, m1), hn::Max(m2, m3));
  const auto p = hn::Add(hn::Add(p0, p1), hn::Add(p2, p3));
  return {hn::GetLane(hn::MaxOfLanes(d, m)),
          !kPoison || !std::isnan(hn::GetLane(hn::SumOfLanes(d, p)))};
}

// docs/math.md §4.2: one block of the backward's P or dS (rows x cols of a tile whose rows are
// `stride` apart, padded to whole vectors) rounded in place: scaled formats with one scale for
// the block, amax / FormatMax over its rows x cols (a block without a finite nonzero magnitude
// is left as it is), bf16 at scale 1.
HWY_INLINE void RoundBackwardBlock(const BackwardRounding& r, float* tile, size_t rows,
                                   size_t stride, size_t cols) {
  if (r.format == quant::Format::kFp32) return;
  const float amax = r.scaled ? BlockAbsMax<false>(tile, rows, stride, cols).amax : 0.0f;
  const float scale = BackwardBlockScale(r, amax);
  if (scale != 0.0f) RoundTile(tile, rows, stride, cols, r.format, scale);
}

#if !HWY_HAVE_SCALABLE
// PackWeightCodes for a tile whose rows past the first 4 are never read (a decode tile) on a
// target whose vector holds a whole group of such rows (AVX-512's quads, AVX2's pairs): the
// group's kGroup keys x 4 rows gathered into one vector (four_rows-inl.h), one division and
// rounding for them, each key's codes shifted to its bits and the 128-bit blocks added (the
// bit fields are disjoint: the sum is the or). The row-major loop spent kGroup divisions and
// roundings on vectors with 4 live lanes (a tenth of an int8 decode step). The same codes;
// only words' lanes 0-3 are written. False where the vector does not hold one group.
template <size_t kGroup>
HWY_INLINE bool PackFourRowCodes(const float* weights, size_t nk, size_t groups, float p_scale,
                                 int32_t* HWY_RESTRICT words, size_t stride) {
  namespace qn = quant::HWY_NAMESPACE;
  const hn::ScalableTag<float> df;
  if constexpr (hn::MaxLanes(decltype(df)()) != kFewQueries * kGroup) {
    return false;
  } else {
    const hn::RebindToSigned<decltype(df)> di;
    const hn::CappedTag<int32_t, kFewQueries> d4;
    constexpr int kBits = 32 / kGroup;
    const auto scale = hn::Set(df, p_scale);
    const auto mask = hn::Set(di, (1 << kBits) - 1);
    // Lane l holds key l / 4 of its group, whose code takes bits [kBits (l / 4), + kBits).
    const auto shift = hn::Mul(hn::ShiftRight<2>(hn::Iota(di, 0)), hn::Set(di, kBits));
    for (size_t g = 0; g < groups; ++g) {
      const size_t j = g * kGroup;
      hn::Vec<decltype(df)> x;
      if (j + kGroup <= nk) {
        x = Gather4(df, weights + j * stride, stride);
      } else {  // zero past nk
        HWY_ALIGN float rows[kFewQueries * kGroup] = {};
        for (size_t r = 0; j + r < nk && r < kGroup; ++r) {
          std::copy_n(weights + (j + r) * stride, kFewQueries, rows + r * kFewQueries);
        }
        x = hn::Load(df, rows);
      }
      const auto code = qn::EncodeInt8Lanes(df, hn::Div(x, scale));
      hn::StoreU(SumOfBlocks(di, hn::Shl(hn::And(code, mask), shift)), d4, words + g * stride);
    }
    return true;
  }
}
#endif

// A tile's rows (key-major weights, `stride` floats a row) as int8 codes through p_scale,
// exactly as RoundWeights would round them, grouped by `group` rows (2: int16 pairs, 4: byte
// quads) into words[g * stride + i] for groups g < groups, zero past nk rows. (A NaN weight
// has no int8 code: it adds 0.) Columns from live_columns on may be left unwritten: their
// lanes are never read. kBf16Codes (with pairs): each code as its bf16 value (exact), the
// pairs the bf16 dot tiles read.
template <size_t kGroup, bool kBf16Codes = false>
HWY_INLINE void PackWeightCodes(const float* weights, size_t nk, size_t groups, size_t columns,
                                float p_scale, int32_t* HWY_RESTRICT words,
                                size_t stride = kTileQ, size_t live_columns = kTileQ) {
  namespace qn = quant::HWY_NAMESPACE;
  static_assert(!kBf16Codes || kGroup == 2, "bf16 codes come in pairs");
#if !HWY_HAVE_SCALABLE
  if (!kBf16Codes && live_columns <= kFewQueries &&
      PackFourRowCodes<kGroup>(weights, nk, groups, p_scale, words, stride)) {
    return;
  }
#endif
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::RebindToUnsigned<decltype(df)> du;
  const size_t N = hn::Lanes(df);
  constexpr int kBits = 32 / kGroup;
  const auto inv = hn::Set(df, p_scale);
  const auto mask = hn::Set(di, (1 << kBits) - 1);
  for (size_t g = 0; g < groups; ++g) {
    for (size_t i = 0; i < columns; i += N) {
      auto word = hn::Zero(di);
      for (size_t r = 0; r < kGroup; ++r) {
        const size_t j = kGroup * g + r;
        if (j >= nk) break;
        auto code = qn::EncodeInt8Lanes(df, hn::Div(hn::LoadU(df, weights + j * stride + i), inv));
        if constexpr (kBf16Codes) {  // the upper half of the code's fp32 bits
          code = hn::BitCast(di, hn::ShiftRight<16>(hn::BitCast(du, hn::ConvertTo(df, code))));
        }
        word = hn::Or(word, hn::ShiftLeftSame(hn::And(code, mask), int(kBits * r)));
      }
      hn::StoreU(word, di, words + g * stride + i);
    }
  }
}

// One key tile's quad rows of V codes (keys from a multiple of 4; IntPv::v_quads) as the int16
// pair tile's panel: pair row r holds keys 2r and 2r + 1, each column's two codes
// sign-extended into one int32 word, [ceil(nk / 2)][width] words.
HWY_INLINE void QuadsToPairs(const int8_t* quads, size_t width, size_t nk,
                             int32_t* HWY_RESTRICT pairs) {
  const hn::ScalableTag<int32_t> d;
  const size_t N = hn::Lanes(d);
  const auto low = hn::Set(d, 0xFFFF);
  const size_t pair_rows = (nk + 1) / 2;
  for (size_t r = 0; r < pair_rows; r += 2) {
    const int8_t* quad_row = quads + (r / 2) * width * 4;
    for (size_t c = 0; c < width; c += N) {
      const auto x = hn::LoadU(d, reinterpret_cast<const int32_t*>(quad_row + 4 * c));
      const auto k0 = hn::ShiftRight<24>(hn::ShiftLeft<24>(x));  // arithmetic: sign-extended
      const auto k1 = hn::ShiftRight<24>(hn::ShiftLeft<16>(x));
      hn::StoreU(hn::Or(hn::And(k0, low), hn::ShiftLeft<16>(k1)), d, pairs + r * width + c);
      if (r + 1 == pair_rows) continue;
      const auto k2 = hn::ShiftRight<24>(hn::ShiftLeft<8>(x));
      const auto k3 = hn::ShiftRight<24>(x);
      hn::StoreU(hn::Or(hn::And(k2, low), hn::ShiftLeft<16>(k3)), d, pairs + (r + 1) * width + c);
    }
  }
}

// docs/math.md §4.2's scale of one int8 P or dS block (rows x cols, `stride` apart), as
// RoundBackwardBlock takes it: amax / 127; 0 for a block without a nonzero magnitude or with
// magnitudes below every scale (it adds nothing); NaN for one holding an inf or NaN.
HWY_INLINE float Int8BlockScale(const float* tile, size_t rows, size_t stride, size_t cols) {
  const BlockMagnitude b = BlockAbsMax<true>(tile, rows, stride, cols);
  if (!b.finite) return std::numeric_limits<float>::quiet_NaN();
  return b.amax > 0.0f ? b.amax / quant::FormatMax(quant::Format::kInt8) : 0.0f;
}

// acc[c][i] += float(sums[c][i]) * (scale * channel_scale(c)) for c < dim and i < cols (a
// multiple of the lanes): an AMX int8 product's exact sums into a dim-major fp32 accumulator,
// both with row stride `stride`.
template <class Sum, class ChannelScale>
HWY_INLINE void AddScaledSums(const Sum* HWY_RESTRICT sums, size_t dim, size_t cols,
                              size_t stride, float scale, const ChannelScale& channel_scale,
                              float* HWY_RESTRICT acc) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<Sum, decltype(df)> ds;  // int32 sums, or fp32 ones holding integers
  const size_t N = hn::Lanes(df);
  for (size_t c = 0; c < dim; ++c) {
    const auto s = hn::Set(df, scale * channel_scale(c));
    for (size_t i = 0; i < cols; i += N) {
      float* o = acc + c * stride + i;
      hn::Vec<decltype(df)> x;
      if constexpr (std::is_same_v<Sum, float>) {
        x = hn::LoadU(df, sums + c * stride + i);
      } else {
        x = hn::ConvertTo(df, hn::LoadU(ds, sums + c * stride + i));
      }
      hn::StoreU(hn::MulAdd(x, s, hn::LoadU(df, o)), df, o);
    }
  }
}

// A's rows for Int8Gradient: int8 codes for AMX's int8 tiles, or the bf16 codes of their values
// for avx512_bf16's dot tiles (BackwardTiles's *_t8 or *_t8_bf16).
struct Int8GradientRows {
  const int8_t* codes = nullptr;
  const uint16_t* values = nullptr;
  Int8GradientRows At(size_t offset) const {
    return {codes != nullptr ? codes + offset : nullptr,
            values != nullptr ? values + offset : nullptr};
  }
};

// acc[c][i] += sum_r A[c][r] W[r][i] for one block of the int8 backward (docs/math.md §4.2): W
// (rows x cols, `stride` apart: P or dS of the block) as int8 codes of rows with the block's
// scale, A's codes (`dim` rows of channels, a_stride apart, from the block's first row on)
// with a scale per channel; the exact sums scaled once. acc is dim-major with row stride
// `stride`. On AMX int8 tiles W's codes are quads and the sums int32; on the dot tiles W's codes
// are bf16 pairs and every product and partial sum (at most 96 x 127^2 < 2^24) an integer that
// fp32 holds, so the sums are the same and scaled by the same expression.
HWY_INLINE void Int8Gradient(const Int8GradientRows& a, size_t a_stride, const float* a_scales,
                             size_t dim, const float* w, size_t rows, size_t cols, size_t stride,
                             float* acc, TileWorkspace& ws) {
  const float scale = Int8BlockScale(w, rows, stride, cols);
  const float code_scale = scale > 0.0f ? scale : 1.0f;
  const size_t padded_cols = hwy::RoundUpTo(cols, 16);
  const auto channel_scale = [&](size_t c) { return a_scales[c]; };
  int32_t* words = reinterpret_cast<int32_t*>(ws.rows.get());  // [depth / group][stride]
  if (a.values != nullptr) {
    const size_t depth = hwy::RoundUpTo(rows, 2);
    PackWeightCodes<2, true>(w, rows, depth / 2, padded_cols, code_scale, words, stride);
    float* sums = ws.acc_c.get();  // [dim][stride]
    native::DotBf16MatMul(a.values, a_stride, dim, reinterpret_cast<const uint16_t*>(words),
                          2 * stride, cols, depth, false, sums, stride);
    AddScaledSums(sums, dim, padded_cols, stride, scale, channel_scale, acc);
    return;
  }
  const size_t depth = hwy::RoundUpTo(rows, 64);
  PackWeightCodes<4>(w, rows, depth / 4, padded_cols, code_scale, words, stride);
  int32_t* sums = reinterpret_cast<int32_t*>(ws.acc_c.get());  // [dim][stride]
  native::AmxInt8MatMul(a.codes, a_stride, dim, reinterpret_cast<const int8_t*>(words), 4 * stride,
                        cols, depth, sums, stride, reinterpret_cast<int8_t*>(ws.key_rows.get()));
  AddScaledSums(sums, dim, padded_cols, stride, scale, channel_scale, acc);
}

// ws.value_scale: V's scale of each of padded_dim output channels for slice (b, kv head) on
// the int8 path (IntPv), 0 for the padding channels (whose codes are 0 too).
HWY_INLINE void SetValueScales(const AttentionProblem& p, size_t slice, size_t padded_dim,
                               TileWorkspace& ws) {
  const IntPv& v = p.int_pv;
  const float* v_scales = v.v_scales + slice * v.scale_stride;
  for (size_t c = 0; c < padded_dim; ++c) {
    ws.value_scale[c] = c >= p.dim ? 0.0f : v.scale_stride == 0 ? v_scales[0] : v_scales[c];
  }
}

// out (nq rows of padded_dim) += P V for one key tile on the int8 path (IntPv): the weights'
// int8 codes (PackWeightCodes) times V's codes, exact integer sums scaled once per output
// channel by p_scale times V's scale (per tensor or channel). On the u8 x s8 tile when V was
// prepared for it and this target's VNNI family is enabled (P's codes are never negative: the
// unsigned side), else on the int16 pair tile.
HWY_INLINE void IntWeightsTimesValues(const AttentionProblem& p, size_t b, size_t kv_head,
                                      size_t j0, size_t nk, size_t nq, size_t columns,
                                      const float* weights, float* out, size_t padded_dim,
                                      TileWorkspace& ws) {
  const size_t pairs = (nk + 1) / 2, slice = b * p.kv_heads + kv_head;
  std::fill(ws.weight_scale, ws.weight_scale + nq, p.p_scale);
  const IntPv& v = p.int_pv;
  SetValueScales(p, slice, padded_dim, ws);
#if LPATTN_X86_VNNI_TARGET
  if (v.v_quads != nullptr && native::NativePathEnabled(kQuadPath)) {
    const size_t quads = (nk + 3) / 4;
    PackWeightCodes<4>(weights, nk, quads, columns, p.p_scale, ws.weight_pairs, kTileQ, nq);
    QuadMatMul<true, true>(
        {reinterpret_cast<const int8_t*>(ws.weight_pairs), 1, kTileQ, nullptr, ws.weight_scale},
        {v.v_quads + (slice * v.key_quads + j0 / 4) * v.width * 4, v.width, ws.value_scale},
        {out, padded_dim}, nq, padded_dim, quads);
    return;
  }
#endif
  PackWeightCodes<2>(weights, nk, pairs, columns, p.p_scale, ws.weight_pairs, kTileQ, nq);
  int32_t* pair_words = reinterpret_cast<int32_t*>(ws.key_rows.get());  // [pairs][width]
  if (v.v_quads != nullptr) {
    QuadsToPairs(v.v_quads + (slice * v.key_quads + j0 / 4) * v.width * 4, v.width, nk, pair_words);
  } else {  // V^T prepared for AMX tiles that are off now
    int16_t* codes = reinterpret_cast<int16_t*>(pair_words);
    std::fill(codes, codes + pairs * v.width * 2, int16_t(0));
    for (size_t j = 0; j < nk; ++j) {
      for (size_t c = 0; c < p.dim; ++c) {
        codes[(j / 2) * v.width * 2 + 2 * c + j % 2] = v.vt[(slice * p.dim + c) * v.vt_key_stride + j0 + j];
      }
    }
  }
  const int16_t* panel = reinterpret_cast<const int16_t*>(pair_words);
  IntMatMul<true>({ws.weight_pairs, 1, kTileQ, ws.weight_scale}, {panel, v.width, ws.value_scale},
                  {out, padded_dim}, nq, padded_dim, pairs);
}

// ---- P V on bf16 pair tiles (AttentionProblem::amx_pv, docs/design.md §4) ----
// AMX tiles, or avx512_bf16's dot tiles (bf16_pair_products.h). The output accumulates
// dim-major, out_t[c * kTileQ + i] (O^T = V^T P^T: V^T rows are the tiles' A operand as stored,
// the weights' pairs their B operand).

// Whether this call's P V runs on tiles: V^T prepared for them and the families still enabled.
HWY_INLINE bool AmxPvEnabled(const AttentionProblem& p) {
  return p.amx_pv.vt != nullptr && native::Bf16PairsEnabled() &&
         native::NativePathEnabled(native::NativePath::kAvx512Bf16);
}

// out_t's columns i < nq times factor[i] (the online softmax's rescale), over the tile's
// `columns` (whole vectors: the products write no others); the padding columns stay 0
// whatever the transform left in their factors. A vector of columns whose factors are all 1
// (no row's max moved: most key tiles once a row has seen a few) is left as it is, which is
// what the multiplication would give, without a pass over the accumulator's memory.
HWY_INLINE void ScaleColumns(float* HWY_RESTRICT out_t, size_t dim, size_t nq, size_t columns,
                             const float* HWY_RESTRICT factor) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  HWY_ALIGN float f[kTileQ];
  for (size_t i = 0; i < columns; ++i) f[i] = i < nq ? factor[i] : 0.0f;
  for (size_t i = 0; i < columns; i += N) {
    const auto scale = hn::Load(d, f + i);
    if (hn::AllTrue(d, hn::Eq(scale, hn::Set(d, 1.0f)))) continue;
    for (size_t c = 0; c < dim; ++c) {
      float* row = out_t + c * kTileQ + i;
      hn::Store(hn::Mul(scale, hn::Load(d, row)), d, row);
    }
  }
}

// out_t += V^T P^T for keys [j0, j0 + nk): the key-major weights become bf16 pairs (rounded to
// nearest even: what RoundWeights does for p = bf16) over one or two 32-key steps on AMX, over
// nk keys rounded up to a pair on the dot tiles; keys past nk have zero weights (their V^T
// columns are the next tile's or zeros).
HWY_INLINE void AmxWeightsTimesValues(const AttentionProblem& p, size_t b, size_t kv_head,
                                      size_t j0, size_t nk, size_t columns, const float* weights,
                                      float* out_t, TileWorkspace& ws) {
  const size_t depth = native::Bf16PairsOnAmx() ? (nk > 32 ? 64 : 32) : (nk + 1) / 2 * 2;
  uint16_t* pairs = reinterpret_cast<uint16_t*>(ws.rows.get());
  native::AmxBf16WeightPairs(weights, nk, columns, kTileQ, depth, pairs);
  const uint16_t* vt = p.amx_pv.vt + (b * p.kv_heads + kv_head) * p.dim * p.amx_pv.key_stride + j0;
  native::Bf16PairMatMul(vt, p.amx_pv.key_stride, p.dim, pairs, 2 * kTileQ, columns, depth, true,
                         out_t, kTileQ, reinterpret_cast<uint16_t*>(ws.key_rows.get()));
}

// Whether this call's int8 P V runs on AMX int8 tiles (V^T prepared for them, still enabled).
HWY_INLINE bool AmxIntPvEnabled(const AttentionProblem& p) {
  return p.int_pv.vt != nullptr && native::NativePathEnabled(native::NativePath::kAmxInt8);
}

// out_t += the int8 P V of keys [j0, j0 + nk) on tiles: the weights become int8 codes through
// p_scale exactly as IntWeightsTimesValues encodes them, in quads of keys (one 64-key step, zero
// past nk; V^T's columns there are the next tile's or zeros, and integers times 0 are 0), the
// exact int32 sums are added as fma(sum, p_scale * v_scale, out): the Highway tile's
// expression, so the two agree bit for bit.
HWY_INLINE void AmxIntWeightsTimesValues(const AttentionProblem& p, size_t b, size_t kv_head,
                                         size_t j0, size_t nk, size_t columns,
                                         const float* weights, float* out_t, TileWorkspace& ws) {
  int32_t* quads = reinterpret_cast<int32_t*>(ws.rows.get());  // [16 quad rows][kTileQ] words
  PackWeightCodes<4>(weights, nk, 16, columns, p.p_scale, quads);
  const IntPv& v = p.int_pv;
  int32_t* sums = reinterpret_cast<int32_t*>(ws.acc_c.get());  // [dim][kTileQ]
  native::AmxInt8MatMul(v.vt + (b * p.kv_heads + kv_head) * p.dim * v.vt_key_stride + j0,
                        v.vt_key_stride, p.dim, reinterpret_cast<const int8_t*>(quads), 4 * kTileQ,
                        columns, 64, sums, kTileQ, reinterpret_cast<int8_t*>(ws.key_rows.get()));
  const float* v_scales = v.v_scales + (b * p.kv_heads + kv_head) * v.scale_stride;
  AddScaledSums(sums, p.dim, columns, kTileQ, p.p_scale,
                [&](size_t c) { return v.scale_stride == 0 ? v_scales[0] : v_scales[c]; }, out_t);
}

// V rows [first, first + n) decoded from the transposed codes, for a call whose amx_bf16 was
// turned off after its K and V were prepared for the tiles.
HWY_INLINE RhsView TransposedValueRows(const AttentionProblem& p, size_t b, size_t kv_head,
                                       size_t first, size_t n, size_t padded_dim,
                                       float* HWY_RESTRICT scratch) {
  const uint16_t* vt = p.amx_pv.vt + (b * p.kv_heads + kv_head) * p.dim * p.amx_pv.key_stride;
  for (size_t j = 0; j < n; ++j) {
    for (size_t c = 0; c < padded_dim; ++c) {
      scratch[j * padded_dim + c] =
          c < p.dim ? quant::DecodeBf16(vt[c * p.amx_pv.key_stride + first + j]) : 0.0f;
    }
  }
  return {scratch, padded_dim};
}

// out rows i < n: factor[i] times out_t's column i.
HWY_INLINE void StoreColumns(const float* HWY_RESTRICT out_t, size_t n, size_t dim,
                             const float* factor, float* out, size_t out_stride) {
  for (size_t i = 0; i < n; ++i) {
    for (size_t c = 0; c < dim; ++c) out[i * out_stride + c] = factor[i] * out_t[c * kTileQ + i];
  }
}

// out[i * out_stride + c] = factor * t[c * t_stride + i] for i < n, c < dim: a dim-major
// accumulator of tile products stored as rows.
HWY_INLINE void StoreTransposed(const float* HWY_RESTRICT t, size_t n, size_t dim,
                                size_t t_stride, float factor, float* out, size_t out_stride) {
  for (size_t i = 0; i < n; ++i) {
    for (size_t c = 0; c < dim; ++c) out[i * out_stride + c] = factor * t[c * t_stride + i];
  }
}

HWY_INLINE RhsView DimRows(const HeadRows& src, size_t first, size_t n, size_t dim,
                           size_t padded_dim, float* HWY_RESTRICT scratch) {
  if (src.coded()) {
    DecodeRows(src, first, n, dim, padded_dim, scratch);
    return {scratch, padded_dim};
  }
  if (dim == padded_dim && src.Contiguous(first, n)) return {src.row(first), src.token_stride};
  for (size_t i = 0; i < n; ++i) {
    const float* row = src.row(first + i);
    std::copy(row, row + dim, scratch + i * padded_dim);
    std::fill(scratch + i * padded_dim + dim, scratch + (i + 1) * padded_dim, 0.0f);
  }
  return {scratch, padded_dim};
}

HWY_INLINE void ScaleRows(float* HWY_RESTRICT acc, size_t n, size_t padded_dim,
                          const float* HWY_RESTRICT factor) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  for (size_t i = 0; i < n; ++i) {
    // A row whose running max did not move (most of a long row's tiles, every row a tile
    // hides) keeps its accumulator: x * 1 is x.
    if (factor[i] == 1.0f) continue;
    const auto f = hn::Set(d, factor[i]);
    for (size_t c = 0; c < padded_dim; c += N) {
      hn::StoreU(hn::Mul(f, hn::LoadU(d, acc + i * padded_dim + c)), d, acc + i * padded_dim + c);
    }
  }
}

HWY_INLINE void StoreRows(const float* HWY_RESTRICT acc, size_t n, size_t dim, size_t padded_dim,
                          const float* factor, float uniform_factor, float* out,
                          size_t out_stride) {
  for (size_t i = 0; i < n; ++i) {
    const float f = factor ? factor[i] * uniform_factor : uniform_factor;
    for (size_t c = 0; c < dim; ++c) out[i * out_stride + c] = f * acc[i * padded_dim + c];
  }
}

// Whether a line asked for ahead of its use goes into L1 (prefetcht0) rather than L2
// (prefetcht1): on AMD CPUs under AVX-512 targets. On AMD Zen 5 the requests into L2 left a
// decode step's asked-for rows slower to arrive than the same requests into L1 (three A/Bs of
// one build, docs/performance.md §4.17: fp32 and bf16 cache steps 0.73-0.92x the time, paged
// int8 0.60-0.89x); elsewhere (Intel, and AVX2's Zen 3) L2 is what was measured.
HWY_INLINE bool AsksIntoL1() {
  static const bool into_l1 =
      hn::MaxLanes(hn::ScalableTag<float>()) >= 16 && native::DetectedCpuFeatures().amd;
  return into_l1;
}

// One cache line asked for ahead of its use (AsksIntoL1 says into which level).
HWY_INLINE void AskLine(const void* line) {
  if (AsksIntoL1()) {
    __builtin_prefetch(line, 0, 3);
  } else {
    __builtin_prefetch(line, 0, 2);
  }
}

// The cache lines of rows [first, first + n) of `bytes` bytes each, `stride` bytes apart,
// asked for ahead of their use (AskLine).
HWY_INLINE void PrefetchRows(const void* base, size_t first, size_t n, size_t bytes,
                             size_t stride) {
  const char* rows = static_cast<const char*>(base) + first * stride;
  for (size_t r = 0; r < n; ++r) {
    for (size_t b = 0; b < bytes; b += 64) AskLine(rows + r * stride + b);
  }
}

// Rows [first, first + n) of src (its floats or codes, through its block table where paged,
// and an 8-bit row's scale: a paged block's scales lie apart from its rows), asked for ahead
// of their use: AsksDecodeRows (few_query_values-inl.h) says when.
HWY_INLINE void PrefetchRowsOf(const HeadRows& src, size_t first, size_t n, size_t dim) {
  const size_t element = src.codes8 != nullptr ? 1 : src.codes != nullptr ? 2 : 4;
  const char* base = src.codes8 != nullptr  ? reinterpret_cast<const char*>(src.codes8)
                     : src.codes != nullptr ? reinterpret_cast<const char*>(src.codes)
                                            : reinterpret_cast<const char*>(src.data);
  for (size_t t = first; t < first + n; ++t) {
    const char* row = base + src.RowOffset(t) * element;
    for (size_t b = 0; b < dim * element; b += 64) AskLine(row + b);
    if (src.token_scales != nullptr) AskLine(src.token_scales + src.ScaleOffset(t));
  }
}

// Resolves ahead's requests once for its tile where its sources allow (RowsAhead::flat: rows
// of codes, paged or not, with or without a scale a row, and the integer products' K where
// contiguous, its codes, scales and sums IntQk's; a contiguous source's scale and sum lines
// asked for once, not once a row): per request, finding the row's kind and base through
// its HeadRows and the level through AsksIntoL1 took about 40 instructions a key, a third of
// an in-cache bf16 decode step's score loop on AMD Zen 5; a paged row's block and a row's
// scale are still looked up per request. Rows of floats keep those requests: flat, a
// contiguous fp32 step measured 1.07-1.18x the time (docs/performance.md §4.26).
HWY_INLINE void FlattenRowsAhead(RowsAhead& ahead) {
  ahead.flat = false;
  if (const AttentionProblem* p = ahead.int_keys) {
    ahead.flat_int_paged = p->int_qk.block_tables != nullptr;
    ahead.flat_int_row =
        ahead.flat_int_paged
            ? 0
            : p->int_qk.KeyRow(ahead.b, ahead.kv_head, p->kv_heads, p->kv_len, ahead.first);
  }
  const HeadRows* sources[2] = {ahead.keys, ahead.values};
  for (size_t s = 0; s < 2; ++s) {
    const HeadRows* src = sources[s];
    ahead.flat_rows[s] = nullptr;
    if (src == nullptr) continue;
    if (!src->coded()) return;
    const size_t element = src->codes8 != nullptr ? 1 : 2;
    const char* base = src->codes8 != nullptr ? reinterpret_cast<const char*>(src->codes8)
                                              : reinterpret_cast<const char*>(src->codes);
    const bool paged = src->block_table != nullptr;
    ahead.flat_pages[s] = paged ? src : nullptr;
    ahead.flat_rows[s] = paged ? base : base + src->RowOffset(ahead.first) * element;
    ahead.flat_stride[s] = paged ? element : src->token_stride * element;
    ahead.flat_scaled[s] = src->token_scales != nullptr ? src : nullptr;
    ahead.flat_bytes[s] = ahead.dim * element;
  }
  ahead.into_l1 = AsksIntoL1();
  ahead.flat = true;
}

// Whether p is the first byte of a cache line: consecutive rows' scales share one line, asked
// for once.
HWY_INLINE bool StartsLine(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 63) == 0; }

// Row j of a flat RowsAhead's tile, of each source it names, into the level it says.
template <int kLocality>
HWY_INLINE void AskFlatRows(const RowsAhead& ahead, size_t j) {
  for (size_t s = 0; s < 2; ++s) {
    if (ahead.flat_rows[s] == nullptr) continue;
    const HeadRows* pages = ahead.flat_pages[s];
    const size_t offset = pages != nullptr ? pages->RowOffset(ahead.first + j) : j;
    const char* row = ahead.flat_rows[s] + offset * ahead.flat_stride[s];
    for (size_t b = 0; b < ahead.flat_bytes[s]; b += 64) __builtin_prefetch(row + b, 0, kLocality);
    if (const HeadRows* scaled = ahead.flat_scaled[s]) {
      const float* scale = scaled->token_scales + scaled->ScaleOffset(ahead.first + j);
      if (j == 0 || pages != nullptr || StartsLine(scale)) __builtin_prefetch(scale, 0, kLocality);
    }
  }
  if (const AttentionProblem* p = ahead.int_keys) {
    const IntQk& k = p->int_qk;
    const size_t row = ahead.flat_int_paged ? k.KeyRow(ahead.b, ahead.kv_head, p->kv_heads,
                                                       p->kv_len, ahead.first + j)
                                            : ahead.flat_int_row + j;
    const int8_t* codes = k.k_rows + row * ahead.dim;
    for (size_t b = 0; b < ahead.dim; b += 64) __builtin_prefetch(codes + b, 0, kLocality);
    const bool each_row = j == 0 || ahead.flat_int_paged;
    if (each_row || StartsLine(k.k_scale + row)) __builtin_prefetch(k.k_scale + row, 0, kLocality);
    if (k.k_sums != nullptr && (each_row || StartsLine(k.k_sums + row))) {
      __builtin_prefetch(k.k_sums + row, 0, kLocality);
    }
  }
}

// Row j of RowsAhead's next tile, of each source it names.
HWY_INLINE void AskRowsAhead(const RowsAhead& ahead, size_t j) {
  if (j >= ahead.n) return;
  if (ahead.flat) return ahead.into_l1 ? AskFlatRows<3>(ahead, j) : AskFlatRows<2>(ahead, j);
  if (ahead.keys != nullptr) PrefetchRowsOf(*ahead.keys, ahead.first + j, 1, ahead.dim);
  if (ahead.values != nullptr) PrefetchRowsOf(*ahead.values, ahead.first + j, 1, ahead.dim);
  if (ahead.int_keys != nullptr) {  // a code row, its scale and sum (a paged block's lie apart)
    const AttentionProblem& p = *ahead.int_keys;
    const IntQk& k = p.int_qk;
    const size_t row = k.KeyRow(ahead.b, ahead.kv_head, p.kv_heads, p.kv_len, ahead.first + j);
    PrefetchRows(k.k_rows + row * ahead.dim, 0, 1, ahead.dim, 0);
    AskLine(k.k_scale + row);
    if (k.k_sums != nullptr) AskLine(k.k_sums + row);
  }
}

// The next key tile's V^T columns, when V is held transposed for AMX tiles: a key tile reads
// one or two cache lines from each of head_dim rows a whole sequence apart, too many streams
// for the hardware prefetchers (11% of an int8 decode step, measured; K's rows and V's key
// quads are contiguous and gain nothing from it).
HWY_INLINE void PrefetchTransposedValues(const AttentionProblem& p, size_t b, size_t kv_head,
                                         size_t j0, size_t nk) {
  const size_t slice = b * p.kv_heads + kv_head;
  if (p.int_pv.vt != nullptr) {
    PrefetchRows(p.int_pv.vt + slice * p.dim * p.int_pv.vt_key_stride + j0, 0, p.dim, nk,
                 p.int_pv.vt_key_stride);
  } else if (p.amx_pv.vt != nullptr) {
    PrefetchRows(p.amx_pv.vt + slice * p.dim * p.amx_pv.key_stride + j0, 0, p.dim, 2 * nk,
                 2 * p.amx_pv.key_stride);
  }
}

// Task `task` of a grid of (batch, head, tile of `tile` rows out of `len`), head-major.
struct TileTask {
  size_t batch, head, first, count;
};
HWY_INLINE TileTask SplitTask(size_t task, size_t heads, size_t len, size_t tile) {
  const size_t tiles = hwy::DivCeil(len, tile), first = task % tiles * tile;
  return {task / (heads * tiles), task / tiles % heads, first, std::min(tile, len - first)};
}

// Runs task(index, workspace) for index in [0, count), each task with its thread's workspace.
template <class Task>
HWY_INLINE void ParallelTiles(size_t count, const Task& task) {
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, count, 1),
      [&](const tbb::blocked_range<size_t>& range) HWY_ATTR {
        thread_local TileWorkspace workspace;
        for (size_t index = range.begin(); index != range.end(); ++index) task(index, workspace);
      },
      tbb::simple_partitioner());
}

// QueryLimits for rows that are consecutive queries of one head (not the decode layout), a
// vector of rows at a time: row i's position relative to j0 is rel + i, its limit
// clamp(rel + i + 1, 0, nk) under the causal mask, its window's first key
// clamp(rel + i - W + 1, 0, limit). rel is clamped first so that int32 lanes hold it exactly:
// beyond [-(kTileQ + 2), nk + 1] every row's clamps give the same results. (Per key tile,
// the rows' scalar limits took a tenth of a windowed forward's time.)
HWY_INLINE void LinearQueryLimits(const AttentionProblem& p, size_t i0, size_t nq, size_t j0,
                                  size_t nk, bool all_visible, TileWorkspace& ws) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::RebindToUnsigned<decltype(df)> du;
  const size_t N = hn::Lanes(df);
  const ptrdiff_t rel = p.QueryPosition(i0) - ptrdiff_t(j0);
  const auto clamped = [&](ptrdiff_t x) {
    return int32_t(std::clamp<ptrdiff_t>(x, -ptrdiff_t(kTileQ) - 2, ptrdiff_t(nk) + 1));
  };
  const bool masked = p.causal && !all_visible, window = p.window != 0;
  const auto end0 = hn::Set(di, clamped(rel + 1));
  const auto begin0 = hn::Set(di, window ? clamped(rel - ptrdiff_t(p.window) + 1) : 0);
  const auto zero = hn::Zero(di), keys = hn::Set(di, int32_t(nk)), rows = hn::Set(di, int32_t(nq));
  for (size_t i = 0; i < kTileQ; i += N) {
    const auto row = hn::Iota(di, int32_t(i));
    auto limit = masked ? hn::Min(hn::Max(hn::Add(end0, row), zero), keys) : keys;
    limit = hn::IfThenElseZero(hn::Lt(row, rows), limit);
    const auto begin = window ? hn::Min(hn::Max(hn::Add(begin0, row), zero), limit) : zero;
    hn::Store(hn::ConvertTo(df, limit), df, ws.visible + i);
    hn::StoreU(hn::BitCast(du, limit), du, ws.range_end + i);
    hn::StoreU(hn::BitCast(du, begin), du, ws.range_begin + i);
  }
}

// Query tile [i0, i0 + nq) against key tile [j0, j0 + nk): per-query key limits within the
// tile (as float for masks and as ranges for the P V and dS K products, which start at a
// row's first key under a sliding window, docs/math.md §1.5: hidden keys are never
// multiplied). Returns whether every real query sees every key of the tile below its limit
// (the window's hidden keys are the scores' own mask).
HWY_INLINE bool QueryLimits(const AttentionProblem& p, size_t i0, size_t nq, size_t j0,
                            size_t nk, TileWorkspace& ws) {
  // Visible ends grow with the row (within a query head), so the least decides whether the
  // tile is interior (the common case, filled without per-row work).
  const bool all_visible = p.MinVisibleEnd(i0, nq) >= j0 + nk;
  const hn::ScalableTag<float> df;
  // An interior tile without a window has the same limits in any row order: a decode step's
  // grouped tiles (head_rows) take the vector loop too (its scalar one was 3% of an int8 step).
  const bool linear = p.head_rows == 0 || (all_visible && p.window == 0);
  if (linear && kTileQ % hn::Lanes(df) == 0) {
    LinearQueryLimits(p, i0, nq, j0, nk, all_visible, ws);
    return all_visible;
  }
  std::fill(ws.range_begin, ws.range_begin + kTileQ, 0u);
  for (size_t i = 0; i < kTileQ; ++i) {
    size_t limit = nk;
    if (i >= nq) {
      limit = 0;
    } else if (!all_visible) {
      const size_t end = p.VisibleEnd(i0 + i);
      limit = end <= j0 ? 0 : std::min(end - j0, nk);
    }
    ws.visible[i] = float(limit);
    ws.range_end[i] = uint32_t(limit);
    if (p.window != 0 && i < nq) {
      const size_t begin = p.VisibleBegin(i0 + i);
      if (begin > j0) ws.range_begin[i] = uint32_t(std::min(begin - j0, limit));
    }
  }
  return all_visible;
}

// Score-tile columns worth computing for nq queries: pairs of vectors (every tile's blocks
// take them), not the full tile, so short sequences (and the last tile of long ones) skip the
// padding.
HWY_INLINE size_t QueryColumns(size_t nq) {
  const hn::ScalableTag<float> d;
  return std::min(kTileQ, hwy::RoundUpTo(nq, 2 * hn::Lanes(d)));
}

// The score-tile columns a forward's key tile computes (its `live` range, docs/design.md §3),
// from QueryLimits' limits. Under a sliding window (docs/math.md §1.5) a row whose window
// starts past the tile sees none of it (limit 0, and the tile is not all visible), and only
// the columns of rows that see a key are worth a score (whole pairs of vectors; the rest are
// never read). A band of W keys through 96-query tiles computed about 1.5 times its visible
// scores at full width, about 1.2 times in these columns. A tile the causal mask cuts (the
// diagonal's) keeps all columns, and first_query lets KeyBlockColumns narrow each block of
// keys to the queries on or below the diagonal: the two diagonal tiles of a 96-query tile
// computed 2.0 times their visible scores at full width, 1.2 times so.
HWY_INLINE ColumnRange LiveColumns(const AttentionProblem& p, size_t i0, size_t nq,
                                   size_t columns, bool& all_visible, TileWorkspace& ws) {
  const size_t first_query = p.head_rows == 0 ? i0 : SIZE_MAX;  // columns are i0, i0 + 1, ...
  if (p.window == 0) return {0, columns, all_visible ? SIZE_MAX : first_query};
  size_t first = nq, last = 0;
  for (size_t i = 0; i < nq; ++i) {
    if (ws.range_begin[i] < ws.range_end[i]) {
      first = std::min(first, i);
      last = i + 1;
    } else if (ws.range_end[i] != 0) {  // a window starting past the tile (it ends after it)
      ws.visible[i] = 0.0f;
      ws.range_begin[i] = ws.range_end[i] = 0;
      all_visible = false;
    }
  }
  if (first >= last) return {0, 0};
  const hn::ScalableTag<float> d;
  const size_t pair = 2 * hn::Lanes(d);
  return {first / pair * pair, std::min(columns, hwy::RoundUpTo(last, pair)), first_query};
}

// The columns of `live` whose queries see any of keys [j, j + n) (rows of consecutive queries
// from live.first_query): [FirstQuerySeeing(j), QueryEndSeeing(j + n - 1)) in whole register
// blocks' steps (one vector under AVX-512, whose 4-vector tiles take 1-3 vector tails; a pair
// under 2-vector tiles). Per block of kMicroRows keys, a band's score product skips the
// triangles a key tile's columns leave on each edge (1.19 -> 1.08 times the visible scores at
// W = 256), and a causal diagonal's product the triangle above it.
HWY_INLINE ColumnRange KeyBlockColumns(const AttentionProblem& p, const ColumnRange& live,
                                       size_t j, size_t n) {
  const size_t i0 = live.first_query;
  const size_t first = std::max(p.FirstQuerySeeing(j), i0) - i0;
  const size_t end = p.QueryEndSeeing(j + n - 1);
  if (end <= i0 + first) return {0, 0};
  const hn::ScalableTag<float> d;
  const size_t step = (kMicroVecs > 2 ? 1 : 2) * hn::Lanes(d);
  return {std::max(live.begin, first / step * step),
          std::min(live.end, hwy::RoundUpTo(end - i0, step))};
}

// The first key tile the query tile [i0, i0 + nq) can see (docs/math.md §1.5's window hides
// the ones before it): MinVisibleBegin rounded down to a tile.
HWY_INLINE size_t KeyBegin(const AttentionProblem& p, size_t i0, size_t nq) {
  return p.MinVisibleBegin(i0, nq) / kTileK * kTileK;
}

// Keys that the query tile [i0, i0 + nq) can see at all: [0, KeyEnd).
HWY_INLINE size_t KeyEnd(const AttentionProblem& p, size_t i0, size_t nq) {
  return p.MaxVisibleEnd(i0, nq);
}

// Copies the parameters of rows [row, row + nq) into per-parameter lanes (staged[k][i]),
// padding rows with zeros, for key-major tiles whose lanes are queries.
template <class Transform>
HWY_INLINE void StageRowParams(const float* params, size_t row, size_t nq, TileWorkspace& ws) {
  for (size_t k = 0; k < Transform::kRowParams; ++k) {
    for (size_t i = 0; i < kTileQ; ++i) {
      ws.row_params[k][i] = i < nq ? params[(row + i) * Transform::kRowParams + k] : 0.0f;
    }
  }
}

// The staged parameters of lanes [i, i + N) as vectors.
template <class Transform, class D>
HWY_INLINE void LoadRowParams(D d, const TileWorkspace& ws, size_t i, hn::Vec<D>* v) {
  for (size_t k = 0; k < Transform::kRowParams; ++k) v[k] = hn::Load(d, ws.row_params[k] + i);
}
#if HWY_HAVE_SCALABLE
// With sizeless vectors the transform loads them where they are staged (docs/design.md §11).
template <class Transform, class D>
HWY_INLINE void LoadRowParams(D, const TileWorkspace& ws, size_t i, RowParamLanes<D>& v) {
  v = RowParamLanes<D>(&ws.row_params[0][0] + i, kTileQ);
}
#endif


// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
