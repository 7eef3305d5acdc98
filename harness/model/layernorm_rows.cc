// LayerNorm over rows of C floats, vectorised with Highway and dispatched per call (docs/harness.md
// §1): the row sums are the whole cost, and scalar float sums do not vectorise.
#include "harness/model/layernorm_rows.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "harness/model/layernorm_rows.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cmath>

#include "harness/model/span_tail-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn::harness {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void ForwardRows(float* HWY_RESTRICT out, float* HWY_RESTRICT mean, float* HWY_RESTRICT rstd,
                 const float* HWY_RESTRICT inp, const float* HWY_RESTRICT weight,
                 const float* HWY_RESTRICT bias, size_t rows, size_t C, float eps) {
  const hn::ScalableTag<float> d;
  for (size_t r = 0; r < rows; ++r) {
    const float* x = inp + r * C;
    auto sum = hn::Zero(d);
    ForVectors(d, C, [&](size_t i, size_t n) HWY_ATTR {
      sum = hn::Add(sum, LoadSome(d, x + i, n));
    });
    const float mu = hn::GetLane(hn::SumOfLanes(d, sum)) / float(C);
    const auto mu_v = hn::Set(d, mu);
    auto squares = hn::Zero(d);
    ForVectors(d, C, [&](size_t i, size_t n) HWY_ATTR {
      const auto diff = hn::IfThenElseZero(hn::FirstN(d, n), hn::Sub(LoadSome(d, x + i, n), mu_v));
      squares = hn::MulAdd(diff, diff, squares);
    });
    const float var = hn::GetLane(hn::SumOfLanes(d, squares)) / float(C);
    const float s = 1.0f / std::sqrt(var + eps);
    const auto s_v = hn::Set(d, s);
    float* y = out + r * C;
    ForVectors(d, C, [&](size_t i, size_t n) HWY_ATTR {
      const auto norm = hn::Mul(hn::Sub(LoadSome(d, x + i, n), mu_v), s_v);
      const auto value =
          hn::MulAdd(norm, LoadSome(d, weight + i, n), LoadSome(d, bias + i, n));
      StoreSome(value, d, y + i, n);
    });
    mean[r] = mu;
    rstd[r] = s;
  }
}

void BackwardRows(float* HWY_RESTRICT dinp, const float* HWY_RESTRICT dout,
                  const float* HWY_RESTRICT inp, const float* HWY_RESTRICT weight,
                  const float* HWY_RESTRICT mean, const float* HWY_RESTRICT rstd, size_t rows,
                  size_t C) {
  const hn::ScalableTag<float> d;
  for (size_t r = 0; r < rows; ++r) {
    const float* x = inp + r * C;
    const float* dy = dout + r * C;
    const auto mu = hn::Set(d, mean[r]), s = hn::Set(d, rstd[r]);
    // Lanes past the row's end load zeros, so they add nothing to either sum.
    auto dnorm_sum = hn::Zero(d), dnorm_norm_sum = hn::Zero(d);
    ForVectors(d, C, [&](size_t i, size_t n) HWY_ATTR {
      const auto norm = hn::Mul(hn::Sub(LoadSome(d, x + i, n), mu), s);
      const auto dnorm = hn::Mul(LoadSome(d, weight + i, n), LoadSome(d, dy + i, n));
      dnorm_sum = hn::Add(dnorm_sum, dnorm);
      dnorm_norm_sum = hn::MulAdd(dnorm, norm, dnorm_norm_sum);
    });
    const auto dnorm_mean = hn::Set(d, hn::GetLane(hn::SumOfLanes(d, dnorm_sum)) / float(C));
    const auto dnorm_norm_mean =
        hn::Set(d, hn::GetLane(hn::SumOfLanes(d, dnorm_norm_sum)) / float(C));
    float* dx = dinp + r * C;
    ForVectors(d, C, [&](size_t i, size_t n) HWY_ATTR {
      const auto norm = hn::Mul(hn::Sub(LoadSome(d, x + i, n), mu), s);
      const auto dnorm = hn::Mul(LoadSome(d, weight + i, n), LoadSome(d, dy + i, n));
      const auto g = hn::Mul(hn::NegMulAdd(norm, dnorm_norm_mean, hn::Sub(dnorm, dnorm_mean)), s);
      StoreSome(hn::Add(LoadSome(d, dx + i, n), g), d, dx + i, n);
    });
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn::harness
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn::harness {

HWY_EXPORT(ForwardRows);
HWY_EXPORT(BackwardRows);

void LayerNormForwardRows(float* out, float* mean, float* rstd, const float* inp,
                          const float* weight, const float* bias, size_t rows, size_t C,
                          float eps) {
  HWY_DYNAMIC_DISPATCH(ForwardRows)(out, mean, rstd, inp, weight, bias, rows, C, eps);
}
void LayerNormBackwardRows(float* dinp, const float* dout, const float* inp, const float* weight,
                           const float* mean, const float* rstd, size_t rows, size_t C) {
  HWY_DYNAMIC_DISPATCH(BackwardRows)(dinp, dout, inp, weight, mean, rstd, rows, C);
}

}  // namespace lpattn::harness
#endif  // HWY_ONCE
