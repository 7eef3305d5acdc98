// The AMX bf16 tile products of the native bf16 path (docs/math.md §4.1, docs/design.md §4):
// plain functions whose bodies carry the AMX ISA as a target attribute (Highway 1.0.3 has no
// AMX), called from the skeleton's product seams only when native::NativePathEnabled(
// kAmxBf16) holds, which implies the CPU has AMX and Linux granted its tile data.
#ifndef LPATTN_KERNELS_NATIVE_AMX_BF16_H_
#define LPATTN_KERNELS_NATIVE_AMX_BF16_H_

#include <cstddef>
#include <cstdint>

namespace lpattn::native {

// The head dimensions the AMX products take: whole 32-channel tile rows.
inline bool AmxBf16TakesDim(size_t dim) { return dim % 32 == 0 && dim > 0; }

// The tiles configured for lpattn's products (palette 1, the eight tiles 16 rows x 64 bytes)
// for as long as this object lives on the calling thread, released when it goes: a forward task
// configures them once, not once per product. Every function below needs one alive on its
// thread; nothing else may use AMX on that thread meanwhile.
class AmxTiles {
 public:
  AmxTiles();
  ~AmxTiles();
  AmxTiles(const AmxTiles&) = delete;
  AmxTiles& operator=(const AmxTiles&) = delete;
};

// C (+)= A B in fp32, C row-major [rows][cols rounded up to 16] with row stride c_stride
// floats. A: `rows` rows of `depth` bf16 codes, row stride a_stride codes. B: depth x cols in
// the tiles' pair layout, b[(k / 2) * b_stride + 2 * n + k % 2] = B(k, n), b_stride >= 2 *
// (cols rounded up to 16) codes per pair row. depth is a multiple of 32. Up to 15 rows past
// `rows` (to the next multiple of 16) are written as well (as zeros when not accumulating):
// C must have room for them. The bf16 products are exact in fp32; their sums accumulate in the
// tiles' order. tail: scratch of 16 * depth codes for a last block of fewer than 16 rows.
void AmxBf16MatMul(const uint16_t* a, size_t a_stride, size_t rows, const uint16_t* b,
                   size_t b_stride, size_t cols, size_t depth, bool accumulate, float* c,
                   size_t c_stride, uint16_t* tail);

// S^T = scale * K Q^T for one score tile, fp32, key-major (out[j * out_stride + i]): keys as A
// (rows of `dim` codes, row stride key_stride), the query panel as B (pair rows of width
// queries, width >= cols rounded up to 16), the scale applied as the tile is stored.
void AmxBf16ScoreTile(const uint16_t* keys, size_t key_stride, size_t rows,
                      const uint16_t* q_pairs, size_t width, size_t cols, size_t dim,
                      float scale, float* out, size_t out_stride, uint16_t* tail);

// The weight tile's bf16 pairs for a P V product on tiles: pairs[(j / 2) * 2 * width + 2 i +
// j % 2] = bf16(weights[j * width + i]) (round to nearest even, as the bf16 codec rounds) for
// keys j < nk and queries i < cols, zero for nk <= j < depth. weights: key-major, row stride
// width floats. Needs AVX512_BF16 (vcvtne2ps2bf16).
void AmxBf16WeightPairs(const float* weights, size_t nk, size_t cols, size_t width, size_t depth,
                        uint16_t* pairs);

}  // namespace lpattn::native

#endif  // LPATTN_KERNELS_NATIVE_AMX_BF16_H_
