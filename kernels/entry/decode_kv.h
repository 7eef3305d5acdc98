// Coded K or V rows decoded to fp32 by the running target's vector decoders (docs/design.md
// §8: a prefill decodes its coded K and V once per call).
#ifndef LPATTN_KERNELS_ENTRY_DECODE_KV_H_
#define LPATTN_KERNELS_ENTRY_DECODE_KV_H_

#include <cstddef>

#include "kernels/skeleton/attention_problem.h"

namespace lpattn {

// Rows [first, first + n) of (batch b, kv head h) of `coded` (16- or 8-bit codes, contiguous
// or paged) as n dense rows of dim floats at out: each value exactly what the forward's
// per-tile decoders give.
void DecodeCodedRows(const CodedKv& coded, size_t b, size_t h, size_t first, size_t n,
                     size_t dim, float* out);

}  // namespace lpattn

#endif  // LPATTN_KERNELS_ENTRY_DECODE_KV_H_
