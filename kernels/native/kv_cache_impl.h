// What a KvCache holds (internal): each side's storage in [slot, kv_head, capacity, head_dim]
// order, and the views the forward reads (docs/design.md §9).
#ifndef LPATTN_KERNELS_NATIVE_KV_CACHE_IMPL_H_
#define LPATTN_KERNELS_NATIVE_KV_CACHE_IMPL_H_

#include <cstdint>
#include <vector>

#include "kernels/kv_cache.h"
#include "kernels/skeleton/attention_problem.h"

namespace lpattn {

// K or V of every slot in one format: fp32 values, 16-bit codes, or 8-bit codes with a scale
// per token (and, for int8 K, each row's code sum: the u8 x s8 tile's bias correction).
struct CacheSide {
  quant::Format format = quant::Format::kFp32;
  std::vector<float> values;
  std::vector<uint16_t> codes16;
  std::vector<uint8_t> codes8;
  std::vector<float> scales;  // [slot, kv_head, capacity]
  std::vector<int32_t> sums;  // int8 K only, [slot, kv_head, capacity]
};

struct KvCache::Impl {
  explicit Impl(const KvCacheConfig& c);
  KvCacheConfig config;
  Strides strides;  // of the [slot, kv_head, capacity, head_dim] storage
  std::vector<int64_t> lengths;
  CacheSide k, v;

  // Binds slots [first, first + count) to a problem and its K and V views: the problem's
  // batch b reads slot first + b. kv_len is the caller's (every bound slot holds at least that).
  void Bind(int64_t first, AttentionProblem& problem, ConstTensor& k_view, ConstTensor& v_view) const;
  // Row offset of (slot, head, token) in elements of one side's storage.
  size_t Offset(int64_t slot, int64_t head, int64_t token) const {
    return size_t(slot * strides.batch + head * strides.head + token * strides.token);
  }
};

}  // namespace lpattn

#endif  // LPATTN_KERNELS_NATIVE_KV_CACHE_IMPL_H_
