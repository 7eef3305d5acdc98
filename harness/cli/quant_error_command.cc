// `lpattn quant-error`: the error of attention's outputs and gradients with low-precision
// operands against the fp64 reference (harness/studies/quant_error.h).
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/cli/commands.h"
#include "harness/common/atomic_file.h"
#include "harness/studies/quant_error.h"

namespace lpattn::cli {
namespace {

namespace fs = std::filesystem;

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

}  // namespace

void AddQuantErrorCommand(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<QuantErrorCommand>();
  commands.push_back(
      {AddQuantError(app, *options), [options] { return RunQuantError(*options); }});
}

}  // namespace lpattn::cli
