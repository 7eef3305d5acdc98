// Sweeps and their report (spec/harness.md §3): directory names, the arm-list syntax, paired
// gaps to exact on synthetic run directories, and one small real sweep for skip and resume.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/sweep.h"
#include "tests/harness_fixture.h"

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
  const std::vector<ArmReport> reports = ReportSweep(dir.path.string());
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].arm, "exact");  // the sweep's order

  const ArmReport& exact = Find(reports, "exact");
  EXPECT_EQ(exact.finished(), 3);
  EXPECT_NEAR(*exact.mean_val_loss, 2.1, 1e-12);
  EXPECT_NEAR(*exact.tokens_per_s_mean, 2000.0, 1e-9);
  EXPECT_NEAR(*exact.gap_mean, 0.0, 1e-12);

  const ArmReport& sink = Find(reports, "sink");
  ASSERT_EQ(sink.gaps.size(), 3u);
  EXPECT_EQ(sink.gaps[0].seed, 1u);
  EXPECT_NEAR(sink.gaps[0].gap, 0.1, 1e-12);
  EXPECT_NEAR(sink.gaps[1].gap, 0.2, 1e-12);
  EXPECT_NEAR(sink.gaps[2].gap, 0.0, 1e-12);
  EXPECT_NEAR(*sink.gap_mean, 0.1, 1e-12);
  EXPECT_NEAR(*sink.gap_std, 0.1, 1e-12);  // sample std of {0.1, 0.2, 0.0}
  EXPECT_TRUE(sink.missing_seeds.empty());
  EXPECT_TRUE(sink.unpaired_seeds.empty());

  const std::string table = FormatReportTable(reports);
  EXPECT_NE(table.find("| `sink` | 3/3 | 2.2000 | +0.1000 ± 0.1000 (n=3) | "
                       "1: +0.1000, 2: +0.2000, 3: +0.0000 | 1.0k |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| `exact` | 3/3 | 2.1000 | reference |"), std::string::npos) << table;
}

TEST(SweepReport, MissingSeedsAreReportedNotDropped) {
  ScratchDir dir("sweep-missing");
  // sink lacks seed 2; exact lacks seed 3, so sink's seed 3 has nothing to pair with.
  WriteSyntheticSweep(dir, {"exact", "sink"}, {1, 2, 3},
                      {{"exact", 1, 2.0}, {"exact", 2, 2.1}, {"sink", 1, 2.25}, {"sink", 3, 2.5}});
  const std::vector<ArmReport> reports = ReportSweep(dir.path.string());
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
  EXPECT_FALSE(sink.gap_std.has_value());  // one gap: no sample std
  EXPECT_NEAR(*sink.mean_val_loss, 2.375, 1e-12);

  const std::string table = FormatReportTable(reports);
  EXPECT_NE(table.find("2/3 (missing seed 2)"), std::string::npos) << table;
  EXPECT_NE(table.find("2/3 (missing seed 3)"), std::string::npos) << table;
  EXPECT_NE(table.find("+0.2500 (n=1) | 1: +0.2500, 3: no exact run"), std::string::npos)
      << table;

  const json report = ReadJsonFile(dir / "report.json");
  EXPECT_EQ(report["reference"], "exact");
  EXPECT_EQ(report["arms"][1]["missing_seeds"], json::array({2}));
  EXPECT_EQ(report["arms"][1]["gap_to_exact"]["unpaired_seeds"], json::array({3}));
  EXPECT_TRUE(report["arms"][1]["gap_to_exact"]["std"].is_null());
  EXPECT_TRUE(report["arms"][1]["runs"][1]["final_val_loss"].is_null());
}

TEST(SweepReport, ArmWithoutRunsHasNoMeans) {
  ScratchDir dir("sweep-empty-arm");
  WriteSyntheticSweep(dir, {"exact", "outgate"}, {1}, {{"exact", 1, 2.0}});
  const std::vector<ArmReport> reports = ReportSweep(dir.path.string());
  const ArmReport& outgate = Find(reports, "outgate");
  EXPECT_EQ(outgate.finished(), 0);
  EXPECT_FALSE(outgate.mean_val_loss.has_value());
  EXPECT_FALSE(outgate.gap_mean.has_value());
  const std::string table = FormatReportTable(reports);
  EXPECT_NE(table.find("| `outgate` | 0/1 (missing seed 1) | — | no paired seeds | — | — |"),
            std::string::npos)
      << table;
}

TEST(SweepReport, WithoutExactThereAreNoGaps) {
  ScratchDir dir("sweep-no-exact");
  WriteSyntheticSweep(dir, {"sink", "outgate"}, {1, 2},
                      {{"sink", 1, 2.0}, {"sink", 2, 2.2},
                       {"outgate", 1, 2.1}, {"outgate", 2, 2.3}});
  const std::vector<ArmReport> reports = ReportSweep(dir.path.string());
  for (const ArmReport& r : reports) {
    EXPECT_FALSE(r.has_reference);
    EXPECT_TRUE(r.gaps.empty());
    EXPECT_FALSE(r.gap_mean.has_value());
  }
  EXPECT_NEAR(*Find(reports, "sink").mean_val_loss, 2.1, 1e-12);
  const std::string table = FormatReportTable(reports);
  EXPECT_NE(table.find("| n/a | n/a |"), std::string::npos) << table;
  EXPECT_NE(table.find("No `exact` arm in this sweep"), std::string::npos) << table;

  const json report = ReadJsonFile(dir / "report.json");
  EXPECT_TRUE(report["reference"].is_null());
  EXPECT_TRUE(report["arms"][0]["gap_to_exact"].is_null());
  std::ifstream md(dir / "report.md");
  const std::string markdown((std::istreambuf_iterator<char>(md)), {});
  EXPECT_NE(markdown.find("No `exact` arm"), std::string::npos) << markdown;
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
  const std::vector<ArmReport> first = ReportSweep(out);

  // A run that lost its summary (stopped after its last checkpoint) is resumed; finished ones
  // are skipped; the numbers are those of the uninterrupted sweep.
  fs::remove(out + "/sink/seed-7/summary.json");
  seen.clear();
  RunSweep(base, {"exact", "sink"}, {7}, out, {}, record);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].action, SweepRunInfo::Action::kSkip);
  EXPECT_EQ(seen[1].action, SweepRunInfo::Action::kResume);
  const std::vector<ArmReport> second = ReportSweep(out);
  // A run resumed at its last step takes its final loss back from metrics.csv, written with
  // 17 significant digits: the same double.
  EXPECT_EQ(first[1].runs[0].final_val_loss, second[1].runs[0].final_val_loss);
  ASSERT_TRUE(second[1].gap_mean.has_value());

  // One stopped before its first checkpoint has nothing to resume: it starts again.
  fs::remove(out + "/exact/seed-7/summary.json");
  fs::remove(out + "/exact/seed-7/checkpoint.bin");
  seen.clear();
  RunSweep(base, {"exact"}, {7}, out, {}, record);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].action, SweepRunInfo::Action::kTrain);
  EXPECT_EQ(ReportSweep(out)[0].runs[0].final_val_loss, first[0].runs[0].final_val_loss);

  // A different base config is not mixed into this directory.
  TrainConfig other = base;
  other.lr = 2e-3f;
  EXPECT_THROW(RunSweep(other, {"exact"}, {7}, out, {}), std::invalid_argument);
}

}  // namespace
}  // namespace lpattn::harness::test
