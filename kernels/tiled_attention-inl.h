// The one tiled attention skeleton (DESIGN.md): tiling, causal tile skipping, GQA indexing,
// tails, operand packing and the TBB work split live here once; a row transform policy
// (e.g. SoftmaxTransform) decides how scores become weights and how dP becomes dS.
//
//   forward  (task = batch, head, query tile): S^T = K Q^T, W = policy(S), O += W V
//   backward, query side (task = batch, head, query tile): dQ += dS K
//   backward, key side   (task = batch, kv head, key tile): dV += W^T dO, dK += dS^T Q
//   backward, short sequences (task = batch, kv head; Tq, Tk <= kTileMax): both sides at once
//       (dense transforms; sparse ones take the two sides at every length)
// The backward split means no two tasks write the same dQ, dK or dV rows: no atomics, and the
// result does not depend on the thread count. The pieces every pass shares (workspace, packing,
// the task grid) are in tile_workspace-inl.h, the sparse transforms' tiles in
// sparse_tiles-inl.h.
//
// A row transform policy is an object (its options and where its saved statistics go) that
// provides (see SoftmaxTransform, KIntervalTransform, ThresholdTransform):
//   ForwardState, BeginForward(state, has_sink, sink_logit, row)  per-row state of one query
//       tile whose first row is `row` of the [batch, heads, q_len] grid
//   kRowStatsPass: if true, ObserveTile(st, nk, columns, j0, visible, all_visible, state) on
//       every key tile and then EndObserving(state, columns), before any weight: for weights
//       that need the final row statistics (K-interval: row max, min, argmax, argmin)
//   WeighTile(st, nk, columns, visible, all_visible, state, alpha)  scores -> weights in place
//       on a key-major tile (the first `columns` queries), with a per-row factor that rescales
//       the output accumulated so far
//   kSparseWeights: if true, instead of WeighTile, WeighTiles(st, st2, nk, columns, visible,
//       all_visible, state) turns one view's scores (st2 null) or two views' into weights in st
//       and returns how many are nonzero; the tile's P V is then skipped (none), accumulated
//       entry by entry (few) or as a dense product. No rescaling. A second view's queries and
//       keys come in SecondView. In the backward a sparse transform's weight is c * a(s), c a
//       per-row coefficient (row parameter kCoefficientParam) and a(s) zero for most scores:
//       Exceed(d, s, row, a, slope) gives a and da/ds, so that dV takes c a, dS = c dP slope,
//       and dP is computed only where a != 0 (dense tiles fall back to the products). Its
//       row sums sum_j dS and sum_j a dP reach FinishTerms (no terms pass).
//   FinishForward(state, nq, out_factor, row)    final output factor; saves the statistics of
//       rows [row, row + nq) of the [batch, heads, q_len] grid
//   kRowParams, RowParams(row, delta, out)      the backward's view of a row, kRowParams floats
//   WeightAndGrad(d, s, dp, params, w, ds)      the backward's elementwise map: the weight (for
//       dV) and dS from a score and dP, with the row's parameters as vectors
//   kHasRowTerms: if true and NeedsRowTerms(), Terms(d, s, dp, params, t1, t2) summed over each
//       row's visible keys, FinishTerms(row, t1, t2, params, corrections) completing the row's
//       parameters and its dS corrections at Argmax(row) and Argmin(row) (see the backward);
//       a dense one also says GradWaitsForTerms() (does dS need the completed parameters?)
//       and, when it does not, GradAndTerms(d, s, dp, params, ds, t1, t2) gives both at once
//   Specialized(body), optional: calls body(t) with t a compile-time specialisation of the
//       transform for its options; the skeleton runs its per-entry loops inside (WithSpecialized)
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_TILED_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_TILED_ATTENTION_INL_H_
#undef LPATTN_KERNELS_TILED_ATTENTION_INL_H_
#else
#define LPATTN_KERNELS_TILED_ATTENTION_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "kernels/attention_problem.h"
#include "kernels/matmul_tile-inl.h"
#include "kernels/sparse_tiles-inl.h"
#include "kernels/tile_sizes.h"
#include "kernels/tile_workspace-inl.h"

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
    const HeadRows q = RowsOf(args.q, b, h);
    const HeadRows k = KvRowsOf(args.k, p.k_codes, b, h / p.group());
    const HeadRows v = KvRowsOf(args.v, p.v_codes, b, h / p.group());
    float* q_panel = ws.panel_a.get();
    float* scores = ws.scores.get();
    float* out = ws.acc_a.get();
    if (p.int_qk.q != nullptr) {
      PackIntQueries(p, b, h, i0, nq, ws);
    } else {
      PackTransposed(q, i0, nq, dim, p.scale, kTileQ, q_panel, p.unit_queries);
    }
    if (two_views) PackTransposed(RowsOf(second.q, b, h), i0, nq, dim, p.scale, kTileQ,
                                  ws.panel_b.get(), p.unit_queries);
    std::fill(out, out + kTileQ * padded_dim, 0.0f);
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
        ScaleRows(out, nq, padded_dim, ws.factor);
        if (p.int_pv.v != nullptr) {  // rounds P itself, to the codes it multiplies
          IntWeightsTimesValues(p, b, h / p.group(), j0, nk, nq, columns, scores, out, padded_dim,
                                ws);
          continue;
        }
        if (p.p_format != quant::Format::kFp32) {
          RoundWeights(scores, nk, columns, p.p_format, p.p_scale);
        }
        const RhsView v_rows = DimRows(v, j0, nk, dim, padded_dim, ws.rows.get());
        MatMulRanged({scores, 1, kTileQ}, v_rows, {out, padded_dim}, nq, padded_dim,
                     ws.range_begin, ws.range_end);
      }
    }
    tr.FinishForward(state, nq, ws.factor, row);
    StoreRows(out, nq, dim, padded_dim, ws.factor, 1.0f, RowOf(args.o, b, h, i0),
              size_t(args.o.strides.token));
  });
}

// ---- backward -----------------------------------------------------------------------------
//
// The transform's backward sees each row through kRowParams floats (softmax: lse and Delta;
// K-interval: its grid, 1/Z, Delta, ...), built once per call into a [rows x kRowParams]
// table. Transforms whose dS needs sums over the whole row first (K-interval's calibration
// terms, the prob surrogate's sum of pi g) get a terms pass that completes their row
// parameters, and their extrema corrections (dS at each row's argmax and argmin) are added
// as rank-one updates after the tiled passes.

// Runs body(t) with the transform, or with its compile-time specialisation for this call's
// options when it offers one (Specialized, K-interval): the per-entry loops run inside, so
// they carry no run-time option tests.
template <class Transform, class Body>
HWY_INLINE void WithSpecialized(const Transform& tr, const Body& body) {
  if constexpr (requires { tr.Specialized(body); }) {
    tr.Specialized(body);
  } else {
    body(tr);
  }
}

// The backward's per-row parameters of every row, and each (batch, head)'s share of d(sink),
// §1.1: d tau = - sum_i A_i Delta_i with A_i = exp(tau - lse_i).
template <class Transform>
void BackwardRowParams(const AttentionProblem& p, const BackwardArgs& args, const Transform& tr,
                       float* params, double* sink_partials) {
  ParallelTiles(p.batch * p.heads, [&](size_t task, TileWorkspace&) HWY_ATTR {
    const size_t b = task / p.heads, h = task % p.heads;
    const HeadRows o = RowsOf(args.o, b, h), d_o = RowsOf(args.d_o, b, h);
    double sink_share = 0.0;
    for (size_t i = 0; i < p.q_len; ++i) {
      double dot = 0.0;  // Delta_i = dO_i . o_i, summed in double
      for (size_t c = 0; c < p.dim; ++c) dot += double(d_o.row(i)[c]) * o.row(i)[c];
      const size_t row = task * p.q_len + i;
      if (p.has_sink) sink_share -= std::exp(double(p.sink(h)) - args.lse[row]) * dot;
      tr.RowParams(row, float(dot), params + row * Transform::kRowParams);
    }
    sink_partials[task] = sink_share;
  });
}

// A query-side sweep over the key tiles of one query tile: S^T and dP^T tiles (keys x
// queries), visit(scores, grads, nk, j0, all_visible) with the visibility limits in ws.
// kDenseGrads false skips the dP product (the visit computes what it needs).
template <bool kDenseGrads = true, class Visit>
HWY_INLINE void QuerySideSweep(const AttentionProblem& p, const BackwardArgs& args, size_t b,
                               size_t h, size_t i0, size_t nq, TileWorkspace& ws,
                               const Visit& visit) {
  const size_t dim = p.dim;
  const HeadRows q = RowsOf(args.q, b, h), d_o = RowsOf(args.d_o, b, h);
  const HeadRows k = RowsOf(args.k, b, h / p.group()), v = RowsOf(args.v, b, h / p.group());
  PackTransposed(q, i0, nq, dim, p.scale, kTileQ, ws.panel_a.get());
  PackTransposed(d_o, i0, nq, dim, 1.0f, kTileQ, ws.panel_b.get());
  const size_t key_end = KeyEnd(p, i0, nq), columns = QueryColumns(nq);
  for (size_t j0 = 0; j0 < key_end; j0 += kTileK) {
    const size_t nk = std::min(kTileK, p.kv_len - j0);
    MatMul<false>({k.row(j0), k.token_stride, 1}, {ws.panel_a.get(), kTileQ},
                  {ws.scores.get(), kTileQ}, nk, columns, dim);
    if constexpr (kDenseGrads) {
      MatMul<false>({v.row(j0), v.token_stride, 1}, {ws.panel_b.get(), kTileQ},
                    {ws.grads.get(), kTileQ}, nk, columns, dim);
    }
    const bool all_visible = QueryLimits(p, i0, nq, j0, nk, ws);
    visit(ws.scores.get(), ws.grads.get(), nk, j0, columns, all_visible);
  }
}

// Adds one key tile's term elements (key-major, lanes are queries, row parameters staged) to
// each row's sums in ws.row_a, ws.row_b, over its visible keys. With kWithGrads (a transform
// whose dS does not wait for the sums) it also writes dS in place of dP, from the same
// evaluation of each entry (GradAndTerms); grads is then written, so a float*.
template <bool kWithGrads = false, class Transform, class Grads>
HWY_INLINE void AccumulateTerms(const Transform& tr, const float* scores, Grads* grads, size_t nk,
                                size_t columns, bool all_visible, TileWorkspace& ws) {
  WithSpecialized(tr, [&](const auto& fixed) HWY_ATTR {
    const hn::ScalableTag<float> d;
    const size_t N = hn::Lanes(d);
    hn::Vec<decltype(d)> row_params[Transform::kRowParams];
    for (size_t i = 0; i < columns; i += N) {
      LoadRowParams<Transform>(d, ws, i, row_params);
      const auto limit = hn::Load(d, ws.visible + i);
      auto sum1 = hn::Load(d, ws.row_a + i), sum2 = hn::Load(d, ws.row_b + i);
      for (size_t j = 0; j < nk; ++j) {
        const auto s = hn::LoadU(d, scores + j * kTileQ + i);
        const auto dp = hn::LoadU(d, grads + j * kTileQ + i);
        const auto seen = all_visible ? hn::FirstN(d, N) : hn::Lt(hn::Set(d, float(j)), limit);
        auto t1 = hn::Zero(d), t2 = hn::Zero(d);
        if constexpr (kWithGrads) {
          auto ds = hn::Zero(d);
          fixed.GradAndTerms(d, s, dp, row_params, ds, t1, t2);
          hn::StoreU(hn::IfThenElseZero(seen, ds), d, grads + j * kTileQ + i);
        } else {
          fixed.Terms(d, s, dp, row_params, t1, t2);
        }
        sum1 = hn::Add(sum1, hn::IfThenElseZero(seen, t1));
        sum2 = hn::Add(sum2, hn::IfThenElseZero(seen, t2));
      }
      hn::Store(sum1, d, ws.row_a + i);
      hn::Store(sum2, d, ws.row_b + i);
    }
  });
}

// The terms pass: each row's sums over its visible keys of the transform's term elements,
// which FinishTerms turns into the row's remaining parameters and extrema corrections. (Long
// sequences fuse it into the query side instead: TiledBackwardQueries.)
template <class Transform>
void RowTermsPass(const AttentionProblem& p, const BackwardArgs& args, const Transform& tr,
                  float* params, float* corrections) {
  const size_t q_tiles = hwy::DivCeil(p.q_len, kTileQ);
  ParallelTiles(p.batch * p.heads * q_tiles, [&](size_t task, TileWorkspace& ws) HWY_ATTR {
    const auto [b, h, i0, nq] = SplitTask(task, p.heads, p.q_len, kTileQ);
    const size_t row = (b * p.heads + h) * p.q_len + i0;
    StageRowParams<Transform>(params, row, nq, ws);
    std::fill(ws.row_a, ws.row_a + kTileQ, 0.0f);
    std::fill(ws.row_b, ws.row_b + kTileQ, 0.0f);
    QuerySideSweep(p, args, b, h, i0, nq, ws,
                   [&](const float* scores, const float* grads, size_t nk, size_t, size_t columns,
                       bool all_visible) HWY_ATTR {
      AccumulateTerms(tr, scores, grads, nk, columns, all_visible, ws);
    });
    for (size_t i = 0; i < nq; ++i) {
      tr.FinishTerms(row + i, ws.row_a[i], ws.row_b[i], params + (row + i) * Transform::kRowParams,
                     corrections + 2 * (row + i));
    }
  });
}

// One query's row of a query-major tile (keys along vectors, `width` of them): the weights of
// its first `limit` keys (zero beyond) over the scores, dS over dP.
template <class Transform>
HWY_INLINE void WeighRowAndGrad(const Transform& tr, float* HWY_RESTRICT weights,
                                float* HWY_RESTRICT grads, size_t width, size_t limit,
                                const float* row_params) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  hn::Vec<decltype(d)> params[Transform::kRowParams];
  for (size_t k = 0; k < Transform::kRowParams; ++k) params[k] = hn::Set(d, row_params[k]);
  for (size_t j = 0; j < width; j += N) {
    auto w = hn::Zero(d), ds = hn::Zero(d);
    tr.WeightAndGrad(d, hn::LoadU(d, weights + j), hn::LoadU(d, grads + j), params, w, ds);
    const auto seen = hn::FirstN(d, limit > j ? limit - j : 0);
    hn::StoreU(hn::IfThenElseZero(seen, w), d, weights + j);
    hn::StoreU(hn::IfThenElseZero(seen, ds), d, grads + j);
  }
}

// One key tile of the query side (key-major S^T and dP^T, row parameters staged): dS in
// place of dP (with kWithTerms, and the row sums' elements from the same evaluation:
// AccumulateTerms), then dQ += dS K.
template <bool kWithTerms = false, class Transform>
HWY_INLINE void DenseQueryTile(const AttentionProblem& p, const Transform& tr, const HeadRows& k,
                               float* scores, float* grads, size_t nq, size_t nk, size_t j0,
                               size_t columns, bool all_visible, TileWorkspace& ws, float* dq) {
  const size_t dim = p.dim, padded_dim = PaddedDim(dim);
  if constexpr (kWithTerms) {
    AccumulateTerms<true>(tr, scores, grads, nk, columns, all_visible, ws);
  } else {
    WithSpecialized(tr, [&](const auto& fixed) HWY_ATTR {
      const hn::ScalableTag<float> d;
      const size_t N = hn::Lanes(d);
      hn::Vec<decltype(d)> row_params[Transform::kRowParams];
      for (size_t i = 0; i < columns; i += N) {
        LoadRowParams<Transform>(d, ws, i, row_params);
        const auto limit = hn::Load(d, ws.visible + i);
        for (size_t j = 0; j < nk; ++j) {
          auto w = hn::Zero(d), ds = hn::Zero(d);
          fixed.WeightAndGrad(d, hn::LoadU(d, scores + j * kTileQ + i),
                              hn::LoadU(d, grads + j * kTileQ + i), row_params, w, ds);
          if (!all_visible) ds = hn::IfThenElseZero(hn::Lt(hn::Set(d, float(j)), limit), ds);
          hn::StoreU(ds, d, grads + j * kTileQ + i);
        }
      }
    });
  }
  const RhsView k_rows = DimRows(k, j0, nk, dim, padded_dim, ws.rows.get());
  MatMulRanged({grads, 1, kTileQ}, k_rows, {dq, padded_dim}, nq, padded_dim, ws.range_begin,
               ws.range_end);
}

// Query side: dQ += dS K, one task per (batch, head, query tile). With `corrections` (a
// transform with row sums) the task sums its rows' terms on the way: in the same sweep as dS
// when dS does not wait for them (GradWaitsForTerms false); otherwise first, keeping the S and
// dP tiles (up to the workspace's cache), then completing its rows' parameters and computing
// dS from the kept tiles. Either way the terms cost no extra products.
template <class Transform>
void TiledBackwardQueries(const AttentionProblem& p, const BackwardArgs& args, const Transform& tr,
                          float* params, QueryTileRecord* records = nullptr,
                          float* corrections = nullptr) {
  const size_t dim = p.dim, padded_dim = PaddedDim(dim);
  const size_t q_tiles = hwy::DivCeil(p.q_len, kTileQ);
  ParallelTiles(p.batch * p.heads * q_tiles, [&](size_t task, TileWorkspace& ws) HWY_ATTR {
    const auto [b, h, i0, nq] = SplitTask(task, p.heads, p.q_len, kTileQ);
    const HeadRows k = RowsOf(args.k, b, h / p.group());
    float* dq = ws.acc_a.get();
    std::fill(dq, dq + kTileQ * padded_dim, 0.0f);
    const size_t row0 = (b * p.heads + h) * p.q_len + i0;
    StageRowParams<Transform>(params, row0, nq, ws);
    if constexpr (Transform::kSparseWeights) {
      const HeadRows d_o = RowsOf(args.d_o, b, h), v = RowsOf(args.v, b, h / p.group());
      std::fill(ws.row_a, ws.row_a + kTileQ, 0.0f);
      std::fill(ws.row_b, ws.row_b + kTileQ, 0.0f);
      QueryTileRecord& record = records[task];
      const size_t k_tiles = hwy::DivCeil(p.kv_len, kTileK);
      record.survivors.clear();
      record.begin.assign(k_tiles + 1, 0);
      record.crowded.assign(k_tiles, 0);
      size_t swept = 0;
      QuerySideSweep<false>(p, args, b, h, i0, nq, ws,
                            [&](float*, float*, size_t nk, size_t j0, size_t columns,
                                bool all_visible) HWY_ATTR {
        record.begin[j0 / kTileK] = uint32_t(record.survivors.size());
        swept = j0 / kTileK + 1;
        SparseQueryTile(p, tr, d_o, k, v, i0, nq, j0, nk, columns, all_visible, ws, record, dq);
      });
      for (size_t kt = swept; kt <= k_tiles; ++kt) {
        record.begin[kt] = uint32_t(record.survivors.size());
      }
      float no_corrections[2];
      for (size_t i = 0; i < nq; ++i) {
        tr.FinishTerms(row0 + i, ws.row_a[i], ws.row_b[i], nullptr, no_corrections);
      }
    } else {
      const auto dense_tile = [&](float* scores, float* grads, size_t nk, size_t j0,
                                  size_t columns, bool all_visible) HWY_ATTR {
        DenseQueryTile(p, tr, k, scores, grads, nq, nk, j0, columns, all_visible, ws, dq);
      };
      if constexpr (Transform::kHasRowTerms) {
        if (corrections != nullptr) {
          // When dS waits for the row sums (GradWaitsForTerms), they come first and the S and dP
          // tiles are kept (up to the workspace's cache) for dS; otherwise one sweep does both.
          const bool waits = tr.GradWaitsForTerms();
          const size_t key_end = KeyEnd(p, i0, nq), keys = hwy::RoundUpTo(key_end, kTileK);
          float* kept = waits && keys <= TileWorkspace::kMaxCachedKeys ? ws.ScoreCache(2 * keys)
                                                                       : nullptr;
          std::fill(ws.row_a, ws.row_a + kTileQ, 0.0f);
          std::fill(ws.row_b, ws.row_b + kTileQ, 0.0f);
          QuerySideSweep(p, args, b, h, i0, nq, ws,
                         [&](float* scores, float* grads, size_t nk, size_t j0, size_t columns,
                             bool all_visible) HWY_ATTR {
            if (!waits) {
              DenseQueryTile<true>(p, tr, k, scores, grads, nq, nk, j0, columns, all_visible, ws,
                                   dq);
              return;
            }
            AccumulateTerms(tr, scores, grads, nk, columns, all_visible, ws);
            if (kept == nullptr) return;
            std::copy(scores, scores + nk * kTileQ, kept + j0 * kTileQ);
            std::copy(grads, grads + nk * kTileQ, kept + (keys + j0) * kTileQ);
          });
          for (size_t i = 0; i < nq; ++i) {
            tr.FinishTerms(row0 + i, ws.row_a[i], ws.row_b[i],
                           params + (row0 + i) * Transform::kRowParams,
                           corrections + 2 * (row0 + i));
          }
          if (waits) {
            StageRowParams<Transform>(params, row0, nq, ws);  // now complete
            if (kept != nullptr) {
              const size_t columns = QueryColumns(nq);
              for (size_t j0 = 0; j0 < key_end; j0 += kTileK) {
                const size_t nk = std::min(kTileK, p.kv_len - j0);
                const bool all_visible = QueryLimits(p, i0, nq, j0, nk, ws);
                dense_tile(kept + j0 * kTileQ, kept + (keys + j0) * kTileQ, nk, j0, columns,
                           all_visible);
              }
            } else {
              QuerySideSweep(p, args, b, h, i0, nq, ws, dense_tile);
            }
          }
          StoreRows(dq, nq, dim, padded_dim, nullptr, p.scale, RowOf(args.dq, b, h, i0),
                    size_t(args.dq.strides.token));
          return;
        }
      }
      QuerySideSweep(p, args, b, h, i0, nq, ws, dense_tile);
    }
    StoreRows(dq, nq, dim, padded_dim, nullptr, p.scale, RowOf(args.dq, b, h, i0),
              size_t(args.dq.strides.token));
  });
}

// The buffers of a key-side task: K and V of the keys [j0, j0 + nk) packed transposed into
// panels `width` wide (K times the scale, so that scores come out scaled; dK picks the scale
// up at the end), the score and gradient tiles, and the zeroed dK and dV accumulators.
struct KeySide {
  float *k_panel, *v_panel, *weights, *grads, *dk, *dv;
};
HWY_INLINE KeySide BeginKeySide(const AttentionProblem& p, const HeadRows& k, const HeadRows& v,
                                size_t j0, size_t nk, size_t width, TileWorkspace& ws) {
  const KeySide side{ws.panel_a.get(), ws.panel_b.get(), ws.scores.get(),
                     ws.grads.get(),   ws.acc_a.get(),   ws.acc_b.get()};
  PackTransposed(k, j0, nk, p.dim, p.scale, width, side.k_panel);
  PackTransposed(v, j0, nk, p.dim, 1.0f, width, side.v_panel);
  const size_t padded_dim = PaddedDim(p.dim);
  std::fill(side.dk, side.dk + width * padded_dim, 0.0f);
  std::fill(side.dv, side.dv + width * padded_dim, 0.0f);
  return side;
}

// Stores the dK (times the scale) and dV rows of the keys [j0, j0 + nk).
HWY_INLINE void FinishKeySide(const AttentionProblem& p, const BackwardArgs& args, size_t b,
                              size_t kv_head, size_t j0, size_t nk, const float* dk,
                              const float* dv) {
  const size_t padded_dim = PaddedDim(p.dim);
  StoreRows(dk, nk, p.dim, padded_dim, nullptr, p.scale, RowOf(args.dk, b, kv_head, j0),
            size_t(args.dk.strides.token));
  StoreRows(dv, nk, p.dim, padded_dim, nullptr, 1.0f, RowOf(args.dv, b, kv_head, j0),
            size_t(args.dv.strides.token));
}

// Key side: dK and dV of one key tile, summed over the query heads of its GQA group and all
// query tiles in a fixed order.
template <class Transform>
void TiledBackwardKeys(const AttentionProblem& p, const BackwardArgs& args, const Transform& tr,
                       const float* params, const QueryTileRecord* records = nullptr) {
  const size_t q_tiles = hwy::DivCeil(p.q_len, kTileQ);
  const size_t dim = p.dim, padded_dim = PaddedDim(dim);
  const size_t k_tiles = hwy::DivCeil(p.kv_len, kTileK);
  ParallelTiles(p.batch * p.kv_heads * k_tiles, [&](size_t task, TileWorkspace& ws) HWY_ATTR {
    const auto [b, kv_head, j0, nk] = SplitTask(task, p.kv_heads, p.kv_len, kTileK);
    const HeadRows k = RowsOf(args.k, b, kv_head), v = RowsOf(args.v, b, kv_head);
    const auto [k_panel, v_panel, weights, grads, dk, dv] =
        BeginKeySide(p, k, v, j0, nk, kTileK, ws);

    const size_t first_query = p.FirstQuerySeeing(j0);
    for (size_t h = kv_head * p.group(); h < (kv_head + 1) * p.group(); ++h) {
      const HeadRows q = RowsOf(args.q, b, h), d_o = RowsOf(args.d_o, b, h);
      const float* head_params = params + (b * p.heads + h) * p.q_len * Transform::kRowParams;
      for (size_t i0 = first_query / kTileQ * kTileQ; i0 < p.q_len; i0 += kTileQ) {
        const size_t nq = std::min(kTileQ, p.q_len - i0);
        if constexpr (Transform::kSparseWeights) {
          const QueryTileRecord& record = records[(b * p.heads + h) * q_tiles + i0 / kTileQ];
          const size_t kt = j0 / kTileK;
          if (!record.crowded[kt]) {  // the query side's survivors: dV += c a dO, dK += dS Q
            for (uint32_t r = record.begin[kt]; r < record.begin[kt + 1]; ++r) {
              const Survivor& e = record.survivors[r];
              AddScaledRow(e.w, d_o.row(i0 + e.i), dim, dv + e.j * padded_dim);
              AddScaledRow(e.ds, q.row(i0 + e.i), dim, dk + e.j * padded_dim);
            }
            continue;
          }
        }
        MatMul<false>({q.row(i0), q.token_stride, 1}, {k_panel, kTileK}, {weights, kTileK}, nq,
                      kTileK, dim);
        if constexpr (Transform::kSparseWeights) {
          if (!SparseKeyTile(p, tr, q, d_o, RowsOf(args.v, b, kv_head), head_params, i0, nq, j0,
                             nk, ws, dk, dv)) {
            continue;  // nothing survived, or the survivors are done
          }
        } else {
          MatMul<false>({d_o.row(i0), d_o.token_stride, 1}, {v_panel, kTileK}, {grads, kTileK},
                        nq, kTileK, dim);
          // Rows are queries here: per-row parameters are broadcast, keys run along vectors.
          WithSpecialized(tr, [&](const auto& fixed) HWY_ATTR {
            for (size_t i = 0; i < nq; ++i) {
              const size_t end = p.VisibleEnd(i0 + i);
              const size_t limit = end <= j0 ? 0 : std::min(end - j0, nk);
              WeighRowAndGrad(fixed, weights + i * kTileK, grads + i * kTileK, kTileK, limit,
                              head_params + (i0 + i) * Transform::kRowParams);
            }
          });
        }
        // Key j of the tile is seen by the tile's queries [begin_j, nq).
        for (size_t j = 0; j < nk; ++j) {
          const size_t first = p.FirstQuerySeeing(j0 + j);
          ws.range_begin[j] = uint32_t(std::clamp(first, i0, i0 + nq) - i0);
          ws.range_end[j] = uint32_t(nq);
        }
        const RhsView do_rows = DimRows(d_o, i0, nq, dim, padded_dim, ws.rows.get());
        MatMulRanged({weights, 1, kTileK}, do_rows, {dv, padded_dim}, nk, padded_dim,
                     ws.range_begin, ws.range_end);
        const RhsView q_rows = DimRows(q, i0, nq, dim, padded_dim, ws.rows2.get());
        MatMulRanged({grads, 1, kTileK}, q_rows, {dk, padded_dim}, nk, padded_dim,
                     ws.range_begin, ws.range_end);
      }
    }
    FinishKeySide(p, args, b, kv_head, j0, nk, dk, dv);
  });
}

// Short sequences (every query and every key of a head within one tile): one task per
// (batch, kv head) computes the scores, weights and dS of each head of its group once and
// all three gradients from them, where the two passes would each recompute them.
//   W, dS = policy(Q K^T, dO V^T);  dQ = dS K;  dV += W^T dO;  dK += dS^T Q
HWY_INLINE bool FitsOneTile(const AttentionProblem& p) {
  return p.q_len <= kTileMax && p.kv_len <= kTileMax;
}

template <class Transform>
void WholeHeadBackward(const AttentionProblem& p, const BackwardArgs& args, const Transform& tr,
                       const float* params) {
  const size_t dim = p.dim, padded_dim = PaddedDim(dim), nq = p.q_len, nk = p.kv_len;
  const hn::ScalableTag<float> d;
  const size_t width = hwy::RoundUpTo(nk, hn::Lanes(d));  // keys along vectors
  ParallelTiles(p.batch * p.kv_heads, [&](size_t task, TileWorkspace& ws) HWY_ATTR {
    const size_t b = task / p.kv_heads, kv_head = task % p.kv_heads;
    const HeadRows k = RowsOf(args.k, b, kv_head), v = RowsOf(args.v, b, kv_head);
    const auto [k_panel, v_panel, weights, grads, dk, dv] = BeginKeySide(p, k, v, 0, nk, width, ws);
    float* dq = ws.acc_c.get();

    for (size_t h = kv_head * p.group(); h < (kv_head + 1) * p.group(); ++h) {
      const HeadRows q = RowsOf(args.q, b, h), d_o = RowsOf(args.d_o, b, h);
      const float* head_params = params + (b * p.heads + h) * p.q_len * Transform::kRowParams;
      MatMul<false>({q.row(0), q.token_stride, 1}, {k_panel, width}, {weights, width}, nq, width,
                    dim);
      MatMul<false>({d_o.row(0), d_o.token_stride, 1}, {v_panel, width}, {grads, width}, nq,
                    width, dim);
      WithSpecialized(tr, [&](const auto& fixed) HWY_ATTR {
        for (size_t i = 0; i < nq; ++i) {
          const size_t limit = std::min(p.VisibleEnd(i), nk);
          WeighRowAndGrad(fixed, weights + i * width, grads + i * width, width, limit,
                          head_params + i * Transform::kRowParams);
          ws.range_begin[i] = 0;  // query i reads keys [0, limit)
          ws.range_end[i] = uint32_t(limit);
        }
      });
      std::fill(dq, dq + nq * padded_dim, 0.0f);
      MatMulRanged({grads, width, 1}, DimRows(k, 0, nk, dim, padded_dim, ws.rows.get()),
                   {dq, padded_dim}, nq, padded_dim, ws.range_begin, ws.range_end);
      StoreRows(dq, nq, dim, padded_dim, nullptr, p.scale, RowOf(args.dq, b, h, 0),
                size_t(args.dq.strides.token));
      for (size_t j = 0; j < nk; ++j) {  // key j is seen by queries [first, nq)
        ws.range_begin[j] = uint32_t(std::min(p.FirstQuerySeeing(j), nq));
        ws.range_end[j] = uint32_t(nq);
      }
      MatMulRanged({weights, 1, width}, DimRows(d_o, 0, nq, dim, padded_dim, ws.rows.get()),
                   {dv, padded_dim}, nk, padded_dim, ws.range_begin, ws.range_end);
      MatMulRanged({grads, 1, width}, DimRows(q, 0, nq, dim, padded_dim, ws.rows2.get()),
                   {dk, padded_dim}, nk, padded_dim, ws.range_begin, ws.range_end);
    }
    FinishKeySide(p, args, b, kv_head, 0, nk, dk, dv);
  });
}

// dS's extrema corrections as rank-one updates: for each row, dm at its argmax key and da at
// its argmin key, so dQ_i += scale (dm k_argmax + da k_argmin) and dK_argmax += scale dm q_i,
// dK_argmin += scale da q_i. One task per (batch, kv head) writes its keys' dK and its heads'
// dQ rows, in row order.
template <class Transform>
void ExtremaCorrections(const AttentionProblem& p, const BackwardArgs& args, const Transform& tr,
                        const float* corrections) {
  ParallelTiles(p.batch * p.kv_heads, [&](size_t task, TileWorkspace&) {
    const size_t b = task / p.kv_heads, kv_head = task % p.kv_heads;
    const HeadRows k = RowsOf(args.k, b, kv_head);
    for (size_t h = kv_head * p.group(); h < (kv_head + 1) * p.group(); ++h) {
      const HeadRows q = RowsOf(args.q, b, h);
      for (size_t i = 0; i < p.q_len; ++i) {
        const size_t row = (b * p.heads + h) * p.q_len + i;
        const float terms[2] = {p.scale * corrections[2 * row], p.scale * corrections[2 * row + 1]};
        const size_t keys[2] = {tr.Argmax(row), tr.Argmin(row)};
        float* dq = RowOf(args.dq, b, h, i);
        for (size_t e = 0; e < 2; ++e) {
          if (terms[e] == 0.0f) continue;
          float* dk = RowOf(args.dk, b, kv_head, keys[e]);
          for (size_t c = 0; c < p.dim; ++c) {
            dq[c] += terms[e] * k.row(keys[e])[c];
            dk[c] += terms[e] * q.row(i)[c];
          }
        }
      }
    }
  });
}

// Full backward: the row parameters (and, if the transform needs them, its row terms), then
// short sequences in one pass, long ones as the query side and then the key side, then the
// transform's extrema corrections.
template <class Transform>
void TiledBackward(const AttentionProblem& p, const BackwardArgs& args, const Transform& tr) {
  const size_t rows = p.batch * p.heads * p.q_len;
  std::vector<float> params(rows * Transform::kRowParams);
  std::vector<double> sink_partials(p.batch * p.heads);
  BackwardRowParams(p, args, tr, params.data(), sink_partials.data());
  std::vector<float> corrections;
  if constexpr (Transform::kHasRowTerms && !Transform::kSparseWeights) {
    if (tr.NeedsRowTerms()) {
      corrections.assign(2 * rows, 0.0f);
      // Long sequences sum the terms inside the query side (TiledBackwardQueries).
      if (FitsOneTile(p)) RowTermsPass(p, args, tr, params.data(), corrections.data());
    }
  }
  // Sparse transforms take the two passes at every length: their query side gathers the row
  // sums and records the survivors that the key side then needs no score product for.
  if constexpr (Transform::kSparseWeights) {
    std::vector<QueryTileRecord> records(p.batch * p.heads * hwy::DivCeil(p.q_len, kTileQ));
    TiledBackwardQueries(p, args, tr, params.data(), records.data());
    TiledBackwardKeys(p, args, tr, params.data(), records.data());
  } else if (FitsOneTile(p)) {
    WholeHeadBackward(p, args, tr, params.data());
  } else {
    TiledBackwardQueries(p, args, tr, params.data(), nullptr,
                         corrections.empty() ? nullptr : corrections.data());
    TiledBackwardKeys(p, args, tr, params.data());
  }
  if constexpr (Transform::kHasRowTerms && !Transform::kSparseWeights) {
    if (!corrections.empty()) ExtremaCorrections(p, args, tr, corrections.data());
  }
  if (p.sink_logits != nullptr && args.d_sink != nullptr) {  // learned sinks only
    for (size_t h = 0; h < p.heads; ++h) {
      double sum = 0.0;  // a fixed summation order: the result is thread-count independent
      for (size_t b = 0; b < p.batch; ++b) sum += sink_partials[b * p.heads + h];
      args.d_sink[h] = float(sum);
    }
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
