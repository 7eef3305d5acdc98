// Weight-gradient tasks (docs/harness.md §1.6).
#include "harness/model/grad_tasks.h"

#include <algorithm>

#include "harness/model/column_sums.h"
#include "harness/model/for_blocks.h"

namespace lpattn::harness {
namespace {

// Output channels per sgemm call (dweight and dbias): 64 gives the C x C product of the small
// preset two blocks. Wider inputs take fewer channels a task, down to 32, so that tasks are
// closer in size: a few much longer than the others would leave a thread waiting at the end of
// the set. Not fewer: an sgemm of 16 channels ran 5-10% slower a FLOP than one of 64, one of 32
// 1-3% (docs/performance.md §4.22).
constexpr size_t kChannelBlock = 64;
size_t ChannelBlock(size_t C) {
  return std::clamp<size_t>(kChannelBlock * 128 / std::max<size_t>(C, 1) / 32 * 32, 32,
                            kChannelBlock);
}
constexpr size_t kLayerNormChannelBlock = 32;  // channels per task of LayerNorm's sums

}  // namespace

void GradTasks::AddMatmul(float* dweight, float* dbias, const float* dout, const float* inp,
                          size_t N, size_t C, size_t OC, DenseFormat format) {
  const DenseOperand g = operands_.Prepare(dout, N * OC, format);
  const DenseOperand x = operands_.Prepare(inp, N * C, format);
  const size_t block = ChannelBlock(C);
  for (size_t o0 = 0; o0 < OC; o0 += block) {
    const size_t o1 = std::min(OC, o0 + block);
    tasks_.emplace_back([=] {
      DenseProduct(Trans::kYes, Trans::kNo, o1 - o0, C, N, g.At(o0), OC, x, C, 1.0f,
                   dweight + o0 * C, C);
      if (dbias == nullptr) return;
      double sums[kChannelBlock] = {};
      AddColumnSumsSimd(sums, dout + o0, N, OC, o1 - o0);  // the fp32 gradient
      for (size_t o = o0; o < o1; ++o) dbias[o] += static_cast<float>(sums[o - o0]);
    });
  }
}

void GradTasks::AddLayerNorm(float* dweight, float* dbias, const float* dout, const float* inp,
                             const float* mean, const float* rstd, size_t N, size_t C) {
  for (size_t c0 = 0; c0 < C; c0 += kLayerNormChannelBlock) {
    const size_t c1 = std::min(C, c0 + kLayerNormChannelBlock);
    tasks_.emplace_back(
        [=] { AddLayerNormParamGradsSimd(dweight, dbias, dout, inp, mean, rstd, N, C, c0, c1); });
  }
}

void GradTasks::Run() {
  ForBlocks(tasks_.size(), 1, [&](size_t t, size_t) { tasks_[t](); });
  tasks_.clear();
  operands_.Clear();
}

}  // namespace lpattn::harness
