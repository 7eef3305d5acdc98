// lpattn._lpattn: the kernels over numpy views (docs/python.md §2). Each function checks every
// array, builds the C++ call, releases the GIL and runs the kernel; lpattn's own checks throw
// std::invalid_argument, which pybind11 raises as ValueError with the same message. Outputs are
// arrays the caller allocated; nothing is written before every check has passed.
#include <cstdint>
#include <optional>
#include <string>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "kernels/attention.h"
#include "kernels/kinterval.h"
#include "kernels/lpattn.h"
#include "kernels/threshold.h"
#include "kernels/value_gate.h"
#include "python/bindings/array_views.h"

namespace lpattn::python {
namespace {

using OptionalArray = std::optional<py::array>;

// The options of one call, built once in Python and reused by its backward.
struct Config {
  std::string layout = "bhtd";
  bool causal = false;
  std::optional<float> scale;
  std::string sink = "none";  // none, learned, off_by_one
  std::string precision;      // ParsePrecision's text; "" is fp32
  float softcap = 0.0f;
  int64_t window = 0;
  std::string kinterval;  // ParseKInterval's text
  std::string threshold;  // ParseThreshold's text
  int threads = 0;
};

SinkMode ParseSink(const std::string& name) {
  if (name == "none") return SinkMode::kNone;
  if (name == "learned") return SinkMode::kLearned;
  if (name == "off_by_one") return SinkMode::kOffByOne;
  throw py::value_error("sink must be 'none', 'learned' or 'off_by_one', got '" + name + "'");
}

// Q and K's views give the problem's shape; V must match K.
struct Operands {
  AttentionShape shape;
  Tensor4 q, k, v;
};

Operands ReadOperands(Layout layout, const py::array& q, const py::array& k,
                      const py::array& v) {
  Operands ops;
  ops.q = View4(q, layout, "q", false);
  ops.k = View4(k, layout, "k", false);
  if (ops.k.batch != ops.q.batch || ops.k.dim != ops.q.dim) {
    throw py::value_error("k must have q's batch (" + std::to_string(ops.q.batch) +
                          ") and head dimension (" + std::to_string(ops.q.dim) + "), got " +
                          std::to_string(ops.k.batch) + " and " + std::to_string(ops.k.dim));
  }
  ops.v = View4Like(v, layout, "v", false, ops.k.batch, ops.k.heads, ops.k.tokens, ops.k.dim);
  ops.shape = {ops.q.batch, ops.q.heads, ops.k.heads, ops.q.tokens, ops.k.tokens, ops.q.dim};
  return ops;
}

Tensor4 QueryShaped(const py::array& array, Layout layout, const char* name, bool writable,
                    const AttentionShape& s) {
  return View4Like(array, layout, name, writable, s.batch, s.heads, s.q_len, s.head_dim);
}
Tensor4 KeyShaped(const py::array& array, Layout layout, const char* name, bool writable,
                  const AttentionShape& s) {
  return View4Like(array, layout, name, writable, s.batch, s.kv_heads, s.kv_len, s.head_dim);
}

AttentionOptions BaseOptions(const Config& config, const AttentionShape& shape,
                             const OptionalArray& sink_logits, const OptionalArray& alibi) {
  AttentionOptions options;
  options.causal = config.causal;
  options.scale = config.scale;
  options.sink = ParseSink(config.sink);
  options.sink_logits = OptionalDenseData<float>(sink_logits, {shape.heads}, "sink", false);
  if (options.sink == SinkMode::kLearned && !options.sink_logits) {
    throw py::value_error("sink='learned' needs the sink logits, a float32 array of [heads]");
  }
  options.precision = ParsePrecision(config.precision);
  options.softcap = config.softcap;
  options.alibi_slopes = OptionalDenseData<float>(alibi, {shape.heads}, "alibi", false);
  options.window = config.window;
  options.threads = config.threads;
  return options;
}

// The rows' statistics, dense [B, H, Tq].
template <typename T>
T* RowData(const py::array& array, const AttentionShape& s, const char* name, bool writable) {
  return DenseData<T>(array, {s.batch, s.heads, s.q_len}, name, writable);
}

// The views the exact and K-interval backwards share (their argument structs name them alike).
template <typename Args>
void SetBackwardViews(Layout layout, const Operands& ops, const py::array& o,
                      const py::array& d_o, const py::array& dq, const py::array& dk,
                      const py::array& dv, Args& args) {
  const AttentionShape& s = ops.shape;
  args.q = ops.q.In();
  args.k = ops.k.In();
  args.v = ops.v.In();
  args.o = QueryShaped(o, layout, "o", false, s).In();
  args.d_o = QueryShaped(d_o, layout, "d_o", false, s).In();
  args.dq = QueryShaped(dq, layout, "dq", true, s).Out();
  args.dk = KeyShaped(dk, layout, "dk", true, s).Out();
  args.dv = KeyShaped(dv, layout, "dv", true, s).Out();
}

void ExactForwardArrays(const Config& config, const py::array& q, const py::array& k,
                        const py::array& v, const py::array& o, const py::array& lse,
                        const OptionalArray& sink_logits, const OptionalArray& alibi) {
  const Layout layout = ParseLayout(config.layout);
  const Operands ops = ReadOperands(layout, q, k, v);
  const AttentionOptions options = BaseOptions(config, ops.shape, sink_logits, alibi);
  ForwardArgs args{ops.q.In(), ops.k.In(), ops.v.In(),
                   QueryShaped(o, layout, "o", true, ops.shape).Out(),
                   RowData<float>(lse, ops.shape, "lse", true)};
  py::gil_scoped_release release;
  ExactForward(ops.shape, options, args);
}

void ExactBackwardArrays(const Config& config, const py::array& q, const py::array& k,
                         const py::array& v, const py::array& o, const py::array& d_o,
                         const py::array& lse, const py::array& dq, const py::array& dk,
                         const py::array& dv, const OptionalArray& sink_logits,
                         const OptionalArray& d_sink, const OptionalArray& alibi) {
  const Layout layout = ParseLayout(config.layout);
  const Operands ops = ReadOperands(layout, q, k, v);
  const AttentionShape& s = ops.shape;
  const AttentionOptions options = BaseOptions(config, s, sink_logits, alibi);
  BackwardArgs args;
  SetBackwardViews(layout, ops, o, d_o, dq, dk, dv, args);
  args.lse = RowData<float>(lse, s, "lse", false);
  args.d_sink = OptionalDenseData<float>(d_sink, {s.heads}, "d_sink", true);
  py::gil_scoped_release release;
  ExactBackward(s, options, args);
}

// K-interval's saved statistics: m, R, Z, lse_exact (float32) and argmax, argmin (int32).
KIntervalSaved SavedOf(const py::tuple& saved, const AttentionShape& s, bool writable) {
  if (saved.size() != 6) {
    throw py::value_error("saved must be (m, R, Z, lse_exact, argmax, argmin)");
  }
  const auto floats = [&](size_t i, const char* name) {
    return RowData<float>(saved[i].cast<py::array>(), s, name, writable);
  };
  const auto ints = [&](size_t i, const char* name) {
    return RowData<int32_t>(saved[i].cast<py::array>(), s, name, writable);
  };
  return {floats(0, "m"),         floats(1, "R"),        floats(2, "Z"),
          floats(3, "lse_exact"), ints(4, "argmax"),     ints(5, "argmin")};
}

void KIntervalForwardArrays(const Config& config, const py::array& q, const py::array& k,
                            const py::array& v, const py::array& o, const py::tuple& saved) {
  const Layout layout = ParseLayout(config.layout);
  const Operands ops = ReadOperands(layout, q, k, v);
  const AttentionOptions options = BaseOptions(config, ops.shape, std::nullopt, std::nullopt);
  const KIntervalOptions kint = ParseKInterval(config.kinterval);
  KIntervalForwardArgs args{ops.q.In(), ops.k.In(), ops.v.In(),
                            QueryShaped(o, layout, "o", true, ops.shape).Out(),
                            SavedOf(saved, ops.shape, true)};
  py::gil_scoped_release release;
  KIntervalForward(ops.shape, options, kint, args);
}

void KIntervalBackwardArrays(const Config& config, const py::array& q, const py::array& k,
                             const py::array& v, const py::array& o, const py::array& d_o,
                             const py::tuple& saved, const py::array& dq, const py::array& dk,
                             const py::array& dv) {
  const Layout layout = ParseLayout(config.layout);
  const Operands ops = ReadOperands(layout, q, k, v);
  const AttentionShape& s = ops.shape;
  const AttentionOptions options = BaseOptions(config, s, std::nullopt, std::nullopt);
  const KIntervalOptions kint = ParseKInterval(config.kinterval);
  KIntervalBackwardArgs args;
  SetBackwardViews(layout, ops, o, d_o, dq, dk, dv, args);
  args.saved = SavedOf(saved, s, false);
  py::gil_scoped_release release;
  KIntervalBackward(s, options, kint, args);
}

// Thresholded attention's second view (q2, k2, lambda): present exactly when views = 2.
struct SecondView {
  Tensor4 q, k;
  const float* lambda = nullptr;
};

SecondView ReadSecondView(const ThresholdOptions& threshold, Layout layout, const Operands& ops,
                          const OptionalArray& q2, const OptionalArray& k2,
                          const OptionalArray& lambda) {
  SecondView second;
  if (threshold.views == 1) {
    if (q2 || k2 || lambda) {
      throw py::value_error("q2, k2 and lam belong to views=2; views=1 takes none of them");
    }
    return second;
  }
  if (!q2 || !k2 || !lambda) {
    throw py::value_error("views=2 needs q2, k2 (shaped like q and k) and lam ([heads])");
  }
  second.q = QueryShaped(*q2, layout, "q2", false, ops.shape);
  second.k = KeyShaped(*k2, layout, "k2", false, ops.shape);
  second.lambda = DenseData<float>(*lambda, {ops.shape.heads}, "lam", false);
  return second;
}

// What thresholded attention's forward and backward both read: the operands of each view,
// V, lambda and the options.
struct ThresholdCall {
  Layout layout;
  Operands ops;
  AttentionOptions options;
  ThresholdOptions threshold;
  SecondView second;

  // The inputs every argument struct of the kernel has (ThresholdForwardArgs and
  // ThresholdBackwardArgs name them alike).
  template <typename Args>
  void SetInputs(Args& args) const {
    args.q[0] = ops.q.In();
    args.k[0] = ops.k.In();
    args.q[1] = second.q.In();
    args.k[1] = second.k.In();
    args.v = ops.v.In();
    args.lambda_param = second.lambda;
  }
};

ThresholdCall ReadThresholdCall(const Config& config, const py::array& q1, const py::array& k1,
                                const OptionalArray& q2, const OptionalArray& k2,
                                const py::array& v, const OptionalArray& lambda) {
  const Layout layout = ParseLayout(config.layout);
  Operands ops = ReadOperands(layout, q1, k1, v);
  AttentionOptions options = BaseOptions(config, ops.shape, std::nullopt, std::nullopt);
  const ThresholdOptions threshold = ParseThreshold(config.threshold);
  SecondView second = ReadSecondView(threshold, layout, ops, q2, k2, lambda);
  return {layout, ops, options, threshold, second};
}

void ThresholdForwardArrays(const Config& config, const py::array& q1, const py::array& k1,
                            const OptionalArray& q2, const OptionalArray& k2,
                            const py::array& v, const OptionalArray& lambda, const py::array& o,
                            const OptionalArray& survivors) {
  const ThresholdCall call = ReadThresholdCall(config, q1, k1, q2, k2, v, lambda);
  const AttentionShape& s = call.ops.shape;
  ThresholdForwardArgs args;
  call.SetInputs(args);
  args.o = QueryShaped(o, call.layout, "o", true, s).Out();
  args.survivors = OptionalDenseData<int32_t>(
      survivors, {call.threshold.views, s.batch, s.heads, s.q_len}, "survivors", true);
  py::gil_scoped_release release;
  ThresholdForward(s, call.options, call.threshold, args);
}

void ThresholdBackwardArrays(const Config& config, const py::array& q1, const py::array& k1,
                             const OptionalArray& q2, const OptionalArray& k2,
                             const py::array& v, const OptionalArray& lambda,
                             const py::array& d_o, const py::array& dq1, const py::array& dk1,
                             const OptionalArray& dq2, const OptionalArray& dk2,
                             const py::array& dv, const OptionalArray& d_lambda,
                             const OptionalArray& d_beta) {
  const ThresholdCall call = ReadThresholdCall(config, q1, k1, q2, k2, v, lambda);
  const Layout layout = call.layout;
  const AttentionShape& s = call.ops.shape;
  const bool two = call.threshold.views == 2;
  if (two && (!dq2 || !dk2 || !d_lambda)) {
    throw py::value_error("views=2's backward needs dq2, dk2 and d_lambda");
  }
  ThresholdBackwardArgs args;
  call.SetInputs(args);
  args.d_o = QueryShaped(d_o, layout, "d_o", false, s).In();
  args.dq[0] = QueryShaped(dq1, layout, "dq1", true, s).Out();
  args.dk[0] = KeyShaped(dk1, layout, "dk1", true, s).Out();
  if (two) {
    args.dq[1] = QueryShaped(*dq2, layout, "dq2", true, s).Out();
    args.dk[1] = KeyShaped(*dk2, layout, "dk2", true, s).Out();
    args.d_lambda = DenseData<float>(*d_lambda, {s.heads}, "d_lambda", true);
  }
  args.dv = KeyShaped(dv, layout, "dv", true, s).Out();
  args.d_beta = OptionalDenseData<float>(d_beta, {1}, "d_beta", true);
  py::gil_scoped_release release;
  ThresholdBackward(s, call.options, call.threshold, args);
}

// A value gate's parameters: alpha, beta ([kv_heads]) for the norm gate, w ([kv_heads, D]) and
// b ([kv_heads]) for the projection gate.
struct GateArrays {
  ValueGateKind kind;
  AttentionShape shape;
  Tensor4 v;
};

GateArrays ReadGate(const std::string& kind, Layout layout, const py::array& v) {
  GateArrays gate;
  if (kind == "norm") {
    gate.kind = ValueGateKind::kNorm;
  } else if (kind == "projection") {
    gate.kind = ValueGateKind::kProjection;
  } else {
    throw py::value_error("kind must be 'norm' or 'projection', got '" + kind + "'");
  }
  gate.v = View4(v, layout, "v", false);
  gate.shape = {gate.v.batch, gate.v.heads, gate.v.heads, 1, gate.v.tokens, gate.v.dim};
  return gate;
}

// The four parameter (or gradient) arrays of a gate kind; the other kind's are not read.
struct GateData {
  float *first = nullptr, *second = nullptr;  // alpha, beta or w, b
};

GateData ReadGateData(const GateArrays& gate, const py::array& first, const py::array& second,
                      bool writable, const char* first_name, const char* second_name) {
  const int64_t heads = gate.shape.kv_heads;
  GateData data;
  if (gate.kind == ValueGateKind::kNorm) {
    data.first = DenseData<float>(first, {heads}, first_name, writable);
  } else {
    data.first = DenseData<float>(first, {heads, gate.shape.head_dim}, first_name, writable);
  }
  data.second = DenseData<float>(second, {heads}, second_name, writable);
  return data;
}

ValueGateParams ParamsOf(const GateArrays& gate, const GateData& data) {
  ValueGateParams params;
  params.kind = gate.kind;
  (gate.kind == ValueGateKind::kNorm ? params.alpha : params.w) = data.first;
  (gate.kind == ValueGateKind::kNorm ? params.beta : params.b) = data.second;
  return params;
}

void ValueGateForwardArrays(const std::string& layout_name, int threads, const std::string& kind,
                            const py::array& v, const py::array& first, const py::array& second,
                            const py::array& out, const OptionalArray& gates) {
  const Layout layout = ParseLayout(layout_name);
  const GateArrays gate = ReadGate(kind, layout, v);
  const AttentionShape& s = gate.shape;
  const ValueGateParams params =
      ParamsOf(gate, ReadGateData(gate, first, second, false, "first parameter", "bias"));
  const Tensor v_gated = KeyShaped(out, layout, "out", true, s).Out();
  float* gate_values =
      OptionalDenseData<float>(gates, {s.batch, s.kv_heads, s.kv_len}, "gates", true);
  py::gil_scoped_release release;
  ValueGateForward(s, params, gate.v.In(), v_gated, gate_values, threads);
}

void ValueGateBackwardArrays(const std::string& layout_name, int threads, const std::string& kind,
                             const py::array& v, const py::array& first, const py::array& second,
                             const py::array& d_out, const py::array& dv,
                             const py::array& d_first, const py::array& d_second) {
  const Layout layout = ParseLayout(layout_name);
  const GateArrays gate = ReadGate(kind, layout, v);
  const AttentionShape& s = gate.shape;
  const ValueGateParams params =
      ParamsOf(gate, ReadGateData(gate, first, second, false, "first parameter", "bias"));
  const GateData grads_data =
      ReadGateData(gate, d_first, d_second, true, "d_first", "d_second");
  ValueGateGrads grads;
  (gate.kind == ValueGateKind::kNorm ? grads.alpha : grads.w) = grads_data.first;
  (gate.kind == ValueGateKind::kNorm ? grads.beta : grads.b) = grads_data.second;
  const ConstTensor d_gated = KeyShaped(d_out, layout, "d_out", false, s).In();
  const Tensor d_v = KeyShaped(dv, layout, "dv", true, s).Out();
  py::gil_scoped_release release;
  ValueGateBackward(s, params, gate.v.In(), d_gated, d_v, grads, threads);
}

py::dict InfoDict() {
  const DispatchInfo dispatch = GetDispatchInfo();
  py::list native;
  for (const NativePathInfo& path : dispatch.native) {
    py::dict entry;
    entry["name"] = path.name;
    entry["compiled"] = path.compiled;
    entry["cpu"] = path.cpu;
    entry["enabled"] = path.enabled;
    entry["note"] = path.note;
    native.append(entry);
  }
  py::dict info;
  info["version"] = std::string(lpattn_version());
  info["targets_compiled"] = dispatch.compiled;
  info["targets_supported"] = dispatch.supported;
  info["target_chosen"] = dispatch.chosen;
  info["native"] = native;
  info["products"] = dispatch.products;
  return info;
}

}  // namespace

PYBIND11_MODULE(_lpattn, m) {
  m.doc() = "lpattn's kernels over numpy views (docs/python.md); use the lpattn package";
  py::class_<Config>(m, "Config")
      .def(py::init<>())
      .def_readwrite("layout", &Config::layout)
      .def_readwrite("causal", &Config::causal)
      .def_readwrite("scale", &Config::scale)
      .def_readwrite("sink", &Config::sink)
      .def_readwrite("precision", &Config::precision)
      .def_readwrite("softcap", &Config::softcap)
      .def_readwrite("window", &Config::window)
      .def_readwrite("kinterval", &Config::kinterval)
      .def_readwrite("threshold", &Config::threshold)
      .def_readwrite("threads", &Config::threads);
  m.def("exact_forward", &ExactForwardArrays, py::arg("config"), py::arg("q"), py::arg("k"),
        py::arg("v"), py::arg("o"), py::arg("lse"), py::arg("sink_logits"), py::arg("alibi"));
  m.def("exact_backward", &ExactBackwardArrays, py::arg("config"), py::arg("q"), py::arg("k"),
        py::arg("v"), py::arg("o"), py::arg("d_o"), py::arg("lse"), py::arg("dq"),
        py::arg("dk"), py::arg("dv"), py::arg("sink_logits"), py::arg("d_sink"),
        py::arg("alibi"));
  m.def("kinterval_forward", &KIntervalForwardArrays, py::arg("config"), py::arg("q"),
        py::arg("k"), py::arg("v"), py::arg("o"), py::arg("saved"));
  m.def("kinterval_backward", &KIntervalBackwardArrays, py::arg("config"), py::arg("q"),
        py::arg("k"), py::arg("v"), py::arg("o"), py::arg("d_o"), py::arg("saved"),
        py::arg("dq"), py::arg("dk"), py::arg("dv"));
  m.def("threshold_forward", &ThresholdForwardArrays, py::arg("config"), py::arg("q1"),
        py::arg("k1"), py::arg("q2"), py::arg("k2"), py::arg("v"), py::arg("lam"),
        py::arg("o"), py::arg("survivors"));
  m.def("threshold_backward", &ThresholdBackwardArrays, py::arg("config"), py::arg("q1"),
        py::arg("k1"), py::arg("q2"), py::arg("k2"), py::arg("v"), py::arg("lam"),
        py::arg("d_o"), py::arg("dq1"), py::arg("dk1"), py::arg("dq2"), py::arg("dk2"),
        py::arg("dv"), py::arg("d_lambda"), py::arg("d_beta"));
  m.def("value_gate_forward", &ValueGateForwardArrays, py::arg("layout"), py::arg("threads"),
        py::arg("kind"), py::arg("v"), py::arg("first"), py::arg("second"), py::arg("out"),
        py::arg("gates"));
  m.def("value_gate_backward", &ValueGateBackwardArrays, py::arg("layout"), py::arg("threads"),
        py::arg("kind"), py::arg("v"), py::arg("first"), py::arg("second"), py::arg("d_out"),
        py::arg("dv"), py::arg("d_first"), py::arg("d_second"));
  m.def("info", &InfoDict, "targets, native paths and products, as `lpattn info` prints them");
  m.def("threshold_options", [](const std::string& text) {
    return FormatThreshold(ParseThreshold(text));
  }, "the canonical text of threshold options (validated)");
  m.def("kinterval_options", [](const std::string& text) {
    return FormatKInterval(ParseKInterval(text));
  }, "the canonical text of K-interval options (validated)");
  m.def("precision_options", [](const std::string& text) {
    return FormatPrecision(ParsePrecision(text));
  }, "the canonical text of a precision option (validated)");
  m.def("alibi_slopes", &AlibiSlopes, py::arg("heads"));
}

}  // namespace lpattn::python
