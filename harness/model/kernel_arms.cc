// The arms on lpattn's other kernels (docs/harness.md §1): `kint:<options>`, K-interval
// attention (docs/math.md §2), and `tda:<options>`, thresholded differential attention (§3).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "harness/model/arms.h"
#include "harness/model/layers.h"

namespace lpattn::harness::arms {
namespace {

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

// Thresholded differential attention (docs/math.md §3, docs/harness.md §1): view 1's Q and
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
    if (TwoViews()) MatmulForward(l.qk2, x, l.qk2_w, l.qk2_b, s.B * s.T, s.C, 2 * s.C, s.dense);
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
    MatmulBackward(dx, d.qk2_w, d.qk2_b, dqk2.data(), x, l.qk2_w, s.B * s.T, s.C, 2 * s.C,
                   Write::kAccumulate, s.dense);
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

}  // namespace

std::unique_ptr<AttentionArm> MakeKIntervalArm(const std::string& name,
                                               const KIntervalOptions& options) {
  return std::make_unique<KIntervalArm>(name, options);
}
std::unique_ptr<AttentionArm> MakeThresholdArm(const std::string& name,
                                               const ThresholdOptions& options) {
  return std::make_unique<ThresholdArm>(name, options);
}

}  // namespace lpattn::harness::arms
