// The kernel calls of a forward over a KvCache (docs/design.md §9, "Ragged batches"): the
// call's sequences cut into runs of consecutive slots with one length and one query count,
// each run one call of a transform's kernel. Every transform's cached forward walks the same
// runs, so the ragged bookkeeping lives here once.
#ifndef LPATTN_KERNELS_ENTRY_CACHED_RUNS_H_
#define LPATTN_KERNELS_ENTRY_CACHED_RUNS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/attention.h"

namespace lpattn {

// One kernel call: sequences [first, first + shape.batch) of the call, which read slots
// slot .. slot + shape.batch - 1, each holding shape.kv_len tokens, with shape.q_len queries.
struct CachedRun {
  AttentionShape shape;
  int64_t first = 0;  // the run's first sequence of the call
  int64_t slot = 0;   // the slot its first sequence reads
  ConstTensor q;      // the run's queries and outputs, [shape.batch, heads, q_len] rows
  Tensor o;
  // The run's first row of the call's per-row arrays ([batch, heads, q_len], or [total, heads]
  // ragged): lse, saved statistics and survivor counts of the run start here.
  size_t first_row = 0;
};

// Calls run(const CachedRun&) for each run of the call, in the call's order. lengths are the
// sequences' slot lengths (ValidateCachedForward's); sequences and q_offsets as the cached
// forwards take them (kv_cache.h).
template <class Run>
void ForEachCachedRun(const AttentionShape& shape, const std::vector<int64_t>& lengths,
                      const int64_t* sequences, const int64_t* q_offsets, ConstTensor q, Tensor o,
                      const Run& run) {
  const auto slot = [&](int64_t b) { return sequences != nullptr ? sequences[b] : b; };
  // Sequence b's first query (a token of q and o, a row of the per-row arrays in units of
  // heads) and its query count.
  const auto first_query = [&](int64_t b) {
    return q_offsets != nullptr ? q_offsets[b] : b * shape.q_len;
  };
  const auto queries = [&](int64_t b) { return first_query(b + 1) - first_query(b); };
  // Ragged queries are tokens of one [total, heads, head_dim] view: a run's batch stride
  // steps over its sequences' equal query counts.
  const auto q_step = [&](const Strides& s, int64_t b) {
    return q_offsets != nullptr ? first_query(b) * s.token : b * s.batch;
  };
  for (int64_t b = 0, end = 0; b < shape.batch; b = end) {
    end = b + 1;
    while (end < shape.batch && slot(end) == slot(b) + (end - b) &&
           lengths[size_t(end)] == lengths[size_t(b)] && queries(end) == queries(b)) {
      ++end;
    }
    CachedRun r;
    r.shape = shape;
    r.shape.batch = end - b;
    r.shape.kv_len = lengths[size_t(b)];
    r.shape.q_len = queries(b);
    r.first = b;
    r.slot = slot(b);
    Strides q_strides = q.strides, o_strides = o.strides;
    if (q_offsets != nullptr) {
      q_strides.batch = r.shape.q_len * q.strides.token;
      o_strides.batch = r.shape.q_len * o.strides.token;
    }
    r.q = {q.data + q_step(q.strides, b), q_strides};
    r.o = {o.data + q_step(o.strides, b), o_strides};
    r.first_row = size_t(first_query(b) * shape.heads);
    run(r);
  }
}

}  // namespace lpattn

#endif  // LPATTN_KERNELS_ENTRY_CACHED_RUNS_H_
