// The thresholded row transform (docs/math.md §3) as a policy of the tiled skeleton: each
// score keeps only its exceedance over the row's threshold, a = max(s - tau, 0)^p, with no
// normaliser, so most weights are exact zeros and the skeleton skips or sparsely accumulates
// their P V. Two views combine as a1 - lambda a2 before the shared P V. Lanes are queries (the
// skeleton's score tiles are key-major), so each lane carries its own row's threshold.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_TRANSFORMS_THRESHOLD_TRANSFORM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_TRANSFORMS_THRESHOLD_TRANSFORM_INL_H_
#undef LPATTN_KERNELS_TRANSFORMS_THRESHOLD_TRANSFORM_INL_H_
#else
#define LPATTN_KERNELS_TRANSFORMS_THRESHOLD_TRANSFORM_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>

#include "hwy/highway.h"
#include "kernels/skeleton/tile_sizes.h"
#include "kernels/skeleton/vector_slots-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// x^p for p in {1, 2, 3}.
template <class V>
HWY_INLINE V PowerOf(int p, V x) {
  return p == 1 ? x : p == 2 ? hn::Mul(x, x) : hn::Mul(hn::Mul(x, x), x);
}

// §3 weights of one view: max(s - tau, 0)^p; a NaN score stays NaN so that it reaches the
// row's output, as in the other transforms.
template <class D, class V>
HWY_INLINE V Exceedance(D d, int p, V s, V tau) {
  const auto x = hn::Sub(s, tau);
  const auto kept = hn::IfThenElseZero(hn::Gt(x, hn::Zero(d)), PowerOf(p, x));
  return hn::IfThenElse(hn::IsNaN(s), s, kept);
}

struct ThresholdTransform {
  static constexpr bool kRowStatsPass = false;  // tau depends on the row length only
  static constexpr bool kHasRowTerms = true;    // the row sums of d beta and d lambda
  static constexpr bool kSparseWeights = true;  // exact zeros: skip or sparse P V
  static constexpr size_t kRowParams = 2;       // the backward's row: tau, c
  static constexpr size_t kCoefficientParam = 1;

  int power = 2;
  const float* tau = nullptr;     // [q_len]: the threshold of each query row
  const float* lambda = nullptr;  // [heads]: clamped lambda of the second view (two views)
  // The call's queries per head and query heads: rows are indexed by [batch, heads, q_len]
  // whatever the decode plan grouped (docs/design.md §8).
  size_t q_len = 0, heads = 0;
  int32_t* survivors = nullptr;   // optional [views][rows]: nonzero weights per row and view
  size_t rows = 0;                // batch * heads * q_len
  // The backward runs once per view: c = 1 for view 1, -lambda for view 2, per head [heads].
  const float* coefficient = nullptr;
  // Optional [rows] outputs of the backward's terms pass: sum_j dS_ij (for d beta) and
  // sum_j a_ij dP_ij (for d lambda).
  float* row_ds = nullptr;
  float* row_a_dp = nullptr;

  struct ForwardState {
    HWY_ALIGN float tau[kTileQ];
    HWY_ALIGN float minus_lambda[kTileQ];  // per row: a grouped tile spans query heads
    HWY_ALIGN float kept[2][kTileQ];  // nonzero weights so far, per view (exact below 2^24)
  };

  // Rows past the tile's end (padding lanes) take some row's values; nothing reads them.
  void BeginForward(ForwardState& st, const float*, size_t row) const {
    for (size_t i = 0; i < kTileQ; ++i) {
      st.tau[i] = tau[(row + i) % q_len];
      st.minus_lambda[i] = lambda != nullptr ? -lambda[(row + i) / q_len % heads] : 0.0f;
      st.kept[0][i] = st.kept[1][i] = 0.0f;
    }
  }

  // §3: w = a1 (one view) or a1 - lambda a2 (two views) in place of the first view's scores;
  // masked keys get 0. Returns the nonzero weights of the tile.
  size_t WeighTiles(float* HWY_RESTRICT scores, const float* HWY_RESTRICT second, size_t nk,
                    size_t columns, const float* HWY_RESTRICT visible, bool all_visible,
                    ForwardState& st) const {
    const hn::ScalableTag<float> d;
    const size_t N = hn::Lanes(d);
    const auto one = hn::Set(d, 1.0f);
    size_t nonzero = 0;
    for (size_t i = 0; i < columns; i += N) {
      const auto tau = hn::Load(d, st.tau + i), limit = hn::LoadU(d, visible + i);
      const auto minus_lambda = hn::Load(d, st.minus_lambda + i);
      auto kept1 = hn::Load(d, st.kept[0] + i), kept2 = hn::Load(d, st.kept[1] + i);
      for (size_t j = 0; j < nk; ++j) {
        const auto seen = all_visible ? hn::FirstN(d, N) : hn::Lt(hn::Set(d, float(j)), limit);
        float* s_ptr = scores + j * kTileQ + i;
        const auto a1 = hn::IfThenElseZero(seen, Exceedance(d, power, hn::LoadU(d, s_ptr), tau));
        kept1 = hn::Add(kept1, hn::IfThenElseZero(hn::Ne(a1, hn::Zero(d)), one));
        auto w = a1;
        if (second != nullptr) {
          const auto a2 = hn::IfThenElseZero(
              seen, Exceedance(d, power, hn::LoadU(d, second + j * kTileQ + i), tau));
          kept2 = hn::Add(kept2, hn::IfThenElseZero(hn::Ne(a2, hn::Zero(d)), one));
          w = hn::MulAdd(minus_lambda, a2, a1);
        }
        nonzero += hn::CountTrue(d, hn::Ne(w, hn::Zero(d)));
        hn::StoreU(w, d, s_ptr);
      }
      hn::Store(kept1, d, st.kept[0] + i);
      hn::Store(kept2, d, st.kept[1] + i);
    }
    return nonzero;
  }

  // ---- split-KV (§5): no normaliser, so the blocks' outputs add ----

  static constexpr bool kMergesKeyBlocks = true;
  // Per row: each view's nonzero weights, and 1 for a block with a visible key ([3][stride]).
  static constexpr size_t kBlockState = 3;
  static void SaveBlock(const ForwardState& st, size_t nq, size_t stride, float* out) {
    std::copy(st.kept[0], st.kept[0] + nq, out);
    std::copy(st.kept[1], st.kept[1] + nq, out + stride);
    std::fill(out + 2 * stride, out + 2 * stride + nq, 1.0f);
  }
  static void EmptyBlock(size_t, size_t stride, float* out) {
    std::fill(out, out + 3 * stride, 0.0f);
  }
  void MergeBlocks(const float* const* states, size_t blocks, size_t stride, size_t i,
                   const float*, size_t row, float* weights) const {
    float kept1 = 0.0f, kept2 = 0.0f;
    for (size_t c = 0; c < blocks; ++c) {
      weights[c] = states[c][2 * stride + i];
      kept1 += states[c][i];
      kept2 += states[c][stride + i];
    }
    if (survivors == nullptr) return;
    survivors[row] = int32_t(kept1);
    if (lambda != nullptr) survivors[rows + row] = int32_t(kept2);
  }

  // ---- backward (§3), one view per call ----

  void RowParams(size_t row, float, float* out) const {
    out[0] = tau[row % q_len];
    out[1] = coefficient[row / q_len % heads];
  }

  // w = c a (for dV) and dS = c dP p max(s - tau, 0)^(p-1).
  template <class D, class V>
  HWY_INLINE void WeightAndGrad(D d, V s, V dp, RowParamsIn<D> row, V& w, V& ds) const {
    V a, slope;
    WeightAndSlope(d, s, row[0], a, slope);
    w = hn::Mul(row[1], a);
    ds = hn::Mul(hn::Mul(row[1], dp), slope);
  }

  bool NeedsRowTerms() const { return row_ds != nullptr || row_a_dp != nullptr; }
  size_t Argmax(size_t) const { return 0; }  // no extrema corrections
  size_t Argmin(size_t) const { return 0; }

  // Row-sum elements: dS, and a dP.
  template <class D, class V>
  HWY_INLINE void Terms(D d, V s, V dp, RowParamsIn<D> row, V& t1, V& t2) const {
    V a, slope;
    WeightAndSlope(d, s, row[0], a, slope);
    t1 = hn::Mul(hn::Mul(row[1], dp), slope);
    t2 = hn::Mul(a, dp);
  }

  void FinishTerms(size_t row, float t1, float t2, float*, float* corrections) const {
    if (row_ds != nullptr) row_ds[row] = t1;
    if (row_a_dp != nullptr) row_a_dp[row] = t2;
    corrections[0] = corrections[1] = 0.0f;
  }

  // The sparse backward's view of an entry: a and da/ds at the row's tau.
  template <class D, class V>
  HWY_INLINE void Exceed(D d, V s, RowParamsIn<D> row, V& a, V& slope) const {
    WeightAndSlope(d, s, row[0], a, slope);
  }

  // a = max(s - tau, 0)^p (NaN kept) and its slope p max(s - tau, 0)^(p-1) (0 at the kink).
  template <class D, class V>
  HWY_INLINE void WeightAndSlope(D d, V s, V tau, V& a, V& slope) const {
    a = Exceedance(d, power, s, tau);
    const auto x = hn::Sub(s, tau);
    const auto kept = hn::Gt(x, hn::Zero(d));
    const auto p_slope = power == 1   ? hn::Set(d, 1.0f)
                         : power == 2 ? hn::Add(x, x)
                                      : hn::Mul(hn::Set(d, 3.0f), hn::Mul(x, x));
    slope = hn::IfThenElseZero(kept, p_slope);
  }

  // No normaliser: the output factor is 1. Saves the survivors per row when asked to.
  void FinishForward(const ForwardState& st, size_t nq, float* out_factor, size_t row) const {
    for (size_t i = 0; i < nq; ++i) {
      out_factor[i] = 1.0f;
      if (survivors == nullptr) continue;
      survivors[row + i] = int32_t(st.kept[0][i]);
      if (lambda != nullptr) survivors[rows + row + i] = int32_t(st.kept[1][i]);
    }
  }
};

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
