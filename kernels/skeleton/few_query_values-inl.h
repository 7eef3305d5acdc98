// A decode tile's P V (docs/design.md §8): at most kFewQueries rows of weights against a key
// tile's V rows, each row read where it lies (floats, or codes decoded in registers by
// LanesAt, an 8-bit row's token scale folded into its weights) and multiplied into the
// accumulators at once. The general product decodes the tile into scratch rows (and gathers a
// paged fp32 tile there) and reads them back; with four rows of weights that round trip costs
// as much as the product.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_SKELETON_FEW_QUERY_VALUES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_SKELETON_FEW_QUERY_VALUES_INL_H_
#undef LPATTN_KERNELS_SKELETON_FEW_QUERY_VALUES_INL_H_
#else
#define LPATTN_KERNELS_SKELETON_FEW_QUERY_VALUES_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <type_traits>

#include "hwy/highway.h"
#include "kernels/native/cpu_features.h"
#include "kernels/native/x86_targets.h"
#include "kernels/skeleton/score_tile-inl.h"
#include "kernels/skeleton/tile_sizes.h"
#include "kernels/skeleton/tile_workspace-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Vectors of channels a pass holds for 4 rows: 16 accumulators where there are 32 registers
// (AVX-512), 8 where there are 16.
HWY_INLINE constexpr size_t FewQueryValueVectors() {
  return hn::MaxLanes(hn::ScalableTag<float>()) >= 16 ? 4 : 2;
}

// Whether a decode tile asks for src's next rows ahead of their use (RowsAhead; docs/design.md
// §8): a paged src, whose blocks the hardware prefetchers cannot follow, and every src on
// targets of 16 vector registers, where each FewQueryValues pass reads one cache line of every
// row of the tile (8 passes at D = 128): AMD Zen 3's streamers fall behind there (asked for
// row by row as the scores are computed, its fp32 step took 0.73-0.80x the time, 16- and
// 8-bit codes 0.75-0.88x). AVX-512's passes read 4 lines a row: on the Intel Xeon asking for a
// contiguous head's rows cost; on AMD Zen 5 asking saved for rows of floats and 16-bit codes
// (0.75-0.83x an fp32 or bf16 step's time) and, with a scale's line asked for once, for 8-bit
// rows read from memory (docs/performance.md §4.27).
HWY_INLINE bool AsksDecodeRows(const HeadRows& src) {
  if (src.block_table != nullptr || FewQueryValueVectors() == 2) return true;
  return native::DetectedCpuFeatures().amd;
}

// Whether a decode tile asks for the integer products' next K codes (IntQk, apart from any
// HeadRows): a paged K's, and under AVX-512 on AMD a contiguous K's too, as AsksDecodeRows
// asks for its 8-bit rows (docs/performance.md §4.27).
HWY_INLINE bool AsksIntKeyRows(const IntQk& k) {
  if (k.block_tables != nullptr) return true;
  return FewQueryValueVectors() == 4 && native::DetectedCpuFeatures().amd;
}

// Whether a tile's P V takes FewQueryValues: a decode tile whose rows share one key range
// (every row of a q_len = 1 step does), V read where it lies (not transposed for the AMX
// tiles, not the int8 tile's codes), a head dimension of whole vectors.
HWY_INLINE bool TakesFewQueryValues(const AttentionProblem& p, size_t nq, const uint32_t* begin,
                                    const uint32_t* end) {
  const hn::ScalableTag<float> d;
  if (nq > kFewQueries || p.dim % hn::Lanes(d) != 0 || p.amx_pv.vt != nullptr) return false;
  for (size_t i = 1; i < nq; ++i) {
    if (begin[i] != begin[0] || end[i] != end[0]) return false;
  }
  return true;
}

// A decode tile's keys as FewQueryValuesPass reads them: each key's row address and its 4
// weights with the row's token scale folded in, resolved once for all the passes (through the
// block table where paged: per pass, the lookups and scale loads cost as much as the FMAs).
struct FewQueryKeys {
  const void* rows[kTileK];
  HWY_ALIGN float weights[kTileK * kFewQueries];  // [key][row]
  size_t n = 0;
};

// out[i][c] += sum_j keys.weights[j][i] v_j[c] for 4 rows i and channels [c0, c0 + kVecs N).
template <RowKind kKind, size_t kVecs>
HWY_INLINE void FewQueryValuesPass(const FewQueryKeys& keys, size_t c0, float* HWY_RESTRICT out,
                                   size_t out_stride) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  constexpr RowKind kRead = kKind == RowKind::kE4M3NoNaN ? RowKind::kE4M3Over256 : kKind;
#if HWY_HAVE_SCALABLE
  // SVE's vectors are sizeless: no array holds them (docs/design.md §11). One vector of
  // channels at a time in four named accumulators, keys in the same order: the same sums.
  for (size_t x = 0; x < kVecs; ++x) {
    float* o = out + c0 + x * N;
    auto acc0 = hn::LoadU(d, o), acc1 = hn::LoadU(d, o + out_stride);
    auto acc2 = hn::LoadU(d, o + 2 * out_stride), acc3 = hn::LoadU(d, o + 3 * out_stride);
    for (size_t j = 0; j < keys.n; ++j) {
      const float* w_j = keys.weights + j * kFewQueries;
      const auto values = LanesAt<kRead>(d, keys.rows[j], c0 + x * N);
      acc0 = hn::MulAdd(hn::Set(d, w_j[0]), values, acc0);
      acc1 = hn::MulAdd(hn::Set(d, w_j[1]), values, acc1);
      acc2 = hn::MulAdd(hn::Set(d, w_j[2]), values, acc2);
      acc3 = hn::MulAdd(hn::Set(d, w_j[3]), values, acc3);
    }
    hn::StoreU(acc0, d, o);
    hn::StoreU(acc1, d, o + out_stride);
    hn::StoreU(acc2, d, o + 2 * out_stride);
    hn::StoreU(acc3, d, o + 3 * out_stride);
  }
#else
  hn::Vec<decltype(d)> acc[4][kVecs];
  for (size_t i = 0; i < 4; ++i) {
    for (size_t x = 0; x < kVecs; ++x) acc[i][x] = hn::LoadU(d, out + i * out_stride + c0 + x * N);
  }
  for (size_t j = 0; j < keys.n; ++j) {
    const float* w_j = keys.weights + j * kFewQueries;
    const auto w0 = hn::Set(d, w_j[0]), w1 = hn::Set(d, w_j[1]);
    const auto w2 = hn::Set(d, w_j[2]), w3 = hn::Set(d, w_j[3]);
    for (size_t x = 0; x < kVecs; ++x) {
      const auto values = LanesAt<kRead>(d, keys.rows[j], c0 + x * N);
      acc[0][x] = hn::MulAdd(w0, values, acc[0][x]);
      acc[1][x] = hn::MulAdd(w1, values, acc[1][x]);
      acc[2][x] = hn::MulAdd(w2, values, acc[2][x]);
      acc[3][x] = hn::MulAdd(w3, values, acc[3][x]);
    }
  }
  for (size_t i = 0; i < 4; ++i) {
    for (size_t x = 0; x < kVecs; ++x) hn::StoreU(acc[i][x], d, out + i * out_stride + c0 + x * N);
  }
#endif
}

template <RowKind kKind>
HWY_INLINE void FewQueryValuesOf(const HeadRows& v, size_t j0, size_t lo, size_t hi,
                                 const float* HWY_RESTRICT w, size_t dim, float* HWY_RESTRICT out,
                                 size_t out_stride) {
  constexpr bool kScaled = kKind == RowKind::kE4M3 || kKind == RowKind::kE4M3NoNaN ||
                          kKind == RowKind::kE5M2 || kKind == RowKind::kInt8;
  // A NaN-free e4m3 row is read at 2^-8 of its values, the 2^8 joining the token scale.
  constexpr float kUnit = kKind == RowKind::kE4M3NoNaN ? 256.0f : 1.0f;
  FewQueryKeys keys;
  keys.n = hi - lo;
  for (size_t j = 0; j < keys.n; ++j) {
    const size_t t = j0 + lo + j;
    keys.rows[j] = RowAddress(v, t);
    const float unit = kScaled ? v.scale(t) * kUnit : 1.0f;
    for (size_t i = 0; i < kFewQueries; ++i) {
      keys.weights[j * kFewQueries + i] = w[(lo + j) * kTileQ + i] * unit;
    }
  }
  const size_t N = hn::Lanes(hn::ScalableTag<float>());
  constexpr size_t kVecs = FewQueryValueVectors();
  size_t c0 = 0;
  for (; c0 + kVecs * N <= dim; c0 += kVecs * N) {
    FewQueryValuesPass<kKind, kVecs>(keys, c0, out, out_stride);
  }
  for (; c0 < dim; c0 += N) FewQueryValuesPass<kKind, 1>(keys, c0, out, out_stride);
}

// The decode tile's P V: 4 rows of `out` (out_stride apart; rows past the tile's are scratch)
// += the weights of keys [j0 + lo, j0 + hi) times their V rows. A weight outside a row's
// visible keys is 0 already (every transform's), so the 4 rows share the loop.
HWY_INLINE void FewQueryValues(const HeadRows& v, size_t j0, size_t lo, size_t hi,
                               const float* HWY_RESTRICT w, size_t dim, float* HWY_RESTRICT out,
                               size_t out_stride) {
  // A direct switch: a generic lambda here has left the products out of line (slower).
  switch (KindOf(v)) {
    case RowKind::kBf16:
      return FewQueryValuesOf<RowKind::kBf16>(v, j0, lo, hi, w, dim, out, out_stride);
    case RowKind::kFp16:
      return FewQueryValuesOf<RowKind::kFp16>(v, j0, lo, hi, w, dim, out, out_stride);
    case RowKind::kE4M3:
      return FewQueryValuesOf<RowKind::kE4M3>(v, j0, lo, hi, w, dim, out, out_stride);
    case RowKind::kE4M3NoNaN:
      return FewQueryValuesOf<RowKind::kE4M3NoNaN>(v, j0, lo, hi, w, dim, out, out_stride);
    case RowKind::kE5M2:
      return FewQueryValuesOf<RowKind::kE5M2>(v, j0, lo, hi, w, dim, out, out_stride);
    case RowKind::kInt8:
      return FewQueryValuesOf<RowKind::kInt8>(v, j0, lo, hi, w, dim, out, out_stride);
    case RowKind::kE4M3Over256: break;  // never a row's kind (KindOf)
    case RowKind::kFloat: break;
  }
  FewQueryValuesOf<RowKind::kFloat>(v, j0, lo, hi, w, dim, out, out_stride);
}

// ---- a KvCache's int8 V under pfold: P V on u8 x s8 dot products ------------------------------
// docs/math.md §4.3: with V's token scales folded into P's int8 codes (FoldTokenScales), row
// i's P V is (S_i / 127) sum_j code_ij v_j's codes: exact int32 sums, 4 keys a vpdpbusd, where
// FewQueryValues spends a convert and 4 FMAs per 16 channels a key. V's rows stay as the cache
// holds them (one token's codes a row); each group of 4 rows is interleaved into key quads in
// registers, 8 unpacks a 64-channel step.

#if LPATTN_AVX512_TARGET
#define LPATTN_TOKEN_QUAD_ATTR __attribute__((target(HWY_TARGET_STR ",avx512vnni")))

// Row i's 4 sum vectors over 64 channels, whose lane k of block L holds channel 16 L + 4 m + k
// (the unpacks' order), put back in channel order and added to out as sum * unit.
LPATTN_TOKEN_QUAD_ATTR HWY_INLINE void StoreQuadSums(const __m512i (&sums)[4], float unit,
                                                   float* HWY_RESTRICT out) {
  // Blocks (imm's 2-bit fields) of a and b; the masked form, as the unmasked one's undefined
  // source trips GCC 12's -Wmaybe-uninitialized.
  const auto blocks = [](__m512i a, __m512i b, auto imm) HWY_ATTR {
    return _mm512_mask_shuffle_i32x4(a, __mmask16(0xFFFF), a, b, decltype(imm)::value);
  };
  using Low = std::integral_constant<int, 0x44>;   // blocks 0, 1 of a, then of b
  using High = std::integral_constant<int, 0xEE>;  // blocks 2, 3 of a, then of b
  using Even = std::integral_constant<int, 0x88>;  // blocks 0, 2 of a, then of b
  using Odd = std::integral_constant<int, 0xDD>;   // blocks 1, 3 of a, then of b
  const __m512i x0 = blocks(sums[0], sums[1], Low()), x1 = blocks(sums[0], sums[1], High());
  const __m512i x2 = blocks(sums[2], sums[3], Low()), x3 = blocks(sums[2], sums[3], High());
  const __m512i in_order[4] = {blocks(x0, x2, Even()), blocks(x0, x2, Odd()),
                               blocks(x1, x3, Even()), blocks(x1, x3, Odd())};
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const auto scale = hn::Set(df, unit);
  for (size_t m = 0; m < 4; ++m) {
    float* o = out + 16 * m;
    const auto sum = hn::ConvertTo(df, hn::Vec<decltype(di)>{in_order[m]});
    hn::StoreU(hn::MulAdd(sum, scale, hn::LoadU(df, o)), df, o);
  }
}

// acc + the u8 x s8 quad sums of u8 and s8, in inline assembly: GCC 12 compiled
// _mm512_dpbusd_epi32 on TokenQuadPass's accumulator array as a register copy and a vpdpbusd
// into the copy, and spilled accumulators to the stack (docs/performance.md §4.20).
LPATTN_TOKEN_QUAD_ATTR HWY_INLINE __m512i AccumulateQuads(__m512i acc, __m512i u8, __m512i s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
  return acc;
}

// Rows i0 and i0 + 1 of out over channels [c0, c0 + 64 kHalves) += (S_i p_scale) times the
// exact sums of the tile's codes (4 g rows of V at rows[4 g .. 4 g + 3], P's quads of row i
// at words[g kTileQ + i]). Each V row's lines are read together: a pass of 64 channels over
// all 4 rows of P read every row's second line only after the tile's first ones, which the
// hardware's streams did not ask for (1.1-1.3x the step's time at 32768 keys,
// docs/performance.md §4.20).
template <size_t kHalves>
LPATTN_TOKEN_QUAD_ATTR HWY_INLINE void TokenQuadPass(const int8_t* const* rows, size_t groups,
                                                     const int32_t* HWY_RESTRICT words,
                                                     size_t i0, size_t c0,
                                                     const float* HWY_RESTRICT units,
                                                     float p_scale, float* HWY_RESTRICT out,
                                                     size_t out_stride) {
  __m512i acc[2][kHalves][4];  // [row][half][quads]
  for (auto& row : acc) {
    for (auto& half : row) {
      for (__m512i& a : half) a = _mm512_setzero_si512();
    }
  }
  for (size_t g = 0; g < groups; ++g) {
    const int8_t* const* r = rows + 4 * g;
    const __m512i codes0 = _mm512_set1_epi32(words[g * kTileQ + i0]);
    const __m512i codes1 = _mm512_set1_epi32(words[g * kTileQ + i0 + 1]);
    for (size_t h = 0; h < kHalves; ++h) {
      const size_t c = c0 + 64 * h;
      const __m512i r0 = _mm512_loadu_si512(r[0] + c), r1 = _mm512_loadu_si512(r[1] + c);
      const __m512i r2 = _mm512_loadu_si512(r[2] + c), r3 = _mm512_loadu_si512(r[3] + c);
      const __m512i t0 = _mm512_unpacklo_epi8(r0, r1), t1 = _mm512_unpackhi_epi8(r0, r1);
      const __m512i t2 = _mm512_unpacklo_epi8(r2, r3), t3 = _mm512_unpackhi_epi8(r2, r3);
      // Quads of the 4 keys: channel 16 L + 4 m + k at lane k of block L of quads[m].
      const __m512i quads[4] = {_mm512_unpacklo_epi16(t0, t2), _mm512_unpackhi_epi16(t0, t2),
                                _mm512_unpacklo_epi16(t1, t3), _mm512_unpackhi_epi16(t1, t3)};
      for (size_t m = 0; m < 4; ++m) {
        acc[0][h][m] = AccumulateQuads(acc[0][h][m], codes0, quads[m]);
        acc[1][h][m] = AccumulateQuads(acc[1][h][m], codes1, quads[m]);
      }
    }
  }
  for (size_t i = 0; i < 2; ++i) {
    for (size_t h = 0; h < kHalves; ++h) {
      StoreQuadSums(acc[i][h], units[i0 + i] * p_scale,
                    out + (i0 + i) * out_stride + c0 + 64 * h);
    }
  }
}

// out[i][c] += (S_i p_scale) sum_j code(w_ij) v_j[c] for the rows i < nq of a decode tile
// (out_stride apart) and keys [j0 + lo, j0 + hi) of an int8 V, dim a multiple of 64; w the
// folded weights (FoldTokenScales), coded through p_scale as RoundWeights codes them,
// units[i] = S_i; words: scratch of at least kTileK / 4 * kTileQ words. Rows come in pairs:
// an odd nq computes one scratch row (out has kFewQueries rows).
inline LPATTN_TOKEN_QUAD_ATTR void FewQueryTokenQuadValues(
    const HeadRows& v, size_t j0, size_t lo, size_t hi, const float* HWY_RESTRICT w, size_t nq,
    size_t dim, float p_scale, const float* HWY_RESTRICT units, int32_t* HWY_RESTRICT words,
    float* HWY_RESTRICT out, size_t out_stride) {
  const size_t n = hi - lo, groups = (n + 3) / 4;
  PackWeightCodes<4>(w + lo * kTileQ, n, groups, kFewQueries, p_scale, words, kTileQ,
                     kFewQueries);
  const int8_t* rows[kTileK + 3];
  for (size_t j = 0; j < n; ++j) {
    rows[j] = static_cast<const int8_t*>(RowAddress(v, j0 + lo + j));
  }
  for (size_t j = n; j < 4 * groups; ++j) rows[j] = rows[n - 1];  // codes 0 weigh them
  for (size_t i0 = 0; i0 < nq; i0 += 2) {  // the second pair rereads the tile from L1
    size_t c0 = 0;
    for (; c0 + 128 <= dim; c0 += 128) {
      TokenQuadPass<2>(rows, groups, words, i0, c0, units, p_scale, out, out_stride);
    }
    if (c0 < dim) TokenQuadPass<1>(rows, groups, words, i0, c0, units, p_scale, out, out_stride);
  }
}
#undef LPATTN_TOKEN_QUAD_ATTR
#endif  // LPATTN_AVX512_TARGET

// A decode tile's P V under pfold (weights folded, units[i] = S_i) on FewQueryTokenQuadValues
// where this target and the CPU have it: false where it did not run.
HWY_INLINE bool FewQueryTokenValues(const AttentionProblem& p, const HeadRows& v, size_t nq,
                                    size_t j0, const uint32_t* begin, const uint32_t* end,
                                    const float* w, const float* units, float* out,
                                    size_t out_stride, int32_t* words) {
#if LPATTN_AVX512_TARGET
  if (p.dim % 64 == 0 && TakesFewQueryValues(p, nq, begin, end) && begin[0] < end[0] &&
      native::NativePathEnabled(native::NativePath::kAvx512Vnni)) {
    FewQueryTokenQuadValues(v, j0, begin[0], end[0], w, nq, p.dim, p.p_scale, units, words, out,
                            out_stride);
    return true;
  }
#else
  (void)p, (void)v, (void)nq, (void)j0, (void)begin, (void)end, (void)w, (void)units;
  (void)out, (void)out_stride, (void)words;
#endif
  return false;
}

// ---- the int8 path's P V (IntPv) for a decode tile --------------------------------------------
// The int16 pair tile regroups each key tile's V quads into pairs in scratch and reads them
// back. Widened as they lie instead, a quad row's codes are, per channel, 4 keys' int16 codes
// in a row; pmaddwd against a row's 4 weight codes (repeated along the vector) leaves each
// channel's two pair sums in adjacent lanes, added once per key tile. The same exact int32
// sums as the tile's, scaled by its expression: bit-identical outputs.

// Whether a decode tile's int8 P V takes FewQueryIntValues: at most 4 rows, V in quads not read
// by the u8 x s8 tile, a head dimension of whole vectors.
HWY_INLINE bool TakesFewQueryIntValues(const AttentionProblem& p, size_t nq) {
  const hn::ScalableTag<int32_t> d32;
  if (nq > kFewQueries || p.int_pv.v_quads == nullptr || p.dim % hn::Lanes(d32) != 0) {
    return false;
  }
#if LPATTN_X86_VNNI_TARGET
  if (native::NativePathEnabled(kQuadPath)) return false;
#endif
  return true;
}

#if HWY_TARGET == HWY_AVX2
// FewQueryIntValues on AVX2's byte products (ByteQuadSums): P's codes as byte quads, a row's 4
// codes broadcast as one word against 8 channels' quads of V, the 4 products of each channel
// summed into its int32 lane in two multiplies where the int16 pairs take two for 8 channels'
// pairs of keys, and widen V first (88 instructions a key for 4 rows, against about 66). The same
// exact sums, scaled alike: bit-identical outputs.
HWY_INLINE void FewQueryByteValues(const AttentionProblem& p, size_t slice, size_t j0, size_t nk,
                                   size_t columns, const float* weights, float* out,
                                   size_t padded_dim, TileWorkspace& ws) {
  const hn::ScalableTag<int32_t> d32;
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(d32);
  const size_t quads = (nk + 3) / 4;
  PackWeightCodes<4>(weights, nk, quads, columns, p.p_scale, ws.weight_pairs, kTileQ,
                        kFewQueries);
  const IntPv& v = p.int_pv;
  const int8_t* tile = v.v_quads + (slice * v.key_quads + j0 / 4) * v.width * 4;
  const auto p_scale = hn::Set(df, p.p_scale);
  for (size_t c0 = 0; c0 < padded_dim; c0 += 2 * N) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    __m256i b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (size_t g = 0; g < quads; ++g) {
      const int8_t* quad = tile + (g * v.width + c0) * 4;
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quad));
      const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quad + 4 * N));
      const int32_t* w = ws.weight_pairs + g * kTileQ;
      const __m256i w0 = _mm256_set1_epi32(w[0]), w1 = _mm256_set1_epi32(w[1]);
      const __m256i w2 = _mm256_set1_epi32(w[2]), w3 = _mm256_set1_epi32(w[3]);
      a0 = _mm256_add_epi32(a0, ByteQuadSums(w0, x));
      b0 = _mm256_add_epi32(b0, ByteQuadSums(w0, y));
      a1 = _mm256_add_epi32(a1, ByteQuadSums(w1, x));
      b1 = _mm256_add_epi32(b1, ByteQuadSums(w1, y));
      a2 = _mm256_add_epi32(a2, ByteQuadSums(w2, x));
      b2 = _mm256_add_epi32(b2, ByteQuadSums(w2, y));
      a3 = _mm256_add_epi32(a3, ByteQuadSums(w3, x));
      b3 = _mm256_add_epi32(b3, ByteQuadSums(w3, y));
    }
    // IntMatMul<true>'s epilogue: float(sum) (p_scale v_scale) + out.
    const auto scales_a = hn::Mul(p_scale, hn::LoadU(df, ws.value_scale + c0));
    const auto scales_b = hn::Mul(p_scale, hn::LoadU(df, ws.value_scale + c0 + N));
    const auto store = [&](size_t i, __m256i sums_a, __m256i sums_b) HWY_ATTR {
      float* o = out + i * padded_dim + c0;
      hn::StoreU(hn::MulAdd(hn::ConvertTo(df, hn::Vec<decltype(d32)>{sums_a}), scales_a,
                            hn::LoadU(df, o)), df, o);
      hn::StoreU(hn::MulAdd(hn::ConvertTo(df, hn::Vec<decltype(d32)>{sums_b}), scales_b,
                            hn::LoadU(df, o + N)), df, o + N);
    };
    store(0, a0, b0);
    store(1, a1, b1);
    store(2, a2, b2);
    store(3, a3, b3);
  }
}
#endif

// out[i][c] += (p_scale v_scale[c]) sum_j code(w_ji) v_j[c] for the 4 rows i of a decode tile
// (rows past nq are scratch) and keys [j0, j0 + nk), j0 a multiple of 4; weights key-major,
// `columns` wide, coded as IntWeightsTimesValues codes them.
HWY_INLINE void FewQueryIntValues(const AttentionProblem& p, size_t b, size_t kv_head, size_t j0,
                                  size_t nk, size_t columns, const float* weights, float* out,
                                  size_t padded_dim, TileWorkspace& ws) {
  const hn::ScalableTag<int16_t> d16;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const hn::Repartition<uint64_t, decltype(d16)> d64;
  const hn::ScalableTag<float> df;
  const size_t N16 = hn::Lanes(d16), N32 = hn::Lanes(d32);
  const size_t slice = b * p.kv_heads + kv_head, quads = (nk + 3) / 4;
  SetValueScales(p, slice, padded_dim, ws);
#if HWY_TARGET == HWY_AVX2
  if (padded_dim % (2 * N32) == 0) {
    return FewQueryByteValues(p, slice, j0, nk, columns, weights, out, padded_dim, ws);
  }
#endif
  PackWeightCodes<2>(weights, nk, 2 * quads, columns, p.p_scale, ws.weight_pairs, kTileQ,
                        kFewQueries);
  // Row i's codes of quad g's 4 keys, as one word to repeat along a vector.
  HWY_ALIGN uint64_t codes[kTileK / 4 * kFewQueries];
  for (size_t g = 0; g < quads; ++g) {
    for (size_t i = 0; i < kFewQueries; ++i) {
      codes[g * kFewQueries + i] = uint32_t(ws.weight_pairs[2 * g * kTileQ + i]) |
                                   uint64_t(uint32_t(ws.weight_pairs[(2 * g + 1) * kTileQ + i])) << 32;
    }
  }
  const IntPv& v = p.int_pv;
  const int8_t* tile = v.v_quads + (slice * v.key_quads + j0 / 4) * v.width * 4;
  const auto p_scale = hn::Set(df, p.p_scale);
  for (size_t c0 = 0; c0 < padded_dim; c0 += N32) {  // two vectors of quads: N32 channels
    // Odd-pair accumulators (unused where pmaddwd adds each pair itself).
    auto a0 = hn::Zero(d32), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    auto oa0 = a0, oa1 = a0, oa2 = a0, oa3 = a0, ob0 = a0, ob1 = a0, ob2 = a0, ob3 = a0;
    for (size_t g = 0; g < quads; ++g) {
      const int8_t* quad = tile + (g * v.width + c0) * 4;
      const uint64_t* w = codes + g * kFewQueries;
      PairProducts2x4(d32, hn::PromoteTo(d16, hn::LoadU(d8, quad)),
                      hn::PromoteTo(d16, hn::LoadU(d8, quad + N16)),
                      hn::BitCast(d16, hn::Set(d64, w[0])), hn::BitCast(d16, hn::Set(d64, w[1])),
                      hn::BitCast(d16, hn::Set(d64, w[2])), hn::BitCast(d16, hn::Set(d64, w[3])),
                      a0, a1, a2, a3, b0, b1, b2, b3, oa0, oa1, oa2, oa3, ob0, ob1, ob2, ob3);
    }
    // IntMatMul<true>'s epilogue on channels [c0, c0 + N32): each channel's two pair sums
    // added, float(sum) (p_scale v_scale) + out.
    const auto scales = hn::Mul(p_scale, hn::LoadU(df, ws.value_scale + c0));
    const auto store = [&](size_t i, hn::Vec<decltype(d32)> lo, hn::Vec<decltype(d32)> hi)
                           HWY_ATTR {
      const auto sums = hn::Add(hn::ConcatEven(d32, hi, lo), hn::ConcatOdd(d32, hi, lo));
      float* o = out + i * padded_dim + c0;
      hn::StoreU(hn::MulAdd(hn::ConvertTo(df, sums), scales, hn::LoadU(df, o)), df, o);
    };
    store(0, hn::RearrangeToOddPlusEven(a0, oa0), hn::RearrangeToOddPlusEven(b0, ob0));
    store(1, hn::RearrangeToOddPlusEven(a1, oa1), hn::RearrangeToOddPlusEven(b1, ob1));
    store(2, hn::RearrangeToOddPlusEven(a2, oa2), hn::RearrangeToOddPlusEven(b2, ob2));
    store(3, hn::RearrangeToOddPlusEven(a3, oa3), hn::RearrangeToOddPlusEven(b3, ob3));
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
