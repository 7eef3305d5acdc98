// The attention arms of spec/harness.md §1: on exact softmax attention `exact`, `sink` (a
// learnable per-head sink logit, init 0), `offbyone` (the sink fixed at 0) and `outgate`
// (o'_i = o_i * sigmoid(x_i W_g + b_g), per head and channel; Qiu et al. 2025, G1); the value
// gates `normgate`, `projgate`, `sink+normgate`, `sink+projgate` (spec/kernels.md §1.2);
// `kint:<options>`, K-interval attention (§2); and `tda:<options>`, thresholded differential
// attention (§3).
#include "harness/attention_arm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "harness/layers.h"
#include "kernels/attention.h"
#include "kernels/kinterval.h"
#include "kernels/threshold.h"
#include "kernels/value_gate.h"

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

// ---- diagnostics: each arm's weights recomputed in double ----

// Row i (batch b, head h) of scores over its visible keys j <= i: scale * q_i . k_j, from
// [B, T, H, D] views of token stride `stride`, with q and k L2-normalised when `unit`.
void RowScores(const ArmShape& s, const float* q, const float* k, size_t stride, size_t b,
               size_t h, size_t i, double scale, bool unit, std::vector<double>& out) {
  const size_t D = s.head_dim();
  auto row = [&](const float* base, size_t t) { return base + (b * s.T + t) * stride + h * D; };
  auto norm = [&](const float* x) {
    double sum = 0.0;
    for (size_t c = 0; c < D; ++c) sum += double(x[c]) * x[c];
    return unit ? std::max(std::sqrt(sum), 1e-12) : 1.0;
  };
  const float* q_i = row(q, i);
  const double q_norm = norm(q_i);
  out.resize(i + 1);
  for (size_t j = 0; j <= i; ++j) {
    const float* k_j = row(k, j);
    double dot = 0.0;
    for (size_t c = 0; c < D; ++c) dot += double(q_i[c]) * k_j[c];
    out[j] = scale * dot / (q_norm * norm(k_j));
  }
}

// Every causal row of every (batch, head): weigh(b, h, i, scores, weights, abstention) fills
// the row's weights, whose zeros and first-token share are added to per_head[h].
template <class Weigh>
void DiagnoseRows(const ArmShape& s, HeadDiagnostics* per_head, const Weigh& weigh) {
  std::vector<double> w;
  for (size_t b = 0; b < s.B; ++b) {
    for (size_t h = 0; h < s.n_head; ++h) {
      HeadDiagnostics& d = per_head[h];
      for (size_t i = 0; i < s.T; ++i) {
        double abstention = 0.0;
        weigh(b, h, i, w, abstention);
        double total = 0.0;
        for (const double x : w) total += std::abs(x);
        d.rows += 1.0;
        d.visible += double(w.size());
        d.zeros += double(std::count(w.begin(), w.end(), 0.0));
        d.first_mass += total > 0.0 ? std::abs(w[0]) / total * (1.0 - abstention) : 0.0;
        d.abstention += abstention;
      }
    }
  }
}

// Causal exact attention with an optional sink; the sink logits, if learned, are the arm's
// first n_head parameters. Saved activations: lse [B, H, T].
class SoftmaxArm : public AttentionArm {
 public:
  SoftmaxArm(std::string name, SinkMode sink) : name_(std::move(name)), sink_(sink) {}
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
    DiagnoseRows(s, per_head, [&](size_t b, size_t h, size_t i, std::vector<double>& w,
                                  double& abstention) {
      RowScores(s, qkv, qkv + s.C, 3 * s.C, b, h, i, scale, false, scores);
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
    ExactForward(KernelShape(s), Options(params),
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
    ExactBackward(KernelShape(s), Options(params), args);
    for (size_t h = 0; h < d_sink.size(); ++h) dparams[h] += d_sink[h];
  }

 private:
  AttentionOptions Options(const float* params) const {
    AttentionOptions options;
    options.causal = true;
    options.sink = sink_;
    options.sink_logits = sink_ == SinkMode::kLearned ? params : nullptr;
    options.precision = precision();
    return options;  // threads = 0: the trainer's arena
  }

  std::string name_;
  SinkMode sink_;
};

// Value gates (spec/kernels.md §1.2) before exact attention, with or without a learned sink:
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

// Exact attention whose output is gated by the block's input: g = x W_g^T + b_g [B, T, C],
// out = o * sigmoid(g). Parameters: W_g [C, C], b_g [C]. Saved: lse, o, g.
class OutputGateArm : public AttentionArm {
 public:
  std::string KernelName() const override { return "outgate"; }
  std::vector<ArmParam> LayerParams(const ModelConfig& m) const override {
    const size_t c = size_t(m.n_embd);
    return {{"gate_w", c * c, true, 0.02f, 0.0f}, {"gate_b", c, false, 0.0f, 0.0f}};
  }
  size_t ActivationFloats(const ArmShape& s) const override {
    return inner_.ActivationFloats(s) + 2 * s.B * s.T * s.C;
  }
  void Diagnose(const ArmShape& s, const float*, const float* qkv, const float* x,
                const float* act, HeadDiagnostics* per_head) const override {
    inner_.Diagnose(s, nullptr, qkv, x, act, per_head);
  }
  void SetPrecision(const Precision& precision) override {
    AttentionArm::SetPrecision(precision);
    inner_.SetPrecision(precision);
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
  std::string KernelName() const override { return name_; }
  std::vector<ArmParam> LayerParams(const ModelConfig&) const override { return {}; }
  size_t ActivationFloats(const ArmShape& s) const override { return 6 * Rows(s); }
  void Diagnose(const ArmShape& s, const float*, const float* qkv, const float*, const float*,
                HeadDiagnostics* per_head) const override {
    const double scale = 1.0 / std::sqrt(double(s.head_dim()));
    std::vector<double> scores;
    DiagnoseRows(s, per_head, [&](size_t b, size_t h, size_t i, std::vector<double>& w, double&) {
      RowScores(s, qkv, qkv + s.C, 3 * s.C, b, h, i, scale, false, scores);
      w.resize(scores.size());
      KIntervalRowForward(options_, scores.data(), scores.size(), w.data());
    });
  }

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
  AttentionOptions Options() const {
    AttentionOptions options;
    options.causal = true;
    options.precision = precision();
    return options;  // threads = 0: the trainer's arena
  }

  std::string name_;
  KIntervalOptions options_;
};

// Thresholded differential attention (spec/kernels.md §3, spec/harness.md §1): view 1's Q and
// K come from qkv, view 2's from a second projection of the block's input, qk2 = x W2^T + b2
// [B, T, 2C]; lambda per layer (init 0.5); a per-head RMSNorm with gain (init 1) after the
// kernel. views=1 has neither W2 nor lambda. Saved: qk2, the kernel's output y, and the
// RMSNorm's reciprocal RMS.
class ThresholdArm : public AttentionArm {
 public:
  ThresholdArm(std::string name, const ThresholdOptions& options)
      : name_(std::move(name)), options_(options) {}
  std::string KernelName() const override { return name_; }
  std::vector<ArmParam> LayerParams(const ModelConfig& m) const override {
    const size_t c = size_t(m.n_embd);
    std::vector<ArmParam> params = {{"norm_gain", c, false, 0.0f, 1.0f}};
    if (TwoViews()) {
      params.push_back({"qk2_w", 2 * c * c, true, 0.02f, 0.0f});
      params.push_back({"qk2_b", 2 * c, false, 0.0f, 0.0f});
      params.push_back({"lambda", 1, false, 0.0f, 0.5f});
    }
    return params;
  }
  size_t ActivationFloats(const ArmShape& s) const override {
    return (TwoViews() ? 2 * s.B * s.T * s.C : 0) + s.B * s.T * s.C + s.B * s.T * s.n_head;
  }
  // w = a1 - lambda a2 over cosine scores, a = max(s - tau, 0)^p (view 2's Q and K saved in act).
  void Diagnose(const ArmShape& s, const float* params, const float* qkv, const float*,
                const float* act, HeadDiagnostics* per_head) const override {
    const Layout l = LayoutOf(s, params, const_cast<float*>(act));
    const double lambda = TwoViews() ? ClampLambda(*l.lambda) : 0.0;
    std::vector<double> scores, a2;
    DiagnoseRows(s, per_head, [&](size_t b, size_t h, size_t i, std::vector<double>& w, double&) {
      const double tau = ThresholdTau(options_, int64_t(i + 1), int64_t(s.head_dim()));
      const bool unit = options_.l2_normalize;
      RowScores(s, qkv, qkv + s.C, 3 * s.C, b, h, i, 1.0, unit, scores);
      w.resize(scores.size());
      ThresholdRowForward(options_, tau, scores.data(), scores.size(), w.data());
      if (!TwoViews()) return;
      RowScores(s, l.qk2, l.qk2 + s.C, 2 * s.C, b, h, i, 1.0, unit, scores);
      a2.resize(scores.size());
      ThresholdRowForward(options_, tau, scores.data(), scores.size(), a2.data());
      for (size_t j = 0; j < w.size(); ++j) w[j] -= lambda * a2[j];
    });
  }

  void Forward(const ArmShape& s, const float* params, const float* qkv, const float* x,
               float* act, float* out) const override {
    const Layout l = LayoutOf(s, params, act);
    if (TwoViews()) MatmulForward(l.qk2, x, l.qk2_w, l.qk2_b, s.B * s.T, s.C, 2 * s.C);
    const std::vector<float> lambda(s.n_head, TwoViews() ? *l.lambda : 0.0f);
    ThresholdForwardArgs args;
    SetViews(s, qkv, l.qk2, args);
    args.v = {qkv + 2 * s.C, QkvStrides(s)};
    args.lambda_param = lambda.data();
    args.o = {l.y, OutStrides(s)};
    ThresholdForward(KernelShape(s), Options(), options_, args);
    HeadRmsNormForward(out, l.rrms, l.y, l.gain, s.B * s.T, s.C, s.n_head);
  }

  void Backward(const ArmShape& s, const float* params, float* dparams, const float* qkv,
                const float* x, const float* act, const float*, const float* dout, float* dqkv,
                float* dx) const override {
    const Layout l = LayoutOf(s, params, const_cast<float*>(act));
    const Layout d = LayoutOf(s, dparams, nullptr);
    std::vector<float> dy(s.B * s.T * s.C, 0.0f), dqk2(TwoViews() ? 2 * s.B * s.T * s.C : 0);
    HeadRmsNormBackward(dy.data(), d.gain, dout, l.y, l.gain, l.rrms, s.B * s.T, s.C, s.n_head);
    const std::vector<float> lambda(s.n_head, TwoViews() ? *l.lambda : 0.0f);
    std::vector<float> d_lambda(s.n_head, 0.0f);
    ThresholdBackwardArgs args;
    SetViews(s, qkv, l.qk2, args);
    args.v = {qkv + 2 * s.C, QkvStrides(s)};
    args.d_o = {dy.data(), OutStrides(s)};
    args.lambda_param = lambda.data();
    args.dq[0] = {dqkv, QkvStrides(s)};
    args.dk[0] = {dqkv + s.C, QkvStrides(s)};
    args.dq[1] = {dqk2.data(), Qk2Strides(s)};
    args.dk[1] = {dqk2.data() + s.C, Qk2Strides(s)};
    args.dv = {dqkv + 2 * s.C, QkvStrides(s)};
    args.d_lambda = d_lambda.data();
    ThresholdBackward(KernelShape(s), Options(), options_, args);
    if (!TwoViews()) return;
    for (const float g : d_lambda) *d.lambda += g;  // one lambda shared by the layer's heads
    MatmulBackward(dx, d.qk2_w, d.qk2_b, dqk2.data(), x, l.qk2_w, s.B * s.T, s.C, 2 * s.C);
  }

 private:
  bool TwoViews() const { return options_.views == 2; }
  // qk2 [B, T, 2C]: view 2's Q then K per token, as [B, T, H, D] views of token stride 2C.
  static Strides Qk2Strides(const ArmShape& s) {
    return {int64_t(s.T * 2 * s.C), int64_t(s.head_dim()), int64_t(2 * s.C)};
  }
  template <class Args>
  void SetViews(const ArmShape& s, const float* qkv, const float* qk2, Args& args) const {
    args.q[0] = {qkv, QkvStrides(s)};
    args.k[0] = {qkv + s.C, QkvStrides(s)};
    if (!TwoViews()) return;
    args.q[1] = {qk2, Qk2Strides(s)};
    args.k[1] = {qk2 + s.C, Qk2Strides(s)};
  }
  // Where the parameters (or their gradients) and the saved activations are.
  struct Layout {
    float *gain, *qk2_w, *qk2_b, *lambda;
    float *qk2, *y, *rrms;
  };
  Layout LayoutOf(const ArmShape& s, const float* params, float* act) const {
    float* p = const_cast<float*>(params);
    Layout l{p, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
    if (TwoViews()) {
      l.qk2_w = p + s.C;
      l.qk2_b = l.qk2_w + 2 * s.C * s.C;
      l.lambda = l.qk2_b + 2 * s.C;
    }
    if (act != nullptr) {
      l.qk2 = act;
      l.y = act + (TwoViews() ? 2 * s.B * s.T * s.C : 0);
      l.rrms = l.y + s.B * s.T * s.C;
    }
    return l;
  }
  AttentionOptions Options() const {
    AttentionOptions options;
    options.causal = true;
    options.precision = precision();
    return options;  // scale unset: 1 (cosine scores); threads = 0: the trainer's arena
  }

  std::string name_;
  ThresholdOptions options_;
};

constexpr char kKIntervalPrefix[] = "kint:";
constexpr char kThresholdPrefix[] = "tda:";

}  // namespace

std::vector<std::string> KnownArms() {
  return {"exact",    "sink",          "offbyone",      "outgate",
          "normgate", "projgate",      "sink+normgate", "sink+projgate"};
}

std::string AttentionArm::Name() const {
  const std::string precision = FormatPrecision(precision_);
  return precision.empty() ? KernelName() : KernelName() + "+" + precision;
}

namespace {

std::unique_ptr<AttentionArm> MakeKernelArm(const std::string& spec) {
  if (spec == "exact") return std::make_unique<SoftmaxArm>("exact", SinkMode::kNone);
  if (spec == "sink") return std::make_unique<SoftmaxArm>("sink", SinkMode::kLearned);
  if (spec == "offbyone") return std::make_unique<SoftmaxArm>("offbyone", SinkMode::kOffByOne);
  if (spec == "outgate") return std::make_unique<OutputGateArm>();
  if (spec == "normgate" || spec == "projgate" || spec == "sink+normgate" ||
      spec == "sink+projgate") {
    const bool sink = spec.rfind("sink+", 0) == 0;
    const bool norm = spec.find("normgate") != std::string::npos;
    return std::make_unique<ValueGateArm>(spec, norm ? ValueGateKind::kNorm : ValueGateKind::kProjection,
                                          sink ? SinkMode::kLearned : SinkMode::kNone);
  }
  if (spec.rfind(kKIntervalPrefix, 0) == 0) {
    try {
      return std::make_unique<KIntervalArm>(
          spec, ParseKInterval(spec.substr(sizeof kKIntervalPrefix - 1)));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("attention arm '" + spec + "': " + e.what());
    }
  }
  if (spec.rfind(kThresholdPrefix, 0) == 0 || spec == "tda") {
    try {
      const std::string text = spec.size() > 3 ? spec.substr(sizeof kThresholdPrefix - 1) : "";
      return std::make_unique<ThresholdArm>(spec, ParseThreshold(text));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("attention arm '" + spec + "': " + e.what());
    }
  }
  std::string known;
  for (const std::string& name : KnownArms()) known += name + ", ";
  throw std::invalid_argument("unknown attention arm '" + spec + "' (known: " + known +
                              "kint:<options> such as kint:K=4,cal=window,round=nearest,ste=prob, "
                              "tda or tda:<options> such as tda:views=1,p=2; any of them "
                              "+<precision> such as exact+qk=int8,pv=fp8e4m3)");
}

}  // namespace

std::unique_ptr<AttentionArm> MakeArm(const std::string& spec) {
  // "+key=value..." after the kernel's own spec (whose '+' joins arm names, as in sink+normgate,
  // never options) is the operand precision.
  const size_t plus = spec.rfind('+');
  if (plus == std::string::npos || spec.find('=', plus) == std::string::npos) {
    return MakeKernelArm(spec);
  }
  std::unique_ptr<AttentionArm> arm = MakeKernelArm(spec.substr(0, plus));
  try {
    const Precision precision = ParsePrecision(spec.substr(plus + 1));
    arm->SetPrecision(precision);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("attention arm '" + spec + "': " + e.what());
  }
  return arm;
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
