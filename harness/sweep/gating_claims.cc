// The value-gating paper's statements from a sweep report (docs/harness.md §4).
#include "harness/sweep/gating_claims.h"

#include <cstdio>
#include <sstream>
#include <vector>

#include "harness/sweep/paired_stats.h"

namespace lpattn::harness {
namespace {

const ArmReport* Arm(const SweepReport& report, const std::string& name) {
  for (const ArmReport& r : report.arms) {
    if (r.arm == name) return &r;
  }
  return nullptr;
}

std::string Number(double x, const char* format = "%.4f") {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), format, x);
  return buffer;
}

// (1) Sinks: value-only gates keep exact's sink rate (at least half of it), the output gate
// removes it (at most half).
std::string SinkStatement(const SweepReport& report) {
  const ArmReport* exact = Arm(report, "exact");
  const ArmReport* outgate = Arm(report, "outgate");
  std::vector<const ArmReport*> gates;
  for (const char* name : {"normgate", "projgate"}) {
    if (const ArmReport* gate = Arm(report, name); gate && gate->sink_rate) gates.push_back(gate);
  }
  if (!exact || !exact->sink_rate || !outgate || !outgate->sink_rate || gates.empty()) {
    return "not tested: needs `exact`, `outgate` and a value gate with attention diagnostics";
  }
  if (*exact->sink_rate == 0.0) {
    return "not visible at this scale: no head of `exact` has a first-token sink (sink rate 0, "
           "first-token mass " + Number(*exact->first_mass) + ")";
  }
  bool keep = true;
  std::string rates = "sink rate: `exact` " + Number(*exact->sink_rate, "%.3f");
  for (const ArmReport* gate : gates) {
    keep = keep && *gate->sink_rate >= 0.5 * *exact->sink_rate;
    rates += ", `" + gate->arm + "` " + Number(*gate->sink_rate, "%.3f");
  }
  const bool removes = *outgate->sink_rate <= 0.5 * *exact->sink_rate;
  rates += ", `outgate` " + Number(*outgate->sink_rate, "%.3f");
  if (keep && removes) return "holds (" + rates + ")";
  return std::string("fails: ") + (keep ? "" : "a value gate loses the sink; ") +
         (removes ? "" : "the output gate keeps it; ") + rates;
}

// (2) Additivity: per seed, L(A+B) - L(A) - L(B) + L(exact).
std::string AdditivityStatement(const SweepReport& report) {
  const ArmReport* exact = Arm(report, "exact");
  if (!exact) return "not tested: needs `exact`\n";
  std::ostringstream out;
  const std::vector<std::vector<std::string>> composites = {
      {"sink+normgate", "sink", "normgate"}, {"sink+projgate", "sink", "projgate"},
      {"outgate+sink", "outgate", "sink"},   {"outgate+normgate", "outgate", "normgate"},
      {"outgate+projgate", "outgate", "projgate"}};
  for (const std::vector<std::string>& c : composites) {
    const ArmReport *both = Arm(report, c[0]), *a = Arm(report, c[1]), *b = Arm(report, c[2]);
    if (!both || !a || !b) continue;
    std::vector<double> interactions;
    for (size_t s = 0; s < exact->runs.size(); ++s) {
      if (exact->runs[s].done && both->runs[s].done && a->runs[s].done && b->runs[s].done) {
        interactions.push_back(both->runs[s].final_val_loss - a->runs[s].final_val_loss -
                               b->runs[s].final_val_loss + exact->runs[s].final_val_loss);
      }
    }
    const PairedSummary summary = SummarizePaired(interactions);
    out << "  - `" << c[0] << "` against `" << c[1] << "` + `" << c[2] << "`: ";
    if (!summary.t95) {
      out << "needs two seeds with all four runs\n";
      continue;
    }
    const std::string interval =
        "interaction " + Number(*summary.mean, "%+.4f") + ", 95% [" +
        Number(summary.t95->low, "%+.4f") + ", " + Number(summary.t95->high, "%+.4f") + "]";
    out << (summary.t95->Covers(0.0) ? "additive within noise"
            : summary.t95->low > 0.0 ? "sub-additive (the pair gains less than the sum)"
                                     : "super-additive")
        << " (" << interval << ", n=" << summary.n << ")\n";
  }
  const std::string text = out.str();
  return text.empty() ? "not tested: no composite with both of its parts\n" : text;
}

// (3) Interference: filtering, abstaining, protection, per interference of the sweep.
std::string InterferenceStatement(const SweepReport& report) {
  const ArmReport* exact = Arm(report, "exact");
  if (!exact || exact->interference.empty()) {
    return "not tested: needs `exact` evaluated with interference\n";
  }
  std::ostringstream out;
  for (size_t k = 0; k < exact->interference.size(); ++k) {
    const ArmReport::InterferenceRow& reference = exact->interference[k];
    if (!reference.increase) continue;
    out << "  - `" << reference.interference << "` (exact's loss increase "
        << Number(*reference.increase, "%+.4f") << "):";
    for (const ArmReport& r : report.arms) {
      if (&r == exact || k >= r.interference.size() || !r.interference[k].increase) continue;
      const ArmReport::InterferenceRow& x = r.interference[k];
      std::string ways;
      if (x.gate_corrupted && x.gate_clean) {
        ways += *x.gate_corrupted < *x.gate_clean ? "filters" : "does not filter";
      }
      if (x.abstention && x.abstention_clean) {
        ways += std::string(ways.empty() ? "" : ", ") +
                (*x.abstention > *x.abstention_clean ? "abstains more" : "does not abstain more");
      }
      ways += std::string(ways.empty() ? "" : ", ") +
              (*x.increase < *reference.increase ? "protected" : "not protected");
      out << " `" << r.arm << "` " << ways << " (" << Number(*x.increase, "%+.4f") << ");";
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace

std::string GatingClaims(const SweepReport& report) {
  std::ostringstream md;
  md << "\nThe value-gating paper's statements at this sweep's scale (docs/harness.md §4):\n\n"
     << "1. Value-only gates keep the first-token sink, the query-controlled output gate "
        "removes it: "
     << SinkStatement(report) << "\n"
     << "2. Abstention and filtering gains add up:\n"
     << AdditivityStatement(report)
     << "3. Interference is resisted in distinguishable ways (filtering: a lower gate on "
        "corrupted rows; abstaining: more sink mass under corruption; protected: a smaller loss "
        "increase than exact's):\n"
     << InterferenceStatement(report);
  return md.str();
}

}  // namespace lpattn::harness
