// The bf16 pair products of the native paths (docs/design.md §4, docs/math.md §4.1): C (+)= A B
// with A's rows of bf16 codes and B in pairs of bf16 codes along the depth, fp32 sums. Two
// engines take the same operands: AMX tiles (tdpbf16ps, amx_products.h) where amx_bf16 is
// enabled, else AVX512_BF16's vdpbf16ps on register tiles (the dot tiles) where that family is
// enabled and runs a dot at the rate of an FMA (AMD Zen 4 and 5: twice an FMA's FLOPs; Intel's
// cores run vdpbf16ps at half that rate, so without AMX they keep the fp32 products). Callers
// ask Bf16PairsEnabled once per call, and hold an AmxTiles scope where Bf16PairsOnAmx says so.
#ifndef LPATTN_KERNELS_NATIVE_BF16_PAIR_PRODUCTS_H_
#define LPATTN_KERNELS_NATIVE_BF16_PAIR_PRODUCTS_H_

#include <cstddef>
#include <cstdint>

#include "kernels/native/amx_products.h"
#include "kernels/native/native_paths.h"

namespace lpattn::native {

// Whether avx512_bf16's dot tiles are worth taking on this CPU: its vdpbf16ps does the work of
// two FMAs per FMA slot (AMD). Read once from cpuid's vendor.
bool Bf16DotAtFmaRate();

// The pair products on AMX tiles (the weights' pairs for P V also need avx512_bf16's
// conversion: AmxBf16WeightPairs).
inline bool Bf16PairsOnAmx() { return NativePathEnabled(NativePath::kAmxBf16); }
// The pair products on AMX tiles or on the dot tiles (the head dimension's condition aside:
// AmxBf16TakesDim, which both take).
inline bool Bf16PairsEnabled() {
  return Bf16PairsOnAmx() || (NativePathEnabled(NativePath::kAvx512Bf16) && Bf16DotAtFmaRate());
}

// The dot tiles, with AmxBf16MatMul's contract (amx_products.h) less its tail: depth any
// multiple of 2; rows past `rows` to the next multiple of 16 are written as zeros when not
// accumulating, as the tiles write them. Each sum accumulates its pairs in depth order, each
// pair as vdpbf16ps adds it (the odd product, then the even one, into the fp32 sum).
void DotBf16MatMul(const uint16_t* a, size_t a_stride, size_t rows, const uint16_t* b,
                   size_t b_stride, size_t cols, size_t depth, bool accumulate, float* c,
                   size_t c_stride);
// out = scale * sums, or sums * (row_scale[j] * col_scale[i]) when row_scale is given: the
// score tiles of AmxBf16ScoreTile and AmxBf16ScaledScoreTile, the scale applied in registers.
void DotBf16ScoreTile(const uint16_t* keys, size_t key_stride, size_t rows,
                      const uint16_t* q_pairs, size_t width, size_t cols, size_t depth,
                      float scale, const float* row_scale, const float* col_scale, float* out,
                      size_t out_stride);

// The products on whichever engine Bf16PairsOnAmx picks (tail: the AMX tiles' scratch).
inline void Bf16PairMatMul(const uint16_t* a, size_t a_stride, size_t rows, const uint16_t* b,
                           size_t b_stride, size_t cols, size_t depth, bool accumulate, float* c,
                           size_t c_stride, uint16_t* tail) {
  if (Bf16PairsOnAmx()) {
    AmxBf16MatMul(a, a_stride, rows, b, b_stride, cols, depth, accumulate, c, c_stride, tail);
  } else {
    DotBf16MatMul(a, a_stride, rows, b, b_stride, cols, depth, accumulate, c, c_stride);
  }
}
inline void Bf16PairScoreTile(const uint16_t* keys, size_t key_stride, size_t rows,
                              const uint16_t* q_pairs, size_t width, size_t cols, size_t depth,
                              float scale, float* out, size_t out_stride, uint16_t* tail) {
  if (Bf16PairsOnAmx()) {
    AmxBf16ScoreTile(keys, key_stride, rows, q_pairs, width, cols, depth, scale, out, out_stride,
                     tail);
  } else {
    DotBf16ScoreTile(keys, key_stride, rows, q_pairs, width, cols, depth, scale, nullptr, nullptr,
                     out, out_stride);
  }
}
inline void Bf16PairScaledScoreTile(const uint16_t* keys, size_t key_stride, size_t rows,
                                    const uint16_t* q_pairs, size_t width, size_t cols,
                                    size_t depth, const float* row_scale, const float* col_scale,
                                    float* out, size_t out_stride, uint16_t* tail) {
  if (Bf16PairsOnAmx()) {
    AmxBf16ScaledScoreTile(keys, key_stride, rows, q_pairs, width, cols, depth, row_scale,
                           col_scale, out, out_stride, tail);
  } else {
    DotBf16ScoreTile(keys, key_stride, rows, q_pairs, width, cols, depth, 1.0f, row_scale,
                     col_scale, out, out_stride);
  }
}

}  // namespace lpattn::native

#endif  // LPATTN_KERNELS_NATIVE_BF16_PAIR_PRODUCTS_H_
