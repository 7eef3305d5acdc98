// Sweeps and their report (spec/harness.md §3).
#include "harness/sweep.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "harness/checkpoint.h"

namespace lpattn::harness {
namespace fs = std::filesystem;
using nlohmann::json;
namespace {

constexpr size_t kMaxDirName = 120;

uint64_t Fnv1a(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

bool IsSafe(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '=' || c == '+' || c == '-';
}

json ReadJson(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw std::runtime_error(path.string() + " is not valid JSON: " + e.what());
  }
}

// The base config as sweep.json records it: arm and seed vary across the sweep.
json SweepConfigJson(const TrainConfig& base) {
  json j = base;
  j.erase("arm");
  j.erase("seed");
  return j;
}

// The first field (thread count aside: it changes no number) in which two configs differ, or
// an empty string.
std::string FirstDifference(json a, json b) {
  a.erase("threads");
  b.erase("threads");
  for (auto it = a.begin(); it != a.end(); ++it) {
    if (!b.contains(it.key()) || b[it.key()] != it.value()) {
      return it.key() + " is " + b.value(it.key(), json()).dump() + " there, " +
             it.value().dump() + " here";
    }
  }
  for (auto it = b.begin(); it != b.end(); ++it) {
    if (!a.contains(it.key())) return it.key() + " is set there, absent here";
  }
  return "";
}

template <class T>
void RejectDuplicates(const std::vector<T>& items, const char* what) {
  std::set<T> seen;
  for (const T& item : items) {
    if (!seen.insert(item).second) {
      std::ostringstream message;
      message << "sweep: " << what << ' ' << item << " is listed twice";
      throw std::invalid_argument(message.str());
    }
  }
}

void RejectDirCollisions(const std::vector<std::string>& arms) {
  std::map<std::string, std::string> owner;
  for (const std::string& arm : arms) {
    const auto [it, inserted] = owner.emplace(ArmDirName(arm), arm);
    if (!inserted && it->second != arm) {
      throw std::invalid_argument("sweep: arms '" + it->second + "' and '" + arm +
                                  "' would share the directory " + it->first);
    }
  }
}

template <class T>
std::vector<T> Union(std::vector<T> first, const std::vector<T>& second) {
  for (const T& item : second) {
    if (std::find(first.begin(), first.end(), item) == first.end()) first.push_back(item);
  }
  return first;
}

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

std::string Fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
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

json Optional(const std::optional<double>& value) {
  return value ? json(*value) : json(nullptr);
}

json ReportJson(const std::vector<ArmReport>& reports, const json& sweep) {
  json arms = json::array();
  bool has_reference = false;
  for (const ArmReport& r : reports) {
    has_reference = has_reference || r.has_reference;
    json runs = json::array();
    for (const SeedRun& run : r.runs) {
      runs.push_back({{"seed", run.seed},
                      {"dir", run.dir},
                      {"done", run.done},
                      {"final_val_loss", run.done ? json(run.final_val_loss) : json(nullptr)},
                      {"tokens_per_s", run.done ? json(run.tokens_per_s) : json(nullptr)}});
    }
    json gap = nullptr;
    if (r.has_reference) {
      json per_seed = json::array();
      for (const SeedGap& g : r.gaps) per_seed.push_back({{"seed", g.seed}, {"gap", g.gap}});
      gap = {{"mean", Optional(r.gap_mean)},
             {"std", Optional(r.gap_std)},
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
                    {"gap_to_exact", gap}});
  }
  return {{"reference", has_reference ? json(kReferenceArm) : json(nullptr)},
          {"seeds", sweep.at("seeds")},
          {"config", sweep.at("config")},
          {"arms", arms}};
}

std::string ReportMarkdown(const std::vector<ArmReport>& reports, const json& sweep) {
  const json& config = sweep.at("config");
  std::ostringstream md;
  md << "# Sweep report\n\n"
     << "Preset `" << config.value("preset", std::string("?")) << "`, "
     << config.value("steps", 0) << " steps, seeds "
     << JoinSeeds(sweep.at("seeds").get<std::vector<uint64_t>>()) << ". "
     << "Final validation loss in nats; gaps to `exact` are paired by seed "
     << "(std: sample standard deviation over seeds).\n\n"
     << FormatReportTable(reports);
  return md.str();
}

}  // namespace

std::vector<std::string> SplitArmList(const std::string& list) {
  std::vector<std::string> arms;
  std::istringstream pieces(list);
  std::string piece;
  while (std::getline(pieces, piece, ',')) {
    if (piece.empty()) continue;
    // "key=value" continues the arm before it; an arm spec never starts that way.
    const size_t equals = piece.find('=');
    const bool continues =
        !arms.empty() && equals != std::string::npos && equals > 0 &&
        std::all_of(piece.begin(), piece.begin() + long(equals), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
        });
    if (continues) {
      arms.back() += "," + piece;
    } else {
      arms.push_back(piece);
    }
  }
  return arms;
}

std::string ArmDirName(const std::string& arm) {
  std::string name;
  for (const char c : arm) name += IsSafe(c) ? c : '_';
  if (name.empty()) return "_";
  if (name[0] == '.') name[0] = '_';
  if (name.size() > kMaxDirName) {
    char hash[17];
    std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(Fnv1a(arm)));
    name = name.substr(0, kMaxDirName - 17) + "-" + hash;
  }
  return name;
}

std::string RunDirName(const std::string& arm, uint64_t seed) {
  return ArmDirName(arm) + "/seed-" + std::to_string(seed);
}

int ArmReport::finished() const {
  int count = 0;
  for (const SeedRun& run : runs) count += run.done ? 1 : 0;
  return count;
}

void RunSweep(const TrainConfig& base, const std::vector<std::string>& arms,
              const std::vector<uint64_t>& seeds, const std::string& out_dir,
              const ProgressFn& progress, const SweepRunFn& on_run) {
  if (arms.empty()) throw std::invalid_argument("sweep: no arms given");
  if (seeds.empty()) throw std::invalid_argument("sweep: no seeds given");
  RejectDuplicates(arms, "arm");
  RejectDuplicates(seeds, "seed");
  for (const std::string& arm : arms) {
    TrainConfig config = base;
    config.arm = arm;
    ValidateConfig(config);
  }

  const fs::path dir(out_dir);
  const fs::path manifest = dir / "sweep.json";
  std::vector<std::string> all_arms = arms;
  std::vector<uint64_t> all_seeds = seeds;
  if (!fs::exists(manifest) && fs::exists(dir / "config.json")) {
    throw std::invalid_argument(out_dir +
                                " holds a training run, not a sweep; choose another --out");
  }
  if (fs::exists(manifest)) {
    const json existing = ReadJson(manifest);
    const std::string difference =
        FirstDifference(SweepConfigJson(base), existing.at("config"));
    if (!difference.empty()) {
      throw std::invalid_argument("sweep directory " + out_dir +
                                  " holds a sweep of a different config (" + difference +
                                  "); choose another --out");
    }
    all_arms = Union(existing.at("arms").get<std::vector<std::string>>(), arms);
    all_seeds = Union(existing.at("seeds").get<std::vector<uint64_t>>(), seeds);
  }
  RejectDirCollisions(all_arms);

  fs::create_directories(dir);
  const json sweep = {{"arms", all_arms}, {"seeds", all_seeds}, {"config", SweepConfigJson(base)}};
  WriteFileAtomically(manifest.string(), sweep.dump(2) + "\n");

  const int count = int(arms.size() * seeds.size());
  int index = 0;
  for (const std::string& arm : arms) {
    for (const uint64_t seed : seeds) {
      TrainConfig config = base;
      config.arm = arm;
      config.seed = seed;
      const fs::path run = dir / RunDirName(arm, seed);
      SweepRunInfo info{arm, seed, run.string(), ++index, count, SweepRunInfo::Action::kTrain};
      if (fs::exists(run / "summary.json")) {
        info.action = SweepRunInfo::Action::kSkip;
        if (fs::exists(run / "config.json")) {
          const std::string difference =
              FirstDifference(json(config), ReadJson(run / "config.json"));
          if (!difference.empty()) {
            throw std::invalid_argument("run directory " + run.string() +
                                        " holds a run of a different config (" + difference +
                                        ")");
          }
        }
      } else if (fs::exists(run / "checkpoint.bin")) {
        info.action = SweepRunInfo::Action::kResume;
      } else {
        // Stopped before its first checkpoint: nothing to resume, so start it again.
        fs::remove(run / "config.json");
        fs::remove(run / "metrics.csv");
      }
      if (on_run) on_run(info);
      if (info.action == SweepRunInfo::Action::kSkip) continue;
      TrainRun(config, run.string(), info.action == SweepRunInfo::Action::kResume, progress);
    }
  }
}

std::vector<ArmReport> ReportSweep(const std::string& out_dir) {
  const fs::path dir(out_dir);
  if (!fs::exists(dir / "sweep.json")) {
    throw std::runtime_error(out_dir + " is not a sweep directory (it has no sweep.json)");
  }
  const json sweep = ReadJson(dir / "sweep.json");
  std::vector<std::string> arms;
  std::vector<uint64_t> seeds;
  try {
    arms = sweep.at("arms").get<std::vector<std::string>>();
    seeds = sweep.at("seeds").get<std::vector<uint64_t>>();
    sweep.at("config");
  } catch (const json::exception& e) {
    throw std::runtime_error((dir / "sweep.json").string() + " is malformed: " + e.what());
  }

  std::vector<ArmReport> reports;
  for (const std::string& arm : arms) {
    ArmReport report;
    report.arm = arm;
    std::vector<double> losses, rates;
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
        } catch (const json::exception& e) {
          throw std::runtime_error(summary_path.string() + " is malformed: " + e.what());
        }
        run.done = true;
        losses.push_back(run.final_val_loss);
        rates.push_back(run.tokens_per_s);
      } else {
        report.missing_seeds.push_back(seed);
      }
      report.runs.push_back(run);
    }
    report.mean_val_loss = Mean(losses);
    report.tokens_per_s_mean = Mean(rates);
    reports.push_back(std::move(report));
  }

  const auto reference = std::find_if(reports.begin(), reports.end(),
                                      [](const ArmReport& r) { return r.arm == kReferenceArm; });
  if (reference != reports.end()) {
    const std::vector<SeedRun> exact_runs = reference->runs;  // same seeds, same order
    for (ArmReport& report : reports) {
      report.has_reference = true;
      std::vector<double> gaps;
      for (size_t i = 0; i < report.runs.size(); ++i) {
        const SeedRun& run = report.runs[i];
        if (!run.done) continue;
        if (!exact_runs[i].done) {
          report.unpaired_seeds.push_back(run.seed);
          continue;
        }
        report.gaps.push_back({run.seed, run.final_val_loss - exact_runs[i].final_val_loss});
        gaps.push_back(report.gaps.back().gap);
      }
      report.gap_mean = Mean(gaps);
      report.gap_std = SampleStd(gaps);
    }
  }

  WriteFileAtomically((dir / "report.json").string(),
                      ReportJson(reports, sweep).dump(2) + "\n");
  WriteFileAtomically((dir / "report.md").string(), ReportMarkdown(reports, sweep));
  return reports;
}

std::string FormatRate(double per_second) {
  if (!(per_second >= 0.0) || !std::isfinite(per_second)) return "?";
  if (per_second >= 1e6) return Fixed(per_second / 1e6, 2) + "M";
  if (per_second >= 1e3) return Fixed(per_second / 1e3, 1) + "k";
  return Fixed(per_second, 0);
}

std::string FormatDuration(double seconds) {
  const long total = seconds > 0 ? long(seconds + 0.5) : 0;
  char buffer[48];
  if (total >= 3600) {
    std::snprintf(buffer, sizeof(buffer), "%ld:%02ld:%02ld", total / 3600, total / 60 % 60,
                  total % 60);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%ld:%02ld", total / 60, total % 60);
  }
  return buffer;
}

std::string FormatProgress(const Progress& p) {
  return "step " + std::to_string(p.step) + "/" + std::to_string(p.steps) + "  train " +
         Fixed(p.train_loss, 2) + "  val " + (p.val_loss < 0 ? "-" : Fixed(p.val_loss, 2)) +
         "  " + FormatRate(p.tokens_per_s) + " tok/s  ETA " + FormatDuration(p.eta_s);
}

std::string FormatReportTable(const std::vector<ArmReport>& reports) {
  bool has_reference = false;
  std::ostringstream table;
  table << "| arm | runs | final val loss (mean) | gap to exact (mean ± std) | per-seed gaps | "
           "tokens/s |\n"
        << "|---|---|---|---|---|---|\n";
  for (const ArmReport& r : reports) {
    has_reference = has_reference || r.has_reference;
    table << "| `" << r.arm << "` | " << r.finished() << '/' << r.runs.size();
    if (!r.missing_seeds.empty()) table << " (missing seed " << JoinSeeds(r.missing_seeds) << ')';
    table << " | " << (r.mean_val_loss ? Fixed(*r.mean_val_loss, 4) : "—") << " | ";

    if (!r.has_reference) {
      table << "n/a | n/a";
    } else if (r.arm == kReferenceArm) {
      table << "reference | —";
    } else {
      if (!r.gap_mean) {
        table << "no paired seeds";
      } else if (r.gap_std) {
        table << Signed(*r.gap_mean) << " ± " << Fixed(*r.gap_std, 4) << " (n=" << r.gaps.size()
              << ')';
      } else {
        table << Signed(*r.gap_mean) << " (n=1)";
      }
      table << " | ";
      std::string cells;
      for (const SeedGap& g : r.gaps) {
        cells += (cells.empty() ? "" : ", ") + std::to_string(g.seed) + ": " + Signed(g.gap);
      }
      for (const uint64_t seed : r.unpaired_seeds) {
        cells += (cells.empty() ? "" : ", ") + std::to_string(seed) + ": no exact run";
      }
      table << (cells.empty() ? "—" : cells);
    }
    table << " | " << (r.tokens_per_s_mean ? FormatRate(*r.tokens_per_s_mean) : "—") << " |\n";
  }
  if (!has_reference) {
    table << "\nNo `exact` arm in this sweep: gaps to exact are not reported.\n";
  }
  return table.str();
}

}  // namespace lpattn::harness
