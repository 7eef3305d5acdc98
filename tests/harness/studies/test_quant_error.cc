// `lpattn quant-error` on a small shape: its rows, and the orderings its table exists to show.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "harness/studies/quant_error.h"

namespace lpattn::harness {
namespace {

TEST(QuantError, TableShowsFormatsGranularityAndSmoothing) {
  QuantErrorOptions options;
  options.tokens = 96;
  options.heads = 2;
  options.head_dim = 32;
  const std::vector<QuantErrorRow> rows = MeasureQuantError(options);
  ASSERT_EQ(rows.size(), 2 * QuantErrorPrecisions().size());
  std::map<std::string, double> o_error, dq_error;
  for (const QuantErrorRow& r : rows) {
    o_error[r.inputs + " " + r.precision] = r.o.rel_l2;
    dq_error[r.inputs + " " + r.precision] = r.dq.rel_l2;
    for (const TensorError& e : {r.o, r.dq, r.dk, r.dv}) {
      EXPECT_TRUE(std::isfinite(e.rel_l2)) << r.inputs << " " << r.precision;
      EXPECT_LE(e.cosine, 1.0 + 1e-9);
    }
    if (r.precision.empty()) {  // fp32: only summation order separates kernel and reference
      EXPECT_LT(r.o.rel_l2, 1e-4);  // (outliers: scores of +-100 magnify fp32 rounding)
      EXPECT_LT(r.dq.rel_l2, 1e-4);
      EXPECT_GT(r.o.cosine, 1.0 - 1e-9);
    }
  }
  // Resolution: fp16 < bf16 < int8 (per token) < e4m3 < e5m2 on Gaussian inputs.
  EXPECT_LT(o_error["gaussian qk=fp16:pv=fp16"], o_error["gaussian qk=bf16:pv=bf16"]);
  EXPECT_LT(o_error["gaussian qk=bf16:pv=bf16"], o_error["gaussian qk=int8:pv=int8:gran=token"]);
  EXPECT_LT(o_error["gaussian qk=int8:pv=int8:gran=token"],
            o_error["gaussian qk=fp8e4m3:pv=fp8e4m3:gran=token"]);
  EXPECT_LT(o_error["gaussian qk=fp8e4m3:pv=fp8e4m3:gran=token"],
            o_error["gaussian qk=fp8e5m2:pv=fp8e5m2:gran=token"]);
  // Outliers hurt, finer scales help, and K smoothing removes the shared channel offset.
  EXPECT_GT(o_error["outliers qk=int8:pv=int8:gran=token"],
            o_error["gaussian qk=int8:pv=int8:gran=token"]);
  EXPECT_LT(o_error["outliers qk=int8:pv=int8:gran=token"],
            o_error["outliers qk=int8:pv=int8:gran=tensor"]);
  EXPECT_LT(2.0 * o_error["outliers qk=int8:pv=int8:gran=token:smooth_k=1"],
            o_error["outliers qk=int8:pv=int8:gran=token"]);
  EXPECT_LT(3.0 * o_error["outliers qk=fp8e4m3:pv=fp8e4m3:gran=token:smooth_k=1"],
            o_error["outliers qk=fp8e4m3:pv=fp8e4m3:gran=token"]);

  // Rounding P to int8 (fixed 1/127 scale) costs O about what int8 operands do; bf16 P less.
  EXPECT_LT(o_error["gaussian p=bf16"], o_error["gaussian p=int8"]);
  EXPECT_GT(o_error["gaussian p=int8"], 1e-4);

  // The low-precision backward (docs/math.md §4.2) leaves O alone and costs dQ by resolution.
  EXPECT_EQ(o_error["gaussian bwd=int8"], o_error["gaussian "]);
  EXPECT_LT(dq_error["gaussian bwd=fp16"], dq_error["gaussian bwd=bf16"]);
  EXPECT_LT(dq_error["gaussian bwd=bf16"], dq_error["gaussian bwd=int8"]);
  EXPECT_GT(dq_error["gaussian bwd=bf16"], 10 * dq_error["gaussian "]);

  const std::string table = FormatQuantErrorTable(rows);
  EXPECT_NE(table.find("Inputs: outliers"), std::string::npos);
  EXPECT_NE(table.find("`qk=int8:pv=int8:gran=channel:smooth_k=1`"), std::string::npos);
  const nlohmann::json j = QuantErrorJson(options, rows);
  EXPECT_EQ(j["rows"].size(), rows.size());
  EXPECT_EQ(j["rows"][0]["precision"], "fp32");
}

TEST(QuantError, RejectsBadSizes) {
  QuantErrorOptions options;
  options.head_dim = 300;
  EXPECT_THROW(MeasureQuantError(options), std::invalid_argument);
  options.head_dim = 64;
  options.tokens = 0;
  EXPECT_THROW(MeasureQuantError(options), std::invalid_argument);
}

}  // namespace
}  // namespace lpattn::harness
