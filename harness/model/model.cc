// The GPT forward and backward passes (docs/harness.md §1), llm.c style: each block is a
// sequence of layer calls over arena offsets, and the backward pass is the same sequence
// reversed. The row-wise layers between two attentions run as one task per block of rows, and
// the weight gradients they meet as one set of tasks (docs/harness.md §1.6).
#include "harness/model/model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "harness/common/counter_rng.h"
#include "harness/model/for_blocks.h"
#include "harness/model/gelu.h"
#include "harness/model/layers.h"

namespace lpattn::harness {

Gpt::Gpt(const ModelConfig& model, const std::string& arm, size_t max_batch)
    : model_(model), arm_(MakeArm(arm)) {
  if (model.n_layer < 1 || model.n_head < 1 || model.n_embd % model.n_head != 0 ||
      model.context < 1 || model.vocab != 256 || max_batch < 1 ||
      (model.pos != "learned" && model.pos != "rope") ||
      (model.pos == "rope" && (model.n_embd / model.n_head) % 2 != 0)) {
    throw std::invalid_argument("Gpt: invalid model shape");
  }
  Layout(max_batch);
}

size_t Gpt::ParamCount(const ModelConfig& model, const std::string& arm) {
  if (model.n_layer < 1 || model.n_embd < 1 || model.context < 1 || model.vocab < 1) {
    throw std::invalid_argument("Gpt: invalid model shape");
  }
  // The tensors Layout allocates, summed with overflow checks: a corrupt checkpoint's config
  // may name any sizes.
  const auto sum = [](size_t total, size_t count, size_t size) {
    size_t product = 0;
    if (__builtin_mul_overflow(count, size, &product) ||
        __builtin_add_overflow(total, product, &total)) {
      throw std::invalid_argument("Gpt: the parameter count overflows");
    }
    return total;
  };
  const size_t C = size_t(model.n_embd);
  // qkv, attproj, fc and fcproj weights (12 C^2); two LayerNorms, the biases (13 C).
  size_t per_layer = sum(sum(0, 12 * C, C), 13, C);
  for (const ArmParam& ap : MakeArm(arm)->LayerParams(model)) per_layer = sum(per_layer, 1, ap.size);
  size_t count = sum(0, size_t(model.vocab), C);                               // wte
  if (model.pos != "rope") count = sum(count, size_t(model.context), C);       // wpe
  count = sum(count, size_t(model.n_layer), per_layer);
  return sum(count, 2, C);                                                     // lnf
}

void Gpt::Layout(size_t max_batch) {
  const size_t C = size_t(model_.n_embd), T = size_t(model_.context), V = size_t(model_.vocab);
  const size_t N = max_batch * T;
  max_batch_ = max_batch;
  tensors_.clear();
  size_t params = 0, acts = 0;
  auto param = [&](const std::string& name, size_t size, bool decay) {
    tensors_.push_back({name, params, size, decay});
    params += size;
    return tensors_.back().offset;
  };
  auto act = [&](size_t size) {
    const size_t offset = acts;
    acts += size;
    return offset;
  };
  wte_ = param("wte", V * C, true);
  // Rotary positions have no parameters: the same weights serve any context.
  wpe_ = model_.pos == "rope" ? kNoTensor : param("wpe", T * C, true);
  if (model_.pos == "rope") rope_ = MakeRopeTable(T, C / size_t(model_.n_head));
  encoded_ = act(N * C);
  const ArmShape shape{max_batch, T, C, size_t(model_.n_head)};
  blocks_.assign(size_t(model_.n_layer), Block{});
  for (int l = 0; l < model_.n_layer; ++l) {
    Block& b = blocks_[size_t(l)];
    std::string p = "h";
    p += std::to_string(l);
    p += '.';
    b.ln1w = param(p + "ln1.w", C, false);
    b.ln1b = param(p + "ln1.b", C, false);
    b.qkvw = param(p + "qkv.w", 3 * C * C, true);
    b.qkvb = param(p + "qkv.b", 3 * C, false);
    b.attprojw = param(p + "attproj.w", C * C, true);
    b.attprojb = param(p + "attproj.b", C, false);
    b.ln2w = param(p + "ln2.w", C, false);
    b.ln2b = param(p + "ln2.b", C, false);
    b.fcw = param(p + "fc.w", 4 * C * C, true);
    b.fcb = param(p + "fc.b", 4 * C, false);
    b.fcprojw = param(p + "fcproj.w", 4 * C * C, true);
    b.fcprojb = param(p + "fcproj.b", C, false);
    b.arm = params;
    for (const ArmParam& ap : arm_->LayerParams(model_)) param(p + "arm." + ap.name, ap.size, ap.decay);
    b.ln1 = act(N * C);
    b.ln1_mean = act(N);
    b.ln1_rstd = act(N);
    b.qkv = act(N * 3 * C);
    b.arm_act = act(arm_->ActivationFloats(shape));
    b.atty = act(N * C);
    b.res2 = act(N * C);
    b.ln2 = act(N * C);
    b.ln2_mean = act(N);
    b.ln2_rstd = act(N);
    b.fch = act(N * 4 * C);
    b.fch_gelu = act(N * 4 * C);
    b.res3 = act(N * C);
  }
  lnfw_ = param("lnf.w", C, false);
  lnfb_ = param("lnf.b", C, false);
  lnf_ = act(N * C);
  lnf_mean_ = act(N);
  lnf_rstd_ = act(N);
  logits_ = act(N * V);
  probs_ = act(N * V);
  losses_ = act(N);
  params_.assign(params, 0.0f);
  grads_.assign(params, 0.0f);
  acts_.assign(acts, 0.0f);
  dacts_.assign(acts, 0.0f);
}

void Gpt::InitParams(uint64_t seed) {
  // Box-Muller over the counter-based generator: element i of the arena always draws the
  // same numbers, whatever the thread count. Draws follow arena offsets, so two arms with the
  // same seed share initial weights only up to the first per-layer parameter one of them adds
  // (docs/harness.md §1).
  auto normal = [seed](size_t i) {
    const double u1 = (double(SplitMix64(seed, 2, 2 * i) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = double(SplitMix64(seed, 2, 2 * i + 1) >> 11) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  };
  const float residual_std = 0.02f / std::sqrt(2.0f * float(model_.n_layer));
  const std::vector<ArmParam> arm_params = arm_->LayerParams(model_);
  for (const ParamTensor& t : tensors_) {
    float std = 0.0f, value = 0.0f;
    const auto ends_with = [&t](const std::string& s) {
      return t.name.size() >= s.size() && t.name.compare(t.name.size() - s.size(), s.size(), s) == 0;
    };
    if (ends_with("attproj.w") || ends_with("fcproj.w")) {
      std = residual_std;
    } else if (ends_with("ln1.w") || ends_with("ln2.w") || ends_with("lnf.w")) {
      value = 1.0f;
    } else if (t.name.find(".arm.") != std::string::npos) {
      for (const ArmParam& ap : arm_params) {
        if (ends_with(".arm." + ap.name)) std = ap.init_std, value = ap.init_value;
      }
    } else if (t.decay) {
      std = 0.02f;
    }
    for (size_t i = t.offset; i < t.offset + t.size; ++i) {
      params_[i] = std > 0.0f ? float(std * normal(i)) : value;
    }
  }
}

// One layer's slice of the corruption record, [max_batch * T * H] each (sized on first use).
Corruption Gpt::LayerCorruption(size_t layer) {
  const size_t slots = CorruptionSlots();
  if (corrupted_.size() != blocks_.size() * slots) {
    corrupted_.assign(blocks_.size() * slots, 0);
    corruption_source_.assign(blocks_.size() * slots, 0);
    corruption_scale_.assign(blocks_.size() * slots, 0.0f);
  }
  return {corrupted_.data() + layer * slots, corruption_source_.data() + layer * slots,
          corruption_scale_.data() + layer * slots};
}

void Gpt::SetArm(const std::string& arm) {
  CheckSwappable(arm_->Name(), arm, model_);
  std::unique_ptr<AttentionArm> next = MakeArm(arm);
  arm_ = std::move(next);
  std::vector<float> params = std::move(params_);
  Layout(max_batch_);  // activation sizes may differ; parameters keep their offsets
  params_ = std::move(params);
}

void Gpt::Diagnose(std::vector<std::vector<HeadDiagnostics>>& per_layer,
                   size_t length_bucket) const {
  if (batch_ == 0) throw std::logic_error("Gpt::Diagnose: no forward pass yet");
  const ArmShape shape{batch_, size_t(model_.context), size_t(model_.n_embd), size_t(model_.n_head)};
  per_layer.resize(blocks_.size());
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const Block& b = blocks_[l];
    if (per_layer[l].empty()) {
      per_layer[l].resize(shape.n_head);
      for (HeadDiagnostics& d : per_layer[l]) d.length_bucket = length_bucket;
    }
    ArmShape layer_shape = shape;
    const size_t slots = CorruptionSlots();
    if (interference_.Corrupts(int(l)) && corrupted_.size() == blocks_.size() * slots) {
      layer_shape.corrupted = corrupted_.data() + l * slots;  // the last Forward's
    }
    arm_->Diagnose(layer_shape, params_.data() + b.arm, acts_.data() + b.qkv, acts_.data() + b.ln1,
                   acts_.data() + b.arm_act, per_layer[l].data());
    if (layer_shape.corrupted == nullptr) continue;
    // The value gates on corrupted and on clean positions (gate arms only).
    std::vector<float> gates(shape.B * shape.T * shape.n_head);
    if (!arm_->ValueGates(shape, params_.data() + b.arm, acts_.data() + b.qkv, gates.data())) {
      continue;
    }
    for (size_t slot = 0; slot < gates.size(); ++slot) {
      HeadDiagnostics& d = per_layer[l][slot % shape.n_head];
      if (layer_shape.corrupted[slot]) {
        d.gate_corrupted += gates[slot];
        d.gate_corrupted_count += 1.0;
      } else {
        d.gate_clean += gates[slot];
        d.gate_clean_count += 1.0;
      }
    }
  }
}

void Gpt::PrepareWeights() {
  const size_t C = size_t(model_.n_embd), V = size_t(model_.vocab);
  const DenseFormat dense = dense_format();
  const float* P = params_.data();
  weight_operands_.Clear();
  weights_.resize(blocks_.size());
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const Block& b = blocks_[l];
    weights_[l] = {weight_operands_.Prepare(P + b.qkvw, 3 * C * C, dense),
                   weight_operands_.Prepare(P + b.attprojw, C * C, dense),
                   weight_operands_.Prepare(P + b.fcw, 4 * C * C, dense),
                   weight_operands_.Prepare(P + b.fcprojw, 4 * C * C, dense)};
  }
  head_weight_ = weight_operands_.Prepare(P + wte_, V * C, dense);
}

void Gpt::QkvRows(size_t l, const float* residual, size_t r0, size_t r1) {
  const size_t C = size_t(model_.n_embd);
  const float* P = params_.data();
  float* A = acts_.data();
  const Block& b = blocks_[l];
  LayerNormForwardBlock(A + b.ln1, A + b.ln1_mean, A + b.ln1_rstd, residual, P + b.ln1w,
                        P + b.ln1b, r0, r1, C);
  MatmulForwardBlock(A + b.qkv, A + b.ln1, weights_[l].qkv, P + b.qkvb, r0, r1, C, 3 * C,
                     dense_format());
}

void Gpt::MlpRows(size_t l, size_t r0, size_t r1) {
  const size_t C = size_t(model_.n_embd);
  const DenseFormat dense = dense_format();
  const float* P = params_.data();
  float* A = acts_.data();
  const Block& b = blocks_[l];
  const BlockWeights& w = weights_[l];
  const float* residual = A + (l == 0 ? encoded_ : blocks_[l - 1].res3);
  MatmulResidualBlock(A + b.res2, residual, A + b.atty, w.attproj, P + b.attprojb, r0, r1, C, C,
                      dense);
  LayerNormForwardBlock(A + b.ln2, A + b.ln2_mean, A + b.ln2_rstd, A + b.res2, P + b.ln2w,
                        P + b.ln2b, r0, r1, C);
  MatmulForwardBlock(A + b.fch, A + b.ln2, w.fc, P + b.fcb, r0, r1, C, 4 * C, dense);
  GeluForwardSimd(A + b.fch_gelu + r0 * 4 * C, A + b.fch + r0 * 4 * C, (r1 - r0) * 4 * C);
  MatmulResidualBlock(A + b.res3, A + b.res2, A + b.fch_gelu, w.fcproj, P + b.fcprojb, r0, r1,
                      4 * C, C, dense);
}

void Gpt::HeadRows(const float* residual, const uint8_t* targets, size_t r0, size_t r1) {
  const size_t C = size_t(model_.n_embd), V = size_t(model_.vocab);
  const float* P = params_.data();
  float* A = acts_.data();
  LayerNormForwardBlock(A + lnf_, A + lnf_mean_, A + lnf_rstd_, residual, P + lnfw_, P + lnfb_,
                        r0, r1, C);
  MatmulForwardBlock(A + logits_, A + lnf_, head_weight_, nullptr, r0, r1, C, V,
                     dense_format());  // the tied head
  if (targets != nullptr) {
    CrossEntropyForwardBlock(A + probs_, A + losses_, A + logits_, targets, r0, r1, V);
  }
}

float Gpt::Forward(const uint8_t* inputs, const uint8_t* targets, size_t batch) {
  if (batch < 1 || batch > max_batch_) throw std::invalid_argument("Gpt::Forward: bad batch");
  const size_t C = size_t(model_.n_embd), T = size_t(model_.context);
  const size_t N = batch * T, rows = ProductRowBlock(N);
  batch_ = batch;
  inputs_.assign(inputs, inputs + N);
  if (targets != nullptr) {
    targets_.assign(targets, targets + N);
  } else {
    targets_.clear();
  }
  const float* P = params_.data();
  float* A = acts_.data();
  const ArmShape shape{batch, T, C, size_t(model_.n_head), dense_format()};
  const size_t H = size_t(model_.n_head), L = blocks_.size();
  PrepareWeights();

  // docs/harness.md §1.6: a parallel pass of row blocks from each attention to the next.
  EncoderForward(A + encoded_, inputs, P + wte_, Rotary() ? nullptr : P + wpe_, batch, T, C);
  ForBlocks(N, rows, [&](size_t r0, size_t r1) { QkvRows(0, A + encoded_, r0, r1); });
  for (size_t l = 0; l < L; ++l) {
    const Block& b = blocks_[l];
    if (Rotary()) RopeForward(A + b.qkv, rope_, batch, T, C, H);  // q, k rotated in place
    if (interference_.Corrupts(int(l))) {  // docs/harness.md §1.5: before any value gate reads V
      CorruptValues(interference_, int(l), first_window_, A + b.qkv, batch, T, C, H,
                    LayerCorruption(l));
    }
    arm_->Forward(shape, P + b.arm, A + b.qkv, A + b.ln1, A + b.arm_act, A + b.atty);
    ForBlocks(N, rows, [&](size_t r0, size_t r1) {
      MlpRows(l, r0, r1);
      if (l + 1 < L) {
        QkvRows(l + 1, A + b.res3, r0, r1);
      } else {
        HeadRows(A + b.res3, targets, r0, r1);
      }
    });
  }
  return targets == nullptr ? 0.0f : MeanLoss(A + losses_, N);
}

void Gpt::MlpBackwardRows(size_t l, size_t r0, size_t r1) {
  // Activation gradients are not zeroed as a whole: each one's first writer overwrites it
  // (Write::kOverwrite, a copy, or the arm's dqkv), and only ln1, to which the arm may add
  // (outgate's gate reads ln1) before the qkv product, is zeroed. The residual's backward is
  // no function: the gradient of a residual sum reaches its branch by pointer (the projection's
  // output gradient is d res3, or d res2) and its skip path by a copy; the forward adds each
  // projection into its residual sum directly, so neither projection has an activation.
  const size_t C = size_t(model_.n_embd);
  const DenseFormat dense = dense_format();
  const float* P = params_.data();
  const float* A = acts_.data();
  float* D = dacts_.data();
  const Block& b = blocks_[l];
  const BlockWeights& w = weights_[l];
  std::copy(D + b.res3 + r0 * C, D + b.res3 + r1 * C, D + b.res2 + r0 * C);
  MatmulInputGradBlock(D + b.fch_gelu, D + b.res3, w.fcproj, r0, r1, 4 * C, C, Write::kOverwrite,
                       dense);
  GeluBackwardSimd(D + b.fch + r0 * 4 * C, A + b.fch + r0 * 4 * C, D + b.fch_gelu + r0 * 4 * C,
                   (r1 - r0) * 4 * C, false);
  MatmulInputGradBlock(D + b.ln2, D + b.fch, w.fc, r0, r1, C, 4 * C, Write::kOverwrite, dense);
  LayerNormInputGradBlock(D + b.res2, D + b.ln2, A + b.res2, P + b.ln2w, A + b.ln2_mean,
                          A + b.ln2_rstd, r0, r1, C);
  MatmulInputGradBlock(D + b.atty, D + b.res2, w.attproj, r0, r1, C, C, Write::kOverwrite, dense);
  std::fill(D + b.ln1 + r0 * C, D + b.ln1 + r1 * C, 0.0f);
}

void Gpt::AddMlpGrads(size_t l) {
  const size_t C = size_t(model_.n_embd), N = batch_ * size_t(model_.context);
  const DenseFormat dense = dense_format();
  const float* A = acts_.data();
  const float* D = dacts_.data();
  float* G = grads_.data();
  const Block& b = blocks_[l];
  grad_tasks_.AddMatmul(G + b.fcprojw, G + b.fcprojb, D + b.res3, A + b.fch_gelu, N, 4 * C, C,
                        dense);
  grad_tasks_.AddMatmul(G + b.fcw, G + b.fcb, D + b.fch, A + b.ln2, N, C, 4 * C, dense);
  grad_tasks_.AddLayerNorm(G + b.ln2w, G + b.ln2b, D + b.ln2, A + b.res2, A + b.ln2_mean,
                           A + b.ln2_rstd, N, C);
  grad_tasks_.AddMatmul(G + b.attprojw, G + b.attprojb, D + b.res2, A + b.atty, N, C, C, dense);
}

void Gpt::QkvBackwardRows(size_t l, size_t r0, size_t r1) {
  const size_t C = size_t(model_.n_embd);
  const float* P = params_.data();
  const float* A = acts_.data();
  float* D = dacts_.data();
  const Block& b = blocks_[l];
  const size_t residual = l == 0 ? encoded_ : blocks_[l - 1].res3;
  MatmulInputGradBlock(D + b.ln1, D + b.qkv, weights_[l].qkv, r0, r1, C, 3 * C,
                       Write::kAccumulate, dense_format());
  std::copy(D + b.res2 + r0 * C, D + b.res2 + r1 * C, D + residual + r0 * C);
  LayerNormInputGradBlock(D + residual, D + b.ln1, A + residual, P + b.ln1w, A + b.ln1_mean,
                          A + b.ln1_rstd, r0, r1, C);
}

void Gpt::AddQkvGrads(size_t l) {
  const size_t C = size_t(model_.n_embd), N = batch_ * size_t(model_.context);
  const float* A = acts_.data();
  const float* D = dacts_.data();
  float* G = grads_.data();
  const Block& b = blocks_[l];
  const size_t residual = l == 0 ? encoded_ : blocks_[l - 1].res3;
  grad_tasks_.AddMatmul(G + b.qkvw, G + b.qkvb, D + b.qkv, A + b.ln1, N, C, 3 * C,
                        dense_format());
  grad_tasks_.AddLayerNorm(G + b.ln1w, G + b.ln1b, D + b.ln1, A + residual, A + b.ln1_mean,
                           A + b.ln1_rstd, N, C);
}

void Gpt::HeadBackwardRows(size_t r0, size_t r1) {
  const size_t C = size_t(model_.n_embd), V = size_t(model_.vocab);
  const size_t N = batch_ * size_t(model_.context);
  const float* P = params_.data();
  const float* A = acts_.data();
  float* D = dacts_.data();
  const Block& last = blocks_.back();
  CrossEntropyBackwardBlock(D + logits_, A + probs_, targets_.data(), N, r0, r1, V);
  MatmulInputGradBlock(D + lnf_, D + logits_, head_weight_, r0, r1, C, V, Write::kOverwrite,
                       dense_format());
  std::fill(D + last.res3 + r0 * C, D + last.res3 + r1 * C, 0.0f);
  LayerNormInputGradBlock(D + last.res3, D + lnf_, A + last.res3, P + lnfw_, A + lnf_mean_,
                          A + lnf_rstd_, r0, r1, C);
}

void Gpt::Backward() {
  if (targets_.empty()) throw std::logic_error("Gpt::Backward needs a Forward with targets");
  const size_t C = size_t(model_.n_embd), T = size_t(model_.context);
  const size_t N = batch_ * T, rows = ProductRowBlock(N), L = blocks_.size();
  const ArmShape shape{batch_, T, C, size_t(model_.n_head), dense_format()};
  const float* P = params_.data();
  const float* A = acts_.data();
  float* G = grads_.data();
  float* D = dacts_.data();
  ForBlocks(grads_.size(), size_t(1) << 16,
            [&](size_t i0, size_t i1) { std::fill(G + i0, G + i1, 0.0f); });
  PrepareWeights();  // the parameters are those of the Forward; the store is the same

  // docs/harness.md §1.6: a pass of row blocks from each attention's gradient back to the
  // previous one, then the weight gradients of the layers it crossed as one set of tasks.
  ForBlocks(N, rows, [&](size_t r0, size_t r1) {
    HeadBackwardRows(r0, r1);
    MlpBackwardRows(L - 1, r0, r1);
  });
  grad_tasks_.AddMatmul(G + wte_, nullptr, D + logits_, A + lnf_, N, C, size_t(model_.vocab),
                        dense_format());
  grad_tasks_.AddLayerNorm(G + lnfw_, G + lnfb_, D + lnf_, A + blocks_.back().res3,
                           A + lnf_mean_, A + lnf_rstd_, N, C);
  AddMlpGrads(L - 1);
  grad_tasks_.Run();
  for (size_t l = L; l-- > 0;) {
    const Block& b = blocks_[l];
    arm_->Backward(shape, P + b.arm, G + b.arm, A + b.qkv, A + b.ln1, A + b.arm_act, A + b.atty,
                   D + b.atty, D + b.qkv, D + b.ln1);
    if (interference_.Corrupts(int(l))) {
      CorruptValuesBackward(interference_, int(l), first_window_, LayerCorruption(l), A + b.qkv,
                            D + b.qkv, batch_, T, C, size_t(model_.n_head));
    }
    if (Rotary()) RopeBackward(D + b.qkv, rope_, batch_, T, C, size_t(model_.n_head));
    ForBlocks(N, rows, [&](size_t r0, size_t r1) {
      QkvBackwardRows(l, r0, r1);
      if (l > 0) MlpBackwardRows(l - 1, r0, r1);
    });
    AddQkvGrads(l);
    if (l > 0) AddMlpGrads(l - 1);
    grad_tasks_.Run();
  }
  EncoderBackward(G + wte_, Rotary() ? nullptr : G + wpe_, D + encoded_, inputs_.data(), batch_, T,
                  C);
}

}  // namespace lpattn::harness
