// The integer products of the native int8 path (docs/math.md §4.1: int8 Q K^T, and P V with
// int8 P and V), e.g. S^T = diag(row_scale) (K Q^T) diag(col_scale), the exact integer sums
// scaled once at the end. Two tiles:
// - int16 pairs (IntMatMul): codes widened to int16, the 16-bit products of each pair of
//   channels summed into int32 (x86's pmaddwd: twice the multiply-accumulates of an fp32 FMA
//   per instruction; in the AVX3 code with avx512_vnni enabled, vpdpwssd fuses it with the
//   add). A left row is `pairs` int32 words, each the int16 codes (k[2p], k[2p + 1]); the right
//   panel holds, for pair p, `width` columns' interleaved int16 pairs (q_i[2p], q_i[2p + 1]).
// - u8 x s8 quads (QuadMatMul, below): vpdpbusd on the bytes themselves.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_NATIVE_INT_MATMUL_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_NATIVE_INT_MATMUL_TILE_INL_H_
#undef LPATTN_KERNELS_NATIVE_INT_MATMUL_TILE_INL_H_
#else
#define LPATTN_KERNELS_NATIVE_INT_MATMUL_TILE_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>

#include "hwy/highway.h"
#include "kernels/native/x86_targets.h"
#if LPATTN_X86_VNNI_TARGET
#include <immintrin.h>
#endif
#include "kernels/native/native_paths.h"
#include "kernels/skeleton/lane_sums-inl.h"
#include "kernels/skeleton/matmul_tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

struct PairRows {            // the left operand: rows of pairs, element (r, k) at
  const int32_t* data;       // data[r * row_stride + k * inner_stride]
  size_t row_stride;
  size_t inner_stride;
  const float* row_scale;    // per row
};
struct PairPanel {           // the right operand: [pairs][width] interleaved int16 pairs
  const int16_t* data;
  size_t width;
  const float* col_scale;    // per column
};

#if HWY_HAVE_SCALABLE
// The pair tile for sizeless vectors (SVE), which no array holds (docs/design.md §11): as
// MatMul's MicroTileNamed, up to 6 x 2 output vectors (each two accumulators, even and odd
// pairs) as named locals, B's two vectors loaded once a step for all rows. The same exact
// integer sums as the fixed-size tile below, scaled by the same expression.
#define LPATTN_INT_TILE_ROW(r)                                                               \
  V32 acc_##r##_0 = hn::Zero(d32), odd_##r##_0 = hn::Zero(d32);                              \
  V32 acc_##r##_1 = hn::Zero(d32), odd_##r##_1 = hn::Zero(d32);
#define LPATTN_INT_TILE_STEP(r)                                                              \
  if constexpr (r < kRows) {                                                                 \
    const auto av = hn::BitCast(d16, hn::Set(d32, a_ptr[r * a.row_stride]));                 \
    acc_##r##_0 = hn::ReorderWidenMulAccumulate(d32, av, b0, acc_##r##_0, odd_##r##_0);      \
    if constexpr (kVecs > 1) {                                                               \
      acc_##r##_1 = hn::ReorderWidenMulAccumulate(d32, av, b1, acc_##r##_1, odd_##r##_1);    \
    }                                                                                        \
  }
#define LPATTN_INT_TILE_STORE(r)                                                             \
  if constexpr (r < kRows) {                                                                 \
    StoreScaled(r, 0, acc_##r##_0, odd_##r##_0);                                             \
    if constexpr (kVecs > 1) StoreScaled(r, 1, acc_##r##_1, odd_##r##_1);                    \
  }
template <size_t kRows, size_t kVecs, bool kAccumulate, class D32>
HWY_INLINE void IntMicroTileNamed(D32 d32, size_t N, const PairRows& a, size_t r0,
                                  const PairPanel& b, size_t c0, const OutView& c, size_t pairs) {
  static_assert(kRows <= 6 && kVecs <= 2, "named accumulators for up to 6 x 2");
  const hn::Repartition<int16_t, D32> d16;
  const hn::Rebind<float, D32> df;
  using V32 = hn::Vec<D32>;
  LPATTN_EACH_TILE_ROW(LPATTN_INT_TILE_ROW)
  const int32_t* a_ptr = a.data + r0 * a.row_stride;
  const int16_t* b_ptr = b.data + 2 * c0;
  for (size_t k = 0; k < pairs; ++k) {
    const auto b0 = hn::LoadU(d16, b_ptr);
    const auto b1 = kVecs > 1 ? hn::LoadU(d16, b_ptr + 2 * N) : b0;
    LPATTN_EACH_TILE_ROW(LPATTN_INT_TILE_STEP)
    a_ptr += a.inner_stride;
    b_ptr += 2 * b.width;
  }
  const auto StoreScaled = [&](size_t r, size_t v, V32 acc, V32 odd) HWY_ATTR {
    float* out = c.data + (r0 + r) * c.row_stride + c0 + v * N;
    const auto sums = hn::ConvertTo(df, hn::RearrangeToOddPlusEven(acc, odd));
    const auto scales = hn::Mul(hn::Set(df, a.row_scale[r0 + r]),
                                hn::LoadU(df, b.col_scale + c0 + v * N));
    const auto prior = kAccumulate ? hn::LoadU(df, out) : hn::Zero(df);
    hn::StoreU(hn::MulAdd(sums, scales, prior), df, out);
  };
  LPATTN_EACH_TILE_ROW(LPATTN_INT_TILE_STORE)
}
#undef LPATTN_INT_TILE_ROW
#undef LPATTN_INT_TILE_STEP
#undef LPATTN_INT_TILE_STORE
#endif

// C[r0 + r][c0 : c0 + kVecs * N] (+)= row_scale * col_scale * sum over pairs, for kRows rows.
template <size_t kRows, size_t kVecs, bool kAccumulate>
HWY_INLINE void IntMicroTile(const PairRows& a, size_t r0, const PairPanel& b, size_t c0,
                             const OutView& c, size_t pairs) {
  const hn::ScalableTag<int32_t> d32;
  const size_t N = hn::Lanes(d32);
#if HWY_HAVE_SCALABLE
  IntMicroTileNamed<kRows, kVecs, kAccumulate>(d32, N, a, r0, b, c0, c, pairs);
#else
  const hn::Repartition<int16_t, decltype(d32)> d16;
  const hn::Rebind<float, decltype(d32)> df;
  using V32 = hn::Vec<decltype(d32)>;
  V32 acc[kRows][kVecs], odd[kRows][kVecs];
#pragma GCC unroll 8
  for (size_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (size_t v = 0; v < kVecs; ++v) acc[r][v] = odd[r][v] = hn::Zero(d32);
  }
  const int32_t* a_ptr = a.data + r0 * a.row_stride;
  const int16_t* b_ptr = b.data + 2 * c0;
  for (size_t k = 0; k < pairs; ++k) {
    hn::Vec<decltype(d16)> bv[kVecs];
#pragma GCC unroll 4
    for (size_t v = 0; v < kVecs; ++v) bv[v] = hn::LoadU(d16, b_ptr + 2 * v * N);
#pragma GCC unroll 8
    for (size_t r = 0; r < kRows; ++r) {
      const auto av = hn::BitCast(d16, hn::Set(d32, a_ptr[r * a.row_stride]));
#pragma GCC unroll 4
      for (size_t v = 0; v < kVecs; ++v) {
        acc[r][v] = hn::ReorderWidenMulAccumulate(d32, av, bv[v], acc[r][v], odd[r][v]);
      }
    }
    a_ptr += a.inner_stride;
    b_ptr += 2 * b.width;
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < kRows; ++r) {
    const auto row_scale = hn::Set(df, a.row_scale[r0 + r]);
    float* c_row = c.data + (r0 + r) * c.row_stride + c0;
#pragma GCC unroll 4
    for (size_t v = 0; v < kVecs; ++v) {
      const auto sums = hn::ConvertTo(df, hn::RearrangeToOddPlusEven(acc[r][v], odd[r][v]));
      const auto scales = hn::Mul(row_scale, hn::LoadU(df, b.col_scale + c0 + v * N));
      const auto prior = kAccumulate ? hn::LoadU(df, c_row + v * N) : hn::Zero(df);
      hn::StoreU(hn::MulAdd(sums, scales, prior), df, c_row + v * N);
    }
  }
#endif
}

#if LPATTN_AVX512_TARGET
// The same tile with AVX-512 VNNI's vpdpwssd, which fuses pmaddwd and the add: twice the
// multiply-accumulates of an fp32 FMA per instruction. Highway 1.0.3 does not expose it (its
// AVX3_DL target is opt-in and its ReorderWidenMulAccumulate uses pmaddwd), so AVX3 code
// checks the CPU once and takes this tile where it can.
// (GCC 12's own _mm512_cvtepi32_ps trips -Wuninitialized on its _mm512_undefined_ps.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
template <size_t kRows, size_t kVecs, bool kAccumulate>
__attribute__((target("avx512f,avx512vnni"))) void IntMicroTileVnni(
    const PairRows& a, size_t r0, const PairPanel& b, size_t c0, const OutView& c,
    size_t pairs) {
  constexpr size_t N = 16;  // int32 lanes of a 512-bit vector
  __m512i acc[kRows][kVecs];
#pragma GCC unroll 8
  for (size_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (size_t v = 0; v < kVecs; ++v) acc[r][v] = _mm512_setzero_si512();
  }
  const int32_t* a_ptr = a.data + r0 * a.row_stride;
  const int16_t* b_ptr = b.data + 2 * c0;
  for (size_t k = 0; k < pairs; ++k) {
    __m512i bv[kVecs];
#pragma GCC unroll 4
    for (size_t v = 0; v < kVecs; ++v) bv[v] = _mm512_loadu_si512(b_ptr + 2 * v * N);
#pragma GCC unroll 8
    for (size_t r = 0; r < kRows; ++r) {
      const __m512i av = _mm512_set1_epi32(a_ptr[r * a.row_stride]);
#pragma GCC unroll 4
      for (size_t v = 0; v < kVecs; ++v) acc[r][v] = _mm512_dpwssd_epi32(acc[r][v], av, bv[v]);
    }
    a_ptr += a.inner_stride;
    b_ptr += 2 * b.width;
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < kRows; ++r) {
    const __m512 row_scale = _mm512_set1_ps(a.row_scale[r0 + r]);
    float* c_row = c.data + (r0 + r) * c.row_stride + c0;
#pragma GCC unroll 4
    for (size_t v = 0; v < kVecs; ++v) {
      const __m512 scales = _mm512_mul_ps(row_scale, _mm512_loadu_ps(b.col_scale + c0 + v * N));
      const __m512 prior = kAccumulate ? _mm512_loadu_ps(c_row + v * N) : _mm512_setzero_ps();
      _mm512_storeu_ps(c_row + v * N,
                       _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][v]), scales, prior));
    }
  }
}

#pragma GCC diagnostic pop

#endif  // LPATTN_AVX512_TARGET

#if HWY_TARGET == HWY_AVX2
// Four u8 x s8 byte products summed into each int32 lane without VNNI: vpmaddubsw adds each
// pair of products into int16 and vpmaddwd against ones adds the pairs into int32. As
// vpdpbusd's sums exactly while no pair exceeds int16, which holds for int8 codes of P (0 to
// 127) against codes of V (-127 to 127): 2 x 127 x 127 = 32258.
HWY_INLINE __m256i ByteQuadSums(__m256i u8, __m256i s8) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u8, s8), _mm256_set1_epi16(1));
}
#endif

// ---- u8 x s8 products (vpdpbusd) -------------------------------------------------------------
// Four byte products summed into each int32 lane, four times an fp32 FMA's multiply-
// accumulates: AVX-512 VNNI on the AVX3 target's 512-bit vectors, AVX-VNNI (VEX-encoded) on
// the AVX2 target's 256-bit ones, each taken when its family is enabled. The left operand's
// element (r, k) is a word of four codes, broadcast; the right operand is a panel of quads, quad
// k of column i at data[(k * width + i) * 4 .. + 3]. One side is unsigned: the panel with
// kUnsignedRows false (a signed q entering as q + 128, its bits xor 0x80, the sums corrected by
// -128 * row_sum), else the rows (P's int8 codes, never negative).
#if LPATTN_X86_VNNI_TARGET  // callers test the same condition
#if LPATTN_AVX512_TARGET
#define LPATTN_QUAD_ATTR __attribute__((target(HWY_TARGET_STR ",avx512vnni")))
inline constexpr native::NativePath kQuadPath = native::NativePath::kAvx512Vnni;
LPATTN_QUAD_ATTR HWY_INLINE __m512i QuadDot(__m512i acc, __m512i u8, __m512i s8) {
  return _mm512_dpbusd_epi32(acc, u8, s8);
}
#else
#define LPATTN_QUAD_ATTR __attribute__((target(HWY_TARGET_STR ",avxvnni")))
inline constexpr native::NativePath kQuadPath = native::NativePath::kAvxVnni;
LPATTN_QUAD_ATTR HWY_INLINE __m256i QuadDot(__m256i acc, __m256i u8, __m256i s8) {
  return _mm256_dpbusd_avx_epi32(acc, u8, s8);
}
#endif

struct QuadRows {
  const int8_t* data;        // word (r, k) at data + 4 * (r * row_stride + k * inner_stride)
  size_t row_stride, inner_stride;
  const int32_t* row_sums;   // per row: the sum of its codes (a biased panel), else null
  const float* row_scale;
};
struct QuadPanel {
  const int8_t* data;        // [quads][width][4]
  size_t width;
  const float* col_scale;
};

// C[r0 + r][c0 : c0 + kVecs * N] (+)= row_scale * col_scale * sum over quads, for kRows rows:
// the same expression as IntMicroTile's, so the two agree bit for bit on the same codes.
template <size_t kRows, size_t kVecs, bool kUnsignedRows, bool kAccumulate>
LPATTN_QUAD_ATTR void QuadMicroTile(const QuadRows& a, size_t r0, const QuadPanel& b, size_t c0,
                                    const OutView& c, size_t quads) {
  const hn::ScalableTag<int32_t> d32;
  const hn::Rebind<float, decltype(d32)> df;
  using V = hn::Vec<decltype(d32)>;
  const size_t N = hn::Lanes(d32);
  V acc[kRows][kVecs];
#pragma GCC unroll 8
  for (size_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (size_t v = 0; v < kVecs; ++v) acc[r][v] = hn::Zero(d32);
  }
  const int8_t* a_ptr = a.data + 4 * r0 * a.row_stride;
  const int8_t* b_ptr = b.data + 4 * c0;
  for (size_t k = 0; k < quads; ++k) {
    V bv[kVecs];
#pragma GCC unroll 4
    for (size_t v = 0; v < kVecs; ++v) {
      bv[v] = hn::LoadU(d32, reinterpret_cast<const int32_t*>(b_ptr + 4 * v * N));
    }
#pragma GCC unroll 8
    for (size_t r = 0; r < kRows; ++r) {
      int32_t word;
      __builtin_memcpy(&word, a_ptr + 4 * r * a.row_stride, 4);
      const V av = hn::Set(d32, word);
#pragma GCC unroll 4
      for (size_t v = 0; v < kVecs; ++v) {
        acc[r][v] = V{kUnsignedRows ? QuadDot(acc[r][v].raw, av.raw, bv[v].raw)
                                    : QuadDot(acc[r][v].raw, bv[v].raw, av.raw)};
      }
    }
    a_ptr += 4 * a.inner_stride;
    b_ptr += 4 * b.width;
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < kRows; ++r) {
    const auto row_scale = hn::Set(df, a.row_scale[r0 + r]);
    const auto bias = hn::Set(d32, a.row_sums ? 128 * a.row_sums[r0 + r] : 0);
    float* c_row = c.data + (r0 + r) * c.row_stride + c0;
#pragma GCC unroll 4
    for (size_t v = 0; v < kVecs; ++v) {
      const auto sums = hn::ConvertTo(df, hn::Sub(acc[r][v], bias));
      const auto scales = hn::Mul(row_scale, hn::LoadU(df, b.col_scale + c0 + v * N));
      const auto prior = kAccumulate ? hn::LoadU(df, c_row + v * N) : hn::Zero(df);
      hn::StoreU(hn::MulAdd(sums, scales, prior), df, c_row + v * N);
    }
  }
}

// C (rows x cols) (+)= the scaled u8 x s8 product; cols a multiple of the vector length.
template <bool kUnsignedRows, bool kAccumulate = false>
HWY_INLINE void QuadMatMul(const QuadRows& a, const QuadPanel& b, const OutView& c, size_t rows,
                           size_t cols, size_t quads) {
  const size_t N = hn::Lanes(hn::ScalableTag<int32_t>());
  for (size_t r0 = 0; r0 < rows; r0 += kMicroRows) {
    WithRowCount(std::min(kMicroRows, rows - r0), [&](auto kRows) HWY_ATTR {
      constexpr size_t kR = decltype(kRows)::value;
      size_t c0 = 0;
      for (; c0 + kIntMicroVecs * N <= cols; c0 += kIntMicroVecs * N) {
        QuadMicroTile<kR, kIntMicroVecs, kUnsignedRows, kAccumulate>(a, r0, b, c0, c, quads);
      }
      if (c0 < cols) QuadMicroTile<kR, 1, kUnsignedRows, kAccumulate>(a, r0, b, c0, c, quads);
    });
  }
}
// Key t's 4 scores (QuadMicroTile's epilogue on the 4 queries' sums s0..s3: the code-sum bias
// removed, then the key's scale times each query's), after its row of `columns` lanes is zeroed.
template <class V>
HWY_INLINE void StoreFourQuadScores(V s0, V s1, V s2, V s3, int32_t key_sum, float key_scale,
                                    const float* HWY_RESTRICT col_scale, size_t columns,
                                    float* HWY_RESTRICT row) {
  const hn::ScalableTag<int32_t> d32;
  const hn::ScalableTag<float> df;
  const hn::CappedTag<int32_t, 4> di4;
  const hn::CappedTag<float, 4> d4;
  hn::StoreU(hn::Zero(df), df, row);  // one vector, then the rest (a loop from 0 was a memset call)
  for (size_t i = hn::Lanes(df); i < columns; i += hn::Lanes(df)) {
    hn::StoreU(hn::Zero(df), df, row + i);
  }
  const auto sums = hn::ConvertTo(d4, hn::Sub(SumsOfFour(d32, s0, s1, s2, s3),
                                              hn::Set(di4, 128 * key_sum)));
  const auto scales = hn::Mul(hn::Set(d4, key_scale), hn::LoadU(d4, col_scale));
  hn::StoreU(hn::MulAdd(sums, scales, hn::Zero(d4)), d4, row);
}

// A decode tile's scores: nk keys against at most 4 queries as dot products along the head
// dimension, where QuadMicroTile (queries along the lanes) would fill 4 lanes in 16. Key j's
// s8 codes (rows `stride` rows of dim apart; its code sum and scale `stride` apart too)
// against each query's q + 128 (u8 rows `dim` apart, dim a multiple of the vector's bytes),
// two keys at a time, the same exact int32 sums as the tile's, scaled by its expression: its
// bits. ask(j) as key j is read (the skeleton's rows ahead); key j's row at out + j out_stride.
template <class Ask>
LPATTN_QUAD_ATTR void FewQueryQuadScores(const int8_t* HWY_RESTRICT rows,
                                         const int32_t* HWY_RESTRICT sums,
                                         const float* HWY_RESTRICT scales, size_t nk,
                                         size_t stride, const uint8_t* HWY_RESTRICT q,
                                         size_t dim, const float* HWY_RESTRICT col_scale,
                                         size_t columns, float* HWY_RESTRICT out,
                                         size_t out_stride, const Ask& ask) {
  const hn::ScalableTag<int32_t> d32;
  const hn::Repartition<uint8_t, decltype(d32)> d8;
  using V = hn::Vec<decltype(d32)>;
  const size_t bytes = hn::Lanes(d8);
  for (size_t j = 0; j < nk; j += 2) {
    const bool pair = j + 1 < nk;
    const uint8_t* row0 = reinterpret_cast<const uint8_t*>(rows + j * stride * dim);
    const uint8_t* row1 = pair ? row0 + stride * dim : row0;
    ask(j);
    ask(j + 1);
    V a0 = hn::Zero(d32), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (size_t c = 0; c < dim; c += bytes) {
      const auto k0 = hn::BitCast(d32, hn::LoadU(d8, row0 + c)).raw;
      const auto k1 = hn::BitCast(d32, hn::LoadU(d8, row1 + c)).raw;
      const auto q0 = hn::BitCast(d32, hn::LoadU(d8, q + c)).raw;
      const auto q1 = hn::BitCast(d32, hn::LoadU(d8, q + dim + c)).raw;
      const auto q2 = hn::BitCast(d32, hn::LoadU(d8, q + 2 * dim + c)).raw;
      const auto q3 = hn::BitCast(d32, hn::LoadU(d8, q + 3 * dim + c)).raw;
      a0 = V{QuadDot(a0.raw, q0, k0)}, a1 = V{QuadDot(a1.raw, q1, k0)};
      a2 = V{QuadDot(a2.raw, q2, k0)}, a3 = V{QuadDot(a3.raw, q3, k0)};
      b0 = V{QuadDot(b0.raw, q0, k1)}, b1 = V{QuadDot(b1.raw, q1, k1)};
      b2 = V{QuadDot(b2.raw, q2, k1)}, b3 = V{QuadDot(b3.raw, q3, k1)};
    }
    StoreFourQuadScores(a0, a1, a2, a3, sums[j * stride], scales[j * stride], col_scale,
                        columns, out + j * out_stride);
    if (!pair) break;
    StoreFourQuadScores(b0, b1, b2, b3, sums[(j + 1) * stride], scales[(j + 1) * stride],
                        col_scale, columns, out + (j + 1) * out_stride);
  }
}
#undef LPATTN_QUAD_ATTR
#endif  // LPATTN_X86_VNNI_TARGET

// kRows rows over all `cols` columns (a multiple of the vector length).
template <size_t kRows, bool kAccumulate>
HWY_INLINE void IntRowsAllColumns(const PairRows& a, size_t r0, const PairPanel& b, size_t cols,
                                  const OutView& c, size_t pairs) {
  const size_t N = hn::Lanes(hn::ScalableTag<int32_t>());
#if LPATTN_AVX512_TARGET
  if (native::NativePathEnabled(native::NativePath::kAvx512Vnni)) {
    size_t c0 = 0;
    for (; c0 + kIntMicroVecs * N <= cols; c0 += kIntMicroVecs * N) {
      IntMicroTileVnni<kRows, kIntMicroVecs, kAccumulate>(a, r0, b, c0, c, pairs);
    }
    if (c0 < cols) IntMicroTileVnni<kRows, 1, kAccumulate>(a, r0, b, c0, c, pairs);
    return;
  }
#endif
  size_t c0 = 0;
  for (; c0 + kIntMicroVecs * N <= cols; c0 += kIntMicroVecs * N) {
    IntMicroTile<kRows, kIntMicroVecs, kAccumulate>(a, r0, b, c0, c, pairs);
  }
  if (c0 < cols) IntMicroTile<kRows, 1, kAccumulate>(a, r0, b, c0, c, pairs);
}

// C (rows x cols) (+)= the scaled integer product; cols a multiple of the vector length.
template <bool kAccumulate = false>
HWY_INLINE void IntMatMul(const PairRows& a, const PairPanel& b, const OutView& c, size_t rows,
                          size_t cols, size_t pairs) {
  for (size_t r0 = 0; r0 < rows; r0 += kMicroRows) {
    WithRowCount(std::min(kMicroRows, rows - r0), [&](auto kRows) HWY_ATTR {
      IntRowsAllColumns<decltype(kRows)::value, kAccumulate>(a, r0, b, cols, c, pairs);
    });
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
