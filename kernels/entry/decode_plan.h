// The forward's decode plan (docs/design.md §8): a call with few queries per head reads K and
// V once per GQA group and splits its keys into blocks, so that a single query against a long
// cache still fills every thread.
#ifndef LPATTN_KERNELS_ENTRY_DECODE_PLAN_H_
#define LPATTN_KERNELS_ENTRY_DECODE_PLAN_H_

#include "kernels/attention.h"
#include "kernels/skeleton/attention_problem.h"

namespace lpattn {

// Rewrites a validated forward call (its operands as the kernels will read them) into the
// decode layout when its queries are few: a group's H / Hkv query heads become the rows of one
// kv head's tile when they fit one tile and Q and O step through them with one stride
// (AttentionProblem::head_rows), and a tile's keys are split into blocks when the call has a
// single query tile per head and more keys than a block (AttentionProblem::key_block). Both
// depend on the shape and strides only, never on the thread count. For transforms that merge
// key blocks (exact attention).
void PlanDecode(AttentionProblem& problem, ForwardArgs& args);

}  // namespace lpattn

#endif  // LPATTN_KERNELS_ENTRY_DECODE_PLAN_H_
