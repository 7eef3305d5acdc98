// The one-head experiments' driver (experiments.h): the list of experiments, checking and
// parsing their options once (ResolveOnehead), and running one. The experiments themselves are
// experiments_*.cc (experiments_internal.h).
#include "harness/onehead/experiments.h"

#include <cmath>
#include <functional>
#include <map>
#include <stdexcept>

#include "harness/onehead/experiment_io.h"
#include "harness/onehead/experiments_internal.h"
#include "harness/onehead/pretrain.h"
#include "harness/onehead/quadrature.h"

namespace lpattn::onehead {
namespace {

using nlohmann::json;
using namespace experiments_internal;

const std::map<std::string, std::function<json(const OneheadSetup&)>>& Runners() {
  static const auto* runners = new std::map<std::string, std::function<json(const OneheadSetup&)>>{
      {"stationary", Stationary}, {"population", Population}, {"quadrature", Quadrature},
      {"transfer", TransferExperiment}, {"grid", Grid}, {"stepsize", Stepsize},
      {"init", Init}, {"design", DesignExperiment}, {"matched", Matched},
      {"noise", Noise}, {"boundary", Boundary}, {"kernels", Kernels}, {"all", All}};
  return *runners;
}

void CheckStep(double step, const char* what) {
  if (!std::isfinite(step) || step <= 0.0) {
    throw std::invalid_argument(std::string("onehead: ") + what +
                                " must be finite and positive, got " + std::to_string(step));
  }
}

}  // namespace

const std::vector<std::string>& OneheadExperiments() {
  static const std::vector<std::string> experiments = {
      "stationary", "population", "quadrature", "transfer", "grid",     "stepsize", "init",
      "design",     "matched",    "noise",      "boundary", "kernels", "all"};
  return experiments;
}

OneheadSetup ResolveOnehead(const std::string& experiment, const OneheadOptions& o) {
  if (Runners().count(experiment) == 0) {
    std::string known;
    for (const std::string& e : OneheadExperiments()) known += (known.empty() ? "" : ", ") + e;
    throw std::invalid_argument("onehead: unknown experiment '" + experiment + "' (expected " +
                                known + ")");
  }
  OneheadSetup setup;
  setup.experiment = experiment;
  setup.options = o;
  setup.transform = {o.transform, ParseRowTransform(o.transform)};
  for (const std::string& k : o.kernels) setup.kernels.push_back({k, ParseRowTransform(k)});
  for (const std::string& d : o.designs) setup.designs.push_back({d, ParseDesign(d)});
  for (const std::string& n : o.noises) setup.noises.push_back({n, ParseLabelNoise(n)});
  ValidatePopulation(o.quadrature);
  CheckStep(o.step, "the step size");
  CheckStep(o.pretrain_step, "the pretraining step size");
  CheckStep(o.kernel_step, "the kernels' step size");
  CheckStep(o.threshold_step, "the thresholded transform's step size");
  for (const double s : o.step_sizes) CheckStep(s, "every step size");
  CheckStep(o.grid_radius, "the grid radius");
  CheckStep(o.boundary_radius, "the boundary radius");
  CheckStep(o.matched_divisor, "the matched divisor");
  for (const double r : o.init_radii) CheckStep(r, "every initial radius");
  for (const int64_t s : {o.steps, o.pretrain_steps, o.init_steps, o.kernel_steps}) {
    if (s < 1) throw std::invalid_argument("onehead: step counts must be >= 1");
  }
  if (o.records < 1) throw std::invalid_argument("onehead: records must be >= 1");
  for (const int order : o.orders) {
    if (order < 1 || order > kMaxQuadratureOrder) {
      throw std::invalid_argument("onehead: every quadrature order must be in [1, " +
                                  std::to_string(kMaxQuadratureOrder) + "]");
    }
  }
  if (!(o.corruption >= 0.0 && o.corruption < 0.5)) {
    throw std::invalid_argument("onehead: the corruption rate must be in [0, 0.5)");
  }
  for (const auto& sizes : {o.corpora, o.kernel_corpora, std::vector<CorpusSize>{o.design_corpus}}) {
    for (const CorpusSize& c : sizes) {
      if (c.m < 1 || c.n < 1) {
        throw std::invalid_argument("onehead: a corpus needs m >= 1 and n >= 1, got " +
                                    std::to_string(c.m) + "x" + std::to_string(c.n));
      }
    }
  }
  for (const int64_t g : o.grid_sizes) {
    if (g < 1) throw std::invalid_argument("onehead: grid sizes m, n must be >= 1");
  }
  if (o.grid_length < 1 || o.boundary_length < 1 || o.kernel_max_length < 1) {
    throw std::invalid_argument("onehead: a context length N must be >= 1");
  }
  TransferOptions transfer = experiment_io::TransferFor(o, experiment_io::Lengths(o));
  ValidateTransfer(transfer);
  return setup;
}

void ValidateOnehead(const std::string& experiment, const OneheadOptions& options) {
  ResolveOnehead(experiment, options);
}

namespace experiments_internal {

json RunExperiment(const std::string& experiment, const OneheadSetup& setup) {
  return Runners().at(experiment)(setup);
}

}  // namespace experiments_internal

json RunOnehead(const OneheadSetup& setup) { return RunExperiment(setup.experiment, setup); }

json RunOnehead(const std::string& experiment, const OneheadOptions& options) {
  return RunOnehead(ResolveOnehead(experiment, options));
}

}  // namespace lpattn::onehead

