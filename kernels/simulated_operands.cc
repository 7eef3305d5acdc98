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
