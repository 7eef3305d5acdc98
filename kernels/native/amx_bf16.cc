// AMX bf16 tiles (amx_bf16.h). One palette for every lpattn tile product: the eight tiles 16
// rows x 64 bytes (16 fp32, or 32 bf16 as 16 pairs), configured by an AmxTiles scope (once per
// forward task: ldtilecfg was a tenth of the products' time when every product configured its
// own) and released when it ends, so nothing is left configured between calls.
#include "kernels/native/amx_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace lpattn::native {
namespace {

constexpr size_t kTileRows = 16;
constexpr size_t kTileBytes = 64;

// GCC 12's _tile_loadconfig tells the compiler it reads only a pointer's worth of the
// configuration, so the stores that fill a local one can be dropped as dead: the configuration
// is a constant in memory instead.
struct TileConfig {
  alignas(64) uint8_t bytes[64];
};
constexpr TileConfig MakeTileConfig() {
  TileConfig config{};
  config.bytes[0] = 1;  // palette 1
  for (int t = 0; t < 8; ++t) {
    config.bytes[16 + 2 * t] = kTileBytes;  // bytes per row
    config.bytes[48 + t] = kTileRows;       // rows
  }
  return config;
}
constexpr TileConfig kTileConfig = MakeTileConfig();

__attribute__((target("amx-tile"))) void ConfigureTiles() { _tile_loadconfig(kTileConfig.bytes); }

// C tiles 0..3 hold a 2 x 2 block of 16 x 16 sums: row blocks (a0, a1) x column blocks (b0,
// b0 + 16). A tiles 4, 5: 16 rows x 32 codes each; B tiles 6, 7: 16 pair rows x 16 columns each.
// `two_rows` and `two_cols` say whether the second block of each exists.
__attribute__((target("amx-tile,amx-bf16"))) void Block(const uint16_t* a0, const uint16_t* a1,
                                                        size_t a_bytes, const uint16_t* b0,
                                                        size_t b_bytes, size_t depth,
                                                        bool two_rows, bool two_cols,
                                                        bool accumulate, float* c,
                                                        size_t c_bytes) {
  char* base = reinterpret_cast<char*>(c);
  char* second_rows = base + kTileRows * c_bytes;
  if (accumulate) {
    _tile_loadd(0, base, c_bytes);
    if (two_cols) _tile_loadd(1, base + 64, c_bytes);
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
  for (size_t k = 0; k < depth; k += 32) {
    const uint16_t* bk = b0 + (k / 2) * (b_bytes / 2);
    _tile_loadd(4, a0 + k, a_bytes);
    _tile_loadd(6, bk, b_bytes);
    _tile_dpbf16ps(0, 4, 6);
    if (two_cols) {
      _tile_loadd(7, bk + 32, b_bytes);  // the next 16 columns' pairs
      _tile_dpbf16ps(1, 4, 7);
    }
    if (two_rows) {
      _tile_loadd(5, a1 + k, a_bytes);
      _tile_dpbf16ps(2, 5, 6);
      if (two_cols) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, base, c_bytes);
  if (two_cols) _tile_stored(1, base + 64, c_bytes);
  if (two_rows) {
    _tile_stored(2, second_rows, c_bytes);
    if (two_cols) _tile_stored(3, second_rows + 64, c_bytes);
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

__attribute__((target("amx-tile"))) void ReleaseTiles() { _tile_release(); }

}  // namespace

AmxTiles::AmxTiles() { ConfigureTiles(); }
AmxTiles::~AmxTiles() { ReleaseTiles(); }

__attribute__((target("amx-tile,amx-bf16"))) void AmxBf16MatMul(
    const uint16_t* a, size_t a_stride, size_t rows, const uint16_t* b, size_t b_stride,
    size_t cols, size_t depth, bool accumulate, float* c, size_t c_stride, uint16_t* tail) {
  const size_t row_blocks = (rows + kTileRows - 1) / kTileRows;
  const size_t col_blocks = (cols + 15) / 16;
  // A last block of fewer than 16 rows is copied, zero-padded, so no load reads past A.
  const uint16_t* last = a + (row_blocks - 1) * kTileRows * a_stride;
  size_t last_stride = a_stride;
  if (rows % kTileRows != 0) {
    const size_t n = rows % kTileRows;
    std::fill(tail, tail + kTileRows * depth, uint16_t(0));
    for (size_t j = 0; j < n; ++j) std::memcpy(tail + j * depth, last + j * a_stride, depth * 2);
    last = tail;
    last_stride = depth;
  }
  const auto block_rows = [&](size_t rb) {
    return rb + 1 == row_blocks ? last : a + rb * kTileRows * a_stride;
  };
  const auto block_bytes = [&](size_t rb) {
    return (rb + 1 == row_blocks ? last_stride : a_stride) * 2;
  };
  for (size_t rb = 0; rb < row_blocks; rb += 2) {
    const bool two_rows = rb + 1 < row_blocks;
    // A pair of row blocks shares one row stride unless its second block is the copied tail:
    // then the two run as single blocks.
    const bool paired = two_rows && block_bytes(rb) == block_bytes(rb + 1);
    for (size_t cb = 0; cb < col_blocks; cb += 2) {
      const bool two_cols = cb + 1 < col_blocks;
      float* o = c + rb * kTileRows * c_stride + cb * 16;
      const uint16_t* b0 = b + cb * 32;
      Block(block_rows(rb), paired ? block_rows(rb + 1) : nullptr, block_bytes(rb), b0,
            b_stride * 2, depth, paired, two_cols, accumulate, o, c_stride * 4);
      if (two_rows && !paired) {
        Block(block_rows(rb + 1), nullptr, block_bytes(rb + 1), b0, b_stride * 2, depth, false,
              two_cols, accumulate, o + kTileRows * c_stride, c_stride * 4);
      }
    }
  }
}

void AmxBf16ScoreTile(const uint16_t* keys, size_t key_stride, size_t rows,
                      const uint16_t* q_pairs, size_t width, size_t cols, size_t dim,
                      float scale, float* out, size_t out_stride, uint16_t* tail) {
  AmxBf16MatMul(keys, key_stride, rows, q_pairs, 2 * width, cols, dim, false, out, out_stride,
                tail);
  ScaleTile(out, out_stride, (rows + kTileRows - 1) / kTileRows * kTileRows, (cols + 15) / 16 * 16,
            scale);
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
