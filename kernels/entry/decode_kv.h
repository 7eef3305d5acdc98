// Coded K or V rows decoded to fp32 by the running target's vector decoders, or K's rows built
// for the AMX score product (docs/design.md §8: a prefill decodes its coded K and V once per
// call).
#ifndef LPATTN_KERNELS_ENTRY_DECODE_KV_H_
#define LPATTN_KERNELS_ENTRY_DECODE_KV_H_

#include <cstddef>
#include <cstdint>

#include "kernels/skeleton/attention_problem.h"

namespace lpattn {

// Rows [first, first + n) of (batch b, kv head h) of `coded` (16- or 8-bit codes, contiguous
// or paged) as n dense rows of dim floats at out: each value exactly what the forward's
// per-tile decoders give.
void DecodeCodedRows(const CodedKv& coded, size_t b, size_t h, size_t first, size_t n,
                     size_t dim, float* out);

// Rows [first, first + n) of (batch b, kv head h) of fp16 or fp8 `coded` K (contiguous) as the
// AMX score product's key rows of `kind` (AttentionProblem::amx_key_rows): n dense rows of
// row_codes bf16 codes at out, each exactly what the per-tile conversion makes.
void BuildAmxKeyRows(const CodedKv& coded, AmxScores kind, size_t b, size_t h, size_t first,
                     size_t n, size_t dim, uint16_t* out);

}  // namespace lpattn

#endif  // LPATTN_KERNELS_ENTRY_DECODE_KV_H_
