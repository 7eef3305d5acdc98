// bf16 rounding of the dense products' operands (docs/harness.md §1.1), vectorised with Highway
// and dispatched per call: in a scalar loop it took an eighth of a bf16 `small` step
// (docs/performance.md §4.22). Round to nearest even on the upper 16 bits: add 0x7FFF plus the
// lowest kept bit, then clear the low half; a NaN is kept quiet instead (the carry could turn it
// into an infinity). Bit-identical to the codec's EncodeBf16.
#include "harness/model/dense_product.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "harness/model/bf16_rounding.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cstring>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn::harness {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The rounded fp32 bit patterns (low halves zero) of a vector of floats' bits.
template <class DU>
HWY_INLINE hn::Vec<DU> RoundedBits(DU du, hn::Vec<DU> bits) {
  const hn::RebindToSigned<DU> di;
  const auto lowest_kept = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto rounded =
      hn::And(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), lowest_kept)), hn::Set(du, 0xFFFF0000u));
  const auto magnitude = hn::BitCast(di, hn::And(bits, hn::Set(du, 0x7FFFFFFFu)));
  const auto nan = hn::RebindMask(du, hn::Gt(magnitude, hn::Set(di, 0x7F800000)));
  const auto quiet = hn::And(hn::Or(bits, hn::Set(du, 0x00400000u)), hn::Set(du, 0xFFFF0000u));
  return hn::IfThenElse(nan, quiet, rounded);
}

uint32_t RoundedBitsScalar(uint32_t bits) {
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
  return nan ? (bits | 0x00400000u) & 0xFFFF0000u : rounded;
}

void RoundSpan(const float* in, float* out, size_t n) {  // in == out allowed
  const hn::ScalableTag<uint32_t> du;
  const hn::RebindToFloat<decltype(du)> df;
  const size_t lanes = hn::Lanes(du);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto bits = hn::BitCast(du, hn::LoadU(df, in + i));
    hn::StoreU(hn::BitCast(df, RoundedBits(du, bits)), df, out + i);
  }
  for (; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, in + i, sizeof(bits));
    bits = RoundedBitsScalar(bits);
    std::memcpy(out + i, &bits, sizeof(bits));
  }
}

void EncodeSpan(const float* HWY_RESTRICT in, uint16_t* HWY_RESTRICT out, size_t n) {
  const hn::ScalableTag<uint32_t> du;
  const hn::RebindToFloat<decltype(du)> df;
  const hn::RebindToSigned<decltype(du)> di;
  const hn::Rebind<uint16_t, decltype(du)> d16;
  const size_t lanes = hn::Lanes(du);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto bits = hn::BitCast(du, hn::LoadU(df, in + i));
    const auto upper = hn::ShiftRight<16>(RoundedBits(du, bits));  // <= 0xFFFF: exact demotion
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, upper)), d16, out + i);
  }
  for (; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, in + i, sizeof(bits));
    out[i] = uint16_t(RoundedBitsScalar(bits) >> 16);
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn::harness
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn::harness {

HWY_EXPORT(RoundSpan);
HWY_EXPORT(EncodeSpan);

void RoundToBf16(const float* in, float* out, size_t n) {
  HWY_DYNAMIC_DISPATCH(RoundSpan)(in, out, n);
}

void EncodeBf16Values(const float* in, uint16_t* out, size_t n) {
  HWY_DYNAMIC_DISPATCH(EncodeSpan)(in, out, n);
}

}  // namespace lpattn::harness
#endif  // HWY_ONCE
