// The skeleton's tiles for sparse row transforms (thresholded attention: most weights are
// exact zeros): P V that skips or walks the nonzero weights, the second view's operands, and
// the backward's query-side and key-side tiles that compute dP only at survivors and pass the
// survivors from one side to the other.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_SKELETON_SPARSE_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_SKELETON_SPARSE_TILES_INL_H_
#undef LPATTN_KERNELS_SKELETON_SPARSE_TILES_INL_H_
#else
#define LPATTN_KERNELS_SKELETON_SPARSE_TILES_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "hwy/highway.h"
#include "kernels/skeleton/attention_problem.h"
#include "kernels/skeleton/matmul_tile-inl.h"
#include "kernels/skeleton/row_ops-inl.h"
#include "kernels/skeleton/tile_sizes.h"
#include "kernels/skeleton/tile_workspace-inl.h"
#include "quant/format.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// visit(x) for each x < n with values[x] != 0, skipping whole vectors of zeros.
template <class Visit>
HWY_INLINE void ForEachNonzero(const float* HWY_RESTRICT values, size_t n, const Visit& visit) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  for (size_t x0 = 0; x0 < n; x0 += N) {
    if (hn::AllTrue(d, hn::Eq(hn::LoadU(d, values + x0), hn::Zero(d)))) continue;
    for (size_t x = x0; x < std::min(x0 + N, n); ++x) {
      if (values[x] != 0.0f) visit(x);
    }
  }
}

// out[i] += sum_j w[j][i] v_{j0 + j} over the nonzero weights of a key-major tile (keys j < nk,
// queries i < nq): P V for tiles where few weights survive, at a cost that scales with them.
HWY_INLINE void SparseWeightedRows(const float* HWY_RESTRICT weights, size_t nk, size_t nq,
                                   const HeadRows& v, size_t j0, size_t dim, size_t padded_dim,
                                   float* HWY_RESTRICT out) {
  for (size_t j = 0; j < nk; ++j) {
    const float* w = weights + j * kTileQ;
    ForEachNonzero(w, nq, [&](size_t i) { AddScaledRow(w[i], v.row(j0 + j), dim, out + i * padded_dim); });
  }
}

// The second score product of a two-view transform (thresholded differential attention): its
// queries and keys, shaped and strided like the first view's. Null data: one view.
struct SecondView {
  ConstTensor q, k;
};

// One key tile's weights of a sparse transform, then its P V: skipped when every weight is
// zero, entry by entry when fewer than one in eight survive, else the dense product.
template <class Transform>
HWY_INLINE void SparseTileForward(const AttentionProblem& p, const Transform& tr,
                                  const HeadRows& v, size_t j0, size_t nk, size_t nq,
                                  size_t columns, bool all_visible,
                                  typename Transform::ForwardState& state, TileWorkspace& ws,
                                  const float* second_scores, float* out) {
  const size_t dim = p.dim, padded_dim = PaddedDim(dim);
  float* weights = ws.scores.get();
  const size_t nonzero = tr.WeighTiles(weights, second_scores, nk, columns, ws.visible,
                                       all_visible, state);
  if (nonzero == 0) return;
  // docs/math.md §4 P quantization: the weights fed to P V rounded (zeros stay zeros).
  if (p.p_format != quant::Format::kFp32) RoundWeights(weights, nk, columns, p.p_format, p.p_scale);
  if (nonzero * 8 <= nq * nk) {
    SparseWeightedRows(weights, nk, nq, v, j0, dim, padded_dim, out);
    return;
  }
  const RhsView v_rows = DimRows(v, j0, nk, dim, padded_dim, ws.rows.get());
  MatMulRanged({weights, 1, kTileQ}, v_rows, {out, padded_dim}, nq, padded_dim, ws.range_begin,
               ws.range_end);
}

// Whether fewer than one weight in eight of an nq x nk tile survives: then entry-by-entry work
// beats the dense products.
HWY_INLINE bool FewSurvivors(size_t survivors, size_t nq, size_t nk) {
  return survivors * 8 <= nq * nk;
}

// What the query side of a sparse transform's backward leaves for its key side, per query
// task: the survivors of each key tile it swept entry by entry (query and key within their
// tiles, c a and dS), and which tiles were crowded (the key side recomputes those), so the key
// side needs no score product for sparse tiles.
struct Survivor {
  uint16_t i, j;
  float w, ds;
};
struct QueryTileRecord {
  std::vector<Survivor> survivors;
  std::vector<uint32_t> begin;   // [k_tiles + 1]: key tile kt's are [begin[kt], begin[kt + 1])
  std::vector<uint8_t> crowded;  // [k_tiles]
};

// docs/math.md §4.2 on one block's survivors (its only nonzero weights and dS): w and dS each
// rounded as RoundBackwardBlock rounds the dense block, bit for bit (quant::RoundToFormat is
// RoundLanes' scalar form).
HWY_INLINE void RoundSurvivors(const BackwardRounding& r, std::span<Survivor> block) {
  if (r.format == quant::Format::kFp32 || block.empty()) return;
  for (float Survivor::*field : {&Survivor::w, &Survivor::ds}) {
    float amax = 0.0f;
    if (r.scaled) {
      for (const Survivor& e : block) amax = std::max(amax, std::fabs(e.*field));
    }
    const float scale = BackwardBlockScale(r, amax);
    if (scale == 0.0f) continue;  // left as it is
    for (Survivor& e : block) e.*field = quant::RoundToFormat(r.format, e.*field, scale);
  }
}

// A sparse transform's query-side key tile (key-major, lanes are queries, row parameters
// staged): a and da/ds over the scores, then dS = c dP slope and dQ += dS K entry by entry
// over the survivors (dP_ij = dO_i . v_j only there), recorded for the key side, or with the
// dense products when many survive (the tile is marked crowded); row sums of dS and a dP into
// ws.row_a, ws.row_b.
template <class Transform>
HWY_INLINE void SparseQueryTile(const AttentionProblem& p, const Transform& tr,
                                const HeadRows& d_o, const HeadRows& k, const HeadRows& v,
                                size_t i0, size_t nq, size_t j0, size_t nk, size_t columns,
                                bool all_visible, TileWorkspace& ws, QueryTileRecord& record,
                                float* HWY_RESTRICT dq) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), dim = p.dim, padded_dim = PaddedDim(dim);
  float* weights = ws.scores.get();
  float* slopes = ws.slopes.get();
  RowParamVectors<decltype(d), Transform::kRowParams> row;
  size_t survivors = 0;
  for (size_t i = 0; i < columns; i += N) {
    LoadRowParams<Transform>(d, ws, i, row);
    const auto limit = hn::Load(d, ws.visible + i);
    for (size_t j = 0; j < nk; ++j) {
      auto a = hn::Zero(d), slope = hn::Zero(d);
      tr.Exceed(d, hn::LoadU(d, weights + j * kTileQ + i), row, a, slope);
      if (!all_visible) {
        const auto seen = hn::Lt(hn::Set(d, float(j)), limit);
        a = hn::IfThenElseZero(seen, a);
        slope = hn::IfThenElseZero(seen, slope);
      }
      survivors += hn::CountTrue(d, hn::Ne(a, hn::Zero(d)));
      hn::StoreU(a, d, weights + j * kTileQ + i);
      hn::StoreU(slope, d, slopes + j * kTileQ + i);
    }
  }
  if (survivors == 0) return;
  constexpr size_t kC = Transform::kCoefficientParam;
  if (!FewSurvivors(survivors, nq, nk)) {
    record.crowded[j0 / kTileK] = 1;
    float* grads = ws.grads.get();
    MatMul<false>({v.row(j0), v.token_stride, 1}, {ws.panel_b.get(), kTileQ}, {grads, kTileQ},
                  nk, columns, dim);
    for (size_t i = 0; i < columns; i += N) {
      LoadRowParams<Transform>(d, ws, i, row);
      auto sum_ds = hn::Load(d, ws.row_a + i), sum_a_dp = hn::Load(d, ws.row_b + i);
      for (size_t j = 0; j < nk; ++j) {
        const size_t at = j * kTileQ + i;
        const auto dp = hn::LoadU(d, grads + at), a = hn::LoadU(d, weights + at);
        const auto ds = hn::Mul(hn::Mul(row[kC], dp), hn::LoadU(d, slopes + at));
        sum_ds = hn::Add(sum_ds, ds);
        sum_a_dp = hn::MulAdd(a, dp, sum_a_dp);
        hn::StoreU(ds, d, grads + at);
      }
      hn::Store(sum_ds, d, ws.row_a + i);
      hn::Store(sum_a_dp, d, ws.row_b + i);
    }
    RoundBackwardBlock(p.bwd, grads, nk, kTileQ, nq);  // the block of (i0, j0), §4.2
    const RhsView k_rows = DimRows(k, j0, nk, dim, padded_dim, ws.rows.get());
    MatMulRanged({grads, 1, kTileQ}, k_rows, {dq, padded_dim}, nq, padded_dim, ws.range_begin,
                 ws.range_end);
    return;
  }
  const size_t first = record.survivors.size();
  for (size_t j = 0; j < nk; ++j) {
    const float* a = weights + j * kTileQ;
    ForEachNonzero(a, nq, [&](size_t i) {
      const float c = ws.row_params[kC][i];
      const float dp = RowDot(d_o.row(i0 + i), v.row(j0 + j), dim);
      const float ds = c * dp * slopes[j * kTileQ + i];
      ws.row_a[i] += ds;
      ws.row_b[i] += a[i] * dp;
      record.survivors.push_back({uint16_t(i), uint16_t(j), c * a[i], ds});
    });
  }
  const std::span<Survivor> block(record.survivors.data() + first, record.survivors.size() - first);
  RoundSurvivors(p.bwd, block);  // the block of (i0, j0), §4.2, for both sides
  for (const Survivor& e : block) AddScaledRow(e.ds, k.row(j0 + e.j), dim, dq + e.i * padded_dim);
}

// The rows a sparse key-side tile reads: dV = P^T dO's and dK = dS^T Q's, and dP = dO V^T's
// (docs/math.md §4.2: each product's own rounded operands).
struct KeyTileRows {
  HeadRows q, d_o, dp_d_o, dp_v;
};

// A sparse transform's key-side tile (query-major: row i of `scores` is query i0 + i against
// the keys [j0, j0 + nk)): dV += c a^T dO and dK += dS^T Q entry by entry over the survivors,
// or through the dense products when many survive (the caller then runs them).
// Returns whether the caller must run the dense products on weights (c a) and grads (dS).
template <class Transform>
HWY_INLINE bool SparseKeyTile(const AttentionProblem& p, const Transform& tr,
                              const KeyTileRows& rows, const float* head_params, size_t i0,
                              size_t nq, size_t j0, size_t nk, TileWorkspace& ws,
                              float* HWY_RESTRICT dk, float* HWY_RESTRICT dv) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), dim = p.dim, padded_dim = PaddedDim(dim);
  constexpr size_t kC = Transform::kCoefficientParam;
  float* weights = ws.scores.get();
  float* slopes = ws.slopes.get();
  RowParamVectors<decltype(d), Transform::kRowParams> row;
  size_t survivors = 0;
  for (size_t i = 0; i < nq; ++i) {
    const float* params = head_params + (i0 + i) * Transform::kRowParams;
#if HWY_HAVE_SCALABLE
    row = {params, 0};  // each read broadcasts its float (SVE: no array of vectors)
#else
    for (size_t k = 0; k < Transform::kRowParams; ++k) row[k] = hn::Set(d, params[k]);
#endif
    const size_t end = p.VisibleEnd(i0 + i);
    const size_t limit = end <= j0 ? 0 : std::min(end - j0, nk);
    for (size_t j = 0; j < kTileK; j += N) {
      auto a = hn::Zero(d), slope = hn::Zero(d);
      tr.Exceed(d, hn::LoadU(d, weights + i * kTileK + j), row, a, slope);
      const auto seen = hn::FirstN(d, limit > j ? limit - j : 0);
      a = hn::IfThenElseZero(seen, a);
      survivors += hn::CountTrue(d, hn::Ne(a, hn::Zero(d)));
      hn::StoreU(a, d, weights + i * kTileK + j);
      hn::StoreU(hn::IfThenElseZero(seen, slope), d, slopes + i * kTileK + j);
    }
  }
  if (survivors == 0) return false;
  // w = c a and dS = c dP slope for the products; a block to round (§4.2) takes them too.
  if (!FewSurvivors(survivors, nq, nk) || p.bwd.format != quant::Format::kFp32) {
    float* grads = ws.grads.get();
    MatMul<false>({rows.dp_d_o.row(i0), rows.dp_d_o.token_stride, 1}, {ws.panel_b.get(), kTileK},
                  {grads, kTileK}, nq, kTileK, dim);
    for (size_t i = 0; i < nq; ++i) {
      const auto c = hn::Set(d, head_params[(i0 + i) * Transform::kRowParams + kC]);
      for (size_t j = 0; j < kTileK; j += N) {
        const size_t at = i * kTileK + j;
        hn::StoreU(hn::Mul(c, hn::LoadU(d, weights + at)), d, weights + at);
        hn::StoreU(hn::Mul(hn::Mul(c, hn::LoadU(d, grads + at)), hn::LoadU(d, slopes + at)), d,
                   grads + at);
      }
    }
    return true;
  }
  for (size_t i = 0; i < nq; ++i) {
    const float c = head_params[(i0 + i) * Transform::kRowParams + kC];
    const float* a = weights + i * kTileK;
    ForEachNonzero(a, nk, [&](size_t j) {
      const float dp = RowDot(rows.dp_d_o.row(i0 + i), rows.dp_v.row(j0 + j), dim);
      AddScaledRow(c * a[j], rows.d_o.row(i0 + i), dim, dv + j * padded_dim);
      AddScaledRow(c * dp * slopes[i * kTileK + j], rows.q.row(i0 + i), dim, dk + j * padded_dim);
    });
  }
  return false;
}


// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
