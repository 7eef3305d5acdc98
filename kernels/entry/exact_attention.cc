// Exact attention (docs/math.md §1, §1.1): per-target instantiations of the tiled skeleton with the
// softmax row transform, and the public entry points that validate, pick a TBB arena and
// dispatch once per call.
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/entry/cached_runs.h"
#include "kernels/entry/decode_plan.h"
#include "kernels/entry/validate.h"
#include "kernels/native/buffer_pool.h"
#include "kernels/native/kv_cache_impl.h"
#include "kernels/native/prepared_kv_impl.h"
#include "kernels/native/quantized_operands.h"
#include "kernels/skeleton/attention_problem.h"
#include "quant/codec.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/entry/exact_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/skeleton/tiled_attention-inl.h"
#include "kernels/transforms/softmax_transform-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {

void ExactForwardTiled(const AttentionProblem& problem, const ForwardArgs& args) {
  // docs/math.md §4: a rounded P is taken against the online softmax's running max, so it needs
  // no statistics pass.
  TiledForward(problem, args, SoftmaxTransform{args.lse, nullptr, problem.softcap});
}

void ExactBackwardTiled(const AttentionProblem& problem, const BackwardArgs& args) {
  TiledBackward(problem, args, SoftmaxTransform{nullptr, args.lse, problem.softcap});
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn {

HWY_EXPORT(ExactForwardTiled);
HWY_EXPORT(ExactBackwardTiled);

namespace {

// A forward whose K and V are bound already (a PreparedKv's or a KvCache's, in `problem` and
// `args`): Q's codes per call, the decode plan, the kernel. Inside the call's arena.
void ForwardWithKv(const AttentionShape& shape, const Precision& precision,
                   AttentionProblem problem, ForwardArgs args) {
  QuantizedOperands queries(shape, precision);
  args.q = queries.PrepareQueries(args.q, problem);
  const DecodePlan plan(problem, args);
  HWY_DYNAMIC_DISPATCH(ExactForwardTiled)(problem, args);
  plan.Finish();
}

}  // namespace

AttentionProblem MakeProblem(const AttentionShape& shape, const AttentionOptions& options) {
  AttentionProblem p;
  p.batch = size_t(shape.batch);
  p.heads = size_t(shape.heads);
  p.kv_heads = size_t(shape.kv_heads);
  p.q_len = size_t(shape.q_len);
  p.kv_len = size_t(shape.kv_len);
  p.dim = size_t(shape.head_dim);
  p.causal = options.causal;
  p.scale = ResolvedScale(shape, options);
  p.softcap = options.softcap;
  p.alibi_slopes = options.alibi_slopes;
  p.window = size_t(options.window);
  p.has_sink = options.sink != SinkMode::kNone;
  p.sink_logits = options.sink == SinkMode::kLearned ? options.sink_logits : nullptr;
  p.p_format = options.precision.p;
  p.p_scale = options.precision.PScale();
  p.p_folds_v = options.precision.p_folds_v;
  return p;
}

void ExactForward(const AttentionShape& shape, const AttentionOptions& options,
                  const ForwardArgs& args) {
  ValidateForward(shape, options, args);
  const AttentionProblem problem = MakeProblem(shape, options);
  RunWithThreads(options.threads, [&] {
    QuantizedOperands operands(shape, options.precision);
    AttentionProblem coded = problem;
    ForwardArgs in = operands.SubstituteForward(args, coded);
    const DecodePlan plan(coded, in);
    HWY_DYNAMIC_DISPATCH(ExactForwardTiled)(coded, in);
    plan.Finish();
  });
}

void ExactForward(const AttentionShape& shape, const AttentionOptions& options, ConstTensor q,
                  const PreparedKv& kv, Tensor o, float* lse) {
  const PreparedKv::Impl& prepared = kv.impl();
  const AttentionShape& s = prepared.shape;
  if (s.batch != shape.batch || s.kv_heads != shape.kv_heads || s.kv_len != shape.kv_len ||
      s.head_dim != shape.head_dim) {
    throw std::invalid_argument("lpattn attention: the prepared K and V have another shape");
  }
  if (FormatPrecision(prepared.precision) != FormatPrecision(options.precision)) {
    throw std::invalid_argument("lpattn attention: K and V were prepared with precision '" +
                                FormatPrecision(prepared.precision) + "', the call asks for '" +
                                FormatPrecision(options.precision) + "'");
  }
  ValidateShapeAndOptions(shape, options);
  ValidateQueryShaped(q, shape, "q");
  ValidateQueryShaped(o, shape, "o");
  if (lse == nullptr) throw std::invalid_argument("lpattn attention: lse is null");
  // K and V as prepared: fp32 views where simulated, codes in the problem otherwise.
  const ForwardArgs args{q, prepared.views.k, prepared.views.v, o, lse};
  AttentionProblem problem = MakeProblem(shape, options);
  problem.k_codes = prepared.coded.k_codes;
  problem.v_codes = prepared.coded.v_codes;
  problem.int_qk = prepared.coded.int_qk;
  problem.int_pv = prepared.coded.int_pv;
  problem.amx_pv = prepared.coded.amx_pv;
  RunWithThreads(options.threads,
                 [&] { ForwardWithKv(shape, options.precision, problem, args); });
}

void ExactForward(const AttentionShape& shape, const AttentionOptions& options, ConstTensor q,
                  const KvCache& cache, Tensor o, float* lse, const int64_t* sequences,
                  const int64_t* q_offsets) {
  const KvCache::Impl& c = cache.impl();
  const std::vector<int64_t> lengths =
      ValidateCachedForward(shape, options, cache, q, o, sequences, q_offsets);
  if (lse == nullptr) throw std::invalid_argument("lpattn attention: lse is null");
  AttentionOptions run = options;
  run.precision = CachePrecision(c.config, options.precision);
  RunWithThreads(options.threads, [&] {
    ForEachCachedRun(shape, lengths, sequences, q_offsets, q, o, [&](const CachedRun& r) {
      AttentionProblem problem = MakeProblem(r.shape, run);
      c.Bind(r.slot, problem);
      ForwardWithKv(r.shape, run.precision, problem, {r.q, {}, {}, r.o, lse + r.first_row});
    });
  });
}

void ExactForward(const AttentionShape& shape, const AttentionOptions& options, ConstTensor16 q,
                  const KvCache& cache, Tensor16 o, float* lse, const int64_t* sequences,
                  const int64_t* q_offsets) {
  for (const quant::Format f : {q.format, o.format}) {
    if (f != quant::Format::kBf16 && f != quant::Format::kFp16) {
      throw std::invalid_argument(
          std::string("lpattn attention: 16-bit Q and O are bf16 or fp16, got ") +
          quant::FormatName(f));
    }
  }
  // Everything, the caller's views included, as the float forward checks it (strides are in
  // elements, so a 16-bit view passes the same checks as a float one).
  const auto as_floats = [](const void* data, const Strides& s) {
    return ConstTensor{static_cast<const float*>(data), s};
  };
  ValidateCachedForward(shape, options, cache, as_floats(q.data, q.strides),
                        as_floats(o.data, o.strides), sequences, q_offsets);
  if (lse == nullptr) throw std::invalid_argument("lpattn attention: lse is null");
  // Q and O's rows: [batch, heads, q_len], or [heads, total] ragged tokens.
  const int64_t outer = q_offsets != nullptr ? 1 : shape.batch;
  const int64_t tokens = q_offsets != nullptr ? q_offsets[shape.batch] : shape.q_len;
  const size_t dim = size_t(shape.head_dim), count = size_t(outer * shape.heads * tokens);
  const Strides dense = q_offsets != nullptr ? ContiguousBTHD(shape.heads, tokens, shape.head_dim)
                                             : ContiguousBHTD(shape.heads, tokens, shape.head_dim);
  std::vector<float, native::PooledAllocator<float>> q32(count * dim), o32(count * dim);
  const auto row_of = [&](const Strides& s, size_t r) {
    const size_t b = r / size_t(shape.heads * tokens), h = r / size_t(tokens) % size_t(shape.heads),
                 t = r % size_t(tokens);
    return b * size_t(s.batch) + h * size_t(s.head) + t * size_t(s.token);
  };
  for (size_t r = 0; r < count; ++r) {
    quant::DecodeRow(q.format, q.data + row_of(q.strides, r), 1.0f,
                     q32.data() + row_of(dense, r), dim);
  }
  ExactForward(shape, options, {q32.data(), dense}, cache, {o32.data(), dense}, lse, sequences,
               q_offsets);
  for (size_t r = 0; r < count; ++r) {
    quant::EncodeRow(o.format, o32.data() + row_of(dense, r), 1.0f,
                     o.data + row_of(o.strides, r), dim);
  }
}

void ExactBackward(const AttentionShape& shape, const AttentionOptions& options,
                   const BackwardArgs& args) {
  ValidateBackward(shape, options, args);
  const AttentionProblem problem = MakeProblem(shape, options);
  RunWithThreads(options.threads, [&] {
    QuantizedOperands operands(shape, options.precision);
    const BackwardArgs in = operands.Substitute(args);
    AttentionProblem rounded = problem;
    operands.PrepareBackward(in, rounded);
    HWY_DYNAMIC_DISPATCH(ExactBackwardTiled)(rounded, in);
  });
}

}  // namespace lpattn
#endif  // HWY_ONCE
