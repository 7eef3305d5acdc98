// What the one-head experiments (experiments_*.cc) share: the CSV writer, each experiment's
// folder and summary.json, and the option values several of them derive the same way. Not part
// of the experiments' API (experiments.h).
#ifndef LPATTN_HARNESS_ONEHEAD_EXPERIMENT_IO_H_
#define LPATTN_HARNESS_ONEHEAD_EXPERIMENT_IO_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/common/atomic_file.h"
#include "harness/onehead/experiments.h"
#include "harness/onehead/model.h"
#include "harness/onehead/pretrain.h"

namespace lpattn::onehead::experiment_io {

namespace fs = std::filesystem;
using nlohmann::json;

// A CSV table built in memory and written atomically.
class Csv {
 public:
  explicit Csv(const std::vector<std::string>& header) {
    for (size_t i = 0; i < header.size(); ++i) text_ += (i ? "," : "") + header[i];
    text_ += "\n";
  }
  Csv& Cell(const std::string& value) {
    text_ += (first_ ? "" : ",") + value;
    first_ = false;
    return *this;
  }
  Csv& Cell(double value) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%.10g", value);
    return Cell(std::string(buffer));
  }
  void EndRow() {
    text_ += "\n";
    first_ = true;
  }
  void Write(const fs::path& path) const { harness::WriteFileAtomically(path.string(), text_); }

 private:
  std::string text_;
  bool first_ = true;
};

// options.out/<experiment>, created.
fs::path ExperimentDir(const OneheadOptions& options, const std::string& experiment);

// Adds the experiment's name and its seconds since `start` to summary, writes
// <experiment>/summary.json (and the figure, when options.figures), prints one line and returns
// the summary.
json Finish(const OneheadOptions& options, const std::string& experiment, json summary,
            std::chrono::steady_clock::time_point start);

// The fresh context lengths N: options.lengths, or 16, 32, ..., 16384.
std::vector<int64_t> Lengths(const OneheadOptions& options);

// Fresh contexts of `lengths` at options' alphas, contexts and seed (uniform design, clean).
TransferOptions TransferFor(const OneheadOptions& options, std::vector<int64_t> lengths);

// (max - min) / mean; 0 for no values.
double Spread(const std::vector<double>& values);

// A start for the transform: the thresholded transform's tau (at `keys` keys) is added to a, so
// that s - tau starts where the softmax model's s does (otherwise no point survives and the
// gradient is 0). The other transforms keep the start.
Params StartFor(const RowTransform& transform, Params start, int64_t keys);

}  // namespace lpattn::onehead::experiment_io

#endif  // LPATTN_HARNESS_ONEHEAD_EXPERIMENT_IO_H_
