// Operands prepared for the dense products (docs/harness.md §1.1).
#include "harness/model/dense_operand.h"

#include "harness/model/for_blocks.h"

namespace lpattn::harness {
namespace {

constexpr size_t kElementBlock = 1 << 14;  // elements per task of a parallel preparation

// Writes the prepared form of values[0, n) into codes (native) or rounded (simulated).
void PrepareSpan(const float* values, size_t n, uint16_t* codes, float* rounded) {
  if (codes != nullptr) {
    EncodeBf16Values(values, codes, n);
  } else {
    RoundToBf16(values, rounded, n);
  }
}

template <class T>
T* Slot(std::deque<std::vector<T>>& slots, size_t& used, size_t n) {
  if (used == slots.size()) slots.emplace_back();
  std::vector<T>& slot = slots[used++];
  if (slot.size() < n) slot.resize(n);
  return slot.data();
}

}  // namespace

DenseOperand OperandStore::Prepare(const float* values, size_t n, DenseFormat format) {
  if (format == DenseFormat::kFp32) return {values, nullptr};
  uint16_t* codes = NativeBf16Products() ? Slot(codes_, used_codes_, n) : nullptr;
  float* rounded = codes == nullptr ? Slot(rounded_, used_rounded_, n) : nullptr;
  ForBlocks(n, kElementBlock, [&](size_t i0, size_t i1) {
    PrepareSpan(values + i0, i1 - i0, codes != nullptr ? codes + i0 : nullptr,
                rounded != nullptr ? rounded + i0 : nullptr);
  });
  if (codes != nullptr) return {nullptr, codes};
  return {rounded, nullptr};
}

DenseOperand PrepareInThread(int slot, const float* values, size_t n, DenseFormat format) {
  if (format == DenseFormat::kFp32) return {values, nullptr};
  thread_local std::vector<uint16_t> codes[2];
  thread_local std::vector<float> rounded[2];
  if (NativeBf16Products()) {
    if (codes[slot].size() < n) codes[slot].resize(n);
    PrepareSpan(values, n, codes[slot].data(), nullptr);
    return {nullptr, codes[slot].data()};
  }
  if (rounded[slot].size() < n) rounded[slot].resize(n);
  PrepareSpan(values, n, nullptr, rounded[slot].data());
  return {rounded[slot].data(), nullptr};
}

void DenseProduct(Trans ta, Trans tb, size_t m, size_t n, size_t k, DenseOperand a, size_t lda,
                  DenseOperand b, size_t ldb, float beta, float* c, size_t ldc) {
  if (a.codes != nullptr) {
    return GemmBf16(ta, tb, m, n, k, a.codes, lda, b.codes, ldb, beta, c, ldc);
  }
  Sgemm(ta, tb, m, n, k, a.values, lda, b.values, ldb, beta, c, ldc);
}

}  // namespace lpattn::harness
