// Quantizers (docs/math.md §4): a scale per tensor, token, block of tokens or channel, K
// smoothing, and simulation (quantize, then dequantize into fp32).
//
// A scaled format (fp8, int8; FormatIsScaled) divides each group by scale = amax / FormatMax,
// amax the group's largest magnitude, so the group's extreme maps to the format's; bf16 and fp16
// are casts (scale 1, granularity irrelevant) unless QuantSpec::scale_casts gives them a power
// of two per group (ScaleOfMax). An all-zero group quantizes to zeros.
#ifndef LPATTN_QUANT_QUANTIZER_H_
#define LPATTN_QUANT_QUANTIZER_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "quant/format.h"

namespace lpattn::quant {

enum class Granularity : uint8_t { kTensor, kToken, kBlock, kChannel };

// Names as written in options: tensor, token, block, channel.
const char* GranularityName(Granularity granularity);
std::optional<Granularity> ParseGranularity(std::string_view name);

inline constexpr int64_t kDefaultBlock = 64;

struct QuantSpec {
  Format format = Format::kFp32;
  Granularity granularity = Granularity::kBlock;
  int64_t block = kDefaultBlock;  // tokens per scale with Granularity::kBlock
  // Subtract each channel's mean over tokens (per batch and head) before quantizing and add it
  // back after dequantizing: the rounding then sees the centred values. (For K this shifts each
  // score row by q . mean, which softmax ignores; adding it back keeps every transform exact.)
  bool smooth = false;
  // Scale bf16 and fp16 groups too (a power of two, ScaleOfMax), where values may be too small
  // for a plain cast: the low-precision backward's fp16 operands (docs/math.md §4.2). Scaled
  // formats ignore it.
  bool scale_casts = false;
};

// A [batch, heads, tokens, dim] fp32 tensor read through element strides; dim is contiguous.
struct TensorView {
  const float* data = nullptr;
  int64_t batch = 1, heads = 1, tokens = 1, dim = 1;
  int64_t batch_stride = 0, head_stride = 0, token_stride = 0;
};

// Checks what can be checked without the data (block >= 1). Throws std::invalid_argument with
// `what` (the operand's name) in the message.
void ValidateSpec(const QuantSpec& spec, const char* what);

// Simulation: writes the dequantized tensor, dense [batch, heads, tokens, dim], to out (which
// must not overlap x). Throws std::invalid_argument, before writing anything, if a scaled
// format meets a non-finite value (its scale would be non-finite) or a nonzero group whose
// scale underflows to zero.
void QuantizeDequantize(const QuantSpec& spec, const TensorView& x, float* out, const char* what);

// The storage of the native path: each element's code (FormatBytes(spec.format) == 1: fp8 or
// int8) into codes, dense [batch, heads, tokens, dim], and each token's scale (its group's)
// into token_scales [batch, heads, tokens], so that decode(code) * scale is exactly what
// QuantizeDequantize writes. Not for per-channel scales or smoothing (std::invalid_argument);
// otherwise throws as QuantizeDequantize does, before writing anything.
void QuantizeToCodes(const QuantSpec& spec, const TensorView& x, uint8_t* codes,
                     float* token_scales, const char* what);

// The same for per-channel scales: codes dense [batch, heads, tokens, dim] and each channel's
// scale into channel_scales [batch, heads, dim], with decode(code) * scale again exactly what
// QuantizeDequantize writes. Needs an 8-bit format, spec.granularity == kChannel and no
// smoothing (std::invalid_argument); otherwise throws as QuantizeDequantize does.
void QuantizeToChannelCodes(const QuantSpec& spec, const TensorView& x, uint8_t* codes,
                            float* channel_scales, const char* what);

}  // namespace lpattn::quant

#endif  // LPATTN_QUANT_QUANTIZER_H_
