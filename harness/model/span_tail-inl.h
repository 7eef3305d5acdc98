// The ragged end of a span of floats, loaded and stored through a stack buffer: nothing past
// the span's end is read or written on any target. (Highway 1.0.3's SSE4 MaskedLoad is an
// aligned full-vector load, so it may fault on, or read beyond, a ragged end.)
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_HARNESS_MODEL_SPAN_TAIL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_HARNESS_MODEL_SPAN_TAIL_INL_H_
#undef LPATTN_HARNESS_MODEL_SPAN_TAIL_INL_H_
#else
#define LPATTN_HARNESS_MODEL_SPAN_TAIL_INL_H_
#endif

#include <stddef.h>
#include <string.h>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn::harness {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The first `count` floats at p (count <= Lanes(d)), zeros in the other lanes.
template <class D>
HWY_INLINE hn::Vec<D> LoadTail(D d, const float* p, size_t count) {
  HWY_ALIGN float buffer[HWY_MAX_BYTES / sizeof(float)] = {};
  memcpy(buffer, p, count * sizeof(float));
  return hn::Load(d, buffer);
}

// Stores the first `count` lanes of v at p.
template <class D>
HWY_INLINE void StoreTail(hn::Vec<D> v, D d, float* p, size_t count) {
  HWY_ALIGN float buffer[HWY_MAX_BYTES / sizeof(float)];
  hn::Store(v, d, buffer);
  memcpy(p, buffer, count * sizeof(float));
}

// Calls f(i, count) over a span of n floats: whole vectors (count = Lanes(d)), then the tail.
template <class D, class F>
HWY_INLINE void ForVectors(D d, size_t n, const F& f) {
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) f(i, N);
  if (i < n) f(i, n - i);
}

// A load of `count` floats at p: a plain load for whole vectors, else LoadTail.
template <class D>
HWY_INLINE hn::Vec<D> LoadSome(D d, const float* p, size_t count) {
  return count == hn::Lanes(d) ? hn::LoadU(d, p) : LoadTail(d, p, count);
}
template <class D>
HWY_INLINE void StoreSome(hn::Vec<D> v, D d, float* p, size_t count) {
  if (count == hn::Lanes(d)) {
    hn::StoreU(v, d, p);
  } else {
    StoreTail(v, d, p, count);
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn::harness
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
