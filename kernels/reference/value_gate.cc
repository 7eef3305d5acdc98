// fp64 reference of the value gates (docs/math.md §1.2) and the dense copy of a tensor view.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/reference.h"
#include "kernels/reference/reference_rows.h"

namespace lpattn {
using namespace reference_internal;  // the shared helpers of reference_rows.h

namespace {

// One value's gate input z and its norm, §1.2.
double GateInput(const ReferenceValueGateParams& params, int64_t h, const double* v, int64_t dim,
                 double* norm) {
  *norm = std::sqrt(Dot(v, v, dim));
  if (params.kind == ValueGateKind::kNorm) {
    return params.alpha[size_t(h)] * *norm + params.beta[size_t(h)];
  }
  return Dot(&params.w[size_t(h * dim)], v, dim) + params.b[size_t(h)];
}

double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

void CheckValueGate(const AttentionShape& shape, const ReferenceValueGateParams& params,
                    const std::vector<double>& v) {
  CheckSize(v, shape.batch * shape.kv_heads * shape.kv_len * shape.head_dim, "v");
  if (params.kind == ValueGateKind::kNorm) {
    CheckSize(params.alpha, shape.kv_heads, "alpha");
    CheckSize(params.beta, shape.kv_heads, "beta");
  } else {
    CheckSize(params.w, shape.kv_heads * shape.head_dim, "w");
    CheckSize(params.b, shape.kv_heads, "b");
  }
}

}  // namespace

std::vector<double> ReferenceValueGateForward(const AttentionShape& shape,
                                              const ReferenceValueGateParams& params,
                                              const std::vector<double>& v,
                                              std::vector<double>* gates) {
  CheckValueGate(shape, params, v);
  const int64_t dim = shape.head_dim;
  std::vector<double> out(v.size());
  if (gates != nullptr) gates->assign(v.size() / size_t(dim), 0.0);
  for (size_t r = 0; r < v.size() / size_t(dim); ++r) {
    const int64_t h = int64_t(r) / shape.kv_len % shape.kv_heads;
    double norm = 0.0;
    const double g = Sigmoid(GateInput(params, h, &v[r * size_t(dim)], dim, &norm));
    if (gates != nullptr) (*gates)[r] = g;
    for (int64_t c = 0; c < dim; ++c) out[r * size_t(dim) + size_t(c)] = g * v[r * size_t(dim) + size_t(c)];
  }
  return out;
}

ReferenceValueGateGrads ReferenceValueGateBackward(const AttentionShape& shape,
                                                   const ReferenceValueGateParams& params,
                                                   const std::vector<double>& v,
                                                   const std::vector<double>& d_v_gated) {
  CheckValueGate(shape, params, v);
  CheckSize(d_v_gated, int64_t(v.size()), "d_v_gated");
  const int64_t dim = shape.head_dim;
  const bool norm_gate = params.kind == ValueGateKind::kNorm;
  ReferenceValueGateGrads grads;
  grads.dv.assign(v.size(), 0.0);
  if (norm_gate) {
    grads.alpha.assign(size_t(shape.kv_heads), 0.0);
    grads.beta.assign(size_t(shape.kv_heads), 0.0);
  } else {
    grads.w.assign(size_t(shape.kv_heads * dim), 0.0);
    grads.b.assign(size_t(shape.kv_heads), 0.0);
  }
  for (size_t r = 0; r < v.size() / size_t(dim); ++r) {
    const int64_t h = int64_t(r) / shape.kv_len % shape.kv_heads;
    const double* v_r = &v[r * size_t(dim)];
    const double* dg_r = &d_v_gated[r * size_t(dim)];
    double norm = 0.0;
    const double g = Sigmoid(GateInput(params, h, v_r, dim, &norm));
    const double dz = Dot(dg_r, v_r, dim) * g * (1.0 - g);  // dL/dz through v~ = g v
    for (int64_t c = 0; c < dim; ++c) {
      const double dz_dv = norm_gate ? (norm > 0.0 ? params.alpha[size_t(h)] * v_r[c] / norm : 0.0)
                                     : params.w[size_t(h * dim + c)];
      grads.dv[r * size_t(dim) + size_t(c)] = g * dg_r[c] + dz * dz_dv;
      if (!norm_gate) grads.w[size_t(h * dim + c)] += dz * v_r[c];
    }
    if (norm_gate) {
      grads.alpha[size_t(h)] += dz * norm;
      grads.beta[size_t(h)] += dz;
    } else {
      grads.b[size_t(h)] += dz;
    }
  }
  return grads;
}

std::vector<double> DenseFromView(ConstTensor t, int64_t batch, int64_t heads, int64_t tokens,
                                  int64_t dim) {
  std::vector<double> dense;
  dense.reserve(static_cast<size_t>(batch * heads * tokens * dim));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t_idx = 0; t_idx < tokens; ++t_idx) {
        const float* row =
            t.data + b * t.strides.batch + h * t.strides.head + t_idx * t.strides.token;
        for (int64_t d = 0; d < dim; ++d) dense.push_back(static_cast<double>(row[d]));
      }
    }
  }
  return dense;
}

}  // namespace lpattn
