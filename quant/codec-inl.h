// Vector codecs of the low-precision formats: the same rounding as the scalar ones in
// format.cc (round to nearest even, saturation, NaN), lane by lane on int32 codes, so that
// kernels can convert operands in registers.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_QUANT_CODEC_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_QUANT_CODEC_INL_H_
#undef LPATTN_QUANT_CODEC_INL_H_
#else
#define LPATTN_QUANT_CODEC_INL_H_
#endif

#include <stdint.h>

#include "hwy/highway.h"
#include "quant/format.h"
#include "quant/minifloat.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace quant {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The codes of x in format kF (sign at bit kF.bits - 1), one per int32 lane. Normal results
// round fp32's bit pattern; subnormal ones (formats narrower than fp32's exponent range) are
// an exact power-of-two scaling rounded to an integer.
template <MiniFloat kF, class DF>
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> EncodeMiniFloat(DF df, hn::Vec<DF> x) {
  const hn::RebindToSigned<DF> di;
  const hn::RebindToUnsigned<DF> du;
  constexpr int kShift = 23 - kF.mantissa_bits;
  const auto bits = hn::BitCast(di, x);
  const auto abs = hn::And(bits, hn::Set(di, 0x7FFFFFFF));
  const auto sign =
      hn::BitCast(di, hn::ShiftRight<32 - kF.bits>(hn::BitCast(du, hn::AndNot(abs, bits))));
  const auto lsb = hn::And(hn::ShiftRight<kShift>(abs), hn::Set(di, 1));
  const auto rounded = hn::Add(hn::Add(abs, hn::Set(di, (1 << (kShift - 1)) - 1)), lsb);
  auto code = hn::Sub(hn::ShiftRight<kShift>(rounded), hn::Set(di, int32_t(kF.Rebias())));
  if constexpr (kF.bias != 127) {
    const auto scaled = hn::Mul(hn::BitCast(df, abs), hn::Set(df, Pow2(-kF.SubnormalExp())));
    const auto subnormal = hn::Lt(abs, hn::Set(di, int32_t(kF.MinNormalBits())));
    code = hn::IfThenElse(subnormal, hn::ConvertTo(di, hn::Round(scaled)), code);
  }
  const auto overflow = hn::Gt(code, hn::Set(di, int32_t(kF.max_code)));
  code = hn::IfThenElse(overflow, hn::Set(di, int32_t(kF.saturating ? kF.max_code : kF.inf_code)),
                        code);
  code = hn::IfThenElse(hn::Gt(abs, hn::Set(di, 0x7F800000)), hn::Set(di, int32_t(kF.nan_code)),
                        code);
  return hn::Or(code, sign);
}

// The values of codes in format kF (int32 lanes) as floats.
template <MiniFloat kF, class DF>
HWY_INLINE hn::Vec<DF> DecodeMiniFloat(DF df, hn::Vec<hn::RebindToSigned<DF>> code) {
  const hn::RebindToSigned<DF> di;
  constexpr int kShift = 23 - kF.mantissa_bits;
  const auto sign = hn::ShiftLeft<32 - kF.bits>(hn::And(code, hn::Set(di, 1 << (kF.bits - 1))));
  const auto mag = hn::And(code, hn::Set(di, (1 << (kF.bits - 1)) - 1));
  auto bits = hn::Add(hn::ShiftLeft<kShift>(mag), hn::Set(di, int32_t(kF.Rebias() << kShift)));
  if constexpr (kF.bias != 127) {  // bf16 shares fp32's exponent: its bits are fp32's top half
    const auto subnormal = hn::Lt(mag, hn::Set(di, 1 << kF.mantissa_bits));
    const auto small = hn::Mul(hn::ConvertTo(df, mag), hn::Set(df, Pow2(kF.SubnormalExp())));
    bits = hn::IfThenElse(subnormal, hn::BitCast(di, small), bits);
    const int32_t inf_or_nan = kF.inf_code != 0 ? 0x7F800000 : 0x7FC00000;
    const auto special = hn::IfThenElse(hn::Eq(mag, hn::Set(di, int32_t(kF.inf_code))),
                                        hn::Set(di, inf_or_nan), hn::Set(di, 0x7FC00000));
    bits = hn::IfThenElse(hn::Gt(mag, hn::Set(di, int32_t(kF.max_code))), special, bits);
  }
  return hn::BitCast(df, hn::Or(bits, sign));
}

// DecodeMiniFloat(EncodeMiniFloat(x)) bit for bit, without the codes: fp32's bit pattern
// rounded in place to kF's mantissa (normal results); a result below kF's smallest normal
// rounded to its subnormal quantum by adding and subtracting a power of two whose ulp is that
// quantum (exact, round to nearest even); overflow to kF's largest value (saturating formats)
// or infinity; NaN to the decoder's quiet NaN with x's sign. Half the instructions of the
// round trip through codes, for the quantizers' simulation copies and P's rounding.
template <MiniFloat kF, class DF>
HWY_INLINE hn::Vec<DF> RoundMiniFloat(DF df, hn::Vec<DF> x) {
  const hn::RebindToSigned<DF> di;
  constexpr int kShift = 23 - kF.mantissa_bits;
  const auto bits = hn::BitCast(di, x);
  const auto abs = hn::And(bits, hn::Set(di, 0x7FFFFFFF));
  const auto sign = hn::AndNot(abs, bits);
  const auto lsb = hn::And(hn::ShiftRight<kShift>(abs), hn::Set(di, 1));
  auto rounded = hn::And(hn::Add(hn::Add(abs, hn::Set(di, (1 << (kShift - 1)) - 1)), lsb),
                         hn::Set(di, -(1 << kShift)));
  if constexpr (kF.bias != 127) {
    const auto quantum_ulp = hn::Set(df, Pow2(kF.SubnormalExp() + 23));
    const auto small = hn::Sub(hn::Add(hn::BitCast(df, abs), quantum_ulp), quantum_ulp);
    const auto subnormal = hn::Lt(abs, hn::Set(di, int32_t(kF.MinNormalBits())));
    rounded = hn::IfThenElse(subnormal, hn::BitCast(di, small), rounded);
  }
  // The largest finite magnitude's fp32 bits (its code widened as DecodeMiniFloat does).
  constexpr int32_t kMaxBits =
      int32_t(((kF.max_code << kShift) + (kF.Rebias() << kShift)) & 0x7FFFFFFF);
  const int32_t overflow_bits = kF.saturating ? kMaxBits : 0x7F800000;
  rounded = hn::IfThenElse(hn::Gt(rounded, hn::Set(di, kMaxBits)), hn::Set(di, overflow_bits),
                           rounded);
  rounded = hn::IfThenElse(hn::Gt(abs, hn::Set(di, 0x7F800000)), hn::Set(di, 0x7FC00000),
                           rounded);
  return hn::BitCast(df, hn::Or(rounded, sign));
}

// int8 codes of x: round to nearest even, clamped to [-127, 127]; NaN gives 0.
// fp16 through F16C on AVX2 and AVX3: vcvtps2ph rounds to nearest even exactly as the minifloat
// codec does (subnormals, overflow to inf included; only NaN payloads may differ, NaN staying
// NaN) and vcvtph2ps is exact, at a fraction of the codec's instructions. SSE4 has no F16C.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
#define LPATTN_QUANT_F16C 1
#else
#define LPATTN_QUANT_F16C 0
#endif
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> EncodeFp16Lanes([[maybe_unused]] DF df, hn::Vec<DF> x) {
#if LPATTN_QUANT_F16C
  const hn::Rebind<hwy::float16_t, DF> dh;
  const hn::Rebind<uint16_t, DF> du16;
  return hn::PromoteTo(hn::RebindToSigned<DF>(), hn::BitCast(du16, hn::DemoteTo(dh, x)));
#else
  return EncodeMiniFloat<kFp16Layout>(df, x);
#endif
}
template <class DF>
HWY_INLINE hn::Vec<DF> DecodeFp16Lanes(DF df, hn::Vec<hn::RebindToSigned<DF>> code) {
#if LPATTN_QUANT_F16C
  const hn::Rebind<hwy::float16_t, DF> dh;
  const hn::Rebind<uint16_t, DF> du16;
  return hn::PromoteTo(df, hn::BitCast(dh, hn::DemoteTo(du16, code)));
#else
  return DecodeMiniFloat<kFp16Layout>(df, code);
#endif
}

// N 16-bit codes at `codes` decoded to fp32, the values DecodeFp16Lanes and
// DecodeMiniFloat<kBf16Layout> give the widened codes, without widening them first: fp16 by
// F16C straight from memory (one instruction a vector where the widened route took four), bf16
// as the upper halves of fp32 words (its codes are fp32's top 16 bits: NaNs, infinities and
// subnormals included). Decode tiles' in-register rows (score_tile-inl.h's LanesAt), the
// per-tile decoder (tile_workspace-inl.h's DecodeRows) and the row codec read codes with them.
template <class DF>
HWY_INLINE hn::Vec<DF> LoadFp16Lanes(DF df, const uint16_t* HWY_RESTRICT codes) {
#if LPATTN_QUANT_F16C
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(codes)));
#else
  const hn::Rebind<uint16_t, DF> d16;
  return DecodeFp16Lanes(df, hn::PromoteTo(hn::RebindToSigned<DF>(), hn::LoadU(d16, codes)));
#endif
}
template <class DF>
HWY_INLINE hn::Vec<DF> LoadBf16Lanes(DF df, const uint16_t* HWY_RESTRICT codes) {
  const hn::Rebind<uint16_t, DF> d16;
  const hn::RebindToUnsigned<DF> du;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, codes))));
}

// fp8 codes (one byte a lane) as floats, exactly as DecodeMiniFloat gives them. With F16C
// through fp16, a few instructions a vector where the minifloat decoder takes a dozen: e5m2 is
// fp16's top byte (its infinities and NaNs included), and e4m3's magnitude shifted 7 into
// fp16's exponent and mantissa is its value times 2^-8 (bias 7 against 15, subnormals too),
// except its NaN (magnitude 0x7F; e4m3 has no infinity), which reads as 1.875 there and is
// made a NaN (only NaNs' sign and payload may differ from the minifloat decoder's). kNoNaN:
// the codes are known to hold no NaN (a KvCache's, whose Append rejects one), and e4m3 skips
// that test.
template <MiniFloat kF, bool kNoNaN = false, class DF>
HWY_INLINE hn::Vec<DF> DecodeFp8Lanes(DF df, hn::Vec<hn::Rebind<uint8_t, DF>> codes);

// e4m3 codes holding no NaN as 2^-8 times their values (exact): the fp16 route's values before
// its rebias, for callers that fold the 2^8 into a scale they multiply by anyway. The code
// sign-extended to 16 bits and shifted 7 puts the magnitude in place and the sign at bit 15,
// with a stray copy of the sign at bit 14 that the mask clears.
template <class DF>
HWY_INLINE hn::Vec<DF> DecodeE4M3Over256(DF df, hn::Vec<hn::Rebind<uint8_t, DF>> codes) {
#if LPATTN_QUANT_F16C
  const hn::Rebind<int16_t, DF> di16;
  const hn::Rebind<int8_t, DF> di8;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const auto wide = hn::PromoteTo(di16, hn::BitCast(di8, codes));
  const auto half = hn::And(hn::ShiftLeft<7>(wide), hn::Set(di16, int16_t(0xBF80)));
  return hn::PromoteTo(df, hn::BitCast(dh, half));
#else
  const hn::RebindToSigned<DF> di;
  return hn::Mul(DecodeMiniFloat<kE4M3Layout>(
                     df, hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<DF>(), codes))),
                 hn::Set(df, 1.0f / 256.0f));
#endif
}

template <MiniFloat kF, bool kNoNaN, class DF>
HWY_INLINE hn::Vec<DF> DecodeFp8Lanes(DF df, hn::Vec<hn::Rebind<uint8_t, DF>> codes) {
  static_assert(kF.bits == 8, "DecodeFp8Lanes decodes the 8-bit formats");
#if LPATTN_QUANT_F16C
  if constexpr (kF.bias == 15) {
    const hn::Rebind<uint16_t, DF> du16;
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::BitCast(dh, hn::ShiftLeft<8>(hn::PromoteTo(du16, codes))));
  } else {
    static_assert(kF.bias == 7 && kF.mantissa_bits == 3, "e4m3's layout");
    const auto value = hn::Mul(DecodeE4M3Over256(df, codes), hn::Set(df, 256.0f));
    if constexpr (kNoNaN) return value;
    const auto nan = hn::Eq(hn::Abs(value), hn::Set(df, 480.0f));
    return hn::IfThenElse(nan, hn::NaN(df), value);
  }
#else
  const hn::RebindToSigned<DF> di;
  return DecodeMiniFloat<kF>(df, hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<DF>(), codes)));
#endif
}

// x rounded to fp16 and back: with F16C the two conversions alone, not EncodeFp16Lanes' and
// DecodeFp16Lanes' round trip through int32 codes.
template <class DF>
HWY_INLINE hn::Vec<DF> RoundFp16Lanes(DF df, hn::Vec<DF> x) {
#if LPATTN_QUANT_F16C
  return hn::PromoteTo(df, hn::DemoteTo(hn::Rebind<hwy::float16_t, DF>(), x));
#else
  return DecodeMiniFloat<kFp16Layout>(df, EncodeMiniFloat<kFp16Layout>(df, x));
#endif
}
#undef LPATTN_QUANT_F16C

template <class DF>
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> EncodeInt8Lanes(DF df, hn::Vec<DF> x) {
  const hn::RebindToSigned<DF> di;
  const auto finite = hn::IfThenZeroElse(hn::IsNaN(x), x);
  const auto clamped = hn::Min(hn::Max(finite, hn::Set(df, -127.0f)), hn::Set(df, 127.0f));
  return hn::ConvertTo(di, hn::Round(clamped));
}

// x rounded to `format` with scale 1 (the float formats' casts, int8's integers): RoundLanes
// without its division and multiplication, which are exact then but not free; x itself for
// fp32.
template <class DF>
HWY_INLINE hn::Vec<DF> RoundLanesUnscaled(DF df, hn::Vec<DF> x, Format format) {
  switch (format) {
    case Format::kBf16:
      return RoundMiniFloat<kBf16Layout>(df, x);
    case Format::kFp16:
      return RoundFp16Lanes(df, x);
    case Format::kFp8E4M3:
      return RoundMiniFloat<kE4M3Layout>(df, x);
    case Format::kFp8E5M2:
      return RoundMiniFloat<kE5M2Layout>(df, x);
    case Format::kInt8:
      return hn::ConvertTo(df, EncodeInt8Lanes(df, x));
    case Format::kFp32:
      break;
  }
  return x;
}

// x rounded to `format` through `scale` (x / scale, rounded, times scale): the vector form of
// RoundToFormat(format, x, scale), bit for bit; x itself for fp32.
template <class DF>
HWY_INLINE hn::Vec<DF> RoundLanes(DF df, hn::Vec<DF> x, Format format, float scale) {
  if (format == Format::kFp32) return x;
  const auto vscale = hn::Set(df, scale);
  return hn::Mul(RoundLanesUnscaled(df, hn::Div(x, vscale), format), vscale);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace quant
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
