// A validated attention call in the form the per-target skeleton consumes: sizes as size_t,
// the scale resolved, the sink reduced to "has one, and its logit per head".
#ifndef LPATTN_KERNELS_SKELETON_ATTENTION_PROBLEM_H_
#define LPATTN_KERNELS_SKELETON_ATTENTION_PROBLEM_H_

#include <stddef.h>
#include <stdint.h>

#include <algorithm>

#include "kernels/attention.h"
#include "quant/format.h"
#include "tbb/task_arena.h"

namespace lpattn {

// K or V held as 16-bit codes (bf16 or fp16) or 8-bit ones (fp8 with scales) instead of
// floats: docs/math.md §4.1's native low-precision path, where the forward decodes each key
// tile into fp32 as it reads it. Neither set: the tensor is read as floats from the call's
// arguments.
struct CodedKv {
  const uint16_t* data = nullptr;
  Strides strides;
  bool fp16 = false;  // else bf16
  // Or 8-bit codes (then data is null), one byte an element in the same strides, each token's
  // value decode(code) * token_scale: a scale per token, block or tensor, none per channel.
  // Token t's scale is token_scales[b scale_strides.batch + h scale_strides.head +
  // row(t) scale_strides.token] ({H T, T, 1} for dense [B, H, T] scales).
  const uint8_t* codes8 = nullptr;
  const float* token_scales = nullptr;
  Strides scale_strides;
  bool e5m2 = false;  // fp8 e5m2, else e4m3 (unless int8)
  bool int8 = false;  // int8 codes (a KvCache's V), not fp8
  bool no_nan = false;  // no NaN code among them (a KvCache's: Append rejects one)
  // Or fp32 values a KvCache holds (then data and codes8 are null), read as floats.
  const float* floats = nullptr;
  // Paged rows (a KvCache's block pool, docs/design.md §9): token t of batch b lies in block
  // block_tables[b table_stride + t / 2^block_shift] of the pool, at block_stride elements a
  // block (scale_block_stride scales) and strides.token (scale_strides.token) a token within
  // it; strides.batch is then 0. Null: token t is at t strides.token.
  const int32_t* block_tables = nullptr;
  size_t table_stride = 0;
  uint32_t block_shift = 0;
  size_t block_stride = 0, scale_block_stride = 0;

  bool set() const { return data != nullptr || codes8 != nullptr || floats != nullptr; }
};

// int8 Q and K with a scale per token: docs/math.md §4's native int8 Q K^T. Q's codes are
// widened to int16 rows of `pairs` channel pairs (the last padded with 0 for an odd
// head_dim), K's are rows of bytes with each row's code sum (the u8 x s8 tile's bias
// correction); dense layouts [batch, heads, q_len] and [batch, kv_heads, kv_len] of rows.
struct IntQk {
  const int16_t* q = nullptr;   // [rows][2 pairs]
  const float* q_scale = nullptr;
  const int8_t* k_rows = nullptr;  // [rows][head_dim], one byte an element
  const int32_t* k_sums = nullptr;
  const float* k_scale = nullptr;
  size_t pairs = 0;
  // K rows per (batch, kv head) slice: a KvCache's capacity; 0 means kv_len (dense rows).
  size_t slice_rows = 0;
  // Paged K (a KvCache's block pool): key j of batch b and kv head h is row
  // block_tables[b table_stride + j / 2^block_shift] row_strides.batch (a block) +
  // h row_strides.head + (j % 2^block_shift) row_strides.token, so a key tile's rows are
  // gathered before the integer products.
  const int32_t* block_tables = nullptr;
  size_t table_stride = 0;
  uint32_t block_shift = 0;
  Strides row_strides;
  // The row index of key j of slice (batch b, kv head h).
  size_t KeyRow(size_t b, size_t h, size_t kv_heads, size_t kv_len, size_t j) const {
    if (block_tables != nullptr) {
      const size_t block = size_t(block_tables[b * table_stride + (j >> block_shift)]);
      return block * size_t(row_strides.batch) + h * size_t(row_strides.head) +
             (j & ((size_t(1) << block_shift) - 1)) * size_t(row_strides.token);
    }
    return (b * kv_heads + h) * (slice_rows != 0 ? slice_rows : kv_len) + j;
  }
};

// One K row of `dim` int8 codes as the int16 pair tile's words: each channel pair's int16
// codes (k[2p], k[2p + 1]) in one little-endian int32 word, an odd dim's last pair padded
// with 0.
inline void Int8RowToPairWords(const int8_t* row, size_t dim, int32_t* words) {
  for (size_t p = 0; p < (dim + 1) / 2; ++p) {
    const uint32_t lo = uint16_t(int16_t(row[2 * p]));
    const uint32_t hi = 2 * p + 1 < dim ? uint16_t(int16_t(row[2 * p + 1])) : 0u;
    words[p] = int32_t(lo | (hi << 16));
  }
}

// V as int8 codes for the native int8 P V product (with P rounded to int8), one byte an
// element, with V's scales: v_scales[0] for every element (per tensor, scale_stride 0), or
// head_dim per (batch, kv head) slice (per channel, scale_stride = head_dim).
struct IntPv {
  const float* v_scales = nullptr;
  size_t scale_stride = 0;
  size_t width = 0;  // columns of a key quad row: head_dim rounded up to a multiple of 32
  // Prepared for AMX int8 tiles: V^T, per (batch, kv head) [head_dim][vt_key_stride], zero from
  // kv_len on (a tile step of 64 keys reads past a tile).
  const int8_t* vt = nullptr;
  size_t vt_key_stride = 0;
  // Otherwise: quads of keys' codes interleaved column by column, per (batch, kv head)
  // [key_quads][width][4], zero beyond head_dim and past the last key; the u8 x s8 tile reads
  // them as they are, the int16 pair tile regroups each key tile's.
  const int8_t* v_quads = nullptr;
  size_t key_quads = 0;

  bool set() const { return vt != nullptr || v_quads != nullptr; }
};

// V transposed, as bf16 codes, for the P V product on AMX tiles (with P rounded to bf16): per
// (batch, kv head), [head_dim][key_stride] codes, zero from kv_len on; key_stride covers every
// key tile's two 32-key tile steps. Set only when V holds no inf or NaN (a tile multiplies a
// masked key's value by its zero weight).
struct AmxPv {
  const uint16_t* vt = nullptr;
  size_t key_stride = 0;
};

// docs/math.md §4.2's bf16 backward on the bf16 pair products (bwd = bwd_dp = bf16, head_dim a
// multiple of 32, finite operands, avx512_bf16 enabled, and amx_bf16 or avx512_bf16's dot tiles
// taking the pairs: native/bf16_pair_products.h): the products' operands as bf16 codes in the
// tiles' layouts, per (batch, head) slice of T tokens:
//   *_rows  [T][D]             X as A (rows of channels)
//   *_t     [D][t_pad]         X^T as A (rows of tokens), zero past T
//   *_pairs [D/2][t_pad][2]    X^T as B (channel pairs), B(c, t) = X[t][c], zero past T
// with t_pad = q_pad for Q and dO, kv_pad for K and V. Products and their orientation: the key
// side's S = Q K^T (scores: with qk = bf16), dP = dO V^T, dV^T += dO^T P, dK^T += Q^T dS; the
// query side's S^T = K Q^T, dP^T = V dO^T, dQ^T += K^T dS^T (accumulators dim-major).
//
// With bwd = int8 (and dP in bf16 as above, head_dim a multiple of 64), dV^T, dK^T and dQ^T run
// on AMX int8 tiles (amx_int8 enabled) instead: Q, K and dO as int8 codes with a scale per
// channel, *_t8 [D][t_pad8] per slice (t_pad8 = q_pad8 for Q and dO, kv_pad for K), zero past
// T, their scales *_scales8 [slice][D]; P and dS become int8 quads with their block's scale.
// Where the pair products run on the dot tiles, the same codes as bf16 values (*_t8_bf16, the
// same layout) and P and dS as bf16 pairs of their codes: the same sums (Int8Gradient).
struct BackwardTiles {
  bool on = false;
  bool scores = false;  // S and S^T on tiles too (Q and K bf16 values)
  size_t q_pad = 0, kv_pad = 0;
  const uint16_t *q_rows = nullptr, *q_pairs = nullptr, *k_rows = nullptr, *k_pairs = nullptr;
  const uint16_t *dp_d_o_rows = nullptr, *dp_d_o_pairs = nullptr;
  const uint16_t *dp_v_rows = nullptr, *dp_v_pairs = nullptr;
  const uint16_t *q_t = nullptr, *k_t = nullptr, *d_o_t = nullptr;
  bool int8 = false;
  size_t q_pad8 = 0;
  const int8_t *q_t8 = nullptr, *k_t8 = nullptr, *d_o_t8 = nullptr;
  const float *q_scales8 = nullptr, *k_scales8 = nullptr, *d_o_scales8 = nullptr;
  const uint16_t *q_t8_bf16 = nullptr, *k_t8_bf16 = nullptr, *d_o_t8_bf16 = nullptr;
};

// The low-precision backward, docs/math.md §4.2: the operands of its products as rounded copies
// (a null view: the call's own tensor, unrounded), and how P and dS are rounded on their way
// into them (both like dS, a scale per block). S and Delta are recomputed from the unrounded operands.
struct BackwardRounding {
  ConstTensor q, k, d_o;    // in dK = dS^T Q, dQ = dS K and dV = P^T dO
  ConstTensor dp_d_o, dp_v;  // in dP = dO V^T
  // P and dS, each with one scale per block of kTileQ queries and kTileK keys when scaled
  // (amax over the block / FormatMax: int8, fp16), else scale 1 (bf16).
  quant::Format format = quant::Format::kFp32;
  bool scaled = false;
  BackwardTiles tiles;  // products on the pair products' tiles, when tiles.on

  bool rounds() const {
    return q.data || k.data || d_o.data || dp_d_o.data || dp_v.data ||
           format != quant::Format::kFp32;
  }
};
// The view a product reads: the rounded copy when there is one, else the call's tensor.
inline ConstTensor OrCall(ConstTensor rounded, ConstTensor call) {
  return rounded.data != nullptr ? rounded : call;
}

// How the score product runs on AMX bf16 tiles. Every operand value is exactly a bf16 or a
// sum of two, so the tiles' products are exact and only the fp32 sums' order differs.
enum class AmxScores : uint8_t {
  kOff,
  kBf16,  // bf16 K codes read in place; Q's bf16 values
  // fp16 K and Q: each value split exactly into hi + lo bf16 (hi its upper 16 bits), a key row
  // read as [hi, lo, hi, lo] against a query's [hi, hi, lo, lo], so the product's depth is 4 D
  kFp16,
  // fp8 K and Q codes decoded to bf16 per tile (exact), each score times its query's and its
  // key's scale
  kFp8,
};

struct AttentionProblem {
  size_t batch, heads, kv_heads, q_len, kv_len, dim;
  bool causal;
  float scale;
  float softcap = 0.0f;  // §1.3, exact attention's: the transform caps each scaled score
  // §1.4 ALiBi, exact attention's: [heads] slopes (of the call's query heads), or null.
  const float* alibi_slopes = nullptr;
  // §1.5 sliding window, exact attention's: keys before VisibleBegin(i) are hidden. 0: none.
  size_t window = 0;
  // Whether a score tile needs score_bias-inl.h's pass (ALiBi, the softcap, a window).
  bool ModifiesScores() const { return alibi_slopes != nullptr || softcap != 0.0f || window != 0; }
  bool has_sink;
  const float* sink_logits;  // null with the off-by-one softmax (tau = 0)
  // The forward divides each query by max(||q||, 1e-12) as it packs it (thresholded attention).
  bool unit_queries = false;
  // The forward reads K and V from these when set (dense transforms only; the backward never).
  CodedKv k_codes, v_codes;
  // Q's values cast to this format (bf16 or fp16, no scale) as each query tile is packed, on
  // the fp32 score products (dense transforms' forward only): the rounding a copy would hold.
  quant::Format q_cast = quant::Format::kFp32;
  IntQk int_qk;  // scores from integer products when set (dense transforms' forward only)
  IntPv int_pv;  // P V from integer products when set() (dense forward with p = int8)
  // Q K^T on AMX bf16 tiles (kernels/native/amx_products.h; dense transforms' forward only),
  // with K from k_codes and each query tile packed as bf16 pairs (docs/math.md §4.1):
  AmxScores amx_qk = AmxScores::kOff;
  // With amx_qk kFp16 or kFp8: k_codes hold the product's key rows themselves, bf16 codes as
  // the per-tile conversion makes them (4 D a row for fp16's split, D for fp8, whose token
  // scales stay k_codes'), built once per call by DecodePlan and read in place like bf16 K.
  bool amx_key_rows = false;
  CodedKv q_codes;  // Q's fp8 codes and token scales, with amx_qk == kFp8
  // int8 Q K^T on AMX tiles (tdpbssd) when set: K from int_qk.k_rows, each query tile packed
  // as int8 quads. int_qk.k_rows without it (the tiles turned off since K was prepared): the
  // rows are widened to pairs per key tile for the Highway integer tile.
  bool amx_qk8 = false;
  // int8 Q K^T on the u8 x s8 VNNI tile (vpdpbusd) when set and the running target's VNNI
  // family is enabled: K from int_qk.k_rows, each query tile packed as quads biased by 128
  // (score_tile-inl.h).
  bool quad_qk8 = false;
  AmxPv amx_pv;  // P V on AMX tiles when set and amx_bf16 is still enabled, else V^T decoded
  // §4 P quantization in the dense forward: weights rounded to p_format (scale p_scale)
  // before the P V product.
  quant::Format p_format = quant::Format::kFp32;
  float p_scale = 1.0f;
  // docs/math.md §4.3: V's token scales folded into the int8 weights (a KvCache's int8 V).
  bool p_folds_v = false;
  BackwardRounding bwd;  // the backward's (§4.2); all unset: the plain fp32 backward

  // The decode layout of the forward (docs/design.md §8), set by DecodePlan: `heads` are
  // then the kv heads and each one's q_len rows are its group's query heads, head_rows rows
  // (queries) each, head after head. Row i of head g is query i % head_rows of query head
  // g * query_group + i / head_rows, so K and V are read once per group. 0: rows are queries.
  size_t head_rows = 0;
  size_t query_group = 1;
  // Split-KV (docs/math.md §5): each query tile's keys are taken in blocks of key_block keys
  // (a multiple of kTileK), one task each, whose partial (m, Z, o) are merged in block order.
  // 0: one task takes all of a tile's keys.
  size_t key_block = 0;
  // Split-KV tasks run the tiles of span_heads kv heads of a batch in lockstep through each key
  // tile, where K or V lays a token's kv heads side by side (the decode plan's SpanHeads,
  // kernels/entry/decode_plan.h); 1: a task per tile.
  size_t span_heads = 1;

  size_t group() const { return heads / kv_heads; }
  float sink(size_t h) const { return sink_logits ? sink_logits[h] : 0.0f; }
  // The sink logit of row i of head h (of the query head it belongs to, in the decode layout).
  float RowSink(size_t h, size_t i) const {
    return head_rows == 0 ? sink(h) : sink(h * query_group + i / head_rows);
  }
  // The query head of row i of head h (h itself unless in the decode layout).
  size_t RowHead(size_t h, size_t i) const {
    return head_rows == 0 ? h : h * query_group + i / head_rows;
  }
  // Row i's query position among the keys, i + kv_len - q_len (per query head in the decode
  // layout): the key it is aligned with, negative when q_len > kv_len.
  ptrdiff_t QueryPosition(size_t i) const {
    const size_t position = head_rows == 0 ? i : i % head_rows;
    const size_t queries = head_rows == 0 ? q_len : head_rows;
    return ptrdiff_t(position) + ptrdiff_t(kv_len) - ptrdiff_t(queries);
  }
  // §1.5: query i sees no key before VisibleBegin(i) (0 without a window).
  size_t VisibleBegin(size_t i) const {
    if (window == 0) return 0;
    const ptrdiff_t begin = QueryPosition(i) - ptrdiff_t(window) + 1;
    return size_t(std::clamp<ptrdiff_t>(begin, 0, ptrdiff_t(kv_len)));
  }
  // The least VisibleBegin of rows [i0, i0 + n): its first row's, or position 0's when the
  // range crosses query heads in the decode layout.
  size_t MinVisibleBegin(size_t i0, size_t n) const {
    if (head_rows == 0 || i0 % head_rows + n <= head_rows) return VisibleBegin(i0);
    return VisibleBegin(0);
  }
  // §0: query i sees keys j < VisibleEnd(i) (bottom-right aligned causal mask).
  size_t VisibleEnd(size_t i) const {
    if (!causal) return kv_len;
    const size_t position = head_rows == 0 ? i : i % head_rows;
    const size_t queries = head_rows == 0 ? q_len : head_rows;
    const ptrdiff_t end = ptrdiff_t(position) + ptrdiff_t(kv_len) - ptrdiff_t(queries) + 1;
    return size_t(std::clamp<ptrdiff_t>(end, 0, ptrdiff_t(kv_len)));
  }
  // The least and the greatest VisibleEnd of rows [i0, i0 + n): those of its first and last
  // rows, unless the range crosses into another query head's rows in the decode layout.
  size_t MinVisibleEnd(size_t i0, size_t n) const {
    if (head_rows == 0 || i0 % head_rows + n <= head_rows) return VisibleEnd(i0);
    return VisibleEnd(0);
  }
  size_t MaxVisibleEnd(size_t i0, size_t n) const {
    if (head_rows == 0 || i0 % head_rows + n <= head_rows) return VisibleEnd(i0 + n - 1);
    return VisibleEnd(head_rows - 1);
  }
  // One past the last query that sees key j: q_len, or under §1.5's window the first query
  // whose window starts after j (query i sees j iff QueryPosition(i) < j + window).
  size_t QueryEndSeeing(size_t j) const {
    if (window == 0) return q_len;
    const ptrdiff_t end = ptrdiff_t(j) + ptrdiff_t(window) + ptrdiff_t(q_len) - ptrdiff_t(kv_len);
    return size_t(std::clamp<ptrdiff_t>(end, 0, ptrdiff_t(q_len)));
  }
  // First query that sees key j (q_len if none).
  size_t FirstQuerySeeing(size_t j) const {
    if (!causal) return 0;
    const ptrdiff_t first = ptrdiff_t(j) - ptrdiff_t(kv_len) + ptrdiff_t(q_len);
    return size_t(std::clamp<ptrdiff_t>(first, 0, ptrdiff_t(q_len)));
  }
};

// The tensors the backward's products read (§4.2): the rounded copies where the call made them.
struct BackwardOperands {
  ConstTensor q, k, d_o;     // dK = dS^T Q, dQ = dS K, dV = P^T dO
  ConstTensor dp_d_o, dp_v;  // dP = dO V^T
};
inline BackwardOperands ProductOperands(const AttentionProblem& p, const BackwardArgs& a) {
  return {OrCall(p.bwd.q, a.q), OrCall(p.bwd.k, a.k), OrCall(p.bwd.d_o, a.d_o),
          OrCall(p.bwd.dp_d_o, a.d_o), OrCall(p.bwd.dp_v, a.v)};
}

AttentionProblem MakeProblem(const AttentionShape& shape, const AttentionOptions& options);

// Runs fn in a TBB arena of `threads` threads; threads == 0 runs it in the caller's arena, so
// an engine that manages TBB keeps control.
template <class Fn>
void RunWithThreads(int threads, const Fn& fn) {
  if (threads <= 0) {
    fn();
    return;
  }
  tbb::task_arena arena(threads);
  arena.execute(fn);
}

}  // namespace lpattn

#endif  // LPATTN_KERNELS_SKELETON_ATTENTION_PROBLEM_H_
