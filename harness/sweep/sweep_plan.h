// Named sweeps (docs/harness.md §4): the arms, seeds and evaluation swaps of an experiment, with
// what its source paper reports beside each arm, so `lpattn sweep --plan NAME` runs it and
// `lpattn report` prints our gaps next to the paper's.
#ifndef LPATTN_HARNESS_SWEEP_SWEEP_PLAN_H_
#define LPATTN_HARNESS_SWEEP_SWEEP_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "harness/sweep/sweep.h"

namespace lpattn::harness {

struct PlannedArm {
  std::string arm;
  std::string paper;  // what the source reports for it ("" when it reports nothing)
};

struct SweepPlan {
  std::string name;
  std::string summary;  // one line for --help
  std::string preset;   // the model preset it runs on
  std::vector<PlannedArm> arms;
  std::vector<uint64_t> seeds;
  std::vector<EvalSwap> swaps;
  std::string reference;                  // empty: exact
  int steps = 0;                          // 0: the preset's
  std::string pos;                        // empty: the preset's (learned)
  std::vector<std::string> interference;  // evaluations of every finished run (§1.5)
  std::vector<int64_t> contexts;          // evaluations at these contexts (§3.8)

  std::vector<std::string> ArmNames() const;
  SweepExtras Extras() const;  // plan name, paper column, swaps and evaluations for RunSweep
  // Applies the plan's steps and positions to a preset's config (flags given on the command
  // line are applied after, and win).
  void Configure(TrainConfig& config) const;
};

// The plans, in the order --help lists them.
const std::vector<SweepPlan>& SweepPlans();
// The plan called `name`; throws std::invalid_argument listing the known plans otherwise.
const SweepPlan& FindSweepPlan(const std::string& name);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_SWEEP_SWEEP_PLAN_H_
