// HugePageAllocate (huge_pages.h): aligned_alloc at 2 MiB, then madvise.
#include "kernels/native/huge_pages.h"

#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace lpattn::native {

void* HugePageAllocate(size_t bytes) {
  if (bytes < kHugePageBytes) return ::operator new(bytes);
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* block = std::aligned_alloc(kHugePageBytes, rounded);
  if (block == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  (void)madvise(block, rounded, MADV_HUGEPAGE);  // advice only: 4 KiB pages if refused
#endif
  return block;
}

void HugePageRelease(void* block, size_t bytes) {
  if (bytes < kHugePageBytes) {
    ::operator delete(block);
  } else {
    std::free(block);
  }
}

}  // namespace lpattn::native
