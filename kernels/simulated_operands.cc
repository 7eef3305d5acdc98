// Dequantized operand copies for the simulation path (simulated_operands.h).
#include "kernels/simulated_operands.h"

#include "quant/quantizer.h"

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
