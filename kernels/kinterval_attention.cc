// K-interval attention (spec §2): per-target instantiations of the tiled skeleton with the
// K-interval row transform, and the public entry points that validate and dispatch once.
#include <stdexcept>
#include <string>

#include "kernels/attention_problem.h"
#include "kernels/kinterval.h"
#include "kernels/validate.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kinterval_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/kinterval_transform-inl.h"
#include "kernels/tiled_attention-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {

void KIntervalForwardTiled(const AttentionProblem& problem, const KIntervalOptions& kint,
                           const KIntervalForwardArgs& args) {
  const KIntervalTransform transform{kint.K, kint.calibration == KIntervalCalibration::kWindow,
                                     float(kint.window),
                                     kint.rounding == KIntervalRounding::kNearest, args.saved};
  TiledForward(problem, ForwardArgs{args.q, args.k, args.v, args.o, args.saved.m}, transform);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn {

HWY_EXPORT(KIntervalForwardTiled);

namespace {

void CheckKIntervalCall(const AttentionShape& shape, const AttentionOptions& options,
                        const KIntervalOptions& kint) {
  ValidateKInterval(kint);
  if (options.sink != SinkMode::kNone) {
    throw std::invalid_argument("lpattn K-interval attention: sinks are not defined for it (§2)");
  }
  if (shape.kv_len >= (int64_t(1) << 24)) {
    throw std::invalid_argument("lpattn K-interval attention: kv_len must be below 2^24, got " +
                                std::to_string(shape.kv_len));
  }
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

}  // namespace

void KIntervalForward(const AttentionShape& shape, const AttentionOptions& options,
                      const KIntervalOptions& kint, const KIntervalForwardArgs& args) {
  CheckKIntervalCall(shape, options, kint);
  CheckSaved(args.saved);
  ValidateForward(shape, options, ForwardArgs{args.q, args.k, args.v, args.o, args.saved.m});
  const AttentionProblem problem = MakeProblem(shape, options);
  RunWithThreads(options.threads,
                 [&] { HWY_DYNAMIC_DISPATCH(KIntervalForwardTiled)(problem, kint, args); });
}

}  // namespace lpattn
#endif  // HWY_ONCE
