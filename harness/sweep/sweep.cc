// Running a sweep (docs/harness.md §3): its directory names, sweep.json, the runs and the
// evaluation swaps, and the progress formatting shared with the command line. The report is
// sweep_report.cc.
#include "harness/sweep/sweep.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "harness/model/attention_arm.h"
#include "harness/model/interference.h"
#include "harness/common/atomic_file.h"
#include "harness/sweep/sweep_internal.h"
#include "harness/train/checkpoint.h"
#include "harness/train/data.h"

namespace lpattn::harness {
namespace fs = std::filesystem;
using nlohmann::json;

namespace sweep_internal {

json ReadJson(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw std::runtime_error(path.string() + " is not valid JSON: " + e.what());
  }
}

// A sweep's extras as sweep.json records them; an older sweep.json has none.
SweepExtras ExtrasFromJson(const json& sweep) {
  SweepExtras extras;
  extras.plan = sweep.value("plan", std::string());
  extras.reference = sweep.value("reference", std::string());
  if (sweep.contains("paper")) extras.paper = sweep.at("paper").get<std::map<std::string, std::string>>();
  if (sweep.contains("interference")) {
    extras.interference = sweep.at("interference").get<std::vector<std::string>>();
  }
  if (sweep.contains("contexts")) extras.contexts = sweep.at("contexts").get<std::vector<int64_t>>();
  if (sweep.contains("swaps")) {
    for (const json& s : sweep.at("swaps")) {
      extras.swaps.push_back({s.at("trained").get<std::string>(), s.at("with").get<std::string>(),
                              s.value("paper", std::string())});
    }
  }
  return extras;
}

std::string Fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
}

}  // namespace sweep_internal

using namespace sweep_internal;
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

void AddExtrasToJson(const SweepExtras& extras, json& sweep) {
  if (!extras.plan.empty()) sweep["plan"] = extras.plan;
  if (!extras.reference.empty()) sweep["reference"] = extras.reference;
  if (!extras.interference.empty()) sweep["interference"] = extras.interference;
  if (!extras.contexts.empty()) sweep["contexts"] = extras.contexts;
  if (!extras.paper.empty()) sweep["paper"] = extras.paper;
  if (!extras.swaps.empty()) {
    json swaps = json::array();
    for (const EvalSwap& s : extras.swaps) {
      swaps.push_back({{"trained", s.trained}, {"with", s.with}, {"paper", s.paper}});
    }
    sweep["swaps"] = swaps;
  }
}

// `later` added to `earlier`: its plan replaces an empty one, its paper entries and swaps are
// added (a swap already there keeps its place and takes the newer paper text). A reference arm
// cannot change: the sweep's gaps were paired with it.
SweepExtras MergeExtras(SweepExtras earlier, const SweepExtras& later) {
  if (!later.plan.empty()) earlier.plan = later.plan;
  const auto named = [](const SweepExtras& e) {
    return e.reference.empty() ? std::string(kDefaultReferenceArm) : e.reference;
  };
  if (!later.reference.empty() && named(later) != named(earlier)) {
    throw std::invalid_argument("sweep: this sweep's gaps are paired with '" + named(earlier) +
                                "', not '" + later.reference +
                                "'; `lpattn report DIR --reference ARM` shows other pairings");
  }
  if (!later.reference.empty()) earlier.reference = later.reference;
  for (const std::string& spec : later.interference) {
    if (std::find(earlier.interference.begin(), earlier.interference.end(), spec) ==
        earlier.interference.end()) {
      earlier.interference.push_back(spec);
    }
  }
  for (const int64_t context : later.contexts) {
    if (std::find(earlier.contexts.begin(), earlier.contexts.end(), context) ==
        earlier.contexts.end()) {
      earlier.contexts.push_back(context);
    }
  }
  for (const auto& [arm, text] : later.paper) earlier.paper[arm] = text;
  for (const EvalSwap& swap : later.swaps) {
    const auto same = std::find_if(earlier.swaps.begin(), earlier.swaps.end(), [&](const EvalSwap& s) {
      return s.trained == swap.trained && s.with == swap.with;
    });
    if (same == earlier.swaps.end()) {
      earlier.swaps.push_back(swap);
    } else if (!swap.paper.empty()) {
      same->paper = swap.paper;
    }
  }
  return earlier;
}

void CheckSwaps(const std::vector<EvalSwap>& swaps, const std::vector<std::string>& arms,
                const ModelConfig& model) {
  for (const EvalSwap& swap : swaps) {
    if (std::find(arms.begin(), arms.end(), swap.trained) == arms.end()) {
      throw std::invalid_argument("sweep: the evaluation swap of '" + swap.trained + "' with '" +
                                  swap.with + "' needs '" + swap.trained + "' among the arms");
    }
    CheckSwappable(swap.trained, swap.with, model);
  }
}

// Whether a run finished with a loss to evaluate further: its summary.json exists and it did not
// diverge (docs/harness.md §3.2; a diverged run's checkpoint is not a trained model's).
bool FinishedWithALoss(const fs::path& run) {
  const fs::path summary = run / "summary.json";
  return fs::exists(summary) && !ReadJson(summary).contains("diverged_at_step");
}

// Evaluates each finished run of a swap's trained arm with the swap's other arm, once: the
// result goes to SwapFileName(with) in the run directory, written atomically.
void RunEvalSwaps(const fs::path& dir, const std::vector<EvalSwap>& swaps,
                  const std::vector<uint64_t>& seeds, const SweepRunFn& on_run) {
  std::vector<SweepRunInfo> pending;
  for (const EvalSwap& swap : swaps) {
    for (const uint64_t seed : seeds) {
      const fs::path run = dir / RunDirName(swap.trained, seed);
      if (!FinishedWithALoss(run) || fs::exists(run / SwapFileName(swap.with))) continue;
      pending.push_back({swap.trained, seed, run.string(), 0, 0,
                         SweepRunInfo::Action::kEvaluate, swap.with});
    }
  }
  int index = 0;
  for (SweepRunInfo& info : pending) {
    info.index = ++index;
    info.count = int(pending.size());
    if (on_run) on_run(info);
    const fs::path run(info.dir);
    const double loss = EvaluateCheckpoint((run / "checkpoint.bin").string(), info.with, "");
    const json result = {{"arm", info.with}, {"trained", info.arm}, {"val_loss", loss}};
    WriteFileAtomically((run / SwapFileName(info.with)).string(), result.dump(2) + "\n");
  }
}

// The evaluations of every finished run of the sweep (interference, contexts) that have no file
// yet, each written atomically into its run directory.
void RunEvaluations(const fs::path& dir, const SweepExtras& extras,
                    const std::vector<std::string>& arms, const std::vector<uint64_t>& seeds,
                    const TrainConfig& base, const SweepRunFn& on_run) {
  struct Pending {
    SweepRunInfo info;
    fs::path file;
    std::function<json(const std::string&)> evaluate;
  };
  std::vector<Pending> pending;
  const int64_t windows = std::min(base.eval_windows, 16);  // long contexts: bounded time
  for (const std::string& arm : arms) {
    for (const uint64_t seed : seeds) {
      const fs::path run = dir / RunDirName(arm, seed);
      if (!FinishedWithALoss(run)) continue;
      const auto add = [&](const std::string& what, const fs::path& file, auto evaluate) {
        if (fs::exists(file)) return;
        pending.push_back({{arm, seed, run.string(), 0, 0, SweepRunInfo::Action::kEvaluate, what},
                           file, evaluate});
      };
      for (const std::string& spec : extras.interference) {
        add(spec, run / InterferenceFileName(spec), [spec](const std::string& checkpoint) {
          return InterferenceEvaluationJson(
              EvaluateWithInterference(checkpoint, "", "", ParseInterference(spec)));
        });
      }
      for (const int64_t context : extras.contexts) {
        add("context " + std::to_string(context), run / ContextFileName(context),
            [context, windows](const std::string& checkpoint) {
              return ContextEvaluationJson(
                  EvaluateAtContext(checkpoint, "", "", context, windows));
            });
      }
    }
  }
  int index = 0;
  for (Pending& p : pending) {
    p.info.index = ++index;
    p.info.count = int(pending.size());
    if (on_run) on_run(p.info);
    const json result = p.evaluate((fs::path(p.info.dir) / "checkpoint.bin").string());
    WriteFileAtomically(p.file.string(), result.dump(2) + "\n");
  }
}

// The extras' evaluations are possible for this base config: each interference parses and fits
// the model (a swap needs batch >= 2, a layer must exist); a context other than the trained one
// needs rotary positions.
void CheckEvaluations(const SweepExtras& extras, const TrainConfig& base) {
  for (const std::string& spec : extras.interference) {
    TrainConfig config = base;
    config.interference = spec;
    ValidateConfig(config);
  }
  for (const int64_t context : extras.contexts) {
    if (context < 1) throw std::invalid_argument("sweep: a context evaluation needs >= 1 token");
    if (context != base.model.context && base.model.pos != "rope") {
      throw std::invalid_argument("sweep: evaluating at a context of " + std::to_string(context) +
                                  " needs --pos rope (the runs train at " +
                                  std::to_string(base.model.context) + ")");
    }
  }
}

}  // namespace

std::string InterferenceFileName(const std::string& interference) {
  return "interference-" + ArmDirName(FormatInterference(ParseInterference(interference))) + ".json";
}
std::string ContextFileName(int64_t context) {
  return "context-" + std::to_string(context) + ".json";
}

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

std::string SwapFileName(const std::string& with) { return "eval-" + ArmDirName(with) + ".json"; }

void RunSweep(const TrainConfig& base, const std::vector<std::string>& arms,
              const std::vector<uint64_t>& seeds, const std::string& out_dir,
              const ProgressFn& progress, const SweepRunFn& on_run, const SweepExtras& extras,
              const Ranks& ranks) {
  const fs::path dir(out_dir);
  const fs::path manifest = dir / "sweep.json";
  std::vector<std::string> all_arms = arms;
  std::vector<uint64_t> all_seeds = seeds;
  SweepExtras all_extras = extras;
  ranks.Agree([&] {
    if (arms.empty()) throw std::invalid_argument("sweep: no arms given");
    if (seeds.empty()) throw std::invalid_argument("sweep: no seeds given");
    RejectDuplicates(arms, "arm");
    RejectDuplicates(seeds, "seed");
    for (std::string& spec : all_extras.interference) {  // canonical, so files and merges agree
      spec = FormatInterference(ParseInterference(spec));
    }
    if (base.init_seed && base.data_seed) {
      throw std::invalid_argument(
          "sweep: --init-seed and --data-seed are both fixed, so every seed would be the same "
          "run; fix at most one of them");
    }
    for (const std::string& arm : arms) {
      TrainConfig config = base;
      config.arm = arm;
      ValidateConfig(config);
    }
    if (!fs::exists(manifest) && fs::exists(dir / "config.json")) {
      throw std::invalid_argument(out_dir +
                                  " holds a training run, not a sweep; choose another --out");
    }
    if (fs::exists(manifest)) {
      const json existing = ReadJson(manifest);
      const std::string difference = FirstDifference(SweepConfigJson(base), existing.at("config"));
      if (!difference.empty()) {
        throw std::invalid_argument("sweep directory " + out_dir +
                                    " holds a sweep of a different config (" + difference +
                                    "); choose another --out");
      }
      all_arms = Union(existing.at("arms").get<std::vector<std::string>>(), arms);
      all_seeds = Union(existing.at("seeds").get<std::vector<uint64_t>>(), seeds);
      all_extras = MergeExtras(ExtrasFromJson(existing), all_extras);
    }
    RejectDirCollisions(all_arms);
    if (!all_extras.reference.empty() &&
        std::find(all_arms.begin(), all_arms.end(), all_extras.reference) == all_arms.end()) {
      throw std::invalid_argument("sweep: the reference arm '" + all_extras.reference +
                                  "' is not one of the arms");
    }
    CheckSwaps(all_extras.swaps, all_arms, base.model);
    CheckEvaluations(all_extras, base);
    // Every run reads the corpus: a missing or unreadable one fails here, before sweep.json.
    LoadCorpus(base.data.empty() ? DefaultCorpusPath() : base.data, size_t(base.model.context));
  });

  ranks.Agree([&] {  // every rank has read sweep.json before rank 0 rewrites it
    if (!ranks.leader()) return;
    fs::create_directories(dir);
    json sweep = {{"arms", all_arms}, {"seeds", all_seeds}, {"config", SweepConfigJson(base)}};
    AddExtrasToJson(all_extras, sweep);
    WriteFileAtomically(manifest.string(), sweep.dump(2) + "\n");
  });

  const int count = int(arms.size() * seeds.size());
  int index = 0;
  // Each rank trains its runs; a failure ends the sweep on every rank once all have finished.
  ranks.Agree([&] {
    for (const std::string& arm : arms) {
      for (const uint64_t seed : seeds) {
        if (index++ % ranks.size() != ranks.rank()) continue;
        TrainConfig config = base;
        config.arm = arm;
        config.seed = seed;
        const fs::path run = dir / RunDirName(arm, seed);
        SweepRunInfo info{arm, seed, run.string(), index, count, SweepRunInfo::Action::kTrain, ""};
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
  });
  ranks.Agree([&] {
    if (ranks.leader()) {
      RunEvalSwaps(dir, all_extras.swaps, all_seeds, on_run);
      RunEvaluations(dir, all_extras, all_arms, all_seeds, base, on_run);
    }
  });
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

}  // namespace lpattn::harness
