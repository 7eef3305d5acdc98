// What the fp64 references share (internal to kernels/reference/): offsets into the dense
// layouts of reference.h, the visibility rules of docs/math.md §0, the sink logit of §1.1, the
// size checks, and the operand quantization of §4 applied as the kernels apply it.
#ifndef LPATTN_KERNELS_REFERENCE_REFERENCE_ROWS_H_
#define LPATTN_KERNELS_REFERENCE_REFERENCE_ROWS_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/reference.h"
#include "quant/quantizer.h"

namespace lpattn::reference_internal {

// Offsets into the dense layouts documented in reference.h.
inline size_t QRowOffset(const AttentionShape& s, int64_t b, int64_t h, int64_t i) {
  return static_cast<size_t>(((b * s.heads + h) * s.q_len + i) * s.head_dim);
}
inline size_t KvRowOffset(const AttentionShape& s, int64_t b, int64_t kv_h, int64_t j) {
  return static_cast<size_t>(((b * s.kv_heads + kv_h) * s.kv_len + j) * s.head_dim);
}
inline size_t LseIndex(const AttentionShape& s, int64_t b, int64_t h, int64_t i) {
  return static_cast<size_t>((b * s.heads + h) * s.q_len + i);
}

// §0: grouped-query attention, query head h reads kv head h / (H / Hkv).
inline int64_t KvHeadOf(const AttentionShape& s, int64_t h) { return h / (s.heads / s.kv_heads); }

// §0: bottom-right aligned causal mask, j in J_i iff j <= i + (Tk - Tq); §1.5's window also
// hides j <= i + (Tk - Tq) - W.
inline bool KeyVisible(const AttentionShape& s, const AttentionOptions& options, int64_t i, int64_t j) {
  const int64_t position = i + (s.kv_len - s.q_len);
  if (options.window != 0 && j <= position - options.window) return false;
  return !options.causal || j <= position;
}

// §0: N_i = |J_i|.
inline int64_t VisibleKeyCount(const AttentionShape& s, const AttentionOptions& options, int64_t i) {
  int64_t count = 0;
  for (int64_t j = 0; j < s.kv_len; ++j) count += KeyVisible(s, options, i, j) ? 1 : 0;
  return count;
}

// §1.1: tau_h, fixed at 0 for the off-by-one softmax; no value without a sink.
inline std::optional<double> SinkLogit(const AttentionOptions& options, const ReferenceInputs& inputs,
                                int64_t h) {
  switch (options.sink) {
    case SinkMode::kNone:
      return std::nullopt;
    case SinkMode::kLearned:
      return inputs.sink_logits[static_cast<size_t>(h)];
    case SinkMode::kOffByOne:
      return 0.0;
  }
  return std::nullopt;
}

// §1.3: a scaled score under the logit softcap c (0: none), c tanh(s / c).
inline double Capped(const AttentionOptions& options, double s) {
  const double c = options.softcap;
  return c == 0.0 ? s : c * std::tanh(s / c);
}

// §1.4: ALiBi's bias of query i (head h) and key j, -slope_h |i + Tk - Tq - j| (0 without).
inline double AlibiBias(const AttentionShape& s, const AttentionOptions& options, int64_t h,
                        int64_t i, int64_t j) {
  if (options.alibi_slopes == nullptr) return 0.0;
  return -double(options.alibi_slopes[h]) * double(std::abs(i + s.kv_len - s.q_len - j));
}

inline double Dot(const double* a, const double* b, int64_t n) {
  double sum = 0.0;
  for (int64_t d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

inline void CheckSize(const std::vector<double>& v, int64_t expected, const char* name) {
  if (static_cast<int64_t>(v.size()) != expected) {
    throw std::invalid_argument(std::string("lpattn reference: ") + name + " has " +
                                std::to_string(v.size()) + " elements, expected " +
                                std::to_string(expected));
  }
}

// The references index dense vectors directly, so a size mismatch is caught here rather than
// read out of bounds.
inline void CheckReferenceInputs(const AttentionShape& s, const AttentionOptions& options,
                          const ReferenceInputs& inputs) {
  if (s.batch <= 0 || s.heads <= 0 || s.kv_heads <= 0 || s.q_len <= 0 || s.kv_len <= 0 ||
      s.head_dim <= 0 || s.heads % s.kv_heads != 0) {
    throw std::invalid_argument("lpattn reference: invalid shape");
  }
  CheckSize(inputs.q, s.batch * s.heads * s.q_len * s.head_dim, "q");
  CheckSize(inputs.k, s.batch * s.kv_heads * s.kv_len * s.head_dim, "k");
  CheckSize(inputs.v, s.batch * s.kv_heads * s.kv_len * s.head_dim, "v");
  if (options.sink == SinkMode::kLearned) CheckSize(inputs.sink_logits, s.heads, "sink_logits");
}


// §4: the operands the precision option quantizes, through the kernels' own quantizers (in
// float, as the kernels see them); others as given. A tensor of the wrong size is left for the
// size checks to reject.
inline std::vector<double> Simulated(const quant::QuantSpec& spec, const std::vector<double>& x,
                              int64_t batch, int64_t heads, int64_t tokens, int64_t dim) {
  if (spec.format == quant::Format::kFp32 || int64_t(x.size()) != batch * heads * tokens * dim) {
    return x;
  }
  const std::vector<float> in(x.begin(), x.end());
  std::vector<float> out(in.size());
  quant::QuantizeDequantize(spec, {in.data(), batch, heads, tokens, dim, heads * tokens * dim,
                                   tokens * dim, dim},
                            out.data(), "lpattn reference");
  return std::vector<double>(out.begin(), out.end());
}

inline ReferenceInputs Simulated(const AttentionShape& s, const Precision& p, ReferenceInputs in) {
  in.q = Simulated(p.QuerySpec(), in.q, s.batch, s.heads, s.q_len, s.head_dim);
  in.k = Simulated(p.KeySpec(), in.k, s.batch, s.kv_heads, s.kv_len, s.head_dim);
  in.v = Simulated(p.ValueSpec(), in.v, s.batch, s.kv_heads, s.kv_len, s.head_dim);
  return in;
}

inline ReferenceThresholdInputs Simulated(const AttentionShape& s, const Precision& p,
                                   ReferenceThresholdInputs in) {
  for (int t = 0; t < 2; ++t) {
    in.q[t] = Simulated(p.QuerySpec(), in.q[t], s.batch, s.heads, s.q_len, s.head_dim);
    in.k[t] = Simulated(p.KeySpec(), in.k[t], s.batch, s.kv_heads, s.kv_len, s.head_dim);
  }
  in.v = Simulated(p.ValueSpec(), in.v, s.batch, s.kv_heads, s.kv_len, s.head_dim);
  return in;
}

// §4 P quantization of one weight fed to P V (relative to the row's final statistics, so at
// most 1), rounded as the kernels round it: w / scale in float, to the format, times scale.
inline double RoundedWeight(const Precision& p, double w) {
  return p.p == quant::Format::kFp32 ? w : double(quant::RoundToFormat(p.p, float(w), p.PScale()));
}

// The options a reference passes to another once its operands are simulated: Q, K and V as
// they are (P quantization stays: the backward's Delta = dO . o takes the forward's o).
inline AttentionOptions Fp32Operands(AttentionOptions options) {
  const quant::Format p = options.precision.p;
  options.precision = {};
  options.precision.p = p;
  return options;
}

// §4.2 the low-precision backward as the kernels round it: the operands of its products
// (from the simulated inputs), P and dS per block of kBlockQueries x kBlockKeys,
// and dV, dQ and dK of one (batch, head) from them.
struct BackwardProductOperands {
  std::vector<double> q, k, d_o;     // dK = dS^T Q, dQ = dS K, dV = P^T dO
  std::vector<double> dp_d_o, dp_v;  // dP = dO V^T
};
inline BackwardProductOperands RoundedBackwardOperands(const AttentionShape& s,
                                                       const Precision& p,
                                                       const ReferenceInputs& in,
                                                       const std::vector<double>& d_o) {
  const quant::QuantSpec sums = p.BackwardTokenSumSpec(), dp = p.BackwardDpSpec();
  return {Simulated(sums, in.q, s.batch, s.heads, s.q_len, s.head_dim),
          Simulated(sums, in.k, s.batch, s.kv_heads, s.kv_len, s.head_dim),
          Simulated(sums, d_o, s.batch, s.heads, s.q_len, s.head_dim),
          Simulated(dp, d_o, s.batch, s.heads, s.q_len, s.head_dim),
          Simulated(dp, in.v, s.batch, s.kv_heads, s.kv_len, s.head_dim)};
}

// One (batch, head)'s P or dS, [q_len x kv_len], rounded block by block: a scaled format (int8, and
// fp16 here) with ScaleOfMax of the block's float values (int8's amax / FormatMax, fp16's power of
// two; a block without a finite nonzero magnitude, or whose scale underflows, is left as it is),
// bf16 at scale 1.
inline void RoundBackwardBlocks(const Precision& p, std::vector<double>& ds, int64_t q_len,
                            int64_t kv_len) {
  if (p.bwd == quant::Format::kFp32) return;
  const bool scaled = quant::FormatIsScaled(p.bwd) || p.BackwardTokenSumSpec().scale_casts;
  for (int64_t i0 = 0; i0 < q_len; i0 += kBlockQueries) {
    for (int64_t j0 = 0; j0 < kv_len; j0 += kBlockKeys) {
      const int64_t i1 = std::min(q_len, i0 + kBlockQueries);
      const int64_t j1 = std::min(kv_len, j0 + kBlockKeys);
      const auto each = [&](auto&& f) {
        for (int64_t i = i0; i < i1; ++i) {
          for (int64_t j = j0; j < j1; ++j) f(ds[size_t(i * kv_len + j)]);
        }
      };
      float scale = 1.0f;
      if (scaled) {
        float m = 0.0f;
        each([&](double x) { m = std::max(m, std::fabs(float(x))); });
        if (!(m > 0.0f) || !std::isfinite(m)) continue;
        scale = quant::ScaleOfMax(p.bwd, m);
        if (scale == 0.0f) continue;
      }
      each([&](double& x) { x = double(quant::RoundToFormat(p.bwd, float(x), scale)); });
    }
  }
}

// dV_j += P^_ij dO_i, dQ_i += scale dS^_ij k_j, dK_j += scale dS^_ij q_i for one (batch, head),
// P and dS [q_len x kv_len] (zero where a key is not visible), rounded here.
inline void AddBackwardProducts(const AttentionShape& s, const Precision& p, double scale,
                                const BackwardProductOperands& ops, int64_t b, int64_t h,
                                std::vector<double> w, std::vector<double> ds,
                                ReferenceGradients& grads) {
  RoundBackwardBlocks(p, w, s.q_len, s.kv_len);
  RoundBackwardBlocks(p, ds, s.q_len, s.kv_len);
  const int64_t dim = s.head_dim, kv_h = KvHeadOf(s, h);
  for (int64_t i = 0; i < s.q_len; ++i) {
    const size_t row = QRowOffset(s, b, h, i);
    for (int64_t j = 0; j < s.kv_len; ++j) {
      const double w_ij = w[size_t(i * s.kv_len + j)], ds_ij = ds[size_t(i * s.kv_len + j)];
      if (w_ij == 0.0 && ds_ij == 0.0) continue;
      const size_t kv_row = KvRowOffset(s, b, kv_h, j);
      for (int64_t d = 0; d < dim; ++d) {
        grads.dv[kv_row + d] += w_ij * ops.d_o[row + d];
        grads.dq[row + d] += scale * ds_ij * ops.k[kv_row + d];
        grads.dk[kv_row + d] += scale * ds_ij * ops.q[row + d];
      }
    }
  }
}

}  // namespace lpattn::reference_internal

#endif  // LPATTN_KERNELS_REFERENCE_REFERENCE_ROWS_H_
