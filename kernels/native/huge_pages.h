// Storage for large, long-lived buffers (a KvCache's K and V) in 2 MiB transparent huge pages
// where Linux grants them (docs/design.md §9): a decode step reads a paged cache's blocks in
// table order, scattered over the pool, and with 4 KiB pages every few blocks cost a page walk
// that a sequential read would have had cached.
#ifndef LPATTN_KERNELS_NATIVE_HUGE_PAGES_H_
#define LPATTN_KERNELS_NATIVE_HUGE_PAGES_H_

#include <cstddef>
#include <new>

namespace lpattn::native {

// Blocks of at least kHugePageBytes are aligned to it and advised as huge-page candidates
// (madvise MADV_HUGEPAGE: effective under THP's `madvise` and `always` modes, ignored under
// `never` or off Linux); smaller ones come from operator new.
inline constexpr size_t kHugePageBytes = size_t(2) << 20;
void* HugePageAllocate(size_t bytes);
void HugePageRelease(void* block, size_t bytes);

template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT(google-explicit-constructor)
  T* allocate(size_t n) { return static_cast<T*>(HugePageAllocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { HugePageRelease(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const { return true; }
};

}  // namespace lpattn::native

#endif  // LPATTN_KERNELS_NATIVE_HUGE_PAGES_H_
