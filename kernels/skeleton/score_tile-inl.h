// The forward's score product seam (docs/design.md §3, §4): each query tile packed once in the
// form its product reads, and S^T = scale K Q^T per key tile on the path the problem chose:
// fp32 register tiles, the integer tile on int8 codes, AMX int8 tiles, or AMX bf16 tiles, which
// also take fp16 and fp8 operands as exact bf16 codes made tile by tile (docs/math.md §4.1).
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_SKELETON_SCORE_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_SKELETON_SCORE_TILE_INL_H_
#undef LPATTN_KERNELS_SKELETON_SCORE_TILE_INL_H_
#else
#define LPATTN_KERNELS_SKELETON_SCORE_TILE_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/native/x86_targets.h"
#include "kernels/native/amx_products.h"
#include "kernels/native/bf16_pair_products.h"
#include "kernels/native/int_matmul_tile-inl.h"
#include "kernels/skeleton/lane_sums-inl.h"
#include "kernels/skeleton/attention_problem.h"
#include "kernels/skeleton/matmul_tile-inl.h"
#include "kernels/skeleton/tile_sizes.h"
#include "kernels/skeleton/tile_workspace-inl.h"
#include "quant/codec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---- bf16 codes of the AMX score product (AttentionProblem::amx_qk) ---------------------------

// Codes per row: the head dimension, or 4 times it for the fp16 split.
HWY_INLINE size_t AmxDepth(const AttentionProblem& p) {
  return p.amx_qk == AmxScores::kFp16 ? 4 * p.dim : p.dim;
}

// How a head's rows are held, for loops that resolve it once: floats, or codes of a format.
// kE4M3NoNaN: e4m3 codes known to hold no NaN (HeadRows::no_nan), decoded without the test;
// kE4M3Over256, their values 2^-8 (LanesAt only: FewQueryScoresOf folds the 2^8 into the
// token scale it multiplies the sums by).
enum class RowKind { kFloat, kBf16, kFp16, kE4M3, kE4M3NoNaN, kE4M3Over256, kE5M2, kInt8 };
HWY_INLINE RowKind KindOf(const HeadRows& src) {
  if (src.codes8 != nullptr) {
    if (src.int8) return RowKind::kInt8;
    if (src.e5m2) return RowKind::kE5M2;
    return src.no_nan ? RowKind::kE4M3NoNaN : RowKind::kE4M3;
  }
  if (src.codes != nullptr) return src.fp16 ? RowKind::kFp16 : RowKind::kBf16;
  return RowKind::kFloat;
}
// Where row t of src starts (its floats or its codes).
HWY_INLINE const void* RowAddress(const HeadRows& src, size_t t) {
  if (src.codes8 != nullptr) return src.byte_row(t);
  if (src.codes != nullptr) return src.code_row(t);
  return src.row(t);
}

// Lanes [c, c + N) of a row of kind kKind at `row` as fp32 values: the floats, or the codes
// decoded (8-bit codes without their token's scale).
template <RowKind kKind, class DF>
HWY_INLINE hn::Vec<DF> LanesAt(DF df, const void* row, size_t c) {
  namespace qn = quant::HWY_NAMESPACE;
  const hn::RebindToSigned<DF> di;
  if constexpr (kKind == RowKind::kInt8) {
    const hn::Rebind<int8_t, DF> ds8;
    return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(ds8, static_cast<const int8_t*>(row) + c)));
  } else if constexpr (kKind == RowKind::kE4M3 || kKind == RowKind::kE4M3NoNaN ||
                       kKind == RowKind::kE5M2) {
    const hn::Rebind<uint8_t, DF> d8;
    const auto codes = hn::LoadU(d8, static_cast<const uint8_t*>(row) + c);
    if constexpr (kKind == RowKind::kE5M2) return qn::DecodeFp8Lanes<quant::kE5M2Layout>(df, codes);
    return qn::DecodeFp8Lanes<quant::kE4M3Layout, kKind == RowKind::kE4M3NoNaN>(df, codes);
  } else if constexpr (kKind == RowKind::kE4M3Over256) {
    const hn::Rebind<uint8_t, DF> d8;
    return qn::DecodeE4M3Over256(df, hn::LoadU(d8, static_cast<const uint8_t*>(row) + c));
  } else if constexpr (kKind == RowKind::kFp16) {
    return qn::LoadFp16Lanes(df, static_cast<const uint16_t*>(row) + c);
  } else if constexpr (kKind == RowKind::kBf16) {
    return qn::LoadBf16Lanes(df, static_cast<const uint16_t*>(row) + c);
  } else {
    return hn::LoadU(df, static_cast<const float*>(row) + c);
  }
}

// Lanes [c, c + N) of row t as fp32 values (LanesAt, src's kind found per call).
template <class DF>
HWY_INLINE hn::Vec<DF> RowLanes(DF df, const HeadRows& src, size_t t, size_t c) {
  const void* row = RowAddress(src, t);
  switch (KindOf(src)) {
    case RowKind::kBf16: return LanesAt<RowKind::kBf16>(df, row, c);
    case RowKind::kFp16: return LanesAt<RowKind::kFp16>(df, row, c);
    case RowKind::kE4M3: return LanesAt<RowKind::kE4M3>(df, row, c);
    case RowKind::kE4M3NoNaN: return LanesAt<RowKind::kE4M3NoNaN>(df, row, c);
    case RowKind::kE4M3Over256: break;  // never a row's kind (KindOf)
    case RowKind::kE5M2: return LanesAt<RowKind::kE5M2>(df, row, c);
    case RowKind::kInt8: return LanesAt<RowKind::kInt8>(df, row, c);
    case RowKind::kFloat: break;
  }
  return LanesAt<RowKind::kFloat>(df, row, c);
}

// The bf16 code of each lane, whose value must be a bf16 exactly: the upper half of its bits.
template <class DF>
HWY_INLINE void StoreBf16Codes(DF /* df */, hn::Vec<DF> exact, uint16_t* HWY_RESTRICT out) {
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> d16;
  const auto code = hn::BitCast(hn::RebindToSigned<DF>(), hn::ShiftRight<16>(hn::BitCast(du, exact)));
  hn::StoreU(hn::DemoteTo(d16, code), d16, out);
}

// Each lane x as hi + lo, both bf16 and exact for a value of at most 16 significant bits (fp16
// has 11): hi is x's upper half and lo = x - hi the rest, which the subtraction leaves exact.
template <class DF>
HWY_INLINE void StoreSplitCodes(DF df, hn::Vec<DF> x, uint16_t* HWY_RESTRICT hi,
                                uint16_t* HWY_RESTRICT lo) {
  const hn::RebindToUnsigned<DF> du;
  const auto upper = hn::BitCast(df, hn::And(hn::BitCast(du, x), hn::Set(du, 0xFFFF0000u)));
  StoreBf16Codes(df, upper, hi);
  StoreBf16Codes(df, hn::Sub(x, upper), lo);
}

// Lanes [c, c + N) of row t as the AMX operand's values: codes decoded, or the call's floats
// (bf16 and fp16 Q) rounded to the format as the quantizer's cast rounds them.
template <class DF>
HWY_INLINE hn::Vec<DF> AmxLanes(DF df, const HeadRows& src, size_t t, size_t c, AmxScores kind) {
  const auto x = RowLanes(df, src, t, c);
  if (src.coded() || kind == AmxScores::kFp8) return x;
  const quant::Format format = kind == AmxScores::kFp16 ? quant::Format::kFp16 : quant::Format::kBf16;
  return quant::HWY_NAMESPACE::RoundLanesUnscaled(df, x, format);
}

// The part of the score scale the AMX query panel carries (docs/math.md §4.1): a power of two
// (1/8 at D = 64, 1/16 at D = 256) times a bf16 value, or an fp16 one's two bf16 halves, is
// exact, and so is each product and each fp32 sum scaled by it, so folding it into Q gives the
// sums the tile's scaling would and saves that pass over every score tile. Other scales (D =
// 128) stay with the sums, and fp8 scales its sums per key and query anyway: factor 1.
HWY_INLINE float AmxQueryFactor(const AttentionProblem& p) {
  if (p.amx_qk != AmxScores::kBf16 && p.amx_qk != AmxScores::kFp16) return 1.0f;
  int exponent = 0;
  const float mantissa = std::frexp(p.scale, &exponent);
  return mantissa == 0.5f && exponent > -60 && exponent < 60 ? p.scale : 1.0f;
}

// Row t of src as the AMX operand's codes: dim of them, or for the fp16 split 4 dim, a key as
// [hi, lo, hi, lo] and a query as [hi, hi, lo, lo], whose product sums (qh + ql)(kh + kl) per
// channel. dim is a multiple of 32, so of every target's lanes.
// factor: a power of two the values are multiplied by (AmxQueryFactor), exactly.
HWY_INLINE void AmxCodeRow(const HeadRows& src, size_t t, size_t dim, AmxScores kind, bool key,
                           uint16_t* HWY_RESTRICT out, float factor = 1.0f) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  const auto scaled = hn::Set(df, factor);
  if (kind != AmxScores::kFp16) {
    for (size_t c = 0; c < dim; c += N) {
      StoreBf16Codes(df, hn::Mul(scaled, AmxLanes(df, src, t, c, kind)), out + c);
    }
    return;
  }
  uint16_t* lo = out + (key ? dim : 2 * dim);
  for (size_t c = 0; c < dim; c += N) {
    StoreSplitCodes(df, hn::Mul(scaled, AmxLanes(df, src, t, c, kind)), out + c, lo + c);
  }
  if (key) {
    std::memcpy(out + 2 * dim, out, 2 * dim * sizeof(uint16_t));
  } else {
    std::memcpy(out + dim, out, dim * sizeof(uint16_t));
    std::memcpy(out + 3 * dim, lo, dim * sizeof(uint16_t));
  }
}

// A query tile's pair panel for the AMX score product: code c of query i's row at
// words[(c / 2) kTileQ + i] (half c % 2), zero past nq; for fp8, col_scale[i] = the query's
// token scale times the score scale.
HWY_INLINE void PackAmxQueryPairs(const AttentionProblem& p, const HeadRows& q, size_t i0,
                                  size_t nq, TileWorkspace& ws) {
  const size_t depth = AmxDepth(p);
  uint32_t* words = ws.AmxQueryPairs();
  std::fill(words, words + depth / 2 * kTileQ, 0u);
  const float factor = AmxQueryFactor(p);
  HWY_ALIGN uint16_t row[TileWorkspace::kAmxDepth];
  HWY_ALIGN uint32_t row_words[TileWorkspace::kAmxDepth / 2];
  // A row's pairs are its codes read as words (the low half first, as x86 stores them), each
  // scattered to its pair row: the panel is the transpose of the rows' words.
  const hn::ScalableTag<uint32_t> du;
  const size_t N = hn::Lanes(du);
  const auto pair_rows = hn::Mul(hn::Iota(du, 0), hn::Set(du, uint32_t(kTileQ)));
  const hn::RebindToSigned<decltype(du)> di;
  for (size_t i = 0; i < nq; ++i) {
    AmxCodeRow(q, i0 + i, p.dim, p.amx_qk, false, row, factor);
    std::memcpy(row_words, row, depth * sizeof(uint16_t));
    size_t w = 0;
    for (; w + N <= depth / 2; w += N) {
      hn::ScatterIndex(hn::Load(du, row_words + w), du, words + w * kTileQ + i,
                       hn::BitCast(di, pair_rows));
    }
    for (; w < depth / 2; ++w) words[w * kTileQ + i] = row_words[w];
  }
  if (p.amx_qk == AmxScores::kFp8) {
    std::fill(ws.col_scale, ws.col_scale + kTileQ, 0.0f);
    for (size_t i = 0; i < nq; ++i) ws.col_scale[i] = q.scale(i0 + i) * p.scale;
  }
}

// S^T of keys [j0, j0 + nk) on AMX bf16 tiles: bf16 K's codes, or fp16 and fp8 K's rows built
// once per call (amx_key_rows), in place; fp16 and fp8 codes otherwise converted into ws first.
HWY_INLINE void AmxScoreTile(const AttentionProblem& p, const HeadRows& k, size_t j0, size_t nk,
                             size_t columns, float* out, TileWorkspace& ws) {
  const uint16_t* pairs = reinterpret_cast<const uint16_t*>(ws.AmxQueryPairs());
  uint16_t* tail = ws.AmxTail();
  const size_t depth = AmxDepth(p);
  const float sum_scale = p.scale / AmxQueryFactor(p);  // what the query panel does not carry
  const bool in_place = p.amx_qk == AmxScores::kBf16 || p.amx_key_rows;
  const uint16_t* rows = nullptr;
  size_t stride = depth;
  if (in_place && k.Contiguous(j0, nk)) {
    rows = k.code_row(j0);
    stride = k.token_stride;
  } else {
    uint16_t* built = ws.AmxKeyRows();
    for (size_t j = 0; j < nk; ++j) {
      if (in_place) {  // paged rows across blocks: their codes gathered
        CopyBytes(k.code_row(j0 + j), 2 * depth, built + j * depth);
      } else {
        AmxCodeRow(k, j0 + j, p.dim, p.amx_qk, true, built + j * depth);
      }
    }
    rows = built;
  }
  if (p.amx_qk == AmxScores::kFp8) {
    HWY_ALIGN float key_scales[kTileK];
    for (size_t j = 0; j < nk; ++j) key_scales[j] = k.scale(j0 + j);
    native::Bf16PairScaledScoreTile(rows, stride, nk, pairs, kTileQ, columns, depth, key_scales,
                                    ws.col_scale, out, kTileQ, tail);
  } else {
    native::Bf16PairScoreTile(rows, stride, nk, pairs, kTileQ, columns, depth, sum_scale, out,
                              kTileQ, tail);
  }
}

// ---- the seam ---------------------------------------------------------------------------------

// The int8 path's query panel of one query tile (IntQk): pair p of query i at
// panel[p][2 i .. 2 i + 1], and col_scale[i] = the query's scale times the score scale (0 for
// the padding columns, whose codes are 0 too).
HWY_INLINE void PackIntQueries(const AttentionProblem& p, size_t b, size_t h, size_t i0,
                               size_t nq, TileWorkspace& ws) {
  const size_t pairs = p.int_qk.pairs, row0 = (b * p.heads + h) * p.q_len + i0;
  int16_t* panel = ws.int_panel.get();
  std::fill(panel, panel + pairs * 2 * kTileQ, int16_t(0));
  std::fill(ws.col_scale, ws.col_scale + kTileQ, 0.0f);
  for (size_t i = 0; i < nq; ++i) {
    const int16_t* q = p.int_qk.q + (row0 + i) * 2 * pairs;
    for (size_t pair = 0; pair < pairs; ++pair) {
      panel[pair * 2 * kTileQ + 2 * i] = q[2 * pair];
      panel[pair * 2 * kTileQ + 2 * i + 1] = q[2 * pair + 1];
    }
    ws.col_scale[i] = p.int_qk.q_scale[row0 + i] * p.scale;
  }
}

// The int8 query panel of one query tile as quads: channel c of query i at
// panel[(c / 4) * 4 kTileQ + 4 i + c % 4], zero past nq (AMX int8 tiles), or with every code
// xor 0x80, q + 128 as an unsigned byte (the u8 x s8 VNNI tile, `biased`); col_scale as for
// the integer tile (PackIntQueries).
HWY_INLINE void PackInt8QueryQuads(const AttentionProblem& p, size_t b, size_t h, size_t i0,
                                   size_t nq, bool biased, TileWorkspace& ws) {
  const size_t pairs = p.int_qk.pairs, row0 = (b * p.heads + h) * p.q_len + i0;
  const uint8_t bias = biased ? 0x80 : 0x00;
  uint8_t* panel = reinterpret_cast<uint8_t*>(ws.int_panel.get());
  std::fill(panel, panel + p.dim * kTileQ, bias);
  std::fill(ws.col_scale, ws.col_scale + kTileQ, 0.0f);
  for (size_t i = 0; i < nq; ++i) {
    const int16_t* q = p.int_qk.q + (row0 + i) * 2 * pairs;
    for (size_t c = 0; c < p.dim; ++c) {
      panel[(c / 4) * 4 * kTileQ + 4 * i + c % 4] = uint8_t(int8_t(q[c])) ^ bias;
    }
    ws.col_scale[i] = p.int_qk.q_scale[row0 + i] * p.scale;
  }
}

// Rows of int8 K codes as the int16 pair tile's words (Int8RowToPairWords, vectorised): each
// code sign-extended to int16, in order, an odd dim's last pair padded with 0.
HWY_INLINE void WidenKeyRows(const int8_t* rows, size_t nk, size_t dim, size_t pairs,
                             int32_t* HWY_RESTRICT words) {
  const hn::ScalableTag<int16_t> d16;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const size_t N = hn::Lanes(d16);
  for (size_t j = 0; j < nk; ++j) {
    const int8_t* row = rows + j * dim;
    int32_t* out = words + j * pairs;
    size_t c = 0;
    for (; c + N <= dim; c += N) {
      hn::StoreU(hn::BitCast(d32, hn::PromoteTo(d16, hn::LoadU(d8, row + c))), d32, out + c / 2);
    }
    Int8RowToPairWords(row + c, dim - c, out + c / 2);
  }
}

// Whether this target's int8 score product runs on the u8 x s8 tile (K prepared for it, and
// this target's VNNI family enabled: the AVX3 and AVX2 code only).
HWY_INLINE bool QuadScores(const AttentionProblem& p) {
#if LPATTN_X86_VNNI_TARGET
  return p.quad_qk8 && native::NativePathEnabled(kQuadPath);
#else
  (void)p;
  return false;
#endif
}

// ---- a decode tile's fp32 scores ----------------------------------------------------------
// A decode step's tile has few rows (one per query head of a GQA group: 4 at H / Hkv = 4).
// With queries along the lanes (the register tiles) three lanes in four would be padding, so
// a tile of at most 4 queries takes each score as a dot product along the head dimension
// instead: every lane useful, and four queries' sums folded into one vector of 4.


// Whether the call's fp32 score product takes FewQueryScores: at most 4 queries, a head
// dimension of whole vectors, vectors of whole 128-bit blocks.
HWY_INLINE bool TakesFewQueryScores(const AttentionProblem& p, size_t nq) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  return nq <= kFewQueries && N % 4 == 0 && p.dim % N == 0 && p.amx_qk == AmxScores::kOff &&
         !p.amx_qk8 && p.int_qk.q == nullptr && p.int_qk.k_rows == nullptr;
}

// A decode tile's score row of `columns` lanes (one vector wherever vectors hold 4 floats)
// zeroed before its 4 sums are stored: a vector store, not the loop over `columns` that the
// compiler made a `rep stos` (5% of an int8 decode step on AMD Zen 3).
HWY_INLINE void ZeroScoreRow(size_t columns, float* HWY_RESTRICT row) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  hn::Store(hn::Zero(d), d, row);
  for (size_t i = N; i < columns; i += N) hn::Store(hn::Zero(d), d, row + i);
}

// S^T[j][i] = k_j . q_i for keys j0 .. j0 + nk against 4 query rows (`dim` apart, scaled,
// zero past nq), two keys at a time, each key row read where it lies: floats, or codes of
// kind kKind decoded in registers (LanesAt; an 8-bit row's token scale then multiplies its
// sums). Lanes 4..columns of each key's row are zero.
template <RowKind kKind>
HWY_INLINE void FewQueryScoresOf(const HeadRows& k, size_t j0, size_t nk,
                                 const float* HWY_RESTRICT q, size_t dim, size_t columns,
                                 const RowsAhead& ahead, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 4> d4;
  const size_t N = hn::Lanes(d);
  constexpr bool kScaled = kKind == RowKind::kE4M3 || kKind == RowKind::kE4M3NoNaN ||
                          kKind == RowKind::kE5M2 || kKind == RowKind::kInt8;
  // A NaN-free e4m3 row is read at 2^-8 of its values, the 2^8 joining the token scale.
  constexpr RowKind kRead = kKind == RowKind::kE4M3NoNaN ? RowKind::kE4M3Over256 : kKind;
  constexpr float kUnit = kKind == RowKind::kE4M3NoNaN ? 256.0f : 1.0f;
  for (size_t j = 0; j < nk; j += 2) {
    const bool pair = j + 1 < nk;
    const size_t t0 = j0 + j, t1 = pair ? t0 + 1 : t0;
    const void* row0 = RowAddress(k, t0);
    const void* row1 = RowAddress(k, t1);
    AskRowsAhead(ahead, j);
    AskRowsAhead(ahead, j + 1);
    auto a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (size_t c = 0; c < dim; c += N) {
      const auto x = LanesAt<kRead>(d, row0, c), y = LanesAt<kRead>(d, row1, c);
      const auto q0 = hn::Load(d, q + c), q1 = hn::Load(d, q + dim + c);
      const auto q2 = hn::Load(d, q + 2 * dim + c), q3 = hn::Load(d, q + 3 * dim + c);
      a0 = hn::MulAdd(x, q0, a0);
      a1 = hn::MulAdd(x, q1, a1);
      a2 = hn::MulAdd(x, q2, a2);
      a3 = hn::MulAdd(x, q3, a3);
      b0 = hn::MulAdd(y, q0, b0);
      b1 = hn::MulAdd(y, q1, b1);
      b2 = hn::MulAdd(y, q2, b2);
      b3 = hn::MulAdd(y, q3, b3);
    }
    auto sums_a = SumsOfFour(d, a0, a1, a2, a3);
    if constexpr (kScaled) sums_a = hn::Mul(sums_a, hn::Set(d4, k.scale(t0) * kUnit));
    ZeroScoreRow(columns, out + j * kTileQ);
    hn::Store(sums_a, d4, out + j * kTileQ);
    if (!pair) break;
    auto sums_b = SumsOfFour(d, b0, b1, b2, b3);
    if constexpr (kScaled) sums_b = hn::Mul(sums_b, hn::Set(d4, k.scale(t1) * kUnit));
    ZeroScoreRow(columns, out + (j + 1) * kTileQ);
    hn::Store(sums_b, d4, out + (j + 1) * kTileQ);
  }
}
// Out of line: inlined into the forward's task, the loop above kept its query rows' pointers
// and two of its query vectors on the stack, reloading them every step (23 instructions a
// step where 13 do, callgrind on AMD Zen 3); one call per key tile costs nothing beside it.
inline HWY_NOINLINE void FewQueryScores(const HeadRows& k, size_t j0, size_t nk,
                                        const float* HWY_RESTRICT q, size_t dim, size_t columns,
                                        const RowsAhead& ahead, float* HWY_RESTRICT out) {
  switch (KindOf(k)) {
    case RowKind::kBf16:
      return FewQueryScoresOf<RowKind::kBf16>(k, j0, nk, q, dim, columns, ahead, out);
    case RowKind::kFp16:
      return FewQueryScoresOf<RowKind::kFp16>(k, j0, nk, q, dim, columns, ahead, out);
    case RowKind::kE4M3:
      return FewQueryScoresOf<RowKind::kE4M3>(k, j0, nk, q, dim, columns, ahead, out);
    case RowKind::kE4M3NoNaN:
      return FewQueryScoresOf<RowKind::kE4M3NoNaN>(k, j0, nk, q, dim, columns, ahead, out);
    case RowKind::kE4M3Over256: break;  // never a row's kind (KindOf)
    case RowKind::kE5M2:
      return FewQueryScoresOf<RowKind::kE5M2>(k, j0, nk, q, dim, columns, ahead, out);
    case RowKind::kInt8:
      return FewQueryScoresOf<RowKind::kInt8>(k, j0, nk, q, dim, columns, ahead, out);
    case RowKind::kFloat: break;
  }
  FewQueryScoresOf<RowKind::kFloat>(k, j0, nk, q, dim, columns, ahead, out);
}

// The 4 query rows of FewQueryScores, each scaled exactly as PackTransposed scales it, zero
// past nq.
HWY_INLINE void PackFewQueries(const AttentionProblem& p, const HeadRows& q, size_t i0, size_t nq,
                               float* HWY_RESTRICT rows) {
  std::fill(rows, rows + kFewQueries * p.dim, 0.0f);
  HWY_ALIGN float rounded[kMaxHeadDim + 64];
  for (size_t i = 0; i < nq; ++i) {
    const float* row = CastRow(q.row(i0 + i), p.dim, p.q_cast, rounded);
    const float factor = RowFactor(row, p.dim, p.scale, p.unit_queries);
    for (size_t c = 0; c < p.dim; ++c) rows[i * p.dim + c] = factor * row[c];
  }
}

// The integer products' key rows [j0, j0 + nk) of (b, kv_head): codes dim bytes apart, their
// sums and scales; in place, or gathered into ws when K is paged (IntQk::block_tables).
struct IntKeyTile {
  const int8_t* rows;
  const int32_t* sums;
  const float* scales;
  const int8_t* const* blocks = nullptr;  // AmxInt8ScoreTile's key_blocks, when in pages
};
HWY_INLINE IntKeyTile IntKeyRows(const AttentionProblem& p, size_t b, size_t kv_head, size_t j0,
                                 size_t nk, TileWorkspace& ws) {
  const IntQk& k = p.int_qk;
  const bool in_place =
      k.block_tables == nullptr ||
      (k.row_strides.token == 1 && (j0 >> k.block_shift) == ((j0 + nk - 1) >> k.block_shift));
  if (in_place) {  // unpaged, or within one block of a head-major pool
    const size_t row0 = k.KeyRow(b, kv_head, p.kv_heads, p.kv_len, j0);
    return {k.k_rows + row0 * p.dim, k.k_sums + row0, k.k_scale + row0};
  }
  // AMX tiles load 16 rows at a time: where every 16 of the tile lie in one block (a
  // head-major pool of blocks a multiple of 16), the tiles read them there, and only the sums
  // and scales are gathered.
  const bool amx_blocks = p.amx_qk8 && k.row_strides.token == 1 && k.block_shift >= 4 &&
                          j0 % native::kAmxTileRows == 0;
  if (amx_blocks) {
    for (size_t r = 0; r * native::kAmxTileRows < nk; ++r) {
      const size_t row = k.KeyRow(b, kv_head, p.kv_heads, p.kv_len, j0 + r * native::kAmxTileRows);
      ws.key_blocks[r] = k.k_rows + row * p.dim;
    }
  }
  int8_t* rows = ws.GatheredKeyRows();
  for (size_t j = 0; j < nk; ++j) {
    const size_t row = k.KeyRow(b, kv_head, p.kv_heads, p.kv_len, j0 + j);
    if (!amx_blocks) CopyBytes(k.k_rows + row * p.dim, p.dim, rows + j * p.dim);
    ws.key_sums[j] = k.k_sums[row];
    ws.key_scales[j] = k.k_scale[row];
  }
  return {rows, ws.key_sums, ws.key_scales, amx_blocks ? ws.key_blocks : nullptr};
}

// ---- a decode tile's int8 scores ------------------------------------------------------------
// The int16 pair tile (IntMatMul) puts queries along the lanes, so a decode tile of 4 queries
// would waste half of every vector, and it reads K's rows widened into scratch first. With at
// most 4 queries, each score is instead a dot product along the head dimension, K's codes
// widened in registers: the same exact int32 sums, scaled by the same expression, so the
// scores are bit-identical to the tile's.

// The decode tiles' 2 x 4 block of int16 pair products (FewQueryIntScores: two key rows
// against four query rows; FewQueryIntValues: two vectors of V's quads against four rows'
// weight codes): x times r_i into a_i, y times r_i into b_i, each with its odd-pair partner.
// Named references, not arrays: SVE's sizeless vectors fit in no array (docs/design.md §11).
template <class D32, class V16, class V32 = hn::Vec<D32>>
HWY_INLINE void PairProducts2x4(D32 d32, V16 x, V16 y, V16 r0, V16 r1, V16 r2, V16 r3, V32& a0,
                                V32& a1, V32& a2, V32& a3, V32& b0, V32& b1, V32& b2, V32& b3,
                                V32& oa0, V32& oa1, V32& oa2, V32& oa3, V32& ob0, V32& ob1,
                                V32& ob2, V32& ob3) {
  a0 = hn::ReorderWidenMulAccumulate(d32, x, r0, a0, oa0);
  a1 = hn::ReorderWidenMulAccumulate(d32, x, r1, a1, oa1);
  a2 = hn::ReorderWidenMulAccumulate(d32, x, r2, a2, oa2);
  a3 = hn::ReorderWidenMulAccumulate(d32, x, r3, a3, oa3);
  b0 = hn::ReorderWidenMulAccumulate(d32, y, r0, b0, ob0);
  b1 = hn::ReorderWidenMulAccumulate(d32, y, r1, b1, ob1);
  b2 = hn::ReorderWidenMulAccumulate(d32, y, r2, b2, ob2);
  b3 = hn::ReorderWidenMulAccumulate(d32, y, r3, b3, ob3);
}

// Whether the int8 score product (the int16 pair tile: not the u8 x s8 or AMX tiles) takes
// FewQueryIntScores: at most 4 queries and a head dimension of whole int16 vectors (of whole
// 128-bit blocks, as SumsOfFour adds them).
HWY_INLINE bool TakesFewQueryIntScores(const AttentionProblem& p, size_t nq) {
  const hn::ScalableTag<int16_t> d16;
  const size_t N = hn::Lanes(d16);
  return nq <= kFewQueries && N % 8 == 0 && p.dim % N == 0 && p.int_qk.k_rows != nullptr &&
         p.int_qk.q != nullptr && !p.amx_qk8 && !QuadScores(p);
}

// The 4 query rows of FewQueryIntScores: Q's int16 codes [4][dim] in the panel's rows, zero
// past nq, and its scales as PackIntQueries sets col_scale.
HWY_INLINE void PackFewIntQueries(const AttentionProblem& p, size_t b, size_t h, size_t i0,
                                  size_t nq, const FewQueryPanel& panel) {
  const size_t row0 = (b * p.heads + h) * p.q_len + i0;
  int16_t* rows = panel.IntRows();
  std::fill(rows, rows + kFewQueries * p.dim, int16_t(0));
  std::fill(panel.scales, panel.scales + kTileQ, 0.0f);
  for (size_t i = 0; i < nq; ++i) {
    const int16_t* q = p.int_qk.q + (row0 + i) * 2 * p.int_qk.pairs;
    std::copy(q, q + p.dim, rows + i * p.dim);
    panel.scales[i] = p.int_qk.q_scale[row0 + i] * p.scale;
  }
}

// Whether a decode tile's int8 scores take FewQueryQuadScores (u8 x s8 dot products along the
// head dimension) where the u8 x s8 tile would put its few queries along the lanes: a head
// dimension of whole vectors of bytes.
HWY_INLINE bool TakesFewQueryQuadScores(const AttentionProblem& p, size_t nq) {
#if LPATTN_X86_VNNI_TARGET
  const hn::ScalableTag<uint8_t> d8;
  return nq <= kFewQueries && p.dim % hn::Lanes(d8) == 0 && QuadScores(p);
#else
  (void)p, (void)nq;
  return false;
#endif
}

// The 4 query rows of FewQueryQuadScores: each code xor 0x80 (q + 128, unsigned) as bytes
// [4][dim] in the panel's rows, 0x80 (a code of 0) past nq, and its scales as PackIntQueries
// sets col_scale.
HWY_INLINE void PackFewQuadQueries(const AttentionProblem& p, size_t b, size_t h, size_t i0,
                                   size_t nq, const FewQueryPanel& panel) {
  const size_t row0 = (b * p.heads + h) * p.q_len + i0;
  uint8_t* rows = panel.QuadRows();
  std::fill(rows, rows + kFewQueries * p.dim, uint8_t(0x80));
  std::fill(panel.scales, panel.scales + kTileQ, 0.0f);
  for (size_t i = 0; i < nq; ++i) {
    const int16_t* q = p.int_qk.q + (row0 + i) * 2 * p.int_qk.pairs;
    for (size_t c = 0; c < p.dim; ++c) rows[i * p.dim + c] = uint8_t(int8_t(q[c])) ^ 0x80;
    panel.scales[i] = p.int_qk.q_scale[row0 + i] * p.scale;
  }
}

// S^T[j][i] = (k_scale_j col_scale_i) sum_c k_j[c] q_i[c] for keys j < nk of `keys` (rows
// and scales `stride` rows apart) against the 4 int16 query rows q (`dim` apart), two keys at
// a time, asking for the next tile's rows ahead_first + j as key j is read; lanes 4..columns
// of each key's row are zero.
HWY_INLINE void FewQueryIntScores(const IntKeyTile& keys, size_t nk, size_t stride,
                                  const int16_t* HWY_RESTRICT q, size_t dim,
                                  const float* HWY_RESTRICT col_scale, size_t columns,
                                  const RowsAhead& ahead, size_t ahead_first,
                                  float* HWY_RESTRICT out) {
  const hn::ScalableTag<int16_t> d16;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const hn::CappedTag<float, 4> d4;
  const size_t N = hn::Lanes(d16);
  const auto q_scales = hn::LoadU(d4, col_scale);
  for (size_t j = 0; j < nk; j += 2) {
    const bool pair = j + 1 < nk;
    const int8_t* row0 = keys.rows + j * stride * dim;
    const int8_t* row1 = pair ? row0 + stride * dim : row0;
    AskRowsAhead(ahead, ahead_first + j);
    AskRowsAhead(ahead, ahead_first + j + 1);
    // Odd-pair accumulators (unused where pmaddwd adds each pair itself).
    auto a0 = hn::Zero(d32), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    auto oa0 = a0, oa1 = a0, oa2 = a0, oa3 = a0, ob0 = a0, ob1 = a0, ob2 = a0, ob3 = a0;
    for (size_t c = 0; c < dim; c += N) {
      PairProducts2x4(d32, hn::PromoteTo(d16, hn::LoadU(d8, row0 + c)),
                      hn::PromoteTo(d16, hn::LoadU(d8, row1 + c)), hn::LoadU(d16, q + c),
                      hn::LoadU(d16, q + dim + c), hn::LoadU(d16, q + 2 * dim + c),
                      hn::LoadU(d16, q + 3 * dim + c), a0, a1, a2, a3, b0, b1, b2, b3, oa0, oa1,
                      oa2, oa3, ob0, ob1, ob2, ob3);
    }
    // IntMatMul's epilogue: float(sum) times (row scale x column scale), plus 0.
    const auto scaled = [&](size_t t, hn::Vec<decltype(d32)> s0, hn::Vec<decltype(d32)> s1,
                            hn::Vec<decltype(d32)> s2, hn::Vec<decltype(d32)> s3) HWY_ATTR {
      const auto sums = hn::ConvertTo(d4, SumsOfFour(d32, s0, s1, s2, s3));
      return hn::MulAdd(sums, hn::Mul(hn::Set(d4, keys.scales[t * stride]), q_scales),
                        hn::Zero(d4));
    };
    ZeroScoreRow(columns, out + j * kTileQ);
    hn::Store(scaled(j, hn::RearrangeToOddPlusEven(a0, oa0), hn::RearrangeToOddPlusEven(a1, oa1),
                     hn::RearrangeToOddPlusEven(a2, oa2), hn::RearrangeToOddPlusEven(a3, oa3)),
              d4, out + j * kTileQ);
    if (!pair) break;
    ZeroScoreRow(columns, out + (j + 1) * kTileQ);
    hn::Store(scaled(j + 1, hn::RearrangeToOddPlusEven(b0, ob0), hn::RearrangeToOddPlusEven(b1, ob1),
                     hn::RearrangeToOddPlusEven(b2, ob2), hn::RearrangeToOddPlusEven(b3, ob3)),
              d4, out + (j + 1) * kTileQ);
  }
}

// A decode tile's int8 scores (FewQueryQuadScores with the u8 x s8 tile's family, else
// FewQueryIntScores) on K's codes where they lie: a paged K one block's run of rows at a time,
// not gathered into scratch as IntKeyRows gathers them.
HWY_INLINE void FewQueryIntTile(const AttentionProblem& p, size_t b, size_t kv_head, size_t j0,
                                size_t nk, size_t columns, float* out, TileWorkspace& ws) {
  const IntQk& k = p.int_qk;
  const bool paged = k.block_tables != nullptr;
  const size_t block = size_t(1) << k.block_shift;
  const size_t stride = paged ? size_t(k.row_strides.token) : 1;
  for (size_t s = 0; s < nk;) {
    const size_t run = paged ? std::min(nk - s, block - ((j0 + s) & (block - 1))) : nk;
    const size_t row = k.KeyRow(b, kv_head, p.kv_heads, p.kv_len, j0 + s);
#if LPATTN_X86_VNNI_TARGET
    if (QuadScores(p)) {
      const RowsAhead& ahead = ws.ahead;
      // Inlined by force: a call to a function that only loads and prefetches has no effect
      // GCC 12 keeps, and the constant-propagated clone dropped the requests altogether
      // (docs/performance.md §4.15: paged int8 decode 2.5-3x the contiguous cache's time).
      const auto ask = [&ahead, s](size_t j) HWY_ATTR __attribute__((always_inline)) {
        AskRowsAhead(ahead, s + j);
      };
      FewQueryQuadScores(k.k_rows + row * p.dim, k.k_sums + row, k.k_scale + row, run, stride,
                         ws.few_panel.QuadRows(), p.dim, ws.few_panel.scales, columns,
                         out + s * kTileQ, kTileQ, ask);
      s += run;
      continue;
    }
#endif
    FewQueryIntScores({k.k_rows + row * p.dim, k.k_sums + row, k.k_scale + row}, run, stride,
                      ws.few_panel.IntRows(), p.dim, ws.few_panel.scales, columns, ws.ahead, s,
                      out + s * kTileQ);
    s += run;
  }
}

// A paged int8 K's rows [first, first + n) of (b, kv_head), with their sums and scales, asked
// for ahead of their use (a decode step's next key tile), as RowsAhead asks for a HeadRows'
// rows: the integer products' K lies in IntQk, apart from any HeadRows. Only for blocks
// within a 4 KiB page: at 16-token blocks (2 KiB at head_dim 128) it saves 5-9% of a decode
// step; at 128 (16 KiB, which the hardware streams itself) it measured 0-5% slower.
HWY_INLINE void PrefetchPagedKeyCodes(const AttentionProblem& p, size_t b, size_t kv_head,
                                      size_t first, size_t n) {
  const IntQk& k = p.int_qk;
  if (k.block_tables == nullptr || k.k_rows == nullptr) return;
  if ((size_t(1) << k.block_shift) * p.dim > 4096) return;
  for (size_t j = first; j < first + n; ++j) {
    const size_t row = k.KeyRow(b, kv_head, p.kv_heads, p.kv_len, j);
    for (size_t c = 0; c < p.dim; c += 64) AskLine(k.k_rows + row * p.dim + c);
    if ((j & ((size_t(1) << k.block_shift) - 1)) == 0 || j == first) {  // a block's first row
      AskLine(k.k_sums + row);
      AskLine(k.k_scale + row);
    }
  }
}

// Whether ScoreTile reads K through the call's HeadRows (floats or codes): not when the int8
// products read their own codes (IntQk). Only rows a tile reads are worth asking for ahead:
// prefetching the unread fp32 K and V of an int8 decode step doubled its time (Zen 3).
HWY_INLINE bool ScoresReadKeyRows(const AttentionProblem& p) {
  return !p.amx_qk8 && !QuadScores(p) && p.int_qk.k_rows == nullptr;
}

// The score tile S^T of keys [j0, j0 + nk) against a query tile's `columns` queries (packed in
// q_panel, or in ws by PackQueries on the integer and AMX paths), key-major with row stride kTileQ.
// On the AMX path up to 15 rows past nk are written too (the tile's buffer has them). The fp32
// product computes only the columns in `live` (LiveColumns'), per block of keys those whose
// queries see it when `live` says which queries they are; the other products all of them.
HWY_INLINE void ScoreTile(const AttentionProblem& p, const HeadRows& k, size_t b, size_t kv_head,
                          size_t j0, size_t nk, size_t columns, const float* q_panel, float* out,
                          TileWorkspace& ws, ColumnRange live = {0, kTileQ}) {
  if (p.amx_qk != AmxScores::kOff) {
    AmxScoreTile(p, k, j0, nk, columns, out, ws);
    return;
  }
  if (p.amx_qk8) {
    const IntKeyTile keys = IntKeyRows(p, b, kv_head, j0, nk, ws);
    native::AmxInt8ScoreTile(keys.rows, p.dim, nk,
                             reinterpret_cast<const int8_t*>(ws.int_panel.get()), kTileQ, columns,
                             p.dim, keys.scales, ws.col_scale, out, kTileQ,
                             reinterpret_cast<int8_t*>(ws.key_rows.get()), keys.blocks);
    return;
  }
#if LPATTN_X86_VNNI_TARGET
  if (QuadScores(p)) {
    if (ws.few_int_queries) {
      FewQueryIntTile(p, b, kv_head, j0, nk, columns, out, ws);
      return;
    }
    const IntKeyTile keys = IntKeyRows(p, b, kv_head, j0, nk, ws);
    QuadMatMul<false>({keys.rows, p.dim / 4, 1, keys.sums, keys.scales},
                      {reinterpret_cast<const int8_t*>(ws.int_panel.get()), kTileQ, ws.col_scale},
                      {out, kTileQ}, nk, columns, p.dim / 4);
    return;
  }
#endif
  if (p.int_qk.k_rows != nullptr) {  // the int16 pair tile, on this key tile's widened rows
    if (ws.few_int_queries) {
      FewQueryIntTile(p, b, kv_head, j0, nk, columns, out, ws);
      return;
    }
    const size_t pairs = p.int_qk.pairs;
    const IntKeyTile keys = IntKeyRows(p, b, kv_head, j0, nk, ws);
    int32_t* words = reinterpret_cast<int32_t*>(ws.key_rows.get());
    WidenKeyRows(keys.rows, nk, p.dim, pairs, words);
    IntMatMul({words, pairs, 1, keys.scales},
              {ws.int_panel.get(), kTileQ, ws.col_scale}, {out, kTileQ}, nk, columns, pairs);
    return;
  }
  if (ws.few_queries) {
    FewQueryScores(k, j0, nk, ws.few_panel.rows, p.dim, columns, ws.ahead, out);
    return;
  }
  const size_t end = std::min(columns, live.end);
  if (live.begin >= end) return;
  const LhsView keys = KeyTile(k, j0, nk, p.dim, ws.key_rows.get());
  if (live.first_query == SIZE_MAX) {
    MatMul<false>(keys, {q_panel + live.begin, kTileQ}, {out + live.begin, kTileQ}, nk,
                  end - live.begin, p.dim);
    return;
  }
  for (size_t r0 = 0; r0 < nk; r0 += kMicroRows) {  // a band's key blocks
    const size_t block = std::min(kMicroRows, nk - r0);
    const ColumnRange c = KeyBlockColumns(p, live, j0 + r0, block);
    if (c.begin >= c.end) continue;
    RowBlock<false>(block, keys, r0, {q_panel + c.begin, kTileQ}, c.end - c.begin,
                    {out + c.begin, kTileQ}, 0, p.dim);
  }
}

// A query tile in the form the call's score product reads: q_panel (fp32, transposed and
// scaled) or ws's integer or AMX panel; a decode tile's few queries into `few` (a spanned
// run's own panel), or ws's buffers when it is empty (ws.few_panel says which).
HWY_INLINE void PackQueries(const AttentionProblem& p, const HeadRows& q, size_t b, size_t h,
                            size_t i0, size_t nq, float* q_panel, TileWorkspace& ws,
                            FewQueryPanel few = {}) {
  ws.few_queries = ws.few_int_queries = false;
  // The panel a few-query product reads: `few`, or the workspace's buffers `own`.
  const auto panel = [&](FewQueryPanel own) {
    return ws.few_panel = few.rows != nullptr ? few : own;
  };
  const FewQueryPanel int_panel{reinterpret_cast<float*>(ws.int_panel.get()), ws.col_scale};
  if (TakesFewQueryQuadScores(p, nq)) {
    PackFewQuadQueries(p, b, h, i0, nq, panel(int_panel));
    ws.few_int_queries = true;
  } else if (p.amx_qk8 || QuadScores(p)) {
    PackInt8QueryQuads(p, b, h, i0, nq, !p.amx_qk8, ws);
  } else if (TakesFewQueryIntScores(p, nq)) {
    PackFewIntQueries(p, b, h, i0, nq, panel(int_panel));
    ws.few_int_queries = true;
  } else if (p.int_qk.q != nullptr) {
    PackIntQueries(p, b, h, i0, nq, ws);
  } else if (p.amx_qk != AmxScores::kOff) {
    PackAmxQueryPairs(p, q, i0, nq, ws);
  } else if (TakesFewQueryScores(p, nq) && !q.coded()) {
    PackFewQueries(p, q, i0, nq, panel({ws.rows2.get(), nullptr}).rows);
    ws.few_queries = true;
    return;
  } else {
    PackTransposed(q, i0, nq, p.dim, p.scale, kTileQ, q_panel, p.unit_queries, p.q_cast);
  }
  ws.few_queries = false;
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // LPATTN_KERNELS_SKELETON_SCORE_TILE_INL_H_
