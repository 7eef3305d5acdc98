// Interference injection into value reads (docs/harness.md §1.5).
#include "harness/model/interference.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "harness/common/counter_rng.h"
#include "harness/common/number_text.h"

namespace lpattn::harness {
namespace {

// Streams of SplitMix64 (docs/design.md §5 keeps them apart from the data's 0 and the
// initialisation's 2): which rows, their noise, their swap partner.
constexpr uint64_t kPickStream = 0x1f000, kNoiseStream = 0x2f000, kPartnerStream = 0x3f000;

double Uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return double(SplitMix64(seed, stream, index) >> 11) * 0x1.0p-53;
}

double Normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const double u1 = Uniform(seed, stream, 2 * index) + 0x1.0p-53;
  const double u2 = Uniform(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

[[noreturn]] void Fail(const std::string& text, const std::string& why) {
  throw std::invalid_argument("interference '" + text + "': " + why);
}

double Number(const std::string& text, const std::string& key, const std::string& value) {
  double x = 0.0;
  if (!ReadWholeDouble(value, x)) Fail(text, key + " must be a finite number, got '" + value + "'");
  return x;
}

}  // namespace

Interference ParseInterference(const std::string& text) {
  Interference out;
  if (text.empty() || text == "none") return out;
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  if (kind == "noise") {
    out.kind = Interference::Kind::kNoise;
  } else if (kind == "swap") {
    out.kind = Interference::Kind::kSwap;
  } else {
    Fail(text, "unknown kind '" + kind + "' (known: none, noise:rho=<r>,sigma=<s>, swap:rho=<r>)");
  }
  bool has_rho = false;
  std::string rest = colon == std::string::npos ? "" : text.substr(colon + 1);
  while (!rest.empty()) {
    const size_t sep = rest.find_first_of(",:");
    const std::string item = rest.substr(0, sep);
    rest = sep == std::string::npos ? "" : rest.substr(sep + 1);
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (key == "rho") {
      out.rho = Number(text, key, value);
      if (out.rho < 0.0 || out.rho > 1.0) Fail(text, "rho must be in [0, 1]");
      has_rho = true;
    } else if (key == "sigma" && out.kind == Interference::Kind::kNoise) {
      out.sigma = Number(text, key, value);
      if (out.sigma < 0.0) Fail(text, "sigma must be >= 0");
    } else if (key == "layer") {
      const double layer = Number(text, key, value);
      if (layer < 0 || layer != std::floor(layer) || layer > 1e6) {
        Fail(text, "layer must be a whole number >= 0");
      }
      out.layer = int(layer);
    } else if (key == "seed") {
      if (!ReadWholeUnsigned(value, out.seed)) Fail(text, "seed must be a whole number below 2^64");
    } else {
      Fail(text, "unknown item '" + item + "' (" + kind + " takes rho=" +
                     (out.kind == Interference::Kind::kNoise ? ", sigma=" : "") +
                     ", layer= and seed=)");
    }
  }
  if (!has_rho) Fail(text, "rho=<r> is required");
  return out;
}

std::string FormatInterference(const Interference& i) {
  if (i.kind == Interference::Kind::kNone) return "none";
  // The shortest text that reads back to the same double (%g kept 6 digits, so rho = 0.1234567
  // came back as 0.123457 and the canonical spec named another interference).
  const auto shortest = [](double x) {
    char text[32];
    return std::string(text, size_t(std::to_chars(text, text + sizeof text, x).ptr - text));
  };
  const bool noise = i.kind == Interference::Kind::kNoise;
  std::string out = std::string(noise ? "noise" : "swap") + ":rho=" + shortest(i.rho);
  if (noise) out += ":sigma=" + shortest(i.sigma);
  if (i.layer >= 0) out += ":layer=" + std::to_string(i.layer);
  if (i.seed != 1) out += ":seed=" + std::to_string(i.seed);
  return out;
}

void CorruptValues(const Interference& in, int layer, uint64_t first_window, float* qkv,
                   size_t B, size_t T, size_t C, size_t H, const Corruption& out) {
  uint8_t* mask = out.mask;
  uint32_t* source = out.source;
  const bool swap = in.kind == Interference::Kind::kSwap;
  if (swap && B < 2) {
    throw std::invalid_argument("interference swap needs at least 2 windows per batch");
  }
  const size_t D = C / H;
  const uint64_t stream = uint64_t(layer) << 32;
  // Swaps read the original rows: keep them before any is replaced.
  std::vector<float> original;
  if (swap) {
    original.resize(B * T * C);
    for (size_t r = 0; r < B * T; ++r) {
      std::copy_n(qkv + r * 3 * C + 2 * C, C, original.begin() + long(r * C));
    }
  }
  for (size_t b = 0; b < B; ++b) {
    for (size_t t = 0; t < T; ++t) {
      for (size_t h = 0; h < H; ++h) {
        const size_t slot = (b * T + t) * H + h;
        // The draw's index names the window, position and head, not the batch slot.
        const uint64_t index = ((first_window + b) * uint64_t(T) + t) * uint64_t(H) + h;
        mask[slot] = Uniform(in.seed, kPickStream + stream, index) < in.rho ? 1 : 0;
        source[slot] = uint32_t(b);
        out.scale[slot] = 0.0f;
        if (!mask[slot]) continue;
        float* v = qkv + (b * T + t) * 3 * C + 2 * C + h * D;
        if (swap) {
          const uint64_t step = 1 + SplitMix64(in.seed, kPartnerStream + stream, index) % (B - 1);
          const size_t from = (b + step) % B;
          source[slot] = uint32_t(from);
          std::copy_n(original.begin() + long((from * T + t) * C + h * D), D, v);
          continue;
        }
        double squares = 0.0;
        for (size_t c = 0; c < D; ++c) squares += double(v[c]) * v[c];
        const double scale = in.sigma * std::sqrt(squares / double(D));
        out.scale[slot] = float(scale);
        for (size_t c = 0; c < D; ++c) {
          v[c] += float(scale * Normal(in.seed, kNoiseStream + stream, index * D + c));
        }
      }
    }
  }
}

namespace {

// noise: out = v + sigma r(v) e with r = sqrt(sum v^2 / D), so dL/dv = g + sigma (g . e) v / (D r);
// v is the corrupted row minus scale e, e drawn again.
void NoiseBackward(const Interference& in, int layer, uint64_t first_window, const Corruption& done,
                   const float* qkv, float* dqkv, size_t B, size_t T, size_t C, size_t H) {
  const size_t D = C / H;
  const uint64_t stream = uint64_t(layer) << 32;
  std::vector<double> e(D);
  for (size_t b = 0; b < B; ++b) {
    for (size_t t = 0; t < T; ++t) {
      for (size_t h = 0; h < H; ++h) {
        const size_t slot = (b * T + t) * H + h;
        const double scale = done.scale[slot];
        if (!done.mask[slot] || scale == 0.0) continue;  // r = 0: v = 0, no path through r
        const uint64_t index = ((first_window + b) * uint64_t(T) + t) * uint64_t(H) + h;
        const float* v = qkv + (b * T + t) * 3 * C + 2 * C + h * D;
        float* g = dqkv + (b * T + t) * 3 * C + 2 * C + h * D;
        double g_dot_e = 0.0;
        for (size_t c = 0; c < D; ++c) {
          e[c] = Normal(in.seed, kNoiseStream + stream, index * D + c);
          g_dot_e += double(g[c]) * e[c];
        }
        const double r = scale / in.sigma;
        for (size_t c = 0; c < D; ++c) {
          const double original = double(v[c]) - scale * e[c];
          g[c] += float(in.sigma * g_dot_e * original / (double(D) * r));
        }
      }
    }
  }
}

}  // namespace

void CorruptValuesBackward(const Interference& in, int layer, uint64_t first_window,
                           const Corruption& done, const float* qkv, float* dqkv, size_t B,
                           size_t T, size_t C, size_t H) {
  if (in.kind == Interference::Kind::kNoise) {
    NoiseBackward(in, layer, first_window, done, qkv, dqkv, B, T, C, H);
    return;
  }
  const uint8_t* mask = done.mask;
  const uint32_t* source = done.source;
  const size_t D = C / H;
  std::vector<float> arriving(B * T * C);
  for (size_t r = 0; r < B * T; ++r) {
    std::copy_n(dqkv + r * 3 * C + 2 * C, C, arriving.begin() + long(r * C));
  }
  for (size_t b = 0; b < B; ++b) {
    for (size_t t = 0; t < T; ++t) {
      for (size_t h = 0; h < H; ++h) {
        if (mask[(b * T + t) * H + h]) std::fill_n(dqkv + (b * T + t) * 3 * C + 2 * C + h * D, D, 0.0f);
      }
    }
  }
  for (size_t b = 0; b < B; ++b) {
    for (size_t t = 0; t < T; ++t) {
      for (size_t h = 0; h < H; ++h) {
        const size_t slot = (b * T + t) * H + h;
        if (!mask[slot]) continue;
        float* to = dqkv + (size_t(source[slot]) * T + t) * 3 * C + 2 * C + h * D;
        const float* from = arriving.data() + (b * T + t) * C + h * D;
        for (size_t c = 0; c < D; ++c) to[c] += from[c];
      }
    }
  }
}

}  // namespace lpattn::harness
