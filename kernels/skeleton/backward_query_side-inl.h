// The skeleton's backward, query side (docs/design.md §3): the per-row parameters of every row,
// the terms pass of transforms whose dS needs row sums, and dQ += dS K with one task per
// (batch, head, query tile). The key side and the driver are in tiled_backward-inl.h.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_SKELETON_BACKWARD_QUERY_SIDE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_SKELETON_BACKWARD_QUERY_SIDE_INL_H_
#undef LPATTN_KERNELS_SKELETON_BACKWARD_QUERY_SIDE_INL_H_
#else
#define LPATTN_KERNELS_SKELETON_BACKWARD_QUERY_SIDE_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "kernels/native/amx_products.h"
#include "kernels/native/bf16_pair_products.h"
#include "kernels/skeleton/attention_problem.h"
#include "kernels/skeleton/matmul_tile-inl.h"
#include "kernels/skeleton/score_bias-inl.h"
#include "kernels/skeleton/sparse_tiles-inl.h"
#include "kernels/skeleton/tile_sizes.h"
#include "kernels/skeleton/tile_workspace-inl.h"

HWY_BEFORE_NAMESPACE();
#if HWY_HAVE_SCALABLE && HWY_COMPILER_GCC_ACTUAL
// GCC 12's ivopts pass crashes on SVE code of the K-interval backward's loops: off for scalable
// targets, until HWY_AFTER_NAMESPACE pops the options (docs/design.md §11).
#pragma GCC optimize("no-ivopts")
#endif
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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
// docs/math.md §1.1: d tau = - sum_i A_i Delta_i with A_i = exp(tau - lse_i).
template <class Transform>
void BackwardRowParams(const AttentionProblem& p, const BackwardArgs& args, const Transform& tr,
                       float* params, double* sink_partials) {
  // Delta takes dP's dO (§4.2), so that sum_j P_ij dP_ij = Delta_i holds for a rounded one too.
  const ConstTensor dp_d_o = ProductOperands(p, args).dp_d_o;
  ParallelTiles(p.batch * p.heads, [&](size_t task, TileWorkspace&) HWY_ATTR {
    const size_t b = task / p.heads, h = task % p.heads;
    const HeadRows o = RowsOf(args.o, b, h), d_o = RowsOf(dp_d_o, b, h);
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
  const BackwardOperands ops = ProductOperands(p, args);  // dP's (§4.2)
  const HeadRows q = RowsOf(args.q, b, h), d_o = RowsOf(ops.dp_d_o, b, h);
  const HeadRows k = RowsOf(args.k, b, h / p.group()), v = RowsOf(ops.dp_v, b, h / p.group());
  PackTransposed(q, i0, nq, dim, p.scale, kTileQ, ws.panel_a.get());
  PackTransposed(d_o, i0, nq, dim, 1.0f, kTileQ, ws.panel_b.get());
  const size_t key_end = KeyEnd(p, i0, nq), columns = QueryColumns(nq);
  // docs/math.md §4.2's bf16 products on AMX or dot tiles (BackwardTiles): S^T (with bt.scores)
  // and dP^T, key-major like the register tiles'.
  const BackwardTiles& bt = p.bwd.tiles;
  const bool on_tiles = kDenseGrads && bt.on;
  const size_t q_slice = b * p.heads + h, kv_slice = b * p.kv_heads + h / p.group();
  uint16_t* tail = reinterpret_cast<uint16_t*>(ws.key_rows.get());
  for (size_t j0 = KeyBegin(p, i0, nq); j0 < key_end; j0 += kTileK) {
    const size_t nk = std::min(kTileK, p.kv_len - j0);
    if (on_tiles && bt.scores) {
      native::Bf16PairScoreTile(bt.k_rows + (kv_slice * p.kv_len + j0) * dim, dim, nk,
                                bt.q_pairs + q_slice * dim * bt.q_pad + 2 * i0, bt.q_pad, columns,
                                dim, p.scale, ws.scores.get(), kTileQ, tail);
    } else {
      MatMul<false>({k.row(j0), k.token_stride, 1}, {ws.panel_a.get(), kTileQ},
                    {ws.scores.get(), kTileQ}, nk, columns, dim);
    }
    if (on_tiles) {
      native::Bf16PairMatMul(bt.dp_v_rows + (kv_slice * p.kv_len + j0) * dim, dim, nk,
                             bt.dp_d_o_pairs + q_slice * dim * bt.q_pad + 2 * i0, 2 * bt.q_pad,
                             columns, dim, false, ws.grads.get(), kTileQ, tail);
    } else if constexpr (kDenseGrads) {
      MatMul<false>({v.row(j0), v.token_stride, 1}, {ws.panel_b.get(), kTileQ},
                    {ws.grads.get(), kTileQ}, nk, columns, dim);
    }
    ModifyScoresKeyMajor(p, h, i0, nq, columns, j0, nk, ws.scores.get(), kTileQ);
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
    RowParamVectors<decltype(d), Transform::kRowParams> row_params;
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
    // Plain variables, not a structured binding: clang 14 cannot capture bindings in lambdas.
    const TileTask t = SplitTask(task, p.heads, p.q_len, kTileQ);
    const size_t b = t.batch, h = t.head, i0 = t.first, nq = t.count;
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
  RowParamVectors<decltype(d), Transform::kRowParams> params;
#if HWY_HAVE_SCALABLE
  params = {row_params, 0};  // each read broadcasts its float (docs/design.md §11)
#else
  for (size_t k = 0; k < Transform::kRowParams; ++k) params[k] = hn::Set(d, row_params[k]);
#endif
  for (size_t j = 0; j < width; j += N) {
    auto w = hn::Zero(d), ds = hn::Zero(d);
    tr.WeightAndGrad(d, hn::LoadU(d, weights + j), hn::LoadU(d, grads + j), params, w, ds);
    const auto seen = hn::FirstN(d, limit > j ? limit - j : 0);
    hn::StoreU(hn::IfThenElseZero(seen, w), d, weights + j);
    hn::StoreU(hn::IfThenElseZero(seen, ds), d, grads + j);
  }
}

// K^T of one kv head for the query side's dQ^T on AMX or dot tiles (BackwardTiles): bf16 codes, or
// int8 codes with their channels' scales.
struct KeysOnTiles {
  const uint16_t* bf16 = nullptr;
  Int8GradientRows int8;
  const float* scales = nullptr;
};
HWY_INLINE KeysOnTiles KeysOnTilesOf(const BackwardTiles& bt, size_t kv_slice, size_t dim) {
  const size_t at = kv_slice * dim * bt.kv_pad;
  if (bt.int8) {
    const Int8GradientRows k{bt.k_t8, bt.k_t8_bf16};
    return {nullptr, k.At(at), bt.k_scales8 + kv_slice * dim};
  }
  return {bt.k_t + at, {}, nullptr};
}

// One key tile of the query side (key-major S^T and dP^T, row parameters staged): dS in
// place of dP (with kWithTerms, and the row sums' elements from the same evaluation:
// AccumulateTerms), then dQ += dS K.
// On AMX or dot tiles (k_t, the kv head's K^T, set) dQ^T += K^T dS^T into the dim-major dq
// ([dim][kTileQ]), dS rounded to bf16 as it is paired, or to int8 quads with bwd = int8
// (docs/math.md §4.2).
template <bool kWithTerms = false, class Transform>
HWY_INLINE void DenseQueryTile(const AttentionProblem& p, const Transform& tr, const HeadRows& k,
                               float* scores, float* grads, size_t nq, size_t nk, size_t j0,
                               size_t columns, bool all_visible, TileWorkspace& ws, float* dq,
                               const KeysOnTiles& k_t = {}) {
  const size_t dim = p.dim, padded_dim = PaddedDim(dim);
  if constexpr (kWithTerms) {
    AccumulateTerms<true>(tr, scores, grads, nk, columns, all_visible, ws);
  } else {
    WithSpecialized(tr, [&](const auto& fixed) HWY_ATTR {
      const hn::ScalableTag<float> d;
      const size_t N = hn::Lanes(d);
      RowParamVectors<decltype(d), Transform::kRowParams> row_params;
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
  if (k_t.scales != nullptr) {  // int8
    Int8Gradient(k_t.int8.At(j0), p.bwd.tiles.kv_pad, k_t.scales, dim, grads, nk, nq, kTileQ, dq,
                 ws);
    return;
  }
  if (k_t.bf16 != nullptr) {
    const size_t depth = hwy::RoundUpTo(nk, 32);
    uint16_t* pairs = reinterpret_cast<uint16_t*>(ws.rows.get());
    native::AmxBf16WeightPairs(grads, nk, nq, kTileQ, depth, pairs);
    native::Bf16PairMatMul(k_t.bf16 + j0, p.bwd.tiles.kv_pad, dim, pairs, 2 * kTileQ, nq, depth,
                           true, dq, kTileQ, reinterpret_cast<uint16_t*>(ws.key_rows.get()));
    return;
  }
  RoundBackwardBlock(p.bwd, grads, nk, kTileQ, nq);  // the block of (i0, j0), §4.2
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
    // Plain variables, not a structured binding: clang 14 cannot capture bindings in lambdas.
    const TileTask t = SplitTask(task, p.heads, p.q_len, kTileQ);
    const size_t b = t.batch, h = t.head, i0 = t.first, nq = t.count;
    const HeadRows k = RowsOf(OrCall(p.bwd.k, args.k), b, h / p.group());  // dQ = dS K's
    float* dq = ws.acc_a.get();  // dim-major [dim][kTileQ] on AMX or dot tiles
    std::fill(dq, dq + kTileQ * padded_dim, 0.0f);
    const bool on_tiles = !Transform::kSparseWeights && p.bwd.tiles.on;
    const KeysOnTiles k_t =
        on_tiles ? KeysOnTilesOf(p.bwd.tiles, b * p.kv_heads + h / p.group(), dim) : KeysOnTiles{};
    std::optional<native::AmxTiles> tiles;  // configured once for the task's tile products
    if (on_tiles && native::Bf16PairsOnAmx()) tiles.emplace();  // int8 on AMX comes with bf16
    const auto store_dq = [&] {
      if (on_tiles) {
        StoreTransposed(dq, nq, dim, kTileQ, p.scale, RowOf(args.dq, b, h, i0),
                        size_t(args.dq.strides.token));
      } else {
        StoreRows(dq, nq, dim, padded_dim, nullptr, p.scale, RowOf(args.dq, b, h, i0),
                  size_t(args.dq.strides.token));
      }
    };
    const size_t row0 = (b * p.heads + h) * p.q_len + i0;
    StageRowParams<Transform>(params, row0, nq, ws);
    if constexpr (Transform::kSparseWeights) {
      const BackwardOperands ops = ProductOperands(p, args);  // dP's (§4.2)
      const HeadRows d_o = RowsOf(ops.dp_d_o, b, h), v = RowsOf(ops.dp_v, b, h / p.group());
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
        DenseQueryTile(p, tr, k, scores, grads, nq, nk, j0, columns, all_visible, ws, dq, k_t);
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
                                   dq, k_t);
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
              for (size_t j0 = KeyBegin(p, i0, nq); j0 < key_end; j0 += kTileK) {
                const size_t nk = std::min(kTileK, p.kv_len - j0);
                const bool all_visible = QueryLimits(p, i0, nq, j0, nk, ws);
                dense_tile(kept + j0 * kTileQ, kept + (keys + j0) * kTileQ, nk, j0, columns,
                           all_visible);
              }
            } else {
              QuerySideSweep(p, args, b, h, i0, nq, ws, dense_tile);
            }
          }
          store_dq();
          return;
        }
      }
      QuerySideSweep(p, args, b, h, i0, nq, ws, dense_tile);
    }
    store_dq();
  });
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
