// Interference injection into value reads (harness/model/interference.h; docs/harness.md §1.5).
#include "harness/model/interference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace lpattn::harness {
namespace {

TEST(InterferenceText, ParsesAndFormats) {
  EXPECT_FALSE(ParseInterference("none").active());
  EXPECT_FALSE(ParseInterference("").active());
  const Interference noise = ParseInterference("noise:rho=0.1,sigma=2");
  EXPECT_EQ(noise.kind, Interference::Kind::kNoise);
  EXPECT_DOUBLE_EQ(noise.rho, 0.1);
  EXPECT_DOUBLE_EQ(noise.sigma, 2.0);
  EXPECT_EQ(noise.layer, -1);
  EXPECT_EQ(FormatInterference(noise), "noise:rho=0.1:sigma=2");
  const Interference swap = ParseInterference("swap:rho=0.25:layer=2:seed=7");
  EXPECT_EQ(FormatInterference(swap), "swap:rho=0.25:layer=2:seed=7");
  EXPECT_TRUE(swap.Corrupts(2));
  EXPECT_FALSE(swap.Corrupts(1));
  EXPECT_EQ(FormatInterference(ParseInterference(FormatInterference(swap))), FormatInterference(swap));
  for (const char* bad : {"noise", "noise:rho=1.5", "noise:rho=-0.1", "noise:rho=0.1,sigma=-1",
                          "noise:rho=nan", "swap:rho=0.1,sigma=1", "blur:rho=0.1",
                          "noise:rho=0.1,layer=-1", "noise:rho=0.1,depth=2"}) {
    EXPECT_THROW(ParseInterference(bad), std::invalid_argument) << bad;
  }
}

// The canonical text is the shortest that reads back exactly, so a spec round-trips whatever
// its digits (%g's six digits named another interference).
TEST(InterferenceText, FormatsTheShortestExactNumbers) {
  const Interference noise = ParseInterference("noise:rho=0.1234567,sigma=1.0000001");
  EXPECT_EQ(FormatInterference(noise), "noise:rho=0.1234567:sigma=1.0000001");
  const Interference back = ParseInterference(FormatInterference(noise));
  EXPECT_EQ(back.rho, noise.rho);
  EXPECT_EQ(back.sigma, noise.sigma);
  EXPECT_EQ(FormatInterference(ParseInterference("swap:rho=1e-300")), "swap:rho=1e-300");
}

// Numbers are read whole: an embedded NUL or a seed past 2^64 is rejected, not cut short.
TEST(InterferenceText, NumbersAreReadWhole) {
  for (const std::string& bad :
       {std::string("noise:rho=0.5\0junk", 18), std::string("swap:rho=0.5:seed=7\09", 21),
        std::string("swap:rho=0.5:seed=18446744073709551616"), std::string("swap:rho=0.5:seed=-1"),
        std::string("swap:rho=0.5:seed=+1")}) {
    EXPECT_THROW(ParseInterference(bad), std::invalid_argument) << bad;
  }
  EXPECT_EQ(ParseInterference("swap:rho=0.5:seed=18446744073709551615").seed,
            18446744073709551615ull);
}

struct Values {
  static constexpr size_t B = 4, T = 16, H = 2, C = 8;
  std::vector<float> qkv = std::vector<float>(B * T * 3 * C);
  std::vector<uint8_t> mask = std::vector<uint8_t>(B * T * H);
  std::vector<uint32_t> source = std::vector<uint32_t>(B * T * H);
  std::vector<float> scale = std::vector<float>(B * T * H);
  Values() {
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    for (float& x : qkv) x = normal(rng);
  }
  Corruption Record() { return {mask.data(), source.data(), scale.data()}; }
  const float* V(size_t b, size_t t, size_t h) const { return qkv.data() + (b * T + t) * 3 * C + 2 * C + h * (C / H); }
};

TEST(InterferenceValues, NoiseChangesOnlyTheChosenValueRows) {
  Values x;
  const std::vector<float> before = x.qkv;
  const Interference in = ParseInterference("noise:rho=0.3,sigma=1");
  CorruptValues(in, 0, 0, x.qkv.data(), x.B, x.T, x.C, x.H, x.Record());
  size_t corrupted = 0;
  for (size_t b = 0; b < x.B; ++b) {
    for (size_t t = 0; t < x.T; ++t) {
      const size_t row = (b * x.T + t) * 3 * x.C;
      for (size_t c = 0; c < 2 * x.C; ++c) ASSERT_EQ(x.qkv[row + c], before[row + c]);  // q, k
      for (size_t h = 0; h < x.H; ++h) {
        const size_t slot = (b * x.T + t) * x.H + h;
        const float* now = x.V(b, t, h);
        const float* was = before.data() + row + 2 * x.C + h * (x.C / x.H);
        bool changed = false;
        for (size_t c = 0; c < x.C / x.H; ++c) changed = changed || now[c] != was[c];
        EXPECT_EQ(changed, bool(x.mask[slot]));
        corrupted += x.mask[slot];
      }
    }
  }
  // 128 rows at rho 0.3: about 38, far from none and all.
  EXPECT_GT(corrupted, 20u);
  EXPECT_LT(corrupted, 60u);
}

TEST(InterferenceValues, DrawsNameWindowsNotBatchSlots) {
  // Windows 2 and 3 corrupted as the last two of a batch from window 0, or as a batch of their
  // own starting at window 2: the same rows, the same noise.
  const Interference in = ParseInterference("noise:rho=0.5,sigma=1");
  Values all, part;
  CorruptValues(in, 1, 0, all.qkv.data(), 4, all.T, all.C, all.H, all.Record());
  std::copy(part.qkv.begin() + long(2 * part.T * 3 * part.C), part.qkv.end(), part.qkv.begin());
  CorruptValues(in, 1, 2, part.qkv.data(), 2, part.T, part.C, part.H, part.Record());
  for (size_t i = 0; i < 2 * all.T * 3 * all.C; ++i) {
    ASSERT_EQ(part.qkv[i], all.qkv[2 * all.T * 3 * all.C + i]);
  }
  // Another layer draws other rows.
  Values other;
  CorruptValues(in, 0, 0, other.qkv.data(), 4, other.T, other.C, other.H, other.Record());
  EXPECT_NE(other.mask, all.mask);
}

TEST(InterferenceValues, SwapsTakeTheOriginalRowOfAnotherWindow) {
  Values x;
  const std::vector<float> before = x.qkv;
  CorruptValues(ParseInterference("swap:rho=1"), 0, 0, x.qkv.data(), x.B, x.T, x.C, x.H,
                x.Record());
  for (size_t b = 0; b < x.B; ++b) {
    for (size_t t = 0; t < x.T; ++t) {
      for (size_t h = 0; h < x.H; ++h) {
        const size_t slot = (b * x.T + t) * x.H + h;
        ASSERT_TRUE(x.mask[slot]);
        const size_t from = x.source[slot];
        ASSERT_NE(from, b);
        const float* was = before.data() + (from * x.T + t) * 3 * x.C + 2 * x.C + h * (x.C / x.H);
        for (size_t c = 0; c < x.C / x.H; ++c) ASSERT_EQ(x.V(b, t, h)[c], was[c]);
      }
    }
  }
  Values one;
  EXPECT_THROW(CorruptValues(ParseInterference("swap:rho=1"), 0, 0, one.qkv.data(), 1, one.T,
                             one.C, one.H, one.Record()),
               std::invalid_argument);
}

}  // namespace
}  // namespace lpattn::harness
