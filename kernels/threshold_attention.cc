// Thresholded (differential) attention (spec §3): per-target instantiations of the tiled
// skeleton with the thresholded row transform, and the public entry points that validate,
// normalise Q and K, and dispatch once.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/attention_problem.h"
#include "kernels/threshold.h"
#include "kernels/validate.h"
#include "tbb/blocked_range.h"
#include "tbb/parallel_for.h"

#ifndef LPATTN_KERNELS_THRESHOLD_ATTENTION_ONCE_
#define LPATTN_KERNELS_THRESHOLD_ATTENTION_ONCE_
namespace lpattn {
// What every target's forward needs besides the tensors: the options, each query row's tau,
// each head's clamped lambda (two views), and where survivors go.
struct ThresholdCall {
  ThresholdOptions options;
  std::vector<float> tau;     // [q_len]
  std::vector<float> lambda;  // [heads]; empty with one view
};
}  // namespace lpattn
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/threshold_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/threshold_transform-inl.h"
#include "kernels/tiled_attention-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {

void ThresholdForwardTiled(const AttentionProblem& problem, const ThresholdCall& call,
                           const ThresholdForwardArgs& args) {
  ThresholdTransform transform;
  transform.power = call.options.power;
  transform.tau = call.tau.data();
  transform.lambda = call.lambda.empty() ? nullptr : call.lambda.data();
  transform.q_len = problem.q_len;
  transform.heads = problem.heads;
  transform.survivors = args.survivors;
  transform.rows = problem.batch * problem.heads * problem.q_len;
  const SecondView second =
      call.options.views == 2 ? SecondView{args.q[1], args.k[1]} : SecondView{};
  TiledForward(problem, ForwardArgs{args.q[0], args.k[0], args.v, args.o, nullptr}, transform,
               second);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn {

HWY_EXPORT(ThresholdForwardTiled);

namespace {

[[noreturn]] void Fail(const std::string& what) {
  throw std::invalid_argument("lpattn thresholded attention: " + what);
}

void CheckThresholdCall(const AttentionShape& shape, const AttentionOptions& options,
                        const ThresholdOptions& threshold, const float* lambda_param) {
  ValidateThreshold(threshold);
  ValidateShapeAndOptions(shape, options);
  if (options.sink != SinkMode::kNone) Fail("sinks are not defined for it (§3)");
  if (shape.kv_len >= (int64_t(1) << 24)) {
    Fail("kv_len must be below 2^24, got " + std::to_string(shape.kv_len));
  }
  if (threshold.views == 2) {
    if (lambda_param == nullptr) Fail("lambda_param is null (required with views = 2)");
    for (int64_t h = 0; h < shape.heads; ++h) {
      if (!std::isfinite(lambda_param[h])) {
        Fail("lambda_param[" + std::to_string(h) + "] is not finite");
      }
    }
  }
}

// Dense [batch, heads, tokens, head_dim] rows x / max(||x||, 1e-12) of a strided view (§3).
struct NormalisedRows {
  std::vector<float> data;
  ConstTensor view;
};
NormalisedRows Normalise(const ConstTensor& x, int64_t batch, int64_t heads, int64_t tokens,
                         int64_t dim) {
  NormalisedRows out;
  out.data.resize(size_t(batch * heads * tokens * dim));
  out.view = {out.data.data(), ContiguousBHTD(heads, tokens, dim)};
  const size_t rows = size_t(batch * heads * tokens);
  tbb::parallel_for(tbb::blocked_range<size_t>(0, rows, 256), [&](const auto& range) {
    for (size_t r = range.begin(); r != range.end(); ++r) {
      const int64_t b = int64_t(r) / (heads * tokens), h = int64_t(r) / tokens % heads,
                    t = int64_t(r) % tokens;
      const float* row = x.data + b * x.strides.batch + h * x.strides.head + t * x.strides.token;
      double sum = 0.0;
      for (int64_t c = 0; c < dim; ++c) sum += double(row[c]) * row[c];
      const double inverse = 1.0 / std::max(std::sqrt(sum), 1e-12);
      float* dst = out.data.data() + r * size_t(dim);
      for (int64_t c = 0; c < dim; ++c) dst[c] = float(row[c] * inverse);
    }
  });
  return out;
}

ThresholdCall MakeCall(const AttentionShape& shape, const AttentionProblem& problem,
                       const ThresholdOptions& threshold, const float* lambda_param) {
  ThresholdCall call;
  call.options = threshold;
  call.tau.resize(size_t(shape.q_len));
  for (int64_t i = 0; i < shape.q_len; ++i) {
    call.tau[size_t(i)] = float(
        ThresholdTau(threshold, int64_t(problem.VisibleEnd(size_t(i))), shape.head_dim));
  }
  if (threshold.views == 2) {
    for (int64_t h = 0; h < shape.heads; ++h) call.lambda.push_back(float(ClampLambda(lambda_param[h])));
  }
  return call;
}

}  // namespace

void ThresholdForward(const AttentionShape& shape, const AttentionOptions& options,
                      const ThresholdOptions& threshold, const ThresholdForwardArgs& args) {
  CheckThresholdCall(shape, options, threshold, args.lambda_param);
  for (int t = 0; t < threshold.views; ++t) {
    ValidateQueryShaped(args.q[t], shape, t == 0 ? "q[0]" : "q[1]");
    ValidateKeyShaped(args.k[t], shape, t == 0 ? "k[0]" : "k[1]");
  }
  ValidateKeyShaped(args.v, shape, "v");
  ValidateQueryShaped(args.o, shape, "o");

  AttentionProblem problem = MakeProblem(shape, options);
  problem.scale = float(ThresholdScale(options));
  const ThresholdCall call = MakeCall(shape, problem, threshold, args.lambda_param);
  RunWithThreads(options.threads, [&] {
    if (!threshold.l2_normalize) {
      HWY_DYNAMIC_DISPATCH(ThresholdForwardTiled)(problem, call, args);
      return;
    }
    ThresholdForwardArgs normalised = args;
    std::vector<NormalisedRows> keep;
    keep.reserve(4);  // the views point into the vectors' buffers, which moves keep
    for (int t = 0; t < threshold.views; ++t) {
      keep.push_back(Normalise(args.q[t], shape.batch, shape.heads, shape.q_len, shape.head_dim));
      normalised.q[t] = keep.back().view;
      keep.push_back(Normalise(args.k[t], shape.batch, shape.kv_heads, shape.kv_len, shape.head_dim));
      normalised.k[t] = keep.back().view;
    }
    HWY_DYNAMIC_DISPATCH(ThresholdForwardTiled)(problem, call, normalised);
  });
}

}  // namespace lpattn
#endif  // HWY_ONCE
