// Scalar codecs of the low-precision formats (docs/math.md §4): one minifloat codec
// parameterised by the format's layout, plus int8.
#include "quant/format.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "quant/minifloat.h"

namespace lpattn::quant {
namespace {

// Round to nearest even. Normal results come from rounding fp32's bit pattern (a carry out of
// the mantissa correctly bumps the exponent); results below the format's smallest normal are
// multiples of its subnormal quantum and come from an exact scaling and nearbyint.
uint32_t EncodeMini(const MiniFloat& f, float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (bits >> 31) << (f.bits - 1);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | f.nan_code;
  uint32_t code;
  if (abs < f.MinNormalBits()) {
    const double scaled = std::ldexp(double(std::bit_cast<float>(abs)), -f.SubnormalExp());
    code = uint32_t(std::nearbyint(scaled));
  } else {
    const int shift = 23 - f.mantissa_bits;
    const uint32_t rounded = abs + ((1u << (shift - 1)) - 1) + ((abs >> shift) & 1u);
    code = (rounded >> shift) - f.Rebias();
  }
  if (code > f.max_code) code = f.saturating ? f.max_code : f.inf_code;
  return sign | code;
}

float DecodeMini(const MiniFloat& f, uint32_t code) {
  const bool negative = (code >> (f.bits - 1)) & 1u;
  const uint32_t mag = code & ((1u << (f.bits - 1)) - 1);
  float value;
  if (mag > f.max_code) {
    value = (f.inf_code != 0 && mag == f.inf_code) ? std::numeric_limits<float>::infinity()
                                                  : std::numeric_limits<float>::quiet_NaN();
  } else {
    const uint32_t exponent = mag >> f.mantissa_bits;
    const uint32_t mantissa = mag & ((1u << f.mantissa_bits) - 1);
    const uint32_t significand = exponent == 0 ? mantissa : mantissa | (1u << f.mantissa_bits);
    const int scale = std::max<int>(int(exponent), 1) - f.bias - f.mantissa_bits;
    value = float(std::ldexp(double(significand), scale));
  }
  return negative ? -value : value;
}

}  // namespace

const char* FormatName(Format format) {
  switch (format) {
    case Format::kFp32: return "fp32";
    case Format::kBf16: return "bf16";
    case Format::kFp16: return "fp16";
    case Format::kFp8E4M3: return "fp8e4m3";
    case Format::kFp8E5M2: return "fp8e5m2";
    case Format::kInt8: return "int8";
  }
  return "?";
}

std::optional<Format> ParseFormat(std::string_view name) {
  for (Format f : kAllFormats) {
    if (name == FormatName(f)) return f;
  }
  return std::nullopt;
}

std::string FormatNames() {
  std::string names;
  for (Format f : kAllFormats) names += std::string(names.empty() ? "" : ", ") + FormatName(f);
  return names;
}

int FormatBytes(Format format) {
  switch (format) {
    case Format::kFp32: return 4;
    case Format::kBf16:
    case Format::kFp16: return 2;
    default: return 1;
  }
}

float FormatMax(Format format) {
  switch (format) {
    case Format::kFp32: return std::numeric_limits<float>::max();
    case Format::kBf16: return DecodeBf16(uint16_t(kBf16Layout.max_code));
    case Format::kFp16: return 65504.0f;
    case Format::kFp8E4M3: return 448.0f;
    case Format::kFp8E5M2: return 57344.0f;
    case Format::kInt8: return 127.0f;
  }
  return 0.0f;
}

bool FormatIsScaled(Format format) {
  return format == Format::kFp8E4M3 || format == Format::kFp8E5M2 || format == Format::kInt8;
}

float ScaleOfMax(Format format, float amax) {
  const float rounded = amax / FormatMax(format);
  if (FormatIsScaled(format)) return rounded;
  // A normal ratio: the next power of two from its bits (kernels ask once a block). Its
  // rounding moves amax / scale by at most 2^-24 of FormatMax, below half the format's ulp.
  const uint32_t bits = std::bit_cast<uint32_t>(rounded);
  if (rounded >= std::numeric_limits<float>::min() && rounded <= 0x1p+126f) {
    return (bits & 0x7FFFFFu) == 0 ? rounded
                                   : std::bit_cast<float>((bits & 0x7F800000u) + 0x800000u);
  }
  // In double: an fp32 ratio below fp32's normal range would round down, and amax over its
  // power of two overflow the format. 2^-149, the least scale, maps no amax past FormatMax.
  const double ratio = double(amax) / double(FormatMax(format));
  if (!(ratio > 0.0) || !std::isfinite(ratio)) return float(ratio);
  int exponent;
  const double fraction = std::frexp(ratio, &exponent);  // ratio = fraction 2^exponent
  const double power = fraction == 0.5 ? ratio : std::ldexp(1.0, exponent);
  return float(std::max(power, 0x1p-149));
}

uint16_t EncodeBf16(float x) { return uint16_t(EncodeMini(kBf16Layout, x)); }
float DecodeBf16(uint16_t code) { return std::bit_cast<float>(uint32_t(code) << 16); }
uint16_t EncodeFp16(float x) { return uint16_t(EncodeMini(kFp16Layout, x)); }
float DecodeFp16(uint16_t code) { return DecodeMini(kFp16Layout, code); }
uint8_t EncodeE4M3(float x) { return uint8_t(EncodeMini(kE4M3Layout, x)); }
float DecodeE4M3(uint8_t code) { return DecodeMini(kE4M3Layout, code); }
uint8_t EncodeE5M2(float x) { return uint8_t(EncodeMini(kE5M2Layout, x)); }
float DecodeE5M2(uint8_t code) { return DecodeMini(kE5M2Layout, code); }

int8_t EncodeInt8(float x) {
  if (std::isnan(x)) return 0;
  if (x >= 127.0f) return 127;
  if (x <= -127.0f) return -127;
  return int8_t(std::nearbyint(x));
}

float RoundToFormat(Format format, float x) {
  switch (format) {
    case Format::kFp32: return x;
    case Format::kBf16: return DecodeBf16(EncodeBf16(x));
    case Format::kFp16: return DecodeFp16(EncodeFp16(x));
    case Format::kFp8E4M3: return DecodeE4M3(EncodeE4M3(x));
    case Format::kFp8E5M2: return DecodeE5M2(EncodeE5M2(x));
    case Format::kInt8: return DecodeInt8(EncodeInt8(x));
  }
  return x;
}

}  // namespace lpattn::quant
