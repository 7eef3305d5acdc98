// Bit layouts of the minifloat formats (sign, exponent, mantissa, subnormals), shared by the
// scalar codecs (format.cc) and the vector ones (codec-inl.h). Codes are unsigned integers with
// the sign at bit `bits - 1`.
#ifndef LPATTN_QUANT_MINIFLOAT_H_
#define LPATTN_QUANT_MINIFLOAT_H_

#include <cstdint>

namespace lpattn::quant {

struct MiniFloat {
  int bits;
  int mantissa_bits;
  int bias;
  uint32_t max_code;  // largest finite magnitude's code (sign bit clear)
  uint32_t inf_code;  // +inf's code, or 0 if the format has no infinity
  uint32_t nan_code;  // the canonical (quiet) NaN's code, sign bit clear
  bool saturating;    // overflow (and +-inf) to +-max instead of +-inf

  // The smallest normal magnitude's fp32 bit pattern: below it results are subnormal.
  constexpr uint32_t MinNormalBits() const { return uint32_t(127 + 1 - bias) << 23; }
  // fp32's exponent bias minus ours, in place in a code: added when widening a normal value.
  constexpr uint32_t Rebias() const { return uint32_t(127 - bias) << mantissa_bits; }
  // Exponent of the subnormal quantum: subnormal values are multiples of 2^SubnormalExp().
  constexpr int SubnormalExp() const { return 1 - bias - mantissa_bits; }
};

inline constexpr MiniFloat kBf16Layout{16, 7, 127, 0x7F7F, 0x7F80, 0x7FC0, false};
inline constexpr MiniFloat kFp16Layout{16, 10, 15, 0x7BFF, 0x7C00, 0x7E00, false};
inline constexpr MiniFloat kE4M3Layout{8, 3, 7, 0x7E, 0, 0x7F, true};
inline constexpr MiniFloat kE5M2Layout{8, 2, 15, 0x7B, 0x7C, 0x7F, true};

// 2^e as a float, for the exponents the layouts above need (|e| < 127).
constexpr float Pow2(int e) {
  float x = 1.0f;
  for (; e > 0; --e) x *= 2.0f;
  for (; e < 0; ++e) x *= 0.5f;
  return x;
}

}  // namespace lpattn::quant

#endif  // LPATTN_QUANT_MINIFLOAT_H_
