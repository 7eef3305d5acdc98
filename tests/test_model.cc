// The whole GPT's gradient against central finite differences of its loss, per arm, on a
// sample of parameters from every tensor (spec/harness.md §1; the layers have their own
// finite-difference tests in test_layers.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "harness/data.h"
#include "harness/model.h"
#include "tbb/task_arena.h"

namespace lpattn::harness {
namespace {

// Random bytes from a small alphabet, B windows of T + 1.
std::vector<uint8_t> Window(size_t B, size_t T, uint64_t seed) {
  std::vector<uint8_t> w(B * (T + 1));
  for (size_t i = 0; i < w.size(); ++i) w[i] = uint8_t('a' + SplitMix64(seed, 9, i) % 12);
  return w;
}

class ModelGradientTest : public ::testing::TestWithParam<std::string> {};

// Float forward passes make the finite differences noisy: with h = 2e-3 the truncation error
// (O(h^2); at h = 1e-2 it reaches 14% on position embeddings feeding a LayerNorm) and the
// rounding error (about eps * |L| / h = 2e-4) both stay well under the bound
// 2% |g| + 5e-4. A parameter is checked when its gradient is at least 1% of the tensor's
// largest and at least 0.01, where that bound is meaningful: a gradient off by 10% fails it.
TEST_P(ModelGradientTest, MatchesFiniteDifferences) {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 16;
  m.context = 8;
  const size_t B = 2, T = 8;
  Gpt model(m, GetParam(), B);
  model.InitParams(5);
  // Larger than the 0.02 init so every path carries signal (and the sink logits are nonzero).
  for (float& p : model.params()) p *= 5.0f;
  const std::vector<uint8_t> w = Window(B, T, 1);
  std::vector<uint8_t> in, tg;
  for (size_t b = 0; b < B; ++b) {
    in.insert(in.end(), w.begin() + long(b * (T + 1)), w.begin() + long(b * (T + 1) + T));
    tg.insert(tg.end(), w.begin() + long(b * (T + 1) + 1), w.begin() + long((b + 1) * (T + 1)));
  }
  tbb::task_arena arena(1);
  arena.execute([&] {
    model.Forward(in.data(), tg.data(), B);
    model.Backward();
    const std::vector<float> grads = model.grads();
    size_t checked = 0;
    for (const ParamTensor& t : model.tensors()) {
      float largest = 0.0f;
      for (size_t i = t.offset; i < t.offset + t.size; ++i) largest = std::max(largest, std::abs(grads[i]));
      if (largest == 0.0f) continue;
      // Up to 6 elements per tensor: the largest gradient and evenly spaced others.
      std::vector<size_t> sample = {size_t(std::max_element(grads.begin() + long(t.offset),
                                                          grads.begin() + long(t.offset + t.size),
                                                          [](float a, float b) { return std::abs(a) < std::abs(b); }) -
                                           grads.begin())};
      for (size_t k = 1; k < 6; ++k) sample.push_back(t.offset + k * t.size / 6);
      for (size_t i : sample) {
        if (std::abs(grads[i]) < std::max(0.01f * largest, 0.01f)) continue;
        const float saved = model.params()[i];
        const float h = 2e-3f;
        model.params()[i] = saved + h;
        const double up = model.Forward(in.data(), tg.data(), B);
        model.params()[i] = saved - h;
        const double down = model.Forward(in.data(), tg.data(), B);
        model.params()[i] = saved;
        const double fd = (up - down) / (2.0 * h);
        const double bound = 0.02 * std::abs(grads[i]) + 5e-4;
        EXPECT_NEAR(fd, grads[i], bound) << t.name << " element " << i - t.offset;
        EXPECT_GT(std::abs(fd - 1.1 * grads[i]), bound)
            << "the bound would not catch a 10% error at " << t.name;
        ++checked;
      }
    }
    EXPECT_GT(checked, model.tensors().size());
  });
}

INSTANTIATE_TEST_SUITE_P(Arms, ModelGradientTest,
                         ::testing::Values("exact", "sink", "offbyone", "outgate"));

TEST(Model, UnknownArmIsRejected) {
  EXPECT_THROW(Gpt(ModelConfig{}, "softmax2", 1), std::invalid_argument);
}

TEST(Model, InitIsDeterministic) {
  Gpt a(ModelConfig{}, "exact", 1), b(ModelConfig{}, "exact", 1);
  a.InitParams(3);
  b.InitParams(3);
  EXPECT_EQ(a.params(), b.params());
  b.InitParams(4);
  EXPECT_NE(a.params(), b.params());
}

}  // namespace
}  // namespace lpattn::harness
