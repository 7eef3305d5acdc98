// K-interval attention's options and its row-level transform (docs/math.md §2), in double,
// written literally from the math: the fp64 reference's rows and any small model's.
#include "kernels/kinterval.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "kernels/transforms/option_text.h"
#include "quant/format.h"

namespace lpattn {
namespace {

[[noreturn]] void Reject(const std::string& what) {
  throw std::invalid_argument("lpattn K-interval options: " + what);
}

// The grid of one row: E_k = exp(u_k), u_k = -R + k h, h = R / K (E_K = 1), each value
// rounded to the grid format (as a float, as the kernels hold it) when it is not fp32.
struct Grid {
  int K;
  double R, h;
  std::vector<double> E;
  Grid(int K_, double R_, quant::Format format)
      : K(K_), R(R_), h(R_ / K_), E(size_t(K_) + 1) {
    for (int k = 0; k <= K; ++k) {
      const double e = std::exp(-R * double(K - k) / K);
      E[size_t(k)] = format == quant::Format::kFp32
                         ? e
                         : double(quant::RoundToFormat(format, float(e), quant::UnitScale(format)));
    }
  }
  bool InWindow(double u) const { return u >= -R; }
  // x = (u + R) / h, held to [0, K] against rounding at the ends.
  double Coordinate(double u) const { return std::clamp((u + R) / h, 0.0, double(K)); }
  // Lerp's place of an in-window u: the interval k = min(floor(x), K - 1), theta = x - k.
  struct Place {
    int k;
    double theta;
  };
  // A NaN x (u or R not finite: inf - inf) stays in theta, with k = 0 so that no E is read
  // out of bounds.
  Place Locate(double u) const {
    const double x = Coordinate(u);
    const int k = std::isnan(x) ? 0 : std::min(int(std::floor(x)), K - 1);
    return {k, x - k};
  }
};

// w^ of one entry with grid coordinate u (inside or below the window). A NaN u (a NaN score,
// or inf - inf where an infinite score is the row's max) stays NaN: below no window.
double Reconstruct(const KIntervalOptions& o, const Grid& grid, double u) {
  if (std::isnan(u)) return u;
  if (!grid.InWindow(u)) return 0.0;
  if (std::isnan(grid.Coordinate(u))) return grid.Coordinate(u);  // -inf + inf on an infinite R
  if (o.rounding == KIntervalRounding::kNearest) {  // ties round up
    return grid.E[size_t(std::min(int(std::floor(grid.Coordinate(u) + 0.5)), grid.K))];
  }
  const auto [k, theta] = grid.Locate(u);
  return (1.0 - theta) * grid.E[size_t(k)] + theta * grid.E[size_t(k) + 1];
}

bool Degenerate(const KIntervalRowStats& st) { return st.R == 0.0; }

}  // namespace

void ValidateKInterval(const KIntervalOptions& o) {
  if (o.K < 1 || o.K > 64) Reject("K must be in [1, 64], got " + std::to_string(o.K));
  if (o.calibration == KIntervalCalibration::kWindow && !(o.window > 0.0 && std::isfinite(o.window))) {
    Reject("the window W must be finite and > 0, got " + std::to_string(o.window));
  }
  if (o.rounding == KIntervalRounding::kNearest && o.surrogate == KIntervalSurrogate::kExact) {
    Reject("nearest rounding is piecewise constant: use ste=weight or ste=prob, not ste=exact");
  }
  if (o.detach_extrema && o.surrogate == KIntervalSurrogate::kProb) {
    Reject("detach applies to the exact and weight surrogates (prob has no calibration terms)");
  }
  if (o.weight_slope_from_grid && o.surrogate != KIntervalSurrogate::kWeight) {
    Reject("slope=grid is an option of ste=weight");
  }
  if (o.prob_jacobian_at_grid && o.surrogate != KIntervalSurrogate::kProb) {
    Reject("jac=grid is an option of ste=prob");
  }
}

KIntervalOptions ParseKInterval(const std::string& text) {
  KIntervalOptions o;
  ForEachOption(text, [&](const std::string& key, const std::string& value) {
    auto bad = [&]() { Reject("bad value '" + value + "' for " + key); };
    auto number = [&]() {
      double x = 0.0;
      if (!ParseOptionNumber(value, x)) bad();
      return x;
    };
    if (key == "K") {
      const double k = number();
      if (k != std::floor(k) || k < -1e9 || k > 1e9) bad();
      o.K = int(k);
    } else if (key == "cal") {
      if (value == "minmax") o.calibration = KIntervalCalibration::kMinMax;
      else if (value == "window") o.calibration = KIntervalCalibration::kWindow;
      else bad();
    } else if (key == "W") {
      o.window = number();
    } else if (key == "round") {
      if (value == "lerp") o.rounding = KIntervalRounding::kLerp;
      else if (value == "nearest") o.rounding = KIntervalRounding::kNearest;
      else bad();
    } else if (key == "ste") {
      if (value == "exact") o.surrogate = KIntervalSurrogate::kExact;
      else if (value == "weight") o.surrogate = KIntervalSurrogate::kWeight;
      else if (value == "prob") o.surrogate = KIntervalSurrogate::kProb;
      else bad();
    } else if (key == "slope") {
      if (value != "exp" && value != "grid") bad();
      o.weight_slope_from_grid = value == "grid";
    } else if (key == "jac") {
      if (value != "pi" && value != "grid") bad();
      o.prob_jacobian_at_grid = value == "grid";
    } else if (key == "detach") {
      if (value != "0" && value != "1") bad();
      o.detach_extrema = value == "1";
    } else if (key == "grid") {
      const auto format = quant::ParseFormat(value);
      if (!format) Reject("unknown format '" + value + "' for grid (known: " + quant::FormatNames() + ")");
      o.grid = *format;
    } else {
      Reject("unknown option '" + key +
             "' (known: K, cal, W, round, ste, slope, jac, detach, grid)");
    }
  }, Reject);
  ValidateKInterval(o);
  return o;
}

std::string FormatKInterval(const KIntervalOptions& o) {
  std::ostringstream out;
  out << "K=" << o.K << ":cal="
      << (o.calibration == KIntervalCalibration::kMinMax ? "minmax" : "window");
  if (o.calibration == KIntervalCalibration::kWindow) {
    out << ":W=" << ShortestText(o.window);
  }
  out << ":round=" << (o.rounding == KIntervalRounding::kLerp ? "lerp" : "nearest") << ":ste=";
  switch (o.surrogate) {
    case KIntervalSurrogate::kExact: out << "exact"; break;
    case KIntervalSurrogate::kWeight: out << "weight" << (o.weight_slope_from_grid ? ":slope=grid" : ""); break;
    case KIntervalSurrogate::kProb: out << "prob" << (o.prob_jacobian_at_grid ? ":jac=grid" : ""); break;
  }
  if (o.detach_extrema) out << ":detach=1";
  if (o.grid != quant::Format::kFp32) out << ":grid=" << quant::FormatName(o.grid);
  return out.str();
}

// §2 forward: m, a (lowest index on ties), R, then w^ on the grid and p = w^ / Z.
KIntervalRowStats KIntervalRowForward(const KIntervalOptions& o, const double* s, size_t n,
                                      double* p) {
  KIntervalRowStats st;
  for (size_t j = 1; j < n; ++j) {
    if (s[j] > s[st.argmax]) st.argmax = j;
    if (s[j] < s[st.argmin]) st.argmin = j;
  }
  st.m = s[st.argmax];
  st.a = s[st.argmin];
  st.R = o.calibration == KIntervalCalibration::kMinMax ? st.m - st.a : o.window;
  if (Degenerate(st)) {
    st.Z = double(n);
    for (size_t j = 0; j < n; ++j) p[j] = 1.0 / st.Z;
    return st;
  }
  const Grid grid(o.K, st.R, o.grid);
  for (size_t j = 0; j < n; ++j) {
    p[j] = Reconstruct(o, grid, s[j] - st.m);
    st.Z += p[j];
  }
  for (size_t j = 0; j < n; ++j) p[j] /= st.Z;
  return st;
}

// §2 backward: d_j = (g_j - g_bar) / Z, then the surrogate's route from d to the scores.
void KIntervalRowBackward(const KIntervalOptions& o, const double* s, size_t n,
                          const KIntervalRowStats& st, const double* g, double* ds,
                          const double* g_bar_given, double* corrections) {
  if (corrections != nullptr) corrections[0] = corrections[1] = 0.0;
  const bool degenerate = Degenerate(st);
  const Grid grid(o.K, degenerate ? 1.0 : st.R, o.grid);  // unused in a degenerate row
  std::vector<double> w_hat(n), d(n);
  double g_bar = 0.0;
  for (size_t j = 0; j < n; ++j) {
    w_hat[j] = degenerate ? 1.0 : Reconstruct(o, grid, s[j] - st.m);
    g_bar += w_hat[j] / st.Z * g[j];
  }
  if (g_bar_given != nullptr) g_bar = *g_bar_given;
  for (size_t j = 0; j < n; ++j) d[j] = (g[j] - g_bar) / st.Z;

  if (o.surrogate == KIntervalSurrogate::kProb) {
    // ds_j = pi_j (g_j - sum_k pi_k g_k), pi = softmax(s) exact (or p^ with jac=grid).
    std::vector<double> pi(n);
    double z = 0.0;
    for (size_t j = 0; j < n; ++j) {
      pi[j] = o.prob_jacobian_at_grid ? w_hat[j] : std::exp(s[j] - st.m);
      z += pi[j];
    }
    double pi_g = 0.0;
    for (size_t j = 0; j < n; ++j) pi_g += (pi[j] /= z) * g[j];
    if (o.prob_jacobian_at_grid) pi_g = g_bar;  // sum p^ g, or the caller's dO . o
    for (size_t j = 0; j < n; ++j) ds[j] = pi[j] * (g[j] - pi_g);
    return;
  }

  double dm = 0.0, da = 0.0;
  for (size_t j = 0; j < n; ++j) {
    const double u = s[j] - st.m;
    double slope = 0.0, dw_dR = 0.0;
    if (degenerate) {
      slope = 1.0;  // exp(u_j) with u_j = 0
    } else if (o.surrogate == KIntervalSurrogate::kWeight) {
      slope = o.weight_slope_from_grid ? w_hat[j] : std::exp(u);
    } else if (grid.InWindow(u)) {  // exact surrogate (lerp): the chord's slope
      const auto [k, theta] = grid.Locate(u);
      const double E0 = grid.E[size_t(k)], E1 = grid.E[size_t(k) + 1];
      slope = (E1 - E0) / grid.h;
      if (o.calibration == KIntervalCalibration::kMinMax) {
        dw_dR = (1.0 - theta) * (-double(o.K - k) / o.K) * E0 +
                theta * (-double(o.K - k - 1) / o.K) * E1 + slope * (-u / st.R);
      }
    }
    ds[j] = d[j] * slope;
    dm -= d[j] * slope;
    if (o.surrogate == KIntervalSurrogate::kExact && !degenerate &&
        o.calibration == KIntervalCalibration::kMinMax) {
      dm += d[j] * dw_dR;
      da -= d[j] * dw_dR;
    }
  }
  if (o.detach_extrema) return;
  if (corrections != nullptr) {
    corrections[0] = dm;
    corrections[1] = da;
    return;
  }
  ds[st.argmax] += dm;
  ds[st.argmin] += da;
}

}  // namespace lpattn
