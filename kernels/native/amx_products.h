// The AMX tile products of the native paths (docs/math.md §4.1, docs/design.md §4): bf16
// (tdpbf16ps, fp32 sums) and int8 (tdpbssd, exact int32 sums). Plain functions whose bodies
// carry the AMX ISA as a target attribute (Highway 1.0.3 has no AMX), called from the
// skeleton's product seams only when native::NativePathEnabled(kAmxBf16 / kAmxInt8) holds,
// which implies the CPU has AMX and Linux granted its tile data. Each needs an AmxTiles scope
// alive on its thread.
#ifndef LPATTN_KERNELS_NATIVE_AMX_PRODUCTS_H_
#define LPATTN_KERNELS_NATIVE_AMX_PRODUCTS_H_

#include <cstddef>
#include <cstdint>

#include "kernels/native/amx_tiles.h"

namespace lpattn::native {

// The head dimensions the products take: whole tile rows of 64 bytes (32 bf16, 64 int8).
inline bool AmxBf16TakesDim(size_t dim) { return dim % 32 == 0 && dim > 0; }
inline bool AmxInt8TakesDim(size_t dim) { return dim % 64 == 0 && dim > 0; }

// C (+)= A B, C row-major [rows][cols rounded up to 16] with row stride c_stride elements
// (fp32 for bf16, int32 for int8). A: `rows` rows of `depth` codes, row stride a_stride codes.
// B: depth x cols in the tiles' layout, groups of 2 (bf16) or 4 (int8) along depth,
// b[(k / g) * b_stride + g * n + k % g] = B(k, n), b_stride >= g * (cols rounded up to 16)
// codes per group row. depth is a multiple of 32 (bf16) or 64 (int8). Up to 15 rows past `rows`
// (to the next multiple of 16) are written as well (as zeros when not accumulating): C must
// have room for them. bf16 products are exact in fp32 and their sums accumulate in the tiles'
// order; int8 sums are exact in int32. tail: scratch of 16 * depth codes for a last block of
// fewer than 16 rows.
void AmxBf16MatMul(const uint16_t* a, size_t a_stride, size_t rows, const uint16_t* b,
                   size_t b_stride, size_t cols, size_t depth, bool accumulate, float* c,
                   size_t c_stride, uint16_t* tail);
void AmxInt8MatMul(const int8_t* a, size_t a_stride, size_t rows, const int8_t* b,
                   size_t b_stride, size_t cols, size_t depth, int32_t* c, size_t c_stride,
                   int8_t* tail);

// S^T = scale * K Q^T for one score tile, fp32, key-major (out[j * out_stride + i]): keys as A
// (rows of `depth` codes, row stride key_stride: the head dimension, or 4 times it for the
// fp16 split), the query panel as B (pair rows of width queries, width >= cols rounded up to
// 16), the scale applied as the tile is stored (no pass at all for 1: a scale the caller folded
// into the query panel).
void AmxBf16ScoreTile(const uint16_t* keys, size_t key_stride, size_t rows,
                      const uint16_t* q_pairs, size_t width, size_t cols, size_t depth,
                      float scale, float* out, size_t out_stride, uint16_t* tail);
// The same with a scale per key and per query (fp8 codes' token scales): out[j * out_stride +
// i] = sum * (row_scale[j] * col_scale[i]), as the int8 tile scales its sums.
void AmxBf16ScaledScoreTile(const uint16_t* keys, size_t key_stride, size_t rows,
                            const uint16_t* q_pairs, size_t width, size_t cols, size_t depth,
                            const float* row_scale, const float* col_scale, float* out,
                            size_t out_stride, uint16_t* tail);

// The int8 score tile: out[j * out_stride + i] = float(sum_c k_jc q_ic) * (row_scale[j] *
// col_scale[i]) for keys j < rows (rows past them, to the next 16, come out 0) and queries i <
// cols rounded up to 16; the same expression as the Highway integer tile's, so the two agree
// bit for bit. q_quads: q_quads[(c / 4) * 4 * width + 4 i + c % 4] = query i's code c.
// key_blocks (optional: keys in pages): key_blocks[r] is where keys [16 r, 16 r + 16) start,
// key_stride apart; keys is then unused.
void AmxInt8ScoreTile(const int8_t* keys, size_t key_stride, size_t rows, const int8_t* q_quads,
                      size_t width, size_t cols, size_t dim, const float* row_scale,
                      const float* col_scale, float* out, size_t out_stride, int8_t* tail,
                      const int8_t* const* key_blocks = nullptr);

// The weight tile's bf16 pairs for a P V product on tiles: pairs[(j / 2) * 2 * width + 2 i +
// j % 2] = bf16(weights[j * width + i]) (round to nearest even, as the bf16 codec rounds) for
// keys j < nk and queries i < cols, zero for nk <= j < depth. weights: key-major, row stride
// width floats. Needs AVX512_BF16 (vcvtne2ps2bf16).
void AmxBf16WeightPairs(const float* weights, size_t nk, size_t cols, size_t width, size_t depth,
                        uint16_t* pairs);

}  // namespace lpattn::native

#endif  // LPATTN_KERNELS_NATIVE_AMX_PRODUCTS_H_
