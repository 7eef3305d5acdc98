// The harness's GPT (the lpattn repository's docs/harness.md §1) served from a KV cache: each
// call runs a chunk of new tokens for each of a batch of sequences (a prompt's prefill, or one
// token of a decode step), appends their keys and values to every layer's lpattn::KvCache,
// and returns their logits. Attention is lpattn's cached ExactForward over the ragged batch;
// everything else is plain loops.
#ifndef LPATTN_ENGINE_GPT_H_
#define LPATTN_ENGINE_GPT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include <lpattn/kernels/kv_cache.h>

#include "checkpoint.h"

namespace engine {

struct CacheOptions {
  lpattn::quant::Format format = lpattn::quant::Format::kFp32;  // K's and V's
  int64_t block_size = 0;  // > 0: a paged cache of blocks this many tokens long
};

class Gpt {
 public:
  // A cache of `sequences` slots of model.context tokens for each layer. The checkpoint must
  // outlive the model.
  Gpt(const Checkpoint& checkpoint, int64_t sequences, const CacheOptions& cache);

  // Runs chunks[s] (byte tokens, possibly none) after what sequence s holds, for every s at
  // once, and returns their logits: [sum of chunk sizes][vocab], sequence by sequence. Throws
  // std::invalid_argument, before any work, if a sequence would pass the context.
  const std::vector<float>& Forward(const std::vector<std::vector<uint8_t>>& chunks);

  int64_t Length(int64_t sequence) const { return caches_.front().Length(sequence); }
  // Bytes the caches hold for K and V (their storage, all layers).
  size_t CacheBytes() const;

 private:
  // Paged caches: gives sequence s pool blocks until it has room for `tokens` tokens, the same
  // blocks in every layer's cache (each layer has its own pool).
  void Reserve(int64_t s, int64_t tokens);
  void Block(size_t layer, int64_t rows);

  const Checkpoint& ck_;
  std::vector<lpattn::KvCache> caches_;  // one per layer
  std::vector<std::vector<int32_t>> tables_;  // paged: each sequence's blocks
  int32_t next_block_ = 0;
  lpattn::AttentionOptions options_;
  std::vector<float> alibi_slopes_;
  // The call's rows: their sequences' slots and cu_seqlens offsets, and activations.
  std::vector<int64_t> slots_, offsets_;
  std::vector<float> x_, ln_, qkv_, att_, proj_, fc_, lse_, logits_;
};

}  // namespace engine

#endif  // LPATTN_ENGINE_GPT_H_
