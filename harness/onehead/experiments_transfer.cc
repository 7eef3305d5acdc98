// The finite-pretraining experiments (docs/harness.md §5): pretrain (a, b) on corpora of m
// tasks of n points, freeze it and measure it on fresh contexts of N points. transfer (the
// two-term law in m ^ n and N), grid (m against n at a common radius) and design (non-uniform
// designs and label corruption).
#include "harness/onehead/experiments_internal.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "harness/onehead/experiment_io.h"
#include "harness/onehead/fit.h"
#include "harness/onehead/pretrain.h"

namespace lpattn::onehead::experiments_internal {
using namespace experiment_io;

// ---- 4. transfer ----------------------------------------------------------------------------

// Pretrains on each corpus from the large-resolution start (beside the population descent from
// the same start), freezes the final iterate and evaluates it on fresh contexts.
json TransferRuns(const OneheadOptions& o, const RowTransform& transform,
                  const std::vector<CorpusSize>& corpora, double step,
                  const std::vector<int64_t>& lengths, int64_t contexts, const fs::path& dir,
                  const std::string& prefix) {
  Csv tracking({"m", "n", "step", "t", "mu", "train_risk", "train_error", "population_mu",
                "population_risk"});
  Csv cells({"m", "n", "N", "alpha", "mean_abs_error", "rms_error", "empty_share"});
  std::vector<double> u, v, e;
  json per_corpus = json::array();
  for (size_t k = 0; k < corpora.size(); ++k) {
    const CorpusSize size = corpora[k];
    const Corpus corpus = SampleCorpus(size.m, size.n, Design{}, LabelNoise{}, o.seed + k);
    const Params init = StartFor(transform, LargeResolutionInit(size.m, size.n), size.n);
    const std::vector<PretrainPoint> finite =
        Pretrain(transform, corpus, init, step, o.pretrain_steps, 12);
    const std::vector<TrajectoryPoint> population =
        PopulationDescent(transform, init, step, o.pretrain_steps, 12, o.quadrature);
    double mu_gap = 0.0;
    for (size_t i = 0; i < finite.size(); ++i) {
      tracking.Cell(double(size.m)).Cell(double(size.n)).Cell(double(finite[i].step));
      tracking.Cell(finite[i].t).Cell(finite[i].params.b).Cell(finite[i].risk);
      tracking.Cell(finite[i].mean_abs_error).Cell(population[i].params.b);
      tracking.Cell(population[i].risk).EndRow();
      mu_gap = std::max(mu_gap, std::fabs(finite[i].params.b / population[i].params.b - 1.0));
    }
    // The checkpoint: the final iterate (chosen by the training budget alone, no fresh tasks),
    // the same for every N.
    const Params frozen = finite.back().params;
    TransferOptions transfer = TransferFor(o, lengths);
    transfer.contexts = contexts;
    const std::vector<TransferCell> result = Transfer(transform, frozen, transfer);
    for (const TransferCell& cell : result) {
      cells.Cell(double(size.m)).Cell(double(size.n)).Cell(double(cell.N)).Cell(cell.alpha);
      cells.Cell(cell.mean_abs_error).Cell(cell.rms_error).Cell(cell.empty_share).EndRow();
    }
    const std::vector<double> by_length = ErrorByLength(result, lengths.size());
    for (size_t l = 0; l < lengths.size(); ++l) {
      u.push_back(double(std::min(size.m, size.n)));
      v.push_back(double(lengths[l]));
      e.push_back(by_length[l]);
    }
    per_corpus.push_back({{"m", size.m}, {"n", size.n}, {"a", frozen.a}, {"b", frozen.b},
                          {"final_train_error", finite.back().mean_abs_error},
                          {"max_rel_mu_gap_to_population", mu_gap},
                          {"error_at_largest_N", by_length.back()}});
  }
  tracking.Write(dir / (prefix + "tracking.csv"));
  cells.Write(dir / (prefix + "errors.csv"));
  json summary;
  summary["transform"] = transform.Name();
  summary["corpora"] = per_corpus;
  bool positive = !e.empty();
  for (const double x : e) positive = positive && x > 0.0;
  if (positive && e.size() >= 4) {
    const TwoTermFit fit = FitTwoTerm(u, v, e);
    summary["slope_mn"] = fit.p;
    summary["slope_N"] = fit.q;
    summary["A"] = fit.A;
    summary["B"] = fit.B;
    summary["fit_relative_rms"] = fit.relative_rms;
    // The theory's law itself, A / (m ^ n) + B / N, for comparison.
    const TwoTermFit theory = FitTwoTermWithExponents(u, v, e, -1.0, -1.0);
    summary["fit_theory_exponents"] = {
        {"A", theory.A}, {"B", theory.B}, {"relative_rms", theory.relative_rms}};
  }
  // Plain log-log slopes: against N for the largest corpus while N <= (m ^ n) / 4 (where 1/N
  // dominates), and against m ^ n at the largest N.
  const size_t corpora_count = corpora.size(), count = lengths.size();
  if (corpora_count > 0 && positive) {
    std::vector<double> xs, ys;
    const double largest = u[(corpora_count - 1) * count];
    for (size_t l = 0; l < count; ++l) {
      if (v[(corpora_count - 1) * count + l] <= largest / 4) {
        xs.push_back(v[(corpora_count - 1) * count + l]);
        ys.push_back(e[(corpora_count - 1) * count + l]);
      }
    }
    if (xs.size() >= 2) summary["slope_N_small_N"] = FitPowerLaw(xs, ys).slope;
    xs.clear();
    ys.clear();
    for (size_t k = 0; k < corpora_count; ++k) {
      xs.push_back(u[k * count + count - 1]);
      ys.push_back(e[k * count + count - 1]);
    }
    if (xs.size() >= 2 && xs.front() != xs.back()) {
      summary["slope_mn_largest_N"] = FitPowerLaw(xs, ys).slope;
    }
  }
  return summary;
}

json TransferExperiment(const OneheadSetup& setup) {
  const OneheadOptions& o = setup.options;
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = ExperimentDir(o, "transfer");
  json summary = TransferRuns(o, setup.transform.value, o.corpora, o.pretrain_step,
                              Lengths(o), o.contexts, dir, "");
  return Finish(o, "transfer", summary, start);
}

// ---- 4b. grid -------------------------------------------------------------------------------

// Every (m, n) from one starting radius (b0 = grid_radius, a0 = b0 + log b0, the same budget),
// so that the error at N = grid_length separates task sampling (m: how many thresholds the
// gradient averages) from within-task sampling (n: the context size it is computed on).
json Grid(const OneheadSetup& setup) {
  const OneheadOptions& o = setup.options;
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = ExperimentDir(o, "grid");
  const RowTransform& transform = setup.transform.value;
  const double b = o.grid_radius;
  Csv csv({"m", "n", "a", "b", "c", "train_error", "error"});
  json table = json::array();
  int k = 0;
  for (const int64_t m : o.grid_sizes) {
    for (const int64_t n : o.grid_sizes) {
      const Corpus corpus = SampleCorpus(m, n, Design{}, LabelNoise{}, o.seed + 100 + k++);
      const Params init{b + std::log(b), b};
      const std::vector<PretrainPoint> run =
          Pretrain(transform, corpus, init, o.pretrain_step, o.pretrain_steps, 1);
      const Params frozen = run.back().params;
      const std::vector<TransferCell> cells =
          Transfer(transform, frozen, TransferFor(o, {o.grid_length}));
      const double error = ErrorByLength(cells, 1)[0];
      csv.Cell(double(m)).Cell(double(n)).Cell(frozen.a).Cell(frozen.b);
      csv.Cell(EndpointCoordinate(frozen)).Cell(run.back().mean_abs_error).Cell(error).EndRow();
      table.push_back({{"m", m}, {"n", n}, {"b", frozen.b}, {"c", EndpointCoordinate(frozen)},
                       {"error", error}});
    }
  }
  csv.Write(dir / "grid.csv");
  json summary;
  summary["transform"] = transform.Name();
  summary["radius"] = b;
  summary["N"] = o.grid_length;
  summary["cells"] = table;
  // How much each axis moves the error: the ratio of the worst to the best along m (n largest)
  // and along n (m largest).
  const size_t s = o.grid_sizes.size();
  auto error_at = [&](size_t i, size_t j) { return table[i * s + j]["error"].get<double>(); };
  if (s >= 2) {
    summary["error_first_to_last_m"] = error_at(0, s - 1) / error_at(s - 1, s - 1);
    summary["error_first_to_last_n"] = error_at(s - 1, 0) / error_at(s - 1, s - 1);
  }
  return Finish(o, "grid", summary, start);
}

// ---- 4e. design -----------------------------------------------------------------------------

json DesignExperiment(const OneheadSetup& setup) {
  const OneheadOptions& o = setup.options;
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = ExperimentDir(o, "design");
  const RowTransform& transform = setup.transform.value;
  const std::vector<int64_t> lengths = Lengths(o);
  struct Arm {
    std::string name;
    Design design;
    LabelNoise training_noise;
  };
  std::vector<Arm> arms = {{"uniform", Design{}, LabelNoise{}}};
  for (const Labelled<Design>& d : setup.designs) arms.push_back({d.label, d.value, LabelNoise{}});
  LabelNoise corruption;
  corruption.kind = LabelNoise::Kind::kMassart;
  corruption.param = o.corruption;
  arms.push_back({"uniform+corrupt:" + std::to_string(o.corruption).substr(0, 4), Design{},
                  corruption});
  Csv csv({"arm", "N", "alpha", "mean_abs_error"});
  json runs = json::array();
  const CorpusSize size = o.design_corpus;
  for (size_t k = 0; k < arms.size(); ++k) {
    const Arm& arm = arms[k];
    const Corpus corpus = SampleCorpus(size.m, size.n, arm.design, arm.training_noise,
                                       o.seed + 200 + k);
    const std::vector<PretrainPoint> run = Pretrain(
        transform, corpus, StartFor(transform, LargeResolutionInit(size.m, size.n), size.n),
        o.pretrain_step,
        o.pretrain_steps, 1);
    TransferOptions transfer = TransferFor(o, lengths);
    transfer.design = arm.design;  // fresh contexts from the same design, clean labels
    const std::vector<TransferCell> cells = Transfer(transform, run.back().params, transfer);
    for (const TransferCell& cell : cells) {
      csv.Cell(arm.name).Cell(double(cell.N)).Cell(cell.alpha).Cell(cell.mean_abs_error).EndRow();
    }
    const std::vector<double> by_length = ErrorByLength(cells, lengths.size());
    std::vector<double> ns(lengths.begin(), lengths.end());
    runs.push_back({{"arm", arm.name}, {"a", run.back().params.a}, {"b", run.back().params.b},
                    {"final_train_error", run.back().mean_abs_error},
                    {"slope_N", FitPowerLaw(ns, by_length).slope},
                    {"error_at_largest_N", by_length.back()}});
  }
  csv.Write(dir / "design.csv");
  json summary;
  summary["transform"] = transform.Name();
  summary["corpus"] = {size.m, size.n};
  summary["runs"] = runs;
  const double base = runs[0]["error_at_largest_N"].get<double>();
  double worst = 0.0;
  for (size_t k = 1; k < runs.size(); ++k) {
    worst = std::max(worst, runs[k]["error_at_largest_N"].get<double>() / base);
  }
  summary["worst_floor_ratio_to_uniform"] = worst;
  return Finish(o, "design", summary, start);
}

}  // namespace lpattn::onehead::experiments_internal
