// The GPT forward and backward passes (docs/harness.md §1), llm.c style: each block is a
// sequence of layer calls over arena offsets, and the backward pass is the same sequence
// reversed.
#include "harness/model/model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "harness/common/counter_rng.h"
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
    b.attproj = act(N * C);
    b.res2 = act(N * C);
    b.ln2 = act(N * C);
    b.ln2_mean = act(N);
    b.ln2_rstd = act(N);
    b.fch = act(N * 4 * C);
    b.fch_gelu = act(N * 4 * C);
    b.fcproj = act(N * C);
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

float Gpt::Forward(const uint8_t* inputs, const uint8_t* targets, size_t batch) {
  if (batch < 1 || batch > max_batch_) throw std::invalid_argument("Gpt::Forward: bad batch");
  const size_t C = size_t(model_.n_embd), T = size_t(model_.context), V = size_t(model_.vocab);
  const size_t N = batch * T;
  batch_ = batch;
  inputs_.assign(inputs, inputs + N);
  const float* P = params_.data();
  float* A = acts_.data();
  const DenseFormat dense = dense_format();
  const ArmShape shape{batch, T, C, size_t(model_.n_head), dense};

  const float* wpe = Rotary() ? nullptr : P + wpe_;
  const size_t H = size_t(model_.n_head);
  EncoderForward(A + encoded_, inputs, P + wte_, wpe, batch, T, C);
  const float* residual = A + encoded_;
  for (const Block& b : blocks_) {
    LayerNormForward(A + b.ln1, A + b.ln1_mean, A + b.ln1_rstd, residual, P + b.ln1w, P + b.ln1b, N, C);
    MatmulForward(A + b.qkv, A + b.ln1, P + b.qkvw, P + b.qkvb, N, C, 3 * C, dense);
    if (Rotary()) RopeForward(A + b.qkv, rope_, batch, T, C, H);  // q, k rotated in place
    const int l = int(&b - blocks_.data());
    if (interference_.Corrupts(l)) {  // docs/harness.md §1.5: before any value gate reads V
      CorruptValues(interference_, l, first_window_, A + b.qkv, batch, T, C, H,
                    LayerCorruption(size_t(l)));
    }
    arm_->Forward(shape, P + b.arm, A + b.qkv, A + b.ln1, A + b.arm_act, A + b.atty);
    MatmulForward(A + b.attproj, A + b.atty, P + b.attprojw, P + b.attprojb, N, C, C, dense);
    ResidualForward(A + b.res2, residual, A + b.attproj, N * C);
    LayerNormForward(A + b.ln2, A + b.ln2_mean, A + b.ln2_rstd, A + b.res2, P + b.ln2w, P + b.ln2b, N, C);
    MatmulForward(A + b.fch, A + b.ln2, P + b.fcw, P + b.fcb, N, C, 4 * C, dense);
    GeluForward(A + b.fch_gelu, A + b.fch, N * 4 * C);
    MatmulForward(A + b.fcproj, A + b.fch_gelu, P + b.fcprojw, P + b.fcprojb, N, 4 * C, C,
                  dense);
    ResidualForward(A + b.res3, A + b.res2, A + b.fcproj, N * C);
    residual = A + b.res3;
  }
  LayerNormForward(A + lnf_, A + lnf_mean_, A + lnf_rstd_, residual, P + lnfw_, P + lnfb_, N, C);
  MatmulForward(A + logits_, A + lnf_, P + wte_, nullptr, N, C, V, dense);  // the tied head
  if (targets == nullptr) {
    targets_.clear();
    return 0.0f;
  }
  targets_.assign(targets, targets + N);
  return CrossEntropyForward(A + probs_, A + losses_, A + logits_, targets, N, V);
}

void Gpt::Backward() {
  if (targets_.empty()) throw std::logic_error("Gpt::Backward needs a Forward with targets");
  const size_t C = size_t(model_.n_embd), T = size_t(model_.context), V = size_t(model_.vocab);
  const size_t N = batch_ * T;
  const DenseFormat dense = dense_format();
  const ArmShape shape{batch_, T, C, size_t(model_.n_head), dense};
  const float* P = params_.data();
  const float* A = acts_.data();
  float* G = grads_.data();
  float* D = dacts_.data();
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  // Activation gradients are not zeroed as a whole: each one's first writer overwrites it
  // (Write::kOverwrite, a copy, or the arm's dqkv), and only the two whose first writer
  // accumulates (the final LayerNorm's dinp, and ln1 where the arm may add) are zeroed. The
  // residual's backward is no function: the gradient of a residual sum reaches its branch by
  // pointer (d fcproj = d res3, d attproj = d res2) and its skip path by a copy, so the
  // fcproj and attproj slots of the gradient arena stay unused.
  const auto zero = [&](size_t offset) { std::fill_n(D + offset, N * C, 0.0f); };
  const auto copy = [&](size_t from, size_t to) { std::copy_n(D + from, N * C, D + to); };

  CrossEntropyBackward(D + logits_, A + probs_, targets_.data(), N, V);
  const Block& last = blocks_.back();
  MatmulBackward(D + lnf_, G + wte_, nullptr, D + logits_, A + lnf_, P + wte_, N, C, V,
                 Write::kOverwrite, dense);
  zero(last.res3);
  LayerNormBackward(D + last.res3, G + lnfw_, G + lnfb_, D + lnf_, A + last.res3, P + lnfw_,
                    A + lnf_mean_, A + lnf_rstd_, N, C);
  for (size_t l = blocks_.size(); l-- > 0;) {
    const Block& b = blocks_[l];
    const size_t residual = l == 0 ? encoded_ : blocks_[l - 1].res3;
    copy(b.res3, b.res2);
    MatmulBackward(D + b.fch_gelu, G + b.fcprojw, G + b.fcprojb, D + b.res3, A + b.fch_gelu,
                   P + b.fcprojw, N, 4 * C, C, Write::kOverwrite, dense);
    GeluBackward(D + b.fch, A + b.fch, D + b.fch_gelu, N * 4 * C, Write::kOverwrite);
    MatmulBackward(D + b.ln2, G + b.fcw, G + b.fcb, D + b.fch, A + b.ln2, P + b.fcw, N, C, 4 * C,
                   Write::kOverwrite, dense);
    LayerNormBackward(D + b.res2, G + b.ln2w, G + b.ln2b, D + b.ln2, A + b.res2, P + b.ln2w,
                      A + b.ln2_mean, A + b.ln2_rstd, N, C);
    copy(b.res2, residual);
    MatmulBackward(D + b.atty, G + b.attprojw, G + b.attprojb, D + b.res2, A + b.atty,
                   P + b.attprojw, N, C, C, Write::kOverwrite, dense);
    zero(b.ln1);  // the arm may add to it (outgate's gate reads ln1) before the qkv product
    arm_->Backward(shape, P + b.arm, G + b.arm, A + b.qkv, A + b.ln1, A + b.arm_act, A + b.atty,
                   D + b.atty, D + b.qkv, D + b.ln1);
    if (interference_.Corrupts(int(l))) {
      CorruptValuesBackward(interference_, int(l), first_window_, LayerCorruption(l), A + b.qkv,
                            D + b.qkv, batch_, T, C, size_t(model_.n_head));
    }
    if (Rotary()) RopeBackward(D + b.qkv, rope_, batch_, T, C, size_t(model_.n_head));
    MatmulBackward(D + b.ln1, G + b.qkvw, G + b.qkvb, D + b.qkv, A + b.ln1, P + b.qkvw, N, C,
                   3 * C, Write::kAccumulate, dense);
    LayerNormBackward(D + residual, G + b.ln1w, G + b.ln1b, D + b.ln1, A + residual, P + b.ln1w,
                      A + b.ln1_mean, A + b.ln1_rstd, N, C);
  }
  EncoderBackward(G + wte_, Rotary() ? nullptr : G + wpe_, D + encoded_, inputs_.data(), batch_, T,
                  C);
}

}  // namespace lpattn::harness
