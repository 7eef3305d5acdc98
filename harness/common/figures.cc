// Figures of runs and sweeps: scripts/plot_run.py under Debian's python3 (with
// python3-matplotlib), found beside an installed lpattn or in the source tree.
#include "harness/common/figures.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

extern char** environ;

namespace lpattn::harness {
namespace {

namespace fs = std::filesystem;

// Runs argv without a shell; returns the exit status, or -1 when it could not run or died.
int Spawn(const std::vector<std::string>& args, bool quiet) {
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  std::fflush(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// $LPATTN_SCRIPTS_DIR, else <executable dir>/../share/lpattn/scripts (installed), else the
// source tree's scripts/ (a build tree). `looked` lists the places tried.
std::optional<fs::path> FindPlotScript(const std::string& name, std::string& looked) {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("LPATTN_SCRIPTS_DIR"); env != nullptr && *env != '\0') {
    dirs.emplace_back(env);
  }
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (!error) dirs.push_back(exe.parent_path() / ".." / "share" / "lpattn" / "scripts");
#ifdef LPATTN_SOURCE_DIR
  dirs.push_back(fs::path(LPATTN_SOURCE_DIR) / "scripts");
#endif
  for (const fs::path& dir : dirs) {
    const fs::path script = dir / name;
    if (fs::is_regular_file(script, error)) return script.lexically_normal();
    looked += (looked.empty() ? "" : ", ") + dir.lexically_normal().string();
  }
  return std::nullopt;
}

}  // namespace

void DrawFigures(const std::string& dir) { DrawPlot("plot_run.py", {dir}); }

void DrawPlot(const std::string& name, const std::vector<std::string>& args) {
  const std::string python = "/usr/bin/python3";
  std::string looked;
  const std::optional<fs::path> script = FindPlotScript(name, looked);
  if (!script) {
    std::printf("figures skipped: %s not found (looked in %s; set LPATTN_SCRIPTS_DIR)\n",
                name.c_str(), looked.c_str());
  } else if (!fs::exists(python)) {
    std::printf("figures skipped: %s not found\n", python.c_str());
  } else if (Spawn({python, "-c", "import matplotlib"}, true) != 0) {
    std::printf("figures skipped: %s cannot import matplotlib (apt-get install "
                "python3-matplotlib)\n", python.c_str());
  } else {
    std::vector<std::string> argv = {python, script->string()};
    argv.insert(argv.end(), args.begin(), args.end());
    if (const int status = Spawn(argv, false); status != 0) {
      std::printf("figures failed: %s ended with status %d (the results are unaffected)\n",
                  script->string().c_str(), status);
    }
  }
}

}  // namespace lpattn::harness
