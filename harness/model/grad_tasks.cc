// Weight-gradient tasks (docs/harness.md §1.6).
#include "harness/model/grad_tasks.h"

#include "harness/model/for_blocks.h"

namespace lpattn::harness {
namespace {

// Output channels per sgemm call (dweight and dbias): 64 gives the C x C and 4C -> C products
// of the small preset two blocks each.
constexpr size_t kChannelBlock = 64;
constexpr size_t kLayerNormChannelBlock = 32;  // channels per task of LayerNorm's sums

}  // namespace

void GradTasks::AddMatmul(float* dweight, float* dbias, const float* dout, const float* inp,
                          size_t N, size_t C, size_t OC, DenseFormat format) {
  const DenseOperand g = operands_.Prepare(dout, N * OC, format);
  const DenseOperand x = operands_.Prepare(inp, N * C, format);
  for (size_t o0 = 0; o0 < OC; o0 += kChannelBlock) {
    const size_t o1 = std::min(OC, o0 + kChannelBlock);
    tasks_.emplace_back([=] {
      DenseProduct(Trans::kYes, Trans::kNo, o1 - o0, C, N, g.At(o0), OC, x, C, 1.0f,
                   dweight + o0 * C, C);
      if (dbias == nullptr) return;
      double sums[kChannelBlock] = {};
      for (size_t r = 0; r < N; ++r) {
        for (size_t o = o0; o < o1; ++o) sums[o - o0] += dout[r * OC + o];  // the fp32 gradient
      }
      for (size_t o = o0; o < o1; ++o) dbias[o] += static_cast<float>(sums[o - o0]);
    });
  }
}

void GradTasks::AddLayerNorm(float* dweight, float* dbias, const float* dout, const float* inp,
                             const float* mean, const float* rstd, size_t N, size_t C) {
  for (size_t c0 = 0; c0 < C; c0 += kLayerNormChannelBlock) {
    const size_t c1 = std::min(C, c0 + kLayerNormChannelBlock);
    tasks_.emplace_back([=] {
      for (size_t r = 0; r < N; ++r) {
        const float* x = inp + r * C;
        const float* dy = dout + r * C;
        for (size_t i = c0; i < c1; ++i) {
          dbias[i] += dy[i];
          dweight[i] += (x[i] - mean[r]) * rstd[r] * dy[i];
        }
      }
    });
  }
}

void GradTasks::Run() {
  ForBlocks(tasks_.size(), 1, [&](size_t t, size_t) { tasks_[t](); });
  tasks_.clear();
  operands_.Clear();
}

}  // namespace lpattn::harness
