// The kernels experiment (docs/harness.md §5): the population and transfer runs repeated, smaller,
// under each row transform of optionsetup.kernels (softmax, K-interval, thresholded).
#include "harness/onehead/experiments_internal.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "harness/onehead/experiment_io.h"

namespace lpattn::onehead::experiments_internal {
using namespace experiment_io;

json Kernels(const OneheadSetup& setup) {
  const OneheadOptions& o = setup.options;
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = ExperimentDir(o, "kernels");
  json runs = json::array();
  for (size_t k = 0; k < setup.kernels.size(); ++k) {
    const RowTransform& transform = setup.kernels[k].value;
    const bool thresholded = transform.kind == RowTransform::Kind::kThreshold;
    const double step = thresholded ? o.threshold_step : o.kernel_step;
    const std::vector<PopulationRow> rows = RunPopulation(
        transform, StartFor(transform, o.population_init, transform.tau_keys), step,
        o.kernel_steps, o.records / 2, o.quadrature);
    const fs::path part = dir / ("population_" + std::to_string(k) + ".csv");
    WriteTrajectory(rows, part, transform.Name(), "kernel");
    json run = {{"kernel", transform.Name()}, {"step", step},
                {"population", SummarisePopulation(rows)}};
    std::vector<int64_t> lengths = Lengths(o);
    std::erase_if(lengths, [&](int64_t N) { return N > o.kernel_max_length; });
    if (lengths.empty()) lengths = {o.kernel_max_length};
    const json transfer = TransferRuns(o, transform, o.kernel_corpora,
                                       thresholded ? o.threshold_step : o.pretrain_step, lengths,
                                       std::max<int64_t>(1, o.contexts / 2), dir,
                                       "transfer_" + std::to_string(k) + "_");
    run["transfer"] = transfer;
    runs.push_back(run);
    std::printf("  kernel %s: mu_end %.2f, risk_end %.3g\n", transform.Name().c_str(),
                rows.back().point.params.b, rows.back().point.risk);
  }
  json summary;
  summary["kernels"] = runs;
  summary["kernel_step"] = o.kernel_step;
  summary["kernel_steps"] = o.kernel_steps;
  return Finish(o, "kernels", summary, start);
}

}  // namespace lpattn::onehead::experiments_internal
