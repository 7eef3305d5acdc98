// Dense products through oneDNN's sgemm (docs/harness.md §1.1).
#include "harness/model/dense_product.h"

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

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

// oneDNN runs on OpenMP: hold the calling thread's team at one thread (see Sgemm).
void OneOpenMpThread() {
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
}

const dnnl::engine& CpuEngine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A bf16 x bf16 -> fp32 matmul of one shape and layout: dst = op(A) op(B) (+ dst with beta 1,
// a sum post-op). Strides describe the transposes, so no operand is copied.
struct Bf16Matmul {
  dnnl::memory::desc a, b, c;
  dnnl::matmul primitive;
  std::string impl;
};

Bf16Matmul MakeBf16Matmul(Trans ta, Trans tb, size_t m, size_t n, size_t k, size_t lda,
                          size_t ldb, size_t ldc, bool accumulate) {
  using dims = dnnl::memory::dims;
  using dt = dnnl::memory::data_type;
  const auto d = [](size_t v) { return dnnl::memory::dim(v); };
  Bf16Matmul mm;
  mm.a = dnnl::memory::desc(dims{d(m), d(k)}, dt::bf16,
                            ta == Trans::kNo ? dims{d(lda), 1} : dims{1, d(lda)});
  mm.b = dnnl::memory::desc(dims{d(k), d(n)}, dt::bf16,
                            tb == Trans::kNo ? dims{d(ldb), 1} : dims{1, d(ldb)});
  mm.c = dnnl::memory::desc(dims{d(m), d(n)}, dt::f32, dims{d(ldc), 1});
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    attr.set_post_ops(sum);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(mm.a, mm.b, mm.c), attr, CpuEngine());
  mm.impl = pd.impl_info_str();
  mm.primitive = dnnl::matmul(pd);
  return mm;
}

}  // namespace

bool NativeBf16Products() {
  static const bool native = [] {
    try {
      OneOpenMpThread();
      const Bf16Matmul probe = MakeBf16Matmul(Trans::kNo, Trans::kYes, 64, 64, 64, 64, 64, 64,
                                              true);
      return probe.impl.rfind("ref", 0) != 0;  // oneDNN's reference code is no native path
    } catch (const dnnl::error&) {
      return false;  // no bf16 matmul for this CPU
    }
  }();
  return native;
}

void GemmBf16(Trans trans_a, Trans trans_b, size_t m, size_t n, size_t k, const uint16_t* a,
              size_t lda, const uint16_t* b, size_t ldb, float beta, float* c, size_t ldc) {
  if (!NativeBf16Products()) {
    throw std::logic_error("GemmBf16: this CPU has no native bf16 products (simulate them)");
  }
  OneOpenMpThread();
  using Key = std::tuple<int, int, size_t, size_t, size_t, size_t, size_t, size_t, bool>;
  thread_local std::map<Key, Bf16Matmul> cache;
  const Key key{int(trans_a), int(trans_b), m, n, k, lda, ldb, ldc, beta != 0.0f};
  auto it = cache.find(key);
  if (it == cache.end()) {
    it = cache.emplace(key, MakeBf16Matmul(trans_a, trans_b, m, n, k, lda, ldb, ldc,
                                           beta != 0.0f))
             .first;
  }
  const Bf16Matmul& mm = it->second;
  dnnl::stream stream(CpuEngine());
  mm.primitive.execute(
      stream, {{DNNL_ARG_SRC, dnnl::memory(mm.a, CpuEngine(), const_cast<uint16_t*>(a))},
               {DNNL_ARG_WEIGHTS, dnnl::memory(mm.b, CpuEngine(), const_cast<uint16_t*>(b))},
               {DNNL_ARG_DST, dnnl::memory(mm.c, CpuEngine(), c)}});
  stream.wait();
}

DenseFormat ParseDenseFormat(const std::string& name) {
  if (name == "fp32") return DenseFormat::kFp32;
  if (name == "bf16") return DenseFormat::kBf16;
  throw std::invalid_argument("precision '" + name + "': the dense products take fp32 or bf16");
}

const char* DenseFormatName(DenseFormat format) {
  return format == DenseFormat::kBf16 ? "bf16" : "fp32";
}

void Sgemm(Trans trans_a, Trans trans_b, size_t m, size_t n, size_t k, const float* a, size_t lda,
           const float* b, size_t ldb, float beta, float* c, size_t ldc) {
  // Debian's oneDNN runs on OpenMP: called from a TBB task it would start a team of
  // omp_get_max_threads() threads of its own. The harness already parallelises over fixed blocks,
  // so each call stays in its caller's thread (the setting is per thread), which also keeps the
  // product's summation order, and so the results, independent of the thread count.
  OneOpenMpThread();
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
         " kernels (chosen from the CPU's features); --precision bf16: " +
         (NativeBf16Products() ? "oneDNN bf16 matmul on the CPU's bf16 units"
                               : "simulated (bf16-rounded operands through the fp32 sgemm)");
}

}  // namespace lpattn::harness
