// tanh-GELU over spans of floats, vectorised with Highway and dispatched per call: the MLP's
// activation costs as much as one of its matmuls when written with scalar exp.
//   gelu(x) = x sigmoid(2u) = 0.5 x (1 + tanh u),  u = sqrt(2/pi) (x + 0.044715 x^3)
#include "harness/model/gelu.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "harness/model/gelu.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "harness/model/span_tail-inl.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn::harness {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// sigmoid(2u) for the GELU argument x.
template <class D, class V>
HWY_INLINE V GeluGate(D d, V x) {
  const V u = hn::Mul(hn::Set(d, 0.7978845608028654f),
                      hn::MulAdd(hn::Mul(hn::Set(d, 0.044715f), hn::Mul(x, x)), x, x));
  const V one = hn::Set(d, 1.0f);
  return hn::Div(one, hn::Add(one, hn::Exp(d, hn::Mul(hn::Set(d, -2.0f), u))));
}

// du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
template <class D, class V>
HWY_INLINE V GeluSlope(D d, V x) {
  return hn::Mul(hn::Set(d, 0.7978845608028654f),
                 hn::MulAdd(hn::Set(d, 3.0f * 0.044715f), hn::Mul(x, x), hn::Set(d, 1.0f)));
}

void GeluForwardSpan(float* HWY_RESTRICT out, const float* HWY_RESTRICT inp, size_t n) {
  const hn::ScalableTag<float> d;
  ForVectors(d, n, [&](size_t i, size_t count) HWY_ATTR {
    const auto x = LoadSome(d, inp + i, count);
    StoreSome(hn::Mul(x, GeluGate(d, x)), d, out + i, count);
  });
}

// dinp (+)= dout (s + 2 x s (1 - s) du/dx) with s = sigmoid(2u).
void GeluBackwardSpan(float* HWY_RESTRICT dinp, const float* HWY_RESTRICT inp,
                      const float* HWY_RESTRICT dout, size_t n, bool accumulate) {
  const hn::ScalableTag<float> d;
  const auto one = hn::Set(d, 1.0f), two = hn::Set(d, 2.0f);
  ForVectors(d, n, [&](size_t i, size_t count) HWY_ATTR {
    const auto x = LoadSome(d, inp + i, count), s = GeluGate(d, x);
    const auto local =
        hn::MulAdd(hn::Mul(two, hn::Mul(x, s)), hn::Mul(hn::Sub(one, s), GeluSlope(d, x)), s);
    const auto acc = accumulate ? LoadSome(d, dinp + i, count) : hn::Zero(d);
    StoreSome(hn::MulAdd(LoadSome(d, dout + i, count), local, acc), d, dinp + i, count);
  });
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn::harness
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn::harness {

HWY_EXPORT(GeluForwardSpan);
HWY_EXPORT(GeluBackwardSpan);

void GeluForwardSimd(float* out, const float* inp, size_t n) {
  HWY_DYNAMIC_DISPATCH(GeluForwardSpan)(out, inp, n);
}
void GeluBackwardSimd(float* dinp, const float* inp, const float* dout, size_t n,
                      bool accumulate) {
  HWY_DYNAMIC_DISPATCH(GeluBackwardSpan)(dinp, inp, dout, n, accumulate);
}

}  // namespace lpattn::harness
#endif  // HWY_ONCE
