// The score options of exact attention (docs/math.md §1.3-§1.5) on a score tile, right where
// the tile is computed, in their order: ALiBi's bias s -= slope |p_i - j| (p_i the row's query
// position, AttentionProblem::QueryPosition; slope its query head's), the softcap
// s <- c tanh(s / c), and the sliding window, which sets the scores of keys before the row's
// VisibleBegin to kHiddenScore. Key-major tiles (the forward's and the query side's S^T) hold
// a key per row and a query per lane; query-major ones (the key side's S) the other way round.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_SKELETON_SCORE_BIAS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_SKELETON_SCORE_BIAS_INL_H_
#undef LPATTN_KERNELS_SKELETON_SCORE_BIAS_INL_H_
#else
#define LPATTN_KERNELS_SKELETON_SCORE_BIAS_INL_H_
#endif

#include <stddef.h>

#include <algorithm>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/skeleton/attention_problem.h"
#include "kernels/skeleton/tile_sizes.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// A hidden key's score: far below any score (so its weight is exp(-1e15 - m) = 0 once the
// row has a visible key, and the online softmax's rescale clears what it added before), yet
// finite, so that a tile of hidden keys never makes exp(-inf - -inf) = NaN and the softcap's
// derivative (1 - (s / c)^2) stays finite (for caps above 1e-3).
inline constexpr float kHiddenScore = -1e15f;

// One vector of scores of keys `key` (per lane) for rows with slope m, position pos and first
// visible key begin (per lane too).
template <class D, class V>
HWY_INLINE V ModifiedScores(D d, const AttentionProblem& p, V s, V key, V m, V pos, V begin) {
  if (p.alibi_slopes != nullptr) s = hn::NegMulAdd(m, hn::Abs(hn::Sub(pos, key)), s);
  if (p.softcap != 0.0f) {
    s = hn::Mul(hn::Set(d, p.softcap), hn::Tanh(d, hn::Mul(s, hn::Set(d, 1.0f / p.softcap))));
  }
  if (p.window != 0) s = hn::IfThenElse(hn::Lt(key, begin), hn::Set(d, kHiddenScore), s);
  return s;
}

// Whether a tile whose keys start at j0 is left as it is: only a window modifies scores, and
// no row's window (the latest first key, last_begin) hides any of the tile's keys. Most of a
// windowed row's tiles are so; the pass would rewrite them unchanged.
HWY_INLINE bool WindowHidesNone(const AttentionProblem& p, size_t j0, size_t last_begin) {
  return p.alibi_slopes == nullptr && p.softcap == 0.0f && j0 >= last_begin;
}

// S^T [j][i] (row stride `stride`) of keys [j0, j0 + nk) against rows [i0, i0 + columns) of
// head h (lanes past the tile's nq rows are left as they are computed, and never read), in the
// columns of `live` only (the forward's LiveColumns: no other column is read).
HWY_INLINE void ModifyScoresKeyMajor(const AttentionProblem& p, size_t h, size_t i0, size_t nq,
                                     size_t columns, size_t j0, size_t nk, float* HWY_RESTRICT st,
                                     size_t stride, ColumnRange live = {0, kTileMax}) {
  if (!p.ModifiesScores()) return;
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  columns = std::min(columns, live.end);
  const bool alibi = p.alibi_slopes != nullptr;
  // Consecutive queries without ALiBi: each vector's first keys from one position, where the
  // scalar set-up per column below cost a windowed key tile a quarter of its own time outside
  // the products (docs/performance.md §4.25).
  if (!alibi && p.head_rows == 0) {
    const size_t rows = std::min(columns, nq);
    if (live.begin >= rows) return;
    const size_t last_begin = p.VisibleBegin(i0 + rows - 1);  // the rows' greatest
    if (WindowHidesNone(p, j0, last_begin)) return;
    const size_t keys = p.softcap != 0.0f ? nk : std::min(nk, last_begin - j0);
    const auto none = hn::Zero(d);
    for (size_t i = live.begin; i < columns; i += N) {
      // VisibleBegin per lane (0 past nq), exact in floats below 2^24 positions.
      const auto row = hn::Iota(d, float(i));
      const auto from = hn::Add(row, hn::Set(d, float(p.QueryPosition(i0)) - float(p.window) + 1));
      const auto first =
          hn::IfThenElseZero(hn::Lt(row, hn::Set(d, float(nq))),
                             hn::Min(hn::Max(from, none), hn::Set(d, float(p.kv_len))));
      for (size_t j = 0; j < keys; ++j) {
        float* sc = st + j * stride + i;
        const auto key = hn::Set(d, float(j0 + j));
        hn::StoreU(ModifiedScores(d, p, hn::LoadU(d, sc), key, none, none, first), d, sc);
      }
    }
    return;
  }
  HWY_ALIGN float slope[kTileMax], position[kTileMax], begin[kTileMax];
  size_t last_begin = 0;
  for (size_t i = live.begin; i < columns; ++i) {
    const bool row = i < nq;
    slope[i] = row && alibi ? p.alibi_slopes[p.RowHead(h, i0 + i)] : 0.0f;
    position[i] = row && alibi ? float(p.QueryPosition(i0 + i)) : 0.0f;
    const size_t first = row ? p.VisibleBegin(i0 + i) : 0;
    begin[i] = float(first);
    last_begin = std::max(last_begin, first);
  }
  if (WindowHidesNone(p, j0, last_begin)) return;
  // With the window alone, keys from the latest first key on are left as they are.
  const size_t keys = alibi || p.softcap != 0.0f ? nk : std::min(nk, last_begin - j0);
  for (size_t i = live.begin; i < columns; i += N) {
    const auto m = hn::Load(d, slope + i), pos = hn::Load(d, position + i);
    const auto first = hn::Load(d, begin + i);
    for (size_t j = 0; j < keys; ++j) {
      float* s = st + j * stride + i;
      const auto key = hn::Set(d, float(j0 + j));
      hn::StoreU(ModifiedScores(d, p, hn::LoadU(d, s), key, m, pos, first), d, s);
    }
  }
}

// S [i][j] (row stride `stride`, `width` keys a row from j0) of rows [i0, i0 + nq) of head h.
HWY_INLINE void ModifyScoresQueryMajor(const AttentionProblem& p, size_t h, size_t i0, size_t nq,
                                       size_t j0, size_t width, float* HWY_RESTRICT s,
                                       size_t stride) {
  if (!p.ModifiesScores()) return;
  size_t last_begin = 0;
  for (size_t i = 0; i < nq; ++i) last_begin = std::max(last_begin, p.VisibleBegin(i0 + i));
  if (WindowHidesNone(p, j0, last_begin)) return;
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto lanes = hn::Iota(d, 0.0f);
  for (size_t i = 0; i < nq; ++i) {
    const auto m = hn::Set(d, p.alibi_slopes != nullptr ? p.alibi_slopes[p.RowHead(h, i0 + i)] : 0.0f);
    const auto pos = hn::Set(d, float(p.QueryPosition(i0 + i)));
    const auto first = hn::Set(d, float(p.VisibleBegin(i0 + i)));
    for (size_t j = 0; j < width; j += N) {
      float* row = s + i * stride + j;
      const auto key = hn::Add(lanes, hn::Set(d, float(j0 + j)));
      hn::StoreU(ModifiedScores(d, p, hn::LoadU(d, row), key, m, pos, first), d, row);
    }
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
