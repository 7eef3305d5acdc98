// Thresholded attention's test inputs (docs/math.md §3): two views' queries and keys with one
// V, as the kernel and the fp64 reference take them, and the kernel's forward on them.
#ifndef LPATTN_TESTS_KERNELS_THRESHOLD_CASE_H_
#define LPATTN_TESTS_KERNELS_THRESHOLD_CASE_H_

#include <cstdint>
#include <vector>

#include "kernels/reference.h"
#include "kernels/threshold.h"
#include "tests/kernels/attention_case.h"

namespace lpattn::test {

// Two views' inputs: view 1 and V from one case in `layout`, view 2's Q and K from another in
// the other layout (the views' strides are independent).
struct TwoViewCase {
  AttentionCase first, second;
  std::vector<float> lambda_param;
  TwoViewCase(const AttentionShape& shape, bool causal, Layout layout, uint32_t seed = 1)
      : first(shape, causal, SinkMode::kNone, layout, seed),
        second(shape, causal, SinkMode::kNone,
               layout == Layout::kBHTD ? Layout::kBTHD : Layout::kBHTD, seed + 100) {
    for (int64_t h = 0; h < shape.heads; ++h) lambda_param.push_back(0.2f + 0.5f * float(h % 2));
  }
  const AttentionShape& shape() const { return first.shape; }
  const AttentionOptions& options() const { return first.options; }
  // The kernel's inputs (view 1's Q, K and V, view 2's Q and K, lambda), outputs unset.
  ThresholdForwardArgs Args() const {
    ThresholdForwardArgs args;
    args.q[0] = first.q.cview();
    args.k[0] = first.k.cview();
    args.q[1] = second.q.cview();
    args.k[1] = second.k.cview();
    args.v = first.v.cview();
    args.lambda_param = lambda_param.data();
    return args;
  }
  ReferenceThresholdInputs Dense() const {
    ReferenceThresholdInputs in;
    in.q[0] = first.q.Dense();
    in.k[0] = first.k.Dense();
    in.q[1] = second.q.Dense();
    in.k[1] = second.k.Dense();
    in.v = first.v.Dense();
    in.lambda_param.assign(lambda_param.begin(), lambda_param.end());
    return in;
  }
};

struct ThresholdRun {
  OwnedTensor o;
  std::vector<int32_t> survivors;
};

inline ThresholdRun RunForward(const TwoViewCase& c, const ThresholdOptions& threshold,
                               Layout layout, int threads = 0) {
  const AttentionShape& s = c.shape();
  ThresholdRun run{OwnedTensor(s.batch, s.heads, s.q_len, s.head_dim, layout),
                   std::vector<int32_t>(size_t(threshold.views * s.batch * s.heads * s.q_len), -1)};
  ThresholdForwardArgs args = c.Args();
  args.o = run.o.view();
  args.survivors = run.survivors.data();
  AttentionOptions options = c.options();
  options.threads = threads;
  ThresholdForward(s, options, threshold, args);
  return run;
}

}  // namespace lpattn::test

#endif  // LPATTN_TESTS_KERNELS_THRESHOLD_CASE_H_
