// exp for attention weights: a shorter dependency chain than Highway's Exp (which handles the
// full float range) at the same accuracy, because softmax arguments lie in a known range.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_SKELETON_FAST_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_SKELETON_FAST_EXP_INL_H_
#undef LPATTN_KERNELS_SKELETON_FAST_EXP_INL_H_
#else
#define LPATTN_KERNELS_SKELETON_FAST_EXP_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 2^f for |f| <= 1/2: a degree-5 minimax fit (relative error 7.5e-8, like Highway's Exp)
// evaluated by Estrin's scheme.
template <class D, class V>
HWY_INLINE V Exp2Fraction(D d, V f) {
  const V f2 = hn::Mul(f, f);
  const V p01 = hn::MulAdd(hn::Set(d, 6.931469671e-01f), f, hn::Set(d, 1.000000072e+00f));
  const V p23 = hn::MulAdd(hn::Set(d, 5.550713297e-02f), f, hn::Set(d, 2.402211973e-01f));
  const V p45 = hn::MulAdd(hn::Set(d, 1.327646453e-03f), f, hn::Set(d, 9.675541275e-03f));
  return hn::MulAdd(hn::Mul(f2, f2), p45, hn::MulAdd(f2, p23, p01));
}

#if HWY_TARGET <= HWY_AVX3
// exp(x) on 16 lanes of AVX-512 without a clamp: n = vrndscaleps(t) (round to nearest even,
// as adding 1.5 * 2^23 rounds) and P 2^n by vscalefps, so a NaN argument gives NaN (and -inf
// too, through f = -inf - -inf): ExpKeepNaN zeroes the arguments below its floor instead of
// testing for NaN, 7 instructions fewer. For -86 <= x <= 88 the same n and polynomial as the
// portable ExpClamped, P 2^n exact in both, and f rounded once here (the portable one's as the
// compiler contracts it): the same bits but for about one argument in 10^8
// (docs/performance.md §4.28).
HWY_INLINE hn::Vec512<float> ExpScalef(hn::Vec512<float> x) {
  const hn::Full512<float> d;
  const auto t = hn::Mul(x, hn::Set(d, 1.44269504088896341f));
  // The zero-masked forms with every lane set: GCC 12's unmasked ones start from an undefined
  // vector it then warns about.
  const hn::Vec512<float> n{
      _mm512_maskz_roundscale_ps(0xFFFF, t.raw, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
  // f = x log2(e) - n in one rounding, whatever the compiler would contract.
  const auto p = Exp2Fraction(d, hn::MulSub(x, hn::Set(d, 1.44269504088896341f), n));
  return hn::Vec512<float>{_mm512_maskz_scalef_ps(0xFFFF, p.raw, n.raw)};
}
#endif

// exp(x) = 2^n * P(f) with x log2(e) = n + f, n an integer, |f| <= 1/2, P = Exp2Fraction.
// x is clamped to [-86, 88], so exp(-inf) and any argument below -86 give exp(-86) = 4e-38
// (not 0: callers that need exact zeros mask them), and 2^n stays a normal float. NaN inputs
// give unspecified values: callers that propagate NaN test for it (ExpKeepNaN).
template <class D, class V>
HWY_INLINE V ExpClamped(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V kRound = hn::Set(d, 12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  x = hn::Min(hn::Max(x, hn::Set(d, -86.0f)), hn::Set(d, 88.0f));
#if HWY_TARGET <= HWY_AVX3
  if constexpr (hn::MaxLanes(D()) == 16) return ExpScalef(x);  // 3 instructions fewer
#endif
  const V t = hn::Mul(x, hn::Set(d, 1.44269504088896341f));
  const V shifted = hn::Add(t, kRound);
  const V p = Exp2Fraction(d, hn::Sub(t, hn::Sub(shifted, kRound)));
  // The low mantissa bits of `shifted` hold n; moving them into the exponent scales by 2^n.
  const auto n = hn::Sub(hn::BitCast(di, shifted), hn::BitCast(di, kRound));
  return hn::BitCast(d, hn::Add(hn::BitCast(di, p), hn::ShiftLeft<23>(n)));
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
