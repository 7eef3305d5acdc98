// `lpattn train`, `eval`, `logits`, `sweep` and `report`: training runs of the small GPT under
// an attention arm, evaluating their checkpoints (and their logits on prompts), sweeps of
// arms x seeds and their reports. The run configuration options (the preset and the flags
// that override it) are shared by train and sweep.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "harness/cli/commands.h"
#include "harness/common/atomic_file.h"
#include "harness/common/figures.h"
#include "harness/model/attention_arm.h"
#include "harness/model/config.h"
#include "harness/sweep/sweep.h"
#include "harness/sweep/sweep_plan.h"
#include "harness/train/checkpoint.h"
#include "harness/train/trainer.h"

namespace lpattn::cli {
namespace {

namespace fs = std::filesystem;
using harness::TrainConfig;

// `lpattn train`'s status for a run that diverged (docs/harness.md §3.2): its files are written,
// so not an error's 1.
constexpr int kDivergedStatus = 3;

// ---- progress --------------------------------------------------------------------------------

// FormatProgress's line on stderr: on a terminal one line rewritten in place (carriage return)
// at most 4 times a second, ended by a newline; otherwise (a log) one line per evaluation.
class ProgressLine {
 public:
  ProgressLine() : live_(isatty(STDERR_FILENO) != 0) {}
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  ~ProgressLine() { EndLine(); }

  void Update(const harness::Progress& p) {
    const auto now = std::chrono::steady_clock::now();
    const bool last = p.step >= p.steps;
    if (live_) {
      if (!last && open_ && now - printed_ < std::chrono::milliseconds(250)) return;
    } else if (!last && (p.val_loss < 0 || p.val_loss == last_val_)) {
      return;
    }
    printed_ = now;
    last_val_ = last ? -1.0 : p.val_loss;  // the next run starts afresh
    std::string text = harness::FormatProgress(p);
    if (live_) {
      const size_t width = text.size();
      if (text.size() < width_) text.append(width_ - text.size(), ' ');
      width_ = width;
      std::fprintf(stderr, "\r%s", text.c_str());
      open_ = true;
      if (last) EndLine();
    } else {
      std::fprintf(stderr, "%s\n", text.c_str());
    }
    std::fflush(stderr);
  }

  harness::ProgressFn Fn() {
    return [this](const harness::Progress& p) { Update(p); };
  }

 private:
  void EndLine() {
    if (open_) std::fputc('\n', stderr);
    open_ = false;
    width_ = 0;
  }

  bool live_;
  bool open_ = false;
  size_t width_ = 0;
  double last_val_ = -1.0;
  std::chrono::steady_clock::time_point printed_;
};

// ---- run configuration options (train and sweep) --------------------------------------------

// The config is the preset (or, for a resumed run, its saved config.json) with only the flags
// given applied: each flag records a setter when parsed, and BuildConfig replays them.
struct ConfigOptions {
  std::string preset = "tiny";
  std::vector<std::function<void(TrainConfig&)>> setters;
  CLI::Option* checkpoint_every = nullptr;
};

template <class T, class Set>
CLI::Option* AddOverride(CLI::App* command, ConfigOptions& options, const std::string& flag,
                         const std::string& help, Set set) {
  return command->add_option_function<T>(
      flag,
      [&options, set](const T& value) {
        options.setters.push_back([set, value](TrainConfig& c) { set(c, value); });
      },
      help);
}

std::string AbsolutePath(const std::string& path) {
  return path.empty() ? path : fs::absolute(path).lexically_normal().string();
}

void AddConfigOptions(CLI::App* command, ConfigOptions& options) {
  command->add_option("--preset", options.preset, "model preset: tiny, small, medium, large")
      ->capture_default_str();
  AddOverride<int>(command, options, "--steps", "optimiser steps",
                   [](TrainConfig& c, int v) { c.steps = v; });
  AddOverride<std::string>(command, options, "--data", "corpus file (default: the Brown corpus)",
                           [](TrainConfig& c, const std::string& v) { c.data = AbsolutePath(v); });
  AddOverride<int>(command, options, "--threads", "TBB threads (default: all; no number changes)",
                   [](TrainConfig& c, int v) { c.threads = v; })
      ->check(CLI::Range(1, 4096));
  AddOverride<float>(command, options, "--lr", "peak learning rate",
                     [](TrainConfig& c, float v) { c.lr = v; });
  AddOverride<int>(command, options, "--warmup", "linear warm-up steps",
                   [](TrainConfig& c, int v) { c.warmup_steps = v; });
  AddOverride<float>(command, options, "--min-lr-fraction", "final rate / peak rate (cosine)",
                     [](TrainConfig& c, float v) { c.min_lr_fraction = v; });
  AddOverride<float>(command, options, "--weight-decay", "AdamW weight decay (matrices)",
                     [](TrainConfig& c, float v) { c.weight_decay = v; });
  AddOverride<float>(command, options, "--beta1", "AdamW beta1",
                     [](TrainConfig& c, float v) { c.beta1 = v; });
  AddOverride<float>(command, options, "--beta2", "AdamW beta2",
                     [](TrainConfig& c, float v) { c.beta2 = v; });
  AddOverride<float>(command, options, "--grad-clip", "global gradient-norm clip",
                     [](TrainConfig& c, float v) { c.grad_clip = v; });
  AddOverride<std::string>(command, options, "--precision",
                           "dense products' operands: fp32, or bf16 (mixed precision: bf16 "
                           "operands, fp32 accumulation, master weights and optimizer state)",
                           [](TrainConfig& c, const std::string& v) { c.precision = v; });
  AddOverride<std::string>(command, options, "--interference",
                           "corrupt the training batches' value reads: noise:rho=<r>,sigma=<s> "
                           "or swap:rho=<r> (,layer=<l>, ,seed=<n>); validation stays clean",
                           [](TrainConfig& c, const std::string& v) { c.interference = v; });
  AddOverride<uint64_t>(command, options, "--init-seed",
                        "seed of the initial weights alone (default: --seed)",
                        [](TrainConfig& c, uint64_t v) { c.init_seed = v; });
  AddOverride<uint64_t>(command, options, "--data-seed",
                        "seed of the training windows' order alone (default: --seed)",
                        [](TrainConfig& c, uint64_t v) { c.data_seed = v; });
  AddOverride<int>(command, options, "--batch", "windows per step",
                   [](TrainConfig& c, int v) { c.batch = v; });
  AddOverride<std::string>(command, options, "--pos",
                           "positions: learned (an embedding per position) or rope (rotary, "
                           "base 10000; evaluable at a longer context)",
                           [](TrainConfig& c, const std::string& v) { c.model.pos = v; });
  AddOverride<int>(command, options, "--context", "tokens per window",
                   [](TrainConfig& c, int v) { c.model.context = v; });
  AddOverride<int>(command, options, "--layers", "transformer blocks",
                   [](TrainConfig& c, int v) { c.model.n_layer = v; });
  AddOverride<int>(command, options, "--heads", "attention heads",
                   [](TrainConfig& c, int v) { c.model.n_head = v; });
  AddOverride<int>(command, options, "--width", "model width (n_embd)",
                   [](TrainConfig& c, int v) { c.model.n_embd = v; });
  AddOverride<int>(command, options, "--eval-every", "steps between validation evaluations",
                   [](TrainConfig& c, int v) { c.eval_every = v; });
  AddOverride<int>(command, options, "--eval-windows", "validation windows",
                   [](TrainConfig& c, int v) { c.eval_windows = v; });
  options.checkpoint_every = AddOverride<int>(
      command, options, "--checkpoint-every",
      "steps between checkpoints, a multiple of --eval-every (default: the preset's, rounded up "
      "to one)",
      [](TrainConfig& c, int v) { c.checkpoint_every = v; });
}

TrainConfig BuildConfig(const ConfigOptions& options, TrainConfig config) {
  for (const auto& set : options.setters) set(config);
  if (options.checkpoint_every->count() == 0 && config.eval_every > 0 &&
      config.checkpoint_every % config.eval_every != 0) {
    config.checkpoint_every += config.eval_every - config.checkpoint_every % config.eval_every;
  }
  return config;
}

void CheckArm(const std::string& arm) { harness::MakeArm(arm); }  // throws, naming the problem

// ---- train -----------------------------------------------------------------------------------

struct TrainOptions {
  ConfigOptions config;
  std::string out;
  bool resume = false;
};

CLI::App* AddTrain(CLI::App& app, TrainOptions& options) {
  CLI::App* train = app.add_subcommand(
      "train", "train one model under one attention arm into a run directory");
  AddConfigOptions(train, options.config);
  AddOverride<std::string>(train, options.config, "--arm", "attention arm (default: exact)",
                           [](TrainConfig& c, const std::string& v) { c.arm = v; });
  AddOverride<uint64_t>(train, options.config, "--seed", "seed of the initialisation and batches",
                        [](TrainConfig& c, uint64_t v) { c.seed = v; });
  train->add_option("--out", options.out, "run directory")->required();
  train->add_flag("--resume", options.resume,
                  "continue the run in --out from its checkpoint; its config.json replaces "
                  "--preset, and flags given must match it (--threads may differ)");
  return train;
}

// The run's config: the preset (or, resuming, the run's config.json) with the flags applied.
TrainConfig TrainCommandConfig(const TrainOptions& options) {
  if (fs::exists(fs::path(options.out) / "sweep.json")) {
    throw std::invalid_argument(options.out + " is a sweep directory; choose another --out");
  }
  TrainConfig base;
  const fs::path saved = fs::path(options.out) / "config.json";
  if (options.resume && fs::exists(saved)) {
    std::ifstream in(saved);
    base = nlohmann::json::parse(in).get<TrainConfig>();
  } else {
    base = harness::PresetConfig(options.config.preset);
  }
  TrainConfig config = BuildConfig(options.config, base);
  CheckArm(config.arm);
  return config;
}

int RunTrain(const TrainOptions& options) {
  // Under mpirun, rank 0 reads the run directory and sends the config to the others, so every
  // rank trains the same model even where only rank 0 sees the directory.
  const harness::Ranks& ranks = harness::Ranks::World();
  TrainConfig config;
  ranks.Agree([&] {
    if (ranks.leader()) config = TrainCommandConfig(options);
  });
  if (ranks.size() > 1) {
    const std::string text = ranks.leader() ? nlohmann::json(config).dump() : std::string();
    std::vector<char> bytes(text.begin(), text.end());
    ranks.Broadcast(bytes);
    config = nlohmann::json::parse(bytes.begin(), bytes.end()).get<TrainConfig>();
  }

  harness::RunSummary summary;
  {
    ProgressLine line;
    summary = harness::TrainRun(config, options.out, options.resume,
                                ranks.leader() ? line.Fn() : harness::ProgressFn(), ranks);
  }
  if (!ranks.leader()) return 0;
  std::printf("run             %s (preset %s, arm %s, seed %llu%s)\n", options.out.c_str(),
              config.preset.c_str(), config.arm.c_str(),
              static_cast<unsigned long long>(config.seed),
              ranks.size() > 1 ? (", " + std::to_string(ranks.size()) + " ranks").c_str() : "");
  std::printf("final val loss  %.4f (train %.4f)\n", summary.final_val_loss,
              summary.final_train_loss);
  std::printf("tokens/s        %s\n", harness::FormatRate(summary.tokens_per_s).c_str());
  std::printf("time            %s (%d steps)\n", harness::FormatDuration(summary.seconds).c_str(),
              summary.steps);
  harness::DrawFigures(options.out);
  if (summary.diverged_at_step > 0) {  // a result, not an error: the run's files are written
    std::printf("diverged        the loss or its gradient is not finite at step %lld; stopped "
                "with the last finite weights (the final val loss is the last evaluation's)\n",
                static_cast<long long>(summary.diverged_at_step));
    return kDivergedStatus;
  }
  return 0;
}

// ---- eval ------------------------------------------------------------------------------------

struct EvalOptions {
  std::string checkpoint, arm, data;
  std::string context;  // "4x" (times the trained context) or a token count; empty: trained
  int windows = 0;      // 0: the run's eval_windows
  std::string interference;  // evaluate clean and with this interference
  std::string out;      // JSON of the per-position table (--context) or the comparison
};

CLI::App* AddEval(CLI::App& app, EvalOptions& options) {
  CLI::App* eval = app.add_subcommand(
      "eval", "validation loss of a checkpoint, with its own arm or another (evaluation swap)");
  eval->add_option("--checkpoint", options.checkpoint, "checkpoint.bin of a run")->required();
  eval->add_option("--arm", options.arm, "evaluate with this arm (default: the trained one)");
  eval->add_option("--data", options.data, "corpus file (default: the run's)");
  eval->add_option("--context", options.context,
                   "evaluate at this context: <n>x the trained one (4x) or a token count; "
                   "prints loss and attention dispersion per position bucket (rotary models "
                   "for a context other than the trained one)");
  eval->add_option("--windows", options.windows,
                   "validation windows with --context (default: the run's eval_windows)")
      ->check(CLI::Range(1, 1 << 20));
  eval->add_option("--interference", options.interference,
                   "also evaluate with value reads corrupted: noise:rho=<r>,sigma=<s> or "
                   "swap:rho=<r> (,layer=<l>, ,seed=<n>); prints the loss increase, the "
                   "attention mass on corrupted positions, gates and abstention");
  eval->add_option("--out", options.out,
                   "with --context or --interference: also write the table as JSON here");
  return eval;
}

void CheckOutFolder(const std::string& out) {
  const fs::path folder = fs::path(out).parent_path();
  if (!out.empty() && !folder.empty() && !fs::is_directory(folder)) {
    throw std::invalid_argument("eval: the folder of --out " + out + " does not exist");
  }
}

// "4x" -> 4 * trained, "1024" -> 1024; throws std::invalid_argument naming the text otherwise.
int64_t ParseContext(const std::string& text, int64_t trained) {
  const bool times = !text.empty() && text.back() == 'x';
  const std::string number = times ? text.substr(0, text.size() - 1) : text;
  char* end = nullptr;
  const long long value = std::strtoll(number.c_str(), &end, 10);
  if (number.empty() || *end != '\0' || value < 1 || value > (1 << 20)) {
    throw std::invalid_argument("eval: --context '" + text +
                                "' must be a token count or a multiple such as 4x");
  }
  return times ? int64_t(value) * trained : int64_t(value);
}

int RunEvalAtContext(const EvalOptions& options, const harness::CheckpointState& state) {
  const int64_t context = ParseContext(options.context, state.config.model.context);
  CheckOutFolder(options.out);
  const int64_t windows = options.windows > 0 ? options.windows : state.config.eval_windows;
  const harness::ContextEvaluation e = harness::EvaluateAtContext(
      options.checkpoint, options.arm, AbsolutePath(options.data), context, windows);
  std::printf("checkpoint  %s (preset %s, step %lld, positions %s)\n", options.checkpoint.c_str(),
              state.config.preset.c_str(), static_cast<long long>(state.step), e.pos.c_str());
  std::printf("arm         %s\n", e.arm.c_str());
  std::printf("context     %lld (trained at %lld), %lld windows\n",
              static_cast<long long>(e.context), static_cast<long long>(e.trained_context),
              static_cast<long long>(e.windows));
  std::printf("val loss    %.4f\n\n", e.val_loss);
  std::printf("| positions | loss | attention entropy (nats) | max weight |\n|---|---|---|---|\n");
  for (const harness::PositionBucket& b : e.buckets) {
    std::printf("| %lld-%lld | %.4f | %.3f | %.3f |\n", static_cast<long long>(b.begin),
                static_cast<long long>(b.end - 1), b.loss, b.entropy, b.max_weight);
  }
  if (!options.out.empty()) {
    nlohmann::json j = harness::ContextEvaluationJson(e);
    j["checkpoint"] = options.checkpoint;
    harness::WriteFileAtomically(options.out, j.dump(2) + "\n");
    std::printf("\nwrote %s\n", options.out.c_str());
  }
  return 0;
}

std::string OptionalCell(const std::optional<double>& x) {
  char buffer[32];
  if (!x) return "—";
  std::snprintf(buffer, sizeof(buffer), "%.4f", *x);
  return buffer;
}

int RunEvalWithInterference(const EvalOptions& options, const harness::CheckpointState& state) {
  const harness::Interference interference = harness::ParseInterference(options.interference);
  CheckOutFolder(options.out);
  const harness::InterferenceEvaluation e = harness::EvaluateWithInterference(
      options.checkpoint, options.arm, AbsolutePath(options.data), interference);
  std::printf("checkpoint    %s (preset %s, step %lld)\n", options.checkpoint.c_str(),
              state.config.preset.c_str(), static_cast<long long>(state.step));
  std::printf("arm           %s\ninterference  %s\n\n", e.arm.c_str(), e.interference.c_str());
  std::printf("| clean loss | loss | increase | share of positions corrupted | attention mass on "
              "them | gate (corrupted) | gate (clean) | abstention (clean) | abstention |\n"
              "|---|---|---|---|---|---|---|---|---|\n");
  std::printf("| %.4f | %.4f | %+.4f | %.4f | %.4f | %s | %s | %s | %s |\n", e.clean_loss, e.loss,
              e.loss - e.clean_loss, e.corrupted_share, e.corrupted_mass,
              OptionalCell(e.gate_corrupted).c_str(), OptionalCell(e.gate_clean).c_str(),
              OptionalCell(e.abstention_clean).c_str(), OptionalCell(e.abstention).c_str());
  if (!options.out.empty()) {
    nlohmann::json j = harness::InterferenceEvaluationJson(e);
    j["checkpoint"] = options.checkpoint;
    harness::WriteFileAtomically(options.out, j.dump(2) + "\n");
    std::printf("\nwrote %s\n", options.out.c_str());
  }
  return 0;
}

int RunEval(const EvalOptions& options) {
  if (!options.arm.empty()) CheckArm(options.arm);
  const harness::CheckpointState state = harness::ReadCheckpoint(options.checkpoint);
  if (!options.context.empty() && !options.interference.empty()) {
    throw std::invalid_argument("eval: give --context or --interference, not both");
  }
  if (!options.interference.empty()) return RunEvalWithInterference(options, state);
  if (!options.context.empty()) return RunEvalAtContext(options, state);
  if (options.windows > 0 || !options.out.empty()) {
    throw std::invalid_argument("eval: --windows goes with --context, --out with --context or "
                                "--interference");
  }
  const double loss =
      harness::EvaluateCheckpoint(options.checkpoint, options.arm, AbsolutePath(options.data));
  const std::string& trained = state.config.arm;
  const bool swapped = !options.arm.empty() && options.arm != trained;
  std::printf("checkpoint  %s (preset %s, step %lld)\n", options.checkpoint.c_str(),
              state.config.preset.c_str(), static_cast<long long>(state.step));
  if (swapped) {
    std::printf("arm         %s (trained with %s: evaluation swap)\n", options.arm.c_str(),
                trained.c_str());
  } else {
    std::printf("arm         %s\n", trained.c_str());
  }
  std::printf("val loss    %.4f\n", loss);
  return 0;
}

// ---- logits ----------------------------------------------------------------------------------

struct LogitsOptions {
  std::string checkpoint, arm, out;
  std::vector<std::string> prompts;
};

CLI::App* AddLogits(CLI::App& app, LogitsOptions& options) {
  CLI::App* logits = app.add_subcommand(
      "logits", "the full-sequence forward's logits on prompts, as JSON (what an engine checks "
                "its decode against: examples/engine)");
  logits->add_option("--checkpoint", options.checkpoint, "checkpoint.bin of a run")->required();
  logits->add_option("--prompt", options.prompts, "a prompt (bytes; repeat for several)")
      ->required();
  logits->add_option("--arm", options.arm, "run with this arm (default: the trained one)");
  logits->add_option("--out", options.out, "JSON file to write")->required();
  return logits;
}

// docs/harness.md §3.6: {checkpoint, step, arm, model, prompts: [{tokens, logits}]}, each
// prompt's logits one array of vocab numbers per position.
int RunLogits(const LogitsOptions& options) {
  if (!options.arm.empty()) CheckArm(options.arm);
  const harness::CheckpointState state = harness::ReadCheckpoint(options.checkpoint);
  const std::vector<std::vector<float>> logits =
      harness::PrefixLogits(options.checkpoint, options.arm, options.prompts);
  const size_t V = size_t(state.config.model.vocab);
  nlohmann::json prompts = nlohmann::json::array();
  for (size_t p = 0; p < logits.size(); ++p) {
    nlohmann::json rows = nlohmann::json::array();
    for (size_t i = 0; i < logits[p].size(); i += V) {
      rows.push_back(std::vector<float>(logits[p].begin() + std::ptrdiff_t(i),
                                        logits[p].begin() + std::ptrdiff_t(i + V)));
    }
    const std::string& text = options.prompts[p];
    prompts.push_back({{"tokens", std::vector<uint8_t>(text.begin(), text.end())},
                       {"logits", std::move(rows)}});
  }
  const nlohmann::json out = {{"checkpoint", options.checkpoint},
                              {"step", state.step},
                              {"arm", options.arm.empty() ? state.config.arm : options.arm},
                              {"model", state.config.model},
                              {"prompts", std::move(prompts)}};
  harness::WriteFileAtomically(options.out, out.dump() + "\n");
  std::printf("wrote %s (%zu prompts, arm %s)\n", options.out.c_str(), logits.size(),
              out["arm"].get<std::string>().c_str());
  return 0;
}

// ---- sweep and report ------------------------------------------------------------------------

void PrintReport(const std::string& dir, const std::string& reference = "") {
  const harness::SweepReport report = harness::ReportSweep(dir, reference);
  std::printf("\n%s\n", harness::FormatReportTable(report).c_str());
  std::printf("wrote %s, %s\n", (fs::path(dir) / "report.md").c_str(),
              (fs::path(dir) / "report.json").c_str());
  harness::DrawFigures(dir);
}

struct SweepOptions {
  ConfigOptions config;
  std::string plan;
  std::vector<std::string> arm_lists;
  std::vector<uint64_t> seeds;
  std::string reference;
  std::string out;
  CLI::Option* preset = nullptr;
};

std::string PlanHelp() {
  std::string help = "a named sweep: its arms, seeds, preset, evaluation swaps and the paper's "
                     "column (--arms adds arms, --seeds and --preset replace its own):";
  for (const harness::SweepPlan& plan : harness::SweepPlans()) {
    help += "\n  " + plan.name + ": " + plan.summary;
  }
  return help;
}

CLI::App* AddSweep(CLI::App& app, SweepOptions& options) {
  CLI::App* sweep = app.add_subcommand(
      "sweep", "train every arm x seed with everything else matched, then report the gaps");
  AddConfigOptions(sweep, options.config);
  options.preset = sweep->get_option("--preset");
  sweep->add_option("--plan", options.plan, PlanHelp());
  sweep->add_option("--arms", options.arm_lists,
                    "arms, comma-separated (an arm's own key=value options keep their commas: "
                    "exact,kint:K=4,cal=window); may be repeated; required without --plan");
  sweep->add_option("--seeds", options.seeds, "seeds, comma-separated; required without --plan")
      ->delimiter(',');
  sweep->add_option("--reference", options.reference,
                    "the arm every gap is paired with (default: the plan's, else exact)");
  sweep->add_option("--out", options.out, "sweep directory")->required();
  return sweep;
}

void PrintSweepRun(const harness::SweepRunInfo& run) {
  using Action = harness::SweepRunInfo::Action;
  if (run.action == Action::kEvaluate) {
    std::fprintf(stderr, "[eval %d/%d] %s seed %llu evaluated with %s\n", run.index, run.count,
                 run.arm.c_str(), static_cast<unsigned long long>(run.seed), run.with.c_str());
    return;
  }
  const char* what = run.action == Action::kSkip     ? "  (done, skipped)"
                     : run.action == Action::kResume ? "  (resuming)"
                                                     : "";
  std::fprintf(stderr, "[%d/%d] %s seed %llu -> %s%s\n", run.index, run.count, run.arm.c_str(),
               static_cast<unsigned long long>(run.seed), run.dir.c_str(), what);
}

int RunSweep(const SweepOptions& options) {
  std::vector<std::string> arms;
  std::vector<uint64_t> seeds = options.seeds;
  std::string preset = options.config.preset;
  harness::SweepExtras extras;
  if (!options.plan.empty()) {
    const harness::SweepPlan& plan = harness::FindSweepPlan(options.plan);
    arms = plan.ArmNames();
    if (seeds.empty()) seeds = plan.seeds;
    if (options.preset->count() == 0) preset = plan.preset;
    extras = plan.Extras();
  } else if (options.arm_lists.empty() || seeds.empty()) {
    throw std::invalid_argument("sweep: give --arms and --seeds, or --plan");
  }
  for (const std::string& list : options.arm_lists) {
    for (const std::string& arm : harness::SplitArmList(list)) {
      if (std::find(arms.begin(), arms.end(), arm) != arms.end()) {
        throw std::invalid_argument(
            "sweep: arm '" + arm + "' is given twice" +
            (options.plan.empty() ? std::string() : " (--plan " + options.plan + " has it)") +
            "; give each arm once");
      }
      arms.push_back(arm);
    }
  }
  for (const std::string& arm : arms) CheckArm(arm);
  if (!options.reference.empty()) extras.reference = options.reference;
  TrainConfig planned = harness::PresetConfig(preset);
  if (!options.plan.empty()) harness::FindSweepPlan(options.plan).Configure(planned);
  const TrainConfig base = BuildConfig(options.config, planned);
  const harness::Ranks& ranks = harness::Ranks::World();
  {
    ProgressLine line;  // each rank's progress line would overwrite the others': rank 0's only
    harness::RunSweep(base, arms, seeds, options.out,
                      ranks.leader() ? line.Fn() : harness::ProgressFn(), PrintSweepRun, extras,
                      ranks);
  }
  if (ranks.leader()) PrintReport(options.out);
  return 0;
}

struct ReportOptions {
  std::string dir;
  std::string reference;
};

CLI::App* AddReport(CLI::App& app, ReportOptions& options) {
  CLI::App* report =
      app.add_subcommand("report", "the table of a sweep directory (rewrites report.md/json)");
  report->add_option("dir", options.dir, "sweep directory")->required();
  report->add_option("--reference", options.reference,
                     "pair the gaps with this arm instead of the sweep's reference");
  return report;
}

int RunReport(const ReportOptions& options) {
  PrintReport(options.dir, options.reference);
  return 0;
}

}  // namespace

void AddTrainCommands(CLI::App& app, Commands& commands) {
  auto train = std::make_shared<TrainOptions>();
  commands.push_back({AddTrain(app, *train), [train] { return RunTrain(*train); }});
  auto eval = std::make_shared<EvalOptions>();
  commands.push_back({AddEval(app, *eval), [eval] { return RunEval(*eval); }});
  auto logits = std::make_shared<LogitsOptions>();
  commands.push_back({AddLogits(app, *logits), [logits] { return RunLogits(*logits); }});
  auto sweep = std::make_shared<SweepOptions>();
  commands.push_back({AddSweep(app, *sweep), [sweep] { return RunSweep(*sweep); }});
  auto report = std::make_shared<ReportOptions>();
  commands.push_back({AddReport(app, *report), [report] { return RunReport(*report); }});
}

}  // namespace lpattn::cli
