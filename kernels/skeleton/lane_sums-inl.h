// Sums of several vectors' lanes folded into one short vector: the horizontal step of the
// products that run along the head dimension (a decode tile's dot products, fp32 or integer).
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_SKELETON_LANE_SUMS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_SKELETON_LANE_SUMS_INL_H_
#undef LPATTN_KERNELS_SKELETON_LANE_SUMS_INL_H_
#else
#define LPATTN_KERNELS_SKELETON_LANE_SUMS_INL_H_
#endif

#include <stddef.h>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if !HWY_HAVE_SCALABLE
// The 128-bit blocks of v added into one, by halves (a 512-bit vector's four blocks in two
// extracts and two adds; SumsOfFour stored them and loaded them back one by one before, a
// tenth of an int8 decode step's score loop).
template <class D, typename T = hn::TFromD<D>>
HWY_INLINE hn::Vec<hn::CappedTag<T, 4>> SumOfBlocks(D d, hn::Vec<D> v) {
  if constexpr (hn::MaxLanes(D()) * sizeof(T) <= 16) {
    (void)d;
    return v;
  } else {
    const hn::Half<D> dh;
    return SumOfBlocks(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  }
}
#endif

// The sums of a, b, c, e's lanes (float or int32), in that order, as 4 lanes: pairs
// interleaved and added within each 128-bit block, then the blocks added.
template <class D, typename T = hn::TFromD<D>>
HWY_INLINE hn::Vec<hn::CappedTag<T, 4>> SumsOfFour(D d, hn::Vec<D> a, hn::Vec<D> b, hn::Vec<D> c,
                                                    hn::Vec<D> e) {
  const hn::Repartition<hwy::MakeWide<T>, D> d64;  // double for floats, int64 for int32
  const auto ab = hn::BitCast(d64, hn::Add(hn::InterleaveLower(d, a, b), hn::InterleaveUpper(d, a, b)));
  const auto ce = hn::BitCast(d64, hn::Add(hn::InterleaveLower(d, c, e), hn::InterleaveUpper(d, c, e)));
  const auto blocks = hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, ab, ce)),
                              hn::BitCast(d, hn::InterleaveUpper(d64, ab, ce)));
#if !HWY_HAVE_SCALABLE
  return SumOfBlocks(d, blocks);
#else
  HWY_ALIGN T lanes[hn::MaxLanes(d)];
  hn::Store(blocks, d, lanes);
  const hn::CappedTag<T, 4> d4;
  auto sums = hn::Load(d4, lanes);
  for (size_t i = 4; i < hn::Lanes(d); i += 4) sums = hn::Add(sums, hn::Load(d4, lanes + i));
  return sums;
#endif
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
