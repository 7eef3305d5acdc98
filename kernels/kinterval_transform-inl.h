// The K-interval row transform (spec/kernels.md §2) as a policy of the tiled skeleton: a
// statistics pass finds each row's max, min, argmax and argmin, then the weighting pass puts
// every score on the row's grid of K + 1 values. Lanes are queries (the skeleton's score tiles
// are key-major), so each lane carries its own row's grid.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_KINTERVAL_TRANSFORM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_KINTERVAL_TRANSFORM_INL_H_
#undef LPATTN_KERNELS_KINTERVAL_TRANSFORM_INL_H_
#else
#define LPATTN_KERNELS_KINTERVAL_TRANSFORM_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <cmath>
#include <limits>

#include "hwy/highway.h"
#include "kernels/fast_exp-inl.h"
#include "kernels/kinterval.h"
#include "kernels/tile_sizes.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

struct KIntervalTransform {
  static constexpr bool kRowStatsPass = true;  // the grid hangs off the final max and min

  int K;
  bool window;   // R = W instead of m - a
  float W;
  bool nearest;  // nearest node instead of the chord between nodes
  KIntervalSaved saved;

  // The kTileQ rows of one query tile. Key indices are held as floats (exact below 2^24).
  struct ForwardState {
    HWY_ALIGN float m[kTileQ], a[kTileQ], argmax[kTileQ], argmin[kTileQ];
    HWY_ALIGN float R[kTileQ], h[kTileQ], inv_h[kTileQ], growth[kTileQ];  // growth = e^h - 1
    HWY_ALIGN float z[kTileQ], z_exact[kTileQ];  // sums of w^ and of exp(u)
  };

  void BeginForward(ForwardState& st, bool, float) const {
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
      const float R = !seen ? 0.0f : window ? W : st.m[i] - st.a[i];
      st.R[i] = R;
      st.h[i] = R / float(K);
      st.inv_h[i] = R > 0.0f ? float(K) / R : 0.0f;
      st.growth[i] = std::expm1(st.h[i]);
    }
  }

  // §2 weights: w^ = E_k (1 + theta (e^h - 1)) (lerp, the chord from E_k to E_{k+1} = E_k e^h)
  // or E_round(x) (nearest), E_k = exp(k h - R); 0 below the window and for masked keys;
  // 1 on a degenerate row; NaN scores stay NaN. No rescaling: alpha = 1.
  void WeighTile(float* HWY_RESTRICT scores, size_t nk, size_t columns,
                 const float* HWY_RESTRICT visible, bool all_visible, ForwardState& st,
                 float* HWY_RESTRICT alpha) const {
    const hn::ScalableTag<float> d;
    const size_t N = hn::Lanes(d);
    const auto zero = hn::Zero(d), one = hn::Set(d, 1.0f), half = hn::Set(d, 0.5f);
    const auto last_node = hn::Set(d, float(K)), last_interval = hn::Set(d, float(K - 1));
    for (size_t i = 0; i < columns; i += N) {
      const auto m = hn::Load(d, st.m + i), R = hn::Load(d, st.R + i);
      const auto h = hn::Load(d, st.h + i), inv_h = hn::Load(d, st.inv_h + i);
      const auto growth = hn::Load(d, st.growth + i);
      const auto degenerate = hn::Eq(R, zero);
      const auto neg_R = hn::Neg(R);
      const auto limit = hn::LoadU(d, visible + i);
      auto z = hn::Load(d, st.z + i), z_exact = hn::Load(d, st.z_exact + i);
      for (size_t j = 0; j < nk; ++j) {
        float* s_ptr = scores + j * kTileQ + i;
        const auto s = hn::LoadU(d, s_ptr);
        const auto u = hn::Sub(s, m);
        const auto x = hn::Min(hn::Max(hn::Mul(hn::Add(u, R), inv_h), zero), last_node);
        hn::Vec<decltype(d)> w;
        if (nearest) {
          w = ExpClamped(d, hn::MulSub(hn::Min(hn::Floor(hn::Add(x, half)), last_node), h, R));
        } else {
          const auto k = hn::Min(hn::Floor(x), last_interval);
          w = hn::Mul(ExpClamped(d, hn::MulSub(k, h, R)), hn::MulAdd(hn::Sub(x, k), growth, one));
        }
        w = hn::IfThenElse(degenerate, one, w);
        const auto seen = all_visible ? hn::FirstN(d, N) : hn::Lt(hn::Set(d, float(j)), limit);
        w = hn::IfThenElseZero(hn::And(seen, hn::Ge(u, neg_R)), w);
        w = hn::IfThenElse(hn::And(seen, hn::IsNaN(s)), s, w);
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
};

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
