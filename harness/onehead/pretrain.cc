#include "harness/onehead/pretrain.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

#include <tbb/parallel_for.h>

#include "harness/common/counter_rng.h"

namespace lpattn::onehead {
namespace {

constexpr uint64_t kAlphaStream = 1;
constexpr uint64_t kCorpusStream = 2;
constexpr uint64_t kTransferStream = 1000;  // + cell index

double ParseNumber(const std::string& text, const std::string& what) {
  size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(value)) {
    throw std::invalid_argument("onehead: " + what + " needs a finite number, got '" + text + "'");
  }
  return value;
}

std::string Number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g", value);
  return buffer;
}

}  // namespace

std::string Design::Name() const {
  switch (kind) {
    case Kind::kUniform:
      return "uniform";
    case Kind::kTilt:
      return "tilt:" + Number(param);
    case Kind::kBump:
      return "bump:" + Number(param);
  }
  return "";
}

double Design::Sample(double u) const {
  switch (kind) {
    case Kind::kUniform:
      return u;
    case Kind::kTilt:  // CDF (e^{S x} - 1) / (e^S - 1)
      return param == 0.0 ? u : std::log1p(u * std::expm1(param)) / param;
    case Kind::kBump: {
      // CDF x + A sin(2 pi x) / (2 pi), slope 1 + A cos(2 pi x) >= 1 - |A| > 0: Newton from
      // x = u, kept inside the bracket [lo, hi] that each step narrows (bisection if it leaves).
      const double two_pi = 2.0 * std::numbers::pi;
      double lo = 0.0, hi = 1.0, x = u;
      for (int i = 0; i < 100; ++i) {
        const double f = x + param * std::sin(two_pi * x) / two_pi - u;
        (f < 0.0 ? lo : hi) = x;
        double next = x - f / (1.0 + param * std::cos(two_pi * x));
        if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
        if (std::fabs(next - x) <= 1e-15) return next;
        x = next;
      }
      return x;
    }
  }
  return u;
}

Design ParseDesign(const std::string& text) {
  Design design;
  if (text == "uniform") return design;
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  if (colon == std::string::npos || (name != "tilt" && name != "bump")) {
    throw std::invalid_argument("onehead: unknown design '" + text +
                                "' (expected uniform, tilt:S or bump:A)");
  }
  design.param = ParseNumber(text.substr(colon + 1), "design " + name);
  if (name == "tilt") {
    design.kind = Design::Kind::kTilt;
    if (std::fabs(design.param) > 50.0) {
      throw std::invalid_argument("onehead: tilt:S needs |S| <= 50, got '" + text + "'");
    }
  } else {
    design.kind = Design::Kind::kBump;
    if (!(std::fabs(design.param) < 1.0)) {
      throw std::invalid_argument("onehead: bump:A needs |A| < 1 (a positive density), got '" +
                                  text + "'");
    }
  }
  return design;
}

std::string LabelNoise::Name() const {
  switch (kind) {
    case Kind::kNone:
      return "none";
    case Kind::kMassart:
      return "massart:" + Number(param);
    case Kind::kTsybakov:
      return "tsybakov:" + Number(param);
    case Kind::kLocalized:
      return "localized:" + Number(param);
  }
  return "";
}

double LabelNoise::FlipProbability(double x, double alpha) const {
  const double distance = std::fabs(x - alpha);
  switch (kind) {
    case Kind::kNone:
      return 0.0;
    case Kind::kMassart:
      return param;
    case Kind::kTsybakov:
      return distance < param ? 0.5 * (1.0 - distance / param) : 0.0;
    case Kind::kLocalized:
      return distance < param ? 1.0 : 0.0;
  }
  return 0.0;
}

LabelNoise ParseLabelNoise(const std::string& text) {
  LabelNoise noise;
  if (text == "none") return noise;
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  if (colon == std::string::npos ||
      (name != "massart" && name != "tsybakov" && name != "localized")) {
    throw std::invalid_argument("onehead: unknown label noise '" + text +
                                "' (expected none, massart:R, tsybakov:H or localized:H)");
  }
  noise.param = ParseNumber(text.substr(colon + 1), "label noise " + name);
  if (name == "massart") {
    noise.kind = LabelNoise::Kind::kMassart;
    if (!(noise.param >= 0.0 && noise.param < 0.5)) {
      throw std::invalid_argument("onehead: massart:R needs R in [0, 0.5), got '" + text + "'");
    }
  } else {
    noise.kind = name == "tsybakov" ? LabelNoise::Kind::kTsybakov : LabelNoise::Kind::kLocalized;
    if (!(noise.param > 0.0 && noise.param < 1.0)) {
      throw std::invalid_argument("onehead: " + name + ":H needs a band H in (0, 1), got '" +
                                  text + "'");
    }
  }
  return noise;
}

double Uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return double(harness::SplitMix64(seed, stream, index) >> 11) * 0x1.0p-53;
}

void SampleContext(const Design& design, const LabelNoise& noise, double alpha, uint64_t seed,
                   uint64_t stream, uint64_t first, size_t n, double* x, uint8_t* y) {
  for (size_t i = 0; i < n; ++i) {
    x[i] = design.Sample(Uniform(seed, stream, first + 2 * i));
    const bool clean = x[i] >= alpha;
    const double flip = noise.FlipProbability(x[i], alpha);
    const bool flipped = flip > 0.0 && Uniform(seed, stream, first + 2 * i + 1) < flip;
    y[i] = clean != flipped ? 1 : 0;
  }
}

Corpus SampleCorpus(int64_t m, int64_t n, const Design& design, const LabelNoise& noise,
                    uint64_t seed) {
  if (m < 1 || n < 1) {
    throw std::invalid_argument("onehead: a corpus needs m >= 1 tasks and n >= 1 examples, got m=" +
                                std::to_string(m) + ", n=" + std::to_string(n));
  }
  Corpus corpus;
  corpus.m = m;
  corpus.n = n;
  corpus.alpha.resize(m);
  corpus.x.resize(size_t(m) * n);
  corpus.y.resize(size_t(m) * n);
  tbb::parallel_for(int64_t{0}, m, [&](int64_t t) {
    corpus.alpha[t] = Uniform(seed, kAlphaStream, t);
    SampleContext(design, noise, corpus.alpha[t], seed, kCorpusStream, uint64_t(t) * 2 * n, n,
                  &corpus.x[size_t(t) * n], &corpus.y[size_t(t) * n]);
  });
  return corpus;
}

Params LargeResolutionInit(int64_t m, int64_t n) {
  const double b0 = double(std::min(m, n));
  return {b0 + std::log(b0), b0};
}

EmpiricalRisk CorpusRisk(const RowTransform& transform, const Params& params,
                         const Corpus& corpus) {
  struct Term {
    double value, grad_a, grad_b, abs_error;
  };
  std::vector<Term> terms(corpus.m);
  const double tau = transform.Tau(corpus.n);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, corpus.m, 8),
                    [&](const tbb::blocked_range<int64_t>& r) {
    RowWorkspace workspace;
    for (int64_t t = r.begin(); t != r.end(); ++t) {
      const size_t first = size_t(t) * corpus.n;
      const Estimate e = RowEstimate(transform, params, &corpus.x[first], &corpus.y[first],
                                     nullptr, corpus.n, tau, workspace);
      const double error = e.F - corpus.alpha[t];
      terms[t] = {error * error, 2.0 * error * e.dF_da, 2.0 * error * e.dF_db, std::fabs(error)};
    }
  });
  EmpiricalRisk out;
  for (const Term& term : terms) {
    out.risk.value += term.value;
    out.risk.grad_a += term.grad_a;
    out.risk.grad_b += term.grad_b;
    out.mean_abs_error += term.abs_error;
  }
  const double m = double(corpus.m);
  out.risk.value /= m;
  out.risk.grad_a /= m;
  out.risk.grad_b /= m;
  out.mean_abs_error /= m;
  return out;
}

std::vector<PretrainPoint> Pretrain(const RowTransform& transform, const Corpus& corpus,
                                    const Params& init, double step, int64_t steps, int records) {
  std::vector<PretrainPoint> trajectory;
  double mean_abs_error = 0.0;  // of the iterate just evaluated
  Descend(
      init, step, steps, records,
      [&](const Params& params) {
        const EmpiricalRisk risk = CorpusRisk(transform, params, corpus);
        mean_abs_error = risk.mean_abs_error;
        return risk.risk;
      },
      [&](int64_t k, const Params& params, const Risk& risk, bool recorded) {
        if (recorded) trajectory.push_back({k, k * step, params, risk.value, mean_abs_error});
      });
  return trajectory;
}

void ValidateTransfer(const TransferOptions& options) {
  if (options.lengths.empty()) throw std::invalid_argument("onehead: no context length N given");
  for (const int64_t N : options.lengths) {
    if (N < 1) {
      throw std::invalid_argument("onehead: a context length N must be >= 1, got " +
                                  std::to_string(N));
    }
  }
  if (options.alphas.empty()) throw std::invalid_argument("onehead: no threshold alpha given");
  for (const double alpha : options.alphas) {
    if (!(alpha > 0.0 && alpha < 1.0)) {
      throw std::invalid_argument("onehead: a threshold alpha must be in (0, 1), got " +
                                  std::to_string(alpha));
    }
  }
  if (options.contexts < 1) throw std::invalid_argument("onehead: contexts per cell must be >= 1");
}

std::vector<TransferCell> Transfer(const RowTransform& transform, const Params& params,
                                   const TransferOptions& options) {
  ValidateTransfer(options);
  const size_t alphas = options.alphas.size();
  std::vector<TransferCell> cells;
  for (size_t l = 0; l < options.lengths.size(); ++l) {
    const int64_t N = options.lengths[l];
    const double tau = transform.Tau(N);
    for (size_t j = 0; j < alphas; ++j) {
      const double alpha = options.alphas[j];
      const uint64_t stream = kTransferStream + l * alphas + j;
      std::vector<double> error(options.contexts);
      std::vector<uint8_t> empty(options.contexts);
      tbb::parallel_for(tbb::blocked_range<int64_t>(0, options.contexts, 1),
                        [&](const tbb::blocked_range<int64_t>& r) {
        std::vector<double> x(N);
        std::vector<uint8_t> y(N);
        RowWorkspace workspace;
        for (int64_t c = r.begin(); c != r.end(); ++c) {
          SampleContext(options.design, options.noise, alpha, options.seed, stream,
                        uint64_t(c) * 2 * N, N, x.data(), y.data());
          const Estimate e = RowEstimate(transform, params, x.data(), y.data(), nullptr, N, tau,
                                         workspace);
          error[c] = e.F - alpha;
          empty[c] = e.empty;
        }
      });
      TransferCell cell{N, alpha};
      for (int64_t c = 0; c < options.contexts; ++c) {
        cell.mean_abs_error += std::fabs(error[c]);
        cell.rms_error += error[c] * error[c];
        cell.empty_share += empty[c];
      }
      const double count = double(options.contexts);
      cell.mean_abs_error /= count;
      cell.rms_error = std::sqrt(cell.rms_error / count);
      cell.empty_share /= count;
      cells.push_back(cell);
    }
  }
  return cells;
}

std::vector<double> ErrorByLength(const std::vector<TransferCell>& cells, size_t lengths) {
  std::vector<double> out(lengths, 0.0);
  const size_t alphas = lengths ? cells.size() / lengths : 0;
  for (size_t l = 0; l < lengths; ++l) {
    for (size_t j = 0; j < alphas; ++j) out[l] += cells[l * alphas + j].mean_abs_error;
    out[l] /= double(alphas);
  }
  return out;
}

}  // namespace lpattn::onehead
