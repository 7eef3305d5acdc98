// `lpattn onehead <experiment>`: the one-head threshold estimator's experiments
// (harness/onehead/experiments.h). The corpus sizes MxN are parsed here; the other option text
// (transforms, designs, label noises) once, by onehead::ResolveOnehead, before any work.
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/cli/commands.h"
#include "harness/onehead/experiments.h"

namespace lpattn::cli {
namespace {

struct OneheadCommand {
  std::string experiment;
  onehead::OneheadOptions options;
  std::vector<std::string> corpora, kernel_corpora;
  std::string design_corpus;
  bool no_figures = false;
  int threads = 0;
};

// "MxN" -> {M, N}.
onehead::CorpusSize ParseCorpusSize(const std::string& text) {
  const size_t x = text.find('x');
  size_t used_m = 0, used_n = 0;
  onehead::CorpusSize size;
  try {
    if (x == std::string::npos) throw std::invalid_argument(text);
    size.m = std::stoll(text.substr(0, x), &used_m);
    size.n = std::stoll(text.substr(x + 1), &used_n);
  } catch (const std::exception&) {
    used_m = 0;
  }
  if (used_m == 0 || used_m != x || used_n != text.size() - x - 1) {
    throw std::invalid_argument("onehead: a corpus size is MxN (tasks x examples), got '" + text +
                                "'");
  }
  return size;
}

CLI::App* AddOnehead(CLI::App& app, OneheadCommand& c) {
  onehead::OneheadOptions& o = c.options;
  CLI::App* command = app.add_subcommand(
      "onehead",
      "the one-head threshold estimator's experiments (docs/harness.md §5): stationary, "
      "population, quadrature, transfer, grid, stepsize, init, design, matched, noise, boundary, "
      "kernels, or all (the set and report.md)");
  command->add_option("experiment", c.experiment, "experiment name, or all")->required();
  command->add_option("--out", o.out, "output directory (one folder per experiment)")
      ->capture_default_str();
  command->add_option("--transform", o.transform,
                      "row transform: exact, kint:<options>, tda:<options> (views=1)")
      ->capture_default_str();
  command->add_option("--seed", o.seed, "seed of corpora and fresh contexts")->capture_default_str();
  command->add_option("--order", o.quadrature.order,
                      "Gauss-Legendre order over alpha (0: max(64, 10 b))")->capture_default_str();
  command->add_option("--x-order", o.quadrature.x_order,
                      "order over x on each side of alpha, for transforms without a closed form "
                      "(0: max(64, 2 sqrt(b)))")->capture_default_str();
  command->add_option("--a0", o.population_init.a, "population runs: initial a")->capture_default_str();
  command->add_option("--b0", o.population_init.b, "population runs: initial b")->capture_default_str();
  command->add_option("--step", o.step, "population step size")->capture_default_str();
  command->add_option("--steps", o.steps, "population steps")->capture_default_str();
  command->add_option("--records", o.records, "iterates recorded per run (log-spaced)")
      ->capture_default_str();
  command->add_option("--orders", o.orders, "quadrature: fixed alpha orders compared")
      ->delimiter(',')->capture_default_str();
  command->add_option("--hitting-risk", o.hitting_risk, "quadrature: risk of the hitting time")
      ->capture_default_str();
  command->add_option("--step-sizes", o.step_sizes, "stepsize: step sizes, same horizon")
      ->delimiter(',')->capture_default_str();
  command->add_option("--init-radii", o.init_radii, "init: initial radii around zero")
      ->delimiter(',')->capture_default_str();
  command->add_option("--init-steps", o.init_steps, "init: the common budget of steps")
      ->capture_default_str();
  command->add_option("--corpora", c.corpora, "transfer: corpora MxN (default 16x16,...,1024x1024)")
      ->delimiter(',');
  command->add_option("--pretrain-step", o.pretrain_step, "finite pretraining step size")
      ->capture_default_str();
  command->add_option("--pretrain-steps", o.pretrain_steps, "finite pretraining steps")
      ->capture_default_str();
  command->add_option("--lengths", o.lengths, "fresh context lengths N (default 16,...,16384)")
      ->delimiter(',');
  command->add_option("--alphas", o.alphas, "fresh-context thresholds")->delimiter(',')
      ->capture_default_str();
  command->add_option("--contexts", o.contexts, "fresh contexts per (N, alpha) cell")
      ->capture_default_str();
  command->add_option("--grid-sizes", o.grid_sizes, "grid: values of m and of n")->delimiter(',')
      ->capture_default_str();
  command->add_option("--grid-radius", o.grid_radius, "grid: the common radius b")
      ->capture_default_str();
  command->add_option("--grid-length", o.grid_length, "grid: fresh context length N")
      ->capture_default_str();
  command->add_option("--designs", o.designs, "design: densities tilt:S, bump:A")->delimiter(',')
      ->capture_default_str();
  command->add_option("--corruption", o.corruption, "design: label flip rate in pretraining")
      ->capture_default_str();
  command->add_option("--design-corpus", c.design_corpus, "design: corpus MxN (default 256x256)");
  command->add_option("--matched-divisor", o.matched_divisor, "matched: mu = N / divisor")
      ->capture_default_str();
  command->add_option("--noises", o.noises,
                      "noise: massart:R, tsybakov:H, localized:H (H the band half-width)")
      ->delimiter(',')->capture_default_str();
  command->add_option("--boundary-radius", o.boundary_radius, "boundary: the estimator's b")
      ->capture_default_str();
  command->add_option("--boundary-length", o.boundary_length, "boundary: finite context length")
      ->capture_default_str();
  command->add_option("--kernels", o.kernels, "kernels: the row transforms compared")
      ->delimiter(',')->capture_default_str();
  command->add_option("--kernel-step", o.kernel_step, "kernels: population step size")
      ->capture_default_str();
  command->add_option("--kernel-steps", o.kernel_steps, "kernels: population steps")
      ->capture_default_str();
  command->add_option("--threshold-step", o.threshold_step,
                      "kernels: population step size of the thresholded transform")
      ->capture_default_str();
  command->add_option("--kernel-max-length", o.kernel_max_length,
                      "kernels: the largest fresh context N (half the contexts per cell)")
      ->capture_default_str();
  command->add_option("--kernel-corpora", c.kernel_corpora, "kernels: corpora MxN")->delimiter(',');
  command->add_flag("--no-figures", c.no_figures, "skip the figures");
  AddThreadsOption(command, c.threads);
  return command;
}

int RunOnehead(OneheadCommand& c) {
  onehead::OneheadOptions& o = c.options;
  if (!c.corpora.empty()) {
    o.corpora.clear();
    for (const std::string& text : c.corpora) o.corpora.push_back(ParseCorpusSize(text));
  }
  if (!c.kernel_corpora.empty()) {
    o.kernel_corpora.clear();
    for (const std::string& text : c.kernel_corpora) o.kernel_corpora.push_back(ParseCorpusSize(text));
  }
  if (!c.design_corpus.empty()) o.design_corpus = ParseCorpusSize(c.design_corpus);
  o.figures = !c.no_figures;
  const onehead::OneheadSetup setup = onehead::ResolveOnehead(c.experiment, o);
  InArena(c.threads, [&] { return onehead::RunOnehead(setup); });
  return 0;
}

}  // namespace

void AddOneheadCommand(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<OneheadCommand>();
  commands.push_back({AddOnehead(app, *options), [options] { return RunOnehead(*options); }});
}

}  // namespace lpattn::cli
