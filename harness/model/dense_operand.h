// The operands of the harness's dense products as a format reads them (docs/harness.md §1.1):
// fp32 values as they are, bf16-rounded fp32 copies (simulated bf16) or bf16 codes (native
// bf16 products), and the product on them.
#ifndef LPATTN_HARNESS_MODEL_DENSE_OPERAND_H_
#define LPATTN_HARNESS_MODEL_DENSE_OPERAND_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "harness/model/dense_product.h"

namespace lpattn::harness {

// One operand as the product reads it: values (fp32, or bf16 simulated on rounded copies) or
// bf16 codes (native); exactly one is set.
struct DenseOperand {
  const float* values = nullptr;
  const uint16_t* codes = nullptr;
  DenseOperand At(size_t offset) const {
    return {values != nullptr ? values + offset : nullptr,
            codes != nullptr ? codes + offset : nullptr};
  }
};

// Keeps prepared copies alive until Clear(); their memory is kept for the next use, so a model
// that prepares the same operands every step allocates once.
class OperandStore {
 public:
  // n values as `format`'s products read them, prepared in parallel blocks (fp32: the values
  // themselves, nothing copied). Valid until Clear().
  DenseOperand Prepare(const float* values, size_t n, DenseFormat format);
  void Clear() { used_rounded_ = used_codes_ = 0; }

 private:
  std::deque<std::vector<float>> rounded_;
  std::deque<std::vector<uint16_t>> codes_;
  size_t used_rounded_ = 0, used_codes_ = 0;
};

// n values prepared in the calling thread, into a scratch buffer of that thread (one per
// `slot`, 0 or 1) that the next call with the same slot reuses: a block's rows, for a product
// run in the same task.
DenseOperand PrepareInThread(int slot, const float* values, size_t n, DenseFormat format);

// C[m,n] = op(A) op(B) + beta C on prepared operands (both in the same form), in the calling
// thread.
void DenseProduct(Trans ta, Trans tb, size_t m, size_t n, size_t k, DenseOperand a, size_t lda,
                  DenseOperand b, size_t ldb, float beta, float* c, size_t ldc);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_MODEL_DENSE_OPERAND_H_
