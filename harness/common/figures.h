// Figures of a run or sweep directory, drawn by scripts/plot_run.py (docs/harness.md §3).
#ifndef LPATTN_HARNESS_COMMON_FIGURES_H_
#define LPATTN_HARNESS_COMMON_FIGURES_H_

#include <string>
#include <vector>

namespace lpattn::harness {

// Draws figures/ of a run or sweep directory with Debian's /usr/bin/python3 when it has
// matplotlib. Never throws for a plotting problem: it prints what happened (figures skipped,
// and why, or failed) so the results, already written, stay the command's outcome. The script
// is looked up in $LPATTN_SCRIPTS_DIR, <executable>/../share/lpattn/scripts, then the source
// tree's scripts/.
void DrawFigures(const std::string& dir);

// Runs scripts/<script> with args the same way (looked up in the same places), for the figures
// of other commands (plot_onehead.py for `lpattn onehead`).
void DrawPlot(const std::string& script, const std::vector<std::string>& args);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_COMMON_FIGURES_H_
