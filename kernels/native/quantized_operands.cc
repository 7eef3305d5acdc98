// Operand storage for the simulation and native paths (quantized_operands.h).
#include "kernels/native/quantized_operands.h"

#include "kernels/native/cpu_features.h"  // LPATTN_NATIVE_X86

#if LPATTN_NATIVE_X86
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/native/amx_products.h"
#include "kernels/native/bf16_pair_products.h"
#include "kernels/native/native_paths.h"
#include "kernels/skeleton/tile_sizes.h"
#include "quant/codec.h"
#include "quant/quantizer.h"
#include "tbb/parallel_for.h"

namespace lpattn {

ConstTensor QuantizedOperands::Quantize(ConstTensor t, const quant::QuantSpec& spec,
                                        int64_t heads, int64_t tokens, const char* name) {
  if (spec.format == quant::Format::kFp32) return t;
  const int64_t dim = shape_.head_dim;
  const quant::TensorView view{t.data,           shape_.batch,    heads,          tokens, dim,
                               t.strides.batch, t.strides.head, t.strides.token};
  Buffer<float>& copy = copies_.emplace_back(size_t(shape_.batch * heads * tokens * dim));
  quant::QuantizeDequantize(spec, view, copy.data(), name);
  return {copy.data(), ContiguousBHTD(heads, tokens, dim)};
}

bool QuantizedOperands::Native(const quant::QuantSpec& spec) const {
  return precision_.path == ComputePath::kNative && !spec.smooth &&
         (spec.format == quant::Format::kBf16 || spec.format == quant::Format::kFp16);
}

bool QuantizedOperands::DecodesOnce() const {
  return DecodesKvOnce(size_t(shape_.batch), size_t(shape_.heads), size_t(shape_.kv_heads),
                       size_t(shape_.q_len), size_t(shape_.kv_len), size_t(shape_.head_dim));
}

bool QuantizedOperands::FewQueryTiles() const {
  return DecodeTileRows(size_t(shape_.heads), size_t(shape_.kv_heads), size_t(shape_.q_len)) <=
         kFewQueries;
}

bool QuantizedOperands::TilesMayReadKeyCodes(quant::Format key) const {
  // The dot tiles take no fp16 K (AmxScoresFor): its codes would only be decoded again.
  return native::AmxBf16TakesDim(size_t(shape_.head_dim)) &&
         (native::Bf16PairsOnAmx() ||
          (native::Bf16PairsEnabled() && key != quant::Format::kFp16));
}

CodedKv QuantizedOperands::Encode(ConstTensor t, quant::Format format) {
  const int64_t heads = shape_.kv_heads, tokens = shape_.kv_len, dim = shape_.head_dim;
  Buffer<uint16_t>& codes = codes_.emplace_back(size_t(shape_.batch * heads * tokens * dim));
  const std::vector<float> unit_scales(size_t(tokens), 1.0f);  // casts: scale 1
  tbb::parallel_for(int64_t(0), shape_.batch * heads, [&](int64_t slice) {
    const int64_t b = slice / heads, h = slice % heads;
    quant::EncodeRows(format, t.data + b * t.strides.batch + h * t.strides.head,
                      size_t(t.strides.token), unit_scales.data(),
                      codes.data() + slice * tokens * dim, size_t(dim), size_t(tokens),
                      size_t(dim));
  });
  CodedKv coded;
  coded.data = codes.data();
  coded.strides = ContiguousBHTD(heads, tokens, dim);
  coded.fp16 = format == quant::Format::kFp16;
  return coded;
}

bool QuantizedOperands::NativeFp8(const quant::QuantSpec& spec) const {
  return precision_.path == ComputePath::kNative && !spec.smooth &&
         spec.granularity != quant::Granularity::kChannel &&
         (spec.format == quant::Format::kFp8E4M3 || spec.format == quant::Format::kFp8E5M2);
}

CodedKv QuantizedOperands::EncodeFp8(ConstTensor t, const quant::QuantSpec& spec,
                                     const char* what) {
  const int64_t heads = shape_.kv_heads, tokens = shape_.kv_len;
  Buffer<float>& scales = copies_.emplace_back();
  Buffer<uint8_t>& codes =
      int8_rows_.emplace_back(Int8Codes(t, spec, heads, tokens, what, scales));
  CodedKv coded;
  coded.strides = ContiguousBHTD(heads, tokens, shape_.head_dim);
  coded.codes8 = codes.data();
  coded.token_scales = scales.data();
  coded.scale_strides = ContiguousBHTD(heads, tokens, 1);
  coded.e5m2 = spec.format == quant::Format::kFp8E5M2;
  // The quantizer refuses a non-finite value and scales each group into range, so no code is
  // NaN: decode tiles take e4m3 without the NaN test (the same values), as a KvCache's do.
  coded.no_nan = true;
  return coded;
}

bool QuantizedOperands::NativeInt8(const quant::QuantSpec& key) const {
  return precision_.path == ComputePath::kNative && key.format == quant::Format::kInt8 &&
         key.granularity != quant::Granularity::kChannel && !key.smooth;
}

Buffer<uint8_t> QuantizedOperands::Int8Codes(ConstTensor t, const quant::QuantSpec& spec,
                                                  int64_t heads, int64_t tokens, const char* what,
                                                  Buffer<float>& scales) {
  Buffer<uint8_t> codes(size_t(shape_.batch * heads * tokens * shape_.head_dim));
  scales.resize(size_t(shape_.batch * heads * tokens));
  quant::QuantizeToCodes(spec,
                         {t.data, shape_.batch, heads, tokens, shape_.head_dim, t.strides.batch,
                          t.strides.head, t.strides.token},
                         codes.data(), scales.data(), what);
  return codes;
}

// Rows of int8 codes widened to int16, odd head dimensions padded with a zero channel.
void QuantizedOperands::EncodeIntQueries(ConstTensor q, IntQk& out) {
  const size_t dim = size_t(shape_.head_dim), width = 2 * ((dim + 1) / 2);
  Buffer<float>& scales = copies_.emplace_back();
  const Buffer<uint8_t> codes = Int8Codes(q, precision_.QuerySpec(), shape_.heads,
                                               shape_.q_len, "lpattn quantized Q", scales);
  Buffer<int16_t>& rows = int_queries_.emplace_back(scales.size() * width, int16_t(0));
  for (size_t r = 0; r < scales.size(); ++r) {
    for (size_t c = 0; c < dim; ++c) rows[r * width + c] = int8_t(codes[r * dim + c]);
  }
  out.q = rows.data();
  out.q_scale = scales.data();
  out.pairs = width / 2;
}

bool QuantizedOperands::AmxInt8Keys() const {
  return native::AmxInt8TakesDim(size_t(shape_.head_dim)) &&
         native::NativePathEnabled(native::NativePath::kAmxInt8);
}

bool QuantizedOperands::VnniInt8Keys() const {
  return shape_.head_dim % 4 == 0 &&
         (native::NativePathEnabled(native::NativePath::kAvx512Vnni) ||
          native::NativePathEnabled(native::NativePath::kAvxVnni));
}

void QuantizedOperands::EncodeInt8KeyRows(ConstTensor k, IntQk& out) {
  Buffer<float>& scales = copies_.emplace_back();
  Buffer<uint8_t>& codes = int8_rows_.emplace_back(Int8Codes(
      k, precision_.KeySpec(), shape_.kv_heads, shape_.kv_len, "lpattn quantized K", scales));
  const size_t dim = size_t(shape_.head_dim);
  Buffer<int32_t>& sums = int_keys_.emplace_back(scales.size());
  for (size_t r = 0; r < sums.size(); ++r) {
    int32_t sum = 0;
    for (size_t c = 0; c < dim; ++c) sum += int8_t(codes[r * dim + c]);
    sums[r] = sum;
  }
  out.k_rows = reinterpret_cast<const int8_t*>(codes.data());
  out.k_sums = sums.data();
  out.k_scale = scales.data();
  out.pairs = (dim + 1) / 2;
}

bool QuantizedOperands::NativeInt8Pv(const quant::QuantSpec& value) const {
  return precision_.path == ComputePath::kNative && precision_.p == quant::Format::kInt8 &&
         value.format == quant::Format::kInt8 &&
         (value.granularity == quant::Granularity::kTensor ||
          value.granularity == quant::Granularity::kChannel);
}

// V's int8 codes per (batch, kv head) as the int8 P V product reads them (IntPv): transposed
// for AMX, else keys interleaved column by column in quads.
IntPv QuantizedOperands::EncodeIntValues(ConstTensor v) {
  const size_t dim = size_t(shape_.head_dim), tokens = size_t(shape_.kv_len);
  const size_t width = (dim + 31) / 32 * 32;
  const quant::QuantSpec spec = precision_.ValueSpec();
  const bool per_channel = spec.granularity == quant::Granularity::kChannel;
  const size_t slices = size_t(shape_.batch * shape_.kv_heads);
  Buffer<float>& scales = copies_.emplace_back();
  Buffer<uint8_t> codes;
  if (per_channel) {
    codes.resize(slices * tokens * dim);
    scales.resize(slices * dim);
    quant::QuantizeToChannelCodes(spec,
                                  {v.data, shape_.batch, shape_.kv_heads, shape_.kv_len,
                                   shape_.head_dim, v.strides.batch, v.strides.head,
                                   v.strides.token},
                                  codes.data(), scales.data(), "lpattn quantized V");
  } else {
    codes = Int8Codes(v, spec, shape_.kv_heads, shape_.kv_len, "lpattn quantized V", scales);
  }
  if (scales.empty()) scales.push_back(0.0f);  // no tokens: nothing is read
  IntPv out;
  out.v_scales = scales.data();
  out.scale_stride = per_channel ? dim : 0;
  out.width = width;
  if (native::AmxInt8TakesDim(dim) && native::NativePathEnabled(native::NativePath::kAmxInt8)) {
    // V^T for the tiles: [head_dim][key stride] per slice, one 64-key step past the last tile.
    const size_t key_stride = (tokens + kTileK - 1) / kTileK * kTileK + 64;
    out.vt = TransposedCodes(codes, slices, tokens, key_stride);
    out.vt_key_stride = key_stride;
    return out;
  }
  // Keys interleaved column by column in quads, [tokens / 4 rounded up][width][4] per slice:
  // the u8 x s8 tile reads them as they are, the int16 pair tile regroups them per key tile.
  out.key_quads = (tokens + 3) / 4;
  Buffer<uint8_t>& quads = int8_rows_.emplace_back(slices * out.key_quads * width * 4, uint8_t(0));
  for (size_t slice = 0; slice < slices; ++slice) {
    for (size_t j = 0; j < tokens; ++j) {
      uint8_t* row = quads.data() + (slice * out.key_quads + j / 4) * width * 4;
      for (size_t c = 0; c < dim; ++c) row[4 * c + j % 4] = codes[(slice * tokens + j) * dim + c];
    }
  }
  out.v_quads = reinterpret_cast<const int8_t*>(quads.data());
  return out;
}

bool QuantizedOperands::AmxBf16Pv(const quant::QuantSpec& value) const {
  return Native(value) && value.format == quant::Format::kBf16 &&
         precision_.p == quant::Format::kBf16 &&
         native::AmxBf16TakesDim(size_t(shape_.head_dim)) && native::Bf16PairsEnabled() &&
         native::NativePathEnabled(native::NativePath::kAvx512Bf16) &&
         (native::Bf16PairsOnAmx() || !FewQueryTiles());
}

// V^T of each (batch, kv head) as bf16 codes, [head_dim][key_stride], zero past kv_len; the
// key stride reaches one 32-key step past the last key tile's start (tiles of kTileK keys take
// two steps, the second reading into the next tile, or into the zeros at the end). V is
// rounded to bf16 by the vector codec first, then transposed by the AVX-512 code of the
// backward's layouts (the tiles' condition implies AVX-512), which also finds an inf or NaN.
bool QuantizedOperands::EncodeTransposedValues(ConstTensor v, AmxPv& out) {
  const size_t tokens = size_t(shape_.kv_len);
  const size_t key_stride = (tokens + kTileK - 1) / kTileK * kTileK + 64;
  const ConstTensor rounded = Value(v);  // bf16 values in fp32, a dense copy
  bool finite = true;
  const uint16_t* codes =
      Bf16Codes(rounded, shape_.kv_heads, shape_.kv_len, key_stride, Bf16Layout::kTransposed,
                finite);
  copies_.pop_back();  // the copy is not kept: a PreparedKv holds the codes alone
  if (!finite) return false;
  out = {codes, key_stride};
  return true;
}

QuantizedOperands::KvViews QuantizedOperands::PrepareKv(ConstTensor k, ConstTensor v,
                                                        AttentionProblem& problem, bool copies) {
  const quant::QuantSpec key = precision_.KeySpec(), value = precision_.ValueSpec();
  KvViews views{k, v};
  if (NativeInt8(key)) {
    EncodeInt8KeyRows(k, problem.int_qk);
  } else if (copies && !TilesMayReadKeyCodes(key.format)) {
    views.k = Key(k);
  } else if (Native(key)) {
    problem.k_codes = Encode(k, key.format);
  } else if (NativeFp8(key)) {
    problem.k_codes = EncodeFp8(k, key, "lpattn quantized K");
  } else {
    views.k = Key(k);
  }
  if (NativeInt8Pv(value)) {
    problem.int_pv = EncodeIntValues(v);
  } else if (AmxBf16Pv(value) && EncodeTransposedValues(v, problem.amx_pv)) {
    // V^T on tiles (a V with inf or NaN goes on to the decoded codes)
  } else if (copies) {
    views.v = Value(v);
  } else if (Native(value)) {
    problem.v_codes = Encode(v, value.format);
  } else if (NativeFp8(value)) {
    problem.v_codes = EncodeFp8(v, value, "lpattn quantized V");
  } else {
    views.v = Value(v);
  }
  return views;
}

ConstTensor QuantizedOperands::OwnKeyShaped(ConstTensor t) {
  const int64_t heads = shape_.kv_heads, tokens = shape_.kv_len, dim = shape_.head_dim;
  Buffer<float>& copy = copies_.emplace_back(size_t(shape_.batch * heads * tokens * dim));
  for (int64_t slice = 0; slice < shape_.batch * heads; ++slice) {
    for (int64_t j = 0; j < tokens; ++j) {
      const float* row = t.data + (slice / heads) * t.strides.batch +
                         (slice % heads) * t.strides.head + j * t.strides.token;
      std::copy(row, row + dim, copy.data() + (slice * tokens + j) * dim);
    }
  }
  return {copy.data(), ContiguousBHTD(heads, tokens, dim)};
}

size_t QuantizedOperands::BytesHeld() const {
  size_t bytes = 0;
  const auto add = [&](const auto& buffers) {
    for (const auto& b : buffers) bytes += b.size() * sizeof(b[0]);
  };
  add(copies_);
  add(codes_);
  add(int_queries_);
  add(int_keys_);
  add(int8_rows_);
  add(tile_codes_);
  return bytes;
}

AmxScores QuantizedOperands::AmxScoresFor(const CodedKv& k) const {
  const quant::Format query = precision_.QuerySpec().format;
  if (!TilesMayReadKeyCodes(k.fp16 ? quant::Format::kFp16 : quant::Format::kBf16)) {
    return AmxScores::kOff;
  }
  // The dot tiles take bf16 and fp8 K and Q over query tiles of more than a few rows: a decode
  // tile of a few rows would fill one vector of 16 queries in four, and fp16's split (four
  // products per channel) costs more than the dot's rate gains over fp32 FMAs. fp8's codes,
  // widened to bf16 per tile, took 0.79-0.86x the decoded path's time (Zen 5).
  const bool amx = native::Bf16PairsOnAmx();
  if (!amx && FewQueryTiles()) return AmxScores::kOff;
  if (k.data != nullptr && query == quant::Format::kBf16 && !k.fp16) return AmxScores::kBf16;
  // A decode tile of a few rows reads fp16 and fp8 K faster decoded in registers for fp32 dot
  // products (FewQueryScores) than split or widened into bf16 tiles (1.45x and 1.2x a 32768-key
  // step, Xeon 4th gen); bf16 K is read in place by the tiles and stays on them.
  if (FewQueryTiles()) return AmxScores::kOff;
  if (amx && k.data != nullptr && query == quant::Format::kFp16 && k.fp16) return AmxScores::kFp16;
  const bool fp8 = query == quant::Format::kFp8E4M3 || query == quant::Format::kFp8E5M2;
  if (k.codes8 != nullptr && fp8) return AmxScores::kFp8;
  return AmxScores::kOff;
}

ConstTensor QuantizedOperands::PrepareQueries(ConstTensor q, AttentionProblem& problem) {
  // Q K^T on AMX: the forward rounds bf16 and fp16 Q as it packs each query tile, and packs
  // fp8 Q from its codes; the float view is then not read.
  problem.amx_qk = AmxScoresFor(problem.k_codes);
  if (problem.amx_qk == AmxScores::kBf16 || problem.amx_qk == AmxScores::kFp16) return q;
  if (problem.amx_qk == AmxScores::kFp8) {
    Buffer<float>& scales = copies_.emplace_back();
    const Buffer<uint8_t>& codes = int8_rows_.emplace_back(Int8Codes(
        q, precision_.QuerySpec(), shape_.heads, shape_.q_len, "lpattn quantized Q", scales));
    problem.q_codes.strides = ContiguousBHTD(shape_.heads, shape_.q_len, shape_.head_dim);
    problem.q_codes.codes8 = codes.data();
    problem.q_codes.token_scales = scales.data();
    problem.q_codes.scale_strides = ContiguousBHTD(shape_.heads, shape_.q_len, 1);
    problem.q_codes.e5m2 = precision_.QuerySpec().format == quant::Format::kFp8E5M2;
    return q;
  }
  if (!NativeInt8(precision_.KeySpec())) {
    // A plain cast is applied as the tiles are packed: no rounded copy of Q (PackTransposed).
    const quant::QuantSpec spec = precision_.QuerySpec();
    if (Native(spec) && !spec.scale_casts) {
      problem.q_cast = spec.format;
      return q;
    }
    return Query(q);
  }
  problem.amx_qk8 = problem.int_qk.k_rows != nullptr && AmxInt8Keys();
  problem.quad_qk8 = problem.int_qk.k_rows != nullptr && !problem.amx_qk8 && VnniInt8Keys();
  EncodeIntQueries(q, problem.int_qk);
  return q;
}

ConstTensor QuantizedOperands::Query(ConstTensor q, const char* name) {
  return Quantize(q, precision_.QuerySpec(), shape_.heads, shape_.q_len, name);
}
ConstTensor QuantizedOperands::Key(ConstTensor k, const char* name) {
  return Quantize(k, precision_.KeySpec(), shape_.kv_heads, shape_.kv_len, name);
}
ConstTensor QuantizedOperands::Value(ConstTensor v, const char* name) {
  return Quantize(v, precision_.ValueSpec(), shape_.kv_heads, shape_.kv_len, name);
}

namespace {
// Whether the bf16 pair products run on avx512_bf16's dot tiles rather than AMX (AMD): there
// bwd = int8's three token-sum products take them too, as the codes' bf16 values.
bool PairsOnDotTiles() { return !native::Bf16PairsOnAmx() && native::Bf16PairsEnabled(); }
}  // namespace

bool QuantizedOperands::BackwardTilesApply() const {
  const Precision& p = precision_;
  const bool int8 = p.bwd == quant::Format::kInt8 &&
                    native::AmxInt8TakesDim(size_t(shape_.head_dim)) &&
                    (native::NativePathEnabled(native::NativePath::kAmxInt8) || PairsOnDotTiles());
  // The bf16 pair products on AMX tiles, or on avx512_bf16's dot tiles where the CPU runs a
  // bf16 dot at an FMA's rate (AMD): 0.73-0.82x the rounded fp32 products' time on Zen 5
  // (docs/performance.md §4.23). int8's token sums on AMX int8 tiles or, as exact integer
  // sums, on the same dot tiles. Not on the dot tiles for sequences within one tile: the
  // tiles take two passes where the register tiles' whole-head pass takes one, which cost
  // 1.05-1.10x a `small` training step (64 tokens, D 32).
  const bool one_tile = size_t(shape_.q_len) <= kTileMax && size_t(shape_.kv_len) <= kTileMax;
  if (one_tile && PairsOnDotTiles()) return false;
  return p.path == ComputePath::kNative && (p.bwd == quant::Format::kBf16 || int8) &&
         native::Bf16PairsEnabled() &&
         p.BackwardDpFormat() == quant::Format::kBf16 &&
         native::AmxBf16TakesDim(size_t(shape_.head_dim)) &&
         native::NativePathEnabled(native::NativePath::kAvx512Bf16);
}

namespace {
// A bf16 value's code is the upper half of its fp32 bits. An exponent field of all ones (inf,
// NaN) plus its lowest bit carries into bit 31, so OR-ing (bits & kExponent) + kCarry over
// every element leaves bit 31 set exactly when one was not finite. Only called with AVX-512
// (every AMX path's condition), which the loops are vectorised for.
constexpr uint32_t kExponent = 0x7F800000u, kCarry = 0x00800000u;

#if LPATTN_NATIVE_X86
#define LPATTN_AVX512 __attribute__((target("avx512f,avx512bw")))
#else
#define LPATTN_AVX512
#endif
LPATTN_AVX512 uint32_t CodeRows(const float* base, size_t stride, size_t n, size_t dim,
                              uint16_t* out) {
  uint32_t special = 0;
  for (size_t j = 0; j < n; ++j) {
    const float* row = base + j * stride;
    uint16_t* o = out + j * dim;
    for (size_t c = 0; c < dim; ++c) {
      uint32_t bits;
      std::memcpy(&bits, row + c, 4);
      special |= (bits & kExponent) + kCarry;
      o[c] = uint16_t(bits >> 16);
    }
  }
  return special;
}

// GCC 12's AVX-512 unpacks start from an uninitialised vector that every lane then overwrites,
// and -Wmaybe-uninitialized flags it (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if LPATTN_NATIVE_X86

// r[i] lane k becomes r[k] lane i: a 16 x 16 transpose of 32-bit words.
LPATTN_AVX512 inline void Transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int h = 0; h < 16; h += 8) {
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0xdd);
    }
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}

// Transposed ([dim][t_pad]) or channel pairs ([dim / 2][t_pad][2], one 32-bit word a pair),
// zero from token n on: blocks of 16 tokens x 16 words (16 channels' bits, or 16 pairs'
// codes) through one transpose each. dim is a multiple of 32, t_pad of 16.
LPATTN_AVX512 uint32_t CodeColumns(const float* base, size_t stride, size_t n, size_t dim,
                                   size_t t_pad, bool pairs, uint16_t* out) {
  // The upper halves of 32 consecutive floats' bits, in order: 16 pair words.
  alignas(64) static const uint16_t kHigh[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21,
                                                 23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43,
                                                 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
  const __m512i high = _mm512_load_si512(kHigh);
  const __m512i exponent = _mm512_set1_epi32(int(kExponent)), carry = _mm512_set1_epi32(int(kCarry));
  __m512i special = _mm512_setzero_si512();
  const size_t words = pairs ? dim / 2 : dim;  // per token
  __m512i r[16];
  for (size_t j0 = 0; j0 < t_pad; j0 += 16) {
    for (size_t w0 = 0; w0 < words; w0 += 16) {
      for (size_t j = 0; j < 16; ++j) {
        if (j0 + j >= n) {
          r[j] = _mm512_setzero_si512();
          continue;
        }
        const float* row = base + (j0 + j) * stride;
        if (pairs) {
          const __m512i lo = _mm512_loadu_si512(row + 2 * w0);
          const __m512i hi = _mm512_loadu_si512(row + 2 * w0 + 16);
          special = _mm512_or_si512(special, _mm512_add_epi32(_mm512_and_si512(lo, exponent), carry));
          special = _mm512_or_si512(special, _mm512_add_epi32(_mm512_and_si512(hi, exponent), carry));
          r[j] = _mm512_permutex2var_epi16(lo, high, hi);
        } else {
          r[j] = _mm512_loadu_si512(row + w0);
          special = _mm512_or_si512(special, _mm512_add_epi32(_mm512_and_si512(r[j], exponent), carry));
        }
      }
      Transpose16(r);  // r[w]: word w0 + w of the 16 tokens
      for (size_t w = 0; w < 16; ++w) {
        if (pairs) {
          _mm512_storeu_si512(out + (w0 + w) * 2 * t_pad + 2 * j0, r[w]);
        } else {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (w0 + w) * t_pad + j0),
                              _mm512_cvtepi32_epi16(_mm512_srli_epi32(r[w], 16)));
        }
      }
    }
  }
  alignas(64) uint32_t lanes[16];
  _mm512_store_si512(lanes, special);
  uint32_t all = 0;
  for (uint32_t x : lanes) all |= x;
  return all;
}

// Codes [n][dim] (int8) as the bf16 codes of their values (exact: |code| <= 128), transposed to
// [dim][t_pad] and zero from token n on, for the dot tiles: blocks of 16 tokens x 16 channels
// through one transpose of 32-bit words each. dim and t_pad are multiples of 16.
LPATTN_AVX512 void WidenColumns(const int8_t* in, size_t n, size_t dim, size_t t_pad,
                                uint16_t* out) {
  __m512i r[16];
  for (size_t j0 = 0; j0 < t_pad; j0 += 16) {
    for (size_t c0 = 0; c0 < dim; c0 += 16) {
      for (size_t j = 0; j < 16; ++j) {
        if (j0 + j >= n) {
          r[j] = _mm512_setzero_si512();
          continue;
        }
        const int8_t* row = in + (j0 + j) * dim + c0;
        const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row));
        const __m512 values = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(codes));
        r[j] = _mm512_srli_epi32(_mm512_castps_si512(values), 16);
      }
      Transpose16(r);  // r[w]: channel c0 + w of the 16 tokens
      for (size_t w = 0; w < 16; ++w) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (c0 + w) * t_pad + j0),
                            _mm512_cvtepi32_epi16(r[w]));
      }
    }
  }
}
#else
// Off x86-64 no AMX or dot tile path is taken, which are these functions' only callers
// (docs/design.md §11).
uint32_t CodeColumns(const float*, size_t, size_t, size_t, size_t, bool, uint16_t*) {
  native::NativeFamilyNotCompiled("CodeColumns");
}
void WidenColumns(const int8_t*, size_t, size_t, size_t, uint16_t*) {
  native::NativeFamilyNotCompiled("WidenColumns");
}
#endif
#undef LPATTN_AVX512
#pragma GCC diagnostic pop
}  // namespace

const uint16_t* QuantizedOperands::Bf16Codes(ConstTensor t, int64_t heads, int64_t tokens,
                                             size_t t_pad, Bf16Layout layout, bool& finite) {
  const size_t dim = size_t(shape_.head_dim), n = size_t(tokens);
  const size_t slices = size_t(shape_.batch * heads);
  const size_t per_slice = layout == Bf16Layout::kRows ? n * dim : dim * t_pad;
  // From the pool, warm: fresh pages for the layouts cost as much as the dot tiles saved at
  // N 4096, D 128 (docs/performance.md §4.23).
  uint16_t* codes = tile_codes_.emplace_back(slices * per_slice).data();
  std::atomic<bool> all_finite{true};
  tbb::parallel_for(size_t(0), slices, [&](size_t slice) {
    const size_t b = slice / size_t(heads), h = slice % size_t(heads);
    const float* base = t.data + b * size_t(t.strides.batch) + h * size_t(t.strides.head);
    const size_t stride = size_t(t.strides.token);
    uint16_t* out = codes + slice * per_slice;
    const uint32_t special =
        layout == Bf16Layout::kRows
            ? CodeRows(base, stride, n, dim, out)
            : CodeColumns(base, stride, n, dim, t_pad, layout == Bf16Layout::kChannelPairs, out);
    if ((special & 0x80000000u) != 0) all_finite = false;
  });
  finite = finite && all_finite;
  return codes;
}

Buffer<uint8_t> QuantizedOperands::ChannelCodes(ConstTensor t, int64_t heads, int64_t tokens,
                                                const float*& scales) {
  const size_t dim = size_t(shape_.head_dim);
  Buffer<uint8_t> codes(size_t(shape_.batch * heads * tokens) * dim);
  Buffer<float>& channel_scales = copies_.emplace_back(size_t(shape_.batch * heads) * dim);
  quant::QuantizeToChannelCodes(precision_.BackwardTokenSumSpec(),
                                {t.data, shape_.batch, heads, tokens, shape_.head_dim,
                                 t.strides.batch, t.strides.head, t.strides.token},
                                codes.data(), channel_scales.data(), "lpattn backward int8 operand");
  scales = channel_scales.data();
  return codes;
}

const int8_t* QuantizedOperands::Int8ChannelRows(ConstTensor t, int64_t heads, int64_t tokens,
                                                 size_t t_pad, const float*& scales) {
  const Buffer<uint8_t> codes = ChannelCodes(t, heads, tokens, scales);
  return TransposedCodes(codes, size_t(shape_.batch * heads), size_t(tokens), t_pad);
}

const uint16_t* QuantizedOperands::Bf16ChannelRows(ConstTensor t, int64_t heads, int64_t tokens,
                                                   size_t t_pad, const float*& scales) {
  const Buffer<uint8_t> codes = ChannelCodes(t, heads, tokens, scales);
  const size_t dim = size_t(shape_.head_dim), n = size_t(tokens);
  const size_t slices = size_t(shape_.batch * heads);
  uint16_t* rows = tile_codes_.emplace_back(slices * dim * t_pad).data();
  tbb::parallel_for(size_t(0), slices, [&](size_t slice) {
    WidenColumns(reinterpret_cast<const int8_t*>(codes.data()) + slice * n * dim, n, dim, t_pad,
                 rows + slice * dim * t_pad);
  });
  return rows;
}

const int8_t* QuantizedOperands::TransposedCodes(const Buffer<uint8_t>& codes, size_t slices,
                                                 size_t tokens, size_t t_pad) {
  const size_t dim = size_t(shape_.head_dim);
  Buffer<uint8_t>& rows = int8_rows_.emplace_back(slices * dim * t_pad, uint8_t(0));
  tbb::parallel_for(size_t(0), slices, [&](size_t slice) {
    const uint8_t* in = codes.data() + slice * tokens * dim;
    uint8_t* out = rows.data() + slice * dim * t_pad;
    for (size_t j = 0; j < tokens; ++j) {
      for (size_t c = 0; c < dim; ++c) out[c * t_pad + j] = in[j * dim + c];
    }
  });
  return reinterpret_cast<const int8_t*>(rows.data());
}

void QuantizedOperands::PrepareBackwardTiles(const BackwardArgs& args, BackwardRounding& r) {
  if (!BackwardTilesApply()) return;
  BackwardTiles bt;
  // A query tile's products read up to kTileQ tokens from its start, a key tile's up to 64.
  bt.q_pad = (size_t(shape_.q_len) + kTileQ - 1) / kTileQ * kTileQ;
  bt.kv_pad = (size_t(shape_.kv_len) + kTileK - 1) / kTileK * kTileK + 16;
  const int64_t hq = shape_.heads, hk = shape_.kv_heads, tq = shape_.q_len, tk = shape_.kv_len;
  using L = Bf16Layout;
  // A tile multiplies padding and masked entries by zero weights, so every operand it reads
  // must be finite: one that is not leaves the backward to the register tiles.
  bool finite = true;
  // S from the forward's operands: on tiles when they hold bf16 values (qk = bf16, no smoothing).
  bt.scores = precision_.qk == quant::Format::kBf16 && !precision_.smooth_k;
  if (bt.scores) {
    bt.q_rows = Bf16Codes(args.q, hq, tq, 0, L::kRows, finite);
    bt.q_pairs = Bf16Codes(args.q, hq, tq, bt.q_pad, L::kChannelPairs, finite);
    bt.k_rows = Bf16Codes(args.k, hk, tk, 0, L::kRows, finite);
    bt.k_pairs = Bf16Codes(args.k, hk, tk, bt.kv_pad, L::kChannelPairs, finite);
  }
  bt.dp_d_o_rows = Bf16Codes(r.dp_d_o, hq, tq, 0, L::kRows, finite);
  bt.dp_d_o_pairs = Bf16Codes(r.dp_d_o, hq, tq, bt.q_pad, L::kChannelPairs, finite);
  bt.dp_v_rows = Bf16Codes(r.dp_v, hk, tk, 0, L::kRows, finite);
  bt.dp_v_pairs = Bf16Codes(r.dp_v, hk, tk, bt.kv_pad, L::kChannelPairs, finite);
  if (precision_.bwd == quant::Format::kInt8) {
    // A key tile's int8 products read up to 128 queries from its query tile's start.
    bt.int8 = true;
    bt.q_pad8 = bt.q_pad + 64;
    if (PairsOnDotTiles()) {
      bt.q_t8_bf16 = Bf16ChannelRows(args.q, hq, tq, bt.q_pad8, bt.q_scales8);
      bt.k_t8_bf16 = Bf16ChannelRows(args.k, hk, tk, bt.kv_pad, bt.k_scales8);
      bt.d_o_t8_bf16 = Bf16ChannelRows(args.d_o, hq, tq, bt.q_pad8, bt.d_o_scales8);
    } else {
      bt.q_t8 = Int8ChannelRows(args.q, hq, tq, bt.q_pad8, bt.q_scales8);
      bt.k_t8 = Int8ChannelRows(args.k, hk, tk, bt.kv_pad, bt.k_scales8);
      bt.d_o_t8 = Int8ChannelRows(args.d_o, hq, tq, bt.q_pad8, bt.d_o_scales8);
    }
  } else {
    bt.q_t = Bf16Codes(r.q, hq, tq, bt.q_pad, L::kTransposed, finite);
    bt.k_t = Bf16Codes(r.k, hk, tk, bt.kv_pad, L::kTransposed, finite);
    bt.d_o_t = Bf16Codes(r.d_o, hq, tq, bt.q_pad, L::kTransposed, finite);
  }
  bt.on = finite;
  if (finite) r.tiles = bt;
}

void QuantizedOperands::PrepareBackward(const BackwardArgs& args, AttentionProblem& problem,
                                        BackwardPlan plan) {
  const Precision& p = precision_;
  if (p.BackwardIsFp32()) return;
  const quant::QuantSpec sums = p.BackwardTokenSumSpec(), dp = p.BackwardDpSpec();
  const auto copy = [&](ConstTensor t, const quant::QuantSpec& spec, int64_t heads,
                        int64_t tokens, const char* name) {
    return spec.format == quant::Format::kFp32 ? ConstTensor{}
                                               : Quantize(t, spec, heads, tokens, name);
  };
  // A bf16 cast of an operand the forward already cast to bf16 is the operand itself.
  const auto cast_of = [&](quant::Format forward, const quant::QuantSpec& spec) {
    return forward == quant::Format::kBf16 && spec.format == quant::Format::kBf16;
  };
  const bool q_is_bf16 = plan.forward_qk && cast_of(p.qk, sums);
  const bool k_is_bf16 = q_is_bf16 && !p.smooth_k;
  const bool v_is_bf16 = cast_of(p.pv, dp);
  const int64_t heads = shape_.heads, kv_heads = shape_.kv_heads;
  BackwardRounding& r = problem.bwd;
  r.q = q_is_bf16 ? args.q : copy(args.q, sums, heads, shape_.q_len, "lpattn backward Q");
  r.k = k_is_bf16 ? args.k : copy(args.k, sums, kv_heads, shape_.kv_len, "lpattn backward K");
  r.d_o = copy(args.d_o, sums, heads, shape_.q_len, "lpattn backward dO");
  // A cast is the same whatever its granularity: dP then shares dV's copy of dO.
  const bool same_cast = dp.format == sums.format && !quant::FormatIsScaled(dp.format) &&
                         !dp.scale_casts;
  r.dp_d_o = same_cast ? r.d_o : copy(args.d_o, dp, heads, shape_.q_len, "lpattn backward dO");
  r.dp_v = v_is_bf16 ? args.v : copy(args.v, dp, kv_heads, shape_.kv_len, "lpattn backward V");
  r.format = p.bwd;
  r.scaled = quant::FormatIsScaled(p.bwd) || sums.scale_casts;
  if (plan.tiles) PrepareBackwardTiles(args, r);
}

}  // namespace lpattn
