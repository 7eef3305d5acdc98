// The one-head threshold estimator (docs/harness.md §5): quadrature, the closed form and its
// gradients against finite differences and brute-force quadrature, the claims on small runs,
// determinism across thread counts, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <unistd.h>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <tbb/task_arena.h>

#include "harness/onehead/experiments.h"
#include "harness/onehead/fit.h"
#include "harness/onehead/model.h"
#include "harness/onehead/population.h"
#include "harness/onehead/pretrain.h"
#include "harness/onehead/quadrature.h"

namespace lpattn::onehead {
namespace {

TEST(OneheadQuadrature, GaussLegendreIsExactToDegreeTwoOrderMinusOne) {
  for (int order = 1; order <= 24; ++order) {
    const QuadratureRule& rule = GaussLegendre(order);
    ASSERT_EQ(rule.nodes.size(), size_t(order));
    for (int degree = 0; degree <= 2 * order; ++degree) {
      double sum = 0.0;
      for (int i = 0; i < order; ++i) sum += rule.weights[i] * std::pow(rule.nodes[i], degree);
      const double exact = 1.0 / (degree + 1);
      if (degree <= 2 * order - 1) {
        EXPECT_NEAR(sum, exact, 1e-14) << "order " << order << " degree " << degree;
      } else if (order <= 7) {
        // One degree more is not exact: the error of x^(2n) on [0, 1] is
        // (n!)^4 / ((2n + 1) ((2n)!)^2), which these orders resolve in double precision.
        const double n_fact = std::tgamma(order + 1.0), two_n_fact = std::tgamma(2.0 * order + 1);
        const double error = std::pow(n_fact, 4) / ((2 * order + 1) * two_n_fact * two_n_fact);
        EXPECT_NEAR(exact - sum, error, 1e-5 * error) << "order " << order;
      }
    }
    for (int i = 1; i < order; ++i) EXPECT_LT(rule.nodes[i - 1], rule.nodes[i]);
  }
  // A large order: the weights still sum to 1 and the nodes stay inside (0, 1).
  const QuadratureRule& big = GaussLegendre(4000);
  double total = 0.0;
  for (const double w : big.weights) total += w;
  EXPECT_NEAR(total, 1.0, 1e-12);
  EXPECT_GT(big.nodes.front(), 0.0);
  EXPECT_LT(big.nodes.back(), 1.0);
  EXPECT_THROW(GaussLegendre(0), std::invalid_argument);
  EXPECT_THROW(GaussLegendre(kMaxQuadratureOrder + 1), std::invalid_argument);
}

const std::vector<Params>& TestParams() {
  static const std::vector<Params> params = {{0.0, 0.0}, {1.0, 1.0},  {3.0, -2.0}, {-2.0, 0.5},
                                             {8.0, 5.0}, {50.0, 43.0}, {300.0, 290.0}};
  return params;
}

TEST(OneheadModel, ClosedFormMatchesBruteForceQuadratureOverX) {
  const RowTransform exact = ParseRowTransform("exact");
  RowWorkspace workspace;
  for (const Params& p : TestParams()) {
    for (const double alpha : {0.0, 0.03, 0.3, 0.5, 0.77, 0.999, 1.0}) {
      const Estimate closed = PopulationEstimateExact(p, alpha);
      const Estimate brute = PopulationEstimateByQuadrature(exact, p, alpha, 400, workspace);
      const std::string where = "a=" + std::to_string(p.a) + " b=" + std::to_string(p.b) +
                                " alpha=" + std::to_string(alpha);
      EXPECT_NEAR(closed.F, brute.F, 1e-12) << where;
      EXPECT_NEAR(closed.dF_da, brute.dF_da, 1e-12 + 1e-9 * std::fabs(brute.dF_da)) << where;
      EXPECT_NEAR(closed.dF_db, brute.dF_db, 1e-12 + 1e-9 * std::fabs(brute.dF_db)) << where;
    }
  }
}

// Central differences of F in a and b.
template <class Evaluate>
void ExpectGradientMatchesDifferences(const Evaluate& evaluate, const Params& p, double h,
                                      double tolerance, const std::string& where) {
  const Estimate e = evaluate(p);
  const double da = (evaluate({p.a + h, p.b}).F - evaluate({p.a - h, p.b}).F) / (2 * h);
  const double db = (evaluate({p.a, p.b + h}).F - evaluate({p.a, p.b - h}).F) / (2 * h);
  EXPECT_NEAR(e.dF_da, da, tolerance * (1.0 + std::fabs(da))) << where;
  EXPECT_NEAR(e.dF_db, db, tolerance * (1.0 + std::fabs(db))) << where;
}

TEST(OneheadModel, ClosedFormGradientsMatchFiniteDifferences) {
  for (const Params& p : TestParams()) {
    for (const double alpha : {0.1, 0.5, 0.9}) {
      ExpectGradientMatchesDifferences(
          [&](const Params& q) { return PopulationEstimateExact(q, alpha); }, p, 1e-5, 1e-7,
          "alpha=" + std::to_string(alpha) + " b=" + std::to_string(p.b));
    }
  }
}

TEST(OneheadModel, RowGradientsMatchFiniteDifferencesForEveryTransform) {
  // A context of 40 points; the K-interval transform with its exact surrogate is the derivative
  // of its (piecewise smooth) reconstruction, the thresholded one that of its normalised weights.
  std::vector<double> x(40);
  std::vector<uint8_t> y(40);
  SampleContext(Design{}, LabelNoise{}, 0.4, 3, 7, 0, x.size(), x.data(), y.data());
  RowWorkspace workspace;
  for (const std::string& name : {"exact", "kint:K=16:ste=exact", "kint:K=4:cal=window:W=6",
                                  "tda:views=1:p=2", "tda:views=1:p=3"}) {
    const RowTransform transform = ParseRowTransform(name);
    const double tau = transform.Tau(40);
    for (const Params& p0 : {Params{2.0, 3.0}, Params{9.0, 7.5}}) {
      const Params p{p0.a + tau, p0.b};
      ExpectGradientMatchesDifferences(
          [&](const Params& q) {
            return RowEstimate(transform, q, x.data(), y.data(), nullptr, x.size(), tau, workspace);
          },
          p, 1e-6, 1e-5, name);
    }
  }
}

TEST(OneheadModel, ThresholdedRowWithoutSurvivorsEstimatesZero) {
  const RowTransform tda = ParseRowTransform("tda:views=1");
  const std::vector<double> x = {0.2, 0.6, 0.9};
  const std::vector<uint8_t> y = {0, 1, 1};
  RowWorkspace workspace;
  const Estimate e = RowEstimate(tda, {0.5, 1.0}, x.data(), y.data(), nullptr, 3, 2.0, workspace);
  EXPECT_TRUE(e.empty);
  EXPECT_EQ(e.F, 0.0);
  EXPECT_EQ(e.dF_da, 0.0);
  EXPECT_EQ(e.dF_db, 0.0);
}

TEST(OneheadPopulation, RiskGradientMatchesFiniteDifferences) {
  PopulationOptions options;
  options.order = 300;  // a fixed rule: the risk is then a smooth function of (a, b)
  for (const std::string& name : {"exact", "kint:K=16"}) {
    const RowTransform transform = ParseRowTransform(name);
    options.x_order = 64;
    for (const Params& p : {Params{1.0, 1.0}, Params{9.0, 6.0}}) {
      const Risk r = PopulationRisk(transform, p, options);
      const double h = 1e-5;
      const double da = (PopulationRisk(transform, {p.a + h, p.b}, options).value -
                         PopulationRisk(transform, {p.a - h, p.b}, options).value) / (2 * h);
      const double db = (PopulationRisk(transform, {p.a, p.b + h}, options).value -
                         PopulationRisk(transform, {p.a, p.b - h}, options).value) / (2 * h);
      EXPECT_NEAR(r.grad_a, da, 1e-6 * (1 + std::fabs(da))) << name;
      EXPECT_NEAR(r.grad_b, db, 1e-6 * (1 + std::fabs(db))) << name;
    }
  }
}

TEST(OneheadPopulation, ZeroInitialisationIsStationary) {
  for (const int order : {16, 64, 333}) {
    PopulationOptions options;
    options.order = order;
    const Risk r = PopulationRisk(ParseRowTransform("exact"), {0.0, 0.0}, options);
    EXPECT_NEAR(r.value, 1.0 / 12.0, 1e-14);  // F = 1/2 for every alpha
    EXPECT_LE(std::hypot(r.grad_a, r.grad_b), 1e-12) << order;
  }
  // ...and nearby the gradient is linear in the radius.
  const RowTransform exact = ParseRowTransform("exact");
  const Risk small = PopulationRisk(exact, {1e-4, 1e-4}, {});
  const Risk smaller = PopulationRisk(exact, {1e-5, 1e-5}, {});
  EXPECT_NEAR(std::hypot(small.grad_a, small.grad_b) / std::hypot(smaller.grad_a, smaller.grad_b),
              10.0, 1e-3);
}

TEST(OneheadPopulation, ShortRunRaisesMuAndLowersTheError) {
  const std::vector<TrajectoryPoint> run =
      PopulationDescent(ParseRowTransform("exact"), {1.0, 1.0}, 20.0, 2000, 10, {});
  ASSERT_GE(run.size(), 3u);
  EXPECT_EQ(run.front().step, 0);
  EXPECT_EQ(run.back().step, 2000);
  EXPECT_GT(run.back().params.b, 5.0 * run.front().params.b);
  EXPECT_LT(run.back().risk, 0.2 * run.front().risk);
  // The sup error over interior thresholds falls with it.
  EXPECT_LT(SupInteriorError(ParseRowTransform("exact"), run.back().params, {}),
            0.5 * SupInteriorError(ParseRowTransform("exact"), run.front().params, {}));
}

TEST(OneheadPopulation, RecordStepsAreLogSpacedAndEndAtTheLast) {
  const std::vector<int64_t> steps = RecordSteps(1000, 6);
  EXPECT_EQ(steps.front(), 0);
  EXPECT_EQ(steps.back(), 1000);
  for (size_t i = 1; i < steps.size(); ++i) EXPECT_LT(steps[i - 1], steps[i]);
  EXPECT_EQ(RecordSteps(1, 5), (std::vector<int64_t>{0, 1}));
}

TEST(OneheadTransfer, FrozenErrorFallsAsOneOverNBelowTheRadius) {
  // Stated band: the slope of the error against N, for N well below m ^ n = 512, is within
  // 0.25 of -1 (theory: the nearest positive point is ~1/N from the threshold).
  const Corpus corpus = SampleCorpus(512, 512, Design{}, LabelNoise{}, 11);
  const RowTransform exact = ParseRowTransform("exact");
  const std::vector<PretrainPoint> run =
      Pretrain(exact, corpus, LargeResolutionInit(512, 512), 100.0, 20, 2);
  TransferOptions transfer;
  transfer.lengths = {16, 32, 64, 128};
  transfer.contexts = 300;
  const std::vector<TransferCell> cells = Transfer(exact, run.back().params, transfer);
  const std::vector<double> errors = ErrorByLength(cells, transfer.lengths.size());
  const LineFit fit = FitPowerLaw({16, 32, 64, 128}, errors);
  EXPECT_NEAR(fit.slope, -1.0, 0.25);
}

TEST(OneheadTransfer, ResultsDoNotDependOnTheThreadCount) {
  const RowTransform transform = ParseRowTransform("kint:K=16");
  TransferOptions transfer;
  transfer.lengths = {50, 300};
  transfer.contexts = 64;
  const Corpus corpus = SampleCorpus(64, 48, Design{}, ParseLabelNoise("massart:0.05"), 5);
  auto run = [&] {
    const EmpiricalRisk risk = CorpusRisk(transform, {20.0, 15.0}, corpus);
    std::vector<double> out = {risk.risk.value, risk.risk.grad_a, risk.risk.grad_b};
    for (const TransferCell& c : Transfer(transform, {20.0, 15.0}, transfer)) {
      out.push_back(c.mean_abs_error);
      out.push_back(c.rms_error);
    }
    return out;
  };
  tbb::task_arena one(1), two(2);
  const std::vector<double> serial = one.execute(run), parallel = two.execute(run);
  EXPECT_EQ(serial, parallel);  // bit for bit
}

TEST(OneheadDesign, SamplersInvertTheirDistributionFunctions) {
  const Design tilt = ParseDesign("tilt:2"), bump = ParseDesign("bump:0.8");
  const double two_pi = 2.0 * std::numbers::pi;
  for (double u = 0.0; u < 1.0; u += 0.0625) {
    const double xt = tilt.Sample(u), xb = bump.Sample(u);
    EXPECT_NEAR(std::expm1(2.0 * xt) / std::expm1(2.0), u, 1e-12);
    EXPECT_NEAR(xb + 0.8 * std::sin(two_pi * xb) / two_pi, u, 1e-12);
  }
  EXPECT_EQ(ParseDesign("uniform").Sample(0.3), 0.3);
}

TEST(OneheadDesign, LabelNoiseFlipsWhereItsModelSays) {
  const LabelNoise massart = ParseLabelNoise("massart:0.1");
  const LabelNoise tsybakov = ParseLabelNoise("tsybakov:0.1");
  const LabelNoise localized = ParseLabelNoise("localized:0.1");
  EXPECT_EQ(massart.FlipProbability(0.9, 0.2), 0.1);
  EXPECT_NEAR(tsybakov.FlipProbability(0.5, 0.5), 0.5, 1e-15);
  EXPECT_NEAR(tsybakov.FlipProbability(0.55, 0.5), 0.25, 1e-12);
  EXPECT_EQ(tsybakov.FlipProbability(0.7, 0.5), 0.0);
  EXPECT_EQ(localized.FlipProbability(0.45, 0.5), 1.0);
  EXPECT_EQ(localized.FlipProbability(0.65, 0.5), 0.0);
  // Localized noise flips exactly the band's labels.
  std::vector<double> x(2000);
  std::vector<uint8_t> y(2000);
  SampleContext(Design{}, localized, 0.5, 1, 1, 0, x.size(), x.data(), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const bool clean = x[i] >= 0.5;
    EXPECT_EQ(y[i] == 1, std::fabs(x[i] - 0.5) < 0.1 ? !clean : clean);
  }
}

TEST(OneheadFit, TwoTermFitRecoversKnownExponents) {
  std::vector<double> u, v, e;
  for (const double m : {16.0, 64.0, 256.0, 1024.0}) {
    for (double N = 16; N <= 16384; N *= 2) {
      u.push_back(m);
      v.push_back(N);
      e.push_back(0.8 * std::pow(m, -1.1) + 2.0 * std::pow(N, -0.9));
    }
  }
  const TwoTermFit fit = FitTwoTerm(u, v, e);
  EXPECT_NEAR(fit.p, -1.1, 2e-3);
  EXPECT_NEAR(fit.q, -0.9, 2e-3);
  EXPECT_NEAR(fit.A, 0.8, 0.02);
  EXPECT_NEAR(fit.B, 2.0, 0.05);
  EXPECT_LT(fit.relative_rms, 1e-2);
  const TwoTermFit fixed = FitTwoTermWithExponents(u, v, e, -1.1, -0.9);
  EXPECT_NEAR(fixed.A, 0.8, 1e-9);
  EXPECT_NEAR(fixed.B, 2.0, 1e-9);
  EXPECT_LT(fixed.relative_rms, 1e-12);
  const LineFit line = FitPowerLaw({1, 10, 100}, {3, 0.3, 0.03});
  EXPECT_NEAR(line.slope, -1.0, 1e-12);
  EXPECT_NEAR(line.r2, 1.0, 1e-12);
  EXPECT_THROW(FitTwoTerm({1, 2, 3}, {1, 2, 3}, {1, 2, 3}), std::invalid_argument);
  EXPECT_THROW(FitPowerLaw({1, 2}, {1, -2}), std::invalid_argument);
}

TEST(OneheadValidation, BadInputIsRejectedBeforeAnyWork) {
  const RowTransform exact = ParseRowTransform("exact");
  EXPECT_THROW(SampleCorpus(0, 10, Design{}, LabelNoise{}, 1), std::invalid_argument);
  EXPECT_THROW(SampleCorpus(10, 0, Design{}, LabelNoise{}, 1), std::invalid_argument);
  TransferOptions transfer;
  transfer.lengths = {0};
  EXPECT_THROW(Transfer(exact, {1, 1}, transfer), std::invalid_argument);
  transfer.lengths = {16};
  for (const double alpha : {0.0, 1.0, -0.5, std::nan("")}) {
    transfer.alphas = {alpha};
    EXPECT_THROW(Transfer(exact, {1, 1}, transfer), std::invalid_argument) << alpha;
  }
  for (const double step : {0.0, -1.0, std::nan(""), double(INFINITY)}) {
    EXPECT_THROW(PopulationDescent(exact, {1, 1}, step, 10, 2, {}), std::invalid_argument);
    const Corpus corpus = SampleCorpus(4, 4, Design{}, LabelNoise{}, 1);
    EXPECT_THROW(Pretrain(exact, corpus, {1, 1}, step, 10, 2), std::invalid_argument);
    OneheadOptions options;
    options.step = step;
    EXPECT_THROW(ValidateOnehead("population", options), std::invalid_argument);
  }
  EXPECT_THROW(ValidateOnehead("nonsense", OneheadOptions{}), std::invalid_argument);
  OneheadOptions bad_corpus;
  bad_corpus.corpora = {{0, 16}};
  EXPECT_THROW(ValidateOnehead("transfer", bad_corpus), std::invalid_argument);
  OneheadOptions bad_length;
  bad_length.lengths = {16, 0};
  EXPECT_THROW(ValidateOnehead("matched", bad_length), std::invalid_argument);
  OneheadOptions bad_alpha;
  bad_alpha.alphas = {0.5, 1.5};
  EXPECT_THROW(ValidateOnehead("transfer", bad_alpha), std::invalid_argument);
  EXPECT_THROW(ParseRowTransform("softmax"), std::invalid_argument);
  EXPECT_THROW(ParseRowTransform("tda:views=2"), std::invalid_argument);
  EXPECT_THROW(ParseRowTransform("kint:K=0"), std::invalid_argument);
  EXPECT_THROW(ParseDesign("bump:1.5"), std::invalid_argument);
  EXPECT_THROW(ParseDesign("beta:2"), std::invalid_argument);
  EXPECT_THROW(ParseLabelNoise("massart:0.7"), std::invalid_argument);
  EXPECT_THROW(ParseLabelNoise("localized:x"), std::invalid_argument);
  PopulationOptions orders;
  orders.order = -1;
  EXPECT_THROW(PopulationRisk(exact, {1, 1}, orders), std::invalid_argument);
  EXPECT_EQ(ParseRowTransform("tda").tda.views, 1);
}

TEST(OneheadExperiments, SmallRunsWriteTheirSummaries) {
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("lpattn_onehead_" + std::to_string(::getpid()));
  OneheadOptions options;
  options.out = out.string();
  options.figures = false;
  options.steps = 3000;
  options.records = 30;
  options.corpora = {{32, 32}, {128, 128}};
  options.pretrain_steps = 5;
  options.lengths = {16, 64, 256, 1024};
  options.contexts = 64;
  const nlohmann::json population = RunOnehead("population", options);
  EXPECT_TRUE(population.contains("gamma"));
  const nlohmann::json transfer = RunOnehead("transfer", options);
  EXPECT_TRUE(transfer.contains("slope_N"));
  EXPECT_TRUE(transfer.contains("slope_mn"));
  for (const char* name : {"population", "transfer"}) {
    std::ifstream file(out / name / "summary.json");
    ASSERT_TRUE(file.good()) << name;
    const nlohmann::json written = nlohmann::json::parse(file);
    EXPECT_EQ(written["experiment"], name);
  }
  EXPECT_TRUE(std::filesystem::exists(out / "population" / "trajectory.csv"));
  EXPECT_TRUE(std::filesystem::exists(out / "transfer" / "errors.csv"));
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace lpattn::onehead
