// K-interval attention (docs/math.md §2): per-target instantiations of the tiled skeleton with the
// K-interval row transform, and the public entry points that validate and dispatch once.
#include <stdexcept>
#include <string>

#include "kernels/entry/cached_runs.h"
#include "kernels/entry/decode_plan.h"
#include "kernels/entry/validate.h"
#include "kernels/kinterval.h"
#include "kernels/kv_cache.h"
#include "kernels/native/kv_cache_impl.h"
#include "kernels/native/quantized_operands.h"
#include "kernels/skeleton/attention_problem.h"

#ifndef LPATTN_KERNELS_KINTERVAL_ATTENTION_ONCE_
#define LPATTN_KERNELS_KINTERVAL_ATTENTION_ONCE_
namespace lpattn {
// The skeleton's view of a K-interval backward call: the saved row max stands where softmax
// keeps lse (the transform reads all of its statistics from `saved`), no sink.
inline BackwardArgs ToBackwardArgs(const KIntervalBackwardArgs& a) {
  BackwardArgs args;
  args.q = a.q;
  args.k = a.k;
  args.v = a.v;
  args.o = a.o;
  args.d_o = a.d_o;
  args.lse = a.saved.m;
  args.dq = a.dq;
  args.dk = a.dk;
  args.dv = a.dv;
  return args;
}
}  // namespace lpattn
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/entry/kinterval_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/skeleton/tiled_attention-inl.h"
#include "kernels/transforms/kinterval_transform-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {

void KIntervalForwardTiled(const AttentionProblem& problem, const KIntervalOptions& kint,
                           const KIntervalForwardArgs& args) {
  TiledForward(problem, ForwardArgs{args.q, args.k, args.v, args.o, args.saved.m},
               KIntervalTransform{kint, args.saved});
}

void KIntervalBackwardTiled(const AttentionProblem& problem, const KIntervalOptions& kint,
                            const KIntervalBackwardArgs& args) {
  TiledBackward(problem, ToBackwardArgs(args), KIntervalTransform{kint, args.saved});
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn {

HWY_EXPORT(KIntervalForwardTiled);
HWY_EXPORT(KIntervalBackwardTiled);

namespace {

void CheckKIntervalOptions(const AttentionOptions& options, const KIntervalOptions& kint) {
  ValidateKInterval(kint);
  if (options.sink != SinkMode::kNone) {
    throw std::invalid_argument("lpattn K-interval attention: sinks are not defined for it (§2)");
  }
  if (options.softcap != 0.0f || options.alibi_slopes != nullptr || options.window != 0) {
    throw std::invalid_argument(
        "lpattn K-interval attention: softcap, ALiBi and windows are exact attention's "
        "(§1.3-§1.5)");
  }
}

// Key indices travel as floats through the statistics (argmax, argmin).
void CheckKeyCount(int64_t kv_len) {
  if (kv_len >= (int64_t(1) << 24)) {
    throw std::invalid_argument("lpattn K-interval attention: kv_len must be below 2^24, got " +
                                std::to_string(kv_len));
  }
}

void CheckKIntervalCall(const AttentionShape& shape, const AttentionOptions& options,
                        const KIntervalOptions& kint) {
  CheckKIntervalOptions(options, kint);
  CheckKeyCount(shape.kv_len);
}

void CheckSaved(const KIntervalSaved& saved) {
  const std::pair<const void*, const char*> fields[] = {
      {saved.m, "saved.m"},         {saved.R, "saved.R"},           {saved.Z, "saved.Z"},
      {saved.lse_exact, "saved.lse_exact"}, {saved.argmax, "saved.argmax"},
      {saved.argmin, "saved.argmin"}};
  for (const auto& [pointer, name] : fields) {
    if (pointer == nullptr) {
      throw std::invalid_argument(std::string("lpattn K-interval attention: ") + name +
                                  " is null");
    }
  }
}

// The saved statistics' arrays from row `first` on.
KIntervalSaved SavedFrom(const KIntervalSaved& saved, size_t first) {
  return {saved.m + first,         saved.R + first,      saved.Z + first,
          saved.lse_exact + first, saved.argmax + first, saved.argmin + first};
}

}  // namespace

void KIntervalForward(const AttentionShape& shape, const AttentionOptions& options,
                      const KIntervalOptions& kint, const KIntervalForwardArgs& args) {
  CheckKIntervalCall(shape, options, kint);
  CheckSaved(args.saved);
  ValidateForward(shape, options, ForwardArgs{args.q, args.k, args.v, args.o, args.saved.m});
  const AttentionProblem problem = MakeProblem(shape, options);
  RunWithThreads(options.threads, [&] {
    QuantizedOperands operands(shape, options.precision);
    AttentionProblem coded = problem;
    KIntervalForwardArgs in = operands.SubstituteForward(args, coded);
    // The decode plan (docs/design.md §8): the saved statistics are [B, H, q_len] rows, which
    // a GQA group's grouped rows keep in order.
    ForwardArgs grouped{in.q, in.k, in.v, in.o, in.saved.m};
    const DecodePlan plan(coded, grouped);
    in.q = grouped.q;
    in.k = grouped.k;  // decoded once, when the plan decodes K or V (§8)
    in.v = grouped.v;
    in.o = grouped.o;
    HWY_DYNAMIC_DISPATCH(KIntervalForwardTiled)(coded, kint, in);
    plan.Finish();
  });
}

void KIntervalForward(const AttentionShape& shape, const AttentionOptions& options,
                      const KIntervalOptions& kint, ConstTensor q, const KvCache& cache, Tensor o,
                      const KIntervalSaved& saved, const int64_t* sequences,
                      const int64_t* q_offsets) {
  CheckKIntervalOptions(options, kint);
  CheckSaved(saved);
  const std::vector<int64_t> lengths =
      ValidateCachedForward(shape, options, cache, q, o, sequences, q_offsets);
  for (const int64_t length : lengths) CheckKeyCount(length);
  AttentionOptions run = options;
  run.precision = CachePrecision(cache.config(), options.precision);
  RunWithThreads(options.threads, [&] {
    ForEachCachedRun(shape, lengths, sequences, q_offsets, q, o, [&](const CachedRun& r) {
      // K and V read in place (docs/design.md §9), Q's codes per call, the decode plan (§8).
      AttentionProblem problem = MakeProblem(r.shape, run);
      cache.impl().Bind(r.slot, problem);
      QuantizedOperands queries(r.shape, run.precision);
      ForwardArgs grouped{queries.PrepareQueries(r.q, problem), {}, {}, r.o,
                          saved.m + r.first_row};
      const DecodePlan plan(problem, grouped);
      const KIntervalForwardArgs in{grouped.q, grouped.k, grouped.v, grouped.o,
                                    SavedFrom(saved, r.first_row)};
      HWY_DYNAMIC_DISPATCH(KIntervalForwardTiled)(problem, kint, in);
      plan.Finish();
    });
  });
}

void KIntervalBackward(const AttentionShape& shape, const AttentionOptions& options,
                       const KIntervalOptions& kint, const KIntervalBackwardArgs& args) {
  CheckKIntervalCall(shape, options, kint);
  CheckSaved(args.saved);
  ValidateBackward(shape, options, ToBackwardArgs(args));
  const AttentionProblem problem = MakeProblem(shape, options);
  RunWithThreads(options.threads, [&] {
    QuantizedOperands operands(shape, options.precision);
    const KIntervalBackwardArgs in = operands.Substitute(args);
    AttentionProblem rounded = problem;
    operands.PrepareBackward(ToBackwardArgs(in), rounded);
    HWY_DYNAMIC_DISPATCH(KIntervalBackwardTiled)(rounded, kint, in);
  });
}

}  // namespace lpattn
#endif  // HWY_ONCE
