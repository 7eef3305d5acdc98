// Value gates (docs/math.md §1.2): per-target row kernels (Highway) for the gate and its backward, and
// the entry points that validate, split V into row blocks for TBB and reduce the parameter
// gradients in a fixed order.
#include "kernels/value_gate.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/entry/validate.h"
#include "kernels/skeleton/attention_problem.h"
#include "tbb/blocked_range.h"
#include "tbb/parallel_for.h"

#ifndef LPATTN_KERNELS_VALUE_GATE_ONCE_
#define LPATTN_KERNELS_VALUE_GATE_ONCE_
namespace lpattn {
// One kv head's gate: the norm gate's alpha, beta or the projection gate's w (D floats), b.
struct HeadGate {
  bool norm;
  float alpha, beta;
  const float* w;
  float b;
};
}  // namespace lpattn
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/entry/value_gate.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/skeleton/row_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// §1.2 forward of one value: z, g = sigmoid(z), out = g v. Returns g; *norm gets ||v||.
float GateRow(const HeadGate& gate, const float* v, size_t dim, float* out, float* norm) {
  *norm = std::sqrt(RowDot(v, v, dim));
  const float z = gate.norm ? gate.alpha * *norm + gate.beta : RowDot(gate.w, v, dim) + gate.b;
  const float g = 1.0f / (1.0f + std::exp(-z));
  if (out != nullptr) ScaledRow(g, v, dim, out);
  return g;
}

// §1.2 backward of one value: dv = g dv~ + dz dz/dv. Returns dz = (dv~ . v) g (1 - g).
float GateRowBackward(const HeadGate& gate, const float* v, const float* d_gated, size_t dim,
                      float* dv, float* norm) {
  const float g = GateRow(gate, v, dim, nullptr, norm);
  const float dz = RowDot(d_gated, v, dim) * g * (1.0f - g);
  ScaledRow(g, d_gated, dim, dv);
  if (gate.norm) {  // dz/dv = alpha v / ||v||, 0 at v = 0
    if (*norm > 0.0f) AddScaledRow(dz * gate.alpha / *norm, v, dim, dv);
  } else {
    AddScaledRow(dz, gate.w, dim, dv);
  }
  return dz;
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn {

HWY_EXPORT(GateRow);
HWY_EXPORT(GateRowBackward);

namespace {

constexpr int64_t kRowBlock = 256;  // values per task

[[noreturn]] void Fail(const std::string& what) {
  throw std::invalid_argument("lpattn value gate: " + what);
}

// V's shape as an attention shape whose queries mirror the keys, for the shared checks.
AttentionShape ValueShape(const AttentionShape& shape) {
  AttentionShape s = shape;
  s.heads = shape.kv_heads;
  s.q_len = shape.kv_len;
  return s;
}

void CheckParams(const AttentionShape& shape, const ValueGateParams& params) {
  auto finite = [&](const float* values, int64_t n, const char* name) {
    if (values == nullptr) Fail(std::string(name) + " is null");
    for (int64_t x = 0; x < n; ++x) {
      if (!std::isfinite(values[x])) Fail(std::string(name) + "[" + std::to_string(x) + "] is not finite");
    }
  };
  if (params.kind == ValueGateKind::kNorm) {
    finite(params.alpha, shape.kv_heads, "alpha");
    finite(params.beta, shape.kv_heads, "beta");
  } else if (params.kind == ValueGateKind::kProjection) {
    finite(params.w, shape.kv_heads * shape.head_dim, "w");
    finite(params.b, shape.kv_heads, "b");
  } else {
    Fail("unknown gate kind");
  }
}

HeadGate GateOf(const ValueGateParams& params, int64_t h, int64_t dim) {
  if (params.kind == ValueGateKind::kNorm) return {true, params.alpha[h], params.beta[h], nullptr, 0.0f};
  return {false, 0.0f, 0.0f, params.w + h * dim, params.b[h]};
}

// Task t of (batch, kv head, block of kRowBlock values), head-major; calls row(b, h, j) for
// its values in order.
template <class Row>
void ForEachBlock(const AttentionShape& s, int threads, const Row& row) {
  const int64_t blocks = (s.kv_len + kRowBlock - 1) / kRowBlock;
  RunWithThreads(threads, [&] {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, s.batch * s.kv_heads * blocks, 1),
                      [&](const tbb::blocked_range<int64_t>& range) {
      for (int64_t t = range.begin(); t != range.end(); ++t) {
        const int64_t b = t / (s.kv_heads * blocks), h = t / blocks % s.kv_heads;
        const int64_t first = t % blocks * kRowBlock, last = std::min(first + kRowBlock, s.kv_len);
        for (int64_t j = first; j < last; ++j) row(t, b, h, j);
      }
    });
  });
}

const float* RowOf(const ConstTensor& t, int64_t b, int64_t h, int64_t j) {
  return t.data + b * t.strides.batch + h * t.strides.head + j * t.strides.token;
}
float* RowOf(const Tensor& t, int64_t b, int64_t h, int64_t j) {
  return t.data + b * t.strides.batch + h * t.strides.head + j * t.strides.token;
}

}  // namespace

void ValueGateForward(const AttentionShape& shape, const ValueGateParams& params, ConstTensor v,
                      Tensor v_gated, float* gates, int threads) {
  const AttentionShape s = ValueShape(shape);
  ValidateShapeAndOptions(s, AttentionOptions{});
  if (threads < 0) Fail("threads must be >= 0, got " + std::to_string(threads));
  ValidateKeyShaped(v, s, "v");
  ValidateKeyShaped(v_gated, s, "v_gated");
  CheckParams(s, params);
  const size_t dim = size_t(s.head_dim);
  ForEachBlock(s, threads, [&](int64_t, int64_t b, int64_t h, int64_t j) {
    float norm = 0.0f;
    const float g = HWY_DYNAMIC_DISPATCH(GateRow)(GateOf(params, h, s.head_dim), RowOf(v, b, h, j),
                                                  dim, RowOf(v_gated, b, h, j), &norm);
    if (gates != nullptr) gates[(b * s.kv_heads + h) * s.kv_len + j] = g;
  });
}

void ValueGateBackward(const AttentionShape& shape, const ValueGateParams& params, ConstTensor v,
                       ConstTensor d_v_gated, Tensor dv, const ValueGateGrads& grads,
                       int threads) {
  const AttentionShape s = ValueShape(shape);
  ValidateShapeAndOptions(s, AttentionOptions{});
  if (threads < 0) Fail("threads must be >= 0, got " + std::to_string(threads));
  ValidateKeyShaped(v, s, "v");
  ValidateKeyShaped(d_v_gated, s, "d_v_gated");
  ValidateKeyShaped(dv, s, "dv");
  CheckParams(s, params);
  const bool norm_gate = params.kind == ValueGateKind::kNorm;
  if (norm_gate && (grads.alpha == nullptr || grads.beta == nullptr)) {
    Fail("grads.alpha and grads.beta must not be null for the norm gate");
  }
  if (!norm_gate && (grads.w == nullptr || grads.b == nullptr)) {
    Fail("grads.w and grads.b must not be null for the projection gate");
  }
  const size_t dim = size_t(s.head_dim);
  // Per task: d alpha (or d w, D floats) then d beta (or d b), summed in double.
  const size_t width = norm_gate ? 2 : dim + 1;
  const int64_t blocks = (s.kv_len + kRowBlock - 1) / kRowBlock;
  std::vector<double> partials(size_t(s.batch * s.kv_heads * blocks) * width, 0.0);
  ForEachBlock(s, threads, [&](int64_t task, int64_t b, int64_t h, int64_t j) {
    float norm = 0.0f;
    const float* v_row = RowOf(v, b, h, j);
    const float dz = HWY_DYNAMIC_DISPATCH(GateRowBackward)(
        GateOf(params, h, s.head_dim), v_row, RowOf(d_v_gated, b, h, j), dim, RowOf(dv, b, h, j),
        &norm);
    double* sums = partials.data() + size_t(task) * width;
    if (norm_gate) {
      sums[0] += double(dz) * norm;
    } else {
      for (size_t c = 0; c < dim; ++c) sums[c] += double(dz) * v_row[c];
    }
    sums[width - 1] += dz;
  });
  for (int64_t h = 0; h < s.kv_heads; ++h) {  // tasks of head h in (batch, block) order
    std::vector<double> total(width, 0.0);
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t block = 0; block < blocks; ++block) {
        const double* sums = partials.data() + size_t((b * s.kv_heads + h) * blocks + block) * width;
        for (size_t x = 0; x < width; ++x) total[x] += sums[x];
      }
    }
    if (norm_gate) {
      grads.alpha[h] = float(total[0]);
      grads.beta[h] = float(total[1]);
    } else {
      for (size_t c = 0; c < dim; ++c) grads.w[size_t(h) * dim + c] = float(total[c]);
      grads.b[h] = float(total[dim]);
    }
  }
}

}  // namespace lpattn
#endif  // HWY_ONCE
