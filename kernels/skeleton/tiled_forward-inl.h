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
#include "kernels/skeleton/attention_problem.h"
#include "kernels/skeleton/matmul_tile-inl.h"
#include "kernels/skeleton/score_tile-inl.h"
#include "kernels/skeleton/sparse_tiles-inl.h"
#include "kernels/skeleton/tile_sizes.h"
#include "kernels/skeleton/tile_workspace-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---- forward ------------------------------------------------------------------------------

template <class Transform>
void TiledForward(const AttentionProblem& p, const ForwardArgs& args, const Transform& tr,
                  const SecondView& second = {}) {
  const size_t dim = p.dim, padded_dim = PaddedDim(dim);
  const size_t q_tiles = hwy::DivCeil(p.q_len, kTileQ);
  const bool two_views = second.q.data != nullptr;
  ParallelTiles(p.batch * p.heads * q_tiles, [&](size_t task, TileWorkspace& ws) HWY_ATTR {
    const auto [b, h, i0, nq] = SplitTask(task, p.heads, p.q_len, kTileQ);
    const HeadRows q = CodedRowsOf(args.q, p.q_codes, b, h);
    const HeadRows k = CodedRowsOf(args.k, p.k_codes, b, h / p.group());
    const HeadRows v = CodedRowsOf(args.v, p.v_codes, b, h / p.group());
    float* q_panel = ws.panel_a.get();
    float* scores = ws.scores.get();
    float* out = ws.acc_a.get();
    PackQueries(p, q, b, h, i0, nq, q_panel, ws);
    if (two_views) PackTransposed(RowsOf(second.q, b, h), i0, nq, dim, p.scale, kTileQ,
                                  ws.panel_b.get(), p.unit_queries);
    std::fill(out, out + kTileQ * padded_dim, 0.0f);
    const bool amx_pv = !Transform::kSparseWeights && AmxPvEnabled(p);
    const bool amx_pv8 = !Transform::kSparseWeights && AmxIntPvEnabled(p);
    std::optional<native::AmxTiles> tiles;  // configured once for the task's tile products
    if (p.amx_qk != AmxScores::kOff || p.amx_qk8 || amx_pv || amx_pv8) tiles.emplace();
    float* out_t = ws.acc_b.get();  // the dim-major accumulator of P V on tiles
    if (amx_pv || amx_pv8) std::fill(out_t, out_t + padded_dim * kTileQ, 0.0f);
    typename Transform::ForwardState state;
    const size_t row = (b * p.heads + h) * p.q_len + i0;
    tr.BeginForward(state, p.has_sink, p.has_sink ? p.sink(h) : 0.0f, row);

    const size_t key_end = KeyEnd(p, i0, nq), columns = QueryColumns(nq);
    float* cache = nullptr;  // the statistics pass's scores, when they fit
    if constexpr (Transform::kRowStatsPass) {  // the row statistics before any weight
      if (key_end <= TileWorkspace::kMaxCachedKeys) {
        cache = ws.ScoreCache(hwy::RoundUpTo(key_end, kTileK));
      }
      for (size_t j0 = 0; j0 < key_end; j0 += kTileK) {
        const size_t nk = std::min(kTileK, p.kv_len - j0);
        float* tile = cache != nullptr ? cache + j0 * kTileQ : scores;
        ScoreTile(p, k, b, h / p.group(), j0, nk, columns, q_panel, tile, ws);
        const bool all_visible = QueryLimits(p, i0, nq, j0, nk, ws);
        tr.ObserveTile(tile, nk, columns, j0, ws.visible, all_visible, state);
      }
      tr.EndObserving(state, columns);
    }
    for (size_t j0 = 0; j0 < key_end; j0 += kTileK) {
      const size_t nk = std::min(kTileK, p.kv_len - j0);
      if (cache != nullptr) {
        scores = cache + j0 * kTileQ;
      } else {
        ScoreTile(p, k, b, h / p.group(), j0, nk, columns, q_panel, scores, ws);
      }
      const bool all_visible = QueryLimits(p, i0, nq, j0, nk, ws);
      if constexpr (Transform::kSparseWeights) {
        const float* second_scores = nullptr;
        if (two_views) {
          const HeadRows k2 = RowsOf(second.k, b, h / p.group());
          MatMul<false>({k2.row(j0), k2.token_stride, 1}, {ws.panel_b.get(), kTileQ},
                        {ws.grads.get(), kTileQ}, nk, columns, dim);
          second_scores = ws.grads.get();
        }
        SparseTileForward(p, tr, v, j0, nk, nq, columns, all_visible, state, ws, second_scores,
                          out);
      } else {
        tr.WeighTile(scores, nk, columns, ws.visible, all_visible, state, ws.factor);
        if (amx_pv || amx_pv8) {
          ScaleColumns(out_t, dim, nq, ws.factor);
          if (amx_pv) {
            AmxWeightsTimesValues(p, b, h / p.group(), j0, nk, columns, scores, out_t, ws);
          } else {
            AmxIntWeightsTimesValues(p, b, h / p.group(), j0, nk, columns, scores, out_t, ws);
          }
          continue;
        }
        ScaleRows(out, nq, padded_dim, ws.factor);
        if (p.int_pv.set()) {  // rounds P itself, to its codes
          IntWeightsTimesValues(p, b, h / p.group(), j0, nk, nq, columns, scores, out, padded_dim,
                                ws);
          continue;
        }
        if (p.p_format != quant::Format::kFp32) {
          RoundWeights(scores, nk, columns, p.p_format, p.p_scale);
        }
        const RhsView v_rows =
            p.amx_pv.vt != nullptr
                ? TransposedValueRows(p, b, h / p.group(), j0, nk, padded_dim, ws.rows.get())
                : DimRows(v, j0, nk, dim, padded_dim, ws.rows.get());
        MatMulRanged({scores, 1, kTileQ}, v_rows, {out, padded_dim}, nq, padded_dim,
                     ws.range_begin, ws.range_end);
      }
    }
    tr.FinishForward(state, nq, ws.factor, row);
    if (amx_pv || amx_pv8) {
      StoreColumns(out_t, nq, dim, ws.factor, RowOf(args.o, b, h, i0), size_t(args.o.strides.token));
    } else {
      StoreRows(out, nq, dim, padded_dim, ws.factor, 1.0f, RowOf(args.o, b, h, i0),
                size_t(args.o.strides.token));
    }
  });
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
