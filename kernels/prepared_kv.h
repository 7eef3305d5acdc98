// K and V prepared once in their low-precision storage (docs/math.md §4), as an engine keeps a KV cache:
// bf16 or fp16 K and V as 16-bit codes (half the bytes of fp32), int8 K as codes with a scale
// per token, other formats as dequantized fp32 copies (simulation; fp32 as a plain copy).
// Forward calls then read the prepared storage directly instead of quantizing K and V again,
// and the caller's K and V may be released once it is built.
#ifndef LPATTN_KERNELS_PREPARED_KV_H_
#define LPATTN_KERNELS_PREPARED_KV_H_

#include <cstddef>
#include <memory>

#include "kernels/attention.h"

namespace lpattn {

class PreparedKv {
 public:
  // k and v: [batch, kv_heads, kv_len, head_dim] views of `shape`'s K and V. Throws
  // std::invalid_argument as the kernels do (bad shape, strides or precision; values a scaled
  // format cannot take). `threads` as in AttentionOptions.
  PreparedKv(const AttentionShape& shape, const Precision& precision, ConstTensor k,
             ConstTensor v, int threads = 0);

  const AttentionShape& shape() const;
  const Precision& precision() const;
  // Bytes of K and V as held (codes, scales or fp32 copies).
  size_t StorageBytes() const;

  struct Impl;  // kernels/native/prepared_kv_impl.h
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<const Impl> impl_;
};

// §1 forward of q against prepared K and V. shape's K/V sizes and options.precision must be
// the ones kv was prepared with (std::invalid_argument otherwise); sinks and GQA as usual.
void ExactForward(const AttentionShape& shape, const AttentionOptions& options, ConstTensor q,
                  const PreparedKv& kv, Tensor o, float* lse);

}  // namespace lpattn

#endif  // LPATTN_KERNELS_PREPARED_KV_H_
