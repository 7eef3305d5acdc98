// The K-interval row transform (docs/math.md §2) as a policy of the tiled skeleton: a
// statistics pass finds each row's max, min, argmax and argmin, then the weighting pass puts
// every score on the row's grid of K + 1 values. Lanes are queries (the skeleton's score tiles
// are key-major), so each lane carries its own row's grid.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_TRANSFORMS_KINTERVAL_TRANSFORM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_TRANSFORMS_KINTERVAL_TRANSFORM_INL_H_
#undef LPATTN_KERNELS_TRANSFORMS_KINTERVAL_TRANSFORM_INL_H_
#else
#define LPATTN_KERNELS_TRANSFORMS_KINTERVAL_TRANSFORM_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "hwy/highway.h"
#include "kernels/kinterval.h"
#include "kernels/skeleton/fast_exp-inl.h"
#include "kernels/skeleton/tile_sizes.h"
#include "kernels/skeleton/vector_slots-inl.h"
#include "quant/codec-inl.h"
#include "quant/format.h"

HWY_BEFORE_NAMESPACE();
#if HWY_HAVE_SCALABLE && HWY_COMPILER_GCC_ACTUAL
// GCC 12's ivopts pass crashes on SVE code of the K-interval backward's loops: off for scalable
// targets, until HWY_AFTER_NAMESPACE pops the options (docs/design.md §11).
#pragma GCC optimize("no-ivopts")
#endif
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The kTileQ rows of one query tile in the forward. Key indices are held as floats (exact below
// 2^24).
struct KIntervalForwardState {
  HWY_ALIGN float m[kTileQ], a[kTileQ], argmax[kTileQ], argmin[kTileQ];
  HWY_ALIGN float R[kTileQ], h[kTileQ], inv_h[kTileQ], fall[kTileQ];  // fall = 1 - e^-h
  HWY_ALIGN float z[kTileQ], z_exact[kTileQ];  // sums of w^ and of exp(u)
};

// Which options a K-interval transform reads at run time (RuntimeKInterval) or has fixed at
// compile time (FixedKInterval, the fp32 grid: the per-entry loops then carry no option tests,
// which under AVX2's 16 registers made the difference between spilling and not).
struct RuntimeKInterval {
  static constexpr bool kFixed = false;
};
template <KIntervalSurrogate kSurrogateV, bool kAtGridV, bool kWindowV, bool kNearestV>
struct FixedKInterval {
  static constexpr bool kFixed = true;
  static constexpr KIntervalSurrogate kSurrogate = kSurrogateV;
  static constexpr bool kAtGrid = kAtGridV;  // weight: slope=grid; prob: jac=grid
  static constexpr bool kWindow = kWindowV, kNearest = kNearestV;
};

template <class Choices>
struct KIntervalTransformT {
  static constexpr bool kRowStatsPass = true;  // the grid hangs off the final max and min
  static constexpr bool kHasRowTerms = true;   // calibration terms, or the prob surrogate's sum
  static constexpr bool kSparseWeights = false;  // zeros only below a window: not worth a test
  // The backward's row: m, R, h, 1/h, 1 - e^-h, 1/Z, Delta, the exact lse, and c (the prob
  // surrogate's sum of pi g, from the terms pass).
  static constexpr size_t kRowParams = 9;
  enum : size_t { kM, kR, kH, kInvH, kFall, kInvZ, kDelta, kLseExact, kC };

  KIntervalOptions options;
  KIntervalSaved saved;

  bool Window() const {
    if constexpr (Choices::kFixed) return Choices::kWindow;
    return options.calibration == KIntervalCalibration::kWindow;
  }
  bool Nearest() const {
    if constexpr (Choices::kFixed) return Choices::kNearest;
    return options.rounding == KIntervalRounding::kNearest;
  }
  KIntervalSurrogate Surrogate() const {
    if constexpr (Choices::kFixed) return Choices::kSurrogate;
    return options.surrogate;
  }
  bool WeightSlopeFromGrid() const {
    if constexpr (Choices::kFixed) return Choices::kAtGrid;
    return options.weight_slope_from_grid;
  }
  bool ProbJacobianAtGrid() const {
    if constexpr (Choices::kFixed) return Choices::kAtGrid;
    return options.prob_jacobian_at_grid;
  }

  // Calls body(t) with t this transform with every option above fixed at compile time (for
  // the fp32 grid; a rounded grid keeps the run-time transform). The skeleton runs its
  // per-entry loops inside, so each loop is compiled once per combination, 20 in all.
  template <class Body>
  HWY_INLINE void Specialized(const Body& body) const {
    if constexpr (Choices::kFixed) {
      body(*this);
    } else if (RoundedGrid()) {
      body(*this);
    } else {
      switch (Surrogate()) {
        case KIntervalSurrogate::kExact:
          return WithShape<KIntervalSurrogate::kExact, false>(body);
        case KIntervalSurrogate::kWeight:
          return options.weight_slope_from_grid
                     ? WithShape<KIntervalSurrogate::kWeight, true>(body)
                     : WithShape<KIntervalSurrogate::kWeight, false>(body);
        case KIntervalSurrogate::kProb:
          return options.prob_jacobian_at_grid ? WithShape<KIntervalSurrogate::kProb, true>(body)
                                               : WithShape<KIntervalSurrogate::kProb, false>(body);
      }
    }
  }
  template <KIntervalSurrogate kS, bool kG, class Body>
  HWY_INLINE void WithShape(const Body& body) const {
    const bool window = Window(), nearest = Nearest();
    if (window && nearest) return As<FixedKInterval<kS, kG, true, true>>(body);
    if (window) return As<FixedKInterval<kS, kG, true, false>>(body);
    if (nearest) return As<FixedKInterval<kS, kG, false, true>>(body);
    As<FixedKInterval<kS, kG, false, false>>(body);
  }
  template <class Fixed, class Body>
  HWY_INLINE void As(const Body& body) const {
    body(KIntervalTransformT<Fixed>{options, saved});
  }

  // u >= -R. Only the window calibration has entries below it: under minmax every visible
  // entry is inside by construction, and testing it would drop the argmin wherever a
  // recomputed score rounds a hair below the forward's row min.
  template <class D, class V>
  HWY_INLINE hn::Mask<D> InWindow(D d, V u, V R) const {
    return Window() ? hn::Ge(u, hn::Neg(R)) : hn::FirstN(d, hn::Lanes(d));
  }

  bool RoundedGrid() const {
    if constexpr (Choices::kFixed) return false;
    return options.grid != quant::Format::kFp32;
  }

  // E_k = exp(k h - R), rounded to the grid format when it has one.
  template <class D, class V>
  HWY_INLINE V GridValue(D d, V k, V h, V R) const {
    const auto e = ExpClamped(d, hn::MulSub(k, h, R));
    if (!RoundedGrid()) return e;
    return quant::HWY_NAMESPACE::RoundLanes(d, e, options.grid, quant::UnitScale(options.grid));
  }

  // Where u falls on a row's grid: the weight w^ (before the window and degenerate rules),
  // and for lerp the interval k, theta, E_k and E_{k+1} (E_k = E_{k+1} e^-h, or its own
  // rounded value); fall = 1 - e^-h. Its members are read through LPATTN_SLOT: vectors, or on
  // SVE their lanes in memory (VecSlot, docs/design.md §11).
  template <class D, class V>
  struct GridPoint {
    VecSlot<D> w, k, theta, e_k, e_next;
  };
  template <class D, class V>
  HWY_INLINE GridPoint<D, V> Place(D d, V u, V R, V h, V inv_h, V fall) const {
    const auto x = hn::Min(hn::Max(hn::Mul(hn::Add(u, R), inv_h), hn::Zero(d)),
                           hn::Set(d, float(options.K)));
    if (Nearest()) {
      const auto k = hn::Min(hn::Floor(hn::Add(x, hn::Set(d, 0.5f))), hn::Set(d, float(options.K)));
      const auto e_k = GridValue(d, k, h, R);
      return {e_k, k, hn::Zero(d), e_k, e_k};
    }
    const auto one = hn::Set(d, 1.0f);
    const auto k = hn::Min(hn::Floor(x), hn::Set(d, float(options.K - 1)));
    const auto theta = hn::Sub(x, k);
    const auto e_next = GridValue(d, hn::Add(k, one), h, R);
    if (!RoundedGrid()) {
      // Down from the upper node (docs/math.md §2.2): E_k = E_{k+1} (1 - fall) and
      // w^ = E_{k+1} (1 - (1 - theta) fall) stay finite for any h, where E_k e^h overflowed
      // a float once h > 88 and gave inf or NaN weights.
      const auto e_k = hn::Mul(e_next, hn::Sub(one, fall));
      return {hn::Mul(e_next, hn::NegMulAdd(hn::Sub(one, theta), fall, one)), k, theta, e_k,
              e_next};
    }
    const auto e_k = GridValue(d, k, h, R);
    return {hn::MulAdd(theta, hn::Sub(e_next, e_k), e_k), k, theta, e_k, e_next};
  }

  using ForwardState = KIntervalForwardState;

  void BeginForward(ForwardState& st, const float*, size_t) const {
    for (size_t i = 0; i < kTileQ; ++i) {
      st.m[i] = -std::numeric_limits<float>::infinity();
      st.a[i] = std::numeric_limits<float>::infinity();
      st.argmax[i] = st.argmin[i] = 0.0f;
      st.z[i] = st.z_exact[i] = 0.0f;
    }
  }

  // Running max and min over the visible keys; strict comparisons in key order keep the
  // lowest index on ties.
  void ObserveTile(const float* HWY_RESTRICT scores, size_t nk, size_t columns, size_t j0,
                   const float* HWY_RESTRICT visible, bool all_visible, ForwardState& st) const {
    const hn::ScalableTag<float> d;
    const size_t N = hn::Lanes(d);
    for (size_t i = 0; i < columns; i += N) {
      auto m = hn::Load(d, st.m + i), a = hn::Load(d, st.a + i);
      auto argmax = hn::Load(d, st.argmax + i), argmin = hn::Load(d, st.argmin + i);
      const auto limit = hn::LoadU(d, visible + i);
      for (size_t j = 0; j < nk; ++j) {
        const auto s = hn::LoadU(d, scores + j * kTileQ + i);
        const auto seen = all_visible ? hn::FirstN(d, N) : hn::Lt(hn::Set(d, float(j)), limit);
        const auto key = hn::Set(d, float(j0 + j));
        const auto above = hn::And(seen, hn::Gt(s, m)), below = hn::And(seen, hn::Lt(s, a));
        m = hn::IfThenElse(above, s, m);
        argmax = hn::IfThenElse(above, key, argmax);
        a = hn::IfThenElse(below, s, a);
        argmin = hn::IfThenElse(below, key, argmin);
      }
      hn::Store(m, d, st.m + i);
      hn::Store(a, d, st.a + i);
      hn::Store(argmax, d, st.argmax + i);
      hn::Store(argmin, d, st.argmin + i);
    }
  }

  // Each row's grid: R (0 for a degenerate row or one with no visible key), h = R / K.
  void EndObserving(ForwardState& st, size_t columns) const {
    for (size_t i = 0; i < columns; ++i) {
      const bool seen = st.m[i] != -std::numeric_limits<float>::infinity();
      const float R = !seen ? 0.0f : Window() ? float(options.window) : st.m[i] - st.a[i];
      st.R[i] = R;
      st.h[i] = R / float(options.K);
      st.inv_h[i] = R > 0.0f ? float(options.K) / R : 0.0f;
      st.fall[i] = -std::expm1(-st.h[i]);
    }
  }

  // §2 weights: w^ = E_{k+1} (1 - (1 - theta)(1 - e^-h)) (lerp, the chord from
  // E_k = E_{k+1} e^-h to E_{k+1}) or E_round(x) (nearest), E_k = exp(k h - R); 0 below the window and for masked keys;
  // 1 on a degenerate row; a NaN u = s - m (a NaN score, or an infinite score at an infinite
  // max: inf - inf) stays NaN, never "below the window". No rescaling: alpha = 1.
  void WeighTile(float* HWY_RESTRICT scores, size_t nk, size_t columns,
                 const float* HWY_RESTRICT visible, bool all_visible, ForwardState& st,
                 float* HWY_RESTRICT alpha) const {
    Specialized([&](const auto& fixed) HWY_ATTR {
      fixed.WeighTileLoop(scores, nk, columns, visible, all_visible, st, alpha);
    });
  }
  void WeighTileLoop(float* HWY_RESTRICT scores, size_t nk, size_t columns,
                     const float* HWY_RESTRICT visible, bool all_visible, ForwardState& st,
                     float* HWY_RESTRICT alpha) const {
    const hn::ScalableTag<float> d;
    const size_t N = hn::Lanes(d);
    const auto zero = hn::Zero(d), one = hn::Set(d, 1.0f);
    for (size_t i = 0; i < columns; i += N) {
      const auto m = hn::Load(d, st.m + i), R = hn::Load(d, st.R + i);
      const auto h = hn::Load(d, st.h + i), inv_h = hn::Load(d, st.inv_h + i);
      const auto fall = hn::Load(d, st.fall + i);
      const auto degenerate = hn::Eq(R, zero);
      const auto limit = hn::LoadU(d, visible + i);
      auto z = hn::Load(d, st.z + i), z_exact = hn::Load(d, st.z_exact + i);
      for (size_t j = 0; j < nk; ++j) {
        float* s_ptr = scores + j * kTileQ + i;
        const auto s = hn::LoadU(d, s_ptr);
        const auto u = hn::Sub(s, m);
        auto w = hn::IfThenElse(degenerate, one, LPATTN_SLOT(Place(d, u, R, h, inv_h, fall).w));
        const auto seen = all_visible ? hn::FirstN(d, N) : hn::Lt(hn::Set(d, float(j)), limit);
        w = hn::IfThenElseZero(hn::And(seen, InWindow(d, u, R)), w);
        w = hn::IfThenElse(hn::And(seen, hn::IsNaN(u)), u, w);
        z = hn::Add(z, w);
        z_exact = hn::Add(z_exact, hn::IfThenElseZero(seen, ExpClamped(d, u)));
        hn::StoreU(w, d, s_ptr);
      }
      hn::Store(z, d, st.z + i);
      hn::Store(z_exact, d, st.z_exact + i);
      hn::StoreU(one, d, alpha + i);
    }
  }

  // The output factor 1/Z (0 for a row with no visible key) and the saved statistics.
  void FinishForward(const ForwardState& st, size_t nq, float* out_factor, size_t row) const {
    for (size_t i = 0; i < nq; ++i) {
      const float z = st.z[i];
      out_factor[i] = z > 0.0f ? 1.0f / z : (z == 0.0f ? 0.0f : z);
      saved.m[row + i] = st.m[i];
      saved.R[row + i] = st.R[i];
      saved.Z[row + i] = z;
      saved.lse_exact[row + i] = st.m[i] + std::log(st.z_exact[i]);
      saved.argmax[row + i] = int32_t(st.argmax[i]);
      saved.argmin[row + i] = int32_t(st.argmin[i]);
    }
  }

  // ---- split-KV (§5): statistics merged before the blocks weigh, sums after ----

  static constexpr bool kMergesKeyBlocks = true;
  // The blocks' maxima and minima in block order; strict comparisons keep the lowest key index
  // on ties, as one pass over the keys does.
  void MergeObserved(const ForwardState* blocks, size_t count, ForwardState& out) const {
    BeginForward(out, nullptr, 0);
    for (size_t c = 0; c < count; ++c) {
      for (size_t i = 0; i < kTileQ; ++i) {
        const ForwardState& block = blocks[c];
        if (block.m[i] > out.m[i]) out.m[i] = block.m[i], out.argmax[i] = block.argmax[i];
        if (block.a[i] < out.a[i]) out.a[i] = block.a[i], out.argmin[i] = block.argmin[i];
      }
    }
  }
  // The merged statistics of rows [row, row + nq) (Z and lse_exact come with the sums).
  void SaveObserved(const ForwardState& st, size_t nq, size_t row) const {
    for (size_t i = 0; i < nq; ++i) {
      saved.m[row + i] = st.m[i];
      saved.R[row + i] = st.R[i];
      saved.argmax[row + i] = int32_t(st.argmax[i]);
      saved.argmin[row + i] = int32_t(st.argmin[i]);
    }
  }
  // A block's sums of w^ and of exp(u), on the row's final grid ([2][stride]).
  static constexpr size_t kBlockState = 2;
  static void SaveBlock(const ForwardState& st, size_t nq, size_t stride, float* out) {
    std::copy(st.z, st.z + nq, out);
    std::copy(st.z_exact, st.z_exact + nq, out + stride);
  }
  static void EmptyBlock(size_t, size_t stride, float* out) {
    std::fill(out, out + 2 * stride, 0.0f);
  }
  // Row i's output weights 1/Z for every block with weight (no rescaling: the grid is the
  // row's), Z and lse_exact = m + log sum exp(u) saved. No sinks (§2).
  void MergeBlocks(const float* const* states, size_t blocks, size_t stride, size_t i,
                   const float*, size_t row, float* weights) const {
    float z = 0.0f, z_exact = 0.0f;
    for (size_t c = 0; c < blocks; ++c) z += states[c][i], z_exact += states[c][stride + i];
    const float factor = z > 0.0f ? 1.0f / z : (z == 0.0f ? 0.0f : z);
    for (size_t c = 0; c < blocks; ++c) weights[c] = states[c][i] != 0.0f ? factor : 0.0f;
    saved.Z[row] = z;
    saved.lse_exact[row] = saved.m[row] + std::log(z_exact);
  }

  // ---- backward (§2) ----

  void RowParams(size_t row, float delta, float* out) const {
    const float R = saved.R[row], Z = saved.Z[row];
    out[kM] = saved.m[row];
    out[kR] = R;
    out[kH] = R / float(options.K);
    out[kInvH] = R > 0.0f ? float(options.K) / R : 0.0f;
    out[kFall] = -std::expm1(-out[kH]);
    out[kInvZ] = Z > 0.0f ? 1.0f / Z : 0.0f;
    out[kDelta] = delta;
    out[kLseExact] = saved.lse_exact[row];
    out[kC] = delta;
  }

  // The surrogates that need row sums: the calibration terms of exact and weight (unless
  // detached), and the sum of pi g of prob at the exact softmax.
  bool NeedsRowTerms() const {
    if (options.surrogate == KIntervalSurrogate::kProb) return !options.prob_jacobian_at_grid;
    return !options.detach_extrema;
  }
  size_t Argmax(size_t row) const { return size_t(saved.argmax[row]); }
  size_t Argmin(size_t row) const { return size_t(saved.argmin[row]); }

  // What every surrogate shares about one entry: the quantized probability p = w^ / Z, its
  // w^, the grid point, d = (g - Delta) / Z and the masks.
  template <class D, class V>
  struct Entry {
    VecSlot<D> p, w_hat, u, d;
    GridPoint<D, V> at;
    MaskSlot<D> degenerate, in_window;
  };
  // Built whole by aggregate initialisation: a default-constructed Entry would call the vector
  // types' constructors from a function without the target's attributes, which NEON's
  // always-inline constructors refuse (docs/design.md §11).
  template <class D, class V>
  HWY_INLINE Entry<D, V> Evaluate(D d, V s, V dp, RowParamsIn<D> row) const {
    const V u = hn::Sub(s, row[kM]);
    const GridPoint<D, V> at = Place(d, u, row[kR], row[kH], row[kInvH], row[kFall]);
    const hn::Mask<D> degenerate = hn::Eq(row[kR], hn::Zero(d));
    const hn::Mask<D> in_window = InWindow(d, u, row[kR]);
    const V w_hat = hn::IfThenElseZero(
        in_window, hn::IfThenElse(degenerate, hn::Set(d, 1.0f), LPATTN_SLOT(at.w)));
    const V p = hn::IfThenElse(hn::IsNaN(u), u, hn::Mul(w_hat, row[kInvZ]));
    return {p, w_hat, u, hn::Mul(hn::Sub(dp, row[kDelta]), row[kInvZ]), at, degenerate, in_window};
  }
  // The exact surrogate's slope dw^/du: the chord's (E_{k+1} - E_k) / h in the window, 0
  // below it, exp(0) = 1 on a degenerate row.
  template <class D, class V>
  HWY_INLINE V ChordSlope(D d, const Entry<D, V>& e, RowParamsIn<D> row) const {
    const auto slope =
        RoundedGrid()
            ? hn::Mul(hn::Sub(LPATTN_SLOT(e.at.e_next), LPATTN_SLOT(e.at.e_k)), row[kInvH])
            : hn::Mul(hn::Mul(LPATTN_SLOT(e.at.e_next), row[kFall]), row[kInvH]);
    return hn::IfThenElse(LPATTN_SLOT(e.degenerate), hn::Set(d, 1.0f),
                          hn::IfThenElseZero(LPATTN_SLOT(e.in_window), slope));
  }
  // The weight surrogate's slope: exp(u), or w^ with slope=grid.
  template <class D, class V>
  HWY_INLINE V WeightSlope(D d, const Entry<D, V>& e) const {
    return WeightSlopeFromGrid() ? LPATTN_SLOT(e.w_hat) : ExpClamped(d, LPATTN_SLOT(e.u));
  }

  // dS without the extrema corrections, from an evaluated entry.
  template <class D, class V>
  HWY_INLINE V GradOf(D d, const Entry<D, V>& e, V s, V dp, RowParamsIn<D> row) const {
    switch (Surrogate()) {
      case KIntervalSurrogate::kExact:
        return hn::Mul(LPATTN_SLOT(e.d), ChordSlope(d, e, row));
      case KIntervalSurrogate::kWeight:
        return hn::Mul(LPATTN_SLOT(e.d), WeightSlope(d, e));
      case KIntervalSurrogate::kProb:
        break;
    }
    if (ProbJacobianAtGrid()) return hn::Mul(LPATTN_SLOT(e.p), hn::Sub(dp, row[kDelta]));
    return hn::Mul(ExpClamped(d, hn::Sub(s, row[kLseExact])), hn::Sub(dp, row[kC]));
  }

  // The weight (p, for dV) and dS without the extrema corrections.
  template <class D, class V>
  HWY_INLINE void WeightAndGrad(D d, V s, V dp, RowParamsIn<D> row, V& w, V& ds) const {
    const Entry<D, V> e = Evaluate(d, s, dp, row);
    w = LPATTN_SLOT(e.p);
    ds = GradOf(d, e, s, dp, row);
  }

  // Row-sum elements from an evaluated entry: exact: d w' and (minmax) d dw^/dR; weight: d e;
  // prob: pi g.
  template <class D, class V>
  HWY_INLINE void TermsOf(D d, const Entry<D, V>& e, V s, V dp, RowParamsIn<D> row, V& t1,
                          V& t2) const {
    switch (Surrogate()) {
      case KIntervalSurrogate::kExact: {
        const auto slope = ChordSlope(d, e, row);
        t1 = hn::Mul(LPATTN_SLOT(e.d), slope);
        if (Window()) break;
        // dw^/dR at fixed u = (1 - theta)(-(K - k)/K) E_k + theta (-(K - k - 1)/K) E_{k+1}
        //                     + w' (-u / R), with u / R = u (1/h) / K.
        const auto inv_k = hn::Set(d, 1.0f / float(options.K)), one = hn::Set(d, 1.0f);
        const auto frac =
            hn::Mul(hn::Sub(hn::Set(d, float(options.K)), LPATTN_SLOT(e.at.k)), inv_k);
        const auto e_next = LPATTN_SLOT(e.at.e_next);
        auto dw_dR = hn::Mul(hn::Mul(hn::Sub(one, LPATTN_SLOT(e.at.theta)), hn::Neg(frac)),
                             LPATTN_SLOT(e.at.e_k));
        dw_dR = hn::MulAdd(hn::Mul(LPATTN_SLOT(e.at.theta), hn::Neg(hn::Sub(frac, inv_k))), e_next,
                           dw_dR);
        dw_dR = hn::MulAdd(slope, hn::Neg(hn::Mul(hn::Mul(LPATTN_SLOT(e.u), row[kInvH]), inv_k)),
                           dw_dR);
        const auto active = hn::AndNot(LPATTN_SLOT(e.degenerate), LPATTN_SLOT(e.in_window));
        t2 = hn::IfThenElseZero(active, hn::Mul(LPATTN_SLOT(e.d), dw_dR));
        break;
      }
      case KIntervalSurrogate::kWeight:
        t1 = hn::Mul(LPATTN_SLOT(e.d), WeightSlope(d, e));
        break;
      case KIntervalSurrogate::kProb:
        t1 = hn::Mul(ExpClamped(d, hn::Sub(s, row[kLseExact])), dp);
        break;
    }
  }

  template <class D, class V>
  HWY_INLINE void Terms(D d, V s, V dp, RowParamsIn<D> row, V& t1, V& t2) const {
    TermsOf(d, Evaluate(d, s, dp, row), s, dp, row, t1, t2);
  }

  // Whether dS waits for the row sums: only the prob surrogate at pi (its c). The others use
  // the sums only for the extrema corrections, so the skeleton computes dS and the sums from
  // one evaluation of each entry (GradAndTerms) in a single query-side sweep.
  bool GradWaitsForTerms() const {
    return Surrogate() == KIntervalSurrogate::kProb && !ProbJacobianAtGrid();
  }
  template <class D, class V>
  HWY_INLINE void GradAndTerms(D d, V s, V dp, RowParamsIn<D> row, V& ds, V& t1, V& t2) const {
    const Entry<D, V> e = Evaluate(d, s, dp, row);
    ds = GradOf(d, e, s, dp, row);
    TermsOf(d, e, s, dp, row, t1, t2);
  }

  // dm = -sum d w' + [minmax] sum d dw^/dR, da = -[minmax] sum d dw^/dR (exact);
  // dm = -sum d e (weight); c = sum pi g (prob).
  void FinishTerms(size_t, float t1, float t2, float* row, float* corrections) const {
    switch (Surrogate()) {
      case KIntervalSurrogate::kExact:
        corrections[0] = Window() ? -t1 : -t1 + t2;
        corrections[1] = Window() ? 0.0f : -t2;
        break;
      case KIntervalSurrogate::kWeight:
        corrections[0] = -t1;
        corrections[1] = 0.0f;
        break;
      case KIntervalSurrogate::kProb:
        row[kC] = t1;
        corrections[0] = corrections[1] = 0.0f;
        break;
    }
  }
};

// The transform the skeleton is instantiated with: options read at run time, its per-entry loops
// run through Specialized.
using KIntervalTransform = KIntervalTransformT<RuntimeKInterval>;

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
