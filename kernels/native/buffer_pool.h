// Reusable memory for the per-call operand copies and codes (QuantizedOperands): a call's large
// buffers go back to a pool when it ends, and the next call takes them, warm, instead of fresh
// pages that Linux faults in and zeroes one by one (4-12 ms a call at N = 4096, measured).
#ifndef LPATTN_KERNELS_NATIVE_BUFFER_POOL_H_
#define LPATTN_KERNELS_NATIVE_BUFFER_POOL_H_

#include <cstddef>
#include <new>
#include <utility>

namespace lpattn::native {

// Blocks of at least kPooledBytes come from the pool (by power-of-two size class, at most
// kPoolBytes kept), smaller ones from operator new. Thread-safe.
inline constexpr size_t kPooledBytes = size_t(1) << 20;
inline constexpr size_t kPoolBytes = size_t(1) << 30;
void* PoolAllocate(size_t bytes);
void PoolRelease(void* block, size_t bytes);

template <class T>
struct PooledAllocator {
  using value_type = T;
  PooledAllocator() = default;
  template <class U>
  PooledAllocator(const PooledAllocator<U>&) {}  // NOLINT(google-explicit-constructor)
  T* allocate(size_t n) { return static_cast<T*>(PoolAllocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { PoolRelease(p, n * sizeof(T)); }
  // A vector of n elements leaves them unwritten (default-initialised): every buffer is written
  // in full before it is read, and zeroing first would cost a pass over each copy per call.
  // An explicit value (vector(n, 0)) is still written.
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <class U>
  bool operator==(const PooledAllocator<U>&) const { return true; }
};

}  // namespace lpattn::native

#endif  // LPATTN_KERNELS_NATIVE_BUFFER_POOL_H_
