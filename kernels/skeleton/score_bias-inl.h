// ALiBi's score bias (docs/math.md §1.4) on a score tile, right where the tile is computed:
// s_ij -= slope |p_i - j| with p_i the row's query position (AttentionProblem::QueryPosition)
// and slope its query head's. Key-major tiles (the forward's and the query side's S^T) hold a
// key per row and a query per lane; query-major ones (the key side's S) the other way round.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_SKELETON_SCORE_BIAS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_SKELETON_SCORE_BIAS_INL_H_
#undef LPATTN_KERNELS_SKELETON_SCORE_BIAS_INL_H_
#else
#define LPATTN_KERNELS_SKELETON_SCORE_BIAS_INL_H_
#endif

#include <stddef.h>

#include "hwy/highway.h"
#include "kernels/skeleton/attention_problem.h"
#include "kernels/skeleton/tile_sizes.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// S^T [j][i] (row stride `stride`) of keys [j0, j0 + nk) against rows [i0, i0 + columns) of
// head h; lanes past the tile's rows get slope 0.
HWY_INLINE void AlibiKeyMajor(const AttentionProblem& p, size_t h, size_t i0, size_t nq,
                              size_t columns, size_t j0, size_t nk, float* HWY_RESTRICT st,
                              size_t stride) {
  if (p.alibi_slopes == nullptr) return;
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  HWY_ALIGN float slope[kTileMax], position[kTileMax];
  for (size_t i = 0; i < columns; ++i) {
    slope[i] = i < nq ? p.alibi_slopes[p.RowHead(h, i0 + i)] : 0.0f;
    position[i] = i < nq ? float(p.QueryPosition(i0 + i)) : 0.0f;
  }
  for (size_t i = 0; i < columns; i += N) {
    const auto m = hn::Load(d, slope + i), pos = hn::Load(d, position + i);
    for (size_t j = 0; j < nk; ++j) {
      float* s = st + j * stride + i;
      const auto distance = hn::Abs(hn::Sub(pos, hn::Set(d, float(j0 + j))));
      hn::StoreU(hn::NegMulAdd(m, distance, hn::LoadU(d, s)), d, s);
    }
  }
}

// S [i][j] (row stride `stride`, `width` keys a row from j0) of rows [i0, i0 + nq) of head h.
HWY_INLINE void AlibiQueryMajor(const AttentionProblem& p, size_t h, size_t i0, size_t nq,
                                size_t j0, size_t width, float* HWY_RESTRICT s, size_t stride) {
  if (p.alibi_slopes == nullptr) return;
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto lanes = hn::Iota(d, 0.0f);
  for (size_t i = 0; i < nq; ++i) {
    const auto m = hn::Set(d, p.alibi_slopes[p.RowHead(h, i0 + i)]);
    const auto pos = hn::Set(d, float(p.QueryPosition(i0 + i)));
    for (size_t j = 0; j < width; j += N) {
      float* row = s + i * stride + j;
      const auto key = hn::Add(lanes, hn::Set(d, float(j0 + j)));
      hn::StoreU(hn::NegMulAdd(m, hn::Abs(hn::Sub(pos, key)), hn::LoadU(d, row)), d, row);
    }
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
