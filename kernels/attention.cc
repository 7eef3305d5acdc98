// Exact attention (spec §1, §1.1): per-target instantiations of the tiled skeleton with the
// softmax row transform, and the public entry points that validate, pick a TBB arena and
// dispatch once per call.
#include <cmath>
#include <stdexcept>

#include "kernels/attention.h"
#include "kernels/attention_problem.h"
#include "kernels/simulated_operands.h"
#include "kernels/validate.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/softmax_transform-inl.h"
#include "kernels/tiled_attention-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {

void ExactForwardTiled(const AttentionProblem& problem, const ForwardArgs& args) {
  TiledForward(problem, args, SoftmaxTransform{args.lse, nullptr});
}

void ExactBackwardTiled(const AttentionProblem& problem, const BackwardArgs& args) {
  TiledBackward(problem, args, SoftmaxTransform{nullptr, args.lse});
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn {

HWY_EXPORT(ExactForwardTiled);
HWY_EXPORT(ExactBackwardTiled);

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
  p.has_sink = options.sink != SinkMode::kNone;
  p.sink_logits = options.sink == SinkMode::kLearned ? options.sink_logits : nullptr;
  return p;
}

void ExactForward(const AttentionShape& shape, const AttentionOptions& options,
                  const ForwardArgs& args) {
  ValidateForward(shape, options, args);
  const AttentionProblem problem = MakeProblem(shape, options);
  RunWithThreads(options.threads, [&] {
    SimulatedOperands operands(shape, options.precision);
    AttentionProblem coded = problem;
    const ForwardArgs in = operands.SubstituteForward(args, coded);
    HWY_DYNAMIC_DISPATCH(ExactForwardTiled)(coded, in);
  });
}

void ExactBackward(const AttentionShape& shape, const AttentionOptions& options,
                   const BackwardArgs& args) {
  ValidateBackward(shape, options, args);
  const AttentionProblem problem = MakeProblem(shape, options);
  RunWithThreads(options.threads, [&] {
    SimulatedOperands operands(shape, options.precision);
    HWY_DYNAMIC_DISPATCH(ExactBackwardTiled)(problem, operands.Substitute(args));
  });
}

}  // namespace lpattn
#endif  // HWY_ONCE
