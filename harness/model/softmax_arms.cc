// The arms on exact softmax attention (docs/harness.md §1): `exact`, `sink`, `offbyone`, the
// value gates (docs/math.md §1.2) `normgate`, `projgate`, `sink+normgate`, `sink+projgate`,
// and the output gate `outgate` (Qiu et al. 2025, G1), alone or after another arm of this
// file (`outgate+sink`, `outgate+normgate`, ...: docs/harness.md §1.3).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "harness/model/arms.h"
#include "harness/model/layers.h"

namespace lpattn::harness::arms {
namespace {

// Causal exact attention with an optional sink; the sink logits, if learned, are the arm's
// first n_head parameters. Saved activations: lse [B, H, T].
class SoftmaxArm : public AttentionArm {
 public:
  SoftmaxArm(std::string name, SinkMode sink, const ScoreOptions& score = {})
      : name_(std::move(name)), sink_(sink), score_(score) {}
  std::string KernelName() const override { return name_; }

  std::vector<ArmParam> LayerParams(const ModelConfig& m) const override {
    if (sink_ != SinkMode::kLearned) return {};
    return {{"sink", size_t(m.n_head), false, 0.0f, 0.0f}};
  }
  size_t ActivationFloats(const ArmShape& s) const override { return s.B * s.n_head * s.T; }

  void Forward(const ArmShape& s, const float* params, const float* qkv, const float*,
               float* act, float* out) const override {
    Attend(s, params, qkv, {qkv + 2 * s.C, QkvStrides(s)}, act, out);
  }

  void Backward(const ArmShape& s, const float* params, float* dparams, const float* qkv,
                const float*, const float* act, const float* out, const float* dout,
                float* dqkv, float*) const override {
    AttendBackward(s, params, dparams, qkv, {qkv + 2 * s.C, QkvStrides(s)}, act, out, dout, dqkv,
                   {dqkv + 2 * s.C, QkvStrides(s)});
  }

  // p = exp(s - m) / Z with the sink's exp(tau - m) in Z; abstention = exp(tau - m) / Z.
  void Diagnose(const ArmShape& s, const float* params, const float* qkv, const float*,
                const float*, HeadDiagnostics* per_head) const override {
    const double scale = 1.0 / std::sqrt(double(s.head_dim()));
    std::vector<double> scores;
    const std::vector<float> slopes =
        score_.alibi ? AlibiSlopes(int64_t(s.n_head)) : std::vector<float>{};
    DiagnoseRows(s, per_head, [&](size_t b, size_t h, size_t i, std::vector<double>& w,
                                  double& abstention) {
      RowScores(s, qkv, qkv + s.C, 3 * s.C, b, h, i, scale, false, scores);
      if (score_.alibi) {  // docs/math.md §1.4: key j of the row's i + 1 is i - j before it
        for (size_t j = 0; j < scores.size(); ++j) scores[j] -= slopes[h] * double(i - j);
      }
      if (score_.softcap != 0.0f) {  // docs/math.md §1.3
        for (double& x : scores) x = score_.softcap * std::tanh(x / score_.softcap);
      }
      if (score_.window != 0) {  // docs/math.md §1.5: keys i - j >= W have weight 0
        for (size_t j = 0; j + size_t(score_.window) <= i; ++j) scores[j] = -INFINITY;
      }
      const bool sink = sink_ != SinkMode::kNone;
      const double tau = sink_ == SinkMode::kLearned ? params[h] : 0.0;
      double m = sink ? tau : -INFINITY;
      for (const double x : scores) m = std::max(m, x);
      double z = sink ? std::exp(tau - m) : 0.0;
      for (const double x : scores) z += std::exp(x - m);
      w.resize(scores.size());
      for (size_t j = 0; j < w.size(); ++j) w[j] = std::exp(scores[j] - m) / z;
      abstention = sink ? std::exp(tau - m) / z : 0.0;
    });
  }
  bool HasSink() const override { return sink_ != SinkMode::kNone; }

  // The same with V (and dV) elsewhere than in qkv: the value-gate arms attend over gated V.
  void Attend(const ArmShape& s, const float* params, const float* qkv, ConstTensor v, float* act,
              float* out) const {
    const Strides in = QkvStrides(s);
    std::vector<float> slopes;
    ExactForward(KernelShape(s), Options(s, params, &slopes),
                 {{qkv, in}, {qkv + s.C, in}, v, {out, OutStrides(s)}, act});
  }
  void AttendBackward(const ArmShape& s, const float* params, float* dparams, const float* qkv,
                      ConstTensor v, const float* act, const float* out, const float* dout,
                      float* dqkv, Tensor dv) const {
    const Strides in = QkvStrides(s), o = OutStrides(s);
    std::vector<float> d_sink(sink_ == SinkMode::kLearned ? s.n_head : 0);
    BackwardArgs args;
    args.q = {qkv, in};
    args.k = {qkv + s.C, in};
    args.v = v;
    args.o = {out, o};
    args.d_o = {dout, o};
    args.lse = act;
    args.dq = {dqkv, in};
    args.dk = {dqkv + s.C, in};
    args.dv = dv;
    args.d_sink = d_sink.empty() ? nullptr : d_sink.data();
    std::vector<float> slopes;
    ExactBackward(KernelShape(s), Options(s, params, &slopes), args);
    for (size_t h = 0; h < d_sink.size(); ++h) dparams[h] += d_sink[h];
  }

 private:
  AttentionOptions Options(const ArmShape& s, const float* params,
                           std::vector<float>* slopes) const {
    AttentionOptions options;
    options.causal = true;
    options.sink = sink_;
    options.sink_logits = sink_ == SinkMode::kLearned ? params : nullptr;
    options.precision = precision();
    options.softcap = score_.softcap;
    options.window = score_.window;
    if (score_.alibi) {  // the slopes of the model's heads, alive for the call in *slopes
      *slopes = AlibiSlopes(int64_t(s.n_head));
      options.alibi_slopes = slopes->data();
    }
    return options;  // threads = 0: the trainer's arena
  }

  std::string name_;
  SinkMode sink_;
  ScoreOptions score_;
};

// Value gates (docs/math.md §1.2) before exact attention, with or without a learned sink:
// v~ = sigmoid(alpha ||v|| + beta) v (normgate) or sigmoid(w . v + b) v (projgate), per head.
// Parameters: the sink logits (sink+ arms), then alpha, beta [n_head] (init 0: every gate
// starts at 1/2) or w [n_head * D] (N(0, 0.02)), b [n_head]. Saved: the inner arm's lse and
// the gated V [B, T, C].
class ValueGateArm : public AttentionArm {
 public:
  ValueGateArm(std::string name, ValueGateKind kind, SinkMode sink)
      : name_(std::move(name)), kind_(kind), sink_(sink), inner_(name_, sink) {}
  std::string KernelName() const override { return name_; }
  std::vector<ArmParam> LayerParams(const ModelConfig& m) const override {
    std::vector<ArmParam> params = inner_.LayerParams(m);
    const size_t h = size_t(m.n_head), d = size_t(m.n_embd / m.n_head);
    if (kind_ == ValueGateKind::kNorm) {
      params.push_back({"gate_alpha", h, false, 0.0f, 0.0f});
      params.push_back({"gate_beta", h, false, 0.0f, 0.0f});
    } else {
      params.push_back({"gate_w", h * d, true, 0.02f, 0.0f});
      params.push_back({"gate_b", h, false, 0.0f, 0.0f});
    }
    return params;
  }
  size_t ActivationFloats(const ArmShape& s) const override {
    return inner_.ActivationFloats(s) + s.B * s.T * s.C;
  }
  // The gates scale values, not weights: the weights are the inner softmax's.
  void Diagnose(const ArmShape& s, const float* params, const float* qkv, const float* x,
                const float* act, HeadDiagnostics* per_head) const override {
    inner_.Diagnose(s, params, qkv, x, act, per_head);
  }
  bool HasSink() const override { return inner_.HasSink(); }
  void SetPrecision(const Precision& precision) override {
    AttentionArm::SetPrecision(precision);
    inner_.SetPrecision(precision);
  }
  // sigmoid(alpha_h ||v|| + beta_h) or sigmoid(w_h . v + b_h), in double.
  bool ValueGates(const ArmShape& s, const float* params, const float* qkv,
                  float* gates) const override {
    const ValueGateParams g = Gate(s, params);
    const size_t D = s.head_dim();
    for (size_t r = 0; r < s.B * s.T; ++r) {
      for (size_t h = 0; h < s.n_head; ++h) {
        const float* v = qkv + r * 3 * s.C + 2 * s.C + h * D;
        double z = 0.0;
        if (kind_ == ValueGateKind::kNorm) {
          double squares = 0.0;
          for (size_t c = 0; c < D; ++c) squares += double(v[c]) * v[c];
          z = double(g.alpha[h]) * std::sqrt(squares) + g.beta[h];
        } else {
          for (size_t c = 0; c < D; ++c) z += double(g.w[h * D + c]) * v[c];
          z += g.b[h];
        }
        gates[r * s.n_head + h] = float(1.0 / (1.0 + std::exp(-z)));
      }
    }
    return true;
  }

  void Forward(const ArmShape& s, const float* params, const float* qkv, const float*, float* act,
               float* out) const override {
    float* gated = act + inner_.ActivationFloats(s);
    ValueGateForward(KernelShape(s), Gate(s, params), {qkv + 2 * s.C, QkvStrides(s)},
                     {gated, OutStrides(s)});
    inner_.Attend(s, params, qkv, {gated, OutStrides(s)}, act, out);
  }

  void Backward(const ArmShape& s, const float* params, float* dparams, const float* qkv,
                const float*, const float* act, const float* out, const float* dout,
                float* dqkv, float*) const override {
    const float* gated = act + inner_.ActivationFloats(s);
    std::vector<float> d_gated(s.B * s.T * s.C);
    inner_.AttendBackward(s, params, dparams, qkv, {gated, OutStrides(s)}, act, out, dout, dqkv,
                          {d_gated.data(), OutStrides(s)});
    const size_t first = SinkFloats(s), h = s.n_head, d = s.head_dim();
    const size_t sizes[2] = {kind_ == ValueGateKind::kNorm ? h : h * d, h};
    std::vector<float> grads(sizes[0] + sizes[1]);
    float* g = grads.data();  // laid out as the parameters: alpha, beta or w, b
    ValueGateBackward(KernelShape(s), Gate(s, params), {qkv + 2 * s.C, QkvStrides(s)},
                      {d_gated.data(), OutStrides(s)}, {dqkv + 2 * s.C, QkvStrides(s)},
                      {g, g + h, g, g + h * d});
    for (size_t i = 0; i < grads.size(); ++i) dparams[first + i] += grads[i];
  }

 private:
  size_t SinkFloats(const ArmShape& s) const { return sink_ == SinkMode::kLearned ? s.n_head : 0; }
  ValueGateParams Gate(const ArmShape& s, const float* params) const {
    const float* p = params + SinkFloats(s);
    const size_t h = s.n_head;
    if (kind_ == ValueGateKind::kNorm) return {kind_, p, p + h, nullptr, nullptr};
    return {kind_, nullptr, nullptr, p, p + h * s.head_dim()};
  }

  std::string name_;
  ValueGateKind kind_;
  SinkMode sink_;
  SoftmaxArm inner_;
};

// An inner arm's output gated by the block's input: g = x W_g^T + b_g [B, T, C],
// out = o * sigmoid(g). `outgate` gates exact attention; `outgate+<arm>` gates another arm
// (a sink, a value gate), so abstention or filtering and the query-controlled gate combine.
// Parameters: the inner arm's, then W_g [C, C], b_g [C] (so `outgate`'s layout is unchanged).
// Saved: the inner arm's activations, then o and g.
class OutputGateArm : public AttentionArm {
 public:
  OutputGateArm(std::string name, std::unique_ptr<AttentionArm> inner)
      : name_(std::move(name)), inner_(std::move(inner)) {}
  std::string KernelName() const override { return name_; }
  std::vector<ArmParam> LayerParams(const ModelConfig& m) const override {
    std::vector<ArmParam> params = inner_->LayerParams(m);
    const size_t c = size_t(m.n_embd);
    params.push_back({"gate_w", c * c, true, 0.02f, 0.0f});
    params.push_back({"gate_b", c, false, 0.0f, 0.0f});
    return params;
  }
  size_t ActivationFloats(const ArmShape& s) const override {
    return inner_->ActivationFloats(s) + 2 * s.B * s.T * s.C;
  }
  // The gate scales outputs, not weights: the weights (and a sink's mass) are the inner arm's.
  void Diagnose(const ArmShape& s, const float* params, const float* qkv, const float* x,
                const float* act, HeadDiagnostics* per_head) const override {
    inner_->Diagnose(s, params, qkv, x, act, per_head);
  }
  bool HasSink() const override { return inner_->HasSink(); }
  // The output gate acts on rows, not on value positions: only an inner value gate's count.
  bool ValueGates(const ArmShape& s, const float* params, const float* qkv,
                  float* gates) const override {
    return inner_->ValueGates(s, params, qkv, gates);
  }
  void SetPrecision(const Precision& precision) override {
    AttentionArm::SetPrecision(precision);
    inner_->SetPrecision(precision);
  }

  void Forward(const ArmShape& s, const float* params, const float* qkv, const float* x,
               float* act, float* out) const override {
    const size_t n = s.B * s.T * s.C;
    float* attn = act + inner_->ActivationFloats(s);
    float* gate = attn + n;
    inner_->Forward(s, params, qkv, x, act, attn);
    const float* w = params + InnerFloats(s);
    MatmulForward(gate, x, w, w + s.C * s.C, s.B * s.T, s.C, s.C, s.dense);
    SigmoidGateForward(out, attn, gate, n);
  }

  void Backward(const ArmShape& s, const float* params, float* dparams, const float* qkv,
                const float* x, const float* act, const float*, const float* dout,
                float* dqkv, float* dx) const override {
    const size_t n = s.B * s.T * s.C;
    const float* attn = act + inner_->ActivationFloats(s);
    const float* gate = attn + n;
    std::vector<float> dattn(n, 0.0f), dgate(n, 0.0f);
    SigmoidGateBackward(dattn.data(), dgate.data(), dout, attn, gate, n);
    const size_t first = InnerFloats(s);
    MatmulBackward(dx, dparams + first, dparams + first + s.C * s.C, dgate.data(), x,
                   params + first, s.B * s.T, s.C, s.C, Write::kAccumulate, s.dense);
    inner_->Backward(s, params, dparams, qkv, x, act, attn, dattn.data(), dqkv, dx);
  }

 private:
  size_t InnerFloats(const ArmShape& s) const {
    ModelConfig m;
    m.n_head = int(s.n_head);
    m.n_embd = int(s.C);
    size_t floats = 0;
    for (const ArmParam& p : inner_->LayerParams(m)) floats += p.size;
    return floats;
  }

  std::string name_;
  std::unique_ptr<AttentionArm> inner_;
};

}  // namespace

std::unique_ptr<AttentionArm> MakeSoftmaxArm(const std::string& name, SinkMode sink,
                                             const ScoreOptions& options) {
  return std::make_unique<SoftmaxArm>(name, sink, options);
}
std::unique_ptr<AttentionArm> MakeValueGateArm(const std::string& name, ValueGateKind kind,
                                               SinkMode sink) {
  return std::make_unique<ValueGateArm>(name, kind, sink);
}
std::unique_ptr<AttentionArm> MakeOutputGateArm(const std::string& name,
                                                std::unique_ptr<AttentionArm> inner) {
  return std::make_unique<OutputGateArm>(name, std::move(inner));
}

}  // namespace lpattn::harness::arms
