// What low-precision operands cost exact attention in accuracy (issue 6): for each format and
// granularity, the error of O, dQ, dK and dV of the kernels (their native paths where the
// precision has one) against the fp64
// reference with unquantized operands, on Gaussian inputs and on inputs with a few outlier
// channels, as language-model activations have. The command `lpattn quant-error`.
#ifndef LPATTN_HARNESS_STUDIES_QUANT_ERROR_H_
#define LPATTN_HARNESS_STUDIES_QUANT_ERROR_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lpattn::harness {

struct QuantErrorOptions {
  int64_t tokens = 512;  // causal self-attention over this many tokens
  int64_t heads = 4;
  int64_t head_dim = 64;
  uint64_t seed = 1;
  // Outlier inputs: this many channels of Q (and half as many of V) scaled by outlier_scale,
  // and the same channels of K shifted by outlier_shift: a per-channel mean shared by every
  // token, as language models' keys have, which moves each score row by a constant (softmax
  // ignores it) but sets K's quantization scale. K smoothing removes it before quantizing.
  int64_t outlier_channels = 4;
  float outlier_scale = 8.0f;
  float outlier_shift = 20.0f;
};

// Relative L2 error ||x - ref|| / ||ref|| and cosine similarity of one tensor.
struct TensorError {
  double rel_l2 = 0.0;
  double cosine = 1.0;
};

struct QuantErrorRow {
  std::string inputs;     // "gaussian" or "outliers"
  std::string precision;  // FormatPrecision text ("" is fp32)
  TensorError o, dq, dk, dv;
};

// The precisions measured: fp32; each cast format, with and without K smoothing; each scaled
// format at every granularity, and with K smoothing at token and channel granularity; and P
// quantization (bf16, fp8 e4m3, int8) alone and with int8 operands; both forward products
// native in bf16 and int8; and the low-precision backward (bwd=) alone and with them.
std::vector<std::string> QuantErrorPrecisions();

// Every precision on both kinds of input. Throws std::invalid_argument on bad sizes.
std::vector<QuantErrorRow> MeasureQuantError(const QuantErrorOptions& options);

// A markdown table (one per input kind) and the JSON form of the rows.
std::string FormatQuantErrorTable(const std::vector<QuantErrorRow>& rows);
nlohmann::json QuantErrorJson(const QuantErrorOptions& options,
                              const std::vector<QuantErrorRow>& rows);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_STUDIES_QUANT_ERROR_H_
