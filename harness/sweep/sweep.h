// Sweeps (docs/harness.md §3): a set of arms times a set of seeds, everything else matched,
// one run directory each, and the report that compares every arm with `exact`, paired by seed.
//
// Layout of a sweep directory:
//   sweep.json                   arms, seeds, the base config (without arm and seed), and for
//                                a planned sweep its plan, evaluation swaps and paper column
//   <ArmDirName(arm)>/seed-<s>/  one run directory (config.json records the real arm), plus
//                                eval-<ArmDirName(with)>.json for each evaluation swap
//   report.json, report.md       written by ReportSweep
//   figures/                     drawn by scripts/plot_run.py from the files above
#ifndef LPATTN_HARNESS_SWEEP_SWEEP_H_
#define LPATTN_HARNESS_SWEEP_SWEEP_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/model/config.h"
#include "harness/sweep/paired_stats.h"
#include "harness/train/trainer.h"

namespace lpattn::harness {

// Splits a comma-separated list of arm specs, keeping the commas inside an arm's options: a
// piece of the form key=value ("cal=window", "pv=fp8e4m3"; the key letters, digits and '_')
// continues the arm before it, so "exact,kint:K=4,cal=window,sink+qk=int8,pv=fp8e4m3" is three
// arms. Empty pieces are dropped.
std::vector<std::string> SplitArmList(const std::string& list);

// A filesystem-safe directory name for an arm spec: letters, digits and . = + - are kept,
// every other byte (':' and ',' in "kint:K=4,cal=window") becomes '_'; a leading '.' becomes
// '_', so the name is never hidden, "." or "..". Names longer than 120 bytes are cut and end in
// a hash of the whole spec. Two arms of one sweep that map to one name are rejected.
std::string ArmDirName(const std::string& arm);

// The run directory of (arm, seed), relative to the sweep directory: "<ArmDirName>/seed-<s>".
std::string RunDirName(const std::string& arm, uint64_t seed);

// An evaluation swap (docs/harness.md §3): each finished run of arm `trained` is evaluated
// again with arm `with`, which must add the same per-layer parameters (CheckSwappable).
struct EvalSwap {
  std::string trained, with;
  std::string paper;  // what a plan's source reports for it; empty otherwise
};

// The file in a run directory that holds the run's evaluation with arm `with`:
// "eval-<ArmDirName(with)>.json" = {"arm", "step", "val_loss"}.
std::string SwapFileName(const std::string& with);

// What a sweep holds beyond arms x seeds; a named plan (sweep_plan.h) fills it in.
struct SweepExtras {
  std::string plan;                          // the plan's name, recorded in sweep.json
  std::string reference;                     // the arm gaps are paired with; empty: `exact`
  std::map<std::string, std::string> paper;  // arm -> what the plan's source reports
  std::vector<EvalSwap> swaps;
  // Evaluations of every finished run (docs/harness.md §3.4): with each interference
  // (ParseInterference text, canonical form) into InterferenceFileName(spec), and at each
  // context (tokens) into ContextFileName(context).
  std::vector<std::string> interference;
  std::vector<int64_t> contexts;
};

// "interference-<ArmDirName(canonical spec)>.json" and "context-<n>.json" in a run directory:
// the JSON that `lpattn eval --interference/--context --out` writes.
std::string InterferenceFileName(const std::string& interference);
std::string ContextFileName(int64_t context);

// What RunSweep does with one run, reported before it starts on it.
struct SweepRunInfo {
  std::string arm;
  uint64_t seed = 0;
  std::string dir;  // the run directory (out_dir joined with RunDirName)
  int index = 0, count = 0;  // 1-based position among the sweep's runs (or its swaps)
  enum class Action { kTrain, kResume, kSkip, kEvaluate } action = Action::kTrain;
  std::string with;  // kEvaluate: the arm this finished run is evaluated with
};
using SweepRunFn = std::function<void(const SweepRunInfo&)>;

// Runs every (arm, seed) of `arms` x `seeds` (arm-major) with `base` otherwise unchanged into
// out_dir/RunDirName(arm, seed). Every arm's config is validated before any run starts. Writes
// out_dir/sweep.json first, atomically; an existing sweep.json must have the same base config
// (thread count aside), and its arms and seeds are kept (the new ones are appended), so a sweep
// can grow. A run whose summary.json exists is skipped (its config.json must match); one with a
// checkpoint but no summary is resumed; one stopped before its first checkpoint is restarted.
// Then every evaluation swap of the sweep (extras' and sweep.json's) is run on each finished
// run of its trained arm that has no SwapFileName(with) yet. Throws std::invalid_argument for
// empty or duplicate arms or seeds, colliding directory names, an invalid config (also one
// that fixes both init_seed and data_seed, which would make every seed the same run), a
// reference arm not in the sweep or different from the one sweep.json names, or a swap whose
// trained arm is not in the sweep or whose arms are not swappable, before writing anything.
//
// Over several ranks (docs/harness.md §3.7) every rank checks the sweep, rank 0 writes
// sweep.json, and run i (0-based, arm-major) is trained by rank i mod P alone, with its own
// threads; on_run and progress are called for the runs of the rank that calls. Rank 0 runs the
// swaps once every rank has finished. The directory must be one every rank sees (a shared file
// system across machines). A run's numbers do not depend on which rank or how many ranks ran it.
void RunSweep(const TrainConfig& base, const std::vector<std::string>& arms,
              const std::vector<uint64_t>& seeds, const std::string& out_dir,
              const ProgressFn& progress, const SweepRunFn& on_run = {},
              const SweepExtras& extras = {}, const Ranks& ranks = Ranks::Self());

// One seed of one arm.
struct SeedRun {
  uint64_t seed = 0;
  std::string dir;      // relative to the sweep directory
  bool done = false;    // its summary.json exists
  double final_val_loss = 0.0, tokens_per_s = 0.0;  // when done
  uint64_t tokens = 0;  // training tokens the run saw (steps x batch x context), when done
  // The lowest validation loss of metrics.csv (when done and the file has one): a final loss
  // above it means the loss turned up during the run.
  std::optional<double> best_val_loss;
  // A run that diverged (done, its summary says so; docs/harness.md §3.2): the tokens it trained
  // before the step whose loss or gradient was not finite. Such a run has no final loss: it is
  // left out of the arm's means and gaps and listed apart.
  std::optional<uint64_t> diverged_at_tokens;

  bool has_final_loss() const { return done && !diverged_at_tokens; }
};

struct SeedGap {
  uint64_t seed = 0;
  double gap = 0.0;  // this arm's final validation loss minus the reference's, same seed (nats)
};

struct ArmReport {
  std::string arm;
  std::vector<SeedRun> runs;            // every seed of the sweep, in the sweep's order
  std::vector<uint64_t> missing_seeds;  // seeds without a summary.json
  std::optional<double> mean_val_loss;  // over the finished runs
  std::optional<double> tokens_per_s_mean;
  // Gaps exist only when the reference arm (SweepReport::reference) is one of the sweep's arms.
  // They are paired by seed: a seed counts only when both this arm's run and the reference's
  // run finished. `gap` has their mean, std and intervals; `verdict` is Verdict(gap).
  bool has_reference = false;
  std::vector<SeedGap> gaps;
  std::vector<uint64_t> unpaired_seeds;  // finished here, but the reference's run did not
  PairedSummary gap;
  std::string verdict;
  // Mean over finished runs of final minus best validation loss (>= 0; 0 when the loss never
  // turned up).
  std::optional<double> rise_mean;
  std::string paper;  // what the plan's source reports for this arm; empty otherwise
  // Attention diagnostics (each run's attention.json), means over the runs that have them:
  // the zero fraction, first-token mass and sink rate, and the abstention mass (sink arms).
  std::optional<double> zero_frac, first_mass, sink_rate, abstention;
  // Per interference of the sweep (in SweepExtras order), means over the runs with its file:
  // increase, share corrupted, mass on corrupted, gates (corrupted, clean), abstention (clean,
  // corrupted); and per context: loss, and the last position bucket's loss, entropy and max.
  struct InterferenceRow {
    std::string interference;
    int runs = 0;
    std::optional<double> increase, share, mass, gate_corrupted, gate_clean, abstention_clean,
        abstention;
    // The fields the gating statements pair by seed, per run in `runs`' order (nullopt where a
    // run has no file or no value): docs/harness.md §4.
    struct PerRun {
      std::optional<double> increase, gate_corrupted, gate_clean, abstention_clean, abstention;
    };
    std::vector<PerRun> per_run;
  };
  struct ContextRow {
    int64_t context = 0;
    int runs = 0;
    std::optional<double> loss, last_loss, last_entropy, last_max_weight;
  };
  std::vector<InterferenceRow> interference;
  std::vector<ContextRow> contexts;

  int finished() const;
  bool diverged() const;  // a run of the arm diverged
};

// One seed of an evaluation swap.
struct SeedSwap {
  uint64_t seed = 0;
  double own_val_loss = 0.0;      // the run's final validation loss with its own arm
  double swapped_val_loss = 0.0;  // the same checkpoint evaluated with the other arm
};

struct SwapReport {
  EvalSwap swap;
  std::vector<SeedSwap> runs;           // the seeds whose run and swap file exist
  std::vector<uint64_t> missing_seeds;  // the others
  std::optional<double> swapped_mean;
  std::optional<double> change_mean, change_std;  // swapped minus own, paired by seed
  std::optional<double> gap_mean, gap_std;        // swapped minus the reference's run
};

struct SweepReport {
  std::string plan;  // empty for a sweep given by its arms
  std::string reference;  // the arm gaps are paired with
  std::vector<ArmReport> arms;
  std::vector<SwapReport> swaps;
};

// The default reference arm of a sweep's gaps.
inline constexpr const char* kDefaultReferenceArm = "exact";

// Reads out_dir/sweep.json and every run's summary.json, metrics.csv and swap files; writes
// out_dir/report.json and out_dir/report.md atomically and returns the report, arms in the
// sweep's order. Gaps are paired with `reference` when given, else with the arm sweep.json
// names, else with `exact`. Throws std::runtime_error when out_dir holds no sweep.json or a
// file cannot be parsed, and std::invalid_argument when a given reference is not one of the
// sweep's arms.
SweepReport ReportSweep(const std::string& out_dir, const std::string& reference = "");

// The Markdown tables. Arms: arm | runs | final val loss (mean) | gap to <reference>
// (mean ± std) | 95% CI (paired t) | 95% CI (bootstrap) | verdict | per-seed gaps | rise after
// best | tokens per run | tokens/s (and a `paper` column after the gap when the plan has one),
// followed by a line saying when the reference arm is missing. Then, when the sweep has
// evaluation swaps, one row per swap: the trained arm, the arm it is evaluated with, the
// swapped loss, its change from the own-arm loss and its gap to the reference. Then, when runs
// have attention diagnostics, a table of them per arm.
std::string FormatReportTable(const SweepReport& report);

// Formatting shared with the command line.
// A rate for people: "873", "12.4k", "1.25M" (tokens per second in tables and progress lines).
std::string FormatRate(double per_second);
// "0:42", "12:05", "1:02:03".
std::string FormatDuration(double seconds);
// "step 120/300  train 2.31  val 2.45  12.4k tok/s  ETA 0:42" ("val -" before the first).
std::string FormatProgress(const Progress& p);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_SWEEP_SWEEP_H_
