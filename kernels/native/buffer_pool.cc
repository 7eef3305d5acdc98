// The operand buffer pool (buffer_pool.h).
#include "kernels/native/buffer_pool.h"

#include <bit>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace lpattn::native {
namespace {

struct Pool {
  std::mutex mutex;
  std::map<size_t, std::vector<void*>> free;  // by size class
  size_t held = 0;                            // bytes in `free`
};
Pool& ThePool() {
  static Pool* pool = new Pool;  // never destroyed: buffers may be released during exit
  return *pool;
}
size_t SizeClass(size_t bytes) { return std::bit_ceil(bytes); }

}  // namespace

void* PoolAllocate(size_t bytes) {
  if (bytes < kPooledBytes) return ::operator new(bytes);
  const size_t size = SizeClass(bytes);
  Pool& pool = ThePool();
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    auto it = pool.free.find(size);
    if (it != pool.free.end() && !it->second.empty()) {
      void* block = it->second.back();
      it->second.pop_back();
      pool.held -= size;
      return block;
    }
  }
  return ::operator new(size);
}

void PoolRelease(void* block, size_t bytes) {
  if (block == nullptr) return;
  if (bytes < kPooledBytes) {
    ::operator delete(block);
    return;
  }
  const size_t size = SizeClass(bytes);
  Pool& pool = ThePool();
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    if (pool.held + size <= kPoolBytes) {
      pool.free[size].push_back(block);
      pool.held += size;
      return;
    }
  }
  ::operator delete(block);
}

}  // namespace lpattn::native
