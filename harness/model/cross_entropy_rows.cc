// Softmax and cross-entropy rows with Highway (docs/harness.md §1).
#include "harness/model/cross_entropy_rows.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "harness/model/cross_entropy_rows.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cmath>
#include <limits>

#include "harness/model/span_tail-inl.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn::harness {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void CrossEntropyRows(float* HWY_RESTRICT probs, float* HWY_RESTRICT losses,
                      const float* HWY_RESTRICT logits, const uint8_t* HWY_RESTRICT targets,
                      size_t rows, size_t V) {
  const hn::ScalableTag<float> d;
  const auto lowest = hn::Set(d, -std::numeric_limits<float>::infinity());
  for (size_t r = 0; r < rows; ++r) {
    const float* l = logits + r * V;
    float* p = probs + r * V;
    auto max_v = lowest;
    ForVectors(d, V, [&](size_t i, size_t n) HWY_ATTR {
      const auto x = LoadSome(d, l + i, n);
      max_v = hn::Max(max_v, hn::IfThenElse(hn::FirstN(d, n), x, lowest));
    });
    const auto max = hn::MaxOfLanes(d, max_v);
    auto sum_v = hn::Zero(d);
    ForVectors(d, V, [&](size_t i, size_t n) HWY_ATTR {
      const auto e = hn::Exp(d, hn::Sub(LoadSome(d, l + i, n), max));
      sum_v = hn::Add(sum_v, hn::IfThenElseZero(hn::FirstN(d, n), e));
      StoreSome(e, d, p + i, n);
    });
    const float sum = hn::GetLane(hn::SumOfLanes(d, sum_v));
    const auto inv_sum = hn::Set(d, 1.0f / sum);
    ForVectors(d, V, [&](size_t i, size_t n) HWY_ATTR {
      StoreSome(hn::Mul(LoadSome(d, p + i, n), inv_sum), d, p + i, n);
    });
    losses[r] = static_cast<float>(std::log(double(sum)) - (l[targets[r]] - hn::GetLane(max)));
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn::harness
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn::harness {

HWY_EXPORT(CrossEntropyRows);

void CrossEntropyRowsSimd(float* probs, float* losses, const float* logits,
                          const uint8_t* targets, size_t rows, size_t V) {
  HWY_DYNAMIC_DISPATCH(CrossEntropyRows)(probs, losses, logits, targets, rows, V);
}

}  // namespace lpattn::harness
#endif  // HWY_ONCE
