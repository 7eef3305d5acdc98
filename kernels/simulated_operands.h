// The simulation path of low-precision operands (spec/kernels.md §4): each operand the
// precision option quantizes is replaced by a dense dequantized fp32 copy before the tiled
// skeleton runs, so every row transform sees exactly the values a low-precision product would
// multiply. In the backward the same copies stand in for the operands (straight-through: the
// gradients with respect to the unquantized operands are computed with the dequantized ones).
#ifndef LPATTN_KERNELS_SIMULATED_OPERANDS_H_
#define LPATTN_KERNELS_SIMULATED_OPERANDS_H_

#include <deque>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_problem.h"

namespace lpattn {

class SimulatedOperands {
 public:
  SimulatedOperands(const AttentionShape& shape, const Precision& precision)
      : shape_(shape), precision_(precision) {}

  // The view to multiply with: `t` itself when its format is fp32, else a dequantized copy
  // (owned by this object). Throws std::invalid_argument as quant::QuantizeDequantize does.
  ConstTensor Query(ConstTensor q, const char* name = "lpattn quantized Q");
  ConstTensor Key(ConstTensor k, const char* name = "lpattn quantized K");
  ConstTensor Value(ConstTensor v, const char* name = "lpattn quantized V");
  // Args (ForwardArgs, BackwardArgs, the K-interval ones) with q, k and v replaced.
  template <class Args>
  Args Substitute(Args args) {
    args.q = Query(args.q);
    args.k = Key(args.k);
    args.v = Value(args.v);
    return args;
  }
  // The same for a dense transform's forward, taking the native path where the precision
  // allows it: K and V in bf16 or fp16 are encoded to 16-bit codes into problem's k_codes and
  // v_codes (their float views in the result are then unused) instead of being simulated.
  // Q and K in int8 (not per channel, not smoothed) become IntQk codes for integer products.
  template <class Args>
  Args SubstituteForward(Args args, AttentionProblem& problem) {
    const quant::QuantSpec key = precision_.KeySpec(), value = precision_.ValueSpec();
    if (NativeInt8(key)) {  // the scores come from problem.int_qk: args.q and args.k unread
      problem.int_qk = EncodeIntQk(args.q, args.k);
    } else {
      args.q = Query(args.q);
      if (Native(key)) {
        problem.k_codes = Encode(args.k, key.format);
      } else {
        args.k = Key(args.k);
      }
    }
    if (Native(value)) {
      problem.v_codes = Encode(args.v, value.format);
    } else {
      args.v = Value(args.v);
    }
    return args;
  }

 private:
  ConstTensor Quantize(ConstTensor t, const quant::QuantSpec& spec, int64_t heads,
                       int64_t tokens, const char* name);
  // bf16 or fp16 without smoothing, on the native path: storage the forward decodes itself.
  bool Native(const quant::QuantSpec& spec) const;
  CodedKv Encode(ConstTensor t, quant::Format format);
  // int8 Q K^T on the native path: per-token, per-block or per-tensor scales, no smoothing.
  bool NativeInt8(const quant::QuantSpec& key) const;
  IntQk EncodeIntQk(ConstTensor q, ConstTensor k);
  AttentionShape shape_;
  Precision precision_;
  std::deque<std::vector<float>> copies_;
  std::deque<std::vector<uint16_t>> codes_;
  std::deque<std::vector<int16_t>> int_queries_;
  std::deque<std::vector<int32_t>> int_keys_;
};

}  // namespace lpattn

#endif  // LPATTN_KERNELS_SIMULATED_OPERANDS_H_
