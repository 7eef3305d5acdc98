// The precision option of every kernel call (docs/math.md §4): the formats of the Q K^T
// operands and of the P V operands, the scale granularity, and K smoothing. The row transform
// stays in fp32. The default is fp32 everywhere, bit-identical to a call without the option.
#ifndef LPATTN_KERNELS_PRECISION_H_
#define LPATTN_KERNELS_PRECISION_H_

#include <cstdint>
#include <optional>
#include <string>

#include "quant/format.h"
#include "quant/quantizer.h"

namespace lpattn {

// How quantized operands are computed with. Both give the same numbers up to fp32 summation
// order (tested): the native path only changes where the conversion happens.
enum class ComputePath {
  // Low-precision storage read by the kernels where the CPU gains from it, in the forward of
  // the dense transforms (exact, K-interval): bf16 and fp16 K and V held as 16-bit codes, fp8
  // ones (scales per tensor, token or block) as 1-byte codes, decoded tile by tile; int8 Q K^T
  // from integer products (scales per tensor, token or block, no smoothing); int8 P V from
  // integer products with p = int8 and V's scale per tensor or per channel. The products run
  // on the CPU's own units where it has them: AMX bf16 tiles for bf16, fp16 and fp8 scores and
  // bf16 P V, AMX int8 tiles and u8 x s8 VNNI for int8 (docs/math.md §4.1). Everything else
  // is simulated.
  kNative,
  kSimulated,  // quantize, then dequantize into fp32 copies, for every operand
};

// The kernels' tiles, which two roundings follow (aligned at query 0 and key 0 of each head):
// P is rounded against the row's running max after each block of kBlockKeys keys (§4), and the backward's P and dS take one scale per block of kBlockQueries x kBlockKeys under
// a scaled format (§4.2).
inline constexpr int64_t kBlockQueries = 96;
inline constexpr int64_t kBlockKeys = 48;

struct Precision {
  quant::Format qk = quant::Format::kFp32;  // Q and K
  quant::Format pv = quant::Format::kFp32;  // V
  // P, the weights fed to the P V product, each at most 1: taken relative to the running max of
  // the online softmax after each block of kBlockKeys keys (no statistics pass is needed), int8
  // with the fixed scale 1/127, the float formats unscaled; thresholded attention's signed
  // weights unscaled. Z sums the unrounded weights. The backward uses P unrounded, with
  // Delta = dO . o of the forward's (rounded) o where a transform needs it.
  quant::Format p = quant::Format::kFp32;
  // "pfold": with p = int8 over a KvCache's int8 V (scales per token), each weight is rounded
  // with its token's V scale folded in, on a scale per row and key tile (w s_t over the row's
  // largest such product in the tile), so that P V runs on integer dot products
  // (docs/math.md §4.3). Only a cached forward of exact or K-interval attention takes it.
  bool p_folds_v = false;
  // Scales of Q, K and V: per tensor, token, block of `block` tokens, or channel (K and V;
  // Q then takes per-token scales, since a per-channel Q scale cannot leave the dot product).
  quant::Granularity granularity = quant::Granularity::kBlock;
  // V's own granularity when set ("vgran"), else `granularity`. Native int8 P V needs V's scale
  // outside the sum over keys: per tensor or per channel (then Q and K can keep per-token scales
  // for an integer Q K^T).
  std::optional<quant::Granularity> value_granularity;
  int64_t block = quant::kDefaultBlock;
  bool smooth_k = false;  // K smoothing (quantizer.h): a no-op with qk = fp32
  ComputePath path = ComputePath::kNative;
  // The low-precision backward (docs/math.md §4.2): the format of the operands of its products
  // dV = P^T dO, dQ = dS K and dK = dS^T Q (fp32, bf16, fp16 or int8; fp32 is the plain
  // backward), and of dP = dO V^T's ("bwd_dp"; unset: bf16 under bwd=int8, else bwd's).
  quant::Format bwd = quant::Format::kFp32;
  std::optional<quant::Format> bwd_dp;

  bool IsFp32() const {
    return qk == quant::Format::kFp32 && pv == quant::Format::kFp32 && p == quant::Format::kFp32;
  }
  quant::Format BackwardDpFormat() const {
    return bwd_dp.value_or(bwd == quant::Format::kInt8 ? quant::Format::kBf16 : bwd);
  }
  bool BackwardIsFp32() const {
    return bwd == quant::Format::kFp32 && BackwardDpFormat() == quant::Format::kFp32;
  }
  // The scale P is quantized with: 1/127 for int8, 1 for the float formats.
  float PScale() const { return quant::UnitScale(p); }
  // The quantizer of each operand.
  quant::QuantSpec QuerySpec() const;
  quant::QuantSpec KeySpec() const;
  quant::QuantSpec ValueSpec() const;
  // §4.2: the backward's rounding of Q, K and dO where its products sum over tokens (a scale
  // per channel), and of dO and V in dP = dO V^T (a scale per token); int8 and fp16 scaled.
  quant::QuantSpec BackwardTokenSumSpec() const;
  quant::QuantSpec BackwardDpSpec() const;
};

// Option text, "key=value" items separated by ',' or ':': qk=FORMAT, pv=FORMAT, p=FORMAT (fp32,
// bf16, fp16, fp8e4m3, fp8e5m2, int8), gran=tensor|token|block|channel, vgran=... (V alone),
// block=N (>= 1), smooth_k=0|1, path=native|sim, bwd=FORMAT and bwd_dp=FORMAT (fp32, bf16,
// fp16, int8). Throws std::invalid_argument with the offending item.
Precision ParsePrecision(const std::string& text);
// The options that differ from the default, ':'-separated ("" for fp32); parses back.
std::string FormatPrecision(const Precision& precision);
// Throws std::invalid_argument for a block size below 1.
void ValidatePrecision(const Precision& precision);

}  // namespace lpattn

#endif  // LPATTN_KERNELS_PRECISION_H_
