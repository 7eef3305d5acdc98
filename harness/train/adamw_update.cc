// AdamW's element update with Highway (docs/harness.md §1.2).
#include "harness/train/adamw_update.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "harness/train/adamw_update.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cmath>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn::harness {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void AdamWUpdate(const AdamConstants& k, const float decay, const size_t n,
                 const float* HWY_RESTRICT grads, float* HWY_RESTRICT params,
                 float* HWY_RESTRICT m, float* HWY_RESTRICT v) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto beta1 = hn::Set(d, k.beta1), beta2 = hn::Set(d, k.beta2);
  const auto rest1 = hn::Set(d, 1.0f - k.beta1), rest2 = hn::Set(d, 1.0f - k.beta2);
  const auto bias1 = hn::Set(d, k.bias1), bias2 = hn::Set(d, k.bias2);
  const auto clip = hn::Set(d, k.clip), eps = hn::Set(d, k.eps), lr = hn::Set(d, k.lr);
  const auto decay_v = hn::Set(d, decay);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto g = hn::Mul(hn::LoadU(d, grads + i), clip);
    const auto m_i = hn::Add(hn::Mul(beta1, hn::LoadU(d, m + i)), hn::Mul(rest1, g));
    const auto v_i = hn::Add(hn::Mul(beta2, hn::LoadU(d, v + i)), hn::Mul(hn::Mul(rest2, g), g));
    hn::StoreU(m_i, d, m + i);
    hn::StoreU(v_i, d, v + i);
    const auto m_hat = hn::Div(m_i, bias1), v_hat = hn::Div(v_i, bias2);
    const auto p = hn::LoadU(d, params + i);
    const auto step =
        hn::Add(hn::Div(m_hat, hn::Add(hn::Sqrt(v_hat), eps)), hn::Mul(decay_v, p));
    hn::StoreU(hn::Sub(p, hn::Mul(lr, step)), d, params + i);
  }
  for (; i < n; ++i) {  // the span's tail, the same operations one element at a time
    const float g = grads[i] * k.clip;
    m[i] = k.beta1 * m[i] + (1.0f - k.beta1) * g;
    v[i] = k.beta2 * v[i] + (1.0f - k.beta2) * g * g;
    const float m_hat = m[i] / k.bias1, v_hat = v[i] / k.bias2;
    params[i] -= k.lr * (m_hat / (std::sqrt(v_hat) + k.eps) + decay * params[i]);
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn::harness
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn::harness {

HWY_EXPORT(AdamWUpdate);

void AdamWUpdateSimd(const AdamConstants& k, float decay, size_t n, const float* grads,
                     float* params, float* m, float* v) {
  HWY_DYNAMIC_DISPATCH(AdamWUpdate)(k, decay, n, grads, params, m, v);
}

}  // namespace lpattn::harness
#endif  // HWY_ONCE
