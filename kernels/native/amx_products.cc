// AMX tile products (amx_products.h), in the tiles an AmxTiles scope configured.
#include "kernels/native/amx_products.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

// GCC 12's AVX-512 conversions start from an uninitialised vector that every lane then
// overwrites, and -Wmaybe-uninitialized flags it (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace lpattn::native {
namespace {

constexpr size_t kTileRows = kAmxTileRows;

// C tiles 0..3 hold a 2 x 2 block of 16 x 16 sums: row blocks (a0, a1) x column blocks (b0,
// b0 + 16). A tiles 4, 5: 16 rows x 64 bytes each; B tiles 6, 7: 16 group rows x 16 columns
// each. `two_rows` and `two_cols` say whether the second block of each exists. Every step of
// the depth takes 64 bytes of each A row and 16 group rows of B; kInt8 picks tdpbssd (int8,
// int32 sums) over tdpbf16ps (bf16, fp32 sums).
template <bool kInt8>
__attribute__((target("amx-tile,amx-bf16,amx-int8"))) void Block(
    const char* a0, const char* a1, size_t a_bytes, const char* b0, size_t b_bytes,
    size_t depth_bytes, bool two_rows, bool two_cols, bool accumulate, char* c, size_t c_bytes) {
  char* second_rows = c + kTileRows * c_bytes;
  if (accumulate) {
    _tile_loadd(0, c, c_bytes);
    if (two_cols) _tile_loadd(1, c + 64, c_bytes);
    if (two_rows) {
      _tile_loadd(2, second_rows, c_bytes);
      if (two_cols) _tile_loadd(3, second_rows + 64, c_bytes);
    }
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (size_t k = 0; k < depth_bytes; k += 64) {
    const char* bk = b0 + (k / 64) * kTileRows * b_bytes;
    _tile_loadd(4, a0 + k, a_bytes);
    _tile_loadd(6, bk, b_bytes);
    if constexpr (kInt8) _tile_dpbssd(0, 4, 6); else _tile_dpbf16ps(0, 4, 6);
    if (two_cols) {
      _tile_loadd(7, bk + 64, b_bytes);  // the next 16 columns' groups
      if constexpr (kInt8) _tile_dpbssd(1, 4, 7); else _tile_dpbf16ps(1, 4, 7);
    }
    if (two_rows) {
      _tile_loadd(5, a1 + k, a_bytes);
      if constexpr (kInt8) _tile_dpbssd(2, 5, 6); else _tile_dpbf16ps(2, 5, 6);
      if (two_cols) {
        if constexpr (kInt8) _tile_dpbssd(3, 5, 7); else _tile_dpbf16ps(3, 5, 7);
      }
    }
  }
  _tile_stored(0, c, c_bytes);
  if (two_cols) _tile_stored(1, c + 64, c_bytes);
  if (two_rows) {
    _tile_stored(2, second_rows, c_bytes);
    if (two_cols) _tile_stored(3, second_rows + 64, c_bytes);
  }
}

// C (+)= A B over 2 x 2 blocks of tiles, in bytes: A rows of depth_bytes (row stride a_bytes),
// B group rows of b_bytes, C rows of c_bytes (4-byte elements). A's block of 16 rows rb starts
// at a + 16 rb a_bytes, or at a_blocks[rb] when given (rows in pages).
template <bool kInt8>
void MatMul(const char* a, size_t a_bytes, size_t rows, const char* b, size_t b_bytes,
            size_t cols, size_t depth_bytes, bool accumulate, char* c, size_t c_bytes,
            char* tail, const char* const* a_blocks = nullptr) {
  const size_t row_blocks = (rows + kTileRows - 1) / kTileRows;
  const size_t col_blocks = (cols + 15) / 16;
  const auto start = [&](size_t rb) {
    return a_blocks != nullptr ? a_blocks[rb] : a + rb * kTileRows * a_bytes;
  };
  // A last block of fewer than 16 rows is copied, zero-padded, so no load reads past A.
  const char* last = start(row_blocks - 1);
  size_t last_bytes = a_bytes;
  if (rows % kTileRows != 0) {
    const size_t n = rows % kTileRows;
    std::fill(tail, tail + kTileRows * depth_bytes, char(0));
    for (size_t j = 0; j < n; ++j) std::memcpy(tail + j * depth_bytes, last + j * a_bytes, depth_bytes);
    last = tail;
    last_bytes = depth_bytes;
  }
  const auto block_rows = [&](size_t rb) { return rb + 1 == row_blocks ? last : start(rb); };
  const auto block_bytes = [&](size_t rb) { return rb + 1 == row_blocks ? last_bytes : a_bytes; };
  for (size_t rb = 0; rb < row_blocks; rb += 2) {
    const bool two_rows = rb + 1 < row_blocks;
    // A pair of row blocks shares one row stride unless its second block is the copied tail:
    // then the two run as single blocks.
    const bool paired = two_rows && block_bytes(rb) == block_bytes(rb + 1);
    for (size_t cb = 0; cb < col_blocks; cb += 2) {
      const bool two_cols = cb + 1 < col_blocks;
      char* o = c + rb * kTileRows * c_bytes + cb * 64;
      const char* b0 = b + cb * 64;
      Block<kInt8>(block_rows(rb), paired ? block_rows(rb + 1) : nullptr, block_bytes(rb), b0,
                   b_bytes, depth_bytes, paired, two_cols, accumulate, o, c_bytes);
      if (two_rows && !paired) {
        Block<kInt8>(block_rows(rb + 1), nullptr, block_bytes(rb + 1), b0, b_bytes, depth_bytes,
                     false, two_cols, accumulate, o + kTileRows * c_bytes, c_bytes);
      }
    }
  }
}

__attribute__((target("avx512f"))) void ScaleTile(float* out, size_t out_stride, size_t rows,
                                                   size_t cols, float scale) {
  const __m512 s = _mm512_set1_ps(scale);
  for (size_t j = 0; j < rows; ++j) {
    for (size_t i = 0; i < cols; i += 16) {
      float* p = out + j * out_stride + i;
      _mm512_storeu_ps(p, _mm512_mul_ps(s, _mm512_loadu_ps(p)));
    }
  }
}

// The sums stored in out's place (int32 with kIntSums, else fp32) become float(sum) *
// (row_scale * col_scale).
template <bool kIntSums>
__attribute__((target("avx512f"))) void ScaleRowsAndColumns(float* out, size_t out_stride,
                                                             size_t rows, size_t cols,
                                                             const float* row_scale,
                                                             const float* col_scale) {
  for (size_t j = 0; j < rows; ++j) {
    const __m512 rs = _mm512_set1_ps(row_scale[j]);
    for (size_t i = 0; i < cols; i += 16) {
      float* p = out + j * out_stride + i;
      const __m512 sums = kIntSums ? _mm512_cvtepi32_ps(_mm512_loadu_si512(p)) : _mm512_loadu_ps(p);
      _mm512_storeu_ps(p, _mm512_mul_ps(sums, _mm512_mul_ps(rs, _mm512_loadu_ps(col_scale + i))));
    }
  }
}

}  // namespace

void AmxBf16MatMul(const uint16_t* a, size_t a_stride, size_t rows, const uint16_t* b,
                   size_t b_stride, size_t cols, size_t depth, bool accumulate, float* c,
                   size_t c_stride, uint16_t* tail) {
  MatMul<false>(reinterpret_cast<const char*>(a), a_stride * 2, rows,
                reinterpret_cast<const char*>(b), b_stride * 2, cols, depth * 2, accumulate,
                reinterpret_cast<char*>(c), c_stride * 4, reinterpret_cast<char*>(tail));
}

void AmxInt8MatMul(const int8_t* a, size_t a_stride, size_t rows, const int8_t* b,
                   size_t b_stride, size_t cols, size_t depth, int32_t* c, size_t c_stride,
                   int8_t* tail) {
  MatMul<true>(reinterpret_cast<const char*>(a), a_stride, rows, reinterpret_cast<const char*>(b),
               b_stride, cols, depth, false, reinterpret_cast<char*>(c), c_stride * 4,
               reinterpret_cast<char*>(tail));
}

void AmxInt8ScoreTile(const int8_t* keys, size_t key_stride, size_t rows, const int8_t* q_quads,
                      size_t width, size_t cols, size_t dim, const float* row_scale,
                      const float* col_scale, float* out, size_t out_stride, int8_t* tail,
                      const int8_t* const* key_blocks) {
  MatMul<true>(reinterpret_cast<const char*>(keys), key_stride, rows,
               reinterpret_cast<const char*>(q_quads), 4 * width, cols, dim, false,
               reinterpret_cast<char*>(out), out_stride * 4, reinterpret_cast<char*>(tail),
               reinterpret_cast<const char* const*>(key_blocks));
  ScaleRowsAndColumns<true>(out, out_stride, rows, (cols + 15) / 16 * 16, row_scale, col_scale);
  // The rows past `rows` hold int32 zeros, whose bits are float zeros already.
}

void AmxBf16ScoreTile(const uint16_t* keys, size_t key_stride, size_t rows,
                      const uint16_t* q_pairs, size_t width, size_t cols, size_t depth,
                      float scale, float* out, size_t out_stride, uint16_t* tail) {
  AmxBf16MatMul(keys, key_stride, rows, q_pairs, 2 * width, cols, depth, false, out, out_stride,
                tail);
  if (scale == 1.0f) return;  // a scale folded into the query panel
  ScaleTile(out, out_stride, (rows + kTileRows - 1) / kTileRows * kTileRows, (cols + 15) / 16 * 16,
            scale);
}

void AmxBf16ScaledScoreTile(const uint16_t* keys, size_t key_stride, size_t rows,
                            const uint16_t* q_pairs, size_t width, size_t cols, size_t depth,
                            const float* row_scale, const float* col_scale, float* out,
                            size_t out_stride, uint16_t* tail) {
  AmxBf16MatMul(keys, key_stride, rows, q_pairs, 2 * width, cols, depth, false, out, out_stride,
                tail);
  // The rows past `rows` hold zero sums already.
  ScaleRowsAndColumns<false>(out, out_stride, rows, (cols + 15) / 16 * 16, row_scale, col_scale);
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) void AmxBf16WeightPairs(
    const float* weights, size_t nk, size_t cols, size_t width, size_t depth, uint16_t* pairs) {
  // Lane 2i of the result takes lane i of the even key's row, lane 2i + 1 lane i of the odd's
  // (vcvtne2ps2bf16 puts its second operand in the low half).
  alignas(64) static const uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                       21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                       11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  const size_t padded_cols = (cols + 15) / 16 * 16;
  for (size_t jp = 0; jp < depth / 2; ++jp) {
    const size_t even = 2 * jp, odd = 2 * jp + 1;
    uint16_t* row = pairs + jp * 2 * width;
    for (size_t i = 0; i < padded_cols; i += 16) {
      const __m512 e = even < nk ? _mm512_loadu_ps(weights + even * width + i) : _mm512_setzero_ps();
      const __m512 o = odd < nk ? _mm512_loadu_ps(weights + odd * width + i) : _mm512_setzero_ps();
      const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(o, e);
      _mm512_storeu_si512(row + 2 * i, _mm512_permutexvar_epi16(interleave, both));
    }
  }
}

}  // namespace lpattn::native
