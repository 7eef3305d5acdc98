// Row codecs (codec.h): per-target loops over the vector codecs of codec-inl.h, with the
// scalar codecs of format.cc for the tail that does not fill a vector.
#include "quant/codec.h"

#include <cstdint>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/codec.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "quant/codec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace quant {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;

// One format's vector and scalar codec and its code storage. Code is the stored type.
template <Format kFormat> struct Codec;

template <MiniFloat kF, class CodeT, auto kEncodeScalar, auto kDecodeScalar>
struct MiniFloatCodec {
  using Code = CodeT;
  static hn::Vec<DI> Encode(hn::Vec<DF> x) { return EncodeMiniFloat<kF>(DF(), x); }
  static hn::Vec<DF> Decode(hn::Vec<DI> code) { return DecodeMiniFloat<kF>(DF(), code); }
  static hn::Vec<DF> RoundTrip(hn::Vec<DF> x) { return RoundMiniFloat<kF>(DF(), x); }
  static Code EncodeScalar(float x) { return kEncodeScalar(x); }
  static float DecodeScalar(Code c) { return kDecodeScalar(c); }
};
template <> struct Codec<Format::kBf16>
    : MiniFloatCodec<kBf16Layout, uint16_t, EncodeBf16, DecodeBf16> {};
template <> struct Codec<Format::kFp16>
    : MiniFloatCodec<kFp16Layout, uint16_t, EncodeFp16, DecodeFp16> {
  static hn::Vec<DI> Encode(hn::Vec<DF> x) { return EncodeFp16Lanes(DF(), x); }  // F16C
  static hn::Vec<DF> Decode(hn::Vec<DI> code) { return DecodeFp16Lanes(DF(), code); }
  static hn::Vec<DF> RoundTrip(hn::Vec<DF> x) { return RoundFp16Lanes(DF(), x); }
};
template <> struct Codec<Format::kFp8E4M3>
    : MiniFloatCodec<kE4M3Layout, uint8_t, EncodeE4M3, DecodeE4M3> {};
template <> struct Codec<Format::kFp8E5M2>
    : MiniFloatCodec<kE5M2Layout, uint8_t, EncodeE5M2, DecodeE5M2> {};
template <> struct Codec<Format::kInt8> {
  using Code = int8_t;
  static hn::Vec<DI> Encode(hn::Vec<DF> x) { return EncodeInt8Lanes(DF(), x); }
  static hn::Vec<DF> Decode(hn::Vec<DI> code) { return hn::ConvertTo(DF(), code); }
  static hn::Vec<DF> RoundTrip(hn::Vec<DF> x) { return Decode(Encode(x)); }
  static Code EncodeScalar(float x) { return EncodeInt8(x); }
  static float DecodeScalar(Code c) { return DecodeInt8(c); }
};

template <Format kFormat>
HWY_INLINE void EncodeRowT(const float* x, float scale, void* codes_out, size_t n) {
  using C = Codec<kFormat>;
  using Code = typename C::Code;
  const DF df;
  const hn::Rebind<Code, DI> dc;
  const size_t N = hn::Lanes(df);
  Code* codes = static_cast<Code*>(codes_out);
  const auto vscale = hn::Set(df, scale);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto code = C::Encode(hn::Div(hn::LoadU(df, x + i), vscale));
    hn::StoreU(hn::DemoteTo(dc, code), dc, codes + i);
  }
  for (; i < n; ++i) codes[i] = C::EncodeScalar(x[i] / scale);
}

template <Format kFormat>
void DecodeRowT(const void* codes_in, float scale, float* out, size_t n) {
  using C = Codec<kFormat>;
  using Code = typename C::Code;
  const DF df;
  const DI di;
  const hn::Rebind<Code, DI> dc;
  const size_t N = hn::Lanes(df);
  const Code* codes = static_cast<const Code*>(codes_in);
  const auto vscale = hn::Set(df, scale);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    if constexpr (kFormat == Format::kFp8E4M3 || kFormat == Format::kFp8E5M2) {  // the kernels'
      constexpr MiniFloat kF = kFormat == Format::kFp8E4M3 ? kE4M3Layout : kE5M2Layout;
      const hn::Rebind<uint8_t, DF> d8;
      hn::StoreU(hn::Mul(DecodeFp8Lanes<kF>(df, hn::LoadU(d8, codes + i)), vscale), df, out + i);
    } else if constexpr (kFormat == Format::kFp16) {  // the kernels' in-register decode
      hn::StoreU(hn::Mul(LoadFp16Lanes(df, codes + i), vscale), df, out + i);
    } else if constexpr (kFormat == Format::kBf16) {
      hn::StoreU(hn::Mul(LoadBf16Lanes(df, codes + i), vscale), df, out + i);
    } else {
      const auto code = hn::PromoteTo(di, hn::LoadU(dc, codes + i));
      hn::StoreU(hn::Mul(C::Decode(code), vscale), df, out + i);
    }
  }
  for (; i < n; ++i) out[i] = C::DecodeScalar(codes[i]) * scale;
}

// scales: one per element (kPerElement) or scales[0] for all. inverses (kPerElement): null, or
// each scale's exact inverse to multiply by.
template <Format kFormat, bool kPerElement>
HWY_INLINE void RoundTripRowT(const float* x, const float* scales, float* out, size_t n,
                              const float* inverses = nullptr) {
  using C = Codec<kFormat>;
  const DF df;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  if (kPerElement && inverses) {
    for (; i + N <= n; i += N) {
      const auto x_over = hn::Mul(hn::LoadU(df, x + i), hn::LoadU(df, inverses + i));
      hn::StoreU(hn::Mul(C::RoundTrip(x_over), hn::LoadU(df, scales + i)), df, out + i);
    }
  } else if (!kPerElement && InverseIsExact(scales[0])) {  // a scaled cast's power of two
    const auto vscale = hn::Set(df, scales[0]), inverse = hn::Set(df, 1.0f / scales[0]);
    for (; i + N <= n; i += N) {
      hn::StoreU(hn::Mul(C::RoundTrip(hn::Mul(hn::LoadU(df, x + i), inverse)), vscale), df,
                 out + i);
    }
  }
  for (; i + N <= n; i += N) {
    const auto vscale = kPerElement ? hn::LoadU(df, scales + i) : hn::Set(df, scales[0]);
    hn::StoreU(hn::Mul(C::RoundTrip(hn::Div(hn::LoadU(df, x + i), vscale)), vscale), df,
               out + i);
  }
  for (; i < n; ++i) {
    const float scale = scales[kPerElement ? i : 0];
    out[i] = C::DecodeScalar(C::EncodeScalar(x[i] / scale)) * scale;
  }
}

// The magnitudes' bit patterns as integers: ordered as the magnitudes are, with inf and NaN
// (exponent all ones) above every finite one, so one integer max finds both the extreme and
// whether any value was not finite.
HWY_INLINE float MaxAbsRowT(const float* x, size_t n) {
  const DF df;
  const DI di;
  const size_t N = hn::Lanes(df);
  const auto magnitude = hn::Set(di, 0x7FFFFFFF);
  auto running = hn::Zero(di);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    running = hn::Max(running, hn::And(hn::BitCast(di, hn::LoadU(df, x + i)), magnitude));
  }
  int32_t bits = hn::GetLane(hn::MaxOfLanes(di, running));
  for (; i < n; ++i) {
    int32_t b;
    std::memcpy(&b, x + i, sizeof(b));
    bits = std::max(bits, b & 0x7FFFFFFF);
  }
  if (bits >= 0x7F800000) return std::numeric_limits<float>::infinity();
  float m;
  std::memcpy(&m, &bits, sizeof(m));
  return m;
}

float MaxAbsRowTarget(const float* x, size_t n) { return MaxAbsRowT(x, n); }

// Rows of a slice in one call (codec.h's *Rows): the format's constants set up once for all of
// them, where a call per row of 64 values spent a fifth of its time on the call and set-up.
void MaxAbsRowsTarget(const float* x, size_t x_stride, size_t rows, size_t n, float* amax) {
  for (size_t r = 0; r < rows; ++r) amax[r] = MaxAbsRowT(x + r * x_stride, n);
}

bool MaxAbsIntoTarget(const float* x, float* running, size_t n) {
  const DF df;
  const size_t N = hn::Lanes(df);
  bool finite = true;
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(df, x + i);
    finite &= hn::AllTrue(df, hn::IsFinite(v));
    hn::StoreU(hn::Max(hn::LoadU(df, running + i), hn::Abs(v)), df, running + i);
  }
  for (; i < n; ++i) {
    finite &= std::isfinite(x[i]);
    running[i] = std::max(running[i], std::fabs(x[i]));
  }
  return finite;
}

// A vector of magnitudes' bits (MaxAbsRowT's order) from x.
HWY_INLINE hn::Vec<DI> MagnitudeBits(const float* x) {
  return hn::And(hn::BitCast(DI(), hn::LoadU(DF(), x)), hn::Set(DI(), 0x7FFFFFFF));
}
// running = max(running, extreme) over a vector of channels; false if extreme holds a NaN's or
// an infinity's bits.
HWY_INLINE bool MergeExtreme(hn::Vec<DI> extreme, float* running) {
  const DF df;
  const DI di;
  hn::StoreU(hn::BitCast(df, hn::Max(hn::BitCast(di, hn::LoadU(df, running)), extreme)), df,
             running);
  return hn::AllTrue(di, hn::Lt(extreme, hn::Set(di, 0x7F800000)));
}

// Down the rows 4 vectors of channels at a time (kFour) or 1, the extremes in registers as
// magnitude bits, merged into running once; false if any was not finite. Named accumulators,
// not an array: SVE's vectors have no size to make one of.
template <bool kFour>
HWY_INLINE bool MaxAbsColumnsInto(const float* x, size_t x_stride, size_t rows, float* running) {
  const size_t N = hn::Lanes(DF());
  auto e0 = hn::Zero(DI()), e1 = e0, e2 = e0, e3 = e0;
  for (size_t r = 0; r < rows; ++r) {
    const float* row = x + r * x_stride;
    e0 = hn::Max(e0, MagnitudeBits(row));
    if constexpr (kFour) {
      e1 = hn::Max(e1, MagnitudeBits(row + N));
      e2 = hn::Max(e2, MagnitudeBits(row + 2 * N));
      e3 = hn::Max(e3, MagnitudeBits(row + 3 * N));
    }
  }
  bool finite = MergeExtreme(e0, running);
  if constexpr (kFour) {
    finite &= MergeExtreme(e1, running + N);
    finite &= MergeExtreme(e2, running + 2 * N);
    finite &= MergeExtreme(e3, running + 3 * N);
  }
  return finite;
}

size_t MaxAbsRowsIntoTarget(const float* x, size_t x_stride, size_t rows, float* running,
                            size_t n) {
  const size_t N = hn::Lanes(DF());
  bool finite = true;
  size_t c = 0;
  for (; c + 4 * N <= n; c += 4 * N) {
    finite &= MaxAbsColumnsInto<true>(x + c, x_stride, rows, running + c);
  }
  for (; c + N <= n; c += N) finite &= MaxAbsColumnsInto<false>(x + c, x_stride, rows, running + c);
  if (c < n) {  // the channels past whole vectors, row by row
    for (size_t r = 0; r < rows; ++r)
      finite &= MaxAbsIntoTarget(x + r * x_stride + c, running + c, n - c);
  }
  if (finite) return rows;
  size_t r = 0;
  while (r < rows && std::all_of(x + r * x_stride, x + r * x_stride + n,
                                 [](float v) { return std::isfinite(v); })) {
    ++r;
  }
  return r;
}

// Calls fn.template operator()<kFormat>() for a format other than fp32.
template <class Fn>
void WithFormat(Format format, const Fn& fn) {
  switch (format) {
    case Format::kBf16: return fn.template operator()<Format::kBf16>();
    case Format::kFp16: return fn.template operator()<Format::kFp16>();
    case Format::kFp8E4M3: return fn.template operator()<Format::kFp8E4M3>();
    case Format::kFp8E5M2: return fn.template operator()<Format::kFp8E5M2>();
    case Format::kInt8: return fn.template operator()<Format::kInt8>();
    case Format::kFp32: return;
  }
}

void EncodeRowTarget(Format format, const float* x, float scale, void* codes, size_t n) {
  WithFormat(format, [&]<Format kFormat>() { EncodeRowT<kFormat>(x, scale, codes, n); });
}
void DecodeRowTarget(Format format, const void* codes, float scale, float* out, size_t n) {
  WithFormat(format, [&]<Format kFormat>() { DecodeRowT<kFormat>(codes, scale, out, n); });
}
void RoundTripRowTarget(Format format, const float* x, float scale, float* out, size_t n) {
  WithFormat(format, [&]<Format kFormat>() { RoundTripRowT<kFormat, false>(x, &scale, out, n); });
}
void EncodeRowsTarget(Format format, const float* x, size_t x_stride, const float* scales,
                      void* codes, size_t codes_stride, size_t rows, size_t n) {
  WithFormat(format, [&]<Format kFormat>() {
    using Code = typename Codec<kFormat>::Code;
    for (size_t r = 0; r < rows; ++r) {
      EncodeRowT<kFormat>(x + r * x_stride, scales[r],
                          static_cast<Code*>(codes) + r * codes_stride, n);
    }
  });
}
void RoundTripRowsTarget(Format format, const float* x, size_t x_stride, const float* scales,
                         float* out, size_t out_stride, size_t rows, size_t n) {
  WithFormat(format, [&]<Format kFormat>() {
    for (size_t r = 0; r < rows; ++r) {
      RoundTripRowT<kFormat, false>(x + r * x_stride, scales + r, out + r * out_stride, n);
    }
  });
}
void RoundTripRowScalesTarget(Format format, const float* x, const float* scales, float* out,
                              size_t n, const float* inverses) {
  WithFormat(format,
             [&]<Format kFormat>() { RoundTripRowT<kFormat, true>(x, scales, out, n, inverses); });
}
void RoundTripRowsScalesTarget(Format format, const float* x, size_t x_stride, const float* scales,
                               const float* inverses, float* out, size_t out_stride, size_t rows,
                               size_t n) {
  WithFormat(format, [&]<Format kFormat>() {
    for (size_t r = 0; r < rows; ++r) {
      RoundTripRowT<kFormat, true>(x + r * x_stride, scales, out + r * out_stride, n, inverses);
    }
  });
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace quant
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn::quant {

HWY_EXPORT(EncodeRowTarget);
HWY_EXPORT(DecodeRowTarget);
HWY_EXPORT(RoundTripRowTarget);
HWY_EXPORT(RoundTripRowScalesTarget);
HWY_EXPORT(EncodeRowsTarget);
HWY_EXPORT(RoundTripRowsTarget);
HWY_EXPORT(MaxAbsRowsTarget);
HWY_EXPORT(MaxAbsRowTarget);
HWY_EXPORT(MaxAbsIntoTarget);
HWY_EXPORT(MaxAbsRowsIntoTarget);
HWY_EXPORT(RoundTripRowsScalesTarget);

float MaxAbsRow(const float* x, size_t n) { return HWY_DYNAMIC_DISPATCH(MaxAbsRowTarget)(x, n); }
void MaxAbsRows(const float* x, size_t x_stride, size_t rows, size_t n, float* amax) {
  HWY_DYNAMIC_DISPATCH(MaxAbsRowsTarget)(x, x_stride, rows, n, amax);
}
bool MaxAbsInto(const float* x, float* running, size_t n) {
  return HWY_DYNAMIC_DISPATCH(MaxAbsIntoTarget)(x, running, n);
}
size_t MaxAbsRowsInto(const float* x, size_t x_stride, size_t rows, float* running, size_t n) {
  return HWY_DYNAMIC_DISPATCH(MaxAbsRowsIntoTarget)(x, x_stride, rows, running, n);
}

// fp32 "codes" are the floats themselves, scaled like the other formats.
void EncodeRow(Format format, const float* x, float scale, void* codes, size_t n) {
  if (format == Format::kFp32) {
    float* out = static_cast<float*>(codes);
    for (size_t i = 0; i < n; ++i) out[i] = x[i] / scale;
    return;
  }
  HWY_DYNAMIC_DISPATCH(EncodeRowTarget)(format, x, scale, codes, n);
}

void DecodeRow(Format format, const void* codes, float scale, float* out, size_t n) {
  if (format == Format::kFp32) {
    const float* in = static_cast<const float*>(codes);
    for (size_t i = 0; i < n; ++i) out[i] = in[i] * scale;
    return;
  }
  HWY_DYNAMIC_DISPATCH(DecodeRowTarget)(format, codes, scale, out, n);
}

void RoundTripRow(Format format, const float* x, float scale, float* out, size_t n) {
  if (format == Format::kFp32) {
    if (out != x) std::memmove(out, x, n * sizeof(float));
    return;
  }
  HWY_DYNAMIC_DISPATCH(RoundTripRowTarget)(format, x, scale, out, n);
}

void EncodeRows(Format format, const float* x, size_t x_stride, const float* scales,
                void* codes, size_t codes_stride, size_t rows, size_t n) {
  if (format == Format::kFp32) {
    float* out = static_cast<float*>(codes);
    for (size_t r = 0; r < rows; ++r) {
      EncodeRow(format, x + r * x_stride, scales[r], out + r * codes_stride, n);
    }
    return;
  }
  HWY_DYNAMIC_DISPATCH(EncodeRowsTarget)(format, x, x_stride, scales, codes, codes_stride, rows, n);
}

void RoundTripRows(Format format, const float* x, size_t x_stride, const float* scales,
                   float* out, size_t out_stride, size_t rows, size_t n) {
  if (format == Format::kFp32) {
    for (size_t r = 0; r < rows; ++r) {
      RoundTripRow(format, x + r * x_stride, 1.0f, out + r * out_stride, n);
    }
    return;
  }
  HWY_DYNAMIC_DISPATCH(RoundTripRowsTarget)(format, x, x_stride, scales, out, out_stride, rows, n);
}

void RoundTripRowScales(Format format, const float* x, const float* scales, float* out, size_t n,
                        const float* inverses) {
  if (format == Format::kFp32) {
    if (out != x) std::memmove(out, x, n * sizeof(float));
    return;
  }
  HWY_DYNAMIC_DISPATCH(RoundTripRowScalesTarget)(format, x, scales, out, n, inverses);
}

void RoundTripRowsScales(Format format, const float* x, size_t x_stride, const float* scales,
                         const float* inverses, float* out, size_t out_stride, size_t rows,
                         size_t n) {
  if (format == Format::kFp32) {
    for (size_t r = 0; r < rows; ++r) {
      RoundTripRowScales(format, x + r * x_stride, scales, out + r * out_stride, n, inverses);
    }
    return;
  }
  HWY_DYNAMIC_DISPATCH(RoundTripRowsScalesTarget)
  (format, x, x_stride, scales, inverses, out, out_stride, rows, n);
}

}  // namespace lpattn::quant
#endif  // HWY_ONCE
