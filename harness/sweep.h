// Sweeps (spec/harness.md §3): a set of arms times a set of seeds, everything else matched,
// one run directory each, and the report that compares every arm with `exact`, paired by seed.
//
// Layout of a sweep directory:
//   sweep.json                   arms, seeds and the base config (without arm and seed)
//   <ArmDirName(arm)>/seed-<s>/  one run directory (config.json records the real arm)
//   report.json, report.md       written by ReportSweep
//   figures/                     drawn by scripts/plot_run.py from the files above
#ifndef LPATTN_HARNESS_SWEEP_H_
#define LPATTN_HARNESS_SWEEP_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harness/config.h"
#include "harness/trainer.h"

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

// What RunSweep does with one run, reported before it starts on it.
struct SweepRunInfo {
  std::string arm;
  uint64_t seed = 0;
  std::string dir;  // the run directory (out_dir joined with RunDirName)
  int index = 0, count = 0;  // 1-based position among the sweep's runs
  enum class Action { kTrain, kResume, kSkip } action = Action::kTrain;
};
using SweepRunFn = std::function<void(const SweepRunInfo&)>;

// Runs every (arm, seed) of `arms` x `seeds` (arm-major) with `base` otherwise unchanged into
// out_dir/RunDirName(arm, seed). Every arm's config is validated before any run starts. Writes
// out_dir/sweep.json first, atomically; an existing sweep.json must have the same base config
// (thread count aside), and its arms and seeds are kept (the new ones are appended), so a sweep
// can grow. A run whose summary.json exists is skipped (its config.json must match); one with a
// checkpoint but no summary is resumed; one stopped before its first checkpoint is restarted.
// Throws std::invalid_argument for empty or duplicate arms or seeds, colliding directory names
// or an invalid config, before writing anything.
void RunSweep(const TrainConfig& base, const std::vector<std::string>& arms,
              const std::vector<uint64_t>& seeds, const std::string& out_dir,
              const ProgressFn& progress, const SweepRunFn& on_run = {});

// One seed of one arm.
struct SeedRun {
  uint64_t seed = 0;
  std::string dir;      // relative to the sweep directory
  bool done = false;    // its summary.json exists
  double final_val_loss = 0.0, tokens_per_s = 0.0;  // when done
};

struct SeedGap {
  uint64_t seed = 0;
  double gap = 0.0;  // this arm's final validation loss minus exact's, same seed (nats)
};

struct ArmReport {
  std::string arm;
  std::vector<SeedRun> runs;            // every seed of the sweep, in the sweep's order
  std::vector<uint64_t> missing_seeds;  // seeds without a summary.json
  std::optional<double> mean_val_loss;  // over the finished runs
  std::optional<double> tokens_per_s_mean;
  // Gaps to exact exist only when `exact` is one of the sweep's arms. They are paired by seed:
  // a seed counts only when both this arm's run and exact's run finished.
  bool has_reference = false;
  std::vector<SeedGap> gaps;
  std::vector<uint64_t> unpaired_seeds;  // finished here, but exact's run of that seed did not
  std::optional<double> gap_mean;
  std::optional<double> gap_std;  // sample standard deviation (n - 1); needs two gaps

  int finished() const;
};

inline constexpr const char* kReferenceArm = "exact";

// Reads out_dir/sweep.json and every run's summary.json; writes out_dir/report.json and
// out_dir/report.md atomically and returns the reports in the sweep's arm order. Throws
// std::runtime_error when out_dir holds no sweep.json or a file cannot be parsed.
std::vector<ArmReport> ReportSweep(const std::string& out_dir);

// The Markdown table: arm | runs | final val loss (mean) | gap to exact (mean ± std) |
// per-seed gaps | tokens/s, followed by a line saying when there is no exact arm.
std::string FormatReportTable(const std::vector<ArmReport>& reports);

// Formatting shared with the command line.
// A rate for people: "873", "12.4k", "1.25M" (tokens per second in tables and progress lines).
std::string FormatRate(double per_second);
// "0:42", "12:05", "1:02:03".
std::string FormatDuration(double seconds);
// "step 120/300  train 2.31  val 2.45  12.4k tok/s  ETA 0:42" ("val -" before the first).
std::string FormatProgress(const Progress& p);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_SWEEP_H_
