// Number formats of low-precision operands (docs/math.md §4) and their scalar codecs.
//
// Every floating-point format here is a "minifloat": sign, e exponent bits, m mantissa bits,
// subnormals. They differ in what happens past the largest finite value:
//   bf16, fp16   IEEE: round to nearest even, overflow to +-inf, NaN kept (quiet).
//   fp8 e4m3     OCP "FN": no infinity; round to nearest even, saturating at +-448 (inf too);
//                NaN kept as S.1111.111.
//   fp8 e5m2     round to nearest even, saturating at +-57344 (inf too); NaN kept as S.11111.11.
//   int8         symmetric: round(x) to nearest even, clamped to [-127, 127]; -128 unused. NaN
//                has no code (it encodes as 0), so the quantizers reject it before encoding.
// The scale that maps a tensor into a format's range belongs to the quantizer (quantizer.h):
// the codecs here see values already divided by it.
#ifndef LPATTN_QUANT_FORMAT_H_
#define LPATTN_QUANT_FORMAT_H_

#include <bit>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lpattn::quant {

enum class Format : uint8_t { kFp32, kBf16, kFp16, kFp8E4M3, kFp8E5M2, kInt8 };

inline constexpr Format kAllFormats[] = {Format::kFp32,    Format::kBf16,    Format::kFp16,
                                         Format::kFp8E4M3, Format::kFp8E5M2, Format::kInt8};

// Names as written in options: fp32, bf16, fp16, fp8e4m3, fp8e5m2, int8.
const char* FormatName(Format format);
std::optional<Format> ParseFormat(std::string_view name);
// "fp32, bf16, ..." for error messages.
std::string FormatNames();

// Bytes per stored element.
int FormatBytes(Format format);
// The largest finite magnitude: what a scaled quantizer maps a group's absolute maximum to.
float FormatMax(Format format);
// Formats whose quantizers compute a scale per group (fp8 and int8: their range is narrow).
// bf16 and fp16 are plain casts with scale 1.
bool FormatIsScaled(Format format);
// The scale of a group whose largest magnitude is amax (> 0): amax / FormatMax for a scaled
// format; for a cast scaled anyway (bf16, fp16: QuantSpec::scale_casts, the backward's P and dS,
// docs/math.md §4.2) the smallest power of two at least that, so that dividing and
// multiplying by it are exact and a value's rounding is the cast's own over a moved range.
float ScaleOfMax(Format format, float amax);
// Whether x / scale equals x * (1 / scale) for every x: scale a power of two whose inverse is
// a normal float. Kernels then multiply, a division costing several times a product.
inline bool InverseIsExact(float scale) {
  const uint32_t bits = std::bit_cast<uint32_t>(scale);
  const uint32_t exponent = bits >> 23;  // the sign bit clear: at most 255
  return (bits & 0x7FFFFFu) == 0 && exponent >= 1 && exponent <= 253;
}

// The scale for values in [-1, 1] that get no quantizer of their own (P, K-interval's grid):
// 1/127 for int8, 1 for the float formats.
inline float UnitScale(Format format) { return format == Format::kInt8 ? 1.0f / 127.0f : 1.0f; }

// Scalar codecs. Codes of the 8-bit formats are bytes (int8 as its two's-complement byte).
uint16_t EncodeBf16(float x);
float DecodeBf16(uint16_t code);
uint16_t EncodeFp16(float x);
float DecodeFp16(uint16_t code);
uint8_t EncodeE4M3(float x);
float DecodeE4M3(uint8_t code);
uint8_t EncodeE5M2(float x);
float DecodeE5M2(uint8_t code);
int8_t EncodeInt8(float x);
inline float DecodeInt8(int8_t code) { return float(code); }

// Encode then decode: x rounded to the nearest value of `format` (x itself for fp32).
float RoundToFormat(Format format, float x);
// The same through a scale, as quantizers and kernels round: x / scale, rounded, times scale.
inline float RoundToFormat(Format format, float x, float scale) {
  return format == Format::kFp32 ? x : RoundToFormat(format, x / scale) * scale;
}

}  // namespace lpattn::quant

#endif  // LPATTN_QUANT_FORMAT_H_
