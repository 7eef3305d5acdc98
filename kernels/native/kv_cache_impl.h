// What a KvCache holds (internal): each side's storage in [slot, kv_head, capacity, head_dim]
// order, and the views the forward reads (docs/design.md §9).
#ifndef LPATTN_KERNELS_NATIVE_KV_CACHE_IMPL_H_
#define LPATTN_KERNELS_NATIVE_KV_CACHE_IMPL_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/kv_cache.h"
#include "kernels/native/huge_pages.h"
#include "kernels/skeleton/attention_problem.h"

namespace lpattn {

// K or V of every slot in one format: fp32 values, 16-bit codes, or 8-bit codes with a scale
// per token (and, for int8 K, each row's code sum: the u8 x s8 tile's bias correction). The
// rows are held in huge pages where Linux grants them (native/huge_pages.h).
template <class T>
using CacheRows = std::vector<T, native::HugePageAllocator<T>>;
struct CacheSide {
  quant::Format format = quant::Format::kFp32;
  CacheRows<float> values;
  CacheRows<uint16_t> codes16;
  CacheRows<uint8_t> codes8;
  std::vector<float> scales;  // [slot, kv_head, capacity]
  std::vector<int32_t> sums;  // int8 K only, [slot, kv_head, capacity]
};

struct KvCache::Impl {
  explicit Impl(const KvCacheConfig& c);
  KvCacheConfig config;
  // Element strides of the storage: [slot, kv_head, capacity, head_dim] contiguous; paged
  // {0, head, token} within a block, blocks block_stride apart (PagedLayout): a block's
  // kv_heads x block_size rows and a few rows of padding (BlockPadRows, docs/design.md §9).
  Strides strides;
  int64_t block_stride = 0;
  std::vector<int64_t> lengths;
  CacheSide k, v;
  // Paged: each slot's block table, [sequences][max_blocks], and its length.
  int64_t max_blocks = 0;
  uint32_t block_shift = 0;
  std::vector<int32_t> tables;
  std::vector<int64_t> table_lengths;

  bool paged() const { return config.block_size > 0; }
  // Tokens the slot can hold now: its capacity, or its blocks' tokens.
  int64_t Room(int64_t slot) const {
    return paged() ? std::min(config.capacity, table_lengths[size_t(slot)] * config.block_size)
                   : config.capacity;
  }
  // Token row (slot, head, token) of a side decoded to fp32.
  void ReadRow(const CacheSide& side, int64_t slot, int64_t head, int64_t token,
               float* out) const;
  // Binds slots [first, first + count) to a problem (its k_codes, v_codes and int_qk): the
  // problem's batch b reads slot first + b.
  void Bind(int64_t first, AttentionProblem& problem) const;
  // Element offset of (slot, head, token) in one side's storage (the token within the room).
  size_t Offset(int64_t slot, int64_t head, int64_t token) const {
    int64_t row = token;
    if (paged()) {
      const int64_t block = tables[size_t(slot * max_blocks + (token >> block_shift))];
      row = token & (config.block_size - 1);
      return size_t(block * block_stride + head * strides.head + row * strides.token);
    }
    return size_t(slot * strides.batch + head * strides.head + row * strides.token);
  }
};

}  // namespace lpattn

#endif  // LPATTN_KERNELS_NATIVE_KV_CACHE_IMPL_H_
