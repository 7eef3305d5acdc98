// fp64 reference of thresholded (differential) attention (docs/math.md §3): the L2
// normalisation, each row through ThresholdRowForward / ThresholdRowBackward, in double.
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

// §3's backward, with §4.2's rounding (bwd, bwd_dp): per view, P = c a and dS of each (batch,
// head) rounded block by block, and the products' operands (q^, k^, dO; dO and V in dP)
// rounded as the dense transforms round theirs. d beta takes the unrounded dS.
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
  const int64_t dim = shape.head_dim, kv_len = shape.kv_len;
  ReferenceThresholdGradients grads;
  grads.dv.assign(inputs.v.size(), 0.0);
  grads.d_lambda.assign(size_t(shape.heads), 0.0);
  std::vector<double> s, a, g, da, ds_row, w, ds;
  for (int t = 0; t < threshold.views; ++t) {
    const BackwardProductOperands rounded = RoundedBackwardOperands(
        shape, call_options.precision, {ops.q_hat[t], ops.k_hat[t], inputs.v, {}}, d_o);
    // dq^ and dk^ until the L2 backward; dV summed over the views.
    ReferenceGradients view{std::vector<double>(inputs.q[t].size(), 0.0),
                            std::vector<double>(inputs.k[t].size(), 0.0), std::move(grads.dv),
                            {}};
    for (int64_t b = 0; b < shape.batch; ++b) {
      for (int64_t h = 0; h < shape.heads; ++h) {
        const int64_t kv_h = KvHeadOf(shape, h);
        const double c = ViewSign(inputs, t, h);
        w.assign(size_t(shape.q_len * kv_len), 0.0);  // c a and dS, zero past the visible keys
        ds.assign(w.size(), 0.0);
        for (int64_t i = 0; i < shape.q_len; ++i) {
          const int64_t visible = VisibleKeyCount(shape, options, i);
          if (visible == 0) continue;
          const double tau = ThresholdTau(threshold, visible, dim);
          const double* G_i = &rounded.dp_d_o[QRowOffset(shape, b, h, i)];
          g.resize(size_t(visible));
          for (int64_t j = 0; j < visible; ++j) {  // dP_ij = G_i . v_j
            g[size_t(j)] = Dot(G_i, &rounded.dp_v[KvRowOffset(shape, b, kv_h, j)], dim);
          }
          ThresholdRowScores(shape, scale, ops, t, b, h, i, visible, s);
          a.resize(s.size());
          da.resize(s.size());
          ds_row.resize(s.size());
          ThresholdRowForward(threshold, tau, s.data(), s.size(), a.data());
          for (size_t j = 0; j < s.size(); ++j) da[j] = c * g[j];  // dA_t,ij
          const double ds_sum =
              ThresholdRowBackward(threshold, tau, s.data(), s.size(), da.data(), ds_row.data());
          grads.d_beta -= ThresholdTauPerBeta(threshold, visible, dim) * ds_sum;
          if (t == 1) {  // d lambda_param = -sum_j a2_ij (G_i . v_j), inside [0, 1]
            double sum = 0.0;
            for (size_t j = 0; j < s.size(); ++j) sum += a[j] * g[j];
            grads.d_lambda[size_t(h)] -= LambdaSlope(inputs.lambda_param[size_t(h)]) * sum;
          }
          for (int64_t j = 0; j < visible; ++j) {
            w[size_t(i * kv_len + j)] = c * a[size_t(j)];
            ds[size_t(i * kv_len + j)] = ds_row[size_t(j)];
          }
        }
        AddBackwardProducts(shape, call_options.precision, scale, rounded, b, h, w, ds, view);
      }
    }
    grads.dq[t] = std::move(view.dq);
    grads.dk[t] = std::move(view.dk);
    grads.dv = std::move(view.dv);
    NormaliseRowsBackward(ops.q_hat[t], ops.q_norm[t], dim, threshold.l2_normalize, grads.dq[t]);
    NormaliseRowsBackward(ops.k_hat[t], ops.k_norm[t], dim, threshold.l2_normalize, grads.dk[t]);
  }
  return grads;
}

}  // namespace lpattn
