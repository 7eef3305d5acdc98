// fp64 scalar references of spec/kernels.md §1 and §1.1: one (batch, head, query row) at a time,
// no tiling, no online rescaling. Readable over fast: every test's ground truth.
#include "kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "quant/quantizer.h"

namespace lpattn {
namespace {

// Offsets into the dense layouts documented in reference.h.
size_t QRowOffset(const AttentionShape& s, int64_t b, int64_t h, int64_t i) {
  return static_cast<size_t>(((b * s.heads + h) * s.q_len + i) * s.head_dim);
}
size_t KvRowOffset(const AttentionShape& s, int64_t b, int64_t kv_h, int64_t j) {
  return static_cast<size_t>(((b * s.kv_heads + kv_h) * s.kv_len + j) * s.head_dim);
}
size_t LseIndex(const AttentionShape& s, int64_t b, int64_t h, int64_t i) {
  return static_cast<size_t>((b * s.heads + h) * s.q_len + i);
}

// §0: grouped-query attention, query head h reads kv head h / (H / Hkv).
int64_t KvHeadOf(const AttentionShape& s, int64_t h) { return h / (s.heads / s.kv_heads); }

// §0: bottom-right aligned causal mask, j in J_i iff j <= i + (Tk - Tq).
bool KeyVisible(const AttentionShape& s, const AttentionOptions& options, int64_t i, int64_t j) {
  return !options.causal || j <= i + (s.kv_len - s.q_len);
}

// §0: N_i = |J_i|.
int64_t VisibleKeyCount(const AttentionShape& s, const AttentionOptions& options, int64_t i) {
  int64_t count = 0;
  for (int64_t j = 0; j < s.kv_len; ++j) count += KeyVisible(s, options, i, j) ? 1 : 0;
  return count;
}

// §1.1: tau_h, fixed at 0 for the off-by-one softmax; no value without a sink.
std::optional<double> SinkLogit(const AttentionOptions& options, const ReferenceInputs& inputs,
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

double Dot(const double* a, const double* b, int64_t n) {
  double sum = 0.0;
  for (int64_t d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

void CheckSize(const std::vector<double>& v, int64_t expected, const char* name) {
  if (static_cast<int64_t>(v.size()) != expected) {
    throw std::invalid_argument(std::string("lpattn reference: ") + name + " has " +
                                std::to_string(v.size()) + " elements, expected " +
                                std::to_string(expected));
  }
}

// The references index dense vectors directly, so a size mismatch is caught here rather than
// read out of bounds.
void CheckReferenceInputs(const AttentionShape& s, const AttentionOptions& options,
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
std::vector<double> Simulated(const quant::QuantSpec& spec, const std::vector<double>& x,
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

ReferenceInputs Simulated(const AttentionShape& s, const Precision& p, ReferenceInputs in) {
  in.q = Simulated(p.QuerySpec(), in.q, s.batch, s.heads, s.q_len, s.head_dim);
  in.k = Simulated(p.KeySpec(), in.k, s.batch, s.kv_heads, s.kv_len, s.head_dim);
  in.v = Simulated(p.ValueSpec(), in.v, s.batch, s.kv_heads, s.kv_len, s.head_dim);
  return in;
}

ReferenceThresholdInputs Simulated(const AttentionShape& s, const Precision& p,
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
double RoundedWeight(const Precision& p, double w) {
  return p.p == quant::Format::kFp32 ? w : double(quant::RoundToFormat(p.p, float(w), p.PScale()));
}

// The options a reference passes to another once its operands are simulated: Q, K and V as
// they are (P quantization stays: the backward's Delta = dO . o takes the forward's o).
AttentionOptions Fp32Operands(AttentionOptions options) {
  const quant::Format p = options.precision.p;
  options.precision = {};
  options.precision.p = p;
  return options;
}

}  // namespace

// §1 and §1.1 forward, per row i:
//   m_i = max(tau_h, max_{j in J_i} s_ij)       (tau term only with a sink)
//   Z_i = sum_{j in J_i} exp(s_ij - m_i) + exp(tau_h - m_i)
//   p_ij = exp(s_ij - m_i) / Z_i,  o_i = sum_j p_ij v_j,  lse_i = m_i + log Z_i.
ReferenceForwardResult ReferenceExactForward(const AttentionShape& shape,
                                             const AttentionOptions& call_options,
                                             const ReferenceInputs& given) {
  const ReferenceInputs inputs = Simulated(shape, call_options.precision, given);
  const AttentionOptions options = Fp32Operands(call_options);
  CheckReferenceInputs(shape, options, inputs);
  const double scale = static_cast<double>(ResolvedScale(shape, options));
  const int64_t dim = shape.head_dim;

  ReferenceForwardResult result;
  result.o.assign(inputs.q.size(), 0.0);
  result.lse.assign(static_cast<size_t>(shape.batch * shape.heads * shape.q_len), 0.0);
  std::vector<double> scores(static_cast<size_t>(shape.kv_len));

  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      const int64_t kv_h = KvHeadOf(shape, h);
      const std::optional<double> tau = SinkLogit(options, inputs, h);
      for (int64_t i = 0; i < shape.q_len; ++i) {
        double* o_i = &result.o[QRowOffset(shape, b, h, i)];
        double& lse_i = result.lse[LseIndex(shape, b, h, i)];

        // §0: a row with no visible key outputs zeros; without a sink its lse is log 0.
        if (VisibleKeyCount(shape, options, i) == 0 && !tau.has_value()) {
          lse_i = -std::numeric_limits<double>::infinity();
          continue;
        }

        const double* q_i = &inputs.q[QRowOffset(shape, b, h, i)];
        // §1.1: the sink starts the row state at m = tau_h.
        double m_i = tau.has_value() ? *tau : -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < shape.kv_len; ++j) {
          if (!KeyVisible(shape, options, i, j)) continue;
          scores[j] = scale * Dot(q_i, &inputs.k[KvRowOffset(shape, b, kv_h, j)], dim);
          m_i = std::max(m_i, scores[j]);
        }

        double z_i = tau.has_value() ? std::exp(*tau - m_i) : 0.0;
        for (int64_t j = 0; j < shape.kv_len; ++j) {
          if (KeyVisible(shape, options, i, j)) z_i += std::exp(scores[j] - m_i);
        }

        for (int64_t j = 0; j < shape.kv_len; ++j) {
          if (!KeyVisible(shape, options, i, j)) continue;
          const double p_ij = RoundedWeight(call_options.precision, std::exp(scores[j] - m_i)) / z_i;
          const double* v_j = &inputs.v[KvRowOffset(shape, b, kv_h, j)];
          for (int64_t d = 0; d < dim; ++d) o_i[d] += p_ij * v_j[d];
        }
        lse_i = m_i + std::log(z_i);
      }
    }
  }
  return result;
}

// §1 and §1.1 backward, per row i with P recomputed from the forward's lse:
//   p_ij = exp(s_ij - lse_i),  Delta_i = dO_i . o_i,
//   dV_j += p_ij dO_i,  dP_ij = dO_i . v_j,  dS_ij = p_ij (dP_ij - Delta_i),
//   dQ_i += scale dS_ij k_j,  dK_j += scale dS_ij q_i,
//   d tau_h -= A_i Delta_i with A_i = exp(tau_h - lse_i)  (learned sink only).
ReferenceGradients ReferenceExactBackward(const AttentionShape& shape,
                                          const AttentionOptions& call_options,
                                          const ReferenceInputs& given,
                                          const std::vector<double>& d_o) {
  const ReferenceInputs inputs = Simulated(shape, call_options.precision, given);
  const AttentionOptions options = Fp32Operands(call_options);
  CheckReferenceInputs(shape, options, inputs);
  CheckSize(d_o, shape.batch * shape.heads * shape.q_len * shape.head_dim, "d_o");
  const double scale = static_cast<double>(ResolvedScale(shape, options));
  const int64_t dim = shape.head_dim;
  const ReferenceForwardResult forward = ReferenceExactForward(shape, options, inputs);

  ReferenceGradients grads;
  grads.dq.assign(inputs.q.size(), 0.0);
  grads.dk.assign(inputs.k.size(), 0.0);
  grads.dv.assign(inputs.v.size(), 0.0);
  grads.d_sink.assign(static_cast<size_t>(shape.heads), 0.0);

  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      const int64_t kv_h = KvHeadOf(shape, h);
      const std::optional<double> tau = SinkLogit(options, inputs, h);
      for (int64_t i = 0; i < shape.q_len; ++i) {
        // §0: a row with no visible key has zero gradients. With a sink its A_i = 1 but
        // o_i = 0, so Delta_i = 0 and it adds nothing to d tau_h either.
        if (VisibleKeyCount(shape, options, i) == 0) continue;

        const size_t row = QRowOffset(shape, b, h, i);
        const double* q_i = &inputs.q[row];
        const double* o_i = &forward.o[row];
        const double* d_o_i = &d_o[row];
        double* dq_i = &grads.dq[row];
        const double lse_i = forward.lse[LseIndex(shape, b, h, i)];
        const double delta_i = Dot(d_o_i, o_i, dim);

        for (int64_t j = 0; j < shape.kv_len; ++j) {
          if (!KeyVisible(shape, options, i, j)) continue;
          const size_t kv_row = KvRowOffset(shape, b, kv_h, j);
          const double* k_j = &inputs.k[kv_row];
          const double* v_j = &inputs.v[kv_row];
          const double s_ij = scale * Dot(q_i, k_j, dim);
          const double p_ij = std::exp(s_ij - lse_i);
          const double dp_ij = Dot(d_o_i, v_j, dim);
          const double ds_ij = p_ij * (dp_ij - delta_i);
          for (int64_t d = 0; d < dim; ++d) {
            grads.dv[kv_row + d] += p_ij * d_o_i[d];
            dq_i[d] += scale * ds_ij * k_j[d];
            grads.dk[kv_row + d] += scale * ds_ij * q_i[d];
          }
        }

        // §1.1: only a learned tau is a parameter; the off-by-one sink is a constant.
        if (options.sink == SinkMode::kLearned) {
          const double abstention_i = std::exp(*tau - lse_i);
          grads.d_sink[static_cast<size_t>(h)] -= abstention_i * delta_i;
        }
      }
    }
  }
  return grads;
}

namespace {

void CheckKIntervalInputs(const AttentionShape& shape, const AttentionOptions& options,
                          const KIntervalOptions& kint, const ReferenceInputs& inputs) {
  CheckReferenceInputs(shape, options, inputs);
  ValidateKInterval(kint);
  if (options.sink != SinkMode::kNone) {
    throw std::invalid_argument("lpattn reference: K-interval attention takes no sink");
  }
}

// Row i's visible scores (keys [0, N_i): both masks leave a prefix visible).
void RowScores(const AttentionShape& shape, double scale, const ReferenceInputs& inputs,
               int64_t b, int64_t h, int64_t i, int64_t visible, std::vector<double>& s) {
  const double* q_i = &inputs.q[QRowOffset(shape, b, h, i)];
  s.resize(size_t(visible));
  for (int64_t j = 0; j < visible; ++j) {
    s[size_t(j)] =
        scale * Dot(q_i, &inputs.k[KvRowOffset(shape, b, KvHeadOf(shape, h), j)], shape.head_dim);
  }
}

}  // namespace

ReferenceKIntervalForwardResult ReferenceKIntervalForward(const AttentionShape& shape,
                                                          const AttentionOptions& call_options,
                                                          const KIntervalOptions& kint,
                                                          const ReferenceInputs& given) {
  const ReferenceInputs inputs = Simulated(shape, call_options.precision, given);
  const AttentionOptions options = Fp32Operands(call_options);
  CheckKIntervalInputs(shape, options, kint, inputs);
  const double scale = static_cast<double>(ResolvedScale(shape, options));
  ReferenceKIntervalForwardResult result;
  result.o.assign(inputs.q.size(), 0.0);
  result.stats.assign(static_cast<size_t>(shape.batch * shape.heads * shape.q_len), {});
  std::vector<double> s, p;
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      for (int64_t i = 0; i < shape.q_len; ++i) {
        const int64_t visible = VisibleKeyCount(shape, options, i);
        if (visible == 0) continue;  // §0: zeros
        RowScores(shape, scale, inputs, b, h, i, visible, s);
        p.resize(s.size());
        const KIntervalRowStats stats = KIntervalRowForward(kint, s.data(), s.size(), p.data());
        result.stats[LseIndex(shape, b, h, i)] = stats;
        double* o_i = &result.o[QRowOffset(shape, b, h, i)];
        for (int64_t j = 0; j < visible; ++j) {
          // §4: P quantization rounds the weight before normalisation, w^ = p Z (<= 1).
          const double w = RoundedWeight(call_options.precision, p[size_t(j)] * stats.Z) / stats.Z;
          const double* v_j = &inputs.v[KvRowOffset(shape, b, KvHeadOf(shape, h), j)];
          for (int64_t d = 0; d < shape.head_dim; ++d) o_i[d] += w * v_j[d];
        }
      }
    }
  }
  return result;
}

ReferenceGradients ReferenceKIntervalBackward(const AttentionShape& shape,
                                              const AttentionOptions& call_options,
                                              const KIntervalOptions& kint,
                                              const ReferenceInputs& given,
                                              const std::vector<double>& d_o) {
  const ReferenceInputs inputs = Simulated(shape, call_options.precision, given);
  const AttentionOptions options = Fp32Operands(call_options);
  // With P rounded (§4) the backward's g_bar is dO_i . o_i of the rounded forward, as in the
  // kernels (it equals sum_j p_j g_j otherwise).
  const bool rounded_p = options.precision.p != quant::Format::kFp32;
  const std::vector<double> o =
      rounded_p ? ReferenceKIntervalForward(shape, options, kint, inputs).o : std::vector<double>();
  CheckKIntervalInputs(shape, options, kint, inputs);
  CheckSize(d_o, shape.batch * shape.heads * shape.q_len * shape.head_dim, "d_o");
  const double scale = static_cast<double>(ResolvedScale(shape, options));
  const int64_t dim = shape.head_dim;
  ReferenceGradients grads;
  grads.dq.assign(inputs.q.size(), 0.0);
  grads.dk.assign(inputs.k.size(), 0.0);
  grads.dv.assign(inputs.v.size(), 0.0);
  grads.d_sink.assign(static_cast<size_t>(shape.heads), 0.0);
  std::vector<double> s, p, g, ds;
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      const int64_t kv_h = KvHeadOf(shape, h);
      for (int64_t i = 0; i < shape.q_len; ++i) {
        const int64_t visible = VisibleKeyCount(shape, options, i);
        if (visible == 0) continue;  // §0: zero gradients
        RowScores(shape, scale, inputs, b, h, i, visible, s);
        p.resize(s.size());
        g.resize(s.size());
        ds.resize(s.size());
        const KIntervalRowStats stats = KIntervalRowForward(kint, s.data(), s.size(), p.data());
        const size_t row = QRowOffset(shape, b, h, i);
        const double* d_o_i = &d_o[row];
        for (int64_t j = 0; j < visible; ++j) {
          g[size_t(j)] = Dot(d_o_i, &inputs.v[KvRowOffset(shape, b, kv_h, j)], dim);
        }
        const double g_bar = rounded_p ? Dot(d_o_i, &o[row], dim) : 0.0;
        KIntervalRowBackward(kint, s.data(), s.size(), stats, g.data(), ds.data(),
                             rounded_p ? &g_bar : nullptr);
        const double* q_i = &inputs.q[row];
        for (int64_t j = 0; j < visible; ++j) {
          const size_t kv_row = KvRowOffset(shape, b, kv_h, j);
          for (int64_t d = 0; d < dim; ++d) {
            grads.dv[kv_row + d] += p[size_t(j)] * d_o_i[d];
            grads.dq[row + d] += scale * ds[size_t(j)] * inputs.k[kv_row + d];
            grads.dk[kv_row + d] += scale * ds[size_t(j)] * q_i[d];
          }
        }
      }
    }
  }
  return grads;
}

namespace {

// §3's inputs after the L2 normalisation (option): q^ and k^ of each view, and the norms the
// backward divides by.
struct ThresholdOperands {
  std::vector<double> q_hat[2], k_hat[2];
  std::vector<double> q_norm[2], k_norm[2];  // max(||x||, 1e-12) per row (1 without l2)
};

void NormaliseRows(const std::vector<double>& x, int64_t dim, bool l2, std::vector<double>& hat,
                   std::vector<double>& norm) {
  hat = x;
  norm.assign(x.size() / size_t(dim), 1.0);
  if (!l2) return;
  for (size_t r = 0; r < norm.size(); ++r) {
    const double* row = &x[r * size_t(dim)];
    norm[r] = std::max(std::sqrt(Dot(row, row, dim)), 1e-12);
    for (int64_t d = 0; d < dim; ++d) hat[r * size_t(dim) + size_t(d)] = row[d] / norm[r];
  }
}

// dx = (dx^ - x^ (x^ . dx^)) / max(||x||, 1e-12), in place over dense rows.
void NormaliseRowsBackward(const std::vector<double>& hat, const std::vector<double>& norm,
                           int64_t dim, bool l2, std::vector<double>& grad) {
  if (!l2) return;
  for (size_t r = 0; r < norm.size(); ++r) {
    const double* h = &hat[r * size_t(dim)];
    double* g = &grad[r * size_t(dim)];
    const double along = Dot(h, g, dim);
    for (int64_t d = 0; d < dim; ++d) g[d] = (g[d] - h[d] * along) / norm[r];
  }
}

ThresholdOperands PrepareThreshold(const AttentionShape& shape, const AttentionOptions& options,
                                   const ThresholdOptions& threshold,
                                   const ReferenceThresholdInputs& inputs) {
  ValidateThreshold(threshold);
  for (int t = 0; t < threshold.views; ++t) {
    CheckReferenceInputs(shape, options, {inputs.q[t], inputs.k[t], inputs.v, {}});
  }
  if (options.sink != SinkMode::kNone) {
    throw std::invalid_argument("lpattn reference: thresholded attention takes no sink");
  }
  if (threshold.views == 2) CheckSize(inputs.lambda_param, shape.heads, "lambda_param");
  ThresholdOperands ops;
  for (int t = 0; t < threshold.views; ++t) {
    NormaliseRows(inputs.q[t], shape.head_dim, threshold.l2_normalize, ops.q_hat[t], ops.q_norm[t]);
    NormaliseRows(inputs.k[t], shape.head_dim, threshold.l2_normalize, ops.k_hat[t], ops.k_norm[t]);
  }
  return ops;
}

// One row of view t: scale * q^_i . k^_j over the visible keys [0, visible).
void ThresholdRowScores(const AttentionShape& shape, double scale, const ThresholdOperands& ops,
                        int t, int64_t b, int64_t h, int64_t i, int64_t visible,
                        std::vector<double>& s) {
  const double* q_i = &ops.q_hat[t][QRowOffset(shape, b, h, i)];
  s.resize(size_t(visible));
  for (int64_t j = 0; j < visible; ++j) {
    s[size_t(j)] = scale * Dot(q_i, &ops.k_hat[t][KvRowOffset(shape, b, KvHeadOf(shape, h), j)],
                               shape.head_dim);
  }
}

// c_1 = 1, c_2 = -lambda (§3).
double ViewSign(const ReferenceThresholdInputs& inputs, int t, int64_t h) {
  return t == 0 ? 1.0 : -ClampLambda(inputs.lambda_param[size_t(h)]);
}

}  // namespace

ReferenceThresholdForwardResult ReferenceThresholdForward(const AttentionShape& shape,
                                                          const AttentionOptions& call_options,
                                                          const ThresholdOptions& threshold,
                                                          const ReferenceThresholdInputs& given) {
  const ReferenceThresholdInputs inputs = Simulated(shape, call_options.precision, given);
  const AttentionOptions options = Fp32Operands(call_options);
  const ThresholdOperands ops = PrepareThreshold(shape, options, threshold, inputs);
  const double scale = ThresholdScale(options);
  const int64_t rows = shape.batch * shape.heads * shape.q_len;
  ReferenceThresholdForwardResult result;
  result.o.assign(inputs.q[0].size(), 0.0);
  result.survivors.assign(size_t(threshold.views * rows), 0);
  std::vector<double> s, a, w;
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      for (int64_t i = 0; i < shape.q_len; ++i) {
        const int64_t visible = VisibleKeyCount(shape, options, i);
        if (visible == 0) continue;  // §0: zeros
        const double tau = ThresholdTau(threshold, visible, shape.head_dim);
        double* o_i = &result.o[QRowOffset(shape, b, h, i)];
        w.assign(size_t(visible), 0.0);  // the row's weights, sum over views of c_t a_t
        for (int t = 0; t < threshold.views; ++t) {
          ThresholdRowScores(shape, scale, ops, t, b, h, i, visible, s);
          a.resize(s.size());
          const size_t kept = ThresholdRowForward(threshold, tau, s.data(), s.size(), a.data());
          result.survivors[size_t(t * rows) + LseIndex(shape, b, h, i)] = int64_t(kept);
          result.visible_entries += visible;
          result.zero_entries += int64_t(std::count(a.begin(), a.end(), 0.0));
          const double c = ViewSign(inputs, t, h);
          for (int64_t j = 0; j < visible; ++j) w[size_t(j)] += c * a[size_t(j)];
        }
        for (int64_t j = 0; j < visible; ++j) {
          const double w_j = RoundedWeight(call_options.precision, w[size_t(j)]);  // §4
          const double* v_j = &inputs.v[KvRowOffset(shape, b, KvHeadOf(shape, h), j)];
          for (int64_t d = 0; d < shape.head_dim; ++d) o_i[d] += w_j * v_j[d];
        }
      }
    }
  }
  return result;
}

ReferenceThresholdGradients ReferenceThresholdBackward(const AttentionShape& shape,
                                                       const AttentionOptions& call_options,
                                                       const ThresholdOptions& threshold,
                                                       const ReferenceThresholdInputs& given,
                                                       const std::vector<double>& d_o) {
  const ReferenceThresholdInputs inputs = Simulated(shape, call_options.precision, given);
  const AttentionOptions options = Fp32Operands(call_options);
  const ThresholdOperands ops = PrepareThreshold(shape, options, threshold, inputs);
  CheckSize(d_o, shape.batch * shape.heads * shape.q_len * shape.head_dim, "d_o");
  const double scale = ThresholdScale(options);
  const int64_t dim = shape.head_dim;
  ReferenceThresholdGradients grads;
  for (int t = 0; t < threshold.views; ++t) {
    grads.dq[t].assign(inputs.q[t].size(), 0.0);  // dq^ and dk^ until the L2 backward
    grads.dk[t].assign(inputs.k[t].size(), 0.0);
  }
  grads.dv.assign(inputs.v.size(), 0.0);
  grads.d_lambda.assign(size_t(shape.heads), 0.0);
  std::vector<double> s, a, g, da, ds;
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      const int64_t kv_h = KvHeadOf(shape, h);
      for (int64_t i = 0; i < shape.q_len; ++i) {
        const int64_t visible = VisibleKeyCount(shape, options, i);
        if (visible == 0) continue;
        const double tau = ThresholdTau(threshold, visible, dim);
        const size_t row = QRowOffset(shape, b, h, i);
        const double* G_i = &d_o[row];
        g.resize(size_t(visible));
        for (int64_t j = 0; j < visible; ++j) {
          g[size_t(j)] = Dot(G_i, &inputs.v[KvRowOffset(shape, b, kv_h, j)], dim);  // G_i . v_j
        }
        for (int t = 0; t < threshold.views; ++t) {
          ThresholdRowScores(shape, scale, ops, t, b, h, i, visible, s);
          a.resize(s.size());
          da.resize(s.size());
          ds.resize(s.size());
          ThresholdRowForward(threshold, tau, s.data(), s.size(), a.data());
          const double c = ViewSign(inputs, t, h);
          for (size_t j = 0; j < s.size(); ++j) da[j] = c * g[j];  // dA_t,ij
          const double ds_sum =
              ThresholdRowBackward(threshold, tau, s.data(), s.size(), da.data(), ds.data());
          grads.d_beta -= ThresholdTauPerBeta(threshold, visible, dim) * ds_sum;
          if (t == 1) {  // d lambda_param = -sum_j a2_ij (G_i . v_j), inside [0, 1]
            double sum = 0.0;
            for (size_t j = 0; j < s.size(); ++j) sum += a[j] * g[j];
            grads.d_lambda[size_t(h)] -= LambdaSlope(inputs.lambda_param[size_t(h)]) * sum;
          }
          const double* q_i = &ops.q_hat[t][row];
          for (int64_t j = 0; j < visible; ++j) {
            const size_t kv_row = KvRowOffset(shape, b, kv_h, j);
            const double* k_j = &ops.k_hat[t][kv_row];
            for (int64_t d = 0; d < dim; ++d) {
              grads.dv[kv_row + size_t(d)] += c * a[size_t(j)] * G_i[d];
              grads.dq[t][row + size_t(d)] += scale * ds[size_t(j)] * k_j[d];
              grads.dk[t][kv_row + size_t(d)] += scale * ds[size_t(j)] * q_i[d];
            }
          }
        }
      }
    }
  }
  for (int t = 0; t < threshold.views; ++t) {
    NormaliseRowsBackward(ops.q_hat[t], ops.q_norm[t], dim, threshold.l2_normalize, grads.dq[t]);
    NormaliseRowsBackward(ops.k_hat[t], ops.k_norm[t], dim, threshold.l2_normalize, grads.dk[t]);
  }
  return grads;
}

namespace {

// One value's gate input z and its norm, §1.2.
double GateInput(const ReferenceValueGateParams& params, int64_t h, const double* v, int64_t dim,
                 double* norm) {
  *norm = std::sqrt(Dot(v, v, dim));
  if (params.kind == ValueGateKind::kNorm) {
    return params.alpha[size_t(h)] * *norm + params.beta[size_t(h)];
  }
  return Dot(&params.w[size_t(h * dim)], v, dim) + params.b[size_t(h)];
}

double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

void CheckValueGate(const AttentionShape& shape, const ReferenceValueGateParams& params,
                    const std::vector<double>& v) {
  CheckSize(v, shape.batch * shape.kv_heads * shape.kv_len * shape.head_dim, "v");
  if (params.kind == ValueGateKind::kNorm) {
    CheckSize(params.alpha, shape.kv_heads, "alpha");
    CheckSize(params.beta, shape.kv_heads, "beta");
  } else {
    CheckSize(params.w, shape.kv_heads * shape.head_dim, "w");
    CheckSize(params.b, shape.kv_heads, "b");
  }
}

}  // namespace

std::vector<double> ReferenceValueGateForward(const AttentionShape& shape,
                                              const ReferenceValueGateParams& params,
                                              const std::vector<double>& v,
                                              std::vector<double>* gates) {
  CheckValueGate(shape, params, v);
  const int64_t dim = shape.head_dim;
  std::vector<double> out(v.size());
  if (gates != nullptr) gates->assign(v.size() / size_t(dim), 0.0);
  for (size_t r = 0; r < v.size() / size_t(dim); ++r) {
    const int64_t h = int64_t(r) / shape.kv_len % shape.kv_heads;
    double norm = 0.0;
    const double g = Sigmoid(GateInput(params, h, &v[r * size_t(dim)], dim, &norm));
    if (gates != nullptr) (*gates)[r] = g;
    for (int64_t c = 0; c < dim; ++c) out[r * size_t(dim) + size_t(c)] = g * v[r * size_t(dim) + size_t(c)];
  }
  return out;
}

ReferenceValueGateGrads ReferenceValueGateBackward(const AttentionShape& shape,
                                                   const ReferenceValueGateParams& params,
                                                   const std::vector<double>& v,
                                                   const std::vector<double>& d_v_gated) {
  CheckValueGate(shape, params, v);
  CheckSize(d_v_gated, int64_t(v.size()), "d_v_gated");
  const int64_t dim = shape.head_dim;
  const bool norm_gate = params.kind == ValueGateKind::kNorm;
  ReferenceValueGateGrads grads;
  grads.dv.assign(v.size(), 0.0);
  if (norm_gate) {
    grads.alpha.assign(size_t(shape.kv_heads), 0.0);
    grads.beta.assign(size_t(shape.kv_heads), 0.0);
  } else {
    grads.w.assign(size_t(shape.kv_heads * dim), 0.0);
    grads.b.assign(size_t(shape.kv_heads), 0.0);
  }
  for (size_t r = 0; r < v.size() / size_t(dim); ++r) {
    const int64_t h = int64_t(r) / shape.kv_len % shape.kv_heads;
    const double* v_r = &v[r * size_t(dim)];
    const double* dg_r = &d_v_gated[r * size_t(dim)];
    double norm = 0.0;
    const double g = Sigmoid(GateInput(params, h, v_r, dim, &norm));
    const double dz = Dot(dg_r, v_r, dim) * g * (1.0 - g);  // dL/dz through v~ = g v
    for (int64_t c = 0; c < dim; ++c) {
      const double dz_dv = norm_gate ? (norm > 0.0 ? params.alpha[size_t(h)] * v_r[c] / norm : 0.0)
                                     : params.w[size_t(h * dim + c)];
      grads.dv[r * size_t(dim) + size_t(c)] = g * dg_r[c] + dz * dz_dv;
      if (!norm_gate) grads.w[size_t(h * dim + c)] += dz * v_r[c];
    }
    if (norm_gate) {
      grads.alpha[size_t(h)] += dz * norm;
      grads.beta[size_t(h)] += dz;
    } else {
      grads.b[size_t(h)] += dz;
    }
  }
  return grads;
}

std::vector<double> DenseFromView(ConstTensor t, int64_t batch, int64_t heads, int64_t tokens,
                                  int64_t dim) {
  std::vector<double> dense;
  dense.reserve(static_cast<size_t>(batch * heads * tokens * dim));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t_idx = 0; t_idx < tokens; ++t_idx) {
        const float* row =
            t.data + b * t.strides.batch + h * t.strides.head + t_idx * t.strides.token;
        for (int64_t d = 0; d < dim; ++d) dense.push_back(static_cast<double>(row[d]));
      }
    }
  }
  return dense;
}

}  // namespace lpattn
