// The seam through which attention kernels enter the model (docs/harness.md §1): an arm is a
// named choice of kernel plus the per-layer parameters it needs. The model calls an arm's
// Forward and Backward and never looks inside, so adding an arm means adding a class here and
// a line in MakeArm, not editing the model or the training loop.
#ifndef LPATTN_HARNESS_MODEL_ATTENTION_ARM_H_
#define LPATTN_HARNESS_MODEL_ATTENTION_ARM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/model/config.h"
#include "harness/model/dense_product.h"
#include "kernels/precision.h"

namespace lpattn::harness {

// A parameter tensor an arm adds to each layer.
struct ArmParam {
  std::string name;
  size_t size = 0;
  bool decay = false;    // weight decay applies (matrices only)
  float init_std = 0.0f; // N(0, init_std); 0 means constant init_value
  float init_value = 0.0f;
};

// Shapes of one attention call: B sequences of T tokens, C = n_head * head_dim channels.
struct ArmShape {
  size_t B, T, C, n_head;
  DenseFormat dense = DenseFormat::kFp32;  // the operands of the arm's own dense products
  // For Diagnose under interference (docs/harness.md §1.5): [B, T, H], 1 where the value row
  // of (window, position, head) was corrupted; null without interference.
  const uint8_t* corrupted = nullptr;
  size_t head_dim() const { return C / n_head; }
};

// What an attention layer's weights look like on some batches, per head, as sums over its
// query rows (the attention diagnostics of issue 5): visible (row, key) pairs and how many of
// their weights are exactly 0, the share of each row's weight on the first token (|w| shares
// for thresholded weights, which may be negative), and the mass a sink takes.
struct HeadDiagnostics {
  double rows = 0.0;
  double visible = 0.0;
  double zeros = 0.0;
  double first_mass = 0.0;  // summed over rows
  double abstention = 0.0;  // summed over rows (0 without a sink)
  // Dispersion by row length (docs/harness.md §3.8), kept when length_bucket > 0: row i (it
  // sees i + 1 keys) falls in bucket i / length_bucket, which sums its rows, the entropy (nats)
  // of its |w| shares and its largest share.
  size_t length_bucket = 0;
  std::vector<double> bucket_rows, bucket_entropy, bucket_max;
  // Under interference (ArmShape::corrupted): the summed share of each row's |w| on corrupted
  // value positions, and the value gates (gate arms) summed over corrupted and clean positions.
  double corrupted_mass = 0.0;
  double corrupted_visible = 0.0;  // visible (row, key) pairs whose key is corrupted
  double gate_corrupted = 0.0, gate_corrupted_count = 0.0, gate_clean = 0.0, gate_clean_count = 0.0;
};

class AttentionArm {
 public:
  virtual ~AttentionArm() = default;
  // The arm's canonical spec: its kernel's name, then "+<precision>" (FormatPrecision) when
  // its operands are low-precision, with ":dense=<format>" (or "+dense=<format>") last when
  // the spec set the dense products' format.
  std::string Name() const;
  virtual std::string KernelName() const = 0;
  // docs/math.md §4: the operand precision of every kernel call the arm makes (default fp32).
  virtual void SetPrecision(const Precision& precision) { precision_ = precision; }
  const Precision& precision() const { return precision_; }
  // The model's dense products under this arm (docs/harness.md §1.1): the spec's `dense=`
  // item, which overrides the run's --precision, or nullopt to keep the run's.
  void SetDenseFormat(std::optional<DenseFormat> format) { dense_ = format; }
  std::optional<DenseFormat> dense_format() const { return dense_; }
  virtual std::vector<ArmParam> LayerParams(const ModelConfig& model) const = 0;
  // Floats of per-layer activations the arm saves between Forward and Backward.
  virtual size_t ActivationFloats(const ArmShape& s) const = 0;
  // qkv [B, T, 3C] (q, k, v per token), x [B, T, C] the block's normalised input;
  // writes out [B, T, C] (heads concatenated) and its saved activations `act`.
  virtual void Forward(const ArmShape& s, const float* params, const float* qkv, const float* x,
                       float* act, float* out) const = 0;
  // Overwrites dqkv [B, T, 3C]; accumulates into dparams and dx [B, T, C].
  virtual void Backward(const ArmShape& s, const float* params, float* dparams, const float* qkv,
                        const float* x, const float* act, const float* out, const float* dout,
                        float* dqkv, float* dx) const = 0;
  // Adds the weights of the last Forward (same arguments) to per_head [n_head], recomputed in
  // double from qkv (and x); slow and exact, for validation-time diagnostics.
  virtual void Diagnose(const ArmShape& s, const float* params, const float* qkv, const float* x,
                        const float* act, HeadDiagnostics* per_head) const = 0;
  // Whether the arm has a sink (its diagnostics' abstention mass means something).
  virtual bool HasSink() const { return false; }
  // The value gate of every (window, position, head), gates [B * T * H], for arms that gate
  // values (docs/math.md §1.2), recomputed from qkv; false (gates untouched) for the others.
  virtual bool ValueGates(const ArmShape&, const float* /*params*/, const float* /*qkv*/,
                          float* /*gates*/) const {
    return false;
  }

 private:
  Precision precision_;
  std::optional<DenseFormat> dense_;
};

// Parses an arm spec ("exact", "sink", "offbyone", "outgate", "kint:K=4,cal=window,...") into
// an arm; a "+<precision>" suffix (docs/harness.md §1: "exact+qk=int8,pv=fp8e4m3", parsed by
// ParsePrecision) gives any arm low-precision operands. Throws std::invalid_argument naming the
// problem: an unknown arm (listing the known ones) or bad kernel or precision options.
std::unique_ptr<AttentionArm> MakeArm(const std::string& spec);
// The arms without options; "kint:<options>" comes on top.
std::vector<std::string> KnownArms();

// The evaluation swap's precondition (docs/harness.md §3): a model trained with arm `trained`
// can be evaluated with arm `with` when both arms add the same per-layer parameters. Throws
// std::invalid_argument naming both arms otherwise (or naming a bad spec).
void CheckSwappable(const std::string& trained, const std::string& with, const ModelConfig& model);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_MODEL_ATTENTION_ARM_H_
