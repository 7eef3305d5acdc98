// What a PreparedKv holds (internal): the storage and the views the skeleton reads.
#ifndef LPATTN_KERNELS_NATIVE_PREPARED_KV_IMPL_H_
#define LPATTN_KERNELS_NATIVE_PREPARED_KV_IMPL_H_

#include "kernels/native/quantized_operands.h"
#include "kernels/prepared_kv.h"
#include "kernels/skeleton/attention_problem.h"

namespace lpattn {

struct PreparedKv::Impl {
  Impl(const AttentionShape& s, const Precision& p) : shape(s), precision(p), storage(s, p) {}
  AttentionShape shape;
  Precision precision;
  QuantizedOperands storage;      // owns every buffer below
  // fp32 views of K and V (owned copies) where not coded; where coded, the caller's tensors,
  // never read.
  QuantizedOperands::KvViews views;
  AttentionProblem coded{};  // only k_codes, v_codes, int_qk's key half and int_pv are set
};

}  // namespace lpattn

#endif  // LPATTN_KERNELS_NATIVE_PREPARED_KV_IMPL_H_
