// The one matrix-product microkernel of the tiled skeleton: C (+)= A * B on small tiles, where A
// is read through arbitrary strides (a broadcast per element, so transposed operands cost
// nothing) and B is row-major with contiguous rows. Both attention products (scores and P.V)
// and all four backward products are this kernel with different views.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_SKELETON_MATMUL_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_SKELETON_MATMUL_TILE_INL_H_
#undef LPATTN_KERNELS_SKELETON_MATMUL_TILE_INL_H_
#else
#define LPATTN_KERNELS_SKELETON_MATMUL_TILE_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <type_traits>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Element (r, k) of the left operand is data[r * row_stride + k * inner_stride].
struct LhsView {
  const float* data;
  size_t row_stride;
  size_t inner_stride;
};
// Row k of the right operand starts at data + k * row_stride; its columns are contiguous.
struct RhsView {
  const float* data;
  size_t row_stride;
};
struct OutView {
  float* data;
  size_t row_stride;
};

// Register tile: kRows x kVecs vectors of C. With 16 registers, 6 x 2 = 12 accumulators hide
// the FMA latency on two pipes and leave room for the B loads and a broadcast; both tile sizes
// and every head dimension that is a multiple of 16 split into whole 6 x 2 blocks. (On Zen 3
// an 8-accumulator block such as 4 x 2 runs about 30% slower: narrow tails are costly.)
// AVX-512's 32 registers take 6 x 4 = 24: 10 loads (4 of B, 6 broadcasts) per 24 FMAs instead
// of 8 per 12. The integer tiles keep 6 x 2 (the pair tile holds two accumulators an output).
inline constexpr size_t kMicroRows = 6;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
inline constexpr size_t kMicroVecs = 4;
#else
inline constexpr size_t kMicroVecs = 2;
#endif
inline constexpr size_t kIntMicroVecs = 2;

#if HWY_HAVE_SCALABLE
// M(r) for each row r of a kMicroRows-row register tile, for the named tiles below and in
// int_matmul_tile-inl.h.
#undef LPATTN_EACH_TILE_ROW
#define LPATTN_EACH_TILE_ROW(M) M(0) M(1) M(2) M(3) M(4) M(5)

// The register tile for sizeless vectors (SVE), which no array holds (docs/design.md §11): up to
// kMicroRows x 2 accumulators as named locals, acc_r_v for row r and vector v; rows and vectors
// past kRows and kVecs are compiled out. The loads and sums are the fixed-size tile's below, in
// the same order, so both compute the same values.
#define LPATTN_TILE_ROW(r)                                                                   \
  V acc_##r##_0 = hn::Zero(d), acc_##r##_1 = hn::Zero(d);                                    \
  if constexpr (kAccumulate && r < kRows) {                                                  \
    acc_##r##_0 = hn::LoadU(d, c_row + r * c_stride);                                        \
    if constexpr (kVecs > 1) acc_##r##_1 = hn::LoadU(d, c_row + r * c_stride + N);           \
  }
#define LPATTN_TILE_STEP(r)                                                                  \
  if constexpr (r < kRows) {                                                                 \
    const V av = hn::Set(d, a_ptr[r * a.row_stride]);                                        \
    acc_##r##_0 = hn::MulAdd(av, b0, acc_##r##_0);                                           \
    if constexpr (kVecs > 1) acc_##r##_1 = hn::MulAdd(av, b1, acc_##r##_1);                  \
  }
#define LPATTN_TILE_STORE(r)                                                                 \
  if constexpr (r < kRows) {                                                                 \
    hn::StoreU(acc_##r##_0, d, c_row + r * c_stride);                                        \
    if constexpr (kVecs > 1) hn::StoreU(acc_##r##_1, d, c_row + r * c_stride + N);           \
  }
template <size_t kRows, size_t kVecs, bool kAccumulate, class D>
HWY_INLINE void MicroTileNamed(D d, size_t N, const LhsView& a, size_t r0, const RhsView& b,
                               size_t c0, float* c_row, size_t c_stride, size_t k_begin,
                               size_t k_end) {
  static_assert(kRows <= 6 && kVecs <= 2, "named accumulators for up to 6 x 2");
  using V = hn::Vec<D>;
  LPATTN_EACH_TILE_ROW(LPATTN_TILE_ROW)
  const float* a_ptr = a.data + r0 * a.row_stride + k_begin * a.inner_stride;
  const float* b_ptr = b.data + k_begin * b.row_stride + c0;
  for (size_t k = k_begin; k < k_end; ++k) {
    const V b0 = hn::LoadU(d, b_ptr);
    const V b1 = kVecs > 1 ? hn::LoadU(d, b_ptr + N) : b0;
    LPATTN_EACH_TILE_ROW(LPATTN_TILE_STEP)
    a_ptr += a.inner_stride;
    b_ptr += b.row_stride;
  }
  LPATTN_EACH_TILE_ROW(LPATTN_TILE_STORE)
}
#undef LPATTN_TILE_ROW
#undef LPATTN_TILE_STEP
#undef LPATTN_TILE_STORE
#endif

// C[r0 + r][c0 : c0 + kVecs * N] (+)= sum_{k in [k_begin, k_end)} A(r0 + r, k) B[k][...].
template <size_t kRows, size_t kVecs, bool kAccumulate>
HWY_INLINE void MicroTile(const LhsView& a, size_t r0, const RhsView& b, size_t c0,
                          const OutView& c, size_t k_begin, size_t k_end) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  float* c_row = c.data + r0 * c.row_stride + c0;
#if HWY_HAVE_SCALABLE
  if constexpr (kVecs > 2) {
    // Only AVX-512's 4-vector blocks leave 3-vector tails; scalable targets split them.
    MicroTile<kRows, 2, kAccumulate>(a, r0, b, c0, c, k_begin, k_end);
    MicroTile<kRows, kVecs - 2, kAccumulate>(a, r0, b, c0 + 2 * N, c, k_begin, k_end);
  } else {
    MicroTileNamed<kRows, kVecs, kAccumulate>(d, N, a, r0, b, c0, c_row, c.row_stride,
                                              k_begin, k_end);
  }
#else
  using V = hn::Vec<decltype(d)>;
  V acc[kRows][kVecs];
#pragma GCC unroll 8
  for (size_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (size_t v = 0; v < kVecs; ++v) {
      acc[r][v] = kAccumulate ? hn::LoadU(d, c_row + r * c.row_stride + v * N) : hn::Zero(d);
    }
  }
  const float* a_ptr = a.data + r0 * a.row_stride + k_begin * a.inner_stride;
  const float* b_ptr = b.data + k_begin * b.row_stride + c0;
  for (size_t k = k_begin; k < k_end; ++k) {
    V bv[kVecs];
#pragma GCC unroll 4
    for (size_t v = 0; v < kVecs; ++v) bv[v] = hn::LoadU(d, b_ptr + v * N);
#pragma GCC unroll 8
    for (size_t r = 0; r < kRows; ++r) {
      const V av = hn::Set(d, a_ptr[r * a.row_stride]);
#pragma GCC unroll 4
      for (size_t v = 0; v < kVecs; ++v) acc[r][v] = hn::MulAdd(av, bv[v], acc[r][v]);
    }
    a_ptr += a.inner_stride;
    b_ptr += b.row_stride;
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (size_t v = 0; v < kVecs; ++v) hn::StoreU(acc[r][v], d, c_row + r * c.row_stride + v * N);
  }
#endif
}

// kRows rows over all `cols` columns (a multiple of the vector length): whole kMicroVecs
// blocks, then the remaining vectors in one narrower block.
template <size_t kRows, bool kAccumulate>
HWY_INLINE void RowsAllColumns(const LhsView& a, size_t r0, const RhsView& b, size_t cols,
                               const OutView& c, size_t k_begin, size_t k_end) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t c0 = 0;
  for (; c0 + kMicroVecs * N <= cols; c0 += kMicroVecs * N) {
    MicroTile<kRows, kMicroVecs, kAccumulate>(a, r0, b, c0, c, k_begin, k_end);
  }
  switch ((cols - c0) / N) {
    case 3: return MicroTile<kRows, 3, kAccumulate>(a, r0, b, c0, c, k_begin, k_end);
    case 2: return MicroTile<kRows, 2, kAccumulate>(a, r0, b, c0, c, k_begin, k_end);
    case 1: return MicroTile<kRows, 1, kAccumulate>(a, r0, b, c0, c, k_begin, k_end);
    default: return;
  }
}
static_assert(kMicroVecs <= 4, "RowsAllColumns' tail covers up to 3 vectors");

// Calls fn(std::integral_constant<size_t, rows>()) for 1 <= rows <= kMicroRows: a block's row
// count as a compile-time constant for the register tiles.
template <class Fn>
HWY_INLINE void WithRowCount(size_t rows, const Fn& fn) {
  switch (rows) {
    case 6: return fn(std::integral_constant<size_t, 6>());
    case 5: return fn(std::integral_constant<size_t, 5>());
    case 4: return fn(std::integral_constant<size_t, 4>());
    case 3: return fn(std::integral_constant<size_t, 3>());
    case 2: return fn(std::integral_constant<size_t, 2>());
    case 1: return fn(std::integral_constant<size_t, 1>());
    default: return;
  }
}
static_assert(kMicroRows == 6, "WithRowCount's switch covers 1..6 rows");

// One block of `rows` <= kMicroRows rows with a shared inner range.
template <bool kAccumulate>
HWY_INLINE void RowBlock(size_t rows, const LhsView& a, size_t r0, const RhsView& b, size_t cols,
                         const OutView& c, size_t k_begin, size_t k_end) {
  WithRowCount(rows, [&](auto kRows) HWY_ATTR {
    RowsAllColumns<decltype(kRows)::value, kAccumulate>(a, r0, b, cols, c, k_begin, k_end);
  });
}

// C (rows x cols) (+)= A (rows x inner) * B (inner x cols), one inner range for all rows.
template <bool kAccumulate>
HWY_INLINE void MatMul(const LhsView& a, const RhsView& b, const OutView& c, size_t rows,
                       size_t cols, size_t inner) {
  for (size_t r0 = 0; r0 < rows; r0 += kMicroRows) {
    RowBlock<kAccumulate>(std::min(kMicroRows, rows - r0), a, r0, b, cols, c, 0, inner);
  }
}

// Whether rows [k_begin, k_end) of the right operand (`cols` columns, a multiple of the vector
// length) are all finite: then a zero weight times any of them is exactly zero.
HWY_INLINE bool RowsFinite(const RhsView& b, size_t k_begin, size_t k_end, size_t cols) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto finite = hn::FirstN(d, N);
  for (size_t k = k_begin; k < k_end; ++k) {
    const float* row = b.data + k * b.row_stride;
    for (size_t c = 0; c < cols; c += N) {
      finite = hn::And(finite, hn::IsFinite(hn::LoadU(d, row + c)));
    }
  }
  return hn::AllTrue(d, finite);
}

// C += A * B where row r sums only over k in [begin[r], end[r]). Masked entries are thus never
// multiplied, so a non-finite value in a row of B reaches only the rows that see it. Rows of
// a block share the intersection of their ranges; the few leftover terms go row by row. With
// `zero_outside` (A is exactly 0 outside each row's range and B's rows in the blocks' ranges
// are finite, RowsFinite) a block runs once over the union of its rows' ranges instead: a
// causal diagonal's staircase left 15 single-row terms a block (2.7% of a causal forward's
// time at N = 1024, D = 64, docs/performance.md §4.14).
HWY_INLINE void MatMulRanged(const LhsView& a, const RhsView& b, const OutView& c, size_t rows,
                             size_t cols, const uint32_t* begin, const uint32_t* end,
                             bool zero_outside = false) {
  for (size_t r0 = 0; r0 < rows; r0 += kMicroRows) {
    const size_t block = std::min(kMicroRows, rows - r0);
    if (zero_outside) {
      size_t first = SIZE_MAX, last = 0;
      for (size_t r = r0; r < r0 + block; ++r) {
        if (begin[r] >= end[r]) continue;
        first = std::min<size_t>(first, begin[r]);
        last = std::max<size_t>(last, end[r]);
      }
      if (first < last) RowBlock<true>(block, a, r0, b, cols, c, first, last);
      continue;
    }
    size_t lo = 0, hi = SIZE_MAX;
    for (size_t r = r0; r < r0 + block; ++r) {
      lo = std::max<size_t>(lo, begin[r]);
      hi = std::min<size_t>(hi, end[r]);
    }
    if (lo < hi) {
      RowBlock<true>(block, a, r0, b, cols, c, lo, hi);
    } else {
      lo = hi = 0;  // empty intersection: every row does its whole range alone
    }
    for (size_t r = r0; r < r0 + block; ++r) {
      const size_t head_end = std::min<size_t>(lo, end[r]);
      if (begin[r] < head_end) RowBlock<true>(1, a, r, b, cols, c, begin[r], head_end);
      const size_t tail_begin = std::max<size_t>(hi, begin[r]);
      if (tail_begin < end[r]) RowBlock<true>(1, a, r, b, cols, c, tail_begin, end[r]);
    }
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
