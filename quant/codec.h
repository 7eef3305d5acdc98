// Rows of values to and from a low-precision format, vectorised (Highway, dispatched once per
// call) and bit-identical to the scalar codecs of format.h. Codes take FormatBytes(format)
// bytes each; `scale` divides before encoding and multiplies after decoding (1 for casts).
#ifndef LPATTN_QUANT_CODEC_H_
#define LPATTN_QUANT_CODEC_H_

#include <cstddef>

#include "quant/format.h"

namespace lpattn::quant {

// codes[i] = encode(x[i] / scale).
void EncodeRow(Format format, const float* x, float scale, void* codes, size_t n);
// out[i] = decode(codes[i]) * scale.
void DecodeRow(Format format, const void* codes, float scale, float* out, size_t n);
// out[i] = decode(encode(x[i] / scale)) * scale: quantize then dequantize (x == out allowed).
void RoundTripRow(Format format, const float* x, float scale, float* out, size_t n);
// The same with a scale per element (per-channel quantizers): scales[i] for x[i]. With
// inverses (each exactly 1 / scales[i]: InverseIsExact), x[i] * inverses[i] for the division.
void RoundTripRowScales(Format format, const float* x, const float* scales, float* out, size_t n,
                        const float* inverses = nullptr);

// The same over `rows` rows of n values in one call (a slice of a tensor): row r read at
// x + r * x_stride with scale scales[r], written at codes + r * codes_stride (in codes) or
// out + r * out_stride. One dispatch and one set-up of the format's constants for them all.
void EncodeRows(Format format, const float* x, size_t x_stride, const float* scales,
                void* codes, size_t codes_stride, size_t rows, size_t n);
void RoundTripRows(Format format, const float* x, size_t x_stride, const float* scales,
                   float* out, size_t out_stride, size_t rows, size_t n);
// RoundTripRowScales over `rows` rows, each with the same per-channel scales (and inverses).
void RoundTripRowsScales(Format format, const float* x, size_t x_stride, const float* scales,
                         const float* inverses, float* out, size_t out_stride, size_t rows,
                         size_t n);

// The largest |x[i]| over n values, or +inf if any of them is NaN or infinite: a group's
// extreme for its scale, with non-finite input made unmistakable.
float MaxAbsRow(const float* x, size_t n);
// amax[r] = MaxAbsRow(x + r * x_stride, n) for `rows` rows, in one call.
void MaxAbsRows(const float* x, size_t x_stride, size_t rows, size_t n, float* amax);
// running[i] = max(running[i], |x[i]|) (per-channel extremes); false if any x[i] is not finite.
bool MaxAbsInto(const float* x, float* running, size_t n);
// MaxAbsInto over `rows` rows in one call: rows if every value is finite, else the first row
// with one that is not (running is then not to be used).
size_t MaxAbsRowsInto(const float* x, size_t x_stride, size_t rows, float* running, size_t n);

}  // namespace lpattn::quant

#endif  // LPATTN_QUANT_CODEC_H_
