// The named sweeps (docs/harness.md §4).
#include "harness/sweep/sweep_plan.h"

#include <stdexcept>

namespace lpattn::harness {
namespace {

// The K-interval paper's table (docs/harness.md §4: 124M GPT-2, 2.5B tokens, gap to softmax in
// nats), one arm per row, plus a lerp K=2 model trained to be evaluated with exact softmax.
SweepPlan KIntervalPaperPlan() {
  SweepPlan plan;
  plan.name = "kint-paper";
  plan.summary = "the K-interval paper's table (docs/harness.md §4) against exact, 3 seeds, small";
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

// Exact attention at each operand precision of docs/math.md §4 against fp32 (issue 6's
// comparison) and with each low-precision backward of §4.2, 3 seeds, small; plus fp32-trained
// models evaluated with quantized operands (post-training quantization) beside the arms
// trained with them.
SweepPlan LowPrecisionPlan() {
  SweepPlan plan;
  plan.name = "lowp";
  plan.summary =
      "exact attention at each operand precision and backward precision against fp32, and "
      "each again with the whole model in bf16 mixed precision, 3 seeds, small";
  plan.preset = "small";
  plan.seeds = {1, 2, 3};
  plan.arms = {
      {"exact", ""},
      {"exact+qk=bf16:pv=bf16", ""},
      {"exact+qk=fp16:pv=fp16", ""},
      {"exact+qk=fp8e4m3:pv=fp8e4m3", ""},
      {"exact+qk=fp8e5m2:pv=fp8e5m2", ""},
      {"exact+qk=int8:pv=int8", ""},
      {"exact+qk=int8:pv=fp8e4m3", ""},
      {"exact+qk=int8:pv=int8:gran=tensor", ""},
      {"exact+qk=int8:pv=int8:gran=channel:smooth_k=1", ""},
      {"exact+qk=int8:pv=int8:p=int8", ""},
      {"exact+bwd=bf16", ""},
      {"exact+bwd=fp16", ""},
      {"exact+bwd=int8", ""},
      {"exact+bwd=int8:bwd_dp=int8", ""},
      {"exact+qk=bf16:pv=bf16:p=bf16:bwd=bf16", ""},
      // The whole model in bf16 mixed precision (docs/harness.md §1.1) with each attention
      // precision: the K-interval paper's premise, low-precision products around a softmax.
      {"exact+dense=bf16", ""},
      {"exact+qk=bf16:pv=bf16:dense=bf16", ""},
      {"exact+qk=fp16:pv=fp16:dense=bf16", ""},
      {"exact+qk=fp8e4m3:pv=fp8e4m3:dense=bf16", ""},
      {"exact+qk=fp8e5m2:pv=fp8e5m2:dense=bf16", ""},
      {"exact+qk=int8:pv=int8:dense=bf16", ""},
      {"exact+qk=int8:pv=fp8e4m3:dense=bf16", ""},
      {"exact+qk=bf16:pv=bf16:p=bf16:bwd=bf16:dense=bf16", ""},
  };
  plan.swaps = {{"exact", "exact+qk=int8:pv=int8", "post-training quantization"},
                {"exact", "exact+qk=fp8e4m3:pv=fp8e4m3", "post-training quantization"}};
  return plan;
}

// The value-gating paper's three statements (docs/harness.md §4) at a 256-token context:
// value-only gates keep the first-token sink and the query-controlled output gate removes it;
// abstention (sinks) and filtering (gates) add up; and they resist interference in the value
// reads in distinguishable ways. 3 seeds, medium (256 tokens); `--preset large` for 8 layers.
SweepPlan GatingPaperPlan() {
  SweepPlan plan;
  plan.name = "gating-paper";
  plan.summary =
      "the value-gating paper's statements: sinks, value and output gates and their composites, "
      "with interference at evaluation, 3 seeds, medium";
  plan.preset = "medium";
  plan.seeds = {1, 2, 3};
  plan.arms = {
      {"exact", "reference"},
      {"sink", "abstains"},
      {"offbyone", "abstains (fixed sink)"},
      {"normgate", "filters; keeps the first-token sink"},
      {"projgate", "filters; keeps the first-token sink"},
      {"outgate", "query-controlled; removes the sink"},
      {"sink+normgate", "abstention + filtering: gains add"},
      {"sink+projgate", "abstention + filtering: gains add"},
      {"outgate+sink", "gains add"},
      {"outgate+normgate", "gains add"},
      {"outgate+projgate", "gains add"},
  };
  plan.interference = {"noise:rho=0.1,sigma=1", "swap:rho=0.1"};
  return plan;
}

// Thresholded differential attention's length robustness (docs/harness.md §4): rotary models
// trained at 256 tokens and evaluated at 256, 512 and 1024, 2 seeds, medium.
SweepPlan ThresholdPaperPlan() {
  SweepPlan plan;
  plan.name = "tda-paper";
  plan.summary =
      "exact and tda (1 and 2 views) with rotary positions, trained at 256 tokens and evaluated "
      "at 256 to 1024, 2 seeds, medium";
  plan.preset = "medium";
  plan.pos = "rope";
  plan.seeds = {1, 2};
  plan.arms = {{"exact", "reference; spreads with length"},
               {"tda:views=1", "sparse, no sink"},
               {"tda", "sparse, no sink; robust at longer sequences"}};
  plan.contexts = {256, 512, 1024};
  return plan;
}

// The K-interval paper's detached-extrema claim: with the extrema detached, the loss turns up
// after about 25-30M tokens. 39,100 steps of the small preset (768 tokens each, 30.0M tokens),
// exact and the detached K=32 arm, 2 seeds: hours on 2 cores.
SweepPlan KIntervalDetachPlan() {
  SweepPlan plan;
  plan.name = "kint-detach";
  plan.summary = "exact and detached-extrema K=32 for 30M tokens (hours), 2 seeds, small";
  plan.preset = "small";
  plan.steps = 39100;
  plan.seeds = {1, 2};
  plan.arms = {{"exact", "reference"},
               {"kint:K=32:cal=minmax:round=lerp:ste=exact:detach=1",
                "loss turns up after ~25-30M tokens"}};
  return plan;
}

}  // namespace

void SweepPlan::Configure(TrainConfig& config) const {
  if (steps > 0) config.steps = steps;
  if (!pos.empty()) config.model.pos = pos;
}

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
  extras.reference = reference;
  extras.interference = interference;
  extras.contexts = contexts;
  return extras;
}

const std::vector<SweepPlan>& SweepPlans() {
  static const std::vector<SweepPlan> plans = {KIntervalPaperPlan(), GatingPlan(),
                                                LowPrecisionPlan(),  GatingPaperPlan(),
                                                ThresholdPaperPlan(), KIntervalDetachPlan()};
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
