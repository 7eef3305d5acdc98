// Vectors kept between steps, for targets with sizeless vectors (docs/design.md §11). SVE's
// vectors (HWY_HAVE_SCALABLE) cannot be elements of arrays or members of structs, which the
// fixed-size targets use to hold a row's parameters and the K-interval transform's evaluated
// entry. On those targets everything here is exactly that: an array of vectors, a vector, a
// mask. On scalable targets:
// - RowParamVectors: a transform's row parameters (kRowParams vectors) are read where they lie,
//   as lanes of the workspace's staged table (hn::Load) or as one row's floats (hn::Set);
// - VecSlot, MaskSlot: a struct member holds its lanes in an aligned array of the target's
//   largest vector (HWY_MAX_BYTES), stored when built and loaded where LPATTN_SLOT reads it.
// On fixed-size targets these are aliases and LPATTN_SLOT(x) is x, so the code those targets
// compile is the same token for token.
// The values are the same, so every sum is the same on both kinds of target.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_SKELETON_VECTOR_SLOTS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_SKELETON_VECTOR_SLOTS_INL_H_
#undef LPATTN_KERNELS_SKELETON_VECTOR_SLOTS_INL_H_
#else
#define LPATTN_KERNELS_SKELETON_VECTOR_SLOTS_INL_H_
#endif

#include <stddef.h>

#include <type_traits>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_HAVE_SCALABLE
// Parameter k of a row (or of the lanes' rows) as a vector: p[k * stride] onwards as lanes
// (stride > 0: the staged table [k][kTileQ], lanes are queries), or p[k] in every lane
// (stride 0: one row's parameters, lanes are keys).
template <class D>
class RowParamLanes {
 public:
  RowParamLanes() = default;
  RowParamLanes(const float* p, size_t stride) : p_(p), stride_(stride) {}
  HWY_INLINE hn::Vec<D> operator[](size_t k) const {
    const D d;
    return stride_ == 0 ? hn::Set(d, p_[k]) : hn::Load(d, p_ + k * stride_);
  }

 private:
  const float* p_ = nullptr;
  size_t stride_ = 0;
};
// What a transform's backward methods take as the row parameters, and what the skeleton
// declares to hold them.
template <class D>
using RowParamsIn = const RowParamLanes<D>&;
template <class D, size_t kCount>
using RowParamVectors = RowParamLanes<std::remove_const_t<D>>;

template <class D>
class VecSlot {
 public:
  VecSlot(hn::Vec<D> v) { hn::Store(v, D(), lanes_); }  // NOLINT: implicit, as a vector's
  HWY_INLINE hn::Vec<D> Get() const { return hn::Load(D(), lanes_); }

 private:
  HWY_ALIGN hn::TFromD<D> lanes_[HWY_MAX_BYTES / sizeof(hn::TFromD<D>)];
};
template <class D>
class MaskSlot {
 public:
  MaskSlot(hn::Mask<D> m) : lanes_(hn::VecFromMask(D(), m)) {}  // NOLINT: implicit
  HWY_INLINE hn::Mask<D> Get() const { return hn::MaskFromVec(lanes_.Get()); }

 private:
  VecSlot<D> lanes_;
};
// A VecSlot's or MaskSlot's vector or mask.
#undef LPATTN_SLOT
#define LPATTN_SLOT(slot) (slot).Get()
#else
template <class D>
using RowParamsIn = const hn::Vec<D>*;
template <class D, size_t kCount>
using RowParamVectors = hn::Vec<D>[kCount];

template <class D>
using VecSlot = hn::Vec<D>;
template <class D>
using MaskSlot = hn::Mask<D>;
#undef LPATTN_SLOT
#define LPATTN_SLOT(slot) slot
#endif

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
