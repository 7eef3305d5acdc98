// fp64 reference of K-interval attention (docs/math.md §2): each row's visible scores through
// the row-level transform KIntervalRowForward / KIntervalRowBackward, in double.
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
  // kernels (it equals sum_j p_j g_j otherwise); likewise with a rounded dP (§4.2), whose
  // rounded V leaves o out of sum_j p_j g_j.
  const bool given_g_bar =
      options.precision.p != quant::Format::kFp32 || !call_options.precision.BackwardIsFp32();
  const std::vector<double> o = given_g_bar
                                    ? ReferenceKIntervalForward(shape, options, kint, inputs).o
                                    : std::vector<double>();
  CheckKIntervalInputs(shape, options, kint, inputs);
  CheckSize(d_o, shape.batch * shape.heads * shape.q_len * shape.head_dim, "d_o");
  const double scale = static_cast<double>(ResolvedScale(shape, options));
  const int64_t dim = shape.head_dim;
  ReferenceGradients grads;
  grads.dq.assign(inputs.q.size(), 0.0);
  grads.dk.assign(inputs.k.size(), 0.0);
  grads.dv.assign(inputs.v.size(), 0.0);
  grads.d_sink.assign(static_cast<size_t>(shape.heads), 0.0);
  // §4.2: the products' operands, rounded as the bwd options say (the inputs without them).
  const BackwardProductOperands ops =
      RoundedBackwardOperands(shape, call_options.precision, inputs, d_o);
  const size_t entries = size_t(shape.q_len * shape.kv_len);
  std::vector<double> w(entries), ds_all(entries);
  const bool rounded_bwd = call_options.precision.bwd != quant::Format::kFp32;
  std::vector<double> corrections(size_t(2 * shape.q_len), 0.0);
  std::vector<int64_t> argmax(size_t(shape.q_len)), argmin(size_t(shape.q_len));
  std::vector<double> s, p, g, ds;
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      const int64_t kv_h = KvHeadOf(shape, h);
      std::fill(w.begin(), w.end(), 0.0);
      std::fill(ds_all.begin(), ds_all.end(), 0.0);
      std::fill(corrections.begin(), corrections.end(), 0.0);
      for (int64_t i = 0; i < shape.q_len; ++i) {
        const int64_t visible = VisibleKeyCount(shape, options, i);
        if (visible == 0) continue;  // §0: zero gradients
        RowScores(shape, scale, inputs, b, h, i, visible, s);
        p.resize(s.size());
        g.resize(s.size());
        ds.resize(s.size());
        const KIntervalRowStats stats = KIntervalRowForward(kint, s.data(), s.size(), p.data());
        const size_t row = QRowOffset(shape, b, h, i);
        for (int64_t j = 0; j < visible; ++j) {
          g[size_t(j)] = Dot(&ops.dp_d_o[row], &ops.dp_v[KvRowOffset(shape, b, kv_h, j)], dim);
        }
        const double g_bar = given_g_bar ? Dot(&ops.dp_d_o[row], &o[row], dim) : 0.0;
        // §4.2: a rounded backward adds the extrema terms after rounding dS, as the kernels do.
        double* extrema = rounded_bwd ? &corrections[size_t(2 * i)] : nullptr;
        KIntervalRowBackward(kint, s.data(), s.size(), stats, g.data(), ds.data(),
                             given_g_bar ? &g_bar : nullptr, extrema);
        argmax[size_t(i)] = stats.argmax;
        argmin[size_t(i)] = stats.argmin;
        std::copy(p.begin(), p.end(), w.begin() + i * shape.kv_len);
        std::copy(ds.begin(), ds.end(), ds_all.begin() + i * shape.kv_len);
      }
      AddBackwardProducts(shape, call_options.precision, scale, ops, b, h, w, ds_all, grads);
      if (!rounded_bwd) continue;
      for (int64_t i = 0; i < shape.q_len; ++i) {
        const size_t row = QRowOffset(shape, b, h, i);
        const int64_t keys[2] = {argmax[size_t(i)], argmin[size_t(i)]};
        for (int e = 0; e < 2; ++e) {
          const double term = scale * corrections[size_t(2 * i + e)];
          if (term == 0.0) continue;
          const size_t kv_row = KvRowOffset(shape, b, kv_h, keys[e]);
          for (int64_t d = 0; d < dim; ++d) {
            grads.dq[row + d] += term * ops.k[kv_row + d];
            grads.dk[kv_row + d] += term * ops.q[row + d];
          }
        }
      }
    }
  }
  return grads;
}

}  // namespace lpattn
