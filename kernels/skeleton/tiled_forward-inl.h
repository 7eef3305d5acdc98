// The skeleton's forward pass (docs/design.md §3): one task per (batch, head, query tile),
// S^T = K Q^T per key tile, the row transform's weights, O += W V; a statistics pass first when
// the transform asks for one. The policy contract is in tiled_attention-inl.h.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_SKELETON_TILED_FORWARD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_SKELETON_TILED_FORWARD_INL_H_
#undef LPATTN_KERNELS_SKELETON_TILED_FORWARD_INL_H_
#else
#define LPATTN_KERNELS_SKELETON_TILED_FORWARD_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "kernels/native/buffer_pool.h"
#include "kernels/skeleton/attention_problem.h"
#include "kernels/skeleton/few_query_values-inl.h"
#include "kernels/skeleton/matmul_tile-inl.h"
#include "kernels/skeleton/score_bias-inl.h"
#include "kernels/skeleton/score_tile-inl.h"
#include "kernels/skeleton/sparse_tiles-inl.h"
#include "kernels/skeleton/tile_sizes.h"
#include "kernels/skeleton/tile_workspace-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---- forward ------------------------------------------------------------------------------

// Score-tile columns of the forward for nq queries: one vector for a decode tile of a few rows,
// else QueryColumns' pairs of vectors.
HWY_INLINE size_t ForwardColumns(size_t nq) {
  const hn::ScalableTag<float> d;
  return nq <= hn::Lanes(d) ? hn::Lanes(d) : QueryColumns(nq);
}

// Split-KV's partial results (docs/math.md §5), per (query tile, key block) task: the tile's
// rows' unnormalised outputs o = sum_j w_j v_j ([rows][padded_dim]), then the transform's
// per-row state (Transform::kBlockState floats a row: m and Z for softmax). A transform with a
// statistics pass first observes each block alone (`observing`: into observed_blocks[task]),
// and its blocks' weighting then starts from the tile's merged statistics (observed_tiles).
template <class Transform>
struct KeyBlockPartials {
  float* data = nullptr;
  size_t rows = 0, padded_dim = 0, state = 0, blocks = 0;
  typename Transform::ForwardState* observed_blocks = nullptr;
  typename Transform::ForwardState* observed_tiles = nullptr;
  bool observing = false;
  size_t TaskFloats() const { return rows * (padded_dim + state); }
  float* Outputs(size_t task) const { return data + task * TaskFloats(); }
  float* State(size_t task) const { return Outputs(task) + rows * padded_dim; }
};

// One forward task: query tile (b, h, [i0, i0 + nq)) against keys [k_begin, k_end). With
// `partials` it leaves the block's unnormalised output and state there (the sink enters in the
// merge), else the tile's output and statistics.
template <class Transform>
HWY_INLINE void ForwardTileTask(const AttentionProblem& p, const ForwardArgs& args,
                                const Transform& tr, const SecondView& second, const TileTask& t,
                                size_t k_begin, size_t k_end,
                                const KeyBlockPartials<Transform>* partials, size_t partial_task,
                                TileWorkspace& ws) {
  const auto [b, h, i0, nq] = t;
  const size_t dim = p.dim, padded_dim = PaddedDim(dim), kv_head = h / p.group();
  const bool two_views = second.q.data != nullptr;
  const HeadRows q = CodedRowsOf(args.q, p.q_codes, b, h);
  const HeadRows k = CodedRowsOf(args.k, p.k_codes, b, kv_head);
  const HeadRows v = CodedRowsOf(args.v, p.v_codes, b, kv_head);
  float* q_panel = ws.panel_a.get();
  float* scores = ws.scores.get();
  float* out = ws.acc_a.get();
  PackQueries(p, q, b, h, i0, nq, q_panel, ws);
  if (two_views) PackTransposed(RowsOf(second.q, b, h), i0, nq, dim, p.scale, kTileQ,
                                ws.panel_b.get(), p.unit_queries);
  // The tile's rows only, and at least the 4 that a decode tile's few-query products write
  // whatever nq is: a decode tile zeroed 96 rows of 4 live ones per key block.
  std::fill(out, out + std::max(nq, kFewQueries) * padded_dim, 0.0f);
  const bool amx_pv = !Transform::kSparseWeights && AmxPvEnabled(p);
  const bool amx_pv8 = !Transform::kSparseWeights && AmxIntPvEnabled(p);
  // Whether P V reads v's rows, and not copies of its own (the integer or AMX products').
  const bool values_read = Transform::kSparseWeights || !(amx_pv || amx_pv8 || p.int_pv.set());
  std::optional<native::AmxTiles> tiles;  // configured once for the task's tile products
  if (((p.amx_qk != AmxScores::kOff || amx_pv) && native::Bf16PairsOnAmx()) || p.amx_qk8 ||
      amx_pv8) {
    tiles.emplace();
  }
  float* out_t = ws.acc_b.get();  // the dim-major accumulator of P V on tiles
  if (amx_pv || amx_pv8) std::fill(out_t, out_t + padded_dim * kTileQ, 0.0f);
  typename Transform::ForwardState state;
  const size_t row = (b * p.heads + h) * p.q_len + i0;
  HWY_ALIGN float sinks[kTileQ];
  for (size_t i = 0; i < kTileQ; ++i) sinks[i] = i < nq ? p.RowSink(h, i0 + i) : 0.0f;
  tr.BeginForward(state, p.has_sink && partials == nullptr ? sinks : nullptr, row);

  const size_t columns = ForwardColumns(nq);
  float* cache = nullptr;  // the statistics pass's scores, when they fit
  if constexpr (Transform::kRowStatsPass) {  // the row statistics before any weight
    if (partials != nullptr && !partials->observing) {  // split-KV: the tile's merged ones
      state = partials->observed_tiles[partial_task / partials->blocks];
    } else {
      if (partials == nullptr && k_end - k_begin <= TileWorkspace::kMaxCachedKeys) {
        cache = ws.ScoreCache(hwy::RoundUpTo(k_end - k_begin, kTileK));
      }
      for (size_t j0 = k_begin; j0 < k_end; j0 += kTileK) {
        const size_t nk = std::min(kTileK, p.kv_len - j0);
        float* tile = cache != nullptr ? cache + (j0 - k_begin) * kTileQ : scores;
        ScoreTile(p, k, b, kv_head, j0, nk, columns, q_panel, tile, ws);
        ModifyScoresKeyMajor(p, h, i0, nq, columns, j0, nk, tile, kTileQ);
        const bool all_visible = QueryLimits(p, i0, nq, j0, nk, ws);
        tr.ObserveTile(tile, nk, columns, j0, ws.visible, all_visible, state);
      }
      if (partials != nullptr) {  // observing one key block; merged in SplitKeysForward
        partials->observed_blocks[partial_task] = state;
        return;
      }
      tr.EndObserving(state, columns);
    }
  }
  for (size_t j0 = k_begin; j0 < k_end; j0 += kTileK) {
    const size_t nk = std::min(kTileK, p.kv_len - j0);
    if (j0 + kTileK < k_end && (amx_pv || amx_pv8)) {
      PrefetchTransposedValues(p, b, kv_head, j0 + kTileK, std::min(kTileK, k_end - j0 - kTileK));
    } else if (j0 + kTileK < k_end && nq <= kFewQueries) {  // a decode tile's next rows
      const size_t next = std::min(kTileK, k_end - j0 - kTileK);
      const bool ask_k = ScoresReadKeyRows(p) && AsksDecodeRows(k);
      const bool ask_v = values_read && AsksDecodeRows(v);
      const bool ask_codes = ws.few_int_queries && p.int_qk.block_tables != nullptr;
      const bool ask_any = ask_k || ask_v || ask_codes;
      if ((ws.few_queries || ws.few_int_queries) && cache == nullptr && ask_any) {
        // asked for key by key by the score loop
        ws.ahead = {ask_k ? &k : nullptr, ask_v ? &v : nullptr, j0 + kTileK, next, dim,
                    ask_codes ? &p : nullptr, b, kv_head};
      } else {
        if (ask_k) PrefetchRowsOf(k, j0 + kTileK, next, dim);
        if (ask_v) PrefetchRowsOf(v, j0 + kTileK, next, dim);
        PrefetchPagedKeyCodes(p, b, kv_head, j0 + kTileK, next);
      }
    }
    bool all_visible = QueryLimits(p, i0, nq, j0, nk, ws);
    const ColumnRange live = LiveColumns(p, i0, nq, columns, all_visible, ws);
    if (cache != nullptr) {
      scores = cache + (j0 - k_begin) * kTileQ;
    } else {
      ScoreTile(p, k, b, kv_head, j0, nk, columns, q_panel, scores, ws, live);
      ws.ahead = {};
      ModifyScoresKeyMajor(p, h, i0, nq, columns, j0, nk, scores, kTileQ, live);
    }
    if constexpr (Transform::kSparseWeights) {
      const float* second_scores = nullptr;
      if (two_views) {
        const HeadRows k2 = RowsOf(second.k, b, kv_head);
        MatMul<false>({k2.row(j0), k2.token_stride, 1}, {ws.panel_b.get(), kTileQ},
                      {ws.grads.get(), kTileQ}, nk, columns, dim);
        second_scores = ws.grads.get();
      }
      SparseTileForward(p, tr, v, j0, nk, nq, columns, all_visible, state, ws, second_scores,
                        out);
    } else {
      tr.WeighTile(scores, nk, columns, ws.visible, all_visible, state, ws.factor);
      if (amx_pv || amx_pv8) {
        ScaleColumns(out_t, dim, nq, columns, ws.factor);
        if (amx_pv) {
          AmxWeightsTimesValues(p, b, kv_head, j0, nk, columns, scores, out_t, ws);
        } else {
          AmxIntWeightsTimesValues(p, b, kv_head, j0, nk, columns, scores, out_t, ws);
        }
        continue;
      }
      ScaleRows(out, nq, padded_dim, ws.factor);
      if (p.int_pv.set()) {  // rounds P itself, to its codes
        if (TakesFewQueryIntValues(p, nq)) {
          FewQueryIntValues(p, b, kv_head, j0, nk, columns, scores, out, padded_dim, ws);
        } else {
          IntWeightsTimesValues(p, b, kv_head, j0, nk, nq, columns, scores, out, padded_dim, ws);
        }
        continue;
      }
      if (p.p_folds_v) {  // a KvCache's int8 V, its token scales folded into P (math.md §4.3)
        HWY_ALIGN float units[kTileQ];  // each row's S_i
        FoldTokenScales(v, j0, nk, columns, scores, units);
        if (FewQueryTokenValues(p, v, nq, j0, ws.range_begin, ws.range_end, scores, units, out,
                                padded_dim, ws.weight_pairs)) {
          continue;
        }
        RoundWeights(scores, nk, columns, p.p_format, p.p_scale);
        UnfoldTokenScales(v, j0, nk, columns, units, scores);
      } else if (p.p_format != quant::Format::kFp32) {
        RoundWeights(scores, nk, columns, p.p_format, p.p_scale);
      }
      if (TakesFewQueryValues(p, nq, ws.range_begin, ws.range_end)) {
        FewQueryValues(v, j0, ws.range_begin[0], ws.range_end[0], scores, dim, out, padded_dim);
        continue;
      }
      const RhsView v_rows =
          p.amx_pv.vt != nullptr
              ? TransposedValueRows(p, b, kv_head, j0, nk, padded_dim, ws.rows.get())
              : DimRows(v, j0, nk, dim, padded_dim, ws.rows.get());
      // Hidden keys' weights are exactly 0 (the transform's mask), so a finite tile of V lets
      // each block of rows run over all of its keys (MatMulRanged's zero_outside).
      const bool zero_outside = !all_visible && RowsFinite(v_rows, 0, nk, padded_dim);
      MatMulRanged({scores, 1, kTileQ}, v_rows, {out, padded_dim}, nq, padded_dim,
                   ws.range_begin, ws.range_end, zero_outside);
    }
  }
  float* o_rows = RowOf(args.o, b, h, i0);
  size_t o_stride = size_t(args.o.strides.token), o_columns = dim;
  if (partials != nullptr) {  // the block's unnormalised rows, padding columns (zeros) included
    if constexpr (Transform::kMergesKeyBlocks) {
      Transform::SaveBlock(state, nq, partials->rows, partials->State(partial_task));
    }
    std::fill(ws.factor, ws.factor + nq, 1.0f);
    o_rows = partials->Outputs(partial_task);
    o_stride = o_columns = padded_dim;
  } else {
    tr.FinishForward(state, nq, ws.factor, row);
  }
  if (amx_pv || amx_pv8) {
    StoreColumns(out_t, nq, o_columns, ws.factor, o_rows, o_stride);
  } else {
    StoreRows(out, nq, o_columns, padded_dim, ws.factor, 1.0f, o_rows, o_stride);
  }
}

// Split-KV's merge (docs/math.md §5) of query tile t's key blocks, in block order: the
// transform's weight for each block's output and the row's statistics, then O = sum_c w_c o_c.
template <class Transform>
HWY_INLINE void MergeKeyBlocks(const AttentionProblem& p, const ForwardArgs& args,
                               const Transform& tr, const TileTask& t, size_t blocks,
                               const KeyBlockPartials<Transform>& partials, size_t first_task) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), padded_dim = partials.padded_dim;
  const size_t row0 = (t.batch * p.heads + t.head) * p.q_len + t.first;
  HWY_ALIGN float out[kMaxHeadDim + 64];
  float weights[kMaxKeyBlocks];
  const float* states[kMaxKeyBlocks];
  for (size_t c = 0; c < blocks; ++c) states[c] = partials.State(first_task + c);
  float* o = RowOf(args.o, t.batch, t.head, t.first);
  for (size_t i = 0; i < t.count; ++i) {
    const bool sink = p.has_sink;
    const float tau = p.RowSink(t.head, t.first + i);
    tr.MergeBlocks(states, blocks, partials.rows, i, sink ? &tau : nullptr, row0 + i, weights);
    for (size_t c0 = 0; c0 < padded_dim; c0 += N) hn::Store(hn::Zero(d), d, out + c0);
    for (size_t c = 0; c < blocks; ++c) {
      if (weights[c] == 0.0f) continue;  // a block with no visible key (or nothing to weigh)
      const auto w = hn::Set(d, weights[c]);
      const float* block = partials.Outputs(first_task + c) + i * padded_dim;
      for (size_t c0 = 0; c0 < padded_dim; c0 += N) {
        hn::Store(hn::MulAdd(w, hn::LoadU(d, block + c0), hn::Load(d, out + c0)), d, out + c0);
      }
    }
    std::copy(out, out + p.dim, o + i * size_t(args.o.strides.token));
  }
}

// Split-KV (docs/math.md §5): every (query tile, key block) a task, then one merge per query
// tile; with a statistics pass, the blocks are observed and their statistics merged per tile
// first. Blocks and merge order depend on the shape only, so the result does not depend on
// the thread count.
template <class Transform>
void SplitKeysForward(const AttentionProblem& p, const ForwardArgs& args, const Transform& tr,
                      const SecondView& second) {
  const size_t q_tiles = hwy::DivCeil(p.q_len, kTileQ), tile_tasks = p.batch * p.heads * q_tiles;
  const size_t blocks = hwy::DivCeil(p.kv_len, p.key_block);
  HWY_ASSERT(blocks <= kMaxKeyBlocks && p.key_block % kTileK == 0);
  KeyBlockPartials<Transform> partials;
  partials.rows = std::min(kTileQ, p.q_len);
  partials.padded_dim = PaddedDim(p.dim);
  partials.state = Transform::kBlockState;
  partials.blocks = blocks;
  std::vector<float, native::PooledAllocator<float>> buffer(tile_tasks * blocks *
                                                           partials.TaskFloats());
  partials.data = buffer.data();
  // Task (tile, block)'s query tile and its visible keys in the block (none: k_begin >= k_end).
  const auto block_task = [&](size_t task, size_t& k_begin, size_t& k_end) {
    const TileTask t = SplitTask(task / blocks, p.heads, p.q_len, kTileQ);
    const size_t block_begin = task % blocks * p.key_block;
    k_begin = std::max(block_begin, KeyBegin(p, t.first, t.count));
    k_end = std::min(KeyEnd(p, t.first, t.count), block_begin + p.key_block);
    return t;
  };
  std::vector<typename Transform::ForwardState> observed;
  if constexpr (Transform::kRowStatsPass) {
    observed.resize(tile_tasks * (blocks + 1));
    partials.observed_blocks = observed.data();
    partials.observed_tiles = observed.data() + tile_tasks * blocks;
    partials.observing = true;
    ParallelTiles(tile_tasks * blocks, [&](size_t task, TileWorkspace& ws) HWY_ATTR {
      size_t k_begin, k_end;
      const TileTask t = block_task(task, k_begin, k_end);
      if (k_begin >= k_end) return tr.BeginForward(observed[task], nullptr, 0);  // nothing seen
      ForwardTileTask(p, args, tr, second, t, k_begin, k_end, &partials, task, ws);
    });
    ParallelTiles(tile_tasks, [&](size_t tile, TileWorkspace&) HWY_ATTR {
      const TileTask t = SplitTask(tile, p.heads, p.q_len, kTileQ);
      typename Transform::ForwardState& merged = partials.observed_tiles[tile];
      tr.MergeObserved(partials.observed_blocks + tile * blocks, blocks, merged);
      tr.EndObserving(merged, ForwardColumns(t.count));
      tr.SaveObserved(merged, t.count, (t.batch * p.heads + t.head) * p.q_len + t.first);
    });
    partials.observing = false;
  }
  ParallelTiles(tile_tasks * blocks, [&](size_t task, TileWorkspace& ws) HWY_ATTR {
    size_t k_begin, k_end;
    const TileTask t = block_task(task, k_begin, k_end);
    if (k_begin >= k_end) {  // no visible key: a block that drops out of the merge
      Transform::EmptyBlock(t.count, partials.rows, partials.State(task));
      return;
    }
    ForwardTileTask(p, args, tr, second, t, k_begin, k_end, &partials, task, ws);
  });
  ParallelTiles(tile_tasks, [&](size_t task, TileWorkspace&) HWY_ATTR {
    MergeKeyBlocks(p, args, tr, SplitTask(task, p.heads, p.q_len, kTileQ), blocks, partials,
                   task * blocks);
  });
}

template <class Transform>
void TiledForward(const AttentionProblem& p, const ForwardArgs& args, const Transform& tr,
                  const SecondView& second = {}) {
  if constexpr (Transform::kMergesKeyBlocks) {
    if (p.key_block != 0 && p.kv_len > p.key_block) return SplitKeysForward(p, args, tr, second);
  }
  const size_t q_tiles = hwy::DivCeil(p.q_len, kTileQ);
  ParallelTiles(p.batch * p.heads * q_tiles, [&](size_t task, TileWorkspace& ws) HWY_ATTR {
    const TileTask t = SplitTask(task, p.heads, p.q_len, kTileQ);
    ForwardTileTask(p, args, tr, second, t, KeyBegin(p, t.first, t.count),
                    KeyEnd(p, t.first, t.count),
                    static_cast<const KeyBlockPartials<Transform>*>(nullptr), 0, ws);
  });
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
