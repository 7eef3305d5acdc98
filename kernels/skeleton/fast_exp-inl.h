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

// exp(x) = 2^n * P(f) with x log2(e) = n + f, n an integer, |f| <= 1/2, and P a degree-5
// minimax fit of 2^f (relative error 7.5e-8, like Highway's Exp) evaluated by Estrin's scheme.
// x is clamped to [-86, 88], so exp(-inf) and any argument below -86 give exp(-86) = 4e-38
// (not 0: callers that need exact zeros mask them), and 2^n stays a normal float. NaN inputs
// give unspecified values: callers that propagate NaN test for it (ExpKeepNaN).
template <class D, class V>
HWY_INLINE V ExpClamped(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V kRound = hn::Set(d, 12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  x = hn::Min(hn::Max(x, hn::Set(d, -86.0f)), hn::Set(d, 88.0f));
  const V t = hn::Mul(x, hn::Set(d, 1.44269504088896341f));
  const V shifted = hn::Add(t, kRound);
  const V f = hn::Sub(t, hn::Sub(shifted, kRound));
  const V f2 = hn::Mul(f, f);
  const V p01 = hn::MulAdd(hn::Set(d, 6.931469671e-01f), f, hn::Set(d, 1.000000072e+00f));
  const V p23 = hn::MulAdd(hn::Set(d, 5.550713297e-02f), f, hn::Set(d, 2.402211973e-01f));
  const V p45 = hn::MulAdd(hn::Set(d, 1.327646453e-03f), f, hn::Set(d, 9.675541275e-03f));
  const V p = hn::MulAdd(hn::Mul(f2, f2), p45, hn::MulAdd(f2, p23, p01));
  // The low mantissa bits of `shifted` hold n; moving them into the exponent scales by 2^n.
  const auto n = hn::Sub(hn::BitCast(di, shifted), hn::BitCast(di, kRound));
  return hn::BitCast(d, hn::Add(hn::BitCast(di, p), hn::ShiftLeft<23>(n)));
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
