// A self-contained attention test case: random inputs in a chosen layout, the kernel's outputs
// on the current dispatch target, and the fp64 reference, so every kernel test compares like
// with like. Used by the SIMD-vs-reference, non-finite and determinism suites.
#ifndef LPATTN_TESTS_KERNELS_ATTENTION_CASE_H_
#define LPATTN_TESTS_KERNELS_ATTENTION_CASE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/reference.h"

namespace lpattn::test {

enum class Layout { kBHTD, kBTHD };

// An owned strided tensor of [batch, heads, tokens, dim] floats.
struct OwnedTensor {
  int64_t batch = 0, heads = 0, tokens = 0, dim = 0;
  Strides strides;
  std::vector<float> storage;

  OwnedTensor() = default;
  OwnedTensor(int64_t b, int64_t h, int64_t t, int64_t d, Layout layout)
      : batch(b), heads(h), tokens(t), dim(d),
        strides(layout == Layout::kBHTD ? ContiguousBHTD(h, t, d) : ContiguousBTHD(h, t, d)),
        storage(size_t(b * h * t * d), 0.0f) {}
  size_t offset(int64_t b, int64_t h, int64_t t, int64_t c) const {
    return size_t(b * strides.batch + h * strides.head + t * strides.token + c);
  }
  float& at(int64_t b, int64_t h, int64_t t, int64_t c) { return storage[offset(b, h, t, c)]; }
  float at(int64_t b, int64_t h, int64_t t, int64_t c) const { return storage[offset(b, h, t, c)]; }
  Tensor view() { return {storage.data(), strides}; }
  ConstTensor cview() const { return {storage.data(), strides}; }
  std::vector<double> Dense() const { return DenseFromView(cview(), batch, heads, tokens, dim); }
  void FillNormal(std::mt19937& rng, float stddev = 1.0f) {
    std::normal_distribution<float> dist(0.0f, stddev);
    for (float& x : storage) x = dist(rng);
  }
};

struct KernelOutputs {
  OwnedTensor o, dq, dk, dv;
  std::vector<float> lse, d_sink;
};

struct AttentionCase {
  AttentionShape shape;
  AttentionOptions options;
  OwnedTensor q, k, v, d_o;
  std::vector<float> sink_logits;

  AttentionCase(const AttentionShape& s, bool causal, SinkMode sink, Layout layout,
                uint32_t seed = 1)
      : shape(s),
        q(s.batch, s.heads, s.q_len, s.head_dim, layout),
        k(s.batch, s.kv_heads, s.kv_len, s.head_dim, layout),
        v(s.batch, s.kv_heads, s.kv_len, s.head_dim, layout),
        d_o(s.batch, s.heads, s.q_len, s.head_dim, layout) {
    std::mt19937 rng(seed);
    q.FillNormal(rng);
    k.FillNormal(rng);
    v.FillNormal(rng);
    d_o.FillNormal(rng);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (int64_t h = 0; h < s.heads; ++h) sink_logits.push_back(dist(rng));
    options.causal = causal;
    options.sink = sink;
    options.sink_logits = sink == SinkMode::kLearned ? sink_logits.data() : nullptr;
    layout_ = layout;
  }

  KernelOutputs Run(bool with_backward = true) const {
    KernelOutputs out;
    out.o = OwnedTensor(shape.batch, shape.heads, shape.q_len, shape.head_dim, layout_);
    out.lse.assign(size_t(shape.batch * shape.heads * shape.q_len), 0.0f);
    ExactForward(shape, options, {q.cview(), k.cview(), v.cview(), out.o.view(), out.lse.data()});
    if (!with_backward) return out;
    out.dq = OwnedTensor(shape.batch, shape.heads, shape.q_len, shape.head_dim, layout_);
    out.dk = OwnedTensor(shape.batch, shape.kv_heads, shape.kv_len, shape.head_dim, layout_);
    out.dv = OwnedTensor(shape.batch, shape.kv_heads, shape.kv_len, shape.head_dim, layout_);
    out.d_sink.assign(size_t(shape.heads), 0.0f);
    BackwardArgs args;
    args.q = q.cview();
    args.k = k.cview();
    args.v = v.cview();
    args.o = out.o.cview();
    args.d_o = d_o.cview();
    args.lse = out.lse.data();
    args.dq = out.dq.view();
    args.dk = out.dk.view();
    args.dv = out.dv.view();
    args.d_sink = out.d_sink.data();
    ExactBackward(shape, options, args);
    return out;
  }

  ReferenceInputs DenseInputs() const {
    ReferenceInputs in{q.Dense(), k.Dense(), v.Dense(), {}};
    in.sink_logits.assign(sink_logits.begin(), sink_logits.end());
    return in;
  }
  ReferenceForwardResult ReferenceForward() const {
    return ReferenceExactForward(shape, options, DenseInputs());
  }
  ReferenceGradients ReferenceBackward() const {
    return ReferenceExactBackward(shape, options, DenseInputs(), d_o.Dense());
  }

 private:
  Layout layout_;
};

// n doubles uniform in [lo, hi), seeded.
inline std::vector<double> Uniform(size_t n, uint32_t seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

// max |a - b| / (1 + max |b|): the error relative to the tensor's scale.
inline double ScaledMaxError(const std::vector<double>& kernel, const std::vector<double>& ref) {
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::abs(kernel[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
    if (std::isnan(kernel[i]) != std::isnan(ref[i])) return INFINITY;
  }
  return err / (1.0 + scale);
}
// Rows of a [rows x dim] gradient whose error over 1 + max |want| exceeds `tolerance` (a NaN
// on one side only counts as infinite), and the largest error of any row: where a few entries
// may land on the other side of a discontinuity or a rounding midpoint, most rows must still
// match tightly.
// The low-precision backward's formats (docs/math.md §4.2), each with how far a row may move
// where an entry near a midpoint of its format rounds the other way in the kernel and the
// reference (a few steps of the format).
struct BackwardFormatCase {
  const char* precision;
  double flip;
};
inline constexpr BackwardFormatCase kBackwardFormats[] = {{"bwd=bf16", 4e-3},
                                                          {"bwd=fp16", 5e-4},
                                                          {"bwd=int8", 2e-2},
                                                          {"bwd=int8,bwd_dp=int8", 2e-2}};

struct RowMismatch {
  size_t bad = 0;
  double worst = 0.0;
};
inline RowMismatch CompareGradientRows(const std::vector<double>& got,
                                       const std::vector<double>& want, size_t dim,
                                       double tolerance = 2e-5) {
  double scale = 0.0;
  for (double x : want) scale = std::max(scale, std::abs(x));
  RowMismatch m;
  for (size_t r = 0; r < want.size() / dim; ++r) {
    double err = 0.0;
    for (size_t c = 0; c < dim; ++c) {
      err = std::max(err, std::abs(got[r * dim + c] - want[r * dim + c]) / (1.0 + scale));
      if (std::isnan(got[r * dim + c]) != std::isnan(want[r * dim + c])) err = INFINITY;
    }
    m.bad += err > tolerance ? 1 : 0;
    m.worst = std::max(m.worst, err);
  }
  return m;
}
inline std::vector<double> ToDouble(const std::vector<float>& x) {
  return std::vector<double>(x.begin(), x.end());
}

// Every compiled target this CPU runs, for tests that must cover all SIMD paths.
inline std::vector<std::string> SupportedTargets() { return GetDispatchInfo().supported; }

// Restores the default dispatch when a test that pinned a target ends.
struct ScopedTarget {
  explicit ScopedTarget(const std::string& name) : ok(SelectTarget(name)) {}
  ~ScopedTarget() { SelectTarget(""); }
  bool ok;
};

// The K-interval kernel's forward (docs/math.md §2) on a case: O and the saved statistics the
// backward takes (saved()).
struct KIntervalRun {
  OwnedTensor o;
  std::vector<float> m, R, Z, lse_exact;
  std::vector<int32_t> argmax, argmin;
  KIntervalSaved saved() {
    return {m.data(), R.data(), Z.data(), lse_exact.data(), argmax.data(), argmin.data()};
  }
};
inline KIntervalRun RunKIntervalForward(const AttentionCase& c, const KIntervalOptions& kint,
                                        Layout layout) {
  const AttentionShape& s = c.shape;
  const size_t rows = size_t(s.batch * s.heads * s.q_len);
  KIntervalRun run{OwnedTensor(s.batch, s.heads, s.q_len, s.head_dim, layout),
                   std::vector<float>(rows), std::vector<float>(rows), std::vector<float>(rows),
                   std::vector<float>(rows), std::vector<int32_t>(rows),
                   std::vector<int32_t>(rows)};
  KIntervalForward(s, c.options, kint, {c.q.cview(), c.k.cview(), c.v.cview(), run.o.view(),
                                        run.saved()});
  return run;
}

}  // namespace lpattn::test

#endif  // LPATTN_TESTS_KERNELS_ATTENTION_CASE_H_
