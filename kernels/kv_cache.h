// An appendable KV cache (docs/design.md §9): what an engine keeps between decode steps. Each
// sequence slot holds up to `capacity` tokens of K and V in its own format (fp32, bf16, fp16,
// int8, fp8 e4m3 or e5m2), the 8-bit formats as one byte an element with a scale per token,
// so that appending a token never changes what earlier tokens hold. The forward reads the
// codes in place (docs/math.md §4.1's native paths), and a call may take sequences of
// different lengths (a ragged batch).
#ifndef LPATTN_KERNELS_KV_CACHE_H_
#define LPATTN_KERNELS_KV_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/attention.h"
#include "kernels/kinterval.h"
#include "kernels/threshold.h"
#include "quant/format.h"

namespace lpattn {

// How a paged cache's block holds its tokens (KvCacheConfig::block_size > 0).
enum class PagedLayout {
  // [block][kv_head][block_size][head_dim]: a head's tokens of a block contiguous, as vLLM's
  // CPU backend and FlashInfer's HND hold them; the kernels read a block's rows as one run.
  // (The pool's blocks lie a few rows of padding more than a block apart: docs/design.md §9.)
  kHeadMajor,
  // [block][block_size][kv_head][head_dim]: vLLM's flash-attention layout (NHD); a head's rows
  // are kv_heads x head_dim apart, a page's worth of them per 4 KiB page.
  kTokenMajor,
};

struct KvCacheConfig {
  int64_t sequences = 1;  // slots
  int64_t kv_heads = 1;
  int64_t head_dim = 1;
  int64_t capacity = 1;  // tokens per slot
  quant::Format k_format = quant::Format::kFp32;
  quant::Format v_format = quant::Format::kFp32;
  // The paged layout, when block_size > 0: a pool of `blocks` blocks of block_size tokens (a
  // power of two in [1, 1024]) per side, laid out as `layout` says, which each slot reads and
  // writes through its block table (SetBlockTable), up to capacity tokens. 0: every slot owns
  // `capacity` contiguous tokens, [slot][kv_head][capacity][head_dim].
  int64_t block_size = 0;
  int64_t blocks = 0;
  PagedLayout layout = PagedLayout::kHeadMajor;
  // Keys alone: no V side is held (thresholded attention's second view, whose values are the
  // first view's). Append does not read v, Read takes no v, and only the thresholded forward's
  // second_keys reads such a cache.
  bool keys_only = false;
};

// Calls on distinct slots may run concurrently (an append to one while a forward reads
// others); calls that modify a slot must not overlap other calls on that slot.
class KvCache {
 public:
  // Allocates every slot's capacity (zeroed). Throws std::invalid_argument for a non-positive
  // size, head_dim outside [1, kMaxHeadDim] or a storage size that overflows.
  explicit KvCache(const KvCacheConfig& config);
  ~KvCache();
  KvCache(KvCache&&) noexcept;
  KvCache& operator=(KvCache&&) noexcept;

  const KvCacheConfig& config() const;
  int64_t Length(int64_t sequence) const;

  // Appends `tokens` tokens to `sequence`: k and v are [kv_heads, tokens, head_dim] views
  // (strides.head and strides.token; strides.batch is not read). The 8-bit formats take each
  // token's scale as amax / FormatMax over its head's row, as gran=token does (precision.h),
  // so a cached value is exactly what the in-call quantizer makes of it (an all-zero row's
  // scale is 0, where the quantizer's is 1: the same zero values). Throws
  // std::invalid_argument, changing nothing, for a bad sequence, a null or overlapping view,
  // more tokens than the slot has room for (paged: in the blocks of its table), or a value a
  // scaled format cannot take. A keys_only cache does not read v.
  void Append(int64_t sequence, int64_t tokens, ConstTensor k, ConstTensor v);
  // Paged layout: slot `sequence`'s logical block i is pool block blocks[i], i < count, and
  // its length becomes `length` (-1: kept). A table may not name a block twice; distinct slots
  // may share blocks: a fork names its parent's prefix blocks and the parent's length of them,
  // and the engine must then not append into a shared block. What the blocks hold is kept, so
  // a table can grow as a sequence does. Throws std::invalid_argument, changing nothing, on a
  // block out of [0, blocks), a repeated block, count beyond capacity / block_size (rounded
  // up), a length beyond capacity or the blocks' tokens, or on a contiguous cache.
  void SetBlockTable(int64_t sequence, const int32_t* blocks, int64_t count, int64_t length = -1);
  // The slot's block table and its length (a null table and 0 on a contiguous cache).
  const int32_t* BlockTable(int64_t sequence, int64_t* count) const;

  // Drops the tokens from `length` on (an engine rolling back rejected draft tokens); length
  // must be in [0, Length(sequence)].
  void Truncate(int64_t sequence, int64_t length);
  // Tokens [first, first + tokens) of `sequence`, decoded to fp32, into [kv_heads, tokens,
  // head_dim] views k and v (either may have null data, then it is not written; v must have
  // null data on a keys_only cache).
  void Read(int64_t sequence, int64_t first, int64_t tokens, Tensor k, Tensor v) const;

  // Bytes of K and V as held (codes, scales, code sums), for every slot's capacity.
  size_t StorageBytes() const;

  struct Impl;  // kernels/native/kv_cache_impl.h
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// The precision a cache's forward runs with: qk = K's format, pv = V's format, scales per
// token (Q's too), P as `base` has it: what ExactForward over a cache runs with, whatever
// options.precision says beyond p.
Precision CachePrecision(const KvCacheConfig& config, const Precision& base = {});

// §1 forward of q against cached K and V, one sequence of the call per slot in `sequences`
// ([shape.batch] slot indices; null: slots 0 .. batch - 1, which must all exist). Each
// sequence attends to its slot's Length() keys (shape.kv_len is not read), with bottom-right
// causal alignment per sequence; every slot named must hold at least one token. shape's
// kv_heads and head_dim must be the cache's. options.precision's qk and pv must be the cache's
// formats, or both fp32 (the default), which means "as the cache holds them"; Q's scales are
// per token, as K's.
// q, o: [batch, heads, q_len, head_dim] views; lse [batch, heads, q_len] as ExactForward.
// Ragged queries (chunked prefill beside decode steps): with q_offsets ([batch + 1], from 0,
// increasing, cu_seqlens style) sequence b has queries q_offsets[b] .. q_offsets[b + 1] - 1,
// tokens of q and o as [total, heads, head_dim] views (strides.head and strides.token;
// strides.batch is not read, nor shape.q_len), and its lse rows are the dense [heads,
// q_len_b] block at lse + heads q_offsets[b].
void ExactForward(const AttentionShape& shape, const AttentionOptions& options, ConstTensor q,
                  const KvCache& cache, Tensor o, float* lse, const int64_t* sequences = nullptr,
                  const int64_t* q_offsets = nullptr);

// An engine's 16-bit activations: a view of bf16 or fp16 codes laid out as ConstTensor.
struct ConstTensor16 {
  const uint16_t* data = nullptr;
  Strides strides;
  quant::Format format = quant::Format::kBf16;  // kBf16 or kFp16
};
struct Tensor16 {
  uint16_t* data = nullptr;
  Strides strides;
  quant::Format format = quant::Format::kBf16;
};

// The same forward with Q and O in bf16 or fp16 (each its own format): Q's values are read
// exactly, the forward runs as above, and O is rounded to its format (nearest even) once at
// the end. Everything is validated before O is written.
void ExactForward(const AttentionShape& shape, const AttentionOptions& options, ConstTensor16 q,
                  const KvCache& cache, Tensor16 o, float* lse, const int64_t* sequences = nullptr,
                  const int64_t* q_offsets = nullptr);

// §2 K-interval forward over cached K and V: q, cache, o, sequences and q_offsets as the exact
// forward above takes them, kint and the checks as KIntervalForward's (kinterval.h: no sink,
// softcap, ALiBi or window). saved's arrays are [batch, heads, q_len] rows as lse is (ragged:
// sequence b's the dense [heads, q_len_b] block at heads q_offsets[b]); argmax and argmin are
// key indices within the sequence. Every KV format and layout, read in place.
void KIntervalForward(const AttentionShape& shape, const AttentionOptions& options,
                      const KIntervalOptions& kint, ConstTensor q, const KvCache& cache, Tensor o,
                      const KIntervalSaved& saved, const int64_t* sequences = nullptr,
                      const int64_t* q_offsets = nullptr);

// §3 thresholded forward over a cache: view 1's keys and V from `cache`, view 2's keys (views =
// 2) from the K side of `second_keys`, a cache whose slots line up with cache's (same kv_heads,
// head_dim, and for every sequence named the same length; its V side is not read: make it with
// KvCacheConfig::keys_only). q[t] are view t's queries as the exact forward takes q; o,
// sequences and q_offsets likewise. survivors, when not null, receives [views][rows] counts,
// rows = heads x the call's query tokens, each view's in lse's row order. lambda_param as
// ThresholdForward's. The L2 normalisation of §3 reads each cached key once per call into a
// normalised fp32 copy, as the in-call forward normalises its K; Q is rounded to each cache's
// K format per token, so the result is the in-call forward with qk and pv the caches' formats
// and gran=token.
struct ThresholdCachedArgs {
  ConstTensor q[2];
  const KvCache* second_keys = nullptr;
  const float* lambda_param = nullptr;
  Tensor o;
  int32_t* survivors = nullptr;
};
void ThresholdForward(const AttentionShape& shape, const AttentionOptions& options,
                      const ThresholdOptions& threshold, const KvCache& cache,
                      const ThresholdCachedArgs& args, const int64_t* sequences = nullptr,
                      const int64_t* q_offsets = nullptr);

}  // namespace lpattn

#endif  // LPATTN_KERNELS_KV_CACHE_H_
