// The attention arms of spec/harness.md §1: on exact softmax attention `exact`, `sink` (a
// learnable per-head sink logit, init 0), `offbyone` (the sink fixed at 0) and `outgate`
// (o'_i = o_i * sigmoid(x_i W_g + b_g), per head and channel; Qiu et al. 2025, G1); and
// `kint:<options>`, K-interval attention (spec/kernels.md §2).
#include "harness/attention_arm.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "harness/layers.h"
#include "kernels/attention.h"
#include "kernels/kinterval.h"

namespace lpattn::harness {
namespace {

// Q, K and V live interleaved in qkv [B, T, 3C]: for the kernels they are [B, T, H, D] views
// with token stride 3C, so no transposes are needed.
Strides QkvStrides(const ArmShape& s) {
  return {int64_t(s.T * 3 * s.C), int64_t(s.head_dim()), int64_t(3 * s.C)};
}
Strides OutStrides(const ArmShape& s) {
  return {int64_t(s.T * s.C), int64_t(s.head_dim()), int64_t(s.C)};
}
AttentionShape KernelShape(const ArmShape& s) {
  return {int64_t(s.B), int64_t(s.n_head), int64_t(s.n_head), int64_t(s.T), int64_t(s.T),
          int64_t(s.head_dim())};
}

// Causal exact attention with an optional sink; the sink logits, if learned, are the arm's
// first n_head parameters. Saved activations: lse [B, H, T].
class SoftmaxArm : public AttentionArm {
 public:
  SoftmaxArm(std::string name, SinkMode sink) : name_(std::move(name)), sink_(sink) {}
  std::string Name() const override { return name_; }

  std::vector<ArmParam> LayerParams(const ModelConfig& m) const override {
    if (sink_ != SinkMode::kLearned) return {};
    return {{"sink", size_t(m.n_head), false, 0.0f, 0.0f}};
  }
  size_t ActivationFloats(const ArmShape& s) const override { return s.B * s.n_head * s.T; }

  void Forward(const ArmShape& s, const float* params, const float* qkv, const float*,
               float* act, float* out) const override {
    const Strides in = QkvStrides(s);
    ExactForward(KernelShape(s), Options(params),
                 {{qkv, in}, {qkv + s.C, in}, {qkv + 2 * s.C, in}, {out, OutStrides(s)}, act});
  }

  void Backward(const ArmShape& s, const float* params, float* dparams, const float* qkv,
                const float*, const float* act, const float* out, const float* dout,
                float* dqkv, float*) const override {
    const Strides in = QkvStrides(s), o = OutStrides(s);
    std::vector<float> d_sink(sink_ == SinkMode::kLearned ? s.n_head : 0);
    BackwardArgs args;
    args.q = {qkv, in};
    args.k = {qkv + s.C, in};
    args.v = {qkv + 2 * s.C, in};
    args.o = {out, o};
    args.d_o = {dout, o};
    args.lse = act;
    args.dq = {dqkv, in};
    args.dk = {dqkv + s.C, in};
    args.dv = {dqkv + 2 * s.C, in};
    args.d_sink = d_sink.empty() ? nullptr : d_sink.data();
    ExactBackward(KernelShape(s), Options(params), args);
    for (size_t h = 0; h < d_sink.size(); ++h) dparams[h] += d_sink[h];
  }

 private:
  AttentionOptions Options(const float* params) const {
    AttentionOptions options;
    options.causal = true;
    options.sink = sink_;
    options.sink_logits = sink_ == SinkMode::kLearned ? params : nullptr;
    return options;  // threads = 0: the trainer's arena
  }

  std::string name_;
  SinkMode sink_;
};

// Exact attention whose output is gated by the block's input: g = x W_g^T + b_g [B, T, C],
// out = o * sigmoid(g). Parameters: W_g [C, C], b_g [C]. Saved: lse, o, g.
class OutputGateArm : public AttentionArm {
 public:
  std::string Name() const override { return "outgate"; }
  std::vector<ArmParam> LayerParams(const ModelConfig& m) const override {
    const size_t c = size_t(m.n_embd);
    return {{"gate_w", c * c, true, 0.02f, 0.0f}, {"gate_b", c, false, 0.0f, 0.0f}};
  }
  size_t ActivationFloats(const ArmShape& s) const override {
    return inner_.ActivationFloats(s) + 2 * s.B * s.T * s.C;
  }

  void Forward(const ArmShape& s, const float* params, const float* qkv, const float* x,
               float* act, float* out) const override {
    const size_t n = s.B * s.T * s.C;
    float* attn = act + inner_.ActivationFloats(s);
    float* gate = attn + n;
    inner_.Forward(s, nullptr, qkv, x, act, attn);
    MatmulForward(gate, x, params, params + s.C * s.C, s.B * s.T, s.C, s.C);
    SigmoidGateForward(out, attn, gate, n);
  }

  void Backward(const ArmShape& s, const float* params, float* dparams, const float* qkv,
                const float* x, const float* act, const float*, const float* dout,
                float* dqkv, float* dx) const override {
    const size_t n = s.B * s.T * s.C;
    const float* attn = act + inner_.ActivationFloats(s);
    const float* gate = attn + n;
    std::vector<float> dattn(n, 0.0f), dgate(n, 0.0f);
    SigmoidGateBackward(dattn.data(), dgate.data(), dout, attn, gate, n);
    MatmulBackward(dx, dparams, dparams + s.C * s.C, dgate.data(), x, params, s.B * s.T, s.C,
                   s.C);
    inner_.Backward(s, nullptr, nullptr, qkv, x, act, attn, dattn.data(), dqkv, dx);
  }

 private:
  SoftmaxArm inner_{"exact", SinkMode::kNone};
};

// Causal K-interval attention, forward and backward through lpattn's kernels, with the
// options of the spec after "kint:". No parameters. Saved activations per row [B, H, T]: m, R,
// Z, the exact lse, and the argmax and argmin key indices (int32, stored bytewise in floats).
class KIntervalArm : public AttentionArm {
 public:
  KIntervalArm(std::string name, const KIntervalOptions& options)
      : name_(std::move(name)), options_(options) {}
  std::string Name() const override { return name_; }
  std::vector<ArmParam> LayerParams(const ModelConfig&) const override { return {}; }
  size_t ActivationFloats(const ArmShape& s) const override { return 6 * Rows(s); }

  void Forward(const ArmShape& s, const float*, const float* qkv, const float*, float* act,
               float* out) const override {
    const Strides in = QkvStrides(s);
    std::vector<int32_t> argmax(Rows(s)), argmin(Rows(s));
    KIntervalForward(KernelShape(s), Options(), options_,
                     {{qkv, in}, {qkv + s.C, in}, {qkv + 2 * s.C, in}, {out, OutStrides(s)},
                      Saved(s, act, argmax.data(), argmin.data())});
    std::memcpy(act + 4 * Rows(s), argmax.data(), Rows(s) * sizeof(int32_t));
    std::memcpy(act + 5 * Rows(s), argmin.data(), Rows(s) * sizeof(int32_t));
  }

  void Backward(const ArmShape& s, const float*, float*, const float* qkv, const float*,
                const float* act, const float* out, const float* dout, float* dqkv,
                float*) const override {
    const Strides in = QkvStrides(s), o = OutStrides(s);
    std::vector<int32_t> argmax(Rows(s)), argmin(Rows(s));
    std::memcpy(argmax.data(), act + 4 * Rows(s), Rows(s) * sizeof(int32_t));
    std::memcpy(argmin.data(), act + 5 * Rows(s), Rows(s) * sizeof(int32_t));
    // The kernel only reads the saved statistics in the backward.
    float* saved = const_cast<float*>(act);
    KIntervalBackward(KernelShape(s), Options(), options_,
                      {{qkv, in}, {qkv + s.C, in}, {qkv + 2 * s.C, in}, {out, o}, {dout, o},
                       Saved(s, saved, argmax.data(), argmin.data()), {dqkv, in},
                       {dqkv + s.C, in}, {dqkv + 2 * s.C, in}});
  }

 private:
  static size_t Rows(const ArmShape& s) { return s.B * s.n_head * s.T; }
  static KIntervalSaved Saved(const ArmShape& s, float* act, int32_t* argmax, int32_t* argmin) {
    return {act, act + Rows(s), act + 2 * Rows(s), act + 3 * Rows(s), argmax, argmin};
  }
  static AttentionOptions Options() {
    AttentionOptions options;
    options.causal = true;
    return options;  // threads = 0: the trainer's arena
  }

  std::string name_;
  KIntervalOptions options_;
};

constexpr char kKIntervalPrefix[] = "kint:";

}  // namespace

std::vector<std::string> KnownArms() { return {"exact", "sink", "offbyone", "outgate"}; }

std::unique_ptr<AttentionArm> MakeArm(const std::string& spec) {
  if (spec == "exact") return std::make_unique<SoftmaxArm>("exact", SinkMode::kNone);
  if (spec == "sink") return std::make_unique<SoftmaxArm>("sink", SinkMode::kLearned);
  if (spec == "offbyone") return std::make_unique<SoftmaxArm>("offbyone", SinkMode::kOffByOne);
  if (spec == "outgate") return std::make_unique<OutputGateArm>();
  if (spec.rfind(kKIntervalPrefix, 0) == 0) {
    try {
      return std::make_unique<KIntervalArm>(
          spec, ParseKInterval(spec.substr(sizeof kKIntervalPrefix - 1)));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("attention arm '" + spec + "': " + e.what());
    }
  }
  std::string known;
  for (const std::string& name : KnownArms()) known += name + ", ";
  throw std::invalid_argument("unknown attention arm '" + spec + "' (known: " + known +
                              "kint:<options> such as kint:K=4,cal=window,round=nearest,ste=prob)");
}

void CheckSwappable(const std::string& trained, const std::string& with,
                    const ModelConfig& model) {
  const std::unique_ptr<AttentionArm> from = MakeArm(trained), to = MakeArm(with);
  const std::vector<ArmParam> a = from->LayerParams(model), b = to->LayerParams(model);
  const bool same = std::equal(a.begin(), a.end(), b.begin(), b.end(),
                               [](const ArmParam& x, const ArmParam& y) {
                                 return x.name == y.name && x.size == y.size;
                               });
  if (!same) {
    throw std::invalid_argument("cannot evaluate a '" + from->Name() + "' model with arm '" +
                                to->Name() + "': their per-layer parameters differ");
  }
}

}  // namespace lpattn::harness
