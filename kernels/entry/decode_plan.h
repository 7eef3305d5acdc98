// The forward's decode plan (docs/design.md §8): a call with few queries per head reads K and
// V once per GQA group and splits its keys into blocks, so that a single query against a long
// cache still fills every thread; a call with many decodes its coded K and V once.
#ifndef LPATTN_KERNELS_ENTRY_DECODE_PLAN_H_
#define LPATTN_KERNELS_ENTRY_DECODE_PLAN_H_

#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "kernels/native/buffer_pool.h"
#include "kernels/skeleton/attention_problem.h"

namespace lpattn {

// Rewrites a validated forward call (its operands as the kernels will read them) into the
// decode layout when its queries are few: a group's H / Hkv query heads become the rows of one
// kv head's tile when they fit one tile (AttentionProblem::head_rows), and a tile's keys are
// split into blocks when the call has a single query tile per head and more keys than a block
// (AttentionProblem::key_block). Q and O must step through a group's rows with one stride; a
// layout that does not ([B, T, H, D] with q_len > 1) has its Q rows copied into [B, H, T, D]
// order and its O written there and copied back by Finish. All of it depends on the shape and
// strides only, never on the thread count. For transforms that merge key blocks and read
// their rows through the grouped layout (exact and K-interval attention).
// A call with many query tiles per kv head whose products multiply decoded fp32 rows (no
// native family reads the codes) has its coded K and V decoded once into dense fp32 copies
// instead of once per query tile (DecodesOnce): the same values, so the same results. Where
// fp16 or fp8 K's scores run on AMX or dot tiles, such a call builds the tiles' key rows once
// (BuildsAmxKeyRows) instead of converting every key tile for every query tile.
class DecodePlan {
 public:
  // second_q: a second view's queries (thresholded attention's), grouped as args.q is.
  DecodePlan(AttentionProblem& problem, ForwardArgs& args, ConstTensor* second_q = nullptr);
  // After the kernel: O's rows into the caller's layout, when they were written to a copy.
  void Finish() const;

 private:
  using Buffer = std::vector<float, native::PooledAllocator<float>>;
  Buffer q_rows_, q2_rows_, o_rows_, k_rows_, v_rows_;
  std::vector<uint16_t, native::PooledAllocator<uint16_t>> k_amx_rows_;
  Tensor caller_o_;
  size_t batch_ = 0, heads_ = 0, q_len_ = 0, dim_ = 0;
};

// How many kv heads' tiles a split-KV task of the problem runs in lockstep
// (AttentionProblem::span_heads; docs/design.md §8). Where K or V lays each token's kv heads
// side by side (token-major pages, [B, T, H, D] tensors), a task per head reads a short run of
// every token's row, each a page apart at long rows (3x a contiguous step's time in fp32 on
// AMD Zen 5); heads walked together read each token's rows of them at once. Split-KV decode
// tiles only (one per kv head, at most kSpanRows rows), up to kSpanHeads heads while the call
// keeps kMinSpannedTasks tasks; 1 otherwise. Shape and strides decide, never the thread count.
size_t SpanHeads(const AttentionProblem& problem, const ForwardArgs& args);

// Whether the plan decodes problem's coded K (keys) or V once per call: 16- or 8-bit codes
// that the forward would decode per key tile (for K: no AMX score product reads them), in a
// call that DecodesKvOnce (tile_sizes.h).
bool DecodesOnce(const AttentionProblem& problem, bool keys);

// Whether the plan builds the score tiles' key rows from fp16 or fp8 K once per call
// (AttentionProblem::amx_key_rows): contiguous codes on those tiles, in a call that
// BuildsKeyRowsOnce (tile_sizes.h).
bool BuildsAmxKeyRows(const AttentionProblem& problem);

}  // namespace lpattn

#endif  // LPATTN_KERNELS_ENTRY_DECODE_PLAN_H_
