// The C API (kernels/lpattn.h): converts C structs to the C++ API and exceptions to status
// codes. No exception crosses the C boundary.
#include "kernels/lpattn.h"

#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/kinterval.h"
#include "kernels/threshold.h"

#ifndef LPATTN_VERSION_STRING
#define LPATTN_VERSION_STRING "unknown"
#endif

namespace lpattn {
namespace {

thread_local std::string last_error;

// Records "function: what" (without the C++ API's own "lpattn: " prefix, which the function
// name replaces).
lpattn_status Fail(lpattn_status status, const char* function, std::string_view what) {
  constexpr std::string_view kPrefix = "lpattn: ";
  if (what.substr(0, kPrefix.size()) == kPrefix) what.remove_prefix(kPrefix.size());
  try {
    last_error.assign(function).append(": ").append(what);
  } catch (...) {  // out of memory for the message itself: keep the status, drop the text
    last_error.clear();
  }
  return status;
}

AttentionShape ToShape(const lpattn_shape& s) {
  AttentionShape shape;
  shape.batch = s.batch;
  shape.heads = s.heads;
  shape.kv_heads = s.kv_heads;
  shape.q_len = s.q_len;
  shape.kv_len = s.kv_len;
  shape.head_dim = s.head_dim;
  return shape;
}

AttentionOptions ToOptions(const lpattn_options& o) {
  AttentionOptions options;
  options.causal = o.causal != 0;
  // <= 0 and NaN select the default; +inf is passed on so that validation rejects it.
  if (o.scale > 0.0f) options.scale = o.scale;
  // Read as an integer: a C caller may pass any int, and loading an out-of-range value as the
  // enum type would be undefined behaviour in C++.
  std::underlying_type_t<lpattn_sink_mode> sink;
  static_assert(sizeof sink == sizeof o.sink);
  std::memcpy(&sink, &o.sink, sizeof sink);
  switch (sink) {
    case LPATTN_SINK_NONE:
      options.sink = SinkMode::kNone;
      break;
    case LPATTN_SINK_LEARNED:
      options.sink = SinkMode::kLearned;
      break;
    case LPATTN_SINK_OFF_BY_ONE:
      options.sink = SinkMode::kOffByOne;
      break;
    default:
      throw std::invalid_argument("options.sink is not a valid lpattn_sink_mode (" +
                                  std::to_string(sink) + ")");
  }
  options.sink_logits = o.sink_logits;
  options.threads = o.threads;
  if (o.precision != nullptr) options.precision = ParsePrecision(o.precision);
  return options;
}

Strides ToStrides(int64_t batch, int64_t head, int64_t token) { return {batch, head, token}; }

ConstTensor ToTensor(const lpattn_const_tensor& t) {
  return {t.data, ToStrides(t.batch_stride, t.head_stride, t.token_stride)};
}

Tensor ToTensor(const lpattn_tensor& t) {
  return {t.data, ToStrides(t.batch_stride, t.head_stride, t.token_stride)};
}

KIntervalSaved ToSaved(const lpattn_kint_saved& s) {
  return {s.m, s.R, s.Z, s.lse_exact, s.argmax, s.argmin};
}

KIntervalOptions ParseKIntervalText(const char* text) {
  if (text == nullptr) throw std::invalid_argument("kint_options is null");
  return ParseKInterval(text);
}

ThresholdOptions ParseThresholdText(const char* text) {
  if (text == nullptr) throw std::invalid_argument("tda_options is null");
  return ParseThreshold(text);
}

// The inputs both thresholded entry points share.
template <class Args>
void SetThresholdInputs(Args& args, const lpattn_const_tensor& q1, const lpattn_const_tensor& k1,
                        const lpattn_const_tensor& q2, const lpattn_const_tensor& k2,
                        const lpattn_const_tensor& v, const float* lambda_param) {
  args.q[0] = ToTensor(q1);
  args.k[0] = ToTensor(k1);
  args.q[1] = ToTensor(q2);
  args.k[1] = ToTensor(k2);
  args.v = ToTensor(v);
  args.lambda_param = lambda_param;
}

// Runs `body`, mapping exceptions to a status and recording the message for this thread.
template <typename Body>
lpattn_status Guarded(const char* function, const lpattn_shape* shape,
                      const lpattn_options* options, Body&& body) {
  if (shape == nullptr) {
    return Fail(LPATTN_ERROR_INVALID_ARGUMENT, function, "shape is null");
  }
  if (options == nullptr) {
    return Fail(LPATTN_ERROR_INVALID_ARGUMENT, function, "options is null");
  }
  try {
    body(ToShape(*shape), ToOptions(*options));
    return LPATTN_OK;
  } catch (const std::invalid_argument& e) {
    return Fail(LPATTN_ERROR_INVALID_ARGUMENT, function, e.what());
  } catch (const std::bad_alloc&) {
    return Fail(LPATTN_ERROR_INTERNAL, function, "out of memory");
  } catch (const std::exception& e) {
    return Fail(LPATTN_ERROR_INTERNAL, function, e.what());
  } catch (...) {
    return Fail(LPATTN_ERROR_INTERNAL, function, "unknown exception");
  }
}

}  // namespace
}  // namespace lpattn

extern "C" {

void lpattn_default_options(lpattn_options* options) {
  if (options == nullptr) return;
  options->causal = 0;
  options->scale = 0.0f;
  options->sink = LPATTN_SINK_NONE;
  options->sink_logits = nullptr;
  options->threads = 0;
  options->precision = nullptr;
}

lpattn_status lpattn_exact_forward(const lpattn_shape* shape, const lpattn_options* options,
                                   lpattn_const_tensor q, lpattn_const_tensor k,
                                   lpattn_const_tensor v, lpattn_tensor o, float* lse) {
  using namespace lpattn;
  return Guarded("lpattn_exact_forward", shape, options,
                 [&](const AttentionShape& s, const AttentionOptions& opts) {
                   ForwardArgs args;
                   args.q = ToTensor(q);
                   args.k = ToTensor(k);
                   args.v = ToTensor(v);
                   args.o = ToTensor(o);
                   args.lse = lse;
                   ExactForward(s, opts, args);
                 });
}

lpattn_status lpattn_exact_backward(const lpattn_shape* shape, const lpattn_options* options,
                                    lpattn_const_tensor q, lpattn_const_tensor k,
                                    lpattn_const_tensor v, lpattn_const_tensor o,
                                    lpattn_const_tensor d_o, const float* lse,
                                    lpattn_tensor dq, lpattn_tensor dk, lpattn_tensor dv,
                                    float* d_sink) {
  using namespace lpattn;
  return Guarded("lpattn_exact_backward", shape, options,
                 [&](const AttentionShape& s, const AttentionOptions& opts) {
                   BackwardArgs args;
                   args.q = ToTensor(q);
                   args.k = ToTensor(k);
                   args.v = ToTensor(v);
                   args.o = ToTensor(o);
                   args.d_o = ToTensor(d_o);
                   args.lse = lse;
                   args.dq = ToTensor(dq);
                   args.dk = ToTensor(dk);
                   args.dv = ToTensor(dv);
                   args.d_sink = d_sink;
                   ExactBackward(s, opts, args);
                 });
}

lpattn_status lpattn_kint_forward(const lpattn_shape* shape, const lpattn_options* options,
                                  const char* kint_options, lpattn_const_tensor q,
                                  lpattn_const_tensor k, lpattn_const_tensor v, lpattn_tensor o,
                                  lpattn_kint_saved saved) {
  using namespace lpattn;
  return Guarded("lpattn_kint_forward", shape, options,
                 [&](const AttentionShape& s, const AttentionOptions& opts) {
                   KIntervalForwardArgs args;
                   args.q = ToTensor(q);
                   args.k = ToTensor(k);
                   args.v = ToTensor(v);
                   args.o = ToTensor(o);
                   args.saved = ToSaved(saved);
                   KIntervalForward(s, opts, ParseKIntervalText(kint_options), args);
                 });
}

lpattn_status lpattn_kint_backward(const lpattn_shape* shape, const lpattn_options* options,
                                   const char* kint_options, lpattn_const_tensor q,
                                   lpattn_const_tensor k, lpattn_const_tensor v,
                                   lpattn_const_tensor o, lpattn_const_tensor d_o,
                                   lpattn_kint_saved saved, lpattn_tensor dq, lpattn_tensor dk,
                                   lpattn_tensor dv) {
  using namespace lpattn;
  return Guarded("lpattn_kint_backward", shape, options,
                 [&](const AttentionShape& s, const AttentionOptions& opts) {
                   KIntervalBackwardArgs args;
                   args.q = ToTensor(q);
                   args.k = ToTensor(k);
                   args.v = ToTensor(v);
                   args.o = ToTensor(o);
                   args.d_o = ToTensor(d_o);
                   args.saved = ToSaved(saved);
                   args.dq = ToTensor(dq);
                   args.dk = ToTensor(dk);
                   args.dv = ToTensor(dv);
                   KIntervalBackward(s, opts, ParseKIntervalText(kint_options), args);
                 });
}

lpattn_status lpattn_tda_forward(const lpattn_shape* shape, const lpattn_options* options,
                                 const char* tda_options, lpattn_const_tensor q1,
                                 lpattn_const_tensor k1, lpattn_const_tensor q2,
                                 lpattn_const_tensor k2, lpattn_const_tensor v,
                                 const float* lambda_param, lpattn_tensor o,
                                 int32_t* survivors) {
  using namespace lpattn;
  return Guarded("lpattn_tda_forward", shape, options,
                 [&](const AttentionShape& s, const AttentionOptions& opts) {
                   ThresholdForwardArgs args;
                   SetThresholdInputs(args, q1, k1, q2, k2, v, lambda_param);
                   args.o = ToTensor(o);
                   args.survivors = survivors;
                   ThresholdForward(s, opts, ParseThresholdText(tda_options), args);
                 });
}

lpattn_status lpattn_tda_backward(const lpattn_shape* shape, const lpattn_options* options,
                                  const char* tda_options, lpattn_const_tensor q1,
                                  lpattn_const_tensor k1, lpattn_const_tensor q2,
                                  lpattn_const_tensor k2, lpattn_const_tensor v,
                                  lpattn_const_tensor d_o, const float* lambda_param,
                                  lpattn_tensor dq1, lpattn_tensor dk1, lpattn_tensor dq2,
                                  lpattn_tensor dk2, lpattn_tensor dv, float* d_lambda,
                                  float* d_beta) {
  using namespace lpattn;
  return Guarded("lpattn_tda_backward", shape, options,
                 [&](const AttentionShape& s, const AttentionOptions& opts) {
                   ThresholdBackwardArgs args;
                   SetThresholdInputs(args, q1, k1, q2, k2, v, lambda_param);
                   args.d_o = ToTensor(d_o);
                   args.dq[0] = ToTensor(dq1);
                   args.dk[0] = ToTensor(dk1);
                   args.dq[1] = ToTensor(dq2);
                   args.dk[1] = ToTensor(dk2);
                   args.dv = ToTensor(dv);
                   args.d_lambda = d_lambda;
                   args.d_beta = d_beta;
                   ThresholdBackward(s, opts, ParseThresholdText(tda_options), args);
                 });
}

const char* lpattn_last_error(void) { return lpattn::last_error.c_str(); }

const char* lpattn_version(void) { return LPATTN_VERSION_STRING; }

}  // extern "C"
