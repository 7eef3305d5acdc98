// The harness's dense products (harness/model/dense_product.h): every transposition against a
// double-precision product on strided operands, beta's accumulate and overwrite, and the same
// bits from a thread whose OpenMP setting would start a team (docs/harness.md §1.1).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness/model/dense_product.h"
#include "harness/model/layers.h"
#include "quant/format.h"

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

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
uint32_t Bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

// Against the library's codec (quant/format.h) on every 2^16-th bit pattern plus the patterns
// next to each bf16 boundary (ties, just below and above), with NaN, infinities and zeros.
TEST(DenseProduct, RoundToBf16IsTheCodecsRounding) {
  std::vector<float> values;
  for (uint64_t high = 0; high <= 0xFFFF; ++high) {
    for (uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      values.push_back(FromBits(uint32_t(high << 16) | low));
    }
  }
  std::vector<float> rounded(values.size());
  RoundToBf16(values.data(), rounded.data(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const float expected = quant::DecodeBf16(quant::EncodeBf16(values[i]));
    if (std::isnan(values[i])) {
      ASSERT_TRUE(std::isnan(rounded[i])) << std::hex << Bits(values[i]);
      ASSERT_EQ(Bits(rounded[i]) & 0xFFFFu, 0u);
      continue;
    }
    ASSERT_EQ(Bits(rounded[i]), Bits(expected)) << std::hex << Bits(values[i]);
  }
  // The native path's codes are the upper halves of the same rounding.
  std::vector<uint16_t> codes(values.size());
  EncodeBf16Values(values.data(), codes.data(), codes.size());
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(codes[i], Bits(rounded[i]) >> 16) << std::hex << Bits(values[i]);
  }
  // In place, as the harness may call it.
  RoundToBf16(values.data(), values.data(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isnan(values[i])) ASSERT_EQ(Bits(values[i]), Bits(rounded[i]));
  }
}

std::vector<float> Rounded(std::vector<float> values) {
  RoundToBf16(values.data(), values.data(), values.size());
  return values;
}

std::vector<float> Uniform(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = uniform(rng);
  return v;
}

// Equal bits where bf16 is simulated (the same fp32 products of the same rounded operands);
// within fp32 accumulation error of k terms where the CPU's bf16 units sum them in their order.
void ExpectSameProducts(const std::vector<float>& got, const std::vector<float>& simulated,
                        size_t k) {
  if (!NativeBf16Products()) {
    EXPECT_EQ(got, simulated);
    return;
  }
  ASSERT_EQ(got.size(), simulated.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], simulated[i], double(k) * 1.2e-7 * (1.0 + std::fabs(simulated[i]))) << i;
  }
}

// bf16 mixed precision is the fp32 products of the rounded operands: forward with the fp32
// bias; backward with dout, inp and weight rounded in both products, dbias from the fp32 dout.
// Shapes of 130 rows cross the layers' 64-row blocks.
TEST(DenseProduct, Bf16MatmulsAreFp32MatmulsOfRoundedOperands) {
  const size_t N = 130, C = 24, OC = 40;
  const std::vector<float> inp = Uniform(N * C, 1), weight = Uniform(OC * C, 2),
                           bias = Uniform(OC, 3), dout = Uniform(N * OC, 4);
  std::vector<float> out(N * OC), expected_out(N * OC);
  MatmulForward(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC, DenseFormat::kBf16);
  MatmulForward(expected_out.data(), Rounded(inp).data(), Rounded(weight).data(), bias.data(), N,
                C, OC);
  ExpectSameProducts(out, expected_out, C);
  std::vector<float> fp32_out(N * OC);
  MatmulForward(fp32_out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  EXPECT_NE(out, fp32_out);  // the format reached the product

  std::vector<float> dinp(N * C, 0.5f), dweight(OC * C, 0.25f), dbias(OC, 0.125f);
  std::vector<float> e_dinp = dinp, e_dweight = dweight, e_dbias = dbias;
  MatmulBackward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                 weight.data(), N, C, OC, Write::kAccumulate, DenseFormat::kBf16);
  std::vector<float> unused_dbias(OC, 0.125f);
  MatmulBackward(e_dinp.data(), e_dweight.data(), unused_dbias.data(), Rounded(dout).data(),
                 Rounded(inp).data(), Rounded(weight).data(), N, C, OC);
  MatmulBackward(std::vector<float>(N * C).data(), std::vector<float>(OC * C).data(),
                 e_dbias.data(), dout.data(), inp.data(), weight.data(), N, C, OC);
  ExpectSameProducts(dinp, e_dinp, OC);
  ExpectSameProducts(dweight, e_dweight, N);
  EXPECT_EQ(dbias, e_dbias);
  EXPECT_NE(dbias, unused_dbias);  // dbias did not sum the rounded dout
}

// The native bf16 products (oneDNN's matmul on AVX512_BF16 or AMX) against double sums of the
// decoded codes, every transposition, strided, beta 0 and 1.
TEST(DenseProduct, NativeBf16GemmMatchesDoubleSums) {
  if (!NativeBf16Products()) {
    uint16_t one = 0x3F80;
    float c = 0.0f;
    EXPECT_THROW(GemmBf16(Trans::kNo, Trans::kNo, 1, 1, 1, &one, 1, &one, 1, 0.0f, &c, 1),
                 std::logic_error);
    GTEST_SKIP() << "not run: this CPU has no native bf16 products (AVX512_BF16 or AMX); "
                    "bf16 is simulated here, which Bf16MatmulsAreFp32MatmulsOfRoundedOperands tests";
  }
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      for (float beta : {0.0f, 1.0f}) {
        Operands o = MakeOperands(ta, tb, 37, 29, 67);
        std::vector<uint16_t> a(o.a.size()), b(o.b.size());
        EncodeBf16Values(o.a.data(), a.data(), a.size());
        EncodeBf16Values(o.b.data(), b.data(), b.size());
        o.a = Rounded(o.a);
        o.b = Rounded(o.b);
        const std::vector<float> c0 = o.c;
        GemmBf16(ta, tb, o.m, o.n, o.k, a.data(), o.lda, b.data(), o.ldb, beta, o.c.data(), o.ldc);
        for (size_t i = 0; i < o.m; ++i) {
          for (size_t j = 0; j < o.n; ++j) {
            double sum = beta * double(c0[i * o.ldc + j]), magnitude = std::fabs(sum);
            for (size_t p = 0; p < o.k; ++p) {
              sum += ElementA(o, i, p) * ElementB(o, p, j);
              magnitude += std::fabs(ElementA(o, i, p) * ElementB(o, p, j));
            }
            ASSERT_NEAR(o.c[i * o.ldc + j], sum, 67 * 6e-8 * magnitude + 1e-6) << i << "," << j;
          }
          for (size_t j = o.n; j < o.ldc; ++j) ASSERT_EQ(o.c[i * o.ldc + j], c0[i * o.ldc + j]);
        }
      }
    }
  }
}

TEST(DenseProduct, FormatNamesRoundTripAndOthersAreRefused) {
  for (DenseFormat format : {DenseFormat::kFp32, DenseFormat::kBf16}) {
    EXPECT_EQ(ParseDenseFormat(DenseFormatName(format)), format);
  }
  EXPECT_THROW(ParseDenseFormat("fp16"), std::invalid_argument);
  EXPECT_THROW(ParseDenseFormat(""), std::invalid_argument);
}

}  // namespace
}  // namespace lpattn::harness
