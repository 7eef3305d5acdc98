// Interference injection into value reads (docs/harness.md §1.5; the value-gating paper's
// experiment): with rate rho, each value row v of a (window, position, head) of the chosen
// layers is corrupted before any value gate reads it, by Gaussian noise of sigma times the row's
// RMS or by the value row at the same position and head of another window of the batch. The
// draws are counter-based in (seed, layer, window, position, head), so matched runs and arms
// corrupt the same positions.
#ifndef LPATTN_HARNESS_MODEL_INTERFERENCE_H_
#define LPATTN_HARNESS_MODEL_INTERFERENCE_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace lpattn::harness {

struct Interference {
  enum class Kind { kNone, kNoise, kSwap };
  Kind kind = Kind::kNone;
  double rho = 0.0;    // probability that a value row is corrupted, in [0, 1]
  double sigma = 1.0;  // noise: standard deviation in units of the row's RMS
  int layer = -1;      // the one layer corrupted (0-based), or -1: every layer
  uint64_t seed = 1;   // of the draws (not the run's seed: arms and runs share corruptions)

  bool active() const { return kind != Kind::kNone && rho > 0.0; }
  bool Corrupts(int l) const { return active() && (layer < 0 || layer == l); }
};

// "none" (or empty), "noise:rho=<r>,sigma=<s>", "swap:rho=<r>", each with optional
// ",layer=<l>" and ",seed=<n>"; items may also be separated by ':'. Throws
// std::invalid_argument naming the problem (rho outside [0, 1], sigma not finite or < 0, an
// unknown kind or item).
Interference ParseInterference(const std::string& text);
// The canonical text: "none", "noise:rho=0.1:sigma=1", "swap:rho=0.25:layer=2:seed=7".
std::string FormatInterference(const Interference& interference);

// Corrupts the values of qkv [B, T, 3C] (H heads of C / H channels) for layer `layer`, whose B
// windows are numbered first_window, first_window + 1, ...: mask[(b T + t) H + h] = 1 where
// corrupted (0 elsewhere) and, for swaps, source[...] = the window (0..B-1) whose original row
// replaced it; noise: v += sigma rms(v) e, e ~ N(0, I), with scale[...] = sigma rms(v) of the
// original row. swap: needs B >= 2 (throws std::invalid_argument otherwise).
struct Corruption {
  uint8_t* mask;
  uint32_t* source;
  float* scale;
};
void CorruptValues(const Interference& interference, int layer, uint64_t first_window,
                   float* qkv, size_t B, size_t T, size_t C, size_t H, const Corruption& out);
// The backward of CorruptValues on dqkv [B, T, 3C], given the corrupted qkv and the same
// (layer, first_window): noise adds to dv its path through rms(v), sigma (g . e) v / (D rms(v));
// a swapped row's gradient goes to its source row, and the row it replaced gets none.
void CorruptValuesBackward(const Interference& interference, int layer, uint64_t first_window,
                           const Corruption& done, const float* qkv, float* dqkv, size_t B,
                           size_t T, size_t C, size_t H);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_MODEL_INTERFERENCE_H_
