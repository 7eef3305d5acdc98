// The named sweeps (spec/harness.md §4 for kint-paper).
#include "harness/sweep_plan.h"

#include <stdexcept>

namespace lpattn::harness {
namespace {

// The K-interval paper's table (spec/harness.md §4: 124M GPT-2, 2.5B tokens, gap to softmax in
// nats), one arm per row, plus a lerp K=2 model trained to be evaluated with exact softmax.
SweepPlan KIntervalPaperPlan() {
  SweepPlan plan;
  plan.name = "kint-paper";
  plan.summary = "the K-interval paper's table (spec/harness.md §4) against exact, 3 seeds, small";
  plan.preset = "small";
  plan.seeds = {1, 2, 3};
  const std::string lerp_k2 = "kint:K=2:cal=minmax:round=lerp:ste=exact";
  plan.arms = {
      {"exact", "reference"},
      {"kint:K=4:cal=minmax:round=nearest:ste=weight", "+0.89 (large)"},
      {"kint:K=4:cal=minmax:round=nearest:ste=prob", "+0.061"},
      {"kint:K=4:cal=window:W=8:round=nearest:ste=weight", "+0.043"},
      {"kint:K=4:cal=window:W=8:round=nearest:ste=prob", "+0.019"},
      {"kint:K=16:cal=window:W=8:round=nearest:ste=weight", "+0.004"},
      {"kint:K=4:cal=minmax:round=lerp:ste=exact", "<= +0.005"},
      {"kint:K=16:cal=minmax:round=lerp:ste=exact", "<= +0.005"},
      {"kint:K=32:cal=minmax:round=lerp:ste=exact", "<= +0.005"},
      {"kint:K=32:cal=minmax:round=lerp:ste=exact:detach=1",
       "loss turns up after ~25-30M tokens"},
      {lerp_k2, "(trained for the swap below)"},
  };
  plan.swaps = {{lerp_k2, "exact", "collapses at small K"}};
  return plan;
}

// Abstention, filtering and thresholding against exact attention (issue 5's comparison):
// sinks, value gates, the output gate and thresholded differential attention, 3 seeds, small.
SweepPlan GatingPlan() {
  SweepPlan plan;
  plan.name = "gating";
  plan.summary = "sinks, value gates, the output gate and tda against exact, 3 seeds, small";
  plan.preset = "small";
  plan.seeds = {1, 2, 3};
  for (const char* arm : {"exact", "offbyone", "sink", "normgate", "projgate", "sink+normgate",
                          "sink+projgate", "outgate", "tda"}) {
    plan.arms.push_back({arm, ""});
  }
  return plan;
}

}  // namespace

std::vector<std::string> SweepPlan::ArmNames() const {
  std::vector<std::string> names;
  for (const PlannedArm& a : arms) names.push_back(a.arm);
  return names;
}

SweepExtras SweepPlan::Extras() const {
  SweepExtras extras;
  extras.plan = name;
  for (const PlannedArm& a : arms) {
    if (!a.paper.empty()) extras.paper[a.arm] = a.paper;
  }
  extras.swaps = swaps;
  return extras;
}

const std::vector<SweepPlan>& SweepPlans() {
  static const std::vector<SweepPlan> plans = {KIntervalPaperPlan(), GatingPlan()};
  return plans;
}

const SweepPlan& FindSweepPlan(const std::string& name) {
  std::string known;
  for (const SweepPlan& plan : SweepPlans()) {
    if (plan.name == name) return plan;
    known += (known.empty() ? "" : ", ") + plan.name;
  }
  throw std::invalid_argument("unknown sweep plan '" + name + "' (known plans: " + known + ")");
}

}  // namespace lpattn::harness
