// The population experiments (docs/harness.md §5): gradient descent on the population risk.
// stationary (zero is a critical point), population (calibration, capture, growth), quadrature
// (convergence in the order), stepsize (mu^4 per unit of time) and init (escape from near zero).
#include "harness/onehead/experiments_internal.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "harness/onehead/experiment_io.h"
#include "harness/onehead/fit.h"
#include "harness/onehead/population.h"

namespace lpattn::onehead::experiments_internal {
using namespace experiment_io;
namespace {

// ---- population trajectories -------------------------------------------------------------

std::vector<PopulationRow> DescribeTrajectory(const RowTransform& transform,
                                              const std::vector<TrajectoryPoint>& trajectory,
                                              const PopulationOptions& quadrature) {
  std::vector<PopulationRow> rows;
  for (const TrajectoryPoint& point : trajectory) {
    rows.push_back({point, std::sqrt(point.risk),
                    SupInteriorError(transform, point.params, quadrature)});
  }
  return rows;
}

}  // namespace

void WriteTrajectory(const std::vector<PopulationRow>& rows, const fs::path& path,
                     const std::string& label, const std::string& label_name) {
  std::vector<std::string> header = {"step", "t", "a", "b", "ratio", "c", "risk", "grad_a",
                                     "grad_b", "error", "sup_interior", "mu4", "mu3_dmu_dt",
                                     "mu_sup"};
  if (!label_name.empty()) header.insert(header.begin(), label_name);
  Csv csv(header);
  for (const PopulationRow& row : rows) {
    const Params& p = row.point.params;
    if (!label_name.empty()) csv.Cell(label);
    csv.Cell(double(row.point.step)).Cell(row.point.t).Cell(p.a).Cell(p.b);
    csv.Cell(p.b != 0.0 ? Ratio(p) : std::nan("")).Cell(p.b > 0.0 ? EndpointCoordinate(p) : std::nan(""));
    csv.Cell(row.point.risk).Cell(row.point.grad_a).Cell(row.point.grad_b).Cell(row.error);
    csv.Cell(row.sup_interior).Cell(std::pow(p.b, 4)).Cell(-std::pow(p.b, 3) * row.point.grad_b);
    csv.Cell(p.b * row.sup_interior);
    csv.EndRow();
  }
  csv.Write(path);
}

json SummarisePopulation(const std::vector<PopulationRow>& rows) {
  json out;
  size_t capture = 0;
  for (size_t i = 1; i < rows.size(); ++i) {
    const Params& p = rows[i].point.params;
    const Params& best = rows[capture].point.params;
    if (p.b > 0.0 && (best.b <= 0.0 || Ratio(p) > Ratio(best))) capture = i;
  }
  const double t_end = rows.back().point.t;
  const double t_capture = rows[capture].point.t;
  const double fit_from = std::max(10.0 * t_capture, t_end / 100.0);
  std::vector<double> t, mu, mu4, error, sup, mu3dmu, musup, c, log_mu, tube;
  for (const PopulationRow& row : rows) {
    const Params& p = row.point.params;
    if (row.point.t < fit_from || p.b <= 0.0) continue;
    t.push_back(row.point.t);
    mu.push_back(p.b);
    mu4.push_back(std::pow(p.b, 4));
    error.push_back(row.error);
    sup.push_back(row.sup_interior);
    mu3dmu.push_back(-std::pow(p.b, 3) * row.point.grad_b);
    musup.push_back(p.b * row.sup_interior);
    c.push_back(EndpointCoordinate(p));
    log_mu.push_back(std::log(p.b));
    if (p.b > 1.0) tube.push_back((p.a - p.b) / std::log(p.b));
  }
  out["t_capture"] = t_capture;
  out["ratio_at_capture"] = Ratio(rows[capture].point.params);
  out["c_at_capture"] = EndpointCoordinate(rows[capture].point.params);
  out["fit_from_t"] = fit_from;
  out["fit_points"] = t.size();
  out["mu_end"] = rows.back().point.params.b;
  out["c_end"] = EndpointCoordinate(rows.back().point.params);
  out["risk_end"] = rows.back().point.risk;
  if (t.size() < 3 || mu.front() == mu.back()) {
    out["note"] = "too few recorded iterates after capture to fit";
    return out;
  }
  const LineFit gamma = FitPowerLaw(t, mu);
  const LineFit affine = FitLine(t, mu4);
  out["gamma"] = gamma.slope;
  out["gamma_r2"] = gamma.r2;
  out["mu4_slope"] = affine.slope;
  out["mu4_intercept"] = affine.intercept;
  out["mu4_r2"] = affine.r2;
  out["error_exponent"] = FitPowerLaw(t, error).slope;
  out["sup_interior_exponent"] = FitPowerLaw(t, sup).slope;
  out["mu3_dmu_dt_spread"] = Spread(mu3dmu);
  out["mu_sup_spread"] = Spread(musup);
  out["c_range"] = {*std::min_element(c.begin(), c.end()), *std::max_element(c.begin(), c.end())};
  out["c_slope_per_log_mu"] = FitLine(log_mu, c).slope;
  if (!tube.empty()) {  // a - b = k log b: the logarithmic tube's coefficient k
    out["tube_k_range"] = {*std::min_element(tube.begin(), tube.end()),
                           *std::max_element(tube.begin(), tube.end())};
  }
  return out;
}

std::vector<PopulationRow> RunPopulation(const RowTransform& transform, const Params& init,
                                         double step, int64_t steps, int records,
                                         const PopulationOptions& quadrature) {
  return DescribeTrajectory(
      transform, PopulationDescent(transform, init, step, steps, records, quadrature), quadrature);
}

// ---- 1. stationary ------------------------------------------------------------------------

json Stationary(const OneheadSetup& setup) {
  const OneheadOptions& o = setup.options;
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = ExperimentDir(o, "stationary");
  const RowTransform& transform = setup.transform.value;
  json summary;
  // The gradient at zero under several alpha orders (and x quadrature for softmax).
  Csv zero({"order", "x_quadrature", "risk", "grad_a", "grad_b", "grad_norm"});
  double worst = 0.0;
  for (const int order : {16, 64, 256, 1024}) {
    for (const bool by_x : {false, true}) {
      PopulationOptions q = o.quadrature;
      q.order = order;
      q.force_x_quadrature = by_x;
      const Risk r = PopulationRisk(transform, {0.0, 0.0}, q);
      const double norm = std::hypot(r.grad_a, r.grad_b);
      worst = std::max(worst, norm);
      zero.Cell(double(order)).Cell(by_x ? "1" : "0").Cell(r.value).Cell(r.grad_a);
      zero.Cell(r.grad_b).Cell(norm).EndRow();
    }
  }
  zero.Write(dir / "zero_gradient.csv");
  // The gradient field around zero: 0 is a critical point of R.
  Csv field({"a", "b", "risk", "grad_a", "grad_b"});
  for (int i = -10; i <= 10; ++i) {
    for (int j = -10; j <= 10; ++j) {
      const Params p{0.2 * i, 0.2 * j};
      const Risk r = PopulationRisk(transform, p, o.quadrature);
      field.Cell(p.a).Cell(p.b).Cell(r.value).Cell(r.grad_a).Cell(r.grad_b).EndRow();
    }
  }
  field.Write(dir / "field.csv");
  summary["transform"] = transform.Name();
  summary["zero_grad_norm"] = worst;
  summary["zero_risk"] = PopulationRisk(transform, {0.0, 0.0}, o.quadrature).value;
  return Finish(o, "stationary", summary, start);
}

// ---- 2. population ------------------------------------------------------------------------

json Population(const OneheadSetup& setup) {
  const OneheadOptions& o = setup.options;
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = ExperimentDir(o, "population");
  const RowTransform& transform = setup.transform.value;
  const std::vector<PopulationRow> rows =
      RunPopulation(transform, StartFor(transform, o.population_init, transform.tau_keys), o.step,
                    o.steps, o.records, o.quadrature);
  WriteTrajectory(rows, dir / "trajectory.csv");
  json summary = SummarisePopulation(rows);
  summary["transform"] = transform.Name();
  summary["step"] = o.step;
  summary["steps"] = o.steps;
  summary["init"] = {o.population_init.a, o.population_init.b};
  return Finish(o, "population", summary, start);
}

// ---- 3. quadrature ------------------------------------------------------------------------

json Quadrature(const OneheadSetup& setup) {
  const OneheadOptions& o = setup.options;
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = ExperimentDir(o, "quadrature");
  const RowTransform& transform = setup.transform.value;
  std::vector<int> orders = o.orders;
  orders.push_back(0);  // automatic: the reference
  Csv csv({"order", "step", "t", "a", "b", "ratio", "risk"});
  json runs = json::array();
  std::vector<std::vector<TrajectoryPoint>> trajectories;
  std::vector<double> hitting(orders.size());
  for (size_t r = 0; r < orders.size(); ++r) {
    PopulationOptions q = o.quadrature;
    q.order = orders[r];
    q.x_order = orders[r];
    trajectories.push_back(PopulationDescent(transform,
                                             StartFor(transform, o.population_init,
                                                      transform.tau_keys),
                                             o.step, o.steps,
                                             o.records, q, o.hitting_risk, &hitting[r]));
  }
  const std::vector<TrajectoryPoint>& reference = trajectories.back();
  for (size_t r = 0; r < orders.size(); ++r) {
    const std::vector<TrajectoryPoint>& trajectory = trajectories[r];
    double ratio_gap = 0.0;
    for (size_t i = 0; i < trajectory.size(); ++i) {
      const TrajectoryPoint& p = trajectory[i];
      csv.Cell(double(orders[r])).Cell(double(p.step)).Cell(p.t).Cell(p.params.a);
      csv.Cell(p.params.b).Cell(Ratio(p.params)).Cell(p.risk).EndRow();
      ratio_gap = std::max(ratio_gap, std::fabs(Ratio(p.params) - Ratio(reference[i].params)));
    }
    // Every run's final risk on the reference (automatic) quadrature.
    PopulationOptions q = o.quadrature;
    const double risk = PopulationRisk(transform, trajectory.back().params, q).value;
    runs.push_back({{"order", orders[r] == 0 ? json("auto") : json(orders[r])},
                    {"hitting_time", std::isnan(hitting[r]) ? json(nullptr) : json(hitting[r])},
                    {"final_risk", risk},
                    {"final_mu", trajectory.back().params.b},
                    {"max_ratio_gap_to_auto", ratio_gap}});
  }
  csv.Write(dir / "trajectories.csv");
  json summary;
  summary["transform"] = transform.Name();
  summary["hitting_risk"] = o.hitting_risk;
  summary["runs"] = runs;
  // Convergence: the two highest fixed orders against the automatic one.
  if (orders.size() >= 2) {
    const json& last = runs[orders.size() - 2];
    summary["highest_fixed_order"] = last["order"];
    summary["highest_fixed_ratio_gap"] = last["max_ratio_gap_to_auto"];
    const json& ref = runs.back();
    if (!last["hitting_time"].is_null() && !ref["hitting_time"].is_null()) {
      summary["highest_fixed_hitting_time_rel_gap"] =
          std::fabs(last["hitting_time"].get<double>() / ref["hitting_time"].get<double>() - 1.0);
    }
  }
  return Finish(o, "quadrature", summary, start);
}

// ---- 4c. stepsize ---------------------------------------------------------------------------

json Stepsize(const OneheadSetup& setup) {
  const OneheadOptions& o = setup.options;
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = ExperimentDir(o, "stepsize");
  const RowTransform& transform = setup.transform.value;
  const double horizon = o.step * double(o.steps);
  Csv csv({"step_size", "step", "t", "b", "mu4"});
  json runs = json::array();
  std::vector<double> slopes;
  for (const double eta : o.step_sizes) {
    const int64_t steps = std::max<int64_t>(1, std::llround(horizon / eta));
    const std::vector<PopulationRow> rows =
        RunPopulation(transform, StartFor(transform, o.population_init, transform.tau_keys), eta,
                      steps, o.records, o.quadrature);
    for (const PopulationRow& row : rows) {
      csv.Cell(eta).Cell(double(row.point.step)).Cell(row.point.t).Cell(row.point.params.b);
      csv.Cell(std::pow(row.point.params.b, 4)).EndRow();
    }
    const json fits = SummarisePopulation(rows);
    const double slope = fits.value("mu4_slope", std::nan(""));
    slopes.push_back(slope);
    runs.push_back({{"step_size", eta}, {"steps", steps}, {"mu4_per_t", slope},
                    {"mu4_r2", fits.value("mu4_r2", std::nan(""))}, {"mu_end", fits["mu_end"]}});
  }
  csv.Write(dir / "stepsize.csv");
  json summary;
  summary["transform"] = transform.Name();
  summary["horizon_t"] = horizon;
  summary["runs"] = runs;
  summary["mu4_per_t_spread"] = Spread(slopes);
  return Finish(o, "stepsize", summary, start);
}

// ---- 4d. init -------------------------------------------------------------------------------

json Init(const OneheadSetup& setup) {
  const OneheadOptions& o = setup.options;
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = ExperimentDir(o, "init");
  const RowTransform& transform = setup.transform.value;
  const Risk at_zero = PopulationRisk(transform, {0.0, 0.0}, o.quadrature);
  const double escape_risk = 0.5 * at_zero.value;
  Csv csv({"radius", "a0", "b0", "grad_norm", "risk_after_budget", "escape_time"});
  Csv paths({"radius", "step", "t", "a", "b", "risk"});
  std::vector<double> radii, norms;
  json runs = json::array();
  for (const double r : o.init_radii) {
    const Params init{r / std::sqrt(2.0), r / std::sqrt(2.0)};  // along (1, 1)
    const Risk risk = PopulationRisk(transform, init, o.quadrature);
    const double norm = std::hypot(risk.grad_a, risk.grad_b);
    double escape = 0.0;
    const std::vector<TrajectoryPoint> run = PopulationDescent(
        transform, init, o.step, o.init_steps, o.records, o.quadrature, escape_risk, &escape);
    for (const TrajectoryPoint& p : run) {
      paths.Cell(r).Cell(double(p.step)).Cell(p.t).Cell(p.params.a).Cell(p.params.b);
      paths.Cell(p.risk).EndRow();
    }
    csv.Cell(r).Cell(init.a).Cell(init.b).Cell(norm).Cell(run.back().risk).Cell(escape).EndRow();
    radii.push_back(r);
    norms.push_back(norm);
    runs.push_back({{"radius", r}, {"grad_norm", norm}, {"risk_after_budget", run.back().risk},
                    {"escape_time", std::isnan(escape) ? json(nullptr) : json(escape)}});
  }
  csv.Write(dir / "init.csv");
  paths.Write(dir / "paths.csv");
  json summary;
  summary["transform"] = transform.Name();
  summary["zero_grad_norm"] = std::hypot(at_zero.grad_a, at_zero.grad_b);
  summary["budget_steps"] = o.init_steps;
  summary["budget_t"] = o.step * double(o.init_steps);
  summary["escape_risk"] = escape_risk;
  summary["runs"] = runs;
  if (radii.size() >= 2) summary["grad_norm_exponent"] = FitPowerLaw(radii, norms).slope;
  return Finish(o, "init", summary, start);
}

}  // namespace lpattn::onehead::experiments_internal
