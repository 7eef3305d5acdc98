// The GPT of docs/harness.md §1: byte tokens, learned or rotary positions, pre-LayerNorm blocks
// (x += Attn(LN(x)); x += MLP(LN(x))), a 4x tanh-GELU MLP, a final LayerNorm, a head tied to
// the token embedding, cross-entropy. Parameters, gradients and activations each live in one
// arena; the attention of every block goes through an AttentionArm.
#ifndef LPATTN_HARNESS_MODEL_MODEL_H_
#define LPATTN_HARNESS_MODEL_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/model/attention_arm.h"
#include "harness/model/config.h"
#include "harness/model/dense_operand.h"
#include "harness/model/grad_tasks.h"
#include "harness/model/interference.h"
#include "harness/model/layers.h"

namespace lpattn::harness {

// One named tensor of the parameter arena.
struct ParamTensor {
  std::string name;
  size_t offset = 0, size = 0;
  bool decay = false;  // AdamW weight decay (matrices only)
};

class Gpt {
 public:
  // Sized for batches of up to max_batch windows of model.context tokens.
  Gpt(const ModelConfig& model, const std::string& arm, size_t max_batch);

  // The number of parameters such a model has (params().size()), without allocating it, so a
  // checkpoint's arrays can be checked against its config before any model is built. Throws
  // std::invalid_argument when the count overflows size_t.
  static size_t ParamCount(const ModelConfig& model, const std::string& arm);

  // N(0, 0.02) matrices, residual projections scaled by 1/sqrt(2 n_layer), LayerNorm gains 1,
  // biases 0, arm parameters as the arm says; deterministic in the seed.
  void InitParams(uint64_t seed);

  // Forward over `batch` windows of T tokens; with targets, returns the mean cross-entropy.
  float Forward(const uint8_t* inputs, const uint8_t* targets, size_t batch);
  // Gradients of the last Forward's mean loss, written (not accumulated) into grads().
  void Backward();
  // Adds the attention weights of the last Forward, per layer and head, to per_layer
  // ([n_layer][n_head]; see AttentionArm::Diagnose). Heads added by the call get
  // `length_bucket` (0: no dispersion by row length).
  void Diagnose(std::vector<std::vector<HeadDiagnostics>>& per_layer,
                size_t length_bucket = 0) const;

  std::vector<float>& params() { return params_; }
  const std::vector<float>& params() const { return params_; }
  const std::vector<float>& grads() const { return grads_; }
  // The last Forward's logits, [batch][context][vocab], and (with targets) its per-token
  // losses, [batch][context].
  const float* logits() const { return acts_.data() + logits_; }
  const float* losses() const { return acts_.data() + losses_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  const ModelConfig& config() const { return model_; }
  const AttentionArm& arm() const { return *arm_; }
  // Replaces the arm (the evaluation swap); the new arm must need the same parameters.
  void SetArm(const std::string& arm);
  // The operands of every dense product (projections, the head, and an arm's own products):
  // fp32 (the default) or bf16 with fp32 accumulation (docs/harness.md §1.1).
  void SetDenseFormat(DenseFormat format) { dense_ = format; }
  // The format in force: the arm's dense= item if it has one, else the one set here.
  DenseFormat dense_format() const { return arm_->dense_format().value_or(dense_); }
  // Interference injection into the value reads of every later Forward (docs/harness.md
  // §1.5), and the number of the first window of the next Forward's batch (its draws name
  // windows, so the same window is corrupted alike in every arm and run).
  void SetInterference(const Interference& interference) { interference_ = interference; }
  const Interference& interference() const { return interference_; }
  void SetFirstWindow(uint64_t window) { first_window_ = window; }

 private:
  // Offsets of one block's parameters (in params_ and grads_) and activations (in acts_, and
  // their gradients at the same offsets in dacts_).
  struct Block {
    size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
    size_t arm;  // the arm's parameters, in LayerParams order
    size_t ln1, ln1_mean, ln1_rstd, qkv, arm_act, atty, res2, ln2, ln2_mean, ln2_rstd, fch,
        fch_gelu, res3;
  };
  void Layout(size_t max_batch);

  // The fused passes (docs/harness.md §1.6): each stretch of row-wise layers runs as one task
  // per block of rows, and the weight gradients of a stretch as one set of tasks.
  // The dense products' weights as dense_format() reads them, prepared once per pass.
  struct BlockWeights {
    DenseOperand qkv, attproj, fc, fcproj;
  };
  void PrepareWeights();
  // Rows [r0, r1) of LN1 and the qkv product of block l, from its residual input.
  void QkvRows(size_t l, const float* residual, size_t r0, size_t r1);
  // Rows [r0, r1) of block l after its attention: attproj and the residual sum, LN2, fc, GELU,
  // fcproj and the second residual sum.
  void MlpRows(size_t l, size_t r0, size_t r1);
  // Rows [r0, r1) of the final LayerNorm, the head and (targets not null) the loss.
  void HeadRows(const float* residual, const uint8_t* targets, size_t r0, size_t r1);
  // The input gradients of MlpRows from d res3 down to d atty (and ln1's rows zeroed for the
  // arm, which may add to them), rows [r0, r1); AddMlpGrads queues its weight gradients.
  void MlpBackwardRows(size_t l, size_t r0, size_t r1);
  void AddMlpGrads(size_t l);
  // The input gradients of QkvRows from d qkv (after the arm) down to d residual, rows [r0, r1);
  // AddQkvGrads queues its weight gradients.
  void QkvBackwardRows(size_t l, size_t r0, size_t r1);
  void AddQkvGrads(size_t l);
  // The loss's, head's and final LayerNorm's input gradients, rows [r0, r1).
  void HeadBackwardRows(size_t r0, size_t r1);

  ModelConfig model_;
  DenseFormat dense_ = DenseFormat::kFp32;
  std::unique_ptr<AttentionArm> arm_;
  std::vector<ParamTensor> tensors_;
  std::vector<float> params_, grads_;
  std::vector<float> acts_, dacts_;
  std::vector<Block> blocks_;
  size_t max_batch_ = 0, batch_ = 0;
  std::vector<uint8_t> inputs_, targets_;
  // Offsets of the non-block parameters and activations; wpe_ is kNoTensor with rotary
  // positions, whose angles are rope_'s.
  static constexpr size_t kNoTensor = ~size_t(0);
  size_t wte_, wpe_, lnfw_, lnfb_;
  RopeTable rope_;
  Interference interference_;
  uint64_t first_window_ = 0;
  // The last Forward's corruptions: [n_layer][max_batch * T * H] masks and swap sources.
  std::vector<uint8_t> corrupted_;
  std::vector<uint32_t> corruption_source_;
  std::vector<float> corruption_scale_;
  Corruption LayerCorruption(size_t layer);
  size_t CorruptionSlots() const {  // one layer's (window, position, head) slots
    return max_batch_ * size_t(model_.context) * size_t(model_.n_head);
  }
  bool Rotary() const { return wpe_ == kNoTensor; }
  size_t encoded_, lnf_, lnf_mean_, lnf_rstd_, logits_, probs_, losses_;
  OperandStore weight_operands_;
  std::vector<BlockWeights> weights_;
  DenseOperand head_weight_;
  GradTasks grad_tasks_;
};

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_MODEL_MODEL_H_
