// The harness's dense products (docs/harness.md §1.1): row-major single-precision GEMM through
// oneDNN's sgemm, which picks its kernels from the CPU's features (cpuid), not from a table of
// CPU models, so a CPU newer than the library still gets its widest vectors.
#ifndef LPATTN_HARNESS_MODEL_DENSE_PRODUCT_H_
#define LPATTN_HARNESS_MODEL_DENSE_PRODUCT_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace lpattn::harness {

enum class Trans { kNo, kYes };

// The operands of a dense product: fp32, or bf16 (mixed precision: both operands rounded to the
// nearest bf16, ties to even, the products accumulated in fp32; master weights, gradients,
// optimizer state and every reduction stay fp32). bf16 keeps fp32's exponent range, so no loss
// scaling is needed.
enum class DenseFormat { kFp32, kBf16 };

// "fp32" or "bf16"; throws std::invalid_argument naming the two for anything else.
DenseFormat ParseDenseFormat(const std::string& name);
const char* DenseFormatName(DenseFormat format);

// out[i] = in[i] rounded to the nearest bf16 (ties to even), kept as an fp32 value; infinities
// stay, NaN stays NaN. in and out may be the same array.
void RoundToBf16(const float* in, float* out, size_t n);

// C[m,n] = op(A)[m,k] op(B)[k,n] + beta C, row-major, in the calling thread. Throws
// std::runtime_error if oneDNN refuses the call.
void Sgemm(Trans trans_a, Trans trans_b, size_t m, size_t n, size_t k, const float* a,
           size_t lda, const float* b, size_t ldb, float beta, float* c, size_t ldc);

// Whether this CPU multiplies bf16 operands natively: oneDNN has a bf16 matmul for it that is
// not its reference code (AVX512_BF16 dot products or AMX tiles). Decided once per process.
bool NativeBf16Products();

// out[i] = the bf16 code of in[i] rounded to nearest even (the upper half of RoundToBf16's
// result).
void EncodeBf16Values(const float* in, uint16_t* out, size_t n);

// As Sgemm, with A and B as bf16 codes and fp32 accumulation, through oneDNN's matmul (one
// primitive per shape, cached per thread). Only where NativeBf16Products(); throws otherwise.
void GemmBf16(Trans trans_a, Trans trans_b, size_t m, size_t n, size_t k, const uint16_t* a,
              size_t lda, const uint16_t* b, size_t ldb, float beta, float* c, size_t ldc);

// One line for `lpattn info`: the library, its version and the instruction set it runs on
// this CPU, and how bf16 products run, e.g. "oneDNN 2.6.3 sgemm, avx2 kernels; bf16: ...".
std::string DenseProductInfo();

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_MODEL_DENSE_PRODUCT_H_
