// The shared files and option values of the one-head experiments (experiment_io.h).
#include "harness/onehead/experiment_io.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "harness/common/atomic_file.h"
#include "harness/common/figures.h"

namespace lpattn::onehead::experiment_io {

fs::path ExperimentDir(const OneheadOptions& options, const std::string& experiment) {
  const fs::path dir = fs::path(options.out) / experiment;
  fs::create_directories(dir);
  return dir;
}

json Finish(const OneheadOptions& options, const std::string& experiment, json summary,
            std::chrono::steady_clock::time_point start) {
  summary["experiment"] = experiment;
  summary["seconds"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const fs::path dir = ExperimentDir(options, experiment);
  harness::WriteFileAtomically((dir / "summary.json").string(), summary.dump(2) + "\n");
  if (options.figures) harness::DrawPlot("plot_onehead.py", {dir.string(), experiment});
  std::printf("onehead %s: %.1f s, wrote %s\n", experiment.c_str(),
              summary["seconds"].get<double>(), dir.string().c_str());
  return summary;
}

std::vector<int64_t> Lengths(const OneheadOptions& options) {
  if (!options.lengths.empty()) return options.lengths;
  std::vector<int64_t> lengths;
  for (int64_t N = 16; N <= 16384; N *= 2) lengths.push_back(N);
  return lengths;
}

TransferOptions TransferFor(const OneheadOptions& options, std::vector<int64_t> lengths) {
  TransferOptions transfer;
  transfer.lengths = std::move(lengths);
  transfer.alphas = options.alphas;
  transfer.contexts = options.contexts;
  transfer.seed = options.seed + 7919;  // fresh contexts: a stream family apart from training
  return transfer;
}

double Spread(const std::vector<double>& values) {  // (max - min) / mean
  if (values.empty()) return 0.0;
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  double mean = 0.0;
  for (const double v : values) mean += v / double(values.size());
  return (*hi - *lo) / std::fabs(mean);
}

// A start for the transform: the thresholded transform's tau (at `keys` keys) is added to a, so
// that s - tau starts where the softmax model's s does (otherwise no point survives and the
// gradient is 0). The other transforms keep the start.
Params StartFor(const RowTransform& transform, Params start, int64_t keys) {
  start.a += transform.Tau(keys);
  return start;
}

}  // namespace lpattn::onehead::experiment_io
