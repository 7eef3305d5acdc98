// AMX bf16 tiles (amx_bf16.h). One palette for every lpattn tile product: the eight tiles 16
// rows x 64 bytes (16 fp32, or 32 bf16 as 16 pairs). A call configures the tiles, computes,
// and releases them, so nothing is left configured between calls (a thread's other AMX code,
// or a context switch, never sees lpattn's state).
#include "kernels/native/amx_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace lpattn::native {
namespace {

constexpr size_t kTileRows = 16;
constexpr size_t kTileBytes = 64;

__attribute__((target("amx-tile"))) void ConfigureTiles() {
  alignas(64) uint8_t config[64] = {};
  config[0] = 1;  // palette 1
  for (int t = 0; t < 8; ++t) {
    config[16 + 2 * t] = kTileBytes;  // bytes per row
    config[48 + t] = kTileRows;       // rows
  }
  _tile_loadconfig(config);
}

// C tiles 0..3 hold a 2 x 2 block of 16 x 16 sums: key blocks (kb, kb + 1) x query blocks
// (qb, qb + 1). A tiles 4, 5: 16 keys x 32 channels each; B tiles 6, 7: 16 channel pairs x 16
// queries each. `two_keys` and `two_queries` say whether the second block of each exists.
__attribute__((target("amx-tile,amx-bf16"))) void Block(const uint16_t* k0, const uint16_t* k1,
                                                        size_t key_bytes, const uint16_t* q0,
                                                        size_t q_bytes, size_t dim, bool two_keys,
                                                        bool two_queries, float* out,
                                                        size_t out_bytes) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (size_t c = 0; c < dim; c += 32) {
    const uint16_t* qc = q0 + (c / 2) * (q_bytes / 2);
    _tile_loadd(4, k0 + c, key_bytes);
    _tile_loadd(6, qc, q_bytes);
    _tile_dpbf16ps(0, 4, 6);
    if (two_queries) {
      _tile_loadd(7, qc + 32, q_bytes);  // the next 16 queries' pairs
      _tile_dpbf16ps(1, 4, 7);
    }
    if (two_keys) {
      _tile_loadd(5, k1 + c, key_bytes);
      _tile_dpbf16ps(2, 5, 6);
      if (two_queries) _tile_dpbf16ps(3, 5, 7);
    }
  }
  char* base = reinterpret_cast<char*>(out);
  _tile_stored(0, base, out_bytes);
  if (two_queries) _tile_stored(1, base + 64, out_bytes);
  if (two_keys) {
    _tile_stored(2, base + kTileRows * out_bytes, out_bytes);
    if (two_queries) _tile_stored(3, base + kTileRows * out_bytes + 64, out_bytes);
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

}  // namespace

__attribute__((target("amx-tile,amx-bf16"))) void AmxBf16ScoreTile(
    const uint16_t* keys, size_t key_stride, size_t rows, const uint16_t* q_pairs, size_t width,
    size_t cols, size_t dim, float scale, float* out, size_t out_stride, uint16_t* tail) {
  const size_t key_blocks = (rows + kTileRows - 1) / kTileRows;
  const size_t query_blocks = (cols + 15) / 16;
  // A last block of fewer than 16 keys is copied, zero-padded, so no load reads past K.
  const uint16_t* last = keys + (key_blocks - 1) * kTileRows * key_stride;
  size_t last_stride = key_stride;
  if (rows % kTileRows != 0) {
    const size_t n = rows % kTileRows;
    std::fill(tail, tail + kTileRows * dim, uint16_t(0));
    for (size_t j = 0; j < n; ++j) std::memcpy(tail + j * dim, last + j * key_stride, dim * 2);
    last = tail;
    last_stride = dim;
  }
  const auto block_keys = [&](size_t kb) { return kb + 1 == key_blocks ? last : keys + kb * kTileRows * key_stride; };
  const auto block_bytes = [&](size_t kb) { return (kb + 1 == key_blocks ? last_stride : key_stride) * 2; };
  ConfigureTiles();
  for (size_t kb = 0; kb < key_blocks; kb += 2) {
    const bool two_keys = kb + 1 < key_blocks;
    // Both key blocks of a pair share one row stride only if neither is the copied tail;
    // a pair whose second block is the tail runs as two single blocks.
    const bool same_stride = !two_keys || block_bytes(kb) == block_bytes(kb + 1);
    for (size_t qb = 0; qb < query_blocks; qb += 2) {
      const bool two_queries = qb + 1 < query_blocks;
      float* o = out + kb * kTileRows * out_stride + qb * 16;
      const uint16_t* q0 = q_pairs + qb * 32;
      if (same_stride) {
        Block(block_keys(kb), two_keys ? block_keys(kb + 1) : nullptr, block_bytes(kb), q0,
              width * 4, dim, two_keys, two_queries, o, out_stride * 4);
      } else {
        Block(block_keys(kb), nullptr, block_bytes(kb), q0, width * 4, dim, false, two_queries,
              o, out_stride * 4);
        Block(block_keys(kb + 1), nullptr, block_bytes(kb + 1), q0, width * 4, dim, false,
              two_queries, o + kTileRows * out_stride, out_stride * 4);
      }
    }
  }
  _tile_release();
  ScaleTile(out, out_stride, key_blocks * kTileRows, query_blocks * 16, scale);
}

}  // namespace lpattn::native
