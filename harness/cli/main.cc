// The `lpattn` command. Each subcommand is a pair of functions: Add<Name> declares it and its
// options on the app, Run<Name> does the work and returns the exit status. Errors thrown by the
// work end the command with one line `lpattn: <message>` and status 1. The subcommands live one
// group per file (commands.h); this file builds the app and runs the one parsed.

#include <cstdio>
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "harness/cli/commands.h"

int main(int argc, char** argv) {
  using namespace lpattn::cli;
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
      if (command.subcommand->parsed()) return command.run();
    }
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "lpattn: %s\n", e.what());
    return 1;
  }
  std::cerr << app.help();
  return 1;
}
