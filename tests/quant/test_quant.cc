// quant/: every code point round-trips; encoding matches a straightforward nearest-value
// search over a dense sweep of floats (subnormals, ties, overflow, NaN); the vector codecs match
// the scalar ones on every target; quantizers use the right scale per group.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "quant/codec.h"
#include "quant/format.h"
#include "quant/quantizer.h"
#include "tests/kernels/attention_case.h"

namespace lpattn::quant {
namespace {

constexpr Format kFloatFormats[] = {Format::kBf16, Format::kFp16, Format::kFp8E4M3,
                                    Format::kFp8E5M2};

int CodeBits(Format f) { return 8 * FormatBytes(f); }

uint32_t Encode(Format f, float x) {
  switch (f) {
    case Format::kBf16: return EncodeBf16(x);
    case Format::kFp16: return EncodeFp16(x);
    case Format::kFp8E4M3: return EncodeE4M3(x);
    case Format::kFp8E5M2: return EncodeE5M2(x);
    case Format::kInt8: return uint8_t(EncodeInt8(x));
    default: return std::bit_cast<uint32_t>(x);
  }
}
float Decode(Format f, uint32_t code) {
  switch (f) {
    case Format::kBf16: return DecodeBf16(uint16_t(code));
    case Format::kFp16: return DecodeFp16(uint16_t(code));
    case Format::kFp8E4M3: return DecodeE4M3(uint8_t(code));
    case Format::kFp8E5M2: return DecodeE5M2(uint8_t(code));
    case Format::kInt8: return DecodeInt8(int8_t(uint8_t(code)));
    default: return std::bit_cast<float>(code);
  }
}
bool SameValue(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

TEST(QuantFormat, NamesParseBack) {
  for (Format f : kAllFormats) EXPECT_EQ(ParseFormat(FormatName(f)), f);
  EXPECT_FALSE(ParseFormat("fp8").has_value());
  EXPECT_FALSE(ParseFormat("").has_value());
  EXPECT_EQ(FormatMax(Format::kFp8E4M3), 448.0f);
  EXPECT_EQ(FormatMax(Format::kFp8E5M2), 57344.0f);
  EXPECT_EQ(FormatMax(Format::kBf16), 3.3895313892515355e38f);
}

// Every code decodes to a value that encodes back to the same code (NaNs to a NaN code of the
// same sign); the exceptions are int8's unused -128, which clamps to -127, and e5m2's infinities,
// which saturate.
TEST(QuantFormat, EveryCodePointRoundTrips) {
  for (Format f : {Format::kBf16, Format::kFp16, Format::kFp8E4M3, Format::kFp8E5M2,
                   Format::kInt8}) {
    const uint32_t count = 1u << CodeBits(f), sign = count >> 1;
    for (uint32_t code = 0; code < count; ++code) {
      const float v = Decode(f, code);
      const uint32_t back = Encode(f, v);
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(Decode(f, back))) << FormatName(f) << " code " << code;
        EXPECT_EQ(back & sign, code & sign) << FormatName(f) << " code " << code;
      } else if (f == Format::kInt8 && code == 0x80) {
        EXPECT_EQ(int8_t(back), -127);
      } else if (std::isinf(v)) {  // e5m2 decodes inf but encodes it saturating, to +-max
        EXPECT_EQ(Decode(f, back), f == Format::kFp8E5M2 ? std::copysign(57344.0f, v) : v);
      } else {
        EXPECT_EQ(back, code) << FormatName(f) << " code " << code << " value " << v;
      }
    }
  }
  EXPECT_EQ(DecodeE4M3(0x7E), 448.0f);
  EXPECT_EQ(DecodeE4M3(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(DecodeE5M2(0x7B), 57344.0f);
  EXPECT_TRUE(std::isinf(DecodeE5M2(0x7C)));
  EXPECT_EQ(DecodeFp16(0x0001), std::ldexp(1.0f, -24));
}

// The straightforward reference: the nearest of all finite values (and, for formats with
// infinity, 2^(emax+1) standing for it, which makes IEEE overflow fall out), ties to the even
// code; saturating formats clamp to their maximum; NaN to a NaN.
class NearestValue {
 public:
  explicit NearestValue(Format f) : f_(f) {
    const uint32_t sign = 1u << (CodeBits(f) - 1);
    for (uint32_t code = 0; code < sign; ++code) {
      const float v = Decode(f, code);
      if (std::isnan(v) || (std::isinf(v) && Saturating(f))) continue;
      values_.push_back({std::isinf(v) ? double(FormatMax(f)) + TopUlp(f) : double(v), code});
    }
    std::sort(values_.begin(), values_.end());
  }

  uint32_t Encode(float x) const {
    const uint32_t sign = std::signbit(x) ? 1u << (CodeBits(f_) - 1) : 0u;
    if (std::isnan(x)) return sign | 0xFFFFFFFFu;  // any NaN code: compared by value
    const double a = std::fabs(double(x));
    auto hi = std::lower_bound(values_.begin(), values_.end(), std::pair<double, uint32_t>{a, 0});
    uint32_t code;
    if (hi == values_.end()) {
      code = values_.back().second;
    } else if (hi == values_.begin()) {
      code = hi->second;
    } else {
      const auto lo = hi - 1;
      const double dlo = a - lo->first, dhi = hi->first - a;
      code = dlo < dhi ? lo->second : dhi < dlo ? hi->second
                                                : ((lo->second & 1u) == 0 ? lo->second : hi->second);
    }
    return sign | code;
  }
  const std::vector<std::pair<double, uint32_t>>& values() const { return values_; }

 private:
  static bool Saturating(Format f) { return f == Format::kFp8E4M3 || f == Format::kFp8E5M2; }
  // The spacing of the largest binade: infinity stands one spacing above the maximum, so that
  // values from max + spacing / 2 on (the tie included: max's code is odd) overflow.
  static double TopUlp(Format f) {
    const float max = FormatMax(f);
    return double(max) - double(Decode(f, quant::Encode(f, max) - 1));
  }
  Format f_;
  std::vector<std::pair<double, uint32_t>> values_;
};

// A dense sweep: every `step`-th fp32 bit pattern of each sign, every midpoint between neighbouring
// values of the format with its two float neighbours, the overflow boundary, inf and NaN.
std::vector<float> SweepInputs(const NearestValue& nearest, uint32_t step) {
  std::vector<float> xs;
  for (uint64_t bits = 0; bits <= 0x7F800000u; bits += step) {
    xs.push_back(std::bit_cast<float>(uint32_t(bits)));
    xs.push_back(-std::bit_cast<float>(uint32_t(bits)));
  }
  const auto& v = nearest.values();
  for (size_t i = 0; i + 1 < v.size(); ++i) {
    const float mid = float(0.5 * (v[i].first + v[i + 1].first));
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      xs.push_back(x);
      xs.push_back(-x);
    }
  }
  xs.push_back(std::numeric_limits<float>::infinity());
  xs.push_back(-std::numeric_limits<float>::infinity());
  xs.push_back(std::numeric_limits<float>::quiet_NaN());
  xs.push_back(std::numeric_limits<float>::max());
  xs.push_back(std::numeric_limits<float>::denorm_min());
  return xs;
}

TEST(QuantFormat, EncodeMatchesNearestValueOverADenseSweep) {
  for (Format f : kFloatFormats) {
    const NearestValue nearest(f);
    size_t checked = 0;
    for (float x : SweepInputs(nearest, 1031)) {
      const uint32_t got = Encode(f, x), want = nearest.Encode(x);
      if (std::isnan(x)) {
        ASSERT_TRUE(std::isnan(Decode(f, got))) << FormatName(f);
        continue;
      }
      ASSERT_EQ(got, want) << FormatName(f) << " x=" << x << " (bits 0x" << std::hex
                           << std::bit_cast<uint32_t>(x) << ")";
      ++checked;
    }
    EXPECT_GT(checked, 4000000u) << FormatName(f);
  }
}

TEST(QuantFormat, SaturationAndOverflow) {
  EXPECT_EQ(DecodeE4M3(EncodeE4M3(1e6f)), 448.0f);
  EXPECT_EQ(DecodeE4M3(EncodeE4M3(-INFINITY)), -448.0f);
  EXPECT_EQ(DecodeE4M3(EncodeE4M3(464.0f)), 448.0f);  // the midpoint to the NaN code saturates
  EXPECT_EQ(DecodeE5M2(EncodeE5M2(INFINITY)), 57344.0f);
  EXPECT_TRUE(std::isinf(DecodeFp16(EncodeFp16(65520.0f))));  // max + ulp/2: ties to inf
  EXPECT_EQ(DecodeFp16(EncodeFp16(65519.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(DecodeBf16(EncodeBf16(std::numeric_limits<float>::max()))));
  EXPECT_TRUE(std::isnan(DecodeE4M3(EncodeE4M3(NAN))));
  EXPECT_TRUE(std::isnan(DecodeE5M2(EncodeE5M2(-NAN))));
  EXPECT_EQ(EncodeInt8(126.5f), 126);  // ties to even
  EXPECT_EQ(EncodeInt8(-2.5f), -2);
  EXPECT_EQ(EncodeInt8(1000.0f), 127);
  EXPECT_EQ(EncodeInt8(-1000.0f), -127);
  EXPECT_EQ(EncodeInt8(NAN), 0);
}

// The vector codecs give the scalar codecs' bits on every target, with and without a scale.
TEST(QuantCodec, VectorMatchesScalarOnEveryTarget) {
  std::vector<float> xs = SweepInputs(NearestValue(Format::kFp16), 65521);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int i = 0; i < 20000; ++i) xs.push_back(normal(rng));
  xs.resize(xs.size() / 64 * 64 + 13);  // a tail that fills no vector
  for (const std::string& target : test::SupportedTargets()) {
    test::ScopedTarget pinned(target);
    ASSERT_TRUE(pinned.ok) << target;
    for (Format f : {Format::kBf16, Format::kFp16, Format::kFp8E4M3, Format::kFp8E5M2,
                     Format::kInt8}) {
      // Powers of two take the multiplication by their inverse (InverseIsExact).
      for (float scale : {1.0f, 0.37f, 0x1p-20f, 0x1p+7f}) {
        std::vector<uint8_t> codes(xs.size() * size_t(FormatBytes(f)));
        std::vector<float> decoded(xs.size()), trip(xs.size());
        EncodeRow(f, xs.data(), scale, codes.data(), xs.size());
        DecodeRow(f, codes.data(), scale, decoded.data(), xs.size());
        RoundTripRow(f, xs.data(), scale, trip.data(), xs.size());
        for (size_t i = 0; i < xs.size(); ++i) {
          const float want = RoundToFormat(f, xs[i] / scale) * scale;
          uint32_t code = 0;
          std::copy_n(codes.data() + i * size_t(FormatBytes(f)), FormatBytes(f),
                      reinterpret_cast<uint8_t*>(&code));
          const uint32_t want_code = Encode(f, xs[i] / scale);
          ASSERT_TRUE(code == want_code || (std::isnan(Decode(f, code)) &&
                                             std::isnan(Decode(f, want_code))))
              << target << " " << FormatName(f) << " x=" << xs[i] << " scale " << scale;
          ASSERT_TRUE(SameValue(decoded[i], want)) << target << " " << FormatName(f) << " x=" << xs[i];
          ASSERT_TRUE(SameValue(trip[i], want)) << target << " " << FormatName(f) << " x=" << xs[i];
        }
      }
    }
  }
}

// Every fp8 code decodes as the scalar codec decodes it, on every target (the kernels' fp16
// route of DecodeFp8Lanes included): NaN codes as NaN, everything else bit for bit.
TEST(QuantCodec, EveryFp8CodeDecodesAsTheScalarCodecOnEveryTarget) {
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[size_t(c)] = uint8_t(c);
  for (const std::string& target : test::SupportedTargets()) {
    test::ScopedTarget pinned(target);
    ASSERT_TRUE(pinned.ok) << target;
    for (Format f : {Format::kFp8E4M3, Format::kFp8E5M2}) {
      std::vector<float> decoded(codes.size());
      DecodeRow(f, codes.data(), 1.0f, decoded.data(), codes.size());
      for (int c = 0; c < 256; ++c) {
        const float want = f == Format::kFp8E4M3 ? DecodeE4M3(uint8_t(c)) : DecodeE5M2(uint8_t(c));
        ASSERT_TRUE(SameValue(decoded[size_t(c)], want))
            << target << " " << FormatName(f) << " code " << c << ": " << decoded[size_t(c)]
            << " vs " << want;
      }
    }
  }
}

// Every bf16 and fp16 code decodes as the scalar codec decodes it, on every target (the
// kernels' in-register LoadBf16Lanes and LoadFp16Lanes, F16C's route included): NaN codes as
// NaN, everything else (subnormals, infinities, -0) bit for bit.
TEST(QuantCodec, Every16BitCodeDecodesAsTheScalarCodecOnEveryTarget) {
  std::vector<uint16_t> codes(65536);
  for (size_t c = 0; c < codes.size(); ++c) codes[c] = uint16_t(c);
  for (const std::string& target : test::SupportedTargets()) {
    test::ScopedTarget pinned(target);
    ASSERT_TRUE(pinned.ok) << target;
    for (Format f : {Format::kBf16, Format::kFp16}) {
      std::vector<float> decoded(codes.size());
      DecodeRow(f, codes.data(), 1.0f, decoded.data(), codes.size());
      for (size_t c = 0; c < codes.size(); ++c) {
        const float want = f == Format::kBf16 ? DecodeBf16(codes[c]) : DecodeFp16(codes[c]);
        ASSERT_TRUE(SameValue(decoded[c], want)) << target << " " << FormatName(f) << " code " << c
                                                 << ": " << decoded[c] << " vs " << want;
      }
    }
  }
}

// A group's extreme on every target: the largest magnitude (negative values, subnormals and
// -0 included), and +inf once any value, in the vectors or the tail, is infinite or NaN.
TEST(QuantCodec, MaxAbsRowFindsTheExtremeAndNonFiniteValuesOnEveryTarget) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const std::string& target : test::SupportedTargets()) {
    test::ScopedTarget pinned(target);
    ASSERT_TRUE(pinned.ok) << target;
    for (size_t n : {1u, 7u, 16u, 67u}) {
      std::vector<float> x(n);
      for (float& v : x) v = normal(rng);
      x[n / 2] = -0.0f;
      if (n > 2) x[1] = std::numeric_limits<float>::denorm_min();
      float want = 0.0f;
      for (float v : x) want = std::max(want, std::fabs(v));
      EXPECT_EQ(MaxAbsRow(x.data(), n), want) << target << " n " << n;
      x[n - 1] = -1e30f;  // the largest, last (in the tail when n is not whole vectors)
      EXPECT_EQ(MaxAbsRow(x.data(), n), 1e30f) << target << " n " << n;
      for (float special : {std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), -std::nanf("")}) {
        for (size_t at : {size_t(0), n - 1}) {
          std::vector<float> y = x;
          y[at] = special;
          EXPECT_EQ(MaxAbsRow(y.data(), n), std::numeric_limits<float>::infinity())
              << target << " n " << n << " at " << at;
        }
      }
    }
    const std::vector<float> zeros(9, 0.0f);
    EXPECT_EQ(MaxAbsRow(zeros.data(), zeros.size()), 0.0f) << target;
  }
}

// The row-block forms (EncodeRows, RoundTripRows, MaxAbsRows) give each row what the per-row
// calls give it, on every target and every format: rows read `stride` apart with their own
// scales (one of them non-finite, one row all zero), rows whose width fills no whole vector.
TEST(QuantCodec, RowBlocksMatchTheRowsOneByOneOnEveryTarget) {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const std::string& target : test::SupportedTargets()) {
    test::ScopedTarget pinned(target);
    ASSERT_TRUE(pinned.ok) << target;
    for (size_t n : {5u, 64u, 67u}) {
      const size_t rows = 9, stride = n + 3;
      std::vector<float> x(rows * stride), scales(rows);
      for (float& v : x) v = normal(rng);
      for (size_t r = 0; r < rows; ++r) scales[r] = 0.01f + 0.2f * float(r);
      std::fill_n(x.begin() + 2 * stride, n, 0.0f);
      x[5 * stride + n - 1] = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> amax(rows);
      MaxAbsRows(x.data(), stride, rows, n, amax.data());
      for (size_t r = 0; r < rows; ++r) {
        EXPECT_EQ(amax[r], MaxAbsRow(x.data() + r * stride, n))
            << target << " n " << n << " row " << r;
      }
      for (Format f : {Format::kFp32, Format::kBf16, Format::kFp16, Format::kFp8E4M3,
                       Format::kFp8E5M2, Format::kInt8}) {
        const size_t bytes = size_t(FormatBytes(f));
        std::vector<uint8_t> codes(rows * n * bytes), want_codes(codes.size());
        std::vector<float> trip(rows * n), want_trip(trip.size());
        EncodeRows(f, x.data(), stride, scales.data(), codes.data(), n, rows, n);
        RoundTripRows(f, x.data(), stride, scales.data(), trip.data(), n, rows, n);
        for (size_t r = 0; r < rows; ++r) {
          EncodeRow(f, x.data() + r * stride, scales[r], want_codes.data() + r * n * bytes, n);
          RoundTripRow(f, x.data() + r * stride, f == Format::kFp32 ? 1.0f : scales[r],
                       want_trip.data() + r * n, n);
        }
        EXPECT_EQ(codes, want_codes) << target << " " << FormatName(f) << " n " << n;
        EXPECT_EQ(0, std::memcmp(trip.data(), want_trip.data(), trip.size() * sizeof(float)))
            << target << " " << FormatName(f) << " n " << n;
      }
    }
  }
}

// A slice's per-channel extremes and round trips in one call: the rows one by one's, bit for
// bit, and the first row holding a NaN or an infinity found (channel counts around the vector
// blocks of 4 and 1 vectors and the scalar tail).
TEST(QuantCodec, ChannelRowBlocksMatchTheRowsOneByOneOnEveryTarget) {
  std::mt19937 rng(19);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const std::string& target : test::SupportedTargets()) {
    test::ScopedTarget pinned(target);
    ASSERT_TRUE(pinned.ok) << target;
    for (size_t n : {5u, 16u, 64u, 67u, 80u}) {
      const size_t rows = 11, stride = n + 5;
      std::vector<float> x(rows * stride), scales(n), inverses(n);
      for (float& v : x) v = normal(rng);
      for (size_t c = 0; c < n; ++c) {
        scales[c] = std::ldexp(1.0f, int(c % 7) - 3);
        inverses[c] = 1.0f / scales[c];
      }
      std::vector<float> got(n, 0.5f), want(n, 0.5f);
      EXPECT_EQ(MaxAbsRowsInto(x.data(), stride, rows, got.data(), n), rows) << target;
      for (size_t r = 0; r < rows; ++r)
        ASSERT_TRUE(MaxAbsInto(x.data() + r * stride, want.data(), n));
      EXPECT_EQ(got, want) << target << " n " << n;
      for (Format f :
           {Format::kFp32, Format::kBf16, Format::kFp16, Format::kFp8E4M3, Format::kInt8}) {
        for (const float* inv : std::vector<const float*>{nullptr, inverses.data()}) {
          std::vector<float> trip(rows * n), want_trip(rows * n);
          RoundTripRowsScales(f, x.data(), stride, scales.data(), inv, trip.data(), n, rows, n);
          for (size_t r = 0; r < rows; ++r) {
            RoundTripRowScales(f, x.data() + r * stride, scales.data(), want_trip.data() + r * n, n,
                               inv);
          }
          EXPECT_EQ(0, std::memcmp(trip.data(), want_trip.data(), trip.size() * sizeof(float)))
              << target << " " << FormatName(f) << " n " << n;
        }
      }
      for (float bad :
           {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
        std::vector<float> y = x, running(n, 0.0f);
        y[7 * stride + n - 1] = bad;
        y[9 * stride] = bad;
        EXPECT_EQ(MaxAbsRowsInto(y.data(), stride, rows, running.data(), n), 7u)
            << target << " n " << n;
      }
    }
  }
}

// Per-element scales (per-channel quantizers), divided or multiplied by given exact inverses:
// the scalar codec's x / scale, rounded, times scale, bit for bit.
TEST(QuantCodec, PerElementScalesAndTheirInversesMatchTheScalarCodecOnEveryTarget) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t n = 67;
  std::vector<float> x(n), powers(n), ratios(n), inverses(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = normal(rng) * std::ldexp(1.0f, int(i % 41) - 30);  // magnitudes 2^-30 to 2^10
    powers[i] = std::ldexp(1.0f, int(i % 29) - 24);
    inverses[i] = 1.0f / powers[i];
    ratios[i] = 0.013f * float(i + 1);
  }
  for (const std::string& target : test::SupportedTargets()) {
    test::ScopedTarget pinned(target);
    ASSERT_TRUE(pinned.ok) << target;
    for (Format f : {Format::kBf16, Format::kFp16, Format::kFp8E4M3, Format::kInt8}) {
      std::vector<float> divided(n), multiplied(n), other(n);
      RoundTripRowScales(f, x.data(), powers.data(), divided.data(), n);
      RoundTripRowScales(f, x.data(), powers.data(), multiplied.data(), n, inverses.data());
      RoundTripRowScales(f, x.data(), ratios.data(), other.data(), n);
      for (size_t i = 0; i < n; ++i) {
        const float want = RoundToFormat(f, x[i], powers[i]);
        EXPECT_TRUE(SameValue(divided[i], want)) << target << " " << FormatName(f) << " " << i;
        EXPECT_TRUE(SameValue(multiplied[i], want)) << target << " " << FormatName(f) << " " << i;
        EXPECT_TRUE(SameValue(other[i], RoundToFormat(f, x[i], ratios[i])))
            << target << " " << FormatName(f) << " " << i;
      }
    }
  }
}

// ---- quantizers -------------------------------------------------------------------------

// ScaleOfMax: a scaled format's amax / FormatMax; a scaled cast's smallest power of two at
// least that, whose inverse the kernels multiply by when it is exact.
TEST(QuantQuantizer, ScaledCastsTakeThePowerOfTwoAtOrAboveTheirRatio) {
  EXPECT_EQ(ScaleOfMax(Format::kInt8, 3.0f), 3.0f / 127.0f);
  EXPECT_EQ(ScaleOfMax(Format::kFp8E4M3, 3.0f), 3.0f / 448.0f);
  EXPECT_EQ(ScaleOfMax(Format::kFp16, 65504.0f), 1.0f);
  EXPECT_EQ(ScaleOfMax(Format::kFp16, 65505.0f), 2.0f);
  EXPECT_EQ(ScaleOfMax(Format::kFp16, 1.0f), 0x1p-15f);  // 1 / 65504 is just above 2^-16
  EXPECT_EQ(ScaleOfMax(Format::kFp16, 1e-30f), 0x1p-115f);
  EXPECT_EQ(ScaleOfMax(Format::kFp16, 1e-40f), 0x1p-148f);  // a ratio below fp32's subnormals
  EXPECT_EQ(ScaleOfMax(Format::kBf16, 1e-30f), 0x1p-149f);  // the least scale
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> exponent(-40.0f, 40.0f);
  for (int i = 0; i < 1000; ++i) {
    const float amax = std::exp2(exponent(rng));
    for (Format f : {Format::kFp16, Format::kBf16}) {
      const float scale = ScaleOfMax(f, amax);
      const double ratio = double(amax) / FormatMax(f);  // below fp32's normals for bf16
      int e;
      EXPECT_EQ(std::frexp(scale, &e), 0.5f) << amax;  // a power of two
      EXPECT_GE(scale, ratio) << amax;
      EXPECT_TRUE(scale < 2.0 * ratio || scale == 0x1p-149f) << amax;
      EXPECT_TRUE(std::isfinite(RoundToFormat(f, amax, scale))) << amax;  // no overflow
      EXPECT_LE(std::fabs(RoundToFormat(f, amax, scale)), amax * (1.0f + 0x1p-7f)) << amax;
      EXPECT_TRUE(InverseIsExact(scale) || scale < 0x1p-125f || scale > 0x1p+125f) << scale;
    }
  }
  EXPECT_TRUE(InverseIsExact(1.0f));
  EXPECT_TRUE(InverseIsExact(0x1p-126f));
  EXPECT_TRUE(InverseIsExact(0x1p+126f));
  EXPECT_FALSE(InverseIsExact(0x1p+127f));  // its inverse is subnormal
  EXPECT_FALSE(InverseIsExact(0x1p-127f));  // subnormal
  EXPECT_FALSE(InverseIsExact(3.0f));
  EXPECT_FALSE(InverseIsExact(-2.0f));
  EXPECT_FALSE(InverseIsExact(0.0f));
}

struct Dense {
  int64_t batch, heads, tokens, dim;
  std::vector<float> data;
  Dense(int64_t b, int64_t h, int64_t t, int64_t d)
      : batch(b), heads(h), tokens(t), dim(d), data(size_t(b * h * t * d)) {}
  float& at(int64_t b, int64_t h, int64_t t, int64_t c) {
    return data[size_t(((b * heads + h) * tokens + t) * dim + c)];
  }
  TensorView view() const {
    return {data.data(), batch, heads, tokens, dim, heads * tokens * dim, tokens * dim, dim};
  }
};

Dense RandomTensor(int64_t b, int64_t h, int64_t t, int64_t d, uint32_t seed) {
  Dense x(b, h, t, d);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x.data) v = normal(rng);
  return x;
}

// The scale of element (b, h, t, c), written out from the definition.
float ExpectedScale(const QuantSpec& spec, Dense& x, int64_t b, int64_t h, int64_t t, int64_t c) {
  float amax = 0.0f;
  for (int64_t bb = 0; bb < x.batch; ++bb)
    for (int64_t hh = 0; hh < x.heads; ++hh)
      for (int64_t tt = 0; tt < x.tokens; ++tt)
        for (int64_t cc = 0; cc < x.dim; ++cc) {
          bool in = true;
          if (spec.granularity != Granularity::kTensor) in = bb == b && hh == h;
          if (spec.granularity == Granularity::kToken) in = in && tt == t;
          if (spec.granularity == Granularity::kBlock) in = in && tt / spec.block == t / spec.block;
          if (spec.granularity == Granularity::kChannel) in = in && cc == c;
          if (in) amax = std::max(amax, std::fabs(x.at(bb, hh, tt, cc)));
        }
  return amax > 0 ? amax / FormatMax(spec.format) : 1.0f;
}

TEST(QuantQuantizer, EachGranularityUsesItsGroupsScale) {
  Dense x = RandomTensor(2, 3, 37, 24, 11);
  x.at(1, 2, 5, 7) = 40.0f;  // an outlier: only its group's scale grows
  for (Format f : {Format::kInt8, Format::kFp8E4M3, Format::kFp8E5M2, Format::kBf16}) {
    for (Granularity g : {Granularity::kTensor, Granularity::kToken, Granularity::kBlock,
                          Granularity::kChannel}) {
      const QuantSpec spec{f, g, 16, false};
      std::vector<float> out(x.data.size());
      QuantizeDequantize(spec, x.view(), out.data(), "X");
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t h = 0; h < 3; ++h)
          for (int64_t t = 0; t < 37; ++t)
            for (int64_t c = 0; c < 24; ++c) {
              const float scale = FormatIsScaled(f) ? ExpectedScale(spec, x, b, h, t, c) : 1.0f;
              const float want = RoundToFormat(f, x.at(b, h, t, c) / scale) * scale;
              const float got = out[size_t(((b * 3 + h) * 37 + t) * 24 + c)];
              ASSERT_EQ(got, want) << FormatName(f) << " " << GranularityName(g) << " at " << b
                                   << "," << h << "," << t << "," << c;
            }
    }
  }
}

// Finer groups lose less to an outlier; per tensor, one outlier coarsens every value's step.
TEST(QuantQuantizer, FinerGranularityHasSmallerErrorUnderAnOutlier) {
  Dense x = RandomTensor(1, 2, 128, 32, 3);
  x.at(0, 0, 9, 4) = 200.0f;
  auto error = [&](Granularity g) {
    std::vector<float> out(x.data.size());
    QuantizeDequantize({Format::kInt8, g, 64, false}, x.view(), out.data(), "X");
    double e = 0, n = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      e += (out[i] - x.data[i]) * (out[i] - x.data[i]);
      n += x.data[i] * x.data[i];
    }
    return std::sqrt(e / n);
  };
  EXPECT_LT(error(Granularity::kToken), 0.5 * error(Granularity::kBlock));
  EXPECT_LT(error(Granularity::kBlock), 0.8 * error(Granularity::kTensor));
  EXPECT_LT(error(Granularity::kToken), 0.02);
}

// K smoothing: a large per-channel offset (common to every token) costs int8 most of its
// resolution unless it is removed before quantizing; it is added back after.
TEST(QuantQuantizer, SmoothingRemovesChannelOffsets) {
  Dense x = RandomTensor(1, 2, 96, 16, 5);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t t = 0; t < 96; ++t)
      for (int64_t c = 0; c < 16; ++c) x.at(0, h, t, c) += c % 3 == 0 ? 30.0f : -12.0f;
  auto error = [&](bool smooth) {
    std::vector<float> out(x.data.size());
    QuantizeDequantize({Format::kInt8, Granularity::kToken, 64, smooth}, x.view(), out.data(),
                       "K");
    double e = 0;
    for (size_t i = 0; i < out.size(); ++i) e = std::max<double>(e, std::fabs(out[i] - x.data[i]));
    return e;
  };
  EXPECT_LT(error(true), 0.25 * error(false));
  EXPECT_LT(error(true), 0.05);
}

// The native path's codes and per-token scales decode to exactly the simulation's values.
TEST(QuantQuantizer, CodesDecodeToTheSimulatedValues) {
  Dense x = RandomTensor(2, 3, 41, 20, 13);
  x.at(1, 0, 7, 3) = 25.0f;
  for (Format f : {Format::kInt8, Format::kFp8E4M3, Format::kFp8E5M2}) {
    for (Granularity g : {Granularity::kTensor, Granularity::kToken, Granularity::kBlock}) {
      const QuantSpec spec{f, g, 16, false};
      std::vector<float> simulated(x.data.size());
      QuantizeDequantize(spec, x.view(), simulated.data(), "X");
      std::vector<uint8_t> codes(x.data.size());
      std::vector<float> scales(2 * 3 * 41);
      QuantizeToCodes(spec, x.view(), codes.data(), scales.data(), "X");
      for (size_t i = 0; i < codes.size(); ++i) {
        std::vector<float> decoded(1);
        DecodeRow(f, &codes[i], scales[i / 20], decoded.data(), 1);
        ASSERT_EQ(decoded[0], simulated[i]) << FormatName(f) << " " << GranularityName(g) << " " << i;
      }
    }
  }
  std::vector<uint8_t> codes(x.data.size());
  std::vector<float> scales(2 * 3 * 41);
  EXPECT_THROW(QuantizeToCodes({Format::kInt8, Granularity::kChannel, 64, false}, x.view(),
                               codes.data(), scales.data(), "X"),
               std::invalid_argument);
  EXPECT_THROW(QuantizeToCodes({Format::kBf16, Granularity::kToken, 64, false}, x.view(),
                               codes.data(), scales.data(), "X"),
               std::invalid_argument);
}

// Per-channel codes (native int8 P V with vgran=channel) decode to the simulation's values too.
TEST(QuantQuantizer, ChannelCodesDecodeToTheSimulatedValues) {
  Dense x = RandomTensor(2, 3, 41, 20, 17);
  x.at(0, 2, 5, 11) = -30.0f;  // one channel's scale far from the others'
  for (Format f : {Format::kInt8, Format::kFp8E4M3}) {
    const QuantSpec spec{f, Granularity::kChannel, 64, false};
    std::vector<float> simulated(x.data.size());
    QuantizeDequantize(spec, x.view(), simulated.data(), "X");
    std::vector<uint8_t> codes(x.data.size());
    std::vector<float> scales(2 * 3 * 20);
    QuantizeToChannelCodes(spec, x.view(), codes.data(), scales.data(), "X");
    for (size_t i = 0; i < codes.size(); ++i) {
      const size_t slice = i / (41 * 20), channel = i % 20;
      std::vector<float> decoded(1);
      DecodeRow(f, &codes[i], scales[slice * 20 + channel], decoded.data(), 1);
      ASSERT_EQ(decoded[0], simulated[i]) << FormatName(f) << " " << i;
    }
  }
  std::vector<uint8_t> codes(x.data.size());
  std::vector<float> scales(2 * 3 * 20);
  for (const QuantSpec bad : {QuantSpec{Format::kInt8, Granularity::kToken, 64, false},
                              QuantSpec{Format::kInt8, Granularity::kChannel, 64, true},
                              QuantSpec{Format::kBf16, Granularity::kChannel, 64, false}}) {
    EXPECT_THROW(QuantizeToChannelCodes(bad, x.view(), codes.data(), scales.data(), "X"),
                 std::invalid_argument);
  }
}

TEST(QuantQuantizer, ZeroGroupsGiveZerosAndBadInputIsRejected) {
  Dense x = RandomTensor(1, 1, 8, 8, 1);
  for (int64_t c = 0; c < 8; ++c) x.at(0, 0, 3, c) = 0.0f;
  std::vector<float> out(x.data.size(), -1.0f);
  QuantizeDequantize({Format::kInt8, Granularity::kToken, 64, false}, x.view(), out.data(), "V");
  for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(out[size_t(3 * 8 + c)], 0.0f);

  std::vector<float> untouched(x.data.size(), -1.0f);
  QuantSpec bad_block{Format::kInt8, Granularity::kBlock, 0, false};
  EXPECT_THROW(QuantizeDequantize(bad_block, x.view(), untouched.data(), "V"),
               std::invalid_argument);
  x.at(0, 0, 6, 2) = NAN;
  for (Format f : {Format::kInt8, Format::kFp8E4M3}) {
    try {
      QuantizeDequantize({f, Granularity::kToken, 64, false}, x.view(), untouched.data(), "V");
      ADD_FAILURE() << "NaN accepted by " << FormatName(f);
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("token 6, channel 2"), std::string::npos) << e.what();
    }
  }
  for (float v : untouched) EXPECT_EQ(v, -1.0f);  // nothing written before the error
  // Casts keep NaN, as the formats do.
  QuantizeDequantize({Format::kBf16, Granularity::kToken, 64, false}, x.view(), out.data(), "V");
  EXPECT_TRUE(std::isnan(out[size_t(6 * 8 + 2)]));
  // A nonzero group too small for any scale.
  Dense tiny(1, 1, 1, 4);
  tiny.at(0, 0, 0, 1) = std::numeric_limits<float>::denorm_min();
  EXPECT_THROW(QuantizeDequantize({Format::kFp8E5M2, Granularity::kToken, 64, false}, tiny.view(),
                                  out.data(), "Q"),
               std::invalid_argument);
}

// The backward's fp16 operands (QuantSpec::scale_casts): each group on its power of two, so a
// group of gradients far below fp16's normal range keeps fp16's 11 significant bits, and
// the result is the cast's own rounding of x / scale.
TEST(QuantQuantizer, ScaledFp16CastsKeepElevenBitsOfTinyGroups) {
  Dense x = RandomTensor(1, 2, 40, 24, 29);
  for (int64_t t = 0; t < 40; ++t) {
    for (int64_t c = 0; c < 24; ++c) x.at(0, 1, t, c) *= 1e-9f;  // head 1: far below 2^-14
  }
  for (Granularity g : {Granularity::kToken, Granularity::kChannel}) {
    QuantSpec spec{Format::kFp16, g, 64, false};
    spec.scale_casts = true;
    std::vector<float> out(x.data.size());
    QuantizeDequantize(spec, x.view(), out.data(), "dO");
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t t = 0; t < 40; ++t) {
        for (int64_t c = 0; c < 24; ++c) {
          const float v = x.at(0, h, t, c);
          float amax = 0.0f;
          for (int64_t u = 0; u < 40; ++u) {
            for (int64_t k = 0; k < 24; ++k) {
              if ((g == Granularity::kToken && u == t) || (g == Granularity::kChannel && k == c)) {
                amax = std::max(amax, std::fabs(x.at(0, h, u, k)));
              }
            }
          }
          const float scale = float(std::exp2(std::ceil(std::log2(double(amax) / 65504.0))));
          const float got = out[size_t(((h * 40) + t) * 24 + c)];
          ASSERT_EQ(got, RoundToFormat(Format::kFp16, v / scale) * scale)
              << GranularityName(g) << " h " << h << " t " << t << " c " << c;
          // Relative error of fp16 normals, unless v is under 2^-14 of its group's scale.
          if (std::fabs(v) / scale >= 0x1p-14f) {
            ASSERT_LE(std::fabs(got - v), std::fabs(v) * 0x1p-11f) << h << " " << t << " " << c;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace lpattn::quant
