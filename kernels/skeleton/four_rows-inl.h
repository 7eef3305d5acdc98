// A decode tile's 4 query rows packed densely: N / 4 keys of 4 rows in one vector (lane l holds
// key l / 4, row l % 4), where a key-major tile row spends a whole vector on one key's 4 live
// lanes. Used by the softmax's weighting and P's int8 codes of such tiles (docs/design.md §3).
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_SKELETON_FOUR_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_SKELETON_FOUR_ROWS_INL_H_
#undef LPATTN_KERNELS_SKELETON_FOUR_ROWS_INL_H_
#else
#define LPATTN_KERNELS_SKELETON_FOUR_ROWS_INL_H_
#endif

#include <stddef.h>

#include "hwy/highway.h"
#include "kernels/skeleton/tile_sizes.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if !HWY_HAVE_SCALABLE
// The 4 lanes of v repeated into each 128-bit block of a vector of D.
template <class D>
HWY_INLINE hn::Vec<D> Broadcast4(D d, hn::Vec<hn::CappedTag<hn::TFromD<D>, kFewQueries>> v) {
  if constexpr (hn::MaxLanes(D()) <= kFewQueries) {
    (void)d;
    return v;
  } else {
    const hn::Half<D> dh;
    const auto half = Broadcast4(dh, v);
    return hn::Combine(d, half, half);
  }
}

// The first 4 lanes of Lanes(d) / 4 consecutive key rows (`stride` floats apart) in one
// vector, key by key.
template <class D>
HWY_INLINE hn::Vec<D> Gather4(D d, const hn::TFromD<D>* HWY_RESTRICT rows, size_t stride) {
  if constexpr (hn::MaxLanes(D()) <= kFewQueries) {
    return hn::LoadU(d, rows);
  } else {
    const hn::Half<D> dh;
    const size_t half_keys = hn::MaxLanes(decltype(dh)()) / kFewQueries;
    return hn::Combine(d, Gather4(dh, rows + half_keys * stride, stride), Gather4(dh, rows, stride));
  }
}
#endif

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
