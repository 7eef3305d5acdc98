// Dequantized operand copies for the simulation path (simulated_operands.h).
#include "kernels/simulated_operands.h"

#include "quant/codec.h"
#include "quant/quantizer.h"
#include "tbb/parallel_for.h"

namespace lpattn {

ConstTensor SimulatedOperands::Quantize(ConstTensor t, const quant::QuantSpec& spec,
                                        int64_t heads, int64_t tokens, const char* name) {
  if (spec.format == quant::Format::kFp32) return t;
  const int64_t dim = shape_.head_dim;
  const quant::TensorView view{t.data,           shape_.batch,    heads,          tokens, dim,
                               t.strides.batch, t.strides.head, t.strides.token};
  std::vector<float>& copy = copies_.emplace_back(size_t(shape_.batch * heads * tokens * dim));
  quant::QuantizeDequantize(spec, view, copy.data(), name);
  return {copy.data(), ContiguousBHTD(heads, tokens, dim)};
}

bool SimulatedOperands::Native(const quant::QuantSpec& spec) const {
  return precision_.path == ComputePath::kNative && !spec.smooth &&
         (spec.format == quant::Format::kBf16 || spec.format == quant::Format::kFp16);
}

CodedKv SimulatedOperands::Encode(ConstTensor t, quant::Format format) {
  const int64_t heads = shape_.kv_heads, tokens = shape_.kv_len, dim = shape_.head_dim;
  std::vector<uint16_t>& codes = codes_.emplace_back(size_t(shape_.batch * heads * tokens * dim));
  tbb::parallel_for(int64_t(0), shape_.batch * heads, [&](int64_t slice) {
    const int64_t b = slice / heads, h = slice % heads;
    for (int64_t j = 0; j < tokens; ++j) {
      const float* row = t.data + b * t.strides.batch + h * t.strides.head + j * t.strides.token;
      quant::EncodeRow(format, row, 1.0f, codes.data() + (slice * tokens + j) * dim, size_t(dim));
    }
  });
  return {codes.data(), ContiguousBHTD(heads, tokens, dim), format == quant::Format::kFp16};
}

bool SimulatedOperands::NativeInt8(const quant::QuantSpec& key) const {
  return precision_.path == ComputePath::kNative && key.format == quant::Format::kInt8 &&
         key.granularity != quant::Granularity::kChannel && !key.smooth;
}

IntQk SimulatedOperands::EncodeIntQk(ConstTensor q, ConstTensor k) {
  const int64_t dim = shape_.head_dim, pairs = (dim + 1) / 2;
  auto codes_of = [&](ConstTensor t, const quant::QuantSpec& spec, int64_t heads, int64_t tokens,
                      const char* what, std::vector<float>& scales) {
    std::vector<uint8_t> codes(size_t(shape_.batch * heads * tokens * dim));
    scales.resize(size_t(shape_.batch * heads * tokens));
    quant::QuantizeToCodes(spec,
                           {t.data, shape_.batch, heads, tokens, dim, t.strides.batch,
                            t.strides.head, t.strides.token},
                           codes.data(), scales.data(), what);
    return codes;
  };
  std::vector<float>& q_scales = copies_.emplace_back();
  std::vector<float>& k_scales = copies_.emplace_back();
  const std::vector<uint8_t> q_codes = codes_of(q, precision_.QuerySpec(), shape_.heads,
                                                shape_.q_len, "lpattn quantized Q", q_scales);
  const std::vector<uint8_t> k_codes = codes_of(k, precision_.KeySpec(), shape_.kv_heads,
                                                shape_.kv_len, "lpattn quantized K", k_scales);
  // int8 codes widened to int16, odd head dimensions padded with a zero channel.
  auto code = [&](const std::vector<uint8_t>& codes, size_t row, int64_t c) {
    return c < dim ? int16_t(int8_t(codes[row * size_t(dim) + size_t(c)])) : int16_t(0);
  };
  std::vector<int16_t>& queries = int_queries_.emplace_back(q_scales.size() * size_t(2 * pairs));
  for (size_t row = 0; row < q_scales.size(); ++row) {
    for (int64_t c = 0; c < 2 * pairs; ++c) queries[row * size_t(2 * pairs) + size_t(c)] = code(q_codes, row, c);
  }
  std::vector<int32_t>& keys = int_keys_.emplace_back(k_scales.size() * size_t(pairs));
  for (size_t row = 0; row < k_scales.size(); ++row) {
    for (int64_t p = 0; p < pairs; ++p) {
      const uint32_t lo = uint16_t(code(k_codes, row, 2 * p));
      const uint32_t hi = uint16_t(code(k_codes, row, 2 * p + 1));
      keys[row * size_t(pairs) + size_t(p)] = int32_t(lo | (hi << 16));
    }
  }
  return {queries.data(), q_scales.data(), keys.data(), k_scales.data(), size_t(pairs)};
}

ConstTensor SimulatedOperands::Query(ConstTensor q, const char* name) {
  return Quantize(q, precision_.QuerySpec(), shape_.heads, shape_.q_len, name);
}
ConstTensor SimulatedOperands::Key(ConstTensor k, const char* name) {
  return Quantize(k, precision_.KeySpec(), shape_.kv_heads, shape_.kv_len, name);
}
ConstTensor SimulatedOperands::Value(ConstTensor v, const char* name) {
  return Quantize(v, precision_.ValueSpec(), shape_.kv_heads, shape_.kv_len, name);
}

}  // namespace lpattn
