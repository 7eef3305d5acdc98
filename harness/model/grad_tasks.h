// The weight gradients of a stretch of layers, run as one set of parallel tasks
// (docs/harness.md §1.6): each sums over all rows of the batch, so none of them can join the
// row blocks; gathered, the products and sums of several layers share one parallel region.
// Each task writes its own channels, in the same order whatever runs beside it, so the sums are
// those of the layer functions (layers.h) and bit-identical for any thread count.
#ifndef LPATTN_HARNESS_MODEL_GRAD_TASKS_H_
#define LPATTN_HARNESS_MODEL_GRAD_TASKS_H_

#include <cstddef>
#include <functional>
#include <vector>

#include "harness/model/dense_operand.h"
#include "harness/model/dense_product.h"

namespace lpattn::harness {

class GradTasks {
 public:
  // dweight[OC,C] += dout[N,OC]^T inp[N,C] and dbias[OC] += column sums of dout (in double;
  // dbias may be null): a task per block of output channels (64, fewer for inputs wider than
  // 128, down to 32), one sgemm call over all N rows each. With DenseFormat::kBf16 dout and
  // inp are prepared now (in parallel) and kept until Run; dbias sums the fp32 dout.
  void AddMatmul(float* dweight, float* dbias, const float* dout, const float* inp, size_t N,
                 size_t C, size_t OC, DenseFormat format);
  // LayerNorm's dweight[c] += sum over rows of (inp - mean) rstd dout and dbias[c] += sum of
  // dout, rows in order: a task per block of 32 channels.
  void AddLayerNorm(float* dweight, float* dbias, const float* dout, const float* inp,
                    const float* mean, const float* rstd, size_t N, size_t C);
  // Runs every task added since the last Run in parallel, then forgets them.
  void Run();

 private:
  std::vector<std::function<void()>> tasks_;
  OperandStore operands_;
};

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_MODEL_GRAD_TASKS_H_
