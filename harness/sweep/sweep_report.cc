// The report of a sweep (docs/harness.md §3): every arm's runs paired by seed with the reference
// arm's (`exact` unless the sweep names another), their means, sample standard deviations and
// 95% intervals (paired_stats.h), the evaluation swaps and the attention diagnostics, written
// as report.json and report.md. Running the sweep is sweep.cc.
#include "harness/sweep/sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "harness/common/atomic_file.h"
#include "harness/sweep/gating_claims.h"
#include "harness/sweep/sweep_internal.h"

namespace lpattn::harness {
namespace fs = std::filesystem;
using nlohmann::json;
using namespace sweep_internal;
namespace {

std::optional<double> Mean(const std::vector<double>& values) {
  if (values.empty()) return std::nullopt;
  double sum = 0.0;
  for (const double v : values) sum += v;
  return sum / double(values.size());
}

std::optional<double> SampleStd(const std::vector<double>& values) {
  if (values.size() < 2) return std::nullopt;
  const double mean = *Mean(values);
  double sum = 0.0;
  for (const double v : values) sum += (v - mean) * (v - mean);
  return std::sqrt(sum / double(values.size() - 1));
}

std::string Signed(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%+.4f", value);
  return buffer;
}

std::string JoinSeeds(const std::vector<uint64_t>& seeds) {
  std::string text;
  for (const uint64_t s : seeds) text += (text.empty() ? "" : ", ") + std::to_string(s);
  return text;
}

template <typename Value>
json Optional(const std::optional<Value>& value) {
  return value ? json(*value) : json(nullptr);
}

// The lowest val_loss of a metrics.csv, or nothing when the file is missing or has no rows.
std::optional<double> BestValLoss(const fs::path& metrics) {
  std::ifstream in(metrics);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  std::vector<std::string> header;
  std::istringstream names(line);
  for (std::string name; std::getline(names, name, ',');) header.push_back(name);
  const auto column = std::find(header.begin(), header.end(), "val_loss");
  if (column == header.end()) return std::nullopt;
  const long index = column - header.begin();
  std::optional<double> best;
  while (std::getline(in, line)) {
    std::istringstream cells(line);
    std::string cell;
    for (long i = 0; i <= index && std::getline(cells, cell, ','); ++i) {}
    char* end = nullptr;
    const double value = std::strtod(cell.c_str(), &end);
    if (end == cell.c_str() || !std::isfinite(value) || value < 0) continue;
    if (!best || value < *best) best = value;
  }
  return best;
}

// Appends a run's attention diagnostics (zero_frac, first_mass, sink_rate, abstention) to
// `values`, when its attention.json exists; a null abstention (no sink) is left out.
void ReadDiagnostics(const fs::path& path, std::vector<double>* values) {
  if (!fs::exists(path)) return;
  const json attention = ReadJson(path);
  const char* keys[4] = {"zero_frac", "first_mass", "sink_rate", "abstention"};
  try {
    for (size_t k = 0; k < 4; ++k) {
      if (!attention.at(keys[k]).is_null()) values[k].push_back(attention.at(keys[k]).get<double>());
    }
  } catch (const json::exception& e) {
    throw std::runtime_error(path.string() + " is malformed: " + e.what());
  }
}

// A number of a JSON object, or nothing when it is null or absent.
std::optional<double> NumberOrNull(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return j.at(key).get<double>();
}

// Mean of each field over the files that exist, in the order of `keys`, and each file's
// values (all nullopt for a file that does not exist).
struct FileMeans {
  int runs = 0;
  std::vector<std::optional<double>> means;
  std::vector<std::vector<std::optional<double>>> per_file;  // [file][key]
};
FileMeans MeanOfFiles(const std::vector<fs::path>& files,
                      const std::vector<std::function<std::optional<double>(const json&)>>& keys) {
  std::vector<std::vector<double>> values(keys.size());
  FileMeans out;
  for (const fs::path& file : files) {
    std::vector<std::optional<double>>& row = out.per_file.emplace_back(keys.size());
    if (!fs::exists(file)) continue;
    const json j = ReadJson(file);
    try {
      for (size_t k = 0; k < keys.size(); ++k) {
        row[k] = keys[k](j);
        if (row[k]) values[k].push_back(*row[k]);
      }
    } catch (const json::exception& e) {
      throw std::runtime_error(file.string() + " is malformed: " + e.what());
    }
    ++out.runs;
  }
  for (const std::vector<double>& v : values) out.means.push_back(Mean(v));
  return out;
}

// The sweep's interference and context evaluations of one arm, means over its runs' files.
void ReadEvaluations(const fs::path& dir, const SweepExtras& extras, ArmReport& report) {
  std::vector<fs::path> files;
  const auto runs_files = [&](const std::string& name) {
    files.clear();
    for (const SeedRun& run : report.runs) files.push_back(dir / run.dir / name);
    return files;
  };
  const auto field = [](const char* key) {
    return [key](const json& j) { return NumberOrNull(j, key); };
  };
  for (const std::string& spec : extras.interference) {
    const FileMeans m = MeanOfFiles(
        runs_files(InterferenceFileName(spec)),
        {field("increase"), field("corrupted_share"), field("corrupted_mass"),
         field("gate_corrupted"), field("gate_clean"), field("abstention_clean"),
         field("abstention")});
    ArmReport::InterferenceRow& row = report.interference.emplace_back();
    row = {spec, m.runs, m.means[0], m.means[1], m.means[2], m.means[3], m.means[4], m.means[5],
           m.means[6], {}};
    for (const std::vector<std::optional<double>>& x : m.per_file) {
      row.per_run.push_back({x[0], x[3], x[4], x[5], x[6]});
    }
  }
  const auto last_bucket = [](const char* key) {
    return [key](const json& j) { return NumberOrNull(j.at("buckets").back(), key); };
  };
  for (const int64_t context : extras.contexts) {
    const FileMeans m =
        MeanOfFiles(runs_files(ContextFileName(context)),
                    {field("val_loss"), last_bucket("loss"), last_bucket("entropy"),
                     last_bucket("max_weight")});
    report.contexts.push_back({context, m.runs, m.means[0], m.means[1], m.means[2], m.means[3]});
  }
}

json IntervalJson(const std::optional<Interval>& interval) {
  return interval ? json::array({interval->low, interval->high}) : json(nullptr);
}

json InterferenceRowsJson(const ArmReport& r) {
  json rows = json::array();
  for (const ArmReport::InterferenceRow& x : r.interference) {
    rows.push_back({{"interference", x.interference}, {"runs", x.runs},
                    {"increase", Optional(x.increase)}, {"corrupted_share", Optional(x.share)},
                    {"corrupted_mass", Optional(x.mass)},
                    {"gate_corrupted", Optional(x.gate_corrupted)},
                    {"gate_clean", Optional(x.gate_clean)},
                    {"abstention_clean", Optional(x.abstention_clean)},
                    {"abstention", Optional(x.abstention)}});
  }
  return rows;
}

json ContextRowsJson(const ArmReport& r) {
  json rows = json::array();
  for (const ArmReport::ContextRow& x : r.contexts) {
    rows.push_back({{"context", x.context}, {"runs", x.runs}, {"val_loss", Optional(x.loss)},
                    {"last_bucket_loss", Optional(x.last_loss)},
                    {"last_bucket_entropy", Optional(x.last_entropy)},
                    {"last_bucket_max_weight", Optional(x.last_max_weight)}});
  }
  return rows;
}

json ReportJson(const SweepReport& report, const json& sweep) {
  const std::vector<ArmReport>& reports = report.arms;
  json arms = json::array();
  bool has_reference = false;
  for (const ArmReport& r : reports) {
    has_reference = has_reference || r.has_reference;
    json runs = json::array();
    for (const SeedRun& run : r.runs) {
      runs.push_back({{"seed", run.seed},
                      {"dir", run.dir},
                      {"done", run.done},
                      {"final_val_loss",
                       run.has_final_loss() ? json(run.final_val_loss) : json(nullptr)},
                      {"tokens_per_s", run.done ? json(run.tokens_per_s) : json(nullptr)},
                      {"tokens", run.done ? json(run.tokens) : json(nullptr)},
                      {"best_val_loss", Optional(run.best_val_loss)},
                      {"diverged_at_tokens", Optional(run.diverged_at_tokens)}});
    }
    json gap = nullptr;
    if (r.has_reference) {
      json per_seed = json::array();
      for (const SeedGap& g : r.gaps) per_seed.push_back({{"seed", g.seed}, {"gap", g.gap}});
      gap = {{"mean", Optional(r.gap.mean)},
             {"std", Optional(r.gap.std_dev)},
             {"n", r.gap.n},
             {"t95", IntervalJson(r.gap.t95)},
             {"bootstrap95", IntervalJson(r.gap.bootstrap95)},
             {"verdict", r.verdict},
             {"per_seed", per_seed},
             {"unpaired_seeds", r.unpaired_seeds}};
    }
    arms.push_back({{"arm", r.arm},
                    {"dir", ArmDirName(r.arm)},
                    {"finished", r.finished()},
                    {"runs", runs},
                    {"missing_seeds", r.missing_seeds},
                    {"mean_val_loss", Optional(r.mean_val_loss)},
                    {"tokens_per_s_mean", Optional(r.tokens_per_s_mean)},
                    {"rise_mean", Optional(r.rise_mean)},
                    {"attention", {{"zero_frac", Optional(r.zero_frac)},
                                   {"first_mass", Optional(r.first_mass)},
                                   {"sink_rate", Optional(r.sink_rate)},
                                   {"abstention", Optional(r.abstention)}}},
                    {"paper", r.paper.empty() ? json(nullptr) : json(r.paper)},
                    {"interference", InterferenceRowsJson(r)},
                    {"contexts", ContextRowsJson(r)},
                    {"gap_to_reference", gap}});
  }
  json swaps = json::array();
  for (const SwapReport& s : report.swaps) {
    json runs = json::array();
    for (const SeedSwap& run : s.runs) {
      runs.push_back({{"seed", run.seed},
                      {"own_val_loss", run.own_val_loss},
                      {"swapped_val_loss", run.swapped_val_loss}});
    }
    swaps.push_back({{"trained", s.swap.trained},
                     {"with", s.swap.with},
                     {"paper", s.swap.paper.empty() ? json(nullptr) : json(s.swap.paper)},
                     {"runs", runs},
                     {"missing_seeds", s.missing_seeds},
                     {"swapped_mean", Optional(s.swapped_mean)},
                     {"change_mean", Optional(s.change_mean)},
                     {"change_std", Optional(s.change_std)},
                     {"gap_mean", Optional(s.gap_mean)},
                     {"gap_std", Optional(s.gap_std)}});
  }
  return {{"reference", has_reference ? json(report.reference) : json(nullptr)},
          {"plan", report.plan.empty() ? json(nullptr) : json(report.plan)},
          {"seeds", sweep.at("seeds")},
          {"config", sweep.at("config")},
          {"arms", arms},
          {"swaps", swaps}};
}

std::string ReportMarkdown(const SweepReport& report, const json& sweep) {
  const json& config = sweep.at("config");
  std::ostringstream md;
  md << "# Sweep report" << (report.plan.empty() ? "" : ": plan `" + report.plan + "`") << "\n\n"
     << "Preset `" << config.value("preset", std::string("?")) << "`, "
     << config.value("steps", 0) << " steps, seeds "
     << JoinSeeds(sweep.at("seeds").get<std::vector<uint64_t>>()) << ". "
     << "Final validation loss in nats; gaps to `" << report.reference << "` are paired by "
     << "seed (std: sample standard deviation over seeds; 95% intervals of the mean gap from "
     << "the paired t distribution and from a percentile bootstrap over seeds; the verdict is "
     << "\"within noise\" when the t interval covers 0). Rise: final minus best validation "
     << "loss of a run (mean over seeds). Tokens: training tokens each run saw.\n\n"
     << FormatReportTable(report);
  return md.str();
}


const ArmReport* FindArm(const std::vector<ArmReport>& reports, const std::string& arm) {
  const auto it = std::find_if(reports.begin(), reports.end(),
                               [&](const ArmReport& r) { return r.arm == arm; });
  return it == reports.end() ? nullptr : &*it;
}

// One swap's rows: each finished run of the trained arm with its swap file.
SwapReport ReportSwap(const fs::path& dir, const EvalSwap& swap,
                      const std::vector<ArmReport>& arms, const std::string& reference) {
  SwapReport report{swap, {}, {}, {}, {}, {}, {}, {}};
  const ArmReport* trained = FindArm(arms, swap.trained);
  const ArmReport* exact = FindArm(arms, reference);
  std::vector<double> swapped, changes, gaps;
  for (size_t i = 0; trained && i < trained->runs.size(); ++i) {
    const SeedRun& run = trained->runs[i];
    const fs::path file = dir / run.dir / SwapFileName(swap.with);
    if (!run.has_final_loss() || !fs::exists(file)) {
      report.missing_seeds.push_back(run.seed);
      continue;
    }
    const json result = ReadJson(file);
    double loss = 0.0;
    try {
      loss = result.at("val_loss").get<double>();
    } catch (const json::exception& e) {
      throw std::runtime_error(file.string() + " is malformed: " + e.what());
    }
    report.runs.push_back({run.seed, run.final_val_loss, loss});
    swapped.push_back(loss);
    changes.push_back(loss - run.final_val_loss);
    if (exact && exact->runs[i].has_final_loss()) {
      gaps.push_back(loss - exact->runs[i].final_val_loss);
    }
  }
  report.swapped_mean = Mean(swapped);
  report.change_mean = Mean(changes);
  report.change_std = SampleStd(changes);
  report.gap_mean = Mean(gaps);
  report.gap_std = SampleStd(gaps);
  return report;
}

}  // namespace

int ArmReport::finished() const {
  int count = 0;
  for (const SeedRun& run : runs) count += run.done ? 1 : 0;
  return count;
}

bool ArmReport::diverged() const {
  for (const SeedRun& run : runs) {
    if (run.diverged_at_tokens) return true;
  }
  return false;
}

SweepReport ReportSweep(const std::string& out_dir, const std::string& reference_arm) {
  const fs::path dir(out_dir);
  if (!fs::exists(dir / "sweep.json")) {
    throw std::runtime_error(out_dir + " is not a sweep directory (it has no sweep.json)");
  }
  const json sweep = ReadJson(dir / "sweep.json");
  std::vector<std::string> arms;
  std::vector<uint64_t> seeds;
  SweepExtras extras;
  uint64_t default_tokens = 0;
  try {
    arms = sweep.at("arms").get<std::vector<std::string>>();
    seeds = sweep.at("seeds").get<std::vector<uint64_t>>();
    sweep.at("config");
    extras = ExtrasFromJson(sweep);
    const json& config = sweep.at("config");
    default_tokens = config.at("steps").get<uint64_t>() * config.at("batch").get<uint64_t>() *
                     config.at("model").at("context").get<uint64_t>();
  } catch (const json::exception& e) {
    throw std::runtime_error((dir / "sweep.json").string() + " is malformed: " + e.what());
  }

  std::vector<ArmReport> reports;
  for (const std::string& arm : arms) {
    ArmReport report;
    report.arm = arm;
    if (const auto paper = extras.paper.find(arm); paper != extras.paper.end()) {
      report.paper = paper->second;
    }
    std::vector<double> losses, rates, rises;
    std::vector<double> diagnostics[4];  // zero_frac, first_mass, sink_rate, abstention
    for (const uint64_t seed : seeds) {
      SeedRun run;
      run.seed = seed;
      run.dir = RunDirName(arm, seed);
      const fs::path summary_path = dir / run.dir / "summary.json";
      if (fs::exists(summary_path)) {
        const json summary = ReadJson(summary_path);
        try {
          if (summary.contains("arm") && summary.at("arm").get<std::string>() != arm) {
            throw std::runtime_error(summary_path.string() + " is a run of arm '" +
                                     summary.at("arm").get<std::string>() + "', not '" + arm +
                                     "'");
          }
          run.final_val_loss = summary.at("final_val_loss").get<double>();
          run.tokens_per_s = summary.at("tokens_per_s").get<double>();
          // Summaries written before "tokens" was recorded: the sweep's config says it.
          run.tokens = summary.contains("tokens") ? summary.at("tokens").get<uint64_t>()
                                                  : default_tokens;
          if (summary.contains("diverged_at_step")) {
            run.diverged_at_tokens = summary.at("diverged_at_tokens").get<uint64_t>();
          }
        } catch (const json::exception& e) {
          throw std::runtime_error(summary_path.string() + " is malformed: " + e.what());
        }
        run.done = true;
        if (run.diverged_at_tokens) {  // no final loss: listed apart (DivergedNote)
          report.runs.push_back(run);
          continue;
        }
        run.best_val_loss = BestValLoss(dir / run.dir / "metrics.csv");
        losses.push_back(run.final_val_loss);
        rates.push_back(run.tokens_per_s);
        if (run.best_val_loss) rises.push_back(run.final_val_loss - *run.best_val_loss);
        ReadDiagnostics(dir / run.dir / "attention.json", diagnostics);
      } else {
        report.missing_seeds.push_back(seed);
      }
      report.runs.push_back(run);
    }
    report.mean_val_loss = Mean(losses);
    report.tokens_per_s_mean = Mean(rates);
    report.rise_mean = Mean(rises);
    report.zero_frac = Mean(diagnostics[0]);
    report.first_mass = Mean(diagnostics[1]);
    report.sink_rate = Mean(diagnostics[2]);
    report.abstention = Mean(diagnostics[3]);
    ReadEvaluations(dir, extras, report);
    reports.push_back(std::move(report));
  }

  const std::string reference_name = !reference_arm.empty()     ? reference_arm
                                     : !extras.reference.empty() ? extras.reference
                                                                 : kDefaultReferenceArm;
  const auto reference = std::find_if(reports.begin(), reports.end(),
                                      [&](const ArmReport& r) { return r.arm == reference_name; });
  if (reference == reports.end() && reference_name != kDefaultReferenceArm) {
    throw std::invalid_argument("report: the reference arm '" + reference_name +
                                "' is not one of the sweep's arms");
  }
  if (reference != reports.end()) {
    const std::vector<SeedRun> exact_runs = reference->runs;  // same seeds, same order
    for (ArmReport& report : reports) {
      report.has_reference = true;
      std::vector<double> gaps;
      for (size_t i = 0; i < report.runs.size(); ++i) {
        const SeedRun& run = report.runs[i];
        if (!run.has_final_loss()) continue;
        if (!exact_runs[i].has_final_loss()) {
          report.unpaired_seeds.push_back(run.seed);
          continue;
        }
        report.gaps.push_back({run.seed, run.final_val_loss - exact_runs[i].final_val_loss});
        gaps.push_back(report.gaps.back().gap);
      }
      report.gap = SummarizePaired(gaps);
      report.verdict = gaps.empty() && report.diverged() ? "diverged" : Verdict(report.gap);
    }
  }

  SweepReport report{extras.plan, reference_name, std::move(reports), {}};
  for (const EvalSwap& swap : extras.swaps) {
    report.swaps.push_back(ReportSwap(dir, swap, report.arms, reference_name));
  }
  WriteFileAtomically((dir / "report.json").string(), ReportJson(report, sweep).dump(2) + "\n");
  WriteFileAtomically((dir / "report.md").string(), ReportMarkdown(report, sweep));
  return report;
}

namespace {

// "+0.0123 ± 0.0045 (n=3)", "+0.0123 (n=1)" or `none`.
std::string MeanStd(const std::optional<double>& mean, const std::optional<double>& std_dev,
                    size_t n, const char* none) {
  if (!mean) return none;
  if (!std_dev) return Signed(*mean) + " (n=1)";
  return Signed(*mean) + " ± " + Fixed(*std_dev, 4) + " (n=" + std::to_string(n) + ")";
}

std::string IntervalCell(const std::optional<Interval>& interval) {
  if (!interval) return "—";
  char buffer[96];
  std::snprintf(buffer, sizeof(buffer), "[%+.4f, %+.4f]", interval->low, interval->high);
  return buffer;
}

// The gap, its two intervals, the verdict and the per-seed gaps: five cells.
std::string GapCells(const ArmReport& r, const std::string& reference) {
  if (!r.has_reference) return "n/a | n/a | n/a | n/a | n/a";
  if (r.arm == reference) return "reference | — | — | — | —";
  std::string cells;
  for (const SeedGap& g : r.gaps) {
    cells += (cells.empty() ? "" : ", ") + std::to_string(g.seed) + ": " + Signed(g.gap);
  }
  for (const uint64_t seed : r.unpaired_seeds) {
    cells += (cells.empty() ? "" : ", ") + std::to_string(seed) + ": no " + reference + " run";
  }
  return MeanStd(r.gap.mean, r.gap.std_dev, r.gap.n, "no paired seeds") + " | " +
         IntervalCell(r.gap.t95) + " | " + IntervalCell(r.gap.bootstrap95) + " | " + r.verdict +
         " | " + (cells.empty() ? "—" : cells);
}

// "96k", "1.5M", "30.0M": a token count for the tables.
std::string FormatTokens(double tokens) {
  char buffer[32];
  if (tokens >= 1e6) {
    std::snprintf(buffer, sizeof(buffer), "%.1fM", tokens / 1e6);
  } else if (tokens >= 1e3) {
    std::snprintf(buffer, sizeof(buffer), "%.0fk", tokens / 1e3);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.0f", tokens);
  }
  return buffer;
}

// " (diverged: seed 1 at 4.6M tokens, seed 2 at 4.8M)" for an arm with diverged runs, else "".
std::string DivergedNote(const ArmReport& r) {
  std::string note;
  for (const SeedRun& run : r.runs) {
    if (!run.diverged_at_tokens) continue;
    const std::string at = FormatTokens(double(*run.diverged_at_tokens));
    if (note.empty()) {
      note = " (diverged: seed " + std::to_string(run.seed) + " at " + at + " tokens";
    } else {
      note += ", seed " + std::to_string(run.seed) + " at " + at;
    }
  }
  return note.empty() ? note : note + ")";
}

std::string TokensCell(const ArmReport& r) {
  std::vector<double> tokens;
  for (const SeedRun& run : r.runs) {
    if (run.done) tokens.push_back(double(run.tokens));
  }
  const std::optional<double> mean = Mean(tokens);
  return mean ? FormatTokens(*mean) : std::string("—");
}

std::string SwapTable(const std::vector<SwapReport>& swaps, bool with_paper,
                      const std::string& reference) {
  std::ostringstream table;
  table << "\nEvaluation swaps: the final checkpoint of each run of the trained arm, evaluated "
           "with another arm.\n\n"
        << "| trained with | evaluated with | runs | val loss (mean) | change from own arm | "
           "gap to "
        << reference << " |"
        << (with_paper ? " paper |" : "") << "\n|---|---|---|---|---|---|"
        << (with_paper ? "---|" : "") << "\n";
  for (const SwapReport& s : swaps) {
    const size_t total = s.runs.size() + s.missing_seeds.size();
    table << "| `" << s.swap.trained << "` | `" << s.swap.with << "` | " << s.runs.size() << '/'
          << total;
    if (!s.missing_seeds.empty()) table << " (missing seed " << JoinSeeds(s.missing_seeds) << ')';
    table << " | " << (s.swapped_mean ? Fixed(*s.swapped_mean, 4) : "—") << " | "
          << MeanStd(s.change_mean, s.change_std, s.runs.size(), "—") << " | "
          << MeanStd(s.gap_mean, s.gap_std, s.runs.size(), "—") << " |";
    if (with_paper) table << ' ' << (s.swap.paper.empty() ? "—" : s.swap.paper) << " |";
    table << '\n';
  }
  return table.str();
}

std::string DiagnosticsTable(const std::vector<ArmReport>& reports) {
  std::ostringstream table;
  table << "\nAttention on the validation windows (mean over seeds): the share of visible weights "
           "that are exactly 0, the mean first-token mass, the share of heads whose first-token "
           "mass exceeds 0.3 (sink rate), and the mass a sink takes.\n\n"
        << "| arm | zero fraction | first-token mass | sink rate | abstention |\n"
        << "|---|---|---|---|---|\n";
  auto cell = [](const std::optional<double>& x) { return x ? Fixed(*x, 4) : std::string("—"); };
  for (const ArmReport& r : reports) {
    table << "| `" << r.arm << "` | " << cell(r.zero_frac) << " | " << cell(r.first_mass) << " | "
          << cell(r.sink_rate) << " | " << cell(r.abstention) << " |\n";
  }
  return table.str();
}

std::string Cell(const std::optional<double>& x, int digits = 4) {
  return x ? Fixed(*x, digits) : std::string("—");
}

std::string InterferenceTable(const std::vector<ArmReport>& reports) {
  std::ostringstream table;
  table << "\nInterference at evaluation (docs/harness.md §1.5), means over runs: loss increase "
           "over the clean evaluation, share of value positions corrupted and the attention mass "
           "on them, value gates on corrupted and clean positions, sink abstention clean and "
           "corrupted.\n\n"
        << "| arm | interference | runs | loss increase | corrupted share | mass on corrupted | "
           "gate (corrupted) | gate (clean) | abstention (clean) | abstention (corrupted) |\n"
        << "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const ArmReport& r : reports) {
    for (const ArmReport::InterferenceRow& x : r.interference) {
      table << "| `" << r.arm << "` | `" << x.interference << "` | " << x.runs << " | "
            << (x.increase ? Signed(*x.increase) : "—") << " | " << Cell(x.share) << " | "
            << Cell(x.mass) << " | " << Cell(x.gate_corrupted) << " | " << Cell(x.gate_clean)
            << " | " << Cell(x.abstention_clean) << " | " << Cell(x.abstention) << " |\n";
    }
  }
  return table.str();
}

std::string ContextTable(const std::vector<ArmReport>& reports) {
  std::ostringstream table;
  table << "\nEvaluation at longer contexts (docs/harness.md §3.8), means over runs: validation "
           "loss, and in the last bucket of positions the loss, the attention entropy (nats) and "
           "the largest weight share per row.\n\n"
        << "| arm | context | runs | val loss | last-bucket loss | entropy | max weight |\n"
        << "|---|---|---|---|---|---|---|\n";
  for (const ArmReport& r : reports) {
    for (const ArmReport::ContextRow& x : r.contexts) {
      table << "| `" << r.arm << "` | " << x.context << " | " << x.runs << " | " << Cell(x.loss)
            << " | " << Cell(x.last_loss) << " | " << Cell(x.last_entropy, 3) << " | "
            << Cell(x.last_max_weight, 3) << " |\n";
    }
  }
  return table.str();
}

}  // namespace

std::string FormatReportTable(const SweepReport& report) {
  const std::vector<ArmReport>& reports = report.arms;
  bool has_reference = false, with_paper = false;
  for (const ArmReport& r : reports) with_paper = with_paper || !r.paper.empty();
  for (const SwapReport& s : report.swaps) with_paper = with_paper || !s.swap.paper.empty();
  std::ostringstream table;
  const std::string& reference = report.reference;
  table << "| arm | runs | final val loss (mean) | gap to " << reference << " (mean ± std) |"
        << (with_paper ? " paper |" : "")
        << " 95% CI (paired t) | 95% CI (bootstrap) | verdict | per-seed gaps | rise after best "
           "| tokens per run | tokens/s |\n"
        << "|---|---|---|---|" << (with_paper ? "---|" : "") << "---|---|---|---|---|---|---|\n";
  for (const ArmReport& r : reports) {
    has_reference = has_reference || r.has_reference;
    table << "| `" << r.arm << "` | " << r.finished() << '/' << r.runs.size();
    if (!r.missing_seeds.empty()) table << " (missing seed " << JoinSeeds(r.missing_seeds) << ')';
    table << DivergedNote(r);
    table << " | " << (r.mean_val_loss ? Fixed(*r.mean_val_loss, 4) : "—") << " | ";
    std::string gaps = GapCells(r, reference);
    if (with_paper) {  // the paper's column goes right after our mean gap
      const size_t bar = gaps.find(" | ");
      gaps.insert(bar, " | " + (r.paper.empty() ? std::string("—") : r.paper));
    }
    table << gaps << " | " << (r.rise_mean ? Fixed(*r.rise_mean, 4) : "—") << " | "
          << TokensCell(r) << " | "
          << (r.tokens_per_s_mean ? FormatRate(*r.tokens_per_s_mean) : "—") << " |\n";
  }
  if (!has_reference) {
    table << "\nNo `" << reference << "` arm in this sweep: gaps are not reported.\n";
  }
  if (!report.swaps.empty()) table << SwapTable(report.swaps, with_paper, reference);
  const bool diagnosed = std::any_of(reports.begin(), reports.end(),
                                     [](const ArmReport& r) { return r.zero_frac.has_value(); });
  if (diagnosed) table << DiagnosticsTable(reports);
  if (!reports.empty() && !reports[0].interference.empty()) table << InterferenceTable(reports);
  if (!reports.empty() && !reports[0].contexts.empty()) table << ContextTable(reports);
  if (report.plan == "gating-paper") table << GatingClaims(report);
  return table.str();
}

}  // namespace lpattn::harness
