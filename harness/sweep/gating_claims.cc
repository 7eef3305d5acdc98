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
      if (exact->runs[s].has_final_loss() && both->runs[s].has_final_loss() &&
          a->runs[s].has_final_loss() && b->runs[s].has_final_loss()) {
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

// (3) Interference, read off per-seed differences with their 95% paired t intervals.
using PerRun = ArmReport::InterferenceRow::PerRun;
using Field = std::optional<double> PerRun::*;

// Per seed, a's x minus b's y where both exist (every arm's runs are in the sweep's seed order).
PairedSummary PairedDifference(const std::vector<PerRun>& a, Field x, const std::vector<PerRun>& b,
                               Field y) {
  std::vector<double> differences;
  for (size_t s = 0; s < a.size() && s < b.size(); ++s) {
    if (a[s].*x && b[s].*y) differences.push_back(*(a[s].*x) - *(b[s].*y));
  }
  return SummarizePaired(differences);
}

// `below` when the difference's interval lies below 0, `above` when above it, "<what> within
// noise" when it covers 0; with one seed, the sign alone, marked n=1. Empty without data.
std::string Direction(const PairedSummary& s, const std::string& below, const std::string& above,
                      const std::string& what) {
  if (!s.mean) return "";
  if (!s.t95) return (*s.mean < 0.0 ? below : above) + " (n=1)";
  if (s.t95->Covers(0.0)) return what + " within noise";
  return s.t95->high < 0.0 ? below : above;
}

std::string Interval95(const PairedSummary& s) {
  if (!s.t95) return Number(*s.mean, "%+.4f") + ", n=1";
  return Number(*s.mean, "%+.4f") + " [" + Number(s.t95->low, "%+.4f") + ", " +
         Number(s.t95->high, "%+.4f") + "], n=" + std::to_string(s.n);
}

// One arm's ways of resisting, against exact's row: filtering (gate lower on corrupted rows
// than on clean ones), abstaining (more sink mass under corruption), protection (a smaller
// loss increase than exact's, same seed).
std::string Ways(const ArmReport::InterferenceRow& x, const ArmReport::InterferenceRow& exact) {
  std::vector<std::string> ways;
  const auto add = [&](const std::string& way) {
    if (!way.empty()) ways.push_back(way);
  };
  add(Direction(PairedDifference(x.per_run, &PerRun::gate_corrupted, x.per_run,
                                 &PerRun::gate_clean),
                "filters", "does not filter", "filtering"));
  add(Direction(PairedDifference(x.per_run, &PerRun::abstention, x.per_run,
                                 &PerRun::abstention_clean),
                "abstains less", "abstains more", "abstention"));
  const PairedSummary protection =
      PairedDifference(x.per_run, &PerRun::increase, exact.per_run, &PerRun::increase);
  add(Direction(protection, "protected", "less protected than exact", "protection"));
  std::string text;
  for (const std::string& way : ways) text += (text.empty() ? "" : ", ") + way;
  if (protection.mean) text += " (increase minus exact's " + Interval95(protection) + ")";
  return text;
}

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
      out << " `" << r.arm << "` " << Ways(r.interference[k], reference) << ";";
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
        "increase than exact's; each a per-seed difference whose 95% paired t interval excludes "
        "0):\n"
     << InterferenceStatement(report);
  return md.str();
}

}  // namespace lpattn::harness
