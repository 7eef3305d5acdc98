// The one-head experiments behind RunOnehead (experiments.h), one file per kind:
//   experiments_population.cc  stationary, population, quadrature, stepsize, init
//   experiments_transfer.cc    transfer, grid, design (finite pretraining, fresh contexts)
//   experiments_calibrated.cc  matched, noise, boundary (the calibrated estimator)
//   experiments_kernels.cc     kernels (population and transfer runs per row transform)
//   experiments_report.cc      all (the set, report.md and report.json)
// Each takes the resolved setup (ResolveOnehead) and returns its summary. Not part of the API.
#ifndef LPATTN_HARNESS_ONEHEAD_EXPERIMENTS_INTERNAL_H_
#define LPATTN_HARNESS_ONEHEAD_EXPERIMENTS_INTERNAL_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/onehead/experiments.h"
#include "harness/onehead/model.h"
#include "harness/onehead/population.h"

namespace lpattn::onehead::experiments_internal {

using nlohmann::json;

json Stationary(const OneheadSetup& setup);
json Population(const OneheadSetup& setup);
json Quadrature(const OneheadSetup& setup);
json Stepsize(const OneheadSetup& setup);
json Init(const OneheadSetup& setup);
json TransferExperiment(const OneheadSetup& setup);
json Grid(const OneheadSetup& setup);
json DesignExperiment(const OneheadSetup& setup);
json Matched(const OneheadSetup& setup);
json Noise(const OneheadSetup& setup);
json Boundary(const OneheadSetup& setup);
json Kernels(const OneheadSetup& setup);
json All(const OneheadSetup& setup);

// One experiment (not "all") with the setup's options, whatever setup.experiment names: `all`
// runs the set this way (experiments.cc).
json RunExperiment(const std::string& experiment, const OneheadSetup& setup);

// ---- population runs (experiments_population.cc), which `kernels` repeats -----------------

// A recorded iterate with the quantities the claims are about.
struct PopulationRow {
  TrajectoryPoint point;
  double error = 0.0;         // sqrt(R): the RMS of F - alpha over alpha
  double sup_interior = 0.0;  // sup over alpha in [0.1, 0.9] of |F - alpha|
};

// PopulationDescent from init, each recorded iterate described.
std::vector<PopulationRow> RunPopulation(const RowTransform& transform, const Params& init,
                                         double step, int64_t steps, int records,
                                         const PopulationOptions& quadrature);

// The rows as CSV; with label_name, a first column of that name holding `label`.
void WriteTrajectory(const std::vector<PopulationRow>& rows, const std::filesystem::path& path,
                     const std::string& label = "", const std::string& label_name = "");

// The fits of the population claims. Capture is the end of calibration: the iterate where the
// ratio a / b peaks. The growth fits use t >= max(10 t_capture, t_end / 100).
json SummarisePopulation(const std::vector<PopulationRow>& rows);

// ---- transfer runs (experiments_transfer.cc), which `kernels` repeats ----------------------

// Pretrains on each corpus from the large-resolution start (beside the population descent from
// the same start), freezes the final iterate and evaluates it on fresh contexts: writes
// dir/<prefix>tracking.csv and dir/<prefix>errors.csv and returns the fits.
json TransferRuns(const OneheadOptions& o, const RowTransform& transform,
                  const std::vector<CorpusSize>& corpora, double step,
                  const std::vector<int64_t>& lengths, int64_t contexts,
                  const std::filesystem::path& dir, const std::string& prefix);

}  // namespace lpattn::onehead::experiments_internal

#endif  // LPATTN_HARNESS_ONEHEAD_EXPERIMENTS_INTERNAL_H_
