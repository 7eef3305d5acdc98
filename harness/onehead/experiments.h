// The one-head experiments of docs/harness.md §5 (`lpattn onehead <experiment>`): each writes
// CSV files, <out>/<experiment>/summary.json with its fitted values, and a figure drawn by
// scripts/plot_onehead.py; `all` runs the set and writes report.md, a table of claim, measured
// value and verdict.
#ifndef LPATTN_HARNESS_ONEHEAD_EXPERIMENTS_H_
#define LPATTN_HARNESS_ONEHEAD_EXPERIMENTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/onehead/model.h"
#include "harness/onehead/population.h"
#include "harness/onehead/pretrain.h"

namespace lpattn::onehead {

// One (m, n) pair of a finite pretraining corpus.
struct CorpusSize {
  int64_t m = 0, n = 0;
};

// The options as given (`lpattn onehead`'s flags). The text ones (transform, designs, noises,
// kernels) are parsed once, by ResolveOnehead; the experiments read the parsed values.
struct OneheadOptions {
  std::string out = "runs/onehead";
  std::string transform = "exact";  // the row transform of every experiment but `kernels`
  uint64_t seed = 1;
  PopulationOptions quadrature;     // alpha and x orders (0: automatic)
  bool figures = true;

  // population, quadrature, stepsize, init, kernels: gradient descent on the population risk
  Params population_init{1.0, 1.0};
  double step = 20.0;
  int64_t steps = 50000;
  int records = 60;
  std::vector<int> orders = {16, 32, 64, 128, 256};  // quadrature: fixed alpha orders (and auto)
  double hitting_risk = 2e-3;                        // quadrature: the risk the hitting time is for
  std::vector<double> step_sizes = {10, 20, 50, 100};  // stepsize: each run to t = step * steps
  std::vector<double> init_radii = {1e-4, 1e-3, 1e-2, 1e-1, 1.0};
  int64_t init_steps = 5000;  // init: the common budget

  // transfer, grid, design, kernels: finite pretraining and fresh contexts
  std::vector<CorpusSize> corpora = {{16, 16}, {64, 64}, {256, 256}, {1024, 1024}};
  double pretrain_step = 100.0;
  int64_t pretrain_steps = 200;
  std::vector<int64_t> lengths;  // N; empty: 16, 32, ..., 16384
  std::vector<double> alphas = {0.25, 0.5, 0.75};
  int64_t contexts = 400;
  std::vector<int64_t> grid_sizes = {16, 64, 256, 1024};  // grid: m and n each
  double grid_radius = 64.0;
  int64_t grid_length = 4096;  // grid: the fresh contexts' N
  std::vector<std::string> designs = {"tilt:2", "bump:0.8"};
  double corruption = 0.01;   // design: the global label flip rate during pretraining
  CorpusSize design_corpus{256, 256};

  // matched, noise, boundary
  double matched_divisor = 8.0;  // mu = N / matched_divisor
  std::vector<std::string> noises = {"massart:0.1", "tsybakov:0.02", "localized:0.02"};
  double boundary_radius = 64.0;
  int64_t boundary_length = 1024;

  // kernels: the transforms, and the (smaller) runs they repeat
  std::vector<std::string> kernels = {"exact",
                                      "kint:K=4:cal=minmax",  "kint:K=4:cal=window",
                                      "kint:K=16:cal=minmax", "kint:K=16:cal=window",
                                      "kint:K=64:cal=minmax", "kint:K=64:cal=window",
                                      "tda:views=1"};
  double kernel_step = 200.0;
  int64_t kernel_steps = 500;
  // The thresholded transform's risk has O(1) curvature (its cut (a - tau) / b moves F by O(1)),
  // so it takes a smaller step than the softmax-like transforms (whose gradients fall as b^-3).
  double threshold_step = 2.0;
  int64_t kernel_max_length = 4096;  // fresh contexts up to this N, half as many per cell
  std::vector<CorpusSize> kernel_corpora = {{16, 16}, {64, 64}, {256, 256}};
};

// A value parsed from option text, with the text as given: the label output files show.
template <class T>
struct Labelled {
  std::string label;
  T value;
};

// An experiment and its options, checked and with every text option parsed (ResolveOnehead):
// what the experiments read. Nothing after ResolveOnehead parses option text again.
struct OneheadSetup {
  std::string experiment;
  OneheadOptions options;                       // as given; its text fields are the labels below
  Labelled<RowTransform> transform;             // options.transform
  std::vector<Labelled<Design>> designs;        // options.designs
  std::vector<Labelled<LabelNoise>> noises;     // options.noises
  std::vector<Labelled<RowTransform>> kernels;  // options.kernels
};

// The experiments, in the order `all` runs them.
const std::vector<std::string>& OneheadExperiments();

// Checks the options for the experiment and parses their text, once. Throws
// std::invalid_argument naming the problem, before any work: an unknown experiment, m, n or
// N < 1, a step size not finite and positive, alpha outside (0, 1), steps < 1, a bad
// transform, design or noise, a bad quadrature order.
OneheadSetup ResolveOnehead(const std::string& experiment, const OneheadOptions& options);

// ResolveOnehead without its result: the same checks and errors.
void ValidateOnehead(const std::string& experiment, const OneheadOptions& options);

// Runs setup.experiment (one experiment, or "all"; a setup from ResolveOnehead) into
// options.out/<experiment>/ and returns its summary (for "all", the report's claims). Files are
// written to temporary names and renamed.
nlohmann::json RunOnehead(const OneheadSetup& setup);
// RunOnehead(ResolveOnehead(experiment, options)).
nlohmann::json RunOnehead(const std::string& experiment, const OneheadOptions& options);

}  // namespace lpattn::onehead

#endif  // LPATTN_HARNESS_ONEHEAD_EXPERIMENTS_H_
