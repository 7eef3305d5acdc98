// The skeleton's backward, key side and driver (docs/design.md §3): dK and dV of each key tile
// (one task per batch, kv head and key tile, looping over its GQA group), the whole-head pass of
// short sequences, the extrema corrections, and TiledBackward, which runs them in order.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_SKELETON_TILED_BACKWARD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_SKELETON_TILED_BACKWARD_INL_H_
#undef LPATTN_KERNELS_SKELETON_TILED_BACKWARD_INL_H_
#else
#define LPATTN_KERNELS_SKELETON_TILED_BACKWARD_INL_H_
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
#include "kernels/skeleton/backward_query_side-inl.h"
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

// Stores the dK (times the scale) and dV rows of the keys [j0, j0 + nk), from row-major
// accumulators, or dim-major ones ([dim][kTileK]) from the pair products (BackwardTiles).
HWY_INLINE void FinishKeySide(const AttentionProblem& p, const BackwardArgs& args, size_t b,
                              size_t kv_head, size_t j0, size_t nk, const float* dk,
                              const float* dv) {
  if (p.bwd.tiles.on) {
    StoreTransposed(dk, nk, p.dim, kTileK, p.scale, RowOf(args.dk, b, kv_head, j0),
                    size_t(args.dk.strides.token));
    StoreTransposed(dv, nk, p.dim, kTileK, 1.0f, RowOf(args.dv, b, kv_head, j0),
                    size_t(args.dv.strides.token));
    return;
  }
  const size_t padded_dim = PaddedDim(p.dim);
  StoreRows(dk, nk, p.dim, padded_dim, nullptr, p.scale, RowOf(args.dk, b, kv_head, j0),
            size_t(args.dk.strides.token));
  StoreRows(dv, nk, p.dim, padded_dim, nullptr, 1.0f, RowOf(args.dv, b, kv_head, j0),
            size_t(args.dv.strides.token));
}

// docs/math.md §4.2's bf16 products of one (query tile, key tile) of the key side on AMX or dot
// tiles (BackwardTiles): S (with bt.scores) and dP, query-major in `weights` and `grads`...
HWY_INLINE void KeyTileProductsOnTiles(const AttentionProblem& p, size_t q_slice, size_t kv_slice,
                                       size_t i0, size_t nq, size_t j0, size_t nk, float* weights,
                                       float* grads, TileWorkspace& ws) {
  const BackwardTiles& bt = p.bwd.tiles;
  const size_t dim = p.dim;
  uint16_t* tail = reinterpret_cast<uint16_t*>(ws.key_rows.get());
  if (bt.scores) {
    native::Bf16PairScoreTile(bt.q_rows + (q_slice * p.q_len + i0) * dim, dim, nq,
                              bt.k_pairs + kv_slice * dim * bt.kv_pad + 2 * j0, bt.kv_pad, nk, dim,
                              p.scale, weights, kTileK, tail);
  }
  native::Bf16PairMatMul(bt.dp_d_o_rows + (q_slice * p.q_len + i0) * dim, dim, nq,
                         bt.dp_v_pairs + kv_slice * dim * bt.kv_pad + 2 * j0, 2 * bt.kv_pad, nk,
                         dim, false, grads, kTileK, tail);
}
// ... and, after the transform, dV^T += dO^T P and dK^T += Q^T dS into the dim-major
// accumulators dv_t and dk_t ([dim][kTileK]): P and dS rounded to bf16 as they are paired, or
// with bwd = int8 to int8 codes with their block's scale (Int8Gradient).
HWY_INLINE void KeyTileGradientsOnTiles(const AttentionProblem& p, size_t q_slice, size_t i0,
                                        size_t nq, size_t nk, const float* weights,
                                        const float* grads, float* dk_t, float* dv_t,
                                        TileWorkspace& ws) {
  const BackwardTiles& bt = p.bwd.tiles;
  if (bt.int8) {
    const size_t at = q_slice * p.dim * bt.q_pad8 + i0, scales = q_slice * p.dim;
    const Int8GradientRows d_o{bt.d_o_t8, bt.d_o_t8_bf16}, q{bt.q_t8, bt.q_t8_bf16};
    Int8Gradient(d_o.At(at), bt.q_pad8, bt.d_o_scales8 + scales, p.dim, weights, nq, nk, kTileK,
                 dv_t, ws);
    Int8Gradient(q.At(at), bt.q_pad8, bt.q_scales8 + scales, p.dim, grads, nq, nk, kTileK, dk_t,
                 ws);
    return;
  }
  const size_t depth = hwy::RoundUpTo(nq, 32);
  uint16_t* p_pairs = reinterpret_cast<uint16_t*>(ws.rows.get());
  uint16_t* ds_pairs = p_pairs + kTileQ * kTileK;
  uint16_t* tail = reinterpret_cast<uint16_t*>(ws.key_rows.get());
  native::AmxBf16WeightPairs(weights, nq, nk, kTileK, depth, p_pairs);
  native::AmxBf16WeightPairs(grads, nq, nk, kTileK, depth, ds_pairs);
  const size_t at = q_slice * p.dim * bt.q_pad + i0;
  native::Bf16PairMatMul(bt.d_o_t + at, bt.q_pad, p.dim, p_pairs, 2 * kTileK, nk, depth, true, dv_t,
                         kTileK, tail);
  native::Bf16PairMatMul(bt.q_t + at, bt.q_pad, p.dim, ds_pairs, 2 * kTileK, nk, depth, true, dk_t,
                         kTileK, tail);
}

// Key side: dK and dV of one key tile, summed over the query heads of its GQA group and all
// query tiles in a fixed order.
template <class Transform>
void TiledBackwardKeys(const AttentionProblem& p, const BackwardArgs& args, const Transform& tr,
                       const float* params, const QueryTileRecord* records = nullptr) {
  const size_t q_tiles = hwy::DivCeil(p.q_len, kTileQ);
  const size_t dim = p.dim, padded_dim = PaddedDim(dim);
  const size_t k_tiles = hwy::DivCeil(p.kv_len, kTileK);
  const BackwardOperands ops = ProductOperands(p, args);
  ParallelTiles(p.batch * p.kv_heads * k_tiles, [&](size_t task, TileWorkspace& ws) HWY_ATTR {
    // Plain variables, not structured bindings: clang 14 cannot capture bindings in lambdas.
    const TileTask t = SplitTask(task, p.kv_heads, p.kv_len, kTileK);
    const size_t b = t.batch, kv_head = t.head, j0 = t.first, nk = t.count;
    const HeadRows k = RowsOf(args.k, b, kv_head), v = RowsOf(ops.dp_v, b, kv_head);
    const KeySide side = BeginKeySide(p, k, v, j0, nk, kTileK, ws);
    float *const k_panel = side.k_panel, *const v_panel = side.v_panel;
    float *const weights = side.weights, *const grads = side.grads, *const dk = side.dk,
                 *const dv = side.dv;
    const bool on_tiles = !Transform::kSparseWeights && p.bwd.tiles.on;
    std::optional<native::AmxTiles> tiles;  // configured once for the task's tile products
    if (on_tiles && native::Bf16PairsOnAmx()) tiles.emplace();  // int8 on AMX comes with bf16

    const size_t first_query = p.FirstQuerySeeing(j0);
    for (size_t h = kv_head * p.group(); h < (kv_head + 1) * p.group(); ++h) {
      const HeadRows q = RowsOf(args.q, b, h), dp_d_o = RowsOf(ops.dp_d_o, b, h);
      const HeadRows q_product = RowsOf(ops.q, b, h), d_o_product = RowsOf(ops.d_o, b, h);
      const float* head_params = params + (b * p.heads + h) * p.q_len * Transform::kRowParams;
      for (size_t i0 = first_query / kTileQ * kTileQ; i0 < p.q_len; i0 += kTileQ) {
        const size_t nq = std::min(kTileQ, p.q_len - i0);
        // §1.5: later query tiles see this key tile even less (VisibleBegin grows with i).
        if (p.MinVisibleBegin(i0, nq) >= j0 + nk) break;
        if constexpr (Transform::kSparseWeights) {
          const QueryTileRecord& record = records[(b * p.heads + h) * q_tiles + i0 / kTileQ];
          const size_t kt = j0 / kTileK;
          if (!record.crowded[kt]) {  // the query side's survivors: dV += c a dO, dK += dS Q
            for (uint32_t r = record.begin[kt]; r < record.begin[kt + 1]; ++r) {
              const Survivor& e = record.survivors[r];  // rounded there (§4.2)
              AddScaledRow(e.w, d_o_product.row(i0 + e.i), dim, dv + e.j * padded_dim);
              AddScaledRow(e.ds, q_product.row(i0 + e.i), dim, dk + e.j * padded_dim);
            }
            continue;
          }
        }
        if (on_tiles) {
          KeyTileProductsOnTiles(p, b * p.heads + h, b * p.kv_heads + kv_head, i0, nq, j0, nk,
                                 weights, grads, ws);
        }
        if (!on_tiles || !p.bwd.tiles.scores) {
          MatMul<false>({q.row(i0), q.token_stride, 1}, {k_panel, kTileK}, {weights, kTileK}, nq,
                        kTileK, dim);
        }
        ModifyScoresQueryMajor(p, h, i0, nq, j0, kTileK, weights, kTileK);
        if constexpr (Transform::kSparseWeights) {
          if (!SparseKeyTile(p, tr, {q_product, d_o_product, dp_d_o, v}, head_params, i0, nq,
                             j0, nk, ws, dk, dv)) {
            continue;  // nothing survived, or the survivors are done
          }
          RoundBackwardBlock(p.bwd, weights, nq, kTileK, nk);  // the block of (i0, j0)
          RoundBackwardBlock(p.bwd, grads, nq, kTileK, nk);
        } else {
          if (!on_tiles) {
            MatMul<false>({dp_d_o.row(i0), dp_d_o.token_stride, 1}, {v_panel, kTileK},
                          {grads, kTileK}, nq, kTileK, dim);
          }
          // Rows are queries here: per-row parameters are broadcast, keys run along vectors.
          WithSpecialized(tr, [&](const auto& fixed) HWY_ATTR {
            for (size_t i = 0; i < nq; ++i) {
              const size_t end = p.VisibleEnd(i0 + i);
              const size_t limit = end <= j0 ? 0 : std::min(end - j0, nk);
              WeighRowAndGrad(fixed, weights + i * kTileK, grads + i * kTileK, kTileK, limit,
                              head_params + (i0 + i) * Transform::kRowParams);
            }
          });
          if (on_tiles) {
            KeyTileGradientsOnTiles(p, b * p.heads + h, i0, nq, nk, weights, grads, dk, dv, ws);
            continue;
          }
          RoundBackwardBlock(p.bwd, weights, nq, kTileK, nk);  // the block of (i0, j0)
          RoundBackwardBlock(p.bwd, grads, nq, kTileK, nk);
        }
        // Key j of the tile is seen by the tile's queries [begin_j, end_j) (end_j < nq under a
        // sliding window).
        for (size_t j = 0; j < nk; ++j) {
          const size_t first = p.FirstQuerySeeing(j0 + j), end = p.QueryEndSeeing(j0 + j);
          ws.range_begin[j] = uint32_t(std::clamp(first, i0, i0 + nq) - i0);
          ws.range_end[j] = uint32_t(std::clamp(end, i0, i0 + nq) - i0);
        }
        const RhsView do_rows = DimRows(d_o_product, i0, nq, dim, padded_dim, ws.rows.get());
        MatMulRanged({weights, 1, kTileK}, do_rows, {dv, padded_dim}, nk, padded_dim,
                     ws.range_begin, ws.range_end);
        const RhsView q_rows = DimRows(q_product, i0, nq, dim, padded_dim, ws.rows2.get());
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
  const BackwardOperands ops = ProductOperands(p, args);
  ParallelTiles(p.batch * p.kv_heads, [&](size_t task, TileWorkspace& ws) HWY_ATTR {
    const size_t b = task / p.kv_heads, kv_head = task % p.kv_heads;
    const HeadRows k = RowsOf(args.k, b, kv_head), v = RowsOf(ops.dp_v, b, kv_head);
    const HeadRows k_product = RowsOf(ops.k, b, kv_head);
    const KeySide side = BeginKeySide(p, k, v, 0, nk, width, ws);  // no bindings: clang 14
    float *const k_panel = side.k_panel, *const v_panel = side.v_panel;
    float *const weights = side.weights, *const grads = side.grads, *const dk = side.dk,
                 *const dv = side.dv;
    float* dq = ws.acc_c.get();

    for (size_t h = kv_head * p.group(); h < (kv_head + 1) * p.group(); ++h) {
      const HeadRows q = RowsOf(args.q, b, h), dp_d_o = RowsOf(ops.dp_d_o, b, h);
      const HeadRows q_product = RowsOf(ops.q, b, h), d_o_product = RowsOf(ops.d_o, b, h);
      const float* head_params = params + (b * p.heads + h) * p.q_len * Transform::kRowParams;
      MatMul<false>({q.row(0), q.token_stride, 1}, {k_panel, width}, {weights, width}, nq, width,
                    dim);
      ModifyScoresQueryMajor(p, h, 0, nq, 0, width, weights, width);
      MatMul<false>({dp_d_o.row(0), dp_d_o.token_stride, 1}, {v_panel, width}, {grads, width},
                    nq, width, dim);
      WithSpecialized(tr, [&](const auto& fixed) HWY_ATTR {
        for (size_t i = 0; i < nq; ++i) {
          const size_t limit = std::min(p.VisibleEnd(i), nk);
          WeighRowAndGrad(fixed, weights + i * width, grads + i * width, width, limit,
                          head_params + i * Transform::kRowParams);
          // query i reads keys [VisibleBegin, limit)
          ws.range_begin[i] = uint32_t(std::min(p.VisibleBegin(i), limit));
          ws.range_end[i] = uint32_t(limit);
        }
      });
      for (size_t j0 = 0; j0 < nk; j0 += kTileK) {  // docs/math.md §4.2: the blocks (0, j0)
        RoundBackwardBlock(p.bwd, weights + j0, nq, width, std::min(kTileK, nk - j0));
        RoundBackwardBlock(p.bwd, grads + j0, nq, width, std::min(kTileK, nk - j0));
      }
      std::fill(dq, dq + nq * padded_dim, 0.0f);
      MatMulRanged({grads, width, 1}, DimRows(k_product, 0, nk, dim, padded_dim, ws.rows.get()),
                   {dq, padded_dim}, nq, padded_dim, ws.range_begin, ws.range_end);
      StoreRows(dq, nq, dim, padded_dim, nullptr, p.scale, RowOf(args.dq, b, h, 0),
                size_t(args.dq.strides.token));
      for (size_t j = 0; j < nk; ++j) {  // key j is seen by queries [first, end)
        ws.range_begin[j] = uint32_t(std::min(p.FirstQuerySeeing(j), nq));
        ws.range_end[j] = uint32_t(p.QueryEndSeeing(j));
      }
      MatMulRanged({weights, 1, width},
                   DimRows(d_o_product, 0, nq, dim, padded_dim, ws.rows.get()), {dv, padded_dim},
                   nk, padded_dim, ws.range_begin, ws.range_end);
      MatMulRanged({grads, 1, width}, DimRows(q_product, 0, nq, dim, padded_dim, ws.rows2.get()),
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
  const BackwardOperands ops = ProductOperands(p, args);  // corrections are dS K and dS^T Q
  ParallelTiles(p.batch * p.kv_heads, [&](size_t task, TileWorkspace&) {
    const size_t b = task / p.kv_heads, kv_head = task % p.kv_heads;
    const HeadRows k = RowsOf(ops.k, b, kv_head);
    for (size_t h = kv_head * p.group(); h < (kv_head + 1) * p.group(); ++h) {
      const HeadRows q = RowsOf(ops.q, b, h);
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
      if (FitsOneTile(p) && !p.bwd.tiles.on) {
        RowTermsPass(p, args, tr, params.data(), corrections.data());
      }
    }
  }
  // Sparse transforms take the two passes at every length: their query side gathers the row
  // sums and records the survivors that the key side then needs no score product for.
  if constexpr (Transform::kSparseWeights) {
    std::vector<QueryTileRecord> records(p.batch * p.heads * hwy::DivCeil(p.q_len, kTileQ));
    TiledBackwardQueries(p, args, tr, params.data(), records.data());
    TiledBackwardKeys(p, args, tr, params.data(), records.data());
  } else if (FitsOneTile(p) && !p.bwd.tiles.on) {  // the pair products take the two passes
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
