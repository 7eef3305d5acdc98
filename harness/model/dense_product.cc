// Dense products through oneDNN's sgemm (docs/harness.md §1.1).
#include "harness/model/dense_product.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace lpattn::harness {
namespace {

char TransFlag(Trans trans) { return trans == Trans::kYes ? 'T' : 'N'; }

const char* IsaName(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse4.1";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2 + avx_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512 (knl)";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512 (knm)";
    case dnnl_cpu_isa_avx512_core: return "avx512";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512 + vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512 + bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512 + amx";
    default: return "baseline";
  }
}

}  // namespace

DenseFormat ParseDenseFormat(const std::string& name) {
  if (name == "fp32") return DenseFormat::kFp32;
  if (name == "bf16") return DenseFormat::kBf16;
  throw std::invalid_argument("precision '" + name + "': the dense products take fp32 or bf16");
}

const char* DenseFormatName(DenseFormat format) {
  return format == DenseFormat::kBf16 ? "bf16" : "fp32";
}

// Round to nearest even on the upper 16 bits: add 0x7FFF plus the lowest kept bit, then clear
// the low half. A NaN is kept quiet instead (the carry could turn it into an infinity).
void RoundToBf16(const float* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, in + i, sizeof(bits));
    const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
    const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
    bits = nan ? (bits | 0x00400000u) & 0xFFFF0000u : rounded;
    std::memcpy(out + i, &bits, sizeof(bits));
  }
}

void Sgemm(Trans trans_a, Trans trans_b, size_t m, size_t n, size_t k, const float* a, size_t lda,
           const float* b, size_t ldb, float beta, float* c, size_t ldc) {
  // Debian's oneDNN runs on OpenMP: called from a TBB task it would start a team of
  // omp_get_max_threads() threads of its own. The harness already parallelises over fixed blocks,
  // so each call stays in its caller's thread (the setting is per thread), which also keeps the
  // product's summation order, and so the results, independent of the thread count.
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
  const dnnl_status_t status =
      dnnl_sgemm(TransFlag(trans_a), TransFlag(trans_b), dnnl_dim_t(m), dnnl_dim_t(n),
                 dnnl_dim_t(k), 1.0f, a, dnnl_dim_t(lda), b, dnnl_dim_t(ldb), beta, c,
                 dnnl_dim_t(ldc));
  if (status != dnnl_success) {
    throw std::runtime_error("oneDNN sgemm failed (status " + std::to_string(int(status)) +
                             ") on a " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                             std::to_string(k) + " product");
  }
}

std::string DenseProductInfo() {
  const dnnl_version_t* version = dnnl_version();
  return "oneDNN " + std::to_string(version->major) + "." + std::to_string(version->minor) + "." +
         std::to_string(version->patch) + " sgemm, " + IsaName(dnnl_get_effective_cpu_isa()) +
         " kernels (chosen from the CPU's features)";
}

}  // namespace lpattn::harness
