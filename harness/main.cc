// The `lpattn` command. Each subcommand is a pair of functions: Add<Name> declares it and its
// options on the app, Run<Name> does the work and returns the exit status. Errors thrown by the
// work end the command with one line `lpattn: <message>` and status 1.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tbb/task_arena.h>

#include "harness/attention_arm.h"
#include "harness/checkpoint.h"
#include "harness/config.h"
#include "harness/figures.h"
#include "harness/onehead/experiments.h"
#include "harness/quant_error.h"
#include "harness/sweep.h"
#include "harness/sweep_plan.h"
#include "harness/trainer.h"
#include "kernels/attention.h"
#include "kernels/lpattn.h"

namespace lpattn::cli {
namespace {

namespace fs = std::filesystem;
using harness::TrainConfig;

// --threads N: run in a private TBB arena of N threads instead of the default one.
void AddThreadsOption(CLI::App* command, int& threads) {
  command->add_option("--threads", threads, "run in a TBB arena of N threads (default: all)")
      ->check(CLI::Range(1, 4096));
}

// Runs body in an arena of `threads` threads, or in the default arena when threads is 0.
template <class Body>
auto InArena(int threads, const Body& body) {
  if (threads <= 0) return body();
  tbb::task_arena arena(threads);
  return arena.execute(body);
}

std::string Join(const std::vector<std::string>& items) {
  std::string joined;
  for (const std::string& item : items) {
    if (!joined.empty()) joined += ' ';
    joined += item;
  }
  return joined;
}

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
  command->add_option("--preset", options.preset, "model preset: tiny, small, medium")
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
  AddOverride<int>(command, options, "--batch", "windows per step",
                   [](TrainConfig& c, int v) { c.batch = v; });
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

// ---- info ------------------------------------------------------------------------------------

struct InfoOptions {
  int threads = 0;
};

CLI::App* AddInfo(CLI::App& app, InfoOptions& options) {
  CLI::App* info = app.add_subcommand(
      "info", "library version, Highway targets (compiled, supported, chosen), TBB threads");
  AddThreadsOption(info, options.threads);
  return info;
}

int RunInfo(const InfoOptions& options) {
  const DispatchInfo dispatch = GetDispatchInfo();
  const int threads =
      InArena(options.threads, [] { return tbb::this_task_arena::max_concurrency(); });
  std::printf("lpattn %s\n", lpattn_version());
  std::printf("highway targets compiled:  %s\n", Join(dispatch.compiled).c_str());
  std::printf("highway targets supported: %s\n", Join(dispatch.supported).c_str());
  std::printf("highway target chosen:     %s\n", dispatch.chosen.c_str());
  std::printf("tbb threads:               %d\n", threads);
  return 0;
}

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

int RunTrain(const TrainOptions& options) {
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
  const TrainConfig config = BuildConfig(options.config, base);
  CheckArm(config.arm);

  harness::RunSummary summary;
  {
    ProgressLine line;
    summary = harness::TrainRun(config, options.out, options.resume, line.Fn());
  }
  std::printf("run             %s (preset %s, arm %s, seed %llu)\n", options.out.c_str(),
              config.preset.c_str(), config.arm.c_str(),
              static_cast<unsigned long long>(config.seed));
  std::printf("final val loss  %.4f (train %.4f)\n", summary.final_val_loss,
              summary.final_train_loss);
  std::printf("tokens/s        %s\n", harness::FormatRate(summary.tokens_per_s).c_str());
  std::printf("time            %s (%d steps)\n", harness::FormatDuration(summary.seconds).c_str(),
              summary.steps);
  harness::DrawFigures(options.out);
  return 0;
}

// ---- eval ------------------------------------------------------------------------------------

struct EvalOptions {
  std::string checkpoint, arm, data;
};

CLI::App* AddEval(CLI::App& app, EvalOptions& options) {
  CLI::App* eval = app.add_subcommand(
      "eval", "validation loss of a checkpoint, with its own arm or another (evaluation swap)");
  eval->add_option("--checkpoint", options.checkpoint, "checkpoint.bin of a run")->required();
  eval->add_option("--arm", options.arm, "evaluate with this arm (default: the trained one)");
  eval->add_option("--data", options.data, "corpus file (default: the run's)");
  return eval;
}

int RunEval(const EvalOptions& options) {
  if (!options.arm.empty()) CheckArm(options.arm);
  const harness::CheckpointState state = harness::ReadCheckpoint(options.checkpoint);
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

// ---- sweep and report ------------------------------------------------------------------------

void PrintReport(const std::string& dir) {
  const harness::SweepReport report = harness::ReportSweep(dir);
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
  sweep->add_option("--out", options.out, "sweep directory")->required();
  return sweep;
}

void PrintSweepRun(const harness::SweepRunInfo& run) {
  using Action = harness::SweepRunInfo::Action;
  if (run.action == Action::kEvaluate) {
    std::fprintf(stderr, "[swap %d/%d] %s seed %llu evaluated with %s\n", run.index, run.count,
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
      if (std::find(arms.begin(), arms.end(), arm) == arms.end()) arms.push_back(arm);
    }
  }
  for (const std::string& arm : arms) CheckArm(arm);
  const TrainConfig base = BuildConfig(options.config, harness::PresetConfig(preset));
  {
    ProgressLine line;
    harness::RunSweep(base, arms, seeds, options.out, line.Fn(), PrintSweepRun, extras);
  }
  PrintReport(options.out);
  return 0;
}

struct ReportOptions {
  std::string dir;
};

CLI::App* AddReport(CLI::App& app, ReportOptions& options) {
  CLI::App* report =
      app.add_subcommand("report", "the table of a sweep directory (rewrites report.md/json)");
  report->add_option("dir", options.dir, "sweep directory")->required();
  return report;
}

int RunReport(const ReportOptions& options) {
  PrintReport(options.dir);
  return 0;
}

struct QuantErrorCommand {
  harness::QuantErrorOptions measure;
  std::string out;
  int threads = 0;
};

CLI::App* AddQuantError(CLI::App& app, QuantErrorCommand& options) {
  CLI::App* command = app.add_subcommand(
      "quant-error",
      "error of O, dQ, dK, dV with low-precision operands against the fp64 reference, per "
      "format and granularity, on Gaussian and outlier-channel inputs");
  command->add_option("--tokens", options.measure.tokens, "causal self-attention length")
      ->capture_default_str();
  command->add_option("--heads", options.measure.heads, "heads")->capture_default_str();
  command->add_option("--dim", options.measure.head_dim, "head dimension")->capture_default_str();
  command->add_option("--seed", options.measure.seed, "input seed")->capture_default_str();
  command->add_option("--outlier-channels", options.measure.outlier_channels,
                      "outlier channels: scaled in Q (half as many in V), shifted in K")
      ->capture_default_str();
  command->add_option("--outlier-scale", options.measure.outlier_scale,
                      "factor on the outlier channels of Q and V")
      ->capture_default_str();
  command->add_option("--outlier-shift", options.measure.outlier_shift,
                      "per-channel offset of K's outlier channels")
      ->capture_default_str();
  command->add_option("--out", options.out,
                      "directory for quant-error.md and quant-error.json (default: print only)");
  AddThreadsOption(command, options.threads);
  return command;
}

int RunQuantError(const QuantErrorCommand& options) {
  const std::vector<harness::QuantErrorRow> rows =
      InArena(options.threads, [&] { return harness::MeasureQuantError(options.measure); });
  const std::string table = harness::FormatQuantErrorTable(rows);
  std::cout << table;
  if (!options.out.empty()) {
    fs::create_directories(options.out);
    harness::WriteFileAtomically(options.out + "/quant-error.md", table);
    harness::WriteFileAtomically(options.out + "/quant-error.json",
                                 harness::QuantErrorJson(options.measure, rows).dump(2) + "\n");
    std::cout << "\nwrote " << options.out << "/quant-error.md, " << options.out
              << "/quant-error.json\n";
  }
  return 0;
}

struct OneheadCommand {
  std::string experiment;
  onehead::OneheadOptions options;
  std::vector<std::string> corpora, kernel_corpora;
  std::string design_corpus;
  bool no_figures = false;
  int threads = 0;
};

// "MxN" -> {M, N}.
onehead::CorpusSize ParseCorpusSize(const std::string& text) {
  const size_t x = text.find('x');
  size_t used_m = 0, used_n = 0;
  onehead::CorpusSize size;
  try {
    if (x == std::string::npos) throw std::invalid_argument(text);
    size.m = std::stoll(text.substr(0, x), &used_m);
    size.n = std::stoll(text.substr(x + 1), &used_n);
  } catch (const std::exception&) {
    used_m = 0;
  }
  if (used_m == 0 || used_m != x || used_n != text.size() - x - 1) {
    throw std::invalid_argument("onehead: a corpus size is MxN (tasks x examples), got '" + text +
                                "'");
  }
  return size;
}

CLI::App* AddOnehead(CLI::App& app, OneheadCommand& c) {
  onehead::OneheadOptions& o = c.options;
  CLI::App* command = app.add_subcommand(
      "onehead",
      "the one-head threshold estimator's experiments (spec/harness.md §5): stationary, "
      "population, quadrature, transfer, grid, stepsize, init, design, matched, noise, boundary, "
      "kernels, or all (the set and report.md)");
  command->add_option("experiment", c.experiment, "experiment name, or all")->required();
  command->add_option("--out", o.out, "output directory (one folder per experiment)")
      ->capture_default_str();
  command->add_option("--transform", o.transform,
                      "row transform: exact, kint:<options>, tda:<options> (views=1)")
      ->capture_default_str();
  command->add_option("--seed", o.seed, "seed of corpora and fresh contexts")->capture_default_str();
  command->add_option("--order", o.quadrature.order,
                      "Gauss-Legendre order over alpha (0: max(64, 10 b))")->capture_default_str();
  command->add_option("--x-order", o.quadrature.x_order,
                      "order over x on each side of alpha, for transforms without a closed form "
                      "(0: max(64, 2 sqrt(b)))")->capture_default_str();
  command->add_option("--a0", o.population_init.a, "population runs: initial a")->capture_default_str();
  command->add_option("--b0", o.population_init.b, "population runs: initial b")->capture_default_str();
  command->add_option("--step", o.step, "population step size")->capture_default_str();
  command->add_option("--steps", o.steps, "population steps")->capture_default_str();
  command->add_option("--records", o.records, "iterates recorded per run (log-spaced)")
      ->capture_default_str();
  command->add_option("--orders", o.orders, "quadrature: fixed alpha orders compared")
      ->delimiter(',')->capture_default_str();
  command->add_option("--hitting-risk", o.hitting_risk, "quadrature: risk of the hitting time")
      ->capture_default_str();
  command->add_option("--step-sizes", o.step_sizes, "stepsize: step sizes, same horizon")
      ->delimiter(',')->capture_default_str();
  command->add_option("--init-radii", o.init_radii, "init: initial radii around zero")
      ->delimiter(',')->capture_default_str();
  command->add_option("--init-steps", o.init_steps, "init: the common budget of steps")
      ->capture_default_str();
  command->add_option("--corpora", c.corpora, "transfer: corpora MxN (default 16x16,...,1024x1024)")
      ->delimiter(',');
  command->add_option("--pretrain-step", o.pretrain_step, "finite pretraining step size")
      ->capture_default_str();
  command->add_option("--pretrain-steps", o.pretrain_steps, "finite pretraining steps")
      ->capture_default_str();
  command->add_option("--lengths", o.lengths, "fresh context lengths N (default 16,...,16384)")
      ->delimiter(',');
  command->add_option("--alphas", o.alphas, "fresh-context thresholds")->delimiter(',')
      ->capture_default_str();
  command->add_option("--contexts", o.contexts, "fresh contexts per (N, alpha) cell")
      ->capture_default_str();
  command->add_option("--grid-sizes", o.grid_sizes, "grid: values of m and of n")->delimiter(',')
      ->capture_default_str();
  command->add_option("--grid-radius", o.grid_radius, "grid: the common radius b")
      ->capture_default_str();
  command->add_option("--grid-length", o.grid_length, "grid: fresh context length N")
      ->capture_default_str();
  command->add_option("--designs", o.designs, "design: densities tilt:S, bump:A")->delimiter(',')
      ->capture_default_str();
  command->add_option("--corruption", o.corruption, "design: label flip rate in pretraining")
      ->capture_default_str();
  command->add_option("--design-corpus", c.design_corpus, "design: corpus MxN (default 256x256)");
  command->add_option("--matched-divisor", o.matched_divisor, "matched: mu = N / divisor")
      ->capture_default_str();
  command->add_option("--noises", o.noises,
                      "noise: massart:R, tsybakov:H, localized:H (H the band half-width)")
      ->delimiter(',')->capture_default_str();
  command->add_option("--boundary-radius", o.boundary_radius, "boundary: the estimator's b")
      ->capture_default_str();
  command->add_option("--boundary-length", o.boundary_length, "boundary: finite context length")
      ->capture_default_str();
  command->add_option("--kernels", o.kernels, "kernels: the row transforms compared")
      ->delimiter(',')->capture_default_str();
  command->add_option("--kernel-step", o.kernel_step, "kernels: population step size")
      ->capture_default_str();
  command->add_option("--kernel-steps", o.kernel_steps, "kernels: population steps")
      ->capture_default_str();
  command->add_option("--threshold-step", o.threshold_step,
                      "kernels: population step size of the thresholded transform")
      ->capture_default_str();
  command->add_option("--kernel-max-length", o.kernel_max_length,
                      "kernels: the largest fresh context N (half the contexts per cell)")
      ->capture_default_str();
  command->add_option("--kernel-corpora", c.kernel_corpora, "kernels: corpora MxN")->delimiter(',');
  command->add_flag("--no-figures", c.no_figures, "skip the figures");
  AddThreadsOption(command, c.threads);
  return command;
}

int RunOnehead(OneheadCommand& c) {
  onehead::OneheadOptions& o = c.options;
  if (!c.corpora.empty()) {
    o.corpora.clear();
    for (const std::string& text : c.corpora) o.corpora.push_back(ParseCorpusSize(text));
  }
  if (!c.kernel_corpora.empty()) {
    o.kernel_corpora.clear();
    for (const std::string& text : c.kernel_corpora) o.kernel_corpora.push_back(ParseCorpusSize(text));
  }
  if (!c.design_corpus.empty()) o.design_corpus = ParseCorpusSize(c.design_corpus);
  o.figures = !c.no_figures;
  onehead::ValidateOnehead(c.experiment, o);
  InArena(c.threads, [&] { return onehead::RunOnehead(c.experiment, o); });
  return 0;
}

}  // namespace
}  // namespace lpattn::cli

int main(int argc, char** argv) {
  using namespace lpattn::cli;
  CLI::App app{"lpattn: low-precision attention kernels and a harness that measures them"};
  app.name("lpattn");
  app.require_subcommand(0, 1);

  InfoOptions info_options;
  TrainOptions train_options;
  EvalOptions eval_options;
  SweepOptions sweep_options;
  ReportOptions report_options;
  QuantErrorCommand quant_error_options;
  OneheadCommand onehead_options;
  CLI::App* info = AddInfo(app, info_options);
  CLI::App* train = AddTrain(app, train_options);
  CLI::App* eval = AddEval(app, eval_options);
  CLI::App* sweep = AddSweep(app, sweep_options);
  CLI::App* report = AddReport(app, report_options);
  CLI::App* quant_error = AddQuantError(app, quant_error_options);
  CLI::App* onehead_command = AddOnehead(app, onehead_options);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and friends print and succeed; usage errors end like every other error.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::fprintf(stderr, "lpattn: %s (see lpattn --help)\n", e.what());
    return 1;
  }
  try {
    if (info->parsed()) return RunInfo(info_options);
    if (train->parsed()) return RunTrain(train_options);
    if (eval->parsed()) return RunEval(eval_options);
    if (sweep->parsed()) return RunSweep(sweep_options);
    if (report->parsed()) return RunReport(report_options);
    if (quant_error->parsed()) return RunQuantError(quant_error_options);
    if (onehead_command->parsed()) return RunOnehead(onehead_options);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "lpattn: %s\n", e.what());
    return 1;
  }
  std::cerr << app.help();
  return 1;
}
