// The harness's dense products (docs/harness.md §1.1): row-major single-precision GEMM through
// oneDNN's sgemm, which picks its kernels from the CPU's features (cpuid), not from a table of
// CPU models, so a CPU newer than the library still gets its widest vectors.
#ifndef LPATTN_HARNESS_MODEL_DENSE_PRODUCT_H_
#define LPATTN_HARNESS_MODEL_DENSE_PRODUCT_H_

#include <cstddef>
#include <string>

namespace lpattn::harness {

enum class Trans { kNo, kYes };

// C[m,n] = op(A)[m,k] op(B)[k,n] + beta C, row-major, in the calling thread. Throws
// std::runtime_error if oneDNN refuses the call.
void Sgemm(Trans trans_a, Trans trans_b, size_t m, size_t n, size_t k, const float* a,
           size_t lda, const float* b, size_t ldb, float beta, float* c, size_t ldc);

// One line for `lpattn info`: the library, its version and the instruction set it runs on
// this CPU, e.g. "oneDNN 2.6.3 sgemm, avx2 kernels".
std::string DenseProductInfo();

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_MODEL_DENSE_PRODUCT_H_
