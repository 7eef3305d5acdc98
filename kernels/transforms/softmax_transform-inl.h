// Row transform policy of exact softmax (docs/math.md §1, §1.1): the online max/normaliser in the
// forward pass, and p = exp(s - lse), dS = p (dP - Delta) in the backward pass.
//
// The skeleton hands the forward a score tile stored key-major (st[j * kTileQ + i], key j,
// query i), so every per-row reduction over keys is a vertical vector op across kTileQ
// queries and no horizontal reduction is needed.
//
// Per-target include guard: this header is re-included once per Highway target.
#if defined(LPATTN_KERNELS_TRANSFORMS_SOFTMAX_TRANSFORM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_KERNELS_TRANSFORMS_SOFTMAX_TRANSFORM_INL_H_
#undef LPATTN_KERNELS_TRANSFORMS_SOFTMAX_TRANSFORM_INL_H_
#else
#define LPATTN_KERNELS_TRANSFORMS_SOFTMAX_TRANSFORM_INL_H_
#endif

#include <stddef.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/skeleton/fast_exp-inl.h"
#include "kernels/skeleton/four_rows-inl.h"
#include "kernels/skeleton/tile_sizes.h"
#include "kernels/skeleton/vector_slots-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// exp for weights: a NaN score must reach the row's output instead of being hidden, and a
// weight below exp(-60) (9e-27 of the row's largest) is 0: it adds nothing an fp32 sum can
// hold (2^-24 = 6e-8), while products with it (dS = w (dP - Delta), then dK and dQ) fall into
// subnormals, which cost x86 cores a microcode assist each (ALiBi's distant keys made the
// backward 10x slower with ExpClamped's floor of 4e-38).
// On AVX-512 vectors ExpScalef keeps NaN by itself (and gives ExpClamped's values otherwise).
template <class D, class V>
HWY_INLINE V ExpKeepNaN(D d, V x) {
  const auto below = hn::Lt(x, hn::Set(d, -60.0f));
#if HWY_TARGET <= HWY_AVX3
  if constexpr (hn::MaxLanes(D()) == 16) return hn::IfThenZeroElse(below, ExpScalef(x));
#endif
  return hn::IfThenElse(hn::IsNaN(x), x, hn::IfThenZeroElse(below, ExpClamped(d, x)));
}

// The max over keys j < nk of each lane's column of a key-major tile (st[j * kTileQ]), keys
// j >= limit counting as -inf unless all_visible: four independent chains, because one chain
// of dependent maxima waits out the instruction's latency at every key (a profile of the AMX
// forwards found a tenth of the transform's time there).
template <bool kAllVisible, class D>
HWY_INLINE hn::Vec<D> ColumnMaxOf(D d, const float* HWY_RESTRICT st, size_t nk,
                                  hn::Vec<D> limit) {
  const auto neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  const auto score = [&](size_t j) {
    const auto s = hn::LoadU(d, st + j * kTileQ);
    return kAllVisible ? s : hn::IfThenElse(hn::Lt(hn::Set(d, float(j)), limit), s, neg_inf);
  };
  auto m0 = neg_inf, m1 = neg_inf, m2 = neg_inf, m3 = neg_inf;
  size_t j = 0;
  for (; j + 4 <= nk; j += 4) {
    m0 = hn::Max(m0, score(j));
    m1 = hn::Max(m1, score(j + 1));
    m2 = hn::Max(m2, score(j + 2));
    m3 = hn::Max(m3, score(j + 3));
  }
  for (; j < nk; ++j) m0 = hn::Max(m0, score(j));
  return hn::Max(hn::Max(m0, m1), hn::Max(m2, m3));
}
template <class D>
HWY_INLINE hn::Vec<D> ColumnMax(D d, const float* HWY_RESTRICT st, size_t nk, hn::Vec<D> limit,
                                bool all_visible) {
  return all_visible ? ColumnMaxOf<true>(d, st, nk, limit) : ColumnMaxOf<false>(d, st, nk, limit);
}

struct SoftmaxTransform {
  static constexpr bool kRowStatsPass = false;  // online: one pass with rescaling
  static constexpr bool kHasRowTerms = false;   // dS is elementwise given Delta
  static constexpr bool kSparseWeights = false;  // exp leaves no exact zeros to skip
  static constexpr size_t kRowParams = 2;       // the backward's row: lse, Delta
  float* lse = nullptr;              // [batch, heads, q_len], written by the forward
  const float* saved_lse = nullptr;  // the same, read by the backward
  // §1.3: the softcap c the scores were capped with (score_bias-inl.h caps them where they
  // are computed); the backward's dS takes its derivative. 0: off.
  float softcap = 0.0f;

  // Running state of the kTileQ rows of one query tile.
  struct ForwardState {
    HWY_ALIGN float m[kTileQ];  // running max (starts at the sink logit)
    HWY_ALIGN float z[kTileQ];  // running normaliser, relative to m
  };

  // §1.1: the online state starts with m = tau, Z = 1 with a sink (tau = sinks[i] for row i),
  // m = -inf, Z = 0 without (sinks null).
  static void BeginForward(ForwardState& state, const float* sinks, size_t) {
    for (size_t i = 0; i < kTileQ; ++i) {
      state.m[i] = sinks != nullptr ? sinks[i] : -std::numeric_limits<float>::infinity();
      state.z[i] = sinks != nullptr ? 1.0f : 0.0f;
    }
  }

  // §1 forward, one key tile: scores st (nk keys x `columns` queries of a kTileQ-wide tile,
  // already scaled) become exp(s - m_new) in place; alpha[i] = exp(m_old - m_new) rescales row i's accumulator.
  // Query i sees keys j < visible[i]; `all_visible` skips the mask on interior tiles.
  void WeighTile(float* HWY_RESTRICT st, size_t nk, size_t columns,
                 const float* HWY_RESTRICT visible, bool all_visible, ForwardState& state,
                 float* HWY_RESTRICT alpha) const {
    const hn::ScalableTag<float> d;
    const size_t N = hn::Lanes(d);
#if !HWY_HAVE_SCALABLE
    if (columns == N && OnlyFourRowsSee(d, visible)) {
      return WeighFourRows(st, nk, visible, all_visible, state, alpha);
    }
#endif
    for (size_t i = 0; i < columns; i += N) {
      const auto limit = hn::LoadU(d, visible + i);
      // Rows that see none of the tile (causal diagonals, a window's edges) keep their state
      // and weigh it 0 (their scores may not have been computed: LiveColumns).
      if (!all_visible && hn::AllTrue(d, hn::Eq(limit, hn::Zero(d)))) {
        for (size_t j = 0; j < nk; ++j) hn::StoreU(hn::Zero(d), d, st + j * kTileQ + i);
        hn::StoreU(hn::Set(d, 1.0f), d, alpha + i);
        continue;
      }
      // Keys past every row's limit (a causal diagonal's upper triangle, about half its
      // tile) are weighed 0 without an exp; their scores may not have been computed either.
      const size_t keys =
          all_visible ? nk : std::min(nk, size_t(hn::GetLane(hn::MaxOfLanes(d, limit))));
      const auto m_old = hn::LoadU(d, state.m + i);
      const auto m_new = hn::Max(m_old, ColumnMax(d, st + i, keys, limit, all_visible));
      // exp(-inf - -inf) is NaN; Highway's Exp turns it into 0, which is right here: such a row
      // has seen nothing yet, so its accumulator and normaliser are 0 anyway.
      const auto rescale = hn::Exp(d, hn::Sub(m_old, m_new));
      auto z = hn::Mul(hn::LoadU(d, state.z + i), rescale);
      for (size_t j = 0; j < keys; ++j) {
        float* s_ptr = st + j * kTileQ + i;
        auto p = ExpKeepNaN(d, hn::Sub(hn::LoadU(d, s_ptr), m_new));
        if (!all_visible) p = hn::IfThenElseZero(hn::Lt(hn::Set(d, float(j)), limit), p);
        z = hn::Add(z, p);
        hn::StoreU(p, d, s_ptr);
      }
      for (size_t j = keys; j < nk; ++j) hn::StoreU(hn::Zero(d), d, st + j * kTileQ + i);
      hn::StoreU(m_new, d, state.m + i);
      hn::StoreU(z, d, state.z + i);
      hn::StoreU(rescale, d, alpha + i);
    }
  }

#if !HWY_HAVE_SCALABLE
  // Whether a one-vector tile's rows past the first kFewQueries see none of its keys: a decode
  // tile of up to 4 queries (a GQA group's heads) in a vector of 8 or 16 lanes.
  template <class D>
  static HWY_INLINE bool OnlyFourRowsSee(D d, const float* HWY_RESTRICT visible) {
    if (hn::Lanes(d) <= kFewQueries) return false;
    const hn::RebindToSigned<D> di;
    const auto past_four =
        hn::RebindMask(d, hn::Gt(hn::Iota(di, 0), hn::Set(di, int32_t(kFewQueries) - 1)));
    const auto seeing = hn::Gt(hn::LoadU(d, visible), hn::Zero(d));
    return hn::AllFalse(d, hn::And(past_four, seeing));
  }

  // WeighTile's loop for such a tile with the exps of N / 4 keys in one vector (4 rows of
  // each), where the full-width loop spent 12 of 16 lanes on rows that see nothing (12% of an
  // int8 decode step). The same values and sums in the same order, so the same bits: m is a
  // max, each weight the same lane-wise exp, and Z adds the keys in order. Rows 4.. are
  // weighed 0 and keep their state, as the full-width loop's mask leaves them.
  void WeighFourRows(float* HWY_RESTRICT st, size_t nk, const float* HWY_RESTRICT visible,
                     bool all_visible, ForwardState& state, float* HWY_RESTRICT alpha) const {
    const hn::ScalableTag<float> d;
    const hn::CappedTag<float, kFewQueries> d4;
    const hn::RebindToSigned<decltype(d)> di;
    constexpr size_t kKeys = hn::MaxLanes(decltype(d)()) / kFewQueries;  // keys a vector
    const auto limit4 = hn::LoadU(d4, visible);
    const size_t keys =
        all_visible ? nk : std::min(nk, size_t(hn::GetLane(hn::MaxOfLanes(d4, limit4))));
    const auto neg_inf = hn::Set(d4, -std::numeric_limits<float>::infinity());
    auto max4 = neg_inf;
    for (size_t j = 0; j < keys; ++j) {
      auto s = hn::LoadU(d4, st + j * kTileQ);
      if (!all_visible) s = hn::IfThenElse(hn::Lt(hn::Set(d4, float(j)), limit4), s, neg_inf);
      max4 = hn::Max(max4, s);
    }
    const auto m_old = hn::LoadU(d4, state.m);
    const auto m_new = hn::Max(m_old, max4);
    const auto rescale = hn::Exp(d4, hn::Sub(m_old, m_new));
    auto z = hn::Mul(hn::LoadU(d4, state.z), rescale);
    const auto m_wide = Broadcast4(d, m_new), limit = Broadcast4(d, limit4);
    // Lane l of a vector holds key j + l / 4, row l % 4.
    static_assert(kFewQueries == 4, "key_offset shifts lane indices by 2");
    const auto key_offset = hn::ConvertTo(d, hn::ShiftRight<2>(hn::Iota(di, 0)));
    HWY_ALIGN float w[hn::MaxLanes(decltype(d)())];
    size_t j = 0;
    for (; j + kKeys <= keys; j += kKeys) {
      auto p = ExpKeepNaN(d, hn::Sub(Gather4(d, st + j * kTileQ, kTileQ), m_wide));
      if (!all_visible) {
        p = hn::IfThenElseZero(hn::Lt(hn::Add(hn::Set(d, float(j)), key_offset), limit), p);
      }
      hn::Store(p, d, w);
      for (size_t k = 0; k < kKeys; ++k) {
        const auto p4 = hn::Load(d4, w + k * kFewQueries);
        z = hn::Add(z, p4);
        float* row = st + (j + k) * kTileQ;
        hn::StoreU(hn::Zero(d), d, row);
        hn::StoreU(p4, d4, row);
      }
    }
    for (; j < keys; ++j) {  // the last keys, one a vector of 4 lanes
      float* row = st + j * kTileQ;
      auto p4 = ExpKeepNaN(d4, hn::Sub(hn::LoadU(d4, row), m_new));
      if (!all_visible) p4 = hn::IfThenElseZero(hn::Lt(hn::Set(d4, float(j)), limit4), p4);
      z = hn::Add(z, p4);
      hn::StoreU(hn::Zero(d), d, row);
      hn::StoreU(p4, d4, row);
    }
    for (; j < nk; ++j) hn::StoreU(hn::Zero(d), d, st + j * kTileQ);
    hn::StoreU(m_new, d4, state.m);
    hn::StoreU(z, d4, state.z);
    hn::StoreU(hn::Set(d, 1.0f), d, alpha);  // rows 4.. keep their accumulators
    hn::StoreU(rescale, d4, alpha);
  }

#endif

  // §1 forward, end of the row: the output factor 1/Z (0 for a row with nothing, sink
  // included, to normalise) and lse = m + log Z.
  void FinishForward(const ForwardState& state, size_t nq, float* out_factor, size_t row) const {
    for (size_t i = 0; i < nq; ++i) {
      const float z = state.z[i];
      out_factor[i] = z > 0.0f ? 1.0f / z : (z == 0.0f ? 0.0f : z);
      lse[row + i] = state.m[i] + std::log(z);
    }
  }

  // §5 split-KV: a key block's partial state, m then Z per row ([2][stride]); a block
  // without a visible key has m = -inf, Z = 0.
  static constexpr bool kMergesKeyBlocks = true;
  static constexpr size_t kBlockState = 2;
  static void SaveBlock(const ForwardState& state, size_t nq, size_t stride, float* out) {
    std::copy(state.m, state.m + nq, out);
    std::copy(state.z, state.z + nq, out + stride);
  }
  static void EmptyBlock(size_t nq, size_t stride, float* out) {
    std::fill(out, out + nq, -std::numeric_limits<float>::infinity());
    std::fill(out + stride, out + stride + nq, 0.0f);
  }
  // §5's merge of row i over the blocks' states, in block order, with the sink (a block of
  // m = tau, Z = 1 and no output) when `sink` is set: each block's output weight
  // exp(m_c - m) / Z, and lse = m + log Z for the row.
  void MergeBlocks(const float* const* states, size_t blocks, size_t stride, size_t i,
                   const float* sink, size_t row, float* weights) const {
    float m = sink != nullptr ? *sink : -std::numeric_limits<float>::infinity();
    for (size_t c = 0; c < blocks; ++c) m = std::max(m, states[c][i]);
    float z = sink != nullptr ? std::exp(*sink - m) : 0.0f;
    for (size_t c = 0; c < blocks; ++c) {
      const float m_c = states[c][i];
      weights[c] = m_c == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(m_c - m);
      z += weights[c] * states[c][stride + i];
    }
    const float factor = z > 0.0f ? 1.0f / z : (z == 0.0f ? 0.0f : z);
    for (size_t c = 0; c < blocks; ++c) weights[c] *= factor;
    lse[row] = m + std::log(z);
  }

  void RowParams(size_t row, float delta, float* out) const {
    out[0] = saved_lse[row];
    out[1] = delta;
  }

  // §1 backward: p = exp(s - lse) with s already scaled (and capped), dS = p (dP - Delta).
  // With a softcap (§1.3) the score is c t, t = tanh(s_raw / c), so dS = p (dP - Delta)
  // (1 - t^2) is the gradient with respect to the uncapped score (t clamped to [-1, 1], which
  // a hidden key's score of §1.5 leaves, its weight being 0).
  template <class D, class V>
  HWY_INLINE void WeightAndGrad(D d, V s, V dp, RowParamsIn<D> row, V& w, V& ds) const {
    w = ExpKeepNaN(d, hn::Sub(s, row[0]));
    ds = hn::Mul(w, hn::Sub(dp, row[1]));
    if (softcap != 0.0f) {
      const auto one = hn::Set(d, 1.0f);
      const auto t = hn::Min(hn::Max(hn::Mul(s, hn::Set(d, 1.0f / softcap)), hn::Neg(one)), one);
      ds = hn::Mul(ds, hn::NegMulAdd(t, t, one));
    }
  }
};

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
