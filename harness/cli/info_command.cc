// `lpattn info`: the library version, the Highway targets, the native families (compiled, on
// this CPU, enabled), how each operand kind is multiplied, the harness's dense products (the
// library and the instruction set it chose) and the TBB thread count.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <tbb/task_arena.h>

#include "harness/cli/commands.h"
#include "harness/model/dense_product.h"
#include "kernels/attention.h"
#include "kernels/lpattn.h"

namespace lpattn::cli {
namespace {

std::string Join(const std::vector<std::string>& items) {
  std::string joined;
  for (const std::string& item : items) {
    if (!joined.empty()) joined += ' ';
    joined += item;
  }
  return joined;
}

struct InfoOptions {
  int threads = 0;
};

CLI::App* AddInfo(CLI::App& app, InfoOptions& options) {
  CLI::App* info = app.add_subcommand(
      "info",
      "library version, Highway targets (compiled, supported, chosen), native paths (compiled, "
      "on this CPU, enabled) how each operand kind is multiplied, the harness's dense products, TBB threads");
  AddThreadsOption(info, options.threads);
  return info;
}

int RunInfo(const InfoOptions& options) {
  const DispatchInfo dispatch = GetDispatchInfo();
  const int threads =
      InArena(options.threads, [] { return tbb::this_task_arena::max_concurrency(); });
  std::printf("lpattn %s\n", lpattn_version());
  std::printf("highway targets compiled:  %s\n", Join(dispatch.compiled).c_str());
  std::printf("highway targets supported: %s\n", Join(dispatch.supported).c_str());
  std::printf("highway target chosen:     %s\n", dispatch.chosen.c_str());
  std::vector<std::string> compiled, cpu, enabled;
  for (const NativePathInfo& path : dispatch.native) {
    if (path.compiled) compiled.push_back(path.name);
    if (path.cpu) cpu.push_back(path.name);
    if (path.enabled) enabled.push_back(path.name);
  }
  std::printf("native paths compiled:     %s\n", compiled.empty() ? "none" : Join(compiled).c_str());
  std::printf("native paths on this CPU:  %s\n", cpu.empty() ? "none" : Join(cpu).c_str());
  std::printf("native paths enabled:      %s\n", enabled.empty() ? "none" : Join(enabled).c_str());
  for (const NativePathInfo& path : dispatch.native) {
    if (!path.note.empty()) std::printf("  %s: %s\n", path.name.c_str(), path.note.c_str());
  }
  std::printf("products:\n");
  for (const std::string& line : dispatch.products) std::printf("  %s\n", line.c_str());
  std::printf("harness dense products:    %s\n", harness::DenseProductInfo().c_str());
  std::printf("tbb threads:               %d\n", threads);
  return 0;
}

}  // namespace

void AddInfoCommand(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<InfoOptions>();
  commands.push_back({AddInfo(app, *options), [options] { return RunInfo(*options); }});
}

}  // namespace lpattn::cli
