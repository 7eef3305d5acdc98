// `lpattn info`: the library version, the Highway targets and the TBB thread count.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <tbb/task_arena.h>

#include "harness/cli/commands.h"
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
      "info", "library version, Highway targets (compiled, supported, chosen), TBB threads");
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
  std::printf("tbb threads:               %d\n", threads);
  return 0;
}

}  // namespace

void AddInfoCommand(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<InfoOptions>();
  commands.push_back({AddInfo(app, *options), [options] { return RunInfo(*options); }});
}

}  // namespace lpattn::cli
