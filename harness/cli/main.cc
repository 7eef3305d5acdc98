// The `lpattn` command. Each subcommand is a pair of functions: Add<Name> declares it and its
// options on the app, Run<Name> does the work and returns the exit status. Errors thrown by the
// work end the command with one line `lpattn: <message>` and status 1. The subcommands live one
// group per file (commands.h); this file builds the app and runs the one parsed.

#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>

#include "harness/cli/commands.h"
#include "harness/common/ranks.h"

int main(int argc, char** argv) {
  using namespace lpattn::cli;
  using lpattn::harness::Ranks;
  // Under mpirun, MPI runs for the whole process; train and sweep are data-parallel over its
  // ranks (docs/harness.md §3.7), every other command runs in one process.
  std::unique_ptr<lpattn::harness::MpiSession> mpi;
  try {
    mpi = std::make_unique<lpattn::harness::MpiSession>(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lpattn: %s\n", e.what());
    return 1;
  }
  const Ranks& ranks = Ranks::World();
  CLI::App app{"lpattn: low-precision attention kernels and a harness that measures them"};
  app.name("lpattn");
  app.require_subcommand(0, 1);

  Commands commands;
  AddInfoCommand(app, commands);
  AddTrainCommands(app, commands);
  AddQuantErrorCommand(app, commands);
  AddOneheadCommand(app, commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and friends print and succeed; usage errors end like every other error.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::fprintf(stderr, "lpattn: %s (see lpattn --help)\n", e.what());
    return 1;
  }
  try {
    for (const Command& command : commands) {
      if (!command.subcommand->parsed()) continue;
      const std::string name = command.subcommand->get_name();
      if (ranks.size() > 1 && name != "train" && name != "sweep") {
        throw std::invalid_argument("lpattn " + name +
                                    " runs in one process; under mpirun only train and sweep "
                                    "run (data-parallel, or a sweep's runs spread over ranks)");
      }
      return command.run();
    }
  } catch (const std::exception& e) {
    if (ranks.size() > 1) {
      // The other ranks may be waiting for this one in a collective: end them all. Files are
      // written atomically, so the run directory keeps its last good checkpoint.
      ranks.Abort("lpattn: rank " + std::to_string(ranks.rank()) + " of " +
                  std::to_string(ranks.size()) + ": " + e.what() +
                  "; ending every rank (the run directory keeps its last good checkpoint)");
    }
    std::fflush(stdout);
    std::fprintf(stderr, "lpattn: %s\n", e.what());
    return 1;
  }
  std::cerr << app.help();
  return 1;
}
