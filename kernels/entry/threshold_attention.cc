// Thresholded (differential) attention (docs/math.md §3): per-target instantiations of the tiled
// skeleton with the thresholded row transform, and the public entry points that validate,
// normalise Q and K, and dispatch once.
#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/entry/cached_runs.h"
#include "kernels/entry/decode_plan.h"
#include "kernels/entry/validate.h"
#include "kernels/kv_cache.h"
#include "kernels/native/kv_cache_impl.h"
#include "kernels/native/quantized_operands.h"
#include "kernels/skeleton/attention_problem.h"
#include "kernels/threshold.h"
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
  // The backward's c per view and head: 1 for view 1, -lambda for view 2.
  std::vector<float> coefficient[2];
};
}  // namespace lpattn
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/entry/threshold_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/skeleton/tiled_attention-inl.h"
#include "kernels/transforms/threshold_transform-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {

ThresholdTransform MakeTransform(const AttentionProblem& problem, const ThresholdCall& call) {
  ThresholdTransform transform;
  transform.power = call.options.power;
  transform.tau = call.tau.data();
  transform.lambda = call.lambda.empty() ? nullptr : call.lambda.data();
  // The call's shape, which a grouped problem (docs/design.md §8) no longer shows directly.
  transform.q_len = problem.head_rows != 0 ? problem.head_rows : problem.q_len;
  transform.heads = problem.heads * problem.query_group;
  transform.rows = problem.batch * problem.heads * problem.q_len;
  return transform;
}

void ThresholdForwardTiled(const AttentionProblem& problem, const ThresholdCall& call,
                           const ThresholdForwardArgs& args) {
  ThresholdTransform transform = MakeTransform(problem, call);
  transform.survivors = args.survivors;
  const SecondView second =
      call.options.views == 2 ? SecondView{args.q[1], args.k[1]} : SecondView{};
  TiledForward(problem, ForwardArgs{args.q[0], args.k[0], args.v, args.o, nullptr}, transform,
               second);
}

// One view's backward (its Q, K and dQ, dK in args; dV of this view alone), with its row sums.
void ThresholdBackwardTiled(const AttentionProblem& problem, const ThresholdCall& call, int view,
                            const BackwardArgs& args, float* row_ds, float* row_a_dp) {
  ThresholdTransform transform = MakeTransform(problem, call);
  transform.coefficient = call.coefficient[view].data();
  transform.row_ds = row_ds;
  transform.row_a_dp = row_a_dp;
  TiledBackward(problem, args, transform);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn {

HWY_EXPORT(ThresholdForwardTiled);
HWY_EXPORT(ThresholdBackwardTiled);

namespace {

[[noreturn]] void Fail(const std::string& what) {
  throw std::invalid_argument("lpattn thresholded attention: " + what);
}

void CheckThresholdOptions(const AttentionOptions& options, const ThresholdOptions& threshold,
                           int64_t heads, const float* lambda_param) {
  ValidateThreshold(threshold);
  if (options.sink != SinkMode::kNone) Fail("sinks are not defined for it (docs/math.md §3)");
  if (options.precision.p_folds_v) {
    Fail("pfold=1 rounds nonnegative weights to unsigned codes; its weights are signed (§3)");
  }
  if (options.softcap != 0.0f || options.alibi_slopes != nullptr || options.window != 0) {
    Fail("softcap, ALiBi and windows are exact attention's (docs/math.md §1.3-§1.5)");
  }
  if (threshold.views == 2) {
    if (lambda_param == nullptr) Fail("lambda_param is null (required with views = 2)");
    for (int64_t h = 0; h < heads; ++h) {
      if (!std::isfinite(lambda_param[h])) {
        Fail("lambda_param[" + std::to_string(h) + "] is not finite");
      }
    }
  }
}

// Survivor counts travel as floats.
void CheckKeyCount(int64_t kv_len) {
  if (kv_len >= (int64_t(1) << 24)) {
    Fail("kv_len must be below 2^24, got " + std::to_string(kv_len));
  }
}

void CheckThresholdCall(const AttentionShape& shape, const AttentionOptions& options,
                        const ThresholdOptions& threshold, const float* lambda_param) {
  ValidateShapeAndOptions(shape, options);
  CheckThresholdOptions(options, threshold, shape.heads, lambda_param);
  CheckKeyCount(shape.kv_len);
}

// The calling thread's scratch buffer `slot` of at least n floats, kept between calls so that
// repeated calls of one shape neither allocate nor fault pages in. Not initialised: every user
// writes all of it.
enum ScratchSlot {
  kKeys0,
  kKeys1,
  kValues,
  kQueryHat,
  kKeyHat,
  kQueryGrad,
  kKeyGrad,
  kSecondDv,
  kSlots
};
float* Scratch(ScratchSlot slot, size_t n) {
  thread_local std::vector<float> buffers[kSlots];
  std::vector<float>& buffer = buffers[slot];
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// Dense [batch, heads, tokens, head_dim] rows x / max(||x||, 1e-12) of a strided view (§3),
// in a scratch slot.
struct NormalisedRows {
  const float* data = nullptr;
  ConstTensor view;
};
// dst = row / max(||row||, 1e-12) (dst may be row).
void NormaliseRow(const float* row, int64_t dim, float* dst) {
  double sum = 0.0;
  for (int64_t c = 0; c < dim; ++c) sum += double(row[c]) * row[c];
  const double inverse = 1.0 / std::max(std::sqrt(sum), 1e-12);
  for (int64_t c = 0; c < dim; ++c) dst[c] = float(row[c] * inverse);
}

NormalisedRows Normalise(const ConstTensor& x, int64_t batch, int64_t heads, int64_t tokens,
                         int64_t dim, ScratchSlot slot) {
  NormalisedRows out;
  float* data = Scratch(slot, size_t(batch * heads * tokens * dim));
  out.data = data;
  out.view = {data, ContiguousBHTD(heads, tokens, dim)};
  const size_t rows = size_t(batch * heads * tokens);
  tbb::parallel_for(tbb::blocked_range<size_t>(0, rows, 256), [&](const auto& range) {
    for (size_t r = range.begin(); r != range.end(); ++r) {
      const int64_t b = int64_t(r) / (heads * tokens), h = int64_t(r) / tokens % heads,
                    t = int64_t(r) % tokens;
      const float* row = x.data + b * x.strides.batch + h * x.strides.head + t * x.strides.token;
      NormaliseRow(row, dim, data + r * size_t(dim));
    }
  });
  return out;
}

// The dense [batch, kv_heads, kv_len, head_dim] rows of slots slot .. slot + batch - 1 of a
// cache side, decoded to fp32 (the values the in-call quantizer makes, kv_cache.h) and
// L2-normalised when `normalise`, in a scratch slot.
ConstTensor DecodeCached(const KvCache::Impl& cache, const CacheSide& side, int64_t slot,
                         const AttentionShape& shape, bool normalise, ScratchSlot scratch) {
  const int64_t heads = shape.kv_heads, tokens = shape.kv_len, dim = shape.head_dim;
  const size_t rows = size_t(shape.batch * heads * tokens);
  float* data = Scratch(scratch, rows * size_t(dim));
  tbb::parallel_for(tbb::blocked_range<size_t>(0, rows, 256), [&](const auto& range) {
    for (size_t r = range.begin(); r != range.end(); ++r) {
      const int64_t b = int64_t(r) / (heads * tokens), h = int64_t(r) / tokens % heads,
                    t = int64_t(r) % tokens;
      float* dst = data + r * size_t(dim);
      cache.ReadRow(side, slot + b, h, t, dst);
      if (normalise) NormaliseRow(dst, dim, dst);
    }
  });
  return {data, ContiguousBHTD(heads, tokens, dim)};
}

// The L2 normalisation's backward (§3): out = (g - x^ (x^ . g)) / max(||x||, 1e-12) per row, g
// the dense gradient with respect to x^ and x the strided original.
void NormaliseBackward(const ConstTensor& x, const NormalisedRows& hat, const float* g,
                       const Tensor& out, int64_t batch, int64_t heads, int64_t tokens,
                       int64_t dim) {
  const size_t rows = size_t(batch * heads * tokens);
  tbb::parallel_for(tbb::blocked_range<size_t>(0, rows, 256), [&](const auto& range) {
    for (size_t r = range.begin(); r != range.end(); ++r) {
      const int64_t b = int64_t(r) / (heads * tokens), h = int64_t(r) / tokens % heads,
                    t = int64_t(r) % tokens;
      const float* row = x.data + b * x.strides.batch + h * x.strides.head + t * x.strides.token;
      const float* h_row = hat.data + r * size_t(dim);
      const float* g_row = g + r * size_t(dim);
      double sum = 0.0, along = 0.0;
      for (int64_t c = 0; c < dim; ++c) {
        sum += double(row[c]) * row[c];
        along += double(h_row[c]) * g_row[c];
      }
      const double inverse = 1.0 / std::max(std::sqrt(sum), 1e-12);
      float* dst = out.data + b * out.strides.batch + h * out.strides.head + t * out.strides.token;
      for (int64_t c = 0; c < dim; ++c) dst[c] = float((g_row[c] - h_row[c] * along) * inverse);
    }
  });
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
  call.coefficient[0].assign(size_t(shape.heads), 1.0f);
  if (threshold.views == 2) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      call.lambda.push_back(float(ClampLambda(lambda_param[h])));
      call.coefficient[1].push_back(-call.lambda.back());
    }
  }
  return call;
}

}  // namespace

// The call's arguments with each view's Q and K, and V, replaced by the operands the precision
// option multiplies (quantized_operands.h).
template <class Args>
Args Simulated(QuantizedOperands& operands, Args args, int views) {
  for (int t = 0; t < views; ++t) {
    args.q[t] = operands.Query(args.q[t]);
    args.k[t] = operands.Key(args.k[t]);
  }
  args.v = operands.Value(args.v);
  return args;
}

namespace {

// The forward on operands ready for the tiles (normalised keys with l2): the decode plan
// (docs/design.md §8, the second view's queries grouped as the first's), then the kernel.
void ForwardPlanned(const AttentionProblem& problem, const ThresholdCall& call,
                    ThresholdForwardArgs in) {
  AttentionProblem planned = problem;
  ForwardArgs grouped{in.q[0], in.k[0], in.v, in.o, nullptr};
  const DecodePlan plan(planned, grouped, call.options.views == 2 ? &in.q[1] : nullptr);
  in.q[0] = grouped.q;
  in.k[0] = grouped.k;  // as the plan leaves them (fp32 here: it decodes nothing)
  in.v = grouped.v;
  in.o = grouped.o;
  HWY_DYNAMIC_DISPATCH(ThresholdForwardTiled)(planned, call, in);
  plan.Finish();
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
  // Queries are normalised as the skeleton packs them; keys, which it reads in place, first.
  problem.unit_queries = threshold.l2_normalize;
  RunWithThreads(options.threads, [&] {
    QuantizedOperands operands(shape, options.precision);
    ThresholdForwardArgs in = Simulated(operands, args, threshold.views);
    for (int t = 0; t < threshold.views && threshold.l2_normalize; ++t) {
      in.k[t] = Normalise(in.k[t], shape.batch, shape.kv_heads, shape.kv_len, shape.head_dim,
                          t == 0 ? kKeys0 : kKeys1)
                    .view;
    }
    ForwardPlanned(problem, call, in);
  });
}

void ThresholdForward(const AttentionShape& shape, const AttentionOptions& options,
                      const ThresholdOptions& threshold, const KvCache& cache,
                      const ThresholdCachedArgs& args, const int64_t* sequences,
                      const int64_t* q_offsets) {
  CheckThresholdOptions(options, threshold, shape.heads, args.lambda_param);
  const bool two_views = threshold.views == 2;
  const std::vector<int64_t> lengths =
      ValidateCachedForward(shape, options, cache, args.q[0], args.o, sequences, q_offsets);
  for (const int64_t length : lengths) CheckKeyCount(length);
  const KvCache* second = args.second_keys;
  if (two_views) {  // view 2's keys: the same slots, lengths and heads in their own cache
    if (second == nullptr) Fail("second_keys is null (required with views = 2)");
    AttentionOptions as_held = options;
    as_held.precision = {};
    const std::vector<int64_t> second_lengths = ValidateCachedForward(
        shape, as_held, *second, args.q[1], args.o, sequences, q_offsets, false);
    for (size_t b = 0; b < lengths.size(); ++b) {
      if (second_lengths[b] != lengths[b]) {
        Fail("sequence " + std::to_string(b) + " holds " + std::to_string(lengths[b]) +
             " keys in cache and " + std::to_string(second_lengths[b]) + " in second_keys");
      }
    }
  }
  const int64_t tokens = q_offsets != nullptr ? q_offsets[shape.batch] : shape.batch * shape.q_len;
  const size_t call_rows = size_t(tokens * shape.heads);
  AttentionOptions run = options;
  run.precision = CachePrecision(cache.config(), options.precision);
  RunWithThreads(options.threads, [&] {
    ForEachCachedRun(shape, lengths, sequences, q_offsets, args.q[0], args.o,
                     [&](const CachedRun& r) {
      AttentionProblem problem = MakeProblem(r.shape, run);
      problem.scale = float(ThresholdScale(options));
      problem.unit_queries = threshold.l2_normalize;
      const ThresholdCall call = MakeCall(r.shape, problem, threshold, args.lambda_param);
      // Q rounded as the in-call forward rounds it for each view's K format (per token); K
      // decoded (and normalised) and V decoded once for the run.
      QuantizedOperands queries(r.shape, run.precision);
      ThresholdForwardArgs in;
      in.q[0] = queries.Query(r.q);
      in.k[0] = DecodeCached(cache.impl(), cache.impl().k, r.slot, r.shape,
                             threshold.l2_normalize, kKeys0);
      in.v = DecodeCached(cache.impl(), cache.impl().v, r.slot, r.shape, false, kValues);
      std::optional<QuantizedOperands> second_queries;
      if (two_views) {
        const Strides& s = args.q[1].strides;
        const int64_t step = q_offsets != nullptr ? r.first_row / size_t(shape.heads) * s.token
                                                  : r.first * s.batch;
        Strides strides = s;
        if (q_offsets != nullptr) strides.batch = r.shape.q_len * s.token;
        second_queries.emplace(r.shape, CachePrecision(second->config(), options.precision));
        in.q[1] = second_queries->Query({args.q[1].data + step, strides});
        in.k[1] = DecodeCached(second->impl(), second->impl().k, r.slot, r.shape,
                               threshold.l2_normalize, kKeys1);
        in.lambda_param = args.lambda_param;
      }
      in.o = r.o;
      // The kernel writes [views][the run's rows]; the call's arrays are [views][call_rows].
      const size_t rows = size_t(r.shape.batch * r.shape.heads * r.shape.q_len);
      std::vector<int32_t> survivors(args.survivors != nullptr ? size_t(threshold.views) * rows : 0);
      in.survivors = survivors.empty() ? nullptr : survivors.data();
      ForwardPlanned(problem, call, in);
      for (size_t t = 0; t < size_t(threshold.views) && !survivors.empty(); ++t) {
        std::copy_n(survivors.data() + t * rows, rows,
                    args.survivors + t * call_rows + r.first_row);
      }
    });
  });
}

namespace {

void CheckBackwardTensors(const AttentionShape& shape, const ThresholdOptions& threshold,
                          const ThresholdBackwardArgs& args) {
  static const char* const kNames[2][4] = {{"q[0]", "k[0]", "dq[0]", "dk[0]"},
                                           {"q[1]", "k[1]", "dq[1]", "dk[1]"}};
  for (int t = 0; t < threshold.views; ++t) {
    ValidateQueryShaped(args.q[t], shape, kNames[t][0]);
    ValidateKeyShaped(args.k[t], shape, kNames[t][1]);
    ValidateQueryShaped(args.dq[t], shape, kNames[t][2]);
    ValidateKeyShaped(args.dk[t], shape, kNames[t][3]);
  }
  ValidateKeyShaped(args.v, shape, "v");
  ValidateQueryShaped(args.d_o, shape, "d_o");
  ValidateKeyShaped(args.dv, shape, "dv");
  if (threshold.views == 2 && args.d_lambda == nullptr) {
    Fail("d_lambda is null (required with views = 2)");
  }
}

// out += dense ([batch, kv_heads, kv_len, head_dim]), over a K-shaped strided tensor.
void AddInto(const float* dense, const Tensor& out, const AttentionShape& shape) {
  const size_t dim = size_t(shape.head_dim);
  const size_t rows = size_t(shape.batch * shape.kv_heads * shape.kv_len);
  tbb::parallel_for(tbb::blocked_range<size_t>(0, rows, 256), [&](const auto& range) {
    for (size_t r = range.begin(); r != range.end(); ++r) {
      const int64_t b = int64_t(r) / (shape.kv_heads * shape.kv_len);
      const int64_t h = int64_t(r) / shape.kv_len % shape.kv_heads, j = int64_t(r) % shape.kv_len;
      float* dst = out.data + b * out.strides.batch + h * out.strides.head + j * out.strides.token;
      for (size_t c = 0; c < dim; ++c) dst[c] += dense[r * dim + c];
    }
  });
}

// d lambda_param_h = -[0 <= lambda_param_h <= 1] * (sum over the head's rows of sum_j a2 dP).
void LambdaGradients(const AttentionShape& shape, const float* lambda_param,
                     const std::vector<float>& row_a_dp, float* d_lambda) {
  for (int64_t h = 0; h < shape.heads; ++h) {
    double sum = 0.0;
    for (int64_t b = 0; b < shape.batch; ++b) {
      const size_t first = size_t((b * shape.heads + h) * shape.q_len);
      for (size_t i = 0; i < size_t(shape.q_len); ++i) sum += row_a_dp[first + i];
    }
    d_lambda[h] = float(-LambdaSlope(lambda_param[h]) * sum);
  }
}

// d beta = -sum over views and rows of (tau_i / beta) sum_j dS_ij.
float BetaGradient(const AttentionShape& shape, const AttentionProblem& problem,
                   const ThresholdOptions& threshold, const std::vector<float>& row_ds) {
  double sum = 0.0;
  for (size_t r = 0; r < row_ds.size(); ++r) {
    const size_t i = r % size_t(shape.q_len);
    sum += ThresholdTauPerBeta(threshold, int64_t(problem.VisibleEnd(i)), shape.head_dim) *
           row_ds[r];
  }
  return float(-sum);
}

}  // namespace

void ThresholdBackward(const AttentionShape& shape, const AttentionOptions& options,
                       const ThresholdOptions& threshold, const ThresholdBackwardArgs& args) {
  CheckThresholdCall(shape, options, threshold, args.lambda_param);
  CheckBackwardTensors(shape, threshold, args);
  AttentionProblem problem = MakeProblem(shape, options);
  problem.scale = float(ThresholdScale(options));
  const ThresholdCall call = MakeCall(shape, problem, threshold, args.lambda_param);
  const size_t rows = size_t(shape.batch * shape.heads * shape.q_len);
  const size_t kv_size = size_t(shape.batch * shape.kv_heads * shape.kv_len * shape.head_dim);
  const Strides q_dense = ContiguousBHTD(shape.heads, shape.q_len, shape.head_dim);
  const Strides kv_dense = ContiguousBHTD(shape.kv_heads, shape.kv_len, shape.head_dim);
  RunWithThreads(options.threads, [&] {
    QuantizedOperands operands(shape, options.precision);
    const ThresholdBackwardArgs in = Simulated(operands, args, threshold.views);
    std::vector<float> row_ds(args.d_beta != nullptr ? size_t(threshold.views) * rows : 0);
    std::vector<float> row_a_dp(threshold.views == 2 ? rows : 0);
    float* second_dv = threshold.views == 2 ? Scratch(kSecondDv, kv_size) : nullptr;
    for (int t = 0; t < threshold.views; ++t) {
      // View t on the skeleton: its (normalised) Q and K; dV of view 2 apart, added below.
      BackwardArgs a;
      a.q = in.q[t];
      a.k = in.k[t];
      a.v = in.v;
      a.o = args.d_o;  // the transform needs no Delta = dO . o
      a.d_o = args.d_o;
      a.dq = args.dq[t];
      a.dk = args.dk[t];
      a.dv = t == 0 ? args.dv : Tensor{second_dv, kv_dense};
      NormalisedRows q_hat, k_hat;
      float *dq_hat = nullptr, *dk_hat = nullptr;
      if (threshold.l2_normalize) {  // the views reuse the scratch one after the other
        q_hat = Normalise(in.q[t], shape.batch, shape.heads, shape.q_len, shape.head_dim,
                          kQueryHat);
        k_hat = Normalise(in.k[t], shape.batch, shape.kv_heads, shape.kv_len, shape.head_dim,
                          kKeyHat);
        dq_hat = Scratch(kQueryGrad, rows * size_t(shape.head_dim));
        dk_hat = Scratch(kKeyGrad, kv_size);
        a.q = q_hat.view;
        a.k = k_hat.view;
        a.dq = {dq_hat, q_dense};
        a.dk = {dk_hat, kv_dense};
      }
      // docs/math.md §4.2: the view's product operands rounded (q^ and k^ with l2), P = c a
      // and dS per block in the tiles; fp32 products, as off the native paths.
      AttentionProblem view_problem = problem;
      operands.PrepareBackward(a, view_problem, {false, !threshold.l2_normalize});
      HWY_DYNAMIC_DISPATCH(ThresholdBackwardTiled)(
          view_problem, call, t, a, row_ds.empty() ? nullptr : row_ds.data() + size_t(t) * rows,
          t == 1 ? row_a_dp.data() : nullptr);
      if (threshold.l2_normalize) {
        NormaliseBackward(in.q[t], q_hat, dq_hat, args.dq[t], shape.batch, shape.heads,
                          shape.q_len, shape.head_dim);
        NormaliseBackward(in.k[t], k_hat, dk_hat, args.dk[t], shape.batch, shape.kv_heads,
                          shape.kv_len, shape.head_dim);
      }
    }
    if (threshold.views == 2) {
      AddInto(second_dv, args.dv, shape);
      LambdaGradients(shape, args.lambda_param, row_a_dp, args.d_lambda);
    }
    if (args.d_beta != nullptr) *args.d_beta = BetaGradient(shape, problem, threshold, row_ds);
  });
}

}  // namespace lpattn
#endif  // HWY_ONCE
