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

// Whether a forward task configures AMX tiles once for its tile products.
HWY_INLINE bool TaskUsesAmxTiles(const AttentionProblem& p, bool amx_pv, bool amx_pv8) {
  return ((p.amx_qk != AmxScores::kOff || amx_pv) && native::Bf16PairsOnAmx()) || p.amx_qk8 ||
         amx_pv8;
}

// One query tile's pass over its keys: query tile (b, h, [i0, i0 + nq)) against keys
// [k_begin, k_end), one key tile at a time, its output accumulated in `out` (and out_t) and
// the transform's state kept here. ForwardTileTask runs one alone; SpannedKeyBlockTask runs
// the tiles of several kv heads in lockstep through each key tile. With `partials` it leaves
// the block's unnormalised output and state there (the sink enters in the merge), else the
// tile's output and statistics.
template <class Transform>
struct ForwardTileRun {
  using State = typename Transform::ForwardState;
  const AttentionProblem& p;
  const ForwardArgs& args;
  const Transform& tr;
  const SecondView& second;
  const TileTask t;
  const size_t k_begin, k_end;
  const KeyBlockPartials<Transform>* const partials;
  const size_t partial_task;
  const size_t kv_head, padded_dim, columns;
  const bool two_views, amx_pv, amx_pv8;
  // Whether P V reads v's rows, and not copies of its own (the integer or AMX products').
  const bool values_read;
  const HeadRows q, k, v;
  float* const out;    // the tile's rows' accumulator, [max(nq, 4)][padded_dim]
  float* const out_t;  // the dim-major accumulator of P V on tiles
  float* cache = nullptr;  // the statistics pass's scores, when they fit
  State state;
  // How PackQueryTile left the workspace, and whether in the run's own panel.
  bool few_queries = false, few_int_queries = false, packed = false;

  ForwardTileRun(const AttentionProblem& p_, const ForwardArgs& args_, const Transform& tr_,
                 const SecondView& second_, const TileTask& t_, size_t k_begin_, size_t k_end_,
                 const KeyBlockPartials<Transform>* partials_, size_t partial_task_, float* out_,
                 float* out_t_)
      : p(p_), args(args_), tr(tr_), second(second_), t(t_), k_begin(k_begin_), k_end(k_end_),
        partials(partials_), partial_task(partial_task_), kv_head(t_.head / p_.group()),
        padded_dim(PaddedDim(p_.dim)), columns(ForwardColumns(t_.count)),
        two_views(second_.q.data != nullptr),
        amx_pv(!Transform::kSparseWeights && AmxPvEnabled(p_)),
        amx_pv8(!Transform::kSparseWeights && AmxIntPvEnabled(p_)),
        values_read(Transform::kSparseWeights || !(amx_pv || amx_pv8 || p_.int_pv.set())),
        q(CodedRowsOf(args_.q, p_.q_codes, t_.batch, t_.head)),
        k(CodedRowsOf(args_.k, p_.k_codes, t_.batch, kv_head)),
        v(CodedRowsOf(args_.v, p_.v_codes, t_.batch, kv_head)), out(out_), out_t(out_t_) {}

  // The tile's queries in the form its score product reads (ws's panels, or a decode tile's
  // few queries into `own`, a spanned run's panel).
  void PackQueryTile(TileWorkspace& ws, FewQueryPanel own = {}) {
    PackQueries(p, q, t.batch, t.head, t.first, t.count, ws.panel_a.get(), ws, own);
    if (two_views) {
      PackTransposed(RowsOf(second.q, t.batch, t.head), t.first, t.count, p.dim, p.scale, kTileQ,
                     ws.panel_b.get(), p.unit_queries);
    }
    few_queries = ws.few_queries, few_int_queries = ws.few_int_queries;
    packed = (few_queries || few_int_queries) && own.rows != nullptr &&
             ws.few_panel.rows == own.rows;
  }

  // The next query tile's rows of this head (the task a thread most often takes next), asked
  // for into L2 while this tile's key tiles run: a tile's packing waited on its rows' misses
  // (a windowed tile's packing took 6x its share of a dense one's, docs/performance.md §4.25).
  // Under the causal mask also the keys it sees first (its diagonal's K and V rows, which no
  // earlier tile of the head read). Sliding windows only: a dense tile's many key tiles hide
  // its packing, and the requests measured 1.05x a dense forward's time at N 1024, D 64.
  void AskNextQueryTile() const {
    if (p.window == 0 || p.head_rows != 0 || partials != nullptr || q.coded() ||
        t.first + t.count >= p.q_len) {
      return;
    }
    const size_t next = t.first + t.count, n = std::min(kTileQ, p.q_len - next);
    const auto ask = [&](const char* row, size_t bytes) {
      for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b, 0, 2);
    };
    for (size_t i = 0; i < n; ++i) {
      ask(reinterpret_cast<const char*>(q.row(next + i)), p.dim * sizeof(float));
    }
    if (!p.causal) return;
    const size_t seen = std::min(p.VisibleEnd(next - 1), p.kv_len);
    const size_t end = std::min(p.VisibleEnd(next + n - 1), p.kv_len);
    for (size_t j = seen; j < end; ++j) {
      if (!k.coded()) ask(reinterpret_cast<const char*>(k.row(j)), p.dim * sizeof(float));
      if (!v.coded()) ask(reinterpret_cast<const char*>(v.row(j)), p.dim * sizeof(float));
    }
  }

  // Before each key tile of a run that shares the workspace with others (SpannedKeyBlockTask):
  // its queries packed in its own panel are pointed at again, others are packed again.
  void ResumeQueries(TileWorkspace& ws, FewQueryPanel own) {
    if (!packed) return PackQueryTile(ws, own);
    ws.few_panel = own;
    ws.few_queries = few_queries, ws.few_int_queries = few_int_queries;
  }

  // Zero accumulators and the transform's initial state. The tile's rows only, and at least
  // the 4 that a decode tile's few-query products write whatever nq is: a decode tile zeroed
  // 96 rows of 4 live ones per key block.
  void Begin() {
    std::fill(out, out + std::max(t.count, kFewQueries) * padded_dim, 0.0f);
    if (amx_pv || amx_pv8) std::fill(out_t, out_t + padded_dim * kTileQ, 0.0f);
    HWY_ALIGN float sinks[kTileQ];
    for (size_t i = 0; i < kTileQ; ++i) {
      sinks[i] = i < t.count ? p.RowSink(t.head, t.first + i) : 0.0f;
    }
    tr.BeginForward(state, p.has_sink && partials == nullptr ? sinks : nullptr, Row());
  }

  // The first row of the tile in the [batch, heads, q_len] grid.
  size_t Row() const { return (t.batch * p.heads + t.head) * p.q_len + t.first; }

  // The statistics pass's key tile j0 (into the score cache when there is one).
  void ObserveKeyTile(size_t j0, TileWorkspace& ws) {
    const size_t nk = std::min(kTileK, p.kv_len - j0);
    float* tile = cache != nullptr ? cache + (j0 - k_begin) * kTileQ : ws.scores.get();
    ScoreTile(p, k, t.batch, kv_head, j0, nk, columns, ws.panel_a.get(), tile, ws);
    ModifyScoresKeyMajor(p, t.head, t.first, t.count, columns, j0, nk, tile, kTileQ);
    const bool all_visible = QueryLimits(p, t.first, t.count, j0, nk, ws);
    tr.ObserveTile(tile, nk, columns, j0, ws.visible, all_visible, state);
  }

  // Asks for the next key tile's rows ahead of their use (a decode tile's, or AMX's V).
  // In a spanned task this run's next tile comes after the other heads' tiles: asking for
  // the next head's rows instead measured the same (docs/performance.md §4.21), asking for
  // none up to 2.2x the time at 32768 keys.
  void AskNextTile(size_t j0, TileWorkspace& ws) {
    const size_t next_j0 = j0 + kTileK;
    if (next_j0 >= k_end) return;
    const size_t next = std::min(kTileK, k_end - next_j0);
    if (amx_pv || amx_pv8) return PrefetchTransposedValues(p, t.batch, kv_head, next_j0, next);
    if (t.count > kFewQueries) return;
    const bool ask_k = ScoresReadKeyRows(p) && AsksDecodeRows(k);
    const bool ask_v = values_read && AsksDecodeRows(v);
    const bool ask_codes = ws.few_int_queries && AsksIntKeyRows(p.int_qk);
    if ((ws.few_queries || ws.few_int_queries) && cache == nullptr &&
        (ask_k || ask_v || ask_codes)) {
      // asked for key by key by the score loop
      ws.ahead = {ask_k ? &k : nullptr, ask_v ? &v : nullptr, next_j0, next, p.dim,
                  ask_codes ? &p : nullptr, t.batch, kv_head};
      FlattenRowsAhead(ws.ahead);
    } else {
      if (ask_k) PrefetchRowsOf(k, next_j0, next, p.dim);
      if (ask_v) PrefetchRowsOf(v, next_j0, next, p.dim);
      PrefetchPagedKeyCodes(p, t.batch, kv_head, next_j0, next);
    }
  }

  // Key tile j0: its scores, the transform's weights, O += W V.
  void WeighKeyTile(size_t j0, TileWorkspace& ws) {
    const size_t nq = t.count, i0 = t.first, b = t.batch, dim = p.dim;
    const size_t nk = std::min(kTileK, p.kv_len - j0);
    AskNextTile(j0, ws);
    bool all_visible = QueryLimits(p, i0, nq, j0, nk, ws);
    const ColumnRange live = LiveColumns(p, i0, nq, columns, all_visible, ws);
    float* scores = ws.scores.get();
    if (cache != nullptr) {
      scores = cache + (j0 - k_begin) * kTileQ;
    } else {
      ScoreTile(p, k, b, kv_head, j0, nk, columns, ws.panel_a.get(), scores, ws, live);
      ws.ahead = {};
      ModifyScoresKeyMajor(p, t.head, i0, nq, columns, j0, nk, scores, kTileQ, live);
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
      WeighDenseKeyTile(j0, nk, all_visible, scores, ws);
    }
  }

  // A dense transform's weights of key tile j0 (its scores in `scores`) and O += W V.
  void WeighDenseKeyTile(size_t j0, size_t nk, bool all_visible, float* scores,
                         TileWorkspace& ws) {
    const size_t nq = t.count, b = t.batch, dim = p.dim;
    tr.WeighTile(scores, nk, columns, ws.visible, all_visible, state, ws.factor);
    if (amx_pv || amx_pv8) {
      ScaleColumns(out_t, dim, nq, columns, ws.factor);
      if (amx_pv) {
        AmxWeightsTimesValues(p, b, kv_head, j0, nk, columns, scores, out_t, ws);
      } else {
        AmxIntWeightsTimesValues(p, b, kv_head, j0, nk, columns, scores, out_t, ws);
      }
      return;
    }
    ScaleRows(out, nq, padded_dim, ws.factor);
    if (p.int_pv.set()) {  // rounds P itself, to its codes
      if (TakesFewQueryIntValues(p, nq)) {
        FewQueryIntValues(p, b, kv_head, j0, nk, columns, scores, out, padded_dim, ws);
      } else {
        IntWeightsTimesValues(p, b, kv_head, j0, nk, nq, columns, scores, out, padded_dim, ws);
      }
      return;
    }
    if (p.p_folds_v) {  // a KvCache's int8 V, its token scales folded into P (math.md §4.3)
      HWY_ALIGN float units[kTileQ];  // each row's S_i
      FoldTokenScales(v, j0, nk, columns, scores, units);
      if (FewQueryTokenValues(p, v, nq, j0, ws.range_begin, ws.range_end, scores, units, out,
                              padded_dim, ws.weight_pairs)) {
        return;
      }
      RoundWeights(scores, nk, columns, p.p_format, p.p_scale);
      UnfoldTokenScales(v, j0, nk, columns, units, scores);
    } else if (p.p_format != quant::Format::kFp32) {
      RoundWeights(scores, nk, columns, p.p_format, p.p_scale);
    }
    if (TakesFewQueryValues(p, nq, ws.range_begin, ws.range_end)) {
      FewQueryValues(v, j0, ws.range_begin[0], ws.range_end[0], scores, dim, out, padded_dim);
      return;
    }
    const RhsView v_rows =
        p.amx_pv.vt != nullptr
            ? TransposedValueRows(p, b, kv_head, j0, nk, padded_dim, ws.rows.get())
            : DimRows(v, j0, nk, dim, padded_dim, ws.rows.get());
    // Hidden keys' weights are exactly 0 (the transform's mask), so a finite tile of V lets
    // each block of rows run over all of its keys (MatMulRanged's zero_outside).
    const bool zero_outside = !all_visible && RowsFinite(v_rows, 0, nk, padded_dim);
    MatMulRanged({scores, 1, kTileQ}, v_rows, {out, padded_dim}, nq, padded_dim, ws.range_begin,
                 ws.range_end, zero_outside);
  }

  // The tile's output: normalised rows into O, or the block's unnormalised rows (padding
  // columns, zeros, included) and state into the partials.
  void Finish(TileWorkspace& ws) {
    const size_t nq = t.count;
    float* o_rows = RowOf(args.o, t.batch, t.head, t.first);
    size_t o_stride = size_t(args.o.strides.token), o_columns = p.dim;
    if (partials != nullptr) {
      if constexpr (Transform::kMergesKeyBlocks) {
        Transform::SaveBlock(state, nq, partials->rows, partials->State(partial_task));
      }
      std::fill(ws.factor, ws.factor + nq, 1.0f);
      o_rows = partials->Outputs(partial_task);
      o_stride = o_columns = padded_dim;
    } else {
      tr.FinishForward(state, nq, ws.factor, Row());
    }
    if (amx_pv || amx_pv8) {
      StoreColumns(out_t, nq, o_columns, ws.factor, o_rows, o_stride);
    } else {
      StoreRows(out, nq, o_columns, padded_dim, ws.factor, 1.0f, o_rows, o_stride);
    }
  }
};

// One forward task: a query tile against keys [k_begin, k_end) (ForwardTileRun), with the
// statistics pass first when the transform has one.
template <class Transform>
HWY_INLINE void ForwardTileTask(const AttentionProblem& p, const ForwardArgs& args,
                                const Transform& tr, const SecondView& second, const TileTask& t,
                                size_t k_begin, size_t k_end,
                                const KeyBlockPartials<Transform>* partials, size_t partial_task,
                                TileWorkspace& ws) {
  ForwardTileRun<Transform> run(p, args, tr, second, t, k_begin, k_end, partials, partial_task,
                                ws.acc_a.get(), ws.acc_b.get());
  run.PackQueryTile(ws);
  run.AskNextQueryTile();
  run.Begin();
  std::optional<native::AmxTiles> tiles;  // configured once for the task's tile products
  if (TaskUsesAmxTiles(p, run.amx_pv, run.amx_pv8)) tiles.emplace();
  if constexpr (Transform::kRowStatsPass) {  // the row statistics before any weight
    if (partials != nullptr && !partials->observing) {  // split-KV: the tile's merged ones
      run.state = partials->observed_tiles[partial_task / partials->blocks];
    } else {
      if (partials == nullptr && k_end - k_begin <= TileWorkspace::kMaxCachedKeys) {
        run.cache = ws.ScoreCache(hwy::RoundUpTo(k_end - k_begin, kTileK));
      }
      for (size_t j0 = k_begin; j0 < k_end; j0 += kTileK) run.ObserveKeyTile(j0, ws);
      if (partials != nullptr) {  // observing one key block; merged in SplitKeysForward
        partials->observed_blocks[partial_task] = run.state;
        return;
      }
      tr.EndObserving(run.state, run.columns);
    }
  }
  for (size_t j0 = k_begin; j0 < k_end; j0 += kTileK) run.WeighKeyTile(j0, ws);
  run.Finish(ws);
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

// Split-KV task (tile, block)'s query tile and its visible keys in the block (none: k_begin
// >= k_end).
HWY_INLINE TileTask KeyBlockTask(const AttentionProblem& p, size_t tile, size_t block,
                                 size_t& k_begin, size_t& k_end) {
  const TileTask t = SplitTask(tile, p.heads, p.q_len, kTileQ);
  const size_t block_begin = block * p.key_block;
  k_begin = std::max(block_begin, KeyBegin(p, t.first, t.count));
  k_end = std::min(KeyEnd(p, t.first, t.count), block_begin + p.key_block);
  return t;
}

// A split-KV task over key block `block` of query tiles [first_tile, first_tile + span) (kv
// heads of one batch, one tile each; docs/design.md §8): their runs step through each key
// tile in lockstep, so that a token's rows of those heads, side by side, are read together.
// Each run keeps its accumulator and its packed queries in the workspace's span scratch.
// Every run does what ForwardTileTask would, in the same order, so the results are the same
// bits.
template <class Transform>
void SpannedKeyBlockTask(const AttentionProblem& p, const ForwardArgs& args, const Transform& tr,
                         const SecondView& second, size_t first_tile, size_t span, size_t block,
                         const KeyBlockPartials<Transform>& partials, TileWorkspace& ws) {
  std::optional<ForwardTileRun<Transform>> runs[kSpanHeads];
  size_t k_begin = 0, k_end = 0;
  for (size_t s = 0; s < span; ++s) {
    const size_t tile = first_tile + s, task = tile * partials.blocks + block;
    size_t begin, end;
    const TileTask t = KeyBlockTask(p, tile, block, begin, end);
    if (begin >= end) {  // no visible key: a block that drops out of the merge
      if (partials.observing) {
        tr.BeginForward(partials.observed_blocks[task], nullptr, 0);
      } else {
        Transform::EmptyBlock(t.count, partials.rows, partials.State(task));
      }
      continue;
    }
    // Every tile of the span has the same rows, so the same keys.
    HWY_DASSERT(k_begin == k_end || (begin == k_begin && end == k_end));
    k_begin = begin, k_end = end;
    runs[s].emplace(p, args, tr, second, t, begin, end, &partials, task,
                    ws.SpanAccumulator(s), nullptr);
    runs[s]->PackQueryTile(ws, ws.SpanPanel(s));
    runs[s]->Begin();
    if constexpr (Transform::kRowStatsPass) {
      if (!partials.observing) runs[s]->state = partials.observed_tiles[tile];
    }
  }
  std::optional<native::AmxTiles> tiles;  // configured once for the task's tile products
  if (TaskUsesAmxTiles(p, false, false)) tiles.emplace();
  const auto lockstep = [&](const auto& step) HWY_ATTR {
    for (size_t j0 = k_begin; j0 < k_end; j0 += kTileK) {
      for (size_t s = 0; s < span; ++s) {
        if (!runs[s]) continue;
        runs[s]->ResumeQueries(ws, ws.SpanPanel(s));
        step(s, j0);
      }
    }
  };
  if constexpr (Transform::kRowStatsPass) {
    if (partials.observing) {  // the statistics pass's blocks
      lockstep([&](size_t s, size_t j0) HWY_ATTR { runs[s]->ObserveKeyTile(j0, ws); });
      for (size_t s = 0; s < span; ++s) {
        if (runs[s]) partials.observed_blocks[runs[s]->partial_task] = runs[s]->state;
      }
      return;
    }
  }
  lockstep([&](size_t s, size_t j0) HWY_ATTR { runs[s]->WeighKeyTile(j0, ws); });
  for (size_t s = 0; s < span; ++s) {
    if (runs[s]) runs[s]->Finish(ws);
  }
}

// Split-KV (docs/math.md §5): every (query tile, key block) a task, or every (span of query
// tiles, key block) where the plan spans kv heads (span_heads), then one merge per query tile; with a
// statistics pass, the blocks are observed and their statistics merged per tile first. Blocks
// and merge order depend on the shape only, so the result does not depend on the thread count
// (nor on the span: each tile's blocks compute the same either way).
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
  // The plan's span (SpanHeads), for the dense transforms' P V on rows.
  const bool rows_pv = !Transform::kSparseWeights && second.q.data == nullptr &&
                       !AmxPvEnabled(p) && !AmxIntPvEnabled(p);
  const size_t span = rows_pv ? std::max<size_t>(p.span_heads, 1) : 1;
  const size_t spans = hwy::DivCeil(p.heads, span);  // per batch (one query tile a head)
  // One pass over the blocks (observing or weighing, as partials says).
  const auto block_pass = [&] {
    if (span > 1) {
      const auto spanned = [&](size_t task, TileWorkspace& ws) HWY_ATTR {
        const size_t group = task / blocks, first_head = group % spans * span;
        SpannedKeyBlockTask(p, args, tr, second, group / spans * p.heads + first_head,
                            std::min(span, p.heads - first_head), task % blocks, partials, ws);
      };
      return ParallelTiles(p.batch * spans * blocks, spanned);
    }
    ParallelTiles(tile_tasks * blocks, [&](size_t task, TileWorkspace& ws) HWY_ATTR {
      size_t k_begin, k_end;
      const TileTask t = KeyBlockTask(p, task / blocks, task % blocks, k_begin, k_end);
      if (k_begin < k_end) {
        ForwardTileTask(p, args, tr, second, t, k_begin, k_end, &partials, task, ws);
      } else if (partials.observing) {  // nothing seen
        tr.BeginForward(partials.observed_blocks[task], nullptr, 0);
      } else {  // no visible key: a block that drops out of the merge
        Transform::EmptyBlock(t.count, partials.rows, partials.State(task));
      }
    });
  };
  std::vector<typename Transform::ForwardState> observed;
  if constexpr (Transform::kRowStatsPass) {
    observed.resize(tile_tasks * (blocks + 1));
    partials.observed_blocks = observed.data();
    partials.observed_tiles = observed.data() + tile_tasks * blocks;
    partials.observing = true;
    block_pass();
    ParallelTiles(tile_tasks, [&](size_t tile, TileWorkspace&) HWY_ATTR {
      const TileTask t = SplitTask(tile, p.heads, p.q_len, kTileQ);
      typename Transform::ForwardState& merged = partials.observed_tiles[tile];
      tr.MergeObserved(partials.observed_blocks + tile * blocks, blocks, merged);
      tr.EndObserving(merged, ForwardColumns(t.count));
      tr.SaveObserved(merged, t.count, (t.batch * p.heads + t.head) * p.q_len + t.first);
    });
    partials.observing = false;
  }
  block_pass();
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
