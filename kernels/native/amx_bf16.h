// The AMX bf16 tile products of the native bf16 path (docs/math.md §4.1, docs/design.md §4):
// plain functions whose bodies carry the AMX ISA as a target attribute (Highway 1.0.3 has no
// AMX), called from the skeleton's product seams only when native::NativePathEnabled(
// kAmxBf16) holds, which implies the CPU has AMX and Linux granted its tile data.
#ifndef LPATTN_KERNELS_NATIVE_AMX_BF16_H_
#define LPATTN_KERNELS_NATIVE_AMX_BF16_H_

#include <cstddef>
#include <cstdint>

namespace lpattn::native {

// The head dimensions the AMX score product takes: whole 32-channel tile rows.
inline bool AmxBf16TakesDim(size_t dim) { return dim % 32 == 0 && dim > 0; }

// S^T = scale * K Q^T for one score tile, fp32, key-major: out[j * out_stride + i] for keys
// j < rows and queries i < cols rounded up to 16 (the padding columns come out 0 when the
// panel's padding is 0). keys: `rows` rows of `dim` bf16 codes, row stride key_stride codes;
// q_pairs: the query panel in the tiles' pair layout, q_pairs[(c / 2) * 2 * width + 2 * i +
// c % 2] = bf16 code of query i's channel c, width >= cols rounded up to 16. Up to 15 rows past
// `rows` (to the next multiple of 16) are written as well: out must have room for them.
// The sums of bf16 products accumulate in fp32 (exact products; the order is the tiles').
// tail: scratch of 16 * dim codes for a last block of fewer than 16 keys.
void AmxBf16ScoreTile(const uint16_t* keys, size_t key_stride, size_t rows,
                      const uint16_t* q_pairs, size_t width, size_t cols, size_t dim,
                      float scale, float* out, size_t out_stride, uint16_t* tail);

}  // namespace lpattn::native

#endif  // LPATTN_KERNELS_NATIVE_AMX_BF16_H_
