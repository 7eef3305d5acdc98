// What the attention arms share (internal to harness/model/): the kernels' views of the
// interleaved qkv buffer, and the diagnostics' rows recomputed in double; and the factories of
// the arms, one file per family (softmax_arms.cc, kernel_arms.cc), that MakeArm calls.
#ifndef LPATTN_HARNESS_MODEL_ARMS_H_
#define LPATTN_HARNESS_MODEL_ARMS_H_

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "harness/model/attention_arm.h"
#include "kernels/attention.h"
#include "kernels/kinterval.h"
#include "kernels/threshold.h"
#include "kernels/value_gate.h"

namespace lpattn::harness::arms {

// Q, K and V live interleaved in qkv [B, T, 3C]: for the kernels they are [B, T, H, D] views
// with token stride 3C, so no transposes are needed.
inline Strides QkvStrides(const ArmShape& s) {
  return {int64_t(s.T * 3 * s.C), int64_t(s.head_dim()), int64_t(3 * s.C)};
}
inline Strides OutStrides(const ArmShape& s) {
  return {int64_t(s.T * s.C), int64_t(s.head_dim()), int64_t(s.C)};
}
inline AttentionShape KernelShape(const ArmShape& s) {
  return {int64_t(s.B), int64_t(s.n_head), int64_t(s.n_head), int64_t(s.T), int64_t(s.T),
          int64_t(s.head_dim())};
}

// ---- diagnostics: each arm's weights recomputed in double ----

// Row i (batch b, head h) of scores over its visible keys j <= i: scale * q_i . k_j, from
// [B, T, H, D] views of token stride `stride`, with q and k L2-normalised when `unit`.
inline void RowScores(const ArmShape& s, const float* q, const float* k, size_t stride, size_t b,
               size_t h, size_t i, double scale, bool unit, std::vector<double>& out) {
  const size_t D = s.head_dim();
  auto row = [&](const float* base, size_t t) { return base + (b * s.T + t) * stride + h * D; };
  auto norm = [&](const float* x) {
    double sum = 0.0;
    for (size_t c = 0; c < D; ++c) sum += double(x[c]) * x[c];
    return unit ? std::max(std::sqrt(sum), 1e-12) : 1.0;
  };
  const float* q_i = row(q, i);
  const double q_norm = norm(q_i);
  out.resize(i + 1);
  for (size_t j = 0; j <= i; ++j) {
    const float* k_j = row(k, j);
    double dot = 0.0;
    for (size_t c = 0; c < D; ++c) dot += double(q_i[c]) * k_j[c];
    out[j] = scale * dot / (q_norm * norm(k_j));
  }
}

// Adds one row's dispersion to bucket `bucket` of d: the entropy of its |w| / total shares and
// its largest share.
inline void AddDispersion(HeadDiagnostics& d, size_t bucket, const std::vector<double>& w,
                          double total) {
  if (d.bucket_rows.size() <= bucket) {
    d.bucket_rows.resize(bucket + 1, 0.0);
    d.bucket_entropy.resize(bucket + 1, 0.0);
    d.bucket_max.resize(bucket + 1, 0.0);
  }
  double entropy = 0.0, largest = 0.0;
  for (const double x : w) {
    const double share = std::abs(x) / total;
    if (share > 0.0) entropy -= share * std::log(share);
    largest = std::max(largest, share);
  }
  d.bucket_rows[bucket] += 1.0;
  d.bucket_entropy[bucket] += entropy;
  d.bucket_max[bucket] += largest;
}

// Every causal row of every (batch, head): weigh(b, h, i, scores, weights, abstention) fills
// the row's weights, whose zeros and first-token share are added to per_head[h].
template <class Weigh>
inline void DiagnoseRows(const ArmShape& s, HeadDiagnostics* per_head, const Weigh& weigh) {
  std::vector<double> w;
  for (size_t b = 0; b < s.B; ++b) {
    for (size_t h = 0; h < s.n_head; ++h) {
      HeadDiagnostics& d = per_head[h];
      for (size_t i = 0; i < s.T; ++i) {
        double abstention = 0.0;
        weigh(b, h, i, w, abstention);
        double total = 0.0;
        for (const double x : w) total += std::abs(x);
        d.rows += 1.0;
        d.visible += double(w.size());
        d.zeros += double(std::count(w.begin(), w.end(), 0.0));
        d.first_mass += total > 0.0 ? std::abs(w[0]) / total * (1.0 - abstention) : 0.0;
        d.abstention += abstention;
        if (d.length_bucket > 0 && total > 0.0) AddDispersion(d, i / d.length_bucket, w, total);
        if (s.corrupted != nullptr) {  // every visible key counts, even in an all-zero row
          double on_corrupted = 0.0;
          for (size_t j = 0; j < w.size(); ++j) {
            if (s.corrupted[(b * s.T + j) * s.n_head + h]) {
              on_corrupted += std::abs(w[j]);
              d.corrupted_visible += 1.0;
            }
          }
          if (total > 0.0) d.corrupted_mass += on_corrupted / total * (1.0 - abstention);
        }
      }
    }
  }
}

// The arms, each parsed once into its typed options before it is made (MakeArm).
// The score options of exact attention's arms: docs/math.md §1.3's logit cap (0: none),
// §1.4's bias with the ALiBi paper's slopes, §1.5's sliding window (0: none).
struct ScoreOptions {
  float softcap = 0.0f;
  bool alibi = false;
  int64_t window = 0;
};
std::unique_ptr<AttentionArm> MakeSoftmaxArm(const std::string& name, SinkMode sink,
                                             const ScoreOptions& options = {});
std::unique_ptr<AttentionArm> MakeValueGateArm(const std::string& name, ValueGateKind kind,
                                               SinkMode sink);
// The output gate over `inner` (exact attention for `outgate`, another arm of softmax_arms.cc
// for `outgate+<arm>`).
std::unique_ptr<AttentionArm> MakeOutputGateArm(const std::string& name,
                                                std::unique_ptr<AttentionArm> inner);
std::unique_ptr<AttentionArm> MakeKIntervalArm(const std::string& name,
                                               const KIntervalOptions& options);
std::unique_ptr<AttentionArm> MakeThresholdArm(const std::string& name,
                                               const ThresholdOptions& options);

}  // namespace lpattn::harness::arms

#endif  // LPATTN_HARNESS_MODEL_ARMS_H_
