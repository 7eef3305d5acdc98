// Sweeps and their report (docs/harness.md §3): directory names, the arm-list syntax, paired
// gaps to exact on synthetic run directories, and one small real sweep for skip and resume.
//
// Over 500 lines on purpose: the synthetic run directories at its top serve every test of the
// report; the real sweep at the end reuses them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/model/attention_arm.h"
#include "harness/sweep/sweep.h"
#include "harness/sweep/sweep_plan.h"
#include "kernels/kinterval.h"
#include "tests/harness/harness_fixture.h"

namespace lpattn::harness::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// A sweep directory as RunSweep leaves it, with a summary.json for each given (arm, seed, loss).
struct SyntheticRun {
  std::string arm;
  uint64_t seed;
  double loss;
  double tokens_per_s = 1000.0;
};

void WriteSyntheticSweep(const ScratchDir& dir, const std::vector<std::string>& arms,
                         const std::vector<uint64_t>& seeds,
                         const std::vector<SyntheticRun>& runs) {
  json config = PresetConfig("tiny");
  config.erase("arm");
  config.erase("seed");
  std::ofstream(dir / "sweep.json") << json{{"arms", arms}, {"seeds", seeds}, {"config", config}};
  for (const SyntheticRun& run : runs) {
    const fs::path run_dir = dir.path / RunDirName(run.arm, run.seed);
    fs::create_directories(run_dir);
    std::ofstream(run_dir / "summary.json")
        << json{{"final_val_loss", run.loss}, {"final_train_loss", run.loss - 0.1},
                {"tokens_per_s", run.tokens_per_s}, {"steps", 60}, {"seconds", 1.0},
                {"arm", run.arm}, {"preset", "tiny"}, {"seed", run.seed}, {"threads", 1}};
  }
}

const ArmReport& Find(const std::vector<ArmReport>& reports, const std::string& arm) {
  for (const ArmReport& r : reports) {
    if (r.arm == arm) return r;
  }
  throw std::runtime_error("no report for " + arm);
}

// ---- names -----------------------------------------------------------------------------------

TEST(SweepNames, PlainArmsKeepTheirNames) {
  EXPECT_EQ(ArmDirName("exact"), "exact");
  EXPECT_EQ(ArmDirName("sink+normgate"), "sink+normgate");
  EXPECT_EQ(RunDirName("exact", 3), "exact/seed-3");
}

TEST(SweepNames, ColonsCommasAndSlashesBecomeUnderscores) {
  EXPECT_EQ(ArmDirName("kint:K=4,cal=window,W=8"), "kint_K=4_cal=window_W=8");
  EXPECT_EQ(ArmDirName("a/b\\c d"), "a_b_c_d");
  EXPECT_EQ(ArmDirName("exact+qk=int8,pv=fp8e4m3"), "exact+qk=int8_pv=fp8e4m3");
}

TEST(SweepNames, NeverHiddenDotOrEmpty) {
  EXPECT_EQ(ArmDirName(""), "_");
  EXPECT_EQ(ArmDirName("."), "_");
  EXPECT_EQ(ArmDirName(".."), "_.");
  EXPECT_EQ(ArmDirName(".hidden"), "_hidden");
}

TEST(SweepNames, LongNamesAreCutAndStayDistinct) {
  const std::string stem = "kint:" + std::string(200, 'x');
  const std::string a = ArmDirName(stem + ",K=4"), b = ArmDirName(stem + ",K=8");
  EXPECT_LE(a.size(), 120u);
  EXPECT_LE(b.size(), 120u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a, ArmDirName(stem + ",K=4"));  // deterministic
}

TEST(SweepNames, SplitKeepsOptionCommasWithTheirArm) {
  EXPECT_EQ(SplitArmList("exact,sink"), (std::vector<std::string>{"exact", "sink"}));
  EXPECT_EQ(SplitArmList("exact,kint:K=4,cal=window,W=8,sink"),
            (std::vector<std::string>{"exact", "kint:K=4,cal=window,W=8", "sink"}));
  EXPECT_EQ(SplitArmList("exact,exact+qk=int8,pv=fp8e4m3,,outgate"),
            (std::vector<std::string>{"exact", "exact+qk=int8,pv=fp8e4m3", "outgate"}));
  EXPECT_TRUE(SplitArmList("").empty());
}

TEST(SweepFormat, RatesDurationsAndProgress) {
  EXPECT_EQ(FormatRate(873.2), "873");
  EXPECT_EQ(FormatRate(12400.0), "12.4k");
  EXPECT_EQ(FormatRate(1.25e6), "1.25M");
  EXPECT_EQ(FormatDuration(42.2), "0:42");
  EXPECT_EQ(FormatDuration(725.0), "12:05");
  EXPECT_EQ(FormatDuration(3723.0), "1:02:03");
  Progress p;
  p.step = 120;
  p.steps = 300;
  p.train_loss = 2.314;
  p.tokens_per_s = 12400.0;
  p.eta_s = 42.0;
  EXPECT_EQ(FormatProgress(p), "step 120/300  train 2.31  val -  12.4k tok/s  ETA 0:42");
  p.val_loss = 2.454;
  EXPECT_EQ(FormatProgress(p), "step 120/300  train 2.31  val 2.45  12.4k tok/s  ETA 0:42");
}

// ---- report on synthetic runs ----------------------------------------------------------------

TEST(SweepReport, GapsArePairedBySeed) {
  ScratchDir dir("sweep-paired");
  WriteSyntheticSweep(dir, {"exact", "sink"}, {1, 2, 3},
                      {{"exact", 1, 2.0, 1000}, {"exact", 2, 2.1, 2000}, {"exact", 3, 2.2, 3000},
                       {"sink", 1, 2.1}, {"sink", 2, 2.3}, {"sink", 3, 2.2}});
  const SweepReport report = ReportSweep(dir.path.string());
  const std::vector<ArmReport>& reports = report.arms;
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].arm, "exact");  // the sweep's order

  const ArmReport& exact = Find(reports, "exact");
  EXPECT_EQ(exact.finished(), 3);
  EXPECT_NEAR(*exact.mean_val_loss, 2.1, 1e-12);
  EXPECT_NEAR(*exact.tokens_per_s_mean, 2000.0, 1e-9);
  EXPECT_NEAR(*exact.gap.mean, 0.0, 1e-12);

  const ArmReport& sink = Find(reports, "sink");
  ASSERT_EQ(sink.gaps.size(), 3u);
  EXPECT_EQ(sink.gaps[0].seed, 1u);
  EXPECT_NEAR(sink.gaps[0].gap, 0.1, 1e-12);
  EXPECT_NEAR(sink.gaps[1].gap, 0.2, 1e-12);
  EXPECT_NEAR(sink.gaps[2].gap, 0.0, 1e-12);
  EXPECT_NEAR(*sink.gap.mean, 0.1, 1e-12);
  EXPECT_NEAR(*sink.gap.std_dev, 0.1, 1e-12);  // sample std of {0.1, 0.2, 0.0}
  // 95% paired t interval: 0.1 ± t(0.975, 2) 0.1 / sqrt(3), t(0.975, 2) = 4.302653.
  ASSERT_TRUE(sink.gap.t95.has_value());
  EXPECT_NEAR(sink.gap.t95->low, 0.1 - 4.302653 * 0.1 / std::sqrt(3.0), 1e-6);
  EXPECT_NEAR(sink.gap.t95->high, 0.1 + 4.302653 * 0.1 / std::sqrt(3.0), 1e-6);
  // The bootstrap's resampled means lie between the smallest and largest gap.
  ASSERT_TRUE(sink.gap.bootstrap95.has_value());
  EXPECT_GE(sink.gap.bootstrap95->low, 0.0);
  EXPECT_LT(sink.gap.bootstrap95->low, 0.1);
  EXPECT_GT(sink.gap.bootstrap95->high, 0.1);
  EXPECT_LE(sink.gap.bootstrap95->high, 0.2 + 1e-12);
  EXPECT_EQ(sink.verdict, "within noise");
  EXPECT_TRUE(sink.missing_seeds.empty());
  EXPECT_TRUE(sink.unpaired_seeds.empty());
  const TrainConfig tiny = PresetConfig("tiny");
  const uint64_t tokens = uint64_t(tiny.steps) * uint64_t(tiny.batch) * uint64_t(tiny.model.context);
  EXPECT_EQ(sink.runs[0].tokens, tokens);  // old summaries: from the sweep's config

  const std::string table = FormatReportTable(report);
  EXPECT_NE(table.find("| `sink` | 3/3 | 2.2000 | +0.1000 ± 0.1000 (n=3) | [-0.1484, +0.3484] | "),
            std::string::npos)
      << table;
  EXPECT_NE(table.find(" | within noise | 1: +0.1000, 2: +0.2000, 3: +0.0000 | — | "),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| 1.0k |"), std::string::npos) << table;
  EXPECT_NE(table.find("| `exact` | 3/3 | 2.1000 | reference |"), std::string::npos) << table;
  EXPECT_NE(table.find("| `exact` | 3/3 | 2.1000 | reference |"), std::string::npos) << table;
  const json saved = ReadJsonFile(dir / "report.json");
  EXPECT_EQ(saved["arms"][1]["gap_to_reference"]["verdict"], "within noise");
  EXPECT_NEAR(saved["arms"][1]["gap_to_reference"]["t95"][0].get<double>(), sink.gap.t95->low,
              1e-12);
  EXPECT_EQ(saved["arms"][1]["runs"][0]["tokens"].get<uint64_t>(), tokens);
}

TEST(SweepReport, AGapWhoseIntervalExcludesZeroIsNotNoise) {
  ScratchDir dir("sweep-verdict");
  WriteSyntheticSweep(dir, {"exact", "kint", "sink"}, {1, 2, 3},
                      {{"exact", 1, 2.0}, {"exact", 2, 2.1}, {"exact", 3, 2.2},
                       {"kint", 1, 2.30}, {"kint", 2, 2.41}, {"kint", 3, 2.49},
                       {"sink", 1, 1.90}, {"sink", 2, 2.01}, {"sink", 3, 2.09}});
  const SweepReport report = ReportSweep(dir.path.string());
  EXPECT_EQ(Find(report.arms, "kint").verdict, "worse");
  EXPECT_EQ(Find(report.arms, "sink").verdict, "better");
  EXPECT_GT(Find(report.arms, "kint").gap.t95->low, 0.0);
  EXPECT_NE(FormatReportTable(report).find("| worse |"), std::string::npos);

  // Another reference: every gap is paired with sink's runs instead.
  const SweepReport against_sink = ReportSweep(dir.path.string(), "sink");
  EXPECT_EQ(against_sink.reference, "sink");
  EXPECT_NEAR(*Find(against_sink.arms, "exact").gap.mean, 0.1, 1e-12);
  EXPECT_EQ(Find(against_sink.arms, "exact").verdict, "worse");
  const std::string table = FormatReportTable(against_sink);
  EXPECT_NE(table.find("gap to sink (mean ± std)"), std::string::npos) << table;
  EXPECT_NE(table.find("| `sink` | 3/3 | 2.0000 | reference |"), std::string::npos) << table;
  EXPECT_EQ(ReadJsonFile(dir / "report.json")["reference"], "sink");
  EXPECT_THROW(ReportSweep(dir.path.string(), "outgate"), std::invalid_argument);
}

TEST(SweepReport, MissingSeedsAreReportedNotDropped) {
  ScratchDir dir("sweep-missing");
  // sink lacks seed 2; exact lacks seed 3, so sink's seed 3 has nothing to pair with.
  WriteSyntheticSweep(dir, {"exact", "sink"}, {1, 2, 3},
                      {{"exact", 1, 2.0}, {"exact", 2, 2.1}, {"sink", 1, 2.25}, {"sink", 3, 2.5}});
  const SweepReport report = ReportSweep(dir.path.string());
  const std::vector<ArmReport>& reports = report.arms;
  const ArmReport& exact = Find(reports, "exact");
  const ArmReport& sink = Find(reports, "sink");
  EXPECT_EQ(exact.missing_seeds, (std::vector<uint64_t>{3}));
  EXPECT_EQ(sink.missing_seeds, (std::vector<uint64_t>{2}));
  ASSERT_EQ(sink.runs.size(), 3u);
  EXPECT_FALSE(sink.runs[1].done);
  ASSERT_EQ(sink.gaps.size(), 1u);
  EXPECT_EQ(sink.gaps[0].seed, 1u);
  EXPECT_NEAR(sink.gaps[0].gap, 0.25, 1e-12);
  EXPECT_EQ(sink.unpaired_seeds, (std::vector<uint64_t>{3}));
  EXPECT_FALSE(sink.gap.std_dev.has_value());  // one gap: no sample std
  EXPECT_FALSE(sink.gap.t95.has_value());
  EXPECT_EQ(sink.verdict, "n=1: no interval");
  EXPECT_NEAR(*sink.mean_val_loss, 2.375, 1e-12);

  const std::string table = FormatReportTable(report);
  EXPECT_NE(table.find("2/3 (missing seed 2)"), std::string::npos) << table;
  EXPECT_NE(table.find("2/3 (missing seed 3)"), std::string::npos) << table;
  EXPECT_NE(table.find("+0.2500 (n=1) | — | — | n=1: no interval | 1: +0.2500, 3: no exact run"),
            std::string::npos)
      << table;

  const json saved = ReadJsonFile(dir / "report.json");
  EXPECT_EQ(saved["reference"], "exact");
  EXPECT_EQ(saved["arms"][1]["missing_seeds"], json::array({2}));
  EXPECT_EQ(saved["arms"][1]["gap_to_reference"]["unpaired_seeds"], json::array({3}));
  EXPECT_TRUE(saved["arms"][1]["gap_to_reference"]["std"].is_null());
  EXPECT_TRUE(saved["arms"][1]["runs"][1]["final_val_loss"].is_null());
}

// A diverged run (docs/harness.md §3.2) is finished but has no final loss: it is left out of the
// arm's mean and gaps, listed in the runs column with the tokens it trained, and an arm whose
// every run diverged has the verdict "diverged".
TEST(SweepReport, DivergedRunsAreListedApartFromTheGaps) {
  ScratchDir dir("sweep-diverged");
  WriteSyntheticSweep(dir, {"exact", "kint:K=32", "sink"}, {1, 2},
                      {{"exact", 1, 2.0}, {"exact", 2, 2.1}, {"kint:K=32", 1, 2.3},
                       {"kint:K=32", 2, 2.35}, {"sink", 1, 2.2}, {"sink", 2, 2.4}});
  auto diverge = [&](const std::string& arm, uint64_t seed, uint64_t tokens) {
    const fs::path path = dir.path / RunDirName(arm, seed) / "summary.json";
    json summary = ReadJsonFile(path.string());
    summary["diverged_at_step"] = 7;
    summary["diverged_at_tokens"] = tokens;
    std::ofstream(path) << summary;
  };
  diverge("kint:K=32", 1, 4608000);
  diverge("kint:K=32", 2, 4761600);
  diverge("sink", 2, 1500);
  const SweepReport report = ReportSweep(dir.path.string());
  const ArmReport& kint = Find(report.arms, "kint:K=32");
  const ArmReport& sink = Find(report.arms, "sink");
  EXPECT_EQ(kint.finished(), 2);
  EXPECT_TRUE(kint.diverged());
  EXPECT_FALSE(kint.mean_val_loss.has_value());
  EXPECT_TRUE(kint.gaps.empty());
  EXPECT_EQ(kint.verdict, "diverged");
  ASSERT_TRUE(kint.runs[1].diverged_at_tokens.has_value());
  EXPECT_EQ(*kint.runs[1].diverged_at_tokens, 4761600u);
  // sink's seed 1 finished: its gap alone, its mean its own loss.
  ASSERT_EQ(sink.gaps.size(), 1u);
  EXPECT_NEAR(sink.gaps[0].gap, 0.2, 1e-12);
  EXPECT_NEAR(*sink.mean_val_loss, 2.2, 1e-12);
  EXPECT_EQ(sink.verdict, "n=1: no interval");
  EXPECT_FALSE(Find(report.arms, "exact").diverged());

  const std::string table = FormatReportTable(report);
  EXPECT_NE(table.find("| `kint:K=32` | 2/2 (diverged: seed 1 at 4.6M tokens, seed 2 at 4.8M) | "
                       "— | no paired seeds | — | — | diverged |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| `sink` | 2/2 (diverged: seed 2 at 2k tokens) |"), std::string::npos)
      << table;
  const json saved = ReadJsonFile(dir / "report.json");
  EXPECT_EQ(saved["arms"][1]["runs"][0]["diverged_at_tokens"], 4608000);
  EXPECT_TRUE(saved["arms"][1]["runs"][0]["final_val_loss"].is_null());
  EXPECT_TRUE(saved["arms"][0]["runs"][0]["diverged_at_tokens"].is_null());

  // A swap file beside a diverged run (written before it was known to diverge) is not a result.
  json sweep = ReadJsonFile(dir / "sweep.json");
  sweep["swaps"] = json::array({{{"trained", "sink"}, {"with", "exact"}}});
  std::ofstream(dir / "sweep.json") << sweep;
  for (const uint64_t seed : {1, 2}) {
    std::ofstream(dir.path / RunDirName("sink", seed) / SwapFileName("exact"))
        << json{{"arm", "exact"}, {"trained", "sink"}, {"val_loss", 3.0 + double(seed)}};
  }
  const SwapReport swap = ReportSweep(dir.path.string()).swaps.at(0);
  ASSERT_EQ(swap.runs.size(), 1u);
  EXPECT_EQ(swap.missing_seeds, (std::vector<uint64_t>{2}));
  EXPECT_NEAR(*swap.swapped_mean, 4.0, 1e-12);
}

TEST(SweepReport, ArmWithoutRunsHasNoMeans) {
  ScratchDir dir("sweep-empty-arm");
  WriteSyntheticSweep(dir, {"exact", "outgate"}, {1}, {{"exact", 1, 2.0}});
  const SweepReport report = ReportSweep(dir.path.string());
  const std::vector<ArmReport>& reports = report.arms;
  const ArmReport& outgate = Find(reports, "outgate");
  EXPECT_EQ(outgate.finished(), 0);
  EXPECT_FALSE(outgate.mean_val_loss.has_value());
  EXPECT_FALSE(outgate.gap.mean.has_value());
  const std::string table = FormatReportTable(report);
  EXPECT_NE(table.find("| `outgate` | 0/1 (missing seed 1) | — | no paired seeds | — | — | "
                       "no paired seeds | — | — | — | — |"),
            std::string::npos)
      << table;
}

TEST(SweepReport, WithoutExactThereAreNoGaps) {
  ScratchDir dir("sweep-no-exact");
  WriteSyntheticSweep(dir, {"sink", "outgate"}, {1, 2},
                      {{"sink", 1, 2.0}, {"sink", 2, 2.2},
                       {"outgate", 1, 2.1}, {"outgate", 2, 2.3}});
  const SweepReport report = ReportSweep(dir.path.string());
  const std::vector<ArmReport>& reports = report.arms;
  for (const ArmReport& r : reports) {
    EXPECT_FALSE(r.has_reference);
    EXPECT_TRUE(r.gaps.empty());
    EXPECT_FALSE(r.gap.mean.has_value());
  }
  EXPECT_NEAR(*Find(reports, "sink").mean_val_loss, 2.1, 1e-12);
  const std::string table = FormatReportTable(report);
  EXPECT_NE(table.find("| n/a | n/a | n/a | n/a | n/a |"), std::string::npos) << table;
  EXPECT_NE(table.find("No `exact` arm in this sweep"), std::string::npos) << table;

  const json saved = ReadJsonFile(dir / "report.json");
  EXPECT_TRUE(saved["reference"].is_null());
  EXPECT_TRUE(saved["arms"][0]["gap_to_reference"].is_null());
  std::ifstream md(dir / "report.md");
  const std::string markdown((std::istreambuf_iterator<char>(md)), {});
  EXPECT_NE(markdown.find("No `exact` arm"), std::string::npos) << markdown;
}

TEST(SweepReport, RiseIsFinalMinusBestValidationLoss) {
  ScratchDir dir("sweep-rise");
  WriteSyntheticSweep(dir, {"exact"}, {1, 2}, {{"exact", 1, 2.3}, {"exact", 2, 2.0}});
  // Seed 1's loss went down to 2.1 and back up to 2.3; seed 2's only went down.
  std::ofstream(dir / "exact/seed-1/metrics.csv")
      << "step,tokens,train_loss,val_loss,lr,tokens_per_s\n"
      << "10,640,2.9,2.5,0.001,1000\n20,1280,2.5,2.1,0.001,1000\n30,1920,2.4,2.3,0.001,1000\n";
  std::ofstream(dir / "exact/seed-2/metrics.csv")
      << "step,tokens,train_loss,val_loss,lr,tokens_per_s\n"
      << "10,640,2.9,2.4,0.001,1000\n20,1280,2.5,2.0,0.001,1000\n";
  const SweepReport report = ReportSweep(dir.path.string());
  const ArmReport& exact = report.arms[0];
  ASSERT_TRUE(exact.runs[0].best_val_loss.has_value());
  EXPECT_DOUBLE_EQ(*exact.runs[0].best_val_loss, 2.1);
  EXPECT_DOUBLE_EQ(*exact.runs[1].best_val_loss, 2.0);
  ASSERT_TRUE(exact.rise_mean.has_value());
  EXPECT_NEAR(*exact.rise_mean, 0.1, 1e-12);  // (0.2 + 0) / 2
  EXPECT_NE(FormatReportTable(report).find("| reference | — | — | — | — | 0.1000 | 154k | 1.0k |"), std::string::npos)
      << FormatReportTable(report);
}

TEST(SweepReport, DiagnosticsAreAveragedOverSeeds) {
  ScratchDir dir("sweep-diagnostics");
  WriteSyntheticSweep(dir, {"exact", "sink"}, {1, 2},
                      {{"exact", 1, 2.0}, {"exact", 2, 2.1}, {"sink", 1, 2.0}, {"sink", 2, 2.1}});
  auto write = [&](const std::string& arm, uint64_t seed, double first, const json& abstention) {
    std::ofstream(dir.path / RunDirName(arm, seed) / "attention.json")
        << json{{"zero_frac", 0.0}, {"first_mass", first}, {"sink_rate", first > 0.3 ? 1.0 : 0.0},
                {"abstention", abstention}, {"layers", json::array()}};
  };
  write("exact", 1, 0.2, nullptr);
  write("exact", 2, 0.4, nullptr);
  write("sink", 1, 0.1, 0.5);  // sink seed 2 has no attention.json: one run's values
  const SweepReport report = ReportSweep(dir.path.string());
  EXPECT_NEAR(*report.arms[0].first_mass, 0.3, 1e-12);
  EXPECT_NEAR(*report.arms[0].sink_rate, 0.5, 1e-12);
  EXPECT_FALSE(report.arms[0].abstention.has_value());
  EXPECT_NEAR(*report.arms[1].abstention, 0.5, 1e-12);
  const std::string table = FormatReportTable(report);
  EXPECT_NE(table.find("| `exact` | 0.0000 | 0.3000 | 0.5000 | — |"), std::string::npos) << table;
  EXPECT_NE(table.find("| `sink` | 0.0000 | 0.1000 | 0.0000 | 0.5000 |"), std::string::npos)
      << table;
}

// The value-gating paper's statements (docs/harness.md §4) read off a gating-paper report:
// sinks kept by the value gate and removed by the output gate; an additive and a sub-additive
// composite; a gate that filters noise and is protected, an arm less protected than exact, and
// one whose protection is within noise (per-seed differences with 95% intervals).
TEST(SweepReport, GatingPaperReportGivesEachStatementAVerdict) {
  ScratchDir dir("sweep-claims");
  const std::vector<std::string> arms = {"exact", "normgate", "outgate", "sink", "outgate+normgate",
                                         "outgate+sink"};
  // Losses: normgate -0.02, outgate -0.03, sink -0.01; outgate+normgate adds up (-0.05 +- noise),
  // outgate+sink gains nothing over outgate (sub-additive: +0.01 interaction).
  std::vector<SyntheticRun> runs;
  const double base[3] = {2.00, 2.10, 2.05}, noise[3] = {0.001, -0.002, 0.001};
  for (uint64_t s = 1; s <= 3; ++s) {
    const double e = base[s - 1];
    runs.push_back({"exact", s, e});
    runs.push_back({"normgate", s, e - 0.02});
    runs.push_back({"outgate", s, e - 0.03});
    runs.push_back({"sink", s, e - 0.01});
    runs.push_back({"outgate+normgate", s, e - 0.05 + noise[s - 1]});
    runs.push_back({"outgate+sink", s, e - 0.03 + noise[s - 1] / 10});
  }
  WriteSyntheticSweep(dir, arms, {1, 2, 3}, runs);
  json sweep = ReadJsonFile(dir / "sweep.json");
  sweep["plan"] = "gating-paper";
  sweep["interference"] = json::array({"noise:rho=0.1:sigma=1"});
  std::ofstream(dir / "sweep.json") << sweep;
  for (const std::string& arm : arms) {
    const double sink_rate = arm == "exact" || arm == "normgate" ? 0.5 : 0.0;
    for (uint64_t s = 1; s <= 3; ++s) {
      const fs::path run = dir.path / RunDirName(arm, s);
      std::ofstream(run / "attention.json")
          << json{{"zero_frac", 0.0}, {"first_mass", sink_rate}, {"sink_rate", sink_rate},
                  {"abstention", nullptr}, {"layers", json::array()}};
      const bool gate = arm.find("normgate") != std::string::npos;
      // sink's increase straddles exact's across seeds: protection within noise.
      const double sink_increase[3] = {0.03, 0.01, 0.02};
      const double increase = arm == "exact" ? 0.02
                              : gate         ? 0.01
                              : arm == "sink" ? sink_increase[s - 1]
                                             : 0.03;
      std::ofstream(run / InterferenceFileName("noise:rho=0.1,sigma=1"))
          << json{{"increase", increase},
                  {"corrupted_share", 0.1}, {"corrupted_mass", 0.1},
                  {"gate_corrupted", gate ? json(0.40) : json(nullptr)},
                  {"gate_clean", gate ? json(0.50) : json(nullptr)},
                  {"abstention_clean", nullptr}, {"abstention", nullptr}};
    }
  }
  const std::string table = FormatReportTable(ReportSweep(dir.path.string()));
  EXPECT_NE(table.find("removes it: holds (sink rate: `exact` 0.500, `normgate` 0.500, "
                       "`outgate` 0.000)"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("`outgate+normgate` against `outgate` + `normgate`: additive within noise"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("`outgate+sink` against `outgate` + `sink`: sub-additive"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("`normgate` filters, protected (increase minus exact's -0.0100 "
                       "[-0.0100, -0.0100], n=3);"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("`outgate` less protected than exact (increase minus exact's +0.0100 "
                       "[+0.0100, +0.0100], n=3);"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("`sink` protection within noise (increase minus exact's -0.0000 "
                       "[-0.0248, +0.0248], n=3);"),
            std::string::npos)
      << table;

  // Where exact has no sink, statement 1 says so instead of a verdict.
  for (uint64_t s = 1; s <= 3; ++s) {
    std::ofstream(dir.path / RunDirName("exact", s) / "attention.json")
        << json{{"zero_frac", 0.0}, {"first_mass", 0.06}, {"sink_rate", 0.0},
                {"abstention", nullptr}, {"layers", json::array()}};
  }
  const std::string small = FormatReportTable(ReportSweep(dir.path.string()));
  EXPECT_NE(small.find("not visible at this scale: no head of `exact` has a first-token sink"),
            std::string::npos)
      << small;
}

TEST(SweepReport, PlanSweepsShowThePaperColumnAndTheSwaps) {
  ScratchDir dir("sweep-plan");
  const std::string k2 = "kint:K=2:cal=minmax:round=lerp:ste=exact";
  WriteSyntheticSweep(dir, {"exact", k2}, {1, 2},
                      {{"exact", 1, 2.0}, {"exact", 2, 2.2}, {k2, 1, 2.1}, {k2, 2, 2.4}});
  json sweep = ReadJsonFile(dir / "sweep.json");
  sweep["plan"] = "test-plan";
  sweep["paper"] = {{"exact", "reference"}, {k2, "+0.5"}};
  sweep["swaps"] = json::array({{{"trained", k2}, {"with", "exact"}, {"paper", "collapses"}}});
  std::ofstream(dir / "sweep.json") << sweep;
  // Seed 1 was evaluated with exact; seed 2's swap is missing.
  std::ofstream(dir.path / RunDirName(k2, 1) / SwapFileName("exact"))
      << json{{"arm", "exact"}, {"trained", k2}, {"val_loss", 3.1}};

  const SweepReport report = ReportSweep(dir.path.string());
  EXPECT_EQ(report.plan, "test-plan");
  EXPECT_EQ(report.arms[1].paper, "+0.5");
  ASSERT_EQ(report.swaps.size(), 1u);
  const SwapReport& swap = report.swaps[0];
  EXPECT_EQ(swap.swap.with, "exact");
  ASSERT_EQ(swap.runs.size(), 1u);
  EXPECT_EQ(swap.missing_seeds, (std::vector<uint64_t>{2}));
  EXPECT_NEAR(*swap.swapped_mean, 3.1, 1e-12);
  EXPECT_NEAR(*swap.change_mean, 1.0, 1e-12);  // 3.1 - its own 2.1
  EXPECT_NEAR(*swap.gap_mean, 1.1, 1e-12);     // 3.1 - exact's 2.0
  EXPECT_FALSE(swap.change_std.has_value());

  const std::string table = FormatReportTable(report);
  EXPECT_NE(table.find("| `" + k2 + "` | 2/2 | 2.2500 | +0.1500 ± 0.0707 (n=2) | +0.5 | [-0.4853, "
                       "+0.7853] | [+0.1000, +0.2000] | within noise | 1: "),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| `" + k2 + "` | `exact` | 1/2 (missing seed 2) | 3.1000 | "
                       "+1.0000 (n=1) | +1.1000 (n=1) | collapses |"),
            std::string::npos)
      << table;
  const json saved = ReadJsonFile(dir / "report.json");
  EXPECT_EQ(saved["plan"], "test-plan");
  EXPECT_EQ(saved["swaps"][0]["runs"][0]["swapped_val_loss"], 3.1);
  std::ifstream md(dir / "report.md");
  const std::string markdown((std::istreambuf_iterator<char>(md)), {});
  EXPECT_NE(markdown.find("plan `test-plan`"), std::string::npos) << markdown;
}

TEST(SweepReport, RejectsADirectoryWithoutSweepJson) {
  ScratchDir dir("sweep-none");
  EXPECT_THROW(ReportSweep(dir.path.string()), std::runtime_error);
}

TEST(SweepReport, RejectsASummaryOfAnotherArm) {
  ScratchDir dir("sweep-wrong-arm");
  WriteSyntheticSweep(dir, {"exact"}, {1}, {});
  fs::create_directories(dir.path / "exact" / "seed-1");
  std::ofstream(dir.path / "exact" / "seed-1" / "summary.json")
      << json{{"final_val_loss", 2.0}, {"tokens_per_s", 1.0}, {"arm", "sink"}};
  EXPECT_THROW(ReportSweep(dir.path.string()), std::runtime_error);
}

// ---- RunSweep ----------------------------------------------------------------------------------

TEST(SweepRun, RejectsBadArmListsBeforeWriting) {
  ScratchDir dir("sweep-reject");
  const TrainConfig base = PresetConfig("tiny");
  const std::string out = dir / "out";
  EXPECT_THROW(RunSweep(base, {}, {1}, out, {}), std::invalid_argument);
  EXPECT_THROW(RunSweep(base, {"exact"}, {}, out, {}), std::invalid_argument);
  EXPECT_THROW(RunSweep(base, {"exact", "exact"}, {1}, out, {}), std::invalid_argument);
  EXPECT_THROW(RunSweep(base, {"exact"}, {1, 1}, out, {}), std::invalid_argument);
  EXPECT_THROW(RunSweep(base, {"exact", "no-such-arm"}, {1}, out, {}), std::invalid_argument);
  EXPECT_FALSE(fs::exists(out));

  fs::create_directories(out);
  std::ofstream(out + "/config.json") << "{}";  // a training run's directory
  EXPECT_THROW(RunSweep(base, {"exact"}, {1}, out, {}), std::invalid_argument);
  EXPECT_FALSE(fs::exists(out + "/sweep.json"));
}

// Issue 20: a missing corpus used to fail only in the first run, after sweep.json was written.
TEST(SweepRun, MissingCorpusFailsBeforeWriting) {
  ScratchDir dir("sweep-no-corpus");
  TrainConfig base = PresetConfig("tiny");
  base.data = dir / "no-such-corpus.txt";
  const std::string out = dir / "out";
  EXPECT_THROW(RunSweep(base, {"exact"}, {1}, out, {}), std::runtime_error);
  EXPECT_FALSE(fs::exists(out));
}

TEST(SweepRun, SkipsFinishedRunsAndResumesStoppedOnes) {
  ScratchDir dir("sweep-run");
  TrainConfig base = TinyTestConfig(WriteGeneratedCorpus(dir));
  base.steps = 20;
  const std::string out = dir / "out";
  std::vector<SweepRunInfo> seen;
  const SweepRunFn record = [&](const SweepRunInfo& info) { seen.push_back(info); };

  RunSweep(base, {"exact", "sink"}, {7}, out, {}, record);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].arm, "sink");
  EXPECT_EQ(seen[1].index, 2);
  EXPECT_EQ(seen[1].action, SweepRunInfo::Action::kTrain);
  const json config = ReadJsonFile(out + "/sink/seed-7/config.json");
  EXPECT_EQ(config["arm"], "sink");
  EXPECT_EQ(config["seed"], 7);
  const json sweep = ReadJsonFile(out + "/sweep.json");
  EXPECT_EQ(sweep["arms"], json::array({"exact", "sink"}));
  EXPECT_FALSE(sweep["config"].contains("arm"));
  const std::vector<ArmReport> first = ReportSweep(out).arms;

  // A run that lost its summary (stopped after its last checkpoint) is resumed; finished ones
  // are skipped; the numbers are those of the uninterrupted sweep.
  fs::remove(out + "/sink/seed-7/summary.json");
  seen.clear();
  RunSweep(base, {"exact", "sink"}, {7}, out, {}, record);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].action, SweepRunInfo::Action::kSkip);
  EXPECT_EQ(seen[1].action, SweepRunInfo::Action::kResume);
  const std::vector<ArmReport> second = ReportSweep(out).arms;
  // A run resumed at its last step takes its final loss back from metrics.csv, written with
  // 17 significant digits: the same double.
  EXPECT_EQ(first[1].runs[0].final_val_loss, second[1].runs[0].final_val_loss);
  ASSERT_TRUE(second[1].gap.mean.has_value());

  // One stopped before its first checkpoint has nothing to resume: it starts again.
  fs::remove(out + "/exact/seed-7/summary.json");
  fs::remove(out + "/exact/seed-7/checkpoint.bin");
  seen.clear();
  RunSweep(base, {"exact"}, {7}, out, {}, record);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].action, SweepRunInfo::Action::kTrain);
  EXPECT_EQ(ReportSweep(out).arms[0].runs[0].final_val_loss, first[0].runs[0].final_val_loss);

  // A different base config is not mixed into this directory.
  TrainConfig other = base;
  other.lr = 2e-3f;
  EXPECT_THROW(RunSweep(other, {"exact"}, {7}, out, {}), std::invalid_argument);
}

TEST(SweepRun, RejectsSwapsItCannotRunBeforeWriting) {
  ScratchDir dir("sweep-bad-swap");
  const TrainConfig base = PresetConfig("tiny");
  const std::string out = dir / "out";
  SweepExtras not_an_arm;
  not_an_arm.swaps = {{"sink", "exact", ""}};
  EXPECT_THROW(RunSweep(base, {"exact"}, {1}, out, {}, {}, not_an_arm), std::invalid_argument);
  SweepExtras other_params;  // outgate adds per-layer parameters that exact has not
  other_params.swaps = {{"exact", "outgate", ""}};
  EXPECT_THROW(RunSweep(base, {"exact"}, {1}, out, {}, {}, other_params), std::invalid_argument);
  SweepExtras bad_arm;
  bad_arm.swaps = {{"exact", "kint:K=0", ""}};
  EXPECT_THROW(RunSweep(base, {"exact"}, {1}, out, {}, {}, bad_arm), std::invalid_argument);
  EXPECT_FALSE(fs::exists(out));
}

TEST(SweepRun, EvaluatesSwapsOnceAfterTraining) {
  ScratchDir dir("sweep-swap");
  TrainConfig base = TinyTestConfig(WriteGeneratedCorpus(dir));
  base.steps = 20;
  const std::string out = dir / "out";
  // The window calibration (W = 8, intervals of 4): under minmax, 20 steps leave the scores
  // so close together that K = 2's chords are exp to within float rounding, and the swapped
  // loss can equal the trained one to the last bit.
  const std::string k2 = "kint:K=2:cal=window:W=8:round=lerp:ste=exact";
  SweepExtras extras;
  extras.plan = "test";
  extras.swaps = {{k2, "exact", ""}};
  std::vector<SweepRunInfo> seen;
  const SweepRunFn record = [&](const SweepRunInfo& info) { seen.push_back(info); };
  RunSweep(base, {"exact", k2}, {5}, out, {}, record, extras);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[2].action, SweepRunInfo::Action::kEvaluate);
  EXPECT_EQ(seen[2].with, "exact");
  const std::string swap_file = out + "/" + RunDirName(k2, 5) + "/" + SwapFileName("exact");
  const json result = ReadJsonFile(swap_file);
  // The same checkpoint evaluated directly gives the recorded loss.
  const double direct =
      EvaluateCheckpoint(out + "/" + RunDirName(k2, 5) + "/checkpoint.bin", "exact", "");
  EXPECT_EQ(result["val_loss"].get<double>(), direct);

  const SweepReport report = ReportSweep(out);
  EXPECT_EQ(report.plan, "test");
  ASSERT_EQ(report.swaps.size(), 1u);
  ASSERT_EQ(report.swaps[0].runs.size(), 1u);
  EXPECT_EQ(report.swaps[0].runs[0].swapped_val_loss, direct);
  // The model was trained with K-interval weights; exact ones are a different function.
  EXPECT_NE(report.swaps[0].runs[0].swapped_val_loss, report.swaps[0].runs[0].own_val_loss);

  // A second sweep without extras keeps them (from sweep.json) and does not evaluate again.
  seen.clear();
  RunSweep(base, {"exact", k2}, {5}, out, {}, record);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(ReadJsonFile(out + "/sweep.json")["swaps"].size(), 1u);
}

// ---- plans -------------------------------------------------------------------------------------

TEST(SweepPlans, KIntervalPaperPlanIsTheSpecTable) {
  const SweepPlan& plan = FindSweepPlan("kint-paper");
  EXPECT_EQ(plan.preset, "small");
  EXPECT_EQ(plan.seeds, (std::vector<uint64_t>{1, 2, 3}));
  ASSERT_EQ(plan.arms.size(), 11u);  // exact, 9 rows of docs/harness.md §4, and the swap's lerp K=2
  EXPECT_EQ(plan.arms[0].arm, "exact");
  std::set<std::string> kinds;
  for (const PlannedArm& a : plan.arms) {
    EXPECT_NO_THROW(MakeArm(a.arm)) << a.arm;
    EXPECT_FALSE(a.paper.empty()) << a.arm;
    if (a.arm == "exact") continue;
    // Arms are written in the canonical form, so a report names them as FormatKInterval does.
    const std::string options = a.arm.substr(5);
    EXPECT_EQ(FormatKInterval(ParseKInterval(options)), options);
    kinds.insert(options);
  }
  EXPECT_EQ(kinds.size(), 10u);
  ASSERT_EQ(plan.swaps.size(), 1u);
  const std::vector<std::string> names = plan.ArmNames();
  EXPECT_NE(std::find(names.begin(), names.end(), plan.swaps[0].trained), names.end());
  EXPECT_NO_THROW(CheckSwappable(plan.swaps[0].trained, plan.swaps[0].with,
                                 PresetConfig("small").model));
  const SweepExtras extras = plan.Extras();
  EXPECT_EQ(extras.plan, "kint-paper");
  EXPECT_EQ(extras.paper.at("kint:K=4:cal=minmax:round=nearest:ste=weight"), "+0.89 (large)");
}

TEST(SweepPlans, GatingPlanRunsEveryGatingArm) {
  const SweepPlan& plan = FindSweepPlan("gating");
  EXPECT_EQ(plan.preset, "small");
  EXPECT_EQ(plan.arms.size(), 9u);
  EXPECT_EQ(plan.arms[0].arm, "exact");
  for (const PlannedArm& a : plan.arms) EXPECT_NO_THROW(MakeArm(a.arm)) << a.arm;
  EXPECT_TRUE(plan.swaps.empty());
}

TEST(SweepPlans, LowPrecisionPlanIsExactAtEachPrecision) {
  const SweepPlan& plan = FindSweepPlan("lowp");
  EXPECT_EQ(plan.preset, "small");
  EXPECT_EQ(plan.seeds, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(plan.arms[0].arm, "exact");
  std::set<std::string> precisions;
  for (const PlannedArm& a : plan.arms) {
    const std::unique_ptr<AttentionArm> arm = MakeArm(a.arm);
    EXPECT_EQ(arm->KernelName(), "exact") << a.arm;
    EXPECT_EQ(arm->Name(), a.arm) << "not canonical";
    precisions.insert(a.arm.substr(std::min(a.arm.size(), a.arm.find('+'))));
  }
  EXPECT_EQ(precisions.size(), plan.arms.size());
  // The whole model in bf16 (docs/harness.md §1.1) with each forward attention precision.
  for (const PlannedArm& a : plan.arms) {
    if (a.arm.find("bwd=") != std::string::npos && a.arm.find("p=bf16") == std::string::npos) {
      continue;  // backward-only rows
    }
    if (a.arm.find("dense=") != std::string::npos || a.arm.find("gran=") != std::string::npos ||
        a.arm.find("p=int8") != std::string::npos) {
      continue;
    }
    const std::string bf16 =
        a.arm == "exact" ? "exact+dense=bf16" : a.arm + ":dense=bf16";
    EXPECT_TRUE(std::any_of(plan.arms.begin(), plan.arms.end(),
                            [&](const PlannedArm& b) { return b.arm == bf16; }))
        << bf16;
    EXPECT_EQ(MakeArm(bf16)->dense_format(), DenseFormat::kBf16);
  }
  for (const quant::Format f : quant::kAllFormats) {
    const std::string name = quant::FormatName(f);
    EXPECT_TRUE(std::any_of(plan.arms.begin(), plan.arms.end(), [&](const PlannedArm& a) {
      return f == quant::Format::kFp32 || a.arm.find("qk=" + name) != std::string::npos;
    })) << name;
  }
  // Each low-precision backward format has a row (docs/math.md §4.2).
  for (const char* bwd : {"bwd=bf16", "bwd=fp16", "bwd=int8"}) {
    EXPECT_TRUE(std::any_of(plan.arms.begin(), plan.arms.end(), [&](const PlannedArm& a) {
      return a.arm.find(bwd) != std::string::npos;
    })) << bwd;
  }
  ASSERT_EQ(plan.swaps.size(), 2u);
  for (const EvalSwap& swap : plan.swaps) {
    EXPECT_NO_THROW(CheckSwappable(swap.trained, swap.with, PresetConfig("small").model));
  }
}

// The value-gating paper's plan: every gate and composite, interference at evaluation.
TEST(SweepPlans, GatingPaperPlanHasTheCompositesAndInterference) {
  const SweepPlan& plan = FindSweepPlan("gating-paper");
  EXPECT_EQ(plan.preset, "medium");
  EXPECT_EQ(PresetConfig(plan.preset).model.context, 256);  // where sinks form
  const std::vector<std::string> arms = plan.ArmNames();
  for (const char* arm : {"exact", "sink", "normgate", "projgate", "outgate", "outgate+sink",
                          "outgate+normgate", "outgate+projgate", "sink+normgate"}) {
    EXPECT_NE(std::find(arms.begin(), arms.end(), arm), arms.end()) << arm;
  }
  for (const std::string& arm : arms) EXPECT_NO_THROW(MakeArm(arm)) << arm;
  ASSERT_EQ(plan.interference.size(), 2u);
  for (const std::string& spec : plan.interference) EXPECT_NO_THROW(ParseInterference(spec));
  EXPECT_EQ(plan.Extras().interference, plan.interference);
}

TEST(SweepPlans, ThresholdPaperPlanTrainsRotaryModelsAndEvaluatesLonger) {
  const SweepPlan& plan = FindSweepPlan("tda-paper");
  TrainConfig config = PresetConfig(plan.preset);
  plan.Configure(config);
  EXPECT_EQ(config.model.pos, "rope");
  EXPECT_EQ(config.model.context, 256);
  EXPECT_EQ(plan.contexts, (std::vector<int64_t>{256, 512, 1024}));
  EXPECT_EQ(plan.ArmNames(), (std::vector<std::string>{"exact", "tda:views=1", "tda"}));
}

TEST(SweepPlans, DetachPlanSeesThirtyMillionTokens) {
  const SweepPlan& plan = FindSweepPlan("kint-detach");
  TrainConfig config = PresetConfig(plan.preset);
  plan.Configure(config);
  EXPECT_GE(int64_t(config.steps) * config.batch * config.model.context, 30'000'000);
  EXPECT_EQ(plan.seeds.size(), 2u);
  EXPECT_EQ(MakeArm(plan.arms[1].arm)->KernelName(), plan.arms[1].arm);
}

// A sweep's evaluations (docs/harness.md §3.4): each finished run evaluated once with each
// interference and at each context, the files read into the report's tables.
TEST(SweepRun, EvaluatesInterferenceAndContextsOnce) {
  ScratchDir dir("sweep-evaluations");
  TrainConfig base = TinyTestConfig(WriteGeneratedCorpus(dir));
  base.steps = 8;
  base.eval_every = 4;
  base.checkpoint_every = 8;
  base.model.context = 16;
  const std::string out = dir / "out";
  SweepExtras extras;
  extras.interference = {"noise:rho=0.2,sigma=2"};
  extras.contexts = {32};
  // Learned positions cannot be evaluated at 32 tokens: refused before writing.
  EXPECT_THROW(RunSweep(base, {"exact", "normgate"}, {1}, out, {}, {}, extras),
               std::invalid_argument);
  EXPECT_FALSE(fs::exists(out));
  base.model.pos = "rope";
  int evaluations = 0;
  const SweepRunFn count = [&](const SweepRunInfo& info) {
    evaluations += info.action == SweepRunInfo::Action::kEvaluate;
  };
  RunSweep(base, {"exact", "normgate"}, {1, 2}, out, {}, count, extras);
  EXPECT_EQ(evaluations, 8);  // 4 runs x (1 interference + 1 context)
  const std::string file = InterferenceFileName("noise:rho=0.2,sigma=2");
  EXPECT_EQ(file, "interference-noise_rho=0.2_sigma=2.json");
  EXPECT_TRUE(fs::exists(out + "/normgate/seed-2/" + file));
  EXPECT_TRUE(fs::exists(out + "/exact/seed-1/" + ContextFileName(32)));
  EXPECT_EQ(ReadJsonFile(out + "/sweep.json")["interference"],
            json::array({"noise:rho=0.2:sigma=2"}));
  evaluations = 0;
  RunSweep(base, {"exact", "normgate"}, {1, 2}, out, {}, count, extras);
  EXPECT_EQ(evaluations, 0);  // done once

  const SweepReport report = ReportSweep(out);
  const ArmReport& normgate = Find(report.arms, "normgate");
  ASSERT_EQ(normgate.interference.size(), 1u);
  EXPECT_EQ(normgate.interference[0].runs, 2);
  EXPECT_TRUE(normgate.interference[0].gate_corrupted.has_value());
  EXPECT_FALSE(Find(report.arms, "exact").interference[0].gate_corrupted.has_value());
  ASSERT_EQ(normgate.contexts.size(), 1u);
  EXPECT_EQ(normgate.contexts[0].context, 32);
  EXPECT_TRUE(normgate.contexts[0].last_entropy.has_value());
  const std::string table = FormatReportTable(report);
  EXPECT_NE(table.find("| `normgate` | `noise:rho=0.2:sigma=2` | 2 | +"), std::string::npos)
      << table;
  EXPECT_NE(table.find("| `exact` | 32 | 2 | "), std::string::npos) << table;
}

TEST(SweepPlans, UnknownPlanListsTheKnownOnes) {
  try {
    FindSweepPlan("no-such-plan");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("kint-paper"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lpattn::harness::test
