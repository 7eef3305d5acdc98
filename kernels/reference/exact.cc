// fp64 reference of exact attention, docs/math.md §1 and §1.1: one (batch, head, query row)
// at a time, no tiling, no online rescaling. Readable over fast: every test's ground truth.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/reference.h"
#include "kernels/reference/reference_rows.h"

namespace lpattn {
using namespace reference_internal;  // the shared helpers of reference_rows.h

// §1, §1.1, §1.3 and §1.4 forward, per row i (s_ij biased by ALiBi, then capped to
// c tanh(s_ij / c) with a softcap):
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
          scores[j] = Capped(options, scale * Dot(q_i, &inputs.k[KvRowOffset(shape, b, kv_h, j)], dim) +
                                          AlibiBias(shape, options, h, i, j));
          m_i = std::max(m_i, scores[j]);
        }

        double z_i = tau.has_value() ? std::exp(*tau - m_i) : 0.0;
        for (int64_t j = 0; j < shape.kv_len; ++j) {
          if (KeyVisible(shape, options, i, j)) z_i += std::exp(scores[j] - m_i);
        }

        // §4: P rounded against the running max after each block of kBlockKeys keys, then
        // rescaled to the final max m_i, as the online softmax does.
        const bool running = call_options.precision.p != quant::Format::kFp32;
        double m_run = tau.has_value() ? *tau : -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < shape.kv_len; ++j) {
          // The block's max joins the running max at the block's start, visible or not: a
          // sliding window (§1.5) starts most rows inside a block.
          if (running && j % kBlockKeys == 0) {
            for (int64_t t = j; t < std::min(j + kBlockKeys, shape.kv_len); ++t) {
              if (KeyVisible(shape, options, i, t)) m_run = std::max(m_run, scores[t]);
            }
          }
          if (!KeyVisible(shape, options, i, j)) continue;
          const double against = running ? m_run : m_i;
          const double p_ij = RoundedWeight(call_options.precision, std::exp(scores[j] - against)) *
                              std::exp(against - m_i) / z_i;
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
//   dV_j += p_ij dO_i,  dP_ij = dO_i . v_j,  dS_ij = p_ij (dP_ij - Delta_i)
//   (times 1 - (s_ij / c)^2, s_ij capped, with a softcap: §1.3),
//   dQ_i += scale dS_ij k_j,  dK_j += scale dS_ij q_i,
//   (§4.2: the four products on the bwd options' rounded operands, P and dS rounded)
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

  // §4.2: the products' operands, rounded as the bwd options say (the inputs without them).
  const BackwardProductOperands ops =
      RoundedBackwardOperands(shape, call_options.precision, inputs, d_o);
  const size_t entries = size_t(shape.q_len * shape.kv_len);
  std::vector<double> w(entries), ds(entries);
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      const int64_t kv_h = KvHeadOf(shape, h);
      const std::optional<double> tau = SinkLogit(options, inputs, h);
      std::fill(w.begin(), w.end(), 0.0);
      std::fill(ds.begin(), ds.end(), 0.0);
      for (int64_t i = 0; i < shape.q_len; ++i) {
        // §0: a row with no visible key has zero gradients. With a sink its A_i = 1 but
        // o_i = 0, so Delta_i = 0 and it adds nothing to d tau_h either.
        if (VisibleKeyCount(shape, options, i) == 0) continue;

        const size_t row = QRowOffset(shape, b, h, i);
        const double* q_i = &inputs.q[row];
        const double* o_i = &forward.o[row];
        const double lse_i = forward.lse[LseIndex(shape, b, h, i)];
        const double delta_i = Dot(&ops.dp_d_o[row], o_i, dim);  // §4.2: dP's dO

        for (int64_t j = 0; j < shape.kv_len; ++j) {
          if (!KeyVisible(shape, options, i, j)) continue;
          const size_t kv_row = KvRowOffset(shape, b, kv_h, j);
          const double s_ij =
              Capped(options, scale * Dot(q_i, &inputs.k[kv_row], dim) + AlibiBias(shape, options, h, i, j));
          const double p_ij = std::exp(s_ij - lse_i);
          const double dp_ij = Dot(&ops.dp_d_o[row], &ops.dp_v[kv_row], dim);
          // §1.3: d(c tanh(s / c)) / ds = 1 - (s_capped / c)^2.
          const double cap_slope =
              options.softcap == 0.0f ? 1.0 : 1.0 - std::pow(s_ij / options.softcap, 2);
          w[size_t(i * shape.kv_len + j)] = p_ij;
          ds[size_t(i * shape.kv_len + j)] = p_ij * (dp_ij - delta_i) * cap_slope;
        }

        // §1.1: only a learned tau is a parameter; the off-by-one sink is a constant.
        if (options.sink == SinkMode::kLearned) {
          const double abstention_i = std::exp(*tau - lse_i);
          grads.d_sink[static_cast<size_t>(h)] -= abstention_i * delta_i;
        }
      }
      AddBackwardProducts(shape, call_options.precision, scale, ops, b, h, w, ds, grads);
    }
  }
  return grads;
}

}  // namespace lpattn
