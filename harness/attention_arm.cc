// The attention arms of spec/harness.md §1 that run on exact softmax attention: `exact`,
// `sink` (a learnable per-head sink logit, init 0), `offbyone` (the sink fixed at 0) and
// `outgate` (o'_i = o_i * sigmoid(x_i W_g + b_g), per head and channel; Qiu et al. 2025, G1).
#include "harness/attention_arm.h"

#include <algorithm>
#include <stdexcept>

#include "harness/layers.h"
#include "kernels/attention.h"

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

}  // namespace

std::vector<std::string> KnownArms() { return {"exact", "sink", "offbyone", "outgate"}; }

std::unique_ptr<AttentionArm> MakeArm(const std::string& spec) {
  if (spec == "exact") return std::make_unique<SoftmaxArm>("exact", SinkMode::kNone);
  if (spec == "sink") return std::make_unique<SoftmaxArm>("sink", SinkMode::kLearned);
  if (spec == "offbyone") return std::make_unique<SoftmaxArm>("offbyone", SinkMode::kOffByOne);
  if (spec == "outgate") return std::make_unique<OutputGateArm>();
  std::string known;
  for (const std::string& name : KnownArms()) known += (known.empty() ? "" : ", ") + name;
  throw std::invalid_argument("unknown attention arm '" + spec + "' (known: " + known + ")");
}

bool IsKnownArm(const std::string& spec) {
  const std::vector<std::string> known = KnownArms();
  return std::find(known.begin(), known.end(), spec) != known.end();
}

}  // namespace lpattn::harness
