// The subcommands of the `lpattn` command (main.cc), one file per group: info_command.cc,
// train_commands.cc (train, eval, logits, sweep, report), quant_error_command.cc and
// onehead_command.cc. Each group's Add...Command(s) declares its subcommands and their options
// on the app and appends each, with the work it does, to `commands`; main runs the one parsed.
#ifndef LPATTN_HARNESS_CLI_COMMANDS_H_
#define LPATTN_HARNESS_CLI_COMMANDS_H_

#include <functional>
#include <vector>

#include <CLI/CLI.hpp>
#include <tbb/task_arena.h>

namespace lpattn::cli {

// A subcommand and its work, run when the subcommand was parsed: returns the exit status, and
// errors it throws end the command with one line `lpattn: <message>` and status 1 (main.cc).
struct Command {
  CLI::App* subcommand = nullptr;
  std::function<int()> run;
};
using Commands = std::vector<Command>;

// In the order `lpattn --help` lists them.
void AddInfoCommand(CLI::App& app, Commands& commands);        // info
void AddTrainCommands(CLI::App& app, Commands& commands);      // train, eval, logits, sweep, report
void AddQuantErrorCommand(CLI::App& app, Commands& commands);  // quant-error
void AddOneheadCommand(CLI::App& app, Commands& commands);     // onehead

// --threads N: run in a private TBB arena of N threads instead of the default one.
inline void AddThreadsOption(CLI::App* command, int& threads) {
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

}  // namespace lpattn::cli

#endif  // LPATTN_HARNESS_CLI_COMMANDS_H_
