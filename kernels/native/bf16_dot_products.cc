// The dot tiles of the bf16 pair products (bf16_pair_products.h): vdpbf16ps on register tiles.
#include <immintrin.h>

#include <cstring>

#include "kernels/native/bf16_pair_products.h"
#include "kernels/native/cpu_features.h"

// GCC 12's AVX-512 intrinsics start from an uninitialised vector that every lane then
// overwrites, and -Wmaybe-uninitialized flags it (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define LPATTN_BF16_DOT __attribute__((target("avx512f,avx512bw,avx512bf16")))

namespace lpattn::native {
namespace {

constexpr size_t kLanes = 16;     // fp32 sums per vector
constexpr size_t kBlockRows = 4;  // a block of 4 rows x 6 vectors: 24 of the 32 registers
constexpr size_t kBlockVecs = 6;
// Products of at most 3 vectors (a key tile of 48 columns) take blocks of 8 rows x 3 vectors:
// 24 sums again, and per pair 3 loads and 8 broadcasts for 24 dots where 4 x 3 had 7 for 12.
constexpr size_t kNarrowRows = 8;
constexpr size_t kNarrowVecs = 3;

// Where a block's sums go: c (+)= sums, scaled by `scale`, or by row_scale[r] * col_scale[i].
struct Epilogue {
  float* c;
  size_t c_stride;
  bool accumulate;
  float scale;
  const float* row_scale;  // optional
  const float* col_scale;
};

// Rows [r0, r0 + kRows) x columns [c0, c0 + 16 kVecs) over `pairs` pairs of the depth: each step
// loads kVecs vectors of B's pairs and broadcasts each row's pair of A.
template <size_t kRows, size_t kVecs>
LPATTN_BF16_DOT void DotBlock(const uint16_t* a, size_t a_stride, const uint16_t* b,
                              size_t b_stride, size_t pairs, size_t r0, size_t c0,
                              const Epilogue& e) {
  __m512 acc[kRows][kVecs];
#pragma GCC unroll 8
  for (size_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 6
    for (size_t v = 0; v < kVecs; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  const uint16_t* a_rows = a + r0 * a_stride;
  const uint16_t* b_pairs = b + 2 * c0;
  for (size_t p = 0; p < pairs; ++p) {
    __m512bh bv[kVecs];
#pragma GCC unroll 6
    for (size_t v = 0; v < kVecs; ++v) {
      bv[v] = (__m512bh)_mm512_loadu_si512(b_pairs + p * b_stride + 2 * kLanes * v);
    }
#pragma GCC unroll 8
    for (size_t r = 0; r < kRows; ++r) {
      int32_t word;
      std::memcpy(&word, a_rows + r * a_stride + 2 * p, sizeof(word));
      const __m512bh av = (__m512bh)_mm512_set1_epi32(word);
#pragma GCC unroll 6
      for (size_t v = 0; v < kVecs; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < kRows; ++r) {
    float* row = e.c + (r0 + r) * e.c_stride + c0;
    const __m512 row_scale = _mm512_set1_ps(e.row_scale != nullptr ? e.row_scale[r0 + r] : e.scale);
#pragma GCC unroll 6
    for (size_t v = 0; v < kVecs; ++v) {
      __m512 sums = acc[r][v];
      if (e.row_scale != nullptr) {
        sums = _mm512_mul_ps(sums, _mm512_mul_ps(row_scale, _mm512_loadu_ps(e.col_scale + c0 + kLanes * v)));
      } else if (e.scale != 1.0f) {
        sums = _mm512_mul_ps(sums, row_scale);
      }
      if (e.accumulate) sums = _mm512_add_ps(_mm512_loadu_ps(row + kLanes * v), sums);
      _mm512_storeu_ps(row + kLanes * v, sums);
    }
  }
}

// A block of kRows rows and `vecs` vectors (at most kBlockVecs).
template <size_t kRows>
void DotRows(const uint16_t* a, size_t a_stride, const uint16_t* b, size_t b_stride,
             size_t pairs, size_t r0, size_t c0, size_t vecs, const Epilogue& e) {
  switch (vecs) {
    case 1: DotBlock<kRows, 1>(a, a_stride, b, b_stride, pairs, r0, c0, e); break;
    case 2: DotBlock<kRows, 2>(a, a_stride, b, b_stride, pairs, r0, c0, e); break;
    case 3: DotBlock<kRows, 3>(a, a_stride, b, b_stride, pairs, r0, c0, e); break;
    case 4:
      if constexpr (kRows <= kBlockRows) {
        DotBlock<kRows, 4>(a, a_stride, b, b_stride, pairs, r0, c0, e);
      }
      break;
    case 5:
      if constexpr (kRows <= kBlockRows) {
        DotBlock<kRows, 5>(a, a_stride, b, b_stride, pairs, r0, c0, e);
      }
      break;
    default:
      if constexpr (kRows <= kBlockRows) {
        DotBlock<kRows, 6>(a, a_stride, b, b_stride, pairs, r0, c0, e);
      }
      break;
  }
}

// Every block of C: rows in fours, columns in blocks of up to 96; then, when not accumulating,
// zero rows past `rows` to the next multiple of 16 (the AMX tiles' contract).
void DotMatMul(const uint16_t* a, size_t a_stride, size_t rows, const uint16_t* b,
               size_t b_stride, size_t cols, size_t depth, const Epilogue& e) {
  const size_t vecs = (cols + kLanes - 1) / kLanes, pairs = depth / 2;
  for (size_t c0 = 0; c0 < vecs; c0 += kBlockVecs) {
    const size_t n = vecs - c0 < kBlockVecs ? vecs - c0 : kBlockVecs;
    size_t r0 = 0;
    if (n <= kNarrowVecs) {
      for (; r0 + kNarrowRows <= rows; r0 += kNarrowRows) {
        DotRows<kNarrowRows>(a, a_stride, b, b_stride, pairs, r0, kLanes * c0, n, e);
      }
    }
    for (; r0 + kBlockRows <= rows; r0 += kBlockRows) {
      DotRows<kBlockRows>(a, a_stride, b, b_stride, pairs, r0, kLanes * c0, n, e);
    }
    switch (rows - r0) {
      case 1: DotRows<1>(a, a_stride, b, b_stride, pairs, r0, kLanes * c0, n, e); break;
      case 2: DotRows<2>(a, a_stride, b, b_stride, pairs, r0, kLanes * c0, n, e); break;
      case 3: DotRows<3>(a, a_stride, b, b_stride, pairs, r0, kLanes * c0, n, e); break;
      default: break;
    }
  }
  if (e.accumulate) return;
  for (size_t r = rows; r < (rows + kAmxTileRows - 1) / kAmxTileRows * kAmxTileRows; ++r) {
    std::memset(e.c + r * e.c_stride, 0, vecs * kLanes * sizeof(float));
  }
}

}  // namespace

bool Bf16DotAtFmaRate() { return DetectedCpuFeatures().amd; }

void DotBf16MatMul(const uint16_t* a, size_t a_stride, size_t rows, const uint16_t* b,
                   size_t b_stride, size_t cols, size_t depth, bool accumulate, float* c,
                   size_t c_stride) {
  DotMatMul(a, a_stride, rows, b, b_stride, cols, depth,
            {c, c_stride, accumulate, 1.0f, nullptr, nullptr});
}

void DotBf16ScoreTile(const uint16_t* keys, size_t key_stride, size_t rows,
                      const uint16_t* q_pairs, size_t width, size_t cols, size_t depth,
                      float scale, const float* row_scale, const float* col_scale, float* out,
                      size_t out_stride) {
  DotMatMul(keys, key_stride, rows, q_pairs, 2 * width, cols, depth,
            {out, out_stride, false, scale, row_scale, col_scale});
}

}  // namespace lpattn::native
