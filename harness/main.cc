// The `lpattn` command. Each subcommand is a pair of functions: Add<Name> declares it and its
// options on the app, Run<Name> does the work and returns the exit status.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <tbb/task_arena.h>

#include "kernels/attention.h"
#include "kernels/lpattn.h"

namespace lpattn::cli {
namespace {

// --threads N: run in a private TBB arena of N threads instead of the default one.
void AddThreadsOption(CLI::App* command, int& threads) {
  command->add_option("--threads", threads, "run in a TBB arena of N threads (default: all)")
      ->check(CLI::Range(1, 4096));
}

// Runs body in an arena of `threads` threads, or in the default arena when threads is 0.
template <class Body>
auto InArena(int threads, const Body& body) {
  if (threads <= 0) return body();
  tbb::task_arena arena(threads);
  return arena.execute(body);
}

std::string Join(const std::vector<std::string>& items) {
  std::string joined;
  for (const std::string& item : items) {
    if (!joined.empty()) joined += ' ';
    joined += item;
  }
  return joined;
}

// ---- info ------------------------------------------------------------------------------------

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
}  // namespace lpattn::cli

int main(int argc, char** argv) {
  using namespace lpattn::cli;
  CLI::App app{"lpattn: low-precision attention kernels and a harness that measures them"};
  app.name("lpattn");
  app.require_subcommand(0, 1);

  InfoOptions info_options;
  CLI::App* info = AddInfo(app, info_options);

  CLI11_PARSE(app, argc, argv);
  if (info->parsed()) return RunInfo(info_options);
  std::cerr << app.help();
  return 1;
}
