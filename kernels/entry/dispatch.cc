// Which Highway targets the kernels were compiled for, which this CPU runs, and which one
// HWY_DYNAMIC_DISPATCH picks now; plus the hook that restricts dispatch to one target.
#include <string>
#include <vector>

#include "kernels/attention.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/entry/dispatch.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {

// Compiled into every target exactly like the kernels, so dispatching it names their target.
const char* DispatchedTargetName() { return hwy::TargetName(HWY_TARGET); }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn {

HWY_EXPORT(DispatchedTargetName);

namespace {
// The CPU's own compiled-and-supported targets, read on first use, before SelectTarget's
// restriction changes what Highway reports.
int64_t CpuTargets() {
  static const int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  return targets;
}

std::vector<std::string> TargetNames(int64_t targets) {
  std::vector<std::string> names;
  for (int64_t rest = targets; rest != 0; rest &= rest - 1) {
    names.emplace_back(hwy::TargetName(rest & -rest));
  }
  return names;
}
}  // namespace

DispatchInfo GetDispatchInfo() {
  DispatchInfo info;
  info.compiled = TargetNames(HWY_TARGETS);
  info.supported = TargetNames(CpuTargets());
  info.chosen = HWY_DYNAMIC_DISPATCH(DispatchedTargetName)();
  return info;
}

bool SelectTarget(const std::string& name) {
  int64_t chosen = 0;
  if (!name.empty()) {
    for (int64_t rest = CpuTargets(); rest != 0; rest &= rest - 1) {
      if (name == hwy::TargetName(rest & -rest)) chosen = rest & -rest;
    }
    if (chosen == 0) return false;
  }
  hwy::SetSupportedTargetsForTest(chosen);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  return true;
}

}  // namespace lpattn
#endif  // HWY_ONCE
