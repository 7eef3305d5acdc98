// Vector operations on one row of dim floats (a head-dimension row of Q, K, V or a gradient),
// reading and writing exactly dim floats: the sparse paths of the skeleton and the value gates.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_SKELETON_ROW_OPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_SKELETON_ROW_OPS_INL_H_
#undef LPATTN_KERNELS_SKELETON_ROW_OPS_INL_H_
#else
#define LPATTN_KERNELS_SKELETON_ROW_OPS_INL_H_
#endif

#include <stddef.h>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// sum_c a[c] b[c].
HWY_INLINE float RowDot(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, size_t dim) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto sum = hn::Zero(d);
  size_t c = 0;
  for (; c + N <= dim; c += N) sum = hn::MulAdd(hn::LoadU(d, a + c), hn::LoadU(d, b + c), sum);
  float total = hn::GetLane(hn::SumOfLanes(d, sum));
  for (; c < dim; ++c) total += a[c] * b[c];
  return total;
}

// out[c] = w * row[c], or out[c] += w * row[c] with kAdd.
template <bool kAdd>
HWY_INLINE void ScaleRowInto(float w, const float* HWY_RESTRICT row, size_t dim,
                             float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto weight = hn::Set(d, w);
  size_t c = 0;
  for (; c + N <= dim; c += N) {
    const auto x = hn::LoadU(d, row + c);
    hn::StoreU(kAdd ? hn::MulAdd(weight, x, hn::LoadU(d, out + c)) : hn::Mul(weight, x), d,
               out + c);
  }
  for (; c < dim; ++c) out[c] = w * row[c] + (kAdd ? out[c] : 0.0f);
}

HWY_INLINE void AddScaledRow(float w, const float* HWY_RESTRICT row, size_t dim,
                             float* HWY_RESTRICT out) {
  ScaleRowInto<true>(w, row, dim, out);
}
HWY_INLINE void ScaledRow(float w, const float* HWY_RESTRICT row, size_t dim,
                          float* HWY_RESTRICT out) {
  ScaleRowInto<false>(w, row, dim, out);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
