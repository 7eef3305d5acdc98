// Embeds the installed lpattn from C++: causal grouped-query attention over [B, T, H, D]
// tensors (the layout a fused QKV projection produces), forward and backward, with one
// output row checked against softmax computed by hand.
//
//   find_package(lpattn) in CMake, or: c++ -std=c++20 main.cc $(pkg-config --cflags --libs lpattn)
#include <lpattn/kernels/attention.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  constexpr int64_t kTokens = 100, kHeads = 8, kKvHeads = 2, kDim = 64;
  const lpattn::AttentionShape shape{.batch = 1, .heads = kHeads, .kv_heads = kKvHeads,
                                     .q_len = kTokens, .kv_len = kTokens, .head_dim = kDim};
  const lpattn::Strides q_strides = lpattn::ContiguousBTHD(kHeads, kTokens, kDim);
  const lpattn::Strides kv_strides = lpattn::ContiguousBTHD(kKvHeads, kTokens, kDim);

  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random_tensor = [&](int64_t heads) {
    std::vector<float> t(size_t(kTokens * heads * kDim));
    for (float& x : t) x = normal(rng);
    return t;
  };
  const std::vector<float> q = random_tensor(kHeads), k = random_tensor(kKvHeads),
                           v = random_tensor(kKvHeads), d_o = random_tensor(kHeads);
  std::vector<float> o(q.size()), lse(size_t(kHeads * kTokens));

  lpattn::AttentionOptions options;
  options.causal = true;
  lpattn::ExactForward(shape, options,
                       {.q = {q.data(), q_strides}, .k = {k.data(), kv_strides},
                        .v = {v.data(), kv_strides}, .o = {o.data(), q_strides},
                        .lse = lse.data()});

  // By hand: query head 5 (kv head 5 / 4 = 1), token 40 sees keys 0..40.
  const int64_t head = 5, kv_head = head / (kHeads / kKvHeads), row = 40;
  auto at = [](const std::vector<float>& t, const lpattn::Strides& s, int64_t h, int64_t i) {
    return &t[size_t(h * s.head + i * s.token)];
  };
  std::vector<double> weights(size_t(row + 1));
  double max_score = -INFINITY, z = 0.0;
  for (int64_t j = 0; j <= row; ++j) {
    double dot = 0.0;
    for (int64_t c = 0; c < kDim; ++c) {
      dot += double(at(q, q_strides, head, row)[c]) * at(k, kv_strides, kv_head, j)[c];
    }
    weights[size_t(j)] = dot / std::sqrt(double(kDim));
    max_score = std::max(max_score, weights[size_t(j)]);
  }
  for (double& w : weights) z += (w = std::exp(w - max_score));
  double max_error = 0.0;
  for (int64_t c = 0; c < kDim; ++c) {
    double expected = 0.0;
    for (int64_t j = 0; j <= row; ++j) {
      expected += weights[size_t(j)] / z * at(v, kv_strides, kv_head, j)[c];
    }
    max_error = std::max(max_error, std::abs(expected - at(o, q_strides, head, row)[c]));
  }

  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  lpattn::BackwardArgs grads;
  grads.q = {q.data(), q_strides};
  grads.k = {k.data(), kv_strides};
  grads.v = {v.data(), kv_strides};
  grads.o = {o.data(), q_strides};
  grads.d_o = {d_o.data(), q_strides};
  grads.lse = lse.data();
  grads.dq = {dq.data(), q_strides};
  grads.dk = {dk.data(), kv_strides};
  grads.dv = {dv.data(), kv_strides};
  lpattn::ExactBackward(shape, options, grads);
  double dv_sum = 0.0;
  for (float x : dv) dv_sum += x;

  const lpattn::DispatchInfo info = lpattn::GetDispatchInfo();
  std::printf("target %s: max |o - by hand| on row %lld = %.2e; sum of dV = %.4f\n",
              info.chosen.c_str(), static_cast<long long>(row), max_error, dv_sum);
  // dV's entries sum to sum_i dO_i (each row's weights sum to 1): a check of the backward.
  double d_o_sum = 0.0;
  for (float x : d_o) d_o_sum += x;
  const bool ok = max_error < 1e-5 && std::abs(dv_sum - d_o_sum) < 1e-3 * (1 + std::abs(d_o_sum));
  std::printf("%s\n", ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
