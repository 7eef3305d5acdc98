// The harness's dense products (harness/model/dense_product.h): every transposition against a
// double-precision product on strided operands, beta's accumulate and overwrite, and the same
// bits from a thread whose OpenMP setting would start a team (docs/harness.md §1.1).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "harness/model/dense_product.h"

namespace lpattn::harness {
namespace {

struct Operands {
  size_t m, n, k, lda, ldb, ldc;
  Trans ta, tb;
  std::vector<float> a, b, c;
};

// op(A) is m x k and op(B) k x n; every leading dimension has 3 spare columns, so a product
// that ignores them or reads past a row shows up.
Operands MakeOperands(Trans ta, Trans tb, size_t m, size_t n, size_t k) {
  Operands o{m, n, k, (ta == Trans::kNo ? k : m) + 3, (tb == Trans::kNo ? n : k) + 3, n + 3,
             ta, tb, {}, {}, {}};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  o.a.resize((ta == Trans::kNo ? m : k) * o.lda);
  o.b.resize((tb == Trans::kNo ? k : n) * o.ldb);
  o.c.resize(m * o.ldc);
  for (float& x : o.a) x = uniform(rng);
  for (float& x : o.b) x = uniform(rng);
  for (float& x : o.c) x = uniform(rng);
  return o;
}

double ElementA(const Operands& o, size_t i, size_t p) {
  return o.ta == Trans::kNo ? o.a[i * o.lda + p] : o.a[p * o.lda + i];
}
double ElementB(const Operands& o, size_t p, size_t j) {
  return o.tb == Trans::kNo ? o.b[p * o.ldb + j] : o.b[j * o.ldb + p];
}

void CheckAgainstDouble(Trans ta, Trans tb, float beta) {
  Operands o = MakeOperands(ta, tb, 37, 29, 67);
  const std::vector<float> c0 = o.c;
  Sgemm(ta, tb, o.m, o.n, o.k, o.a.data(), o.lda, o.b.data(), o.ldb, beta, o.c.data(), o.ldc);
  for (size_t i = 0; i < o.m; ++i) {
    for (size_t j = 0; j < o.ldc; ++j) {
      if (j >= o.n) {  // the spare columns are not written
        ASSERT_EQ(o.c[i * o.ldc + j], c0[i * o.ldc + j]) << "spare column " << j;
        continue;
      }
      double sum = beta * double(c0[i * o.ldc + j]), magnitude = std::fabs(sum);
      for (size_t p = 0; p < o.k; ++p) {
        sum += ElementA(o, i, p) * ElementB(o, p, j);
        magnitude += std::fabs(ElementA(o, i, p) * ElementB(o, p, j));
      }
      // fp32 accumulation over k = 67 terms: within k ulps of the sum of magnitudes.
      ASSERT_NEAR(o.c[i * o.ldc + j], sum, 67 * 6e-8 * magnitude + 1e-6) << i << "," << j;
    }
  }
}

TEST(DenseProduct, EveryTranspositionMatchesDoubleSums) {
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      SCOPED_TRACE(std::string(ta == Trans::kYes ? "T" : "N") + (tb == Trans::kYes ? "T" : "N"));
      CheckAgainstDouble(ta, tb, 0.0f);
      CheckAgainstDouble(ta, tb, 1.0f);
    }
  }
}

// oneDNN runs on OpenMP: a thread that asks for a team of 4 must still get the product computed
// in one thread, in the same order, so that training results do not depend on thread settings.
TEST(DenseProduct, ThreadSettingsDoNotChangeTheBits) {
  Operands one = MakeOperands(Trans::kYes, Trans::kNo, 64, 128, 768);
  Operands four = one;
  Sgemm(one.ta, one.tb, one.m, one.n, one.k, one.a.data(), one.lda, one.b.data(), one.ldb, 1.0f,
        one.c.data(), one.ldc);
  std::thread([&] {
    omp_set_num_threads(4);
    Sgemm(four.ta, four.tb, four.m, four.n, four.k, four.a.data(), four.lda, four.b.data(),
          four.ldb, 1.0f, four.c.data(), four.ldc);
  }).join();
  EXPECT_EQ(one.c, four.c);
}

TEST(DenseProduct, InfoNamesTheLibraryAndItsInstructionSet) {
  const std::string info = DenseProductInfo();
  EXPECT_EQ(info.rfind("oneDNN ", 0), 0u) << info;
  EXPECT_NE(info.find(" kernels"), std::string::npos) << info;
  EXPECT_EQ(info.find("baseline"), std::string::npos) << "oneDNN found no vector ISA: " << info;
}

}  // namespace
}  // namespace lpattn::harness
