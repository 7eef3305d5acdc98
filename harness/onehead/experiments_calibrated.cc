// The calibrated estimator at a given radius (docs/harness.md §5): a = b + log b + c with c
// minimising the population risk. matched (mu = N / divisor: the error falls as 1/N), noise
// (label noise: Massart and boundary-band) and boundary (alpha -> 1, and the reflected
// estimate).
#include "harness/onehead/experiments_internal.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <tbb/parallel_for.h>

#include "harness/onehead/experiment_io.h"
#include "harness/onehead/fit.h"
#include "harness/onehead/pretrain.h"

namespace lpattn::onehead::experiments_internal {
using namespace experiment_io;
namespace {

// a = b + log b + c with c minimising the population risk at fixed b (golden section over
// c in [-10, 20]).
Params Calibrated(const RowTransform& transform, double b, const PopulationOptions& quadrature) {
  auto risk = [&](double c) {
    return PopulationRisk(transform, {b + std::log(b) + c, b}, quadrature).value;
  };
  double lo = -10.0, hi = 20.0;
  const double g = (std::sqrt(5.0) - 1.0) / 2.0;
  double x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo);
  double f1 = risk(x1), f2 = risk(x2);
  for (int i = 0; i < 60; ++i) {
    if (f1 < f2) {
      hi = x2;
      x2 = x1;
      f2 = f1;
      x1 = hi - g * (hi - lo);
      f1 = risk(x1);
    } else {
      lo = x1;
      x1 = x2;
      f1 = f2;
      x2 = lo + g * (hi - lo);
      f2 = risk(x2);
    }
  }
  const double c = 0.5 * (lo + hi);
  return {b + std::log(b) + c, b};
}

// The matched estimator (mu = N / divisor, calibrated) at each N, on contexts with `noise`.
std::vector<double> MatchedErrors(const OneheadOptions& o, const RowTransform& transform,
                                  const std::vector<int64_t>& lengths, const LabelNoise& noise,
                                  Csv* csv, const std::string& label) {
  std::vector<double> errors;
  for (const int64_t N : lengths) {
    const Params params = Calibrated(transform, double(N) / o.matched_divisor, o.quadrature);
    TransferOptions transfer = TransferFor(o, {N});
    transfer.noise = noise;
    const std::vector<TransferCell> cells = Transfer(transform, params, transfer);
    for (const TransferCell& cell : cells) {
      if (csv) {
        csv->Cell(label).Cell(double(N)).Cell(params.a).Cell(params.b).Cell(cell.alpha);
        csv->Cell(cell.mean_abs_error).Cell(cell.rms_error).EndRow();
      }
    }
    errors.push_back(ErrorByLength(cells, 1)[0]);
  }
  return errors;
}

}  // namespace

json Matched(const OneheadSetup& setup) {
  const OneheadOptions& o = setup.options;
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = ExperimentDir(o, "matched");
  const RowTransform& transform = setup.transform.value;
  const std::vector<int64_t> lengths = Lengths(o);
  Csv csv({"noise", "N", "a", "b", "alpha", "mean_abs_error", "rms_error"});
  const std::vector<double> errors = MatchedErrors(o, transform, lengths, LabelNoise{}, &csv, "none");
  csv.Write(dir / "matched.csv");
  json summary;
  summary["transform"] = transform.Name();
  summary["divisor"] = o.matched_divisor;
  const std::vector<double> ns(lengths.begin(), lengths.end());
  summary["slope_N"] = FitPowerLaw(ns, errors).slope;
  // The upper half of the lengths, past the small-N transient (b = N / 8 is small there).
  const size_t half = ns.size() / 2;
  if (ns.size() - half >= 2) {
    summary["slope_N_upper_half"] =
        FitPowerLaw({ns.begin() + half, ns.end()}, {errors.begin() + half, errors.end()}).slope;
  }
  summary["errors"] = errors;
  summary["lengths"] = lengths;
  return Finish(o, "matched", summary, start);
}

json Noise(const OneheadSetup& setup) {
  const OneheadOptions& o = setup.options;
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = ExperimentDir(o, "noise");
  const RowTransform& transform = setup.transform.value;
  const std::vector<int64_t> lengths = Lengths(o);
  const std::vector<double> ns(lengths.begin(), lengths.end());
  Csv csv({"noise", "N", "a", "b", "alpha", "mean_abs_error", "rms_error"});
  json runs = json::array();
  std::vector<Labelled<LabelNoise>> noises = {{"none", LabelNoise{}}};
  noises.insert(noises.end(), setup.noises.begin(), setup.noises.end());
  for (const auto& [name, noise] : noises) {
    const std::vector<double> errors = MatchedErrors(o, transform, lengths, noise, &csv, name);
    json run = {{"noise", name}, {"errors", errors},
                {"error_at_largest_N", errors.back()},
                {"slope_N", FitPowerLaw(ns, errors).slope}};
    if (noise.kind == LabelNoise::Kind::kTsybakov || noise.kind == LabelNoise::Kind::kLocalized) {
      run["band"] = noise.param;
      run["floor_over_band"] = errors.back() / noise.param;
    }
    runs.push_back(run);
  }
  csv.Write(dir / "noise.csv");
  json summary;
  summary["transform"] = transform.Name();
  summary["lengths"] = lengths;
  summary["runs"] = runs;
  return Finish(o, "noise", summary, start);
}

json Boundary(const OneheadSetup& setup) {
  const OneheadOptions& o = setup.options;
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = ExperimentDir(o, "boundary");
  const RowTransform& transform = setup.transform.value;
  const Params params = Calibrated(transform, o.boundary_radius, o.quadrature);
  std::vector<double> alphas;
  for (int i = 1; i < 100; ++i) alphas.push_back(0.01 * i);
  for (int k = 9; k <= 16; ++k) alphas.push_back(1.0 - std::pow(10.0, -k / 4.0));  // zoom
  std::sort(alphas.begin(), alphas.end());
  // Finite contexts: the mirrored context (1 - x, 1 - y) has threshold 1 - alpha; the reflected
  // estimate averages F with 1 - F(mirrored).
  const int64_t N = o.boundary_length;
  Csv csv({"alpha", "population", "population_reflected", "finite", "finite_reflected"});
  double interior_sup = 0, interior_sup_reflected = 0, interior_bias = 0, interior_bias_reflected = 0;
  int interior = 0;
  std::vector<double> finite(alphas.size()), finite_reflected(alphas.size());
  const double tau = transform.Tau(N);
  for (size_t i = 0; i < alphas.size(); ++i) {
    const double alpha = alphas[i];
    std::vector<double> err(o.contexts), err_reflected(o.contexts);
    tbb::parallel_for(int64_t{0}, o.contexts, [&](int64_t c) {
      std::vector<double> x(N), xm(N);
      std::vector<uint8_t> y(N), ym(N);
      RowWorkspace workspace;
      SampleContext(Design{}, LabelNoise{}, alpha, o.seed + 300, 5000 + i, uint64_t(c) * 2 * N, N,
                    x.data(), y.data());
      for (int64_t j = 0; j < N; ++j) {
        xm[j] = 1.0 - x[j];
        ym[j] = 1 - y[j];
      }
      const double F = RowEstimate(transform, params, x.data(), y.data(), nullptr, N, tau, workspace).F;
      const double Fm = RowEstimate(transform, params, xm.data(), ym.data(), nullptr, N, tau, workspace).F;
      err[c] = std::fabs(F - alpha);
      err_reflected[c] = std::fabs(0.5 * (F + 1.0 - Fm) - alpha);
    });
    for (int64_t c = 0; c < o.contexts; ++c) {
      finite[i] += err[c] / double(o.contexts);
      finite_reflected[i] += err_reflected[c] / double(o.contexts);
    }
    const double F = PopulationEstimate(transform, params, alpha, o.quadrature).F;
    const double Fm = PopulationEstimate(transform, params, 1.0 - alpha, o.quadrature).F;
    const double reflected = 0.5 * (F + 1.0 - Fm);
    csv.Cell(alpha).Cell(F - alpha).Cell(reflected - alpha).Cell(finite[i]);
    csv.Cell(finite_reflected[i]).EndRow();
    if (alpha >= 0.1 && alpha <= 0.9) {
      interior_sup = std::max(interior_sup, std::fabs(F - alpha));
      interior_sup_reflected = std::max(interior_sup_reflected, std::fabs(reflected - alpha));
      interior_bias += F - alpha;
      interior_bias_reflected += reflected - alpha;
      ++interior;
    }
  }
  csv.Write(dir / "boundary.csv");
  const double near_one = alphas.back();
  const double F1 = PopulationEstimate(transform, params, near_one, o.quadrature).F;
  const double F1m = PopulationEstimate(transform, params, 1.0 - near_one, o.quadrature).F;
  json summary;
  summary["transform"] = transform.Name();
  summary["a"] = params.a;
  summary["b"] = params.b;
  summary["N"] = N;
  summary["interior_sup_error"] = interior_sup;
  summary["interior_sup_error_reflected"] = interior_sup_reflected;
  summary["interior_mean_bias"] = interior_bias / interior;
  summary["interior_mean_bias_reflected"] = interior_bias_reflected / interior;
  summary["alpha_near_one"] = near_one;
  summary["error_near_one"] = std::fabs(F1 - near_one);
  summary["error_near_one_reflected"] = std::fabs(0.5 * (F1 + 1.0 - F1m) - near_one);
  summary["finite_error_near_one"] = finite.back();
  summary["finite_error_near_one_reflected"] = finite_reflected.back();
  return Finish(o, "boundary", summary, start);
}

}  // namespace lpattn::onehead::experiments_internal
