// The C API (kernels/lpattn.h): converts C structs to the C++ API and exceptions to status
// codes. No exception crosses the C boundary.
#include "kernels/lpattn.h"

#include <cmath>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/kinterval.h"
#include "kernels/kv_cache.h"
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
  // <= 0 selects the default; NaN is refused here, as the C++ API refuses it, and +inf is
  // passed on so that validation rejects it.
  if (std::isnan(o.scale)) {
    throw std::invalid_argument(
        "options.scale is NaN; pass a finite scale > 0, or 0 for the default (1 / sqrt(head_dim), "
        "1 for thresholded attention)");
  }
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
  options.softcap = o.softcap;
  options.alibi_slopes = o.alibi_slopes;
  options.window = o.window;
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
lpattn_status GuardedCall(const char* function, Body&& body) {
  try {
    body();
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

// The same for the calls with a shape and options, converted first (null ones rejected).
template <typename Body>
lpattn_status Guarded(const char* function, const lpattn_shape* shape,
                      const lpattn_options* options, Body&& body) {
  if (shape == nullptr) {
    return Fail(LPATTN_ERROR_INVALID_ARGUMENT, function, "shape is null");
  }
  if (options == nullptr) {
    return Fail(LPATTN_ERROR_INVALID_ARGUMENT, function, "options is null");
  }
  return GuardedCall(function, [&] { body(ToShape(*shape), ToOptions(*options)); });
}

quant::Format ToFormat(const char* name, const char* what) {
  if (name == nullptr) return quant::Format::kFp32;
  const std::optional<quant::Format> format = quant::ParseFormat(name);
  if (!format) {
    throw std::invalid_argument(std::string(what) + " '" + name + "' is not one of " +
                                quant::FormatNames());
  }
  return *format;
}

KvCacheConfig ToConfig(const lpattn_kv_cache_config& c) {
  KvCacheConfig config;
  config.sequences = c.sequences;
  config.kv_heads = c.kv_heads;
  config.head_dim = c.head_dim;
  config.capacity = c.capacity;
  config.k_format = ToFormat(c.k_format, "config.k_format");
  config.v_format = ToFormat(c.v_format, "config.v_format");
  config.block_size = c.block_size;
  config.blocks = c.blocks;
  std::underlying_type_t<lpattn_paged_layout> layout;
  static_assert(sizeof layout == sizeof c.layout);
  std::memcpy(&layout, &c.layout, sizeof layout);
  if (layout == LPATTN_PAGED_HEAD_MAJOR) {
    config.layout = PagedLayout::kHeadMajor;
  } else if (layout == LPATTN_PAGED_TOKEN_MAJOR) {
    config.layout = PagedLayout::kTokenMajor;
  } else {
    throw std::invalid_argument("config.layout is not a valid lpattn_paged_layout (" +
                                std::to_string(layout) + ")");
  }
  config.keys_only = c.keys_only != 0;
  return config;
}

void CheckCache(const void* cache) {
  if (cache == nullptr) throw std::invalid_argument("cache is null");
}

}  // namespace
}  // namespace lpattn

// The C handle is the C++ cache.
struct lpattn_kv_cache {
  explicit lpattn_kv_cache(const lpattn::KvCacheConfig& config) : cache(config) {}
  lpattn::KvCache cache;
};

extern "C" {

void lpattn_default_options(lpattn_options* options) {
  if (options == nullptr) return;
  options->causal = 0;
  options->scale = 0.0f;
  options->sink = LPATTN_SINK_NONE;
  options->sink_logits = nullptr;
  options->threads = 0;
  options->precision = nullptr;
  options->softcap = 0.0f;
  options->alibi_slopes = nullptr;
  options->window = 0;
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

void lpattn_kv_cache_default_config(lpattn_kv_cache_config* config) {
  if (config == nullptr) return;
  *config =
      lpattn_kv_cache_config{1, 1, 1, 1, nullptr, nullptr, 0, 0, LPATTN_PAGED_HEAD_MAJOR, 0};
}

lpattn_status lpattn_kv_cache_create(const lpattn_kv_cache_config* config,
                                     lpattn_kv_cache** cache) {
  using namespace lpattn;
  return GuardedCall("lpattn_kv_cache_create", [&] {
    if (config == nullptr) throw std::invalid_argument("config is null");
    if (cache == nullptr) throw std::invalid_argument("cache is null");
    *cache = new lpattn_kv_cache(ToConfig(*config));
  });
}

void lpattn_kv_cache_free(lpattn_kv_cache* cache) { delete cache; }

lpattn_status lpattn_kv_cache_append(lpattn_kv_cache* cache, int64_t sequence, int64_t tokens,
                                     lpattn_const_tensor k, lpattn_const_tensor v) {
  using namespace lpattn;
  return GuardedCall("lpattn_kv_cache_append", [&] {
    CheckCache(cache);
    cache->cache.Append(sequence, tokens, ToTensor(k), ToTensor(v));
  });
}

lpattn_status lpattn_kv_cache_truncate(lpattn_kv_cache* cache, int64_t sequence, int64_t length) {
  using namespace lpattn;
  return GuardedCall("lpattn_kv_cache_truncate", [&] {
    CheckCache(cache);
    cache->cache.Truncate(sequence, length);
  });
}

lpattn_status lpattn_kv_cache_length(const lpattn_kv_cache* cache, int64_t sequence,
                                     int64_t* length) {
  using namespace lpattn;
  return GuardedCall("lpattn_kv_cache_length", [&] {
    CheckCache(cache);
    if (length == nullptr) throw std::invalid_argument("length is null");
    *length = cache->cache.Length(sequence);
  });
}

lpattn_status lpattn_kv_cache_read(const lpattn_kv_cache* cache, int64_t sequence, int64_t first,
                                   int64_t tokens, lpattn_tensor k, lpattn_tensor v) {
  using namespace lpattn;
  return GuardedCall("lpattn_kv_cache_read", [&] {
    CheckCache(cache);
    cache->cache.Read(sequence, first, tokens, ToTensor(k), ToTensor(v));
  });
}

lpattn_status lpattn_kv_cache_set_block_table(lpattn_kv_cache* cache, int64_t sequence,
                                              const int32_t* blocks, int64_t count,
                                              int64_t length) {
  using namespace lpattn;
  return GuardedCall("lpattn_kv_cache_set_block_table", [&] {
    CheckCache(cache);
    cache->cache.SetBlockTable(sequence, blocks, count, length < 0 ? -1 : length);
  });
}

lpattn_status lpattn_exact_forward_cached(const lpattn_shape* shape, const lpattn_options* options,
                                          lpattn_const_tensor q, const lpattn_kv_cache* cache,
                                          const int64_t* sequences, const int64_t* q_offsets,
                                          lpattn_tensor o, float* lse) {
  using namespace lpattn;
  return Guarded("lpattn_exact_forward_cached", shape, options,
                 [&](const AttentionShape& s, const AttentionOptions& opts) {
                   CheckCache(cache);
                   ExactForward(s, opts, ToTensor(q), cache->cache, ToTensor(o), lse, sequences,
                                q_offsets);
                 });
}

lpattn_status lpattn_exact_forward_cached16(const lpattn_shape* shape,
                                            const lpattn_options* options,
                                            lpattn_const_tensor16 q, const lpattn_kv_cache* cache,
                                            const int64_t* sequences, const int64_t* q_offsets,
                                            lpattn_tensor16 o, float* lse) {
  using namespace lpattn;
  return Guarded("lpattn_exact_forward_cached16", shape, options,
                 [&](const AttentionShape& s, const AttentionOptions& opts) {
                   CheckCache(cache);
                   const ConstTensor16 q16{
                       q.data, ToStrides(q.batch_stride, q.head_stride, q.token_stride),
                       q.format != nullptr ? ToFormat(q.format, "q.format") : quant::Format::kBf16};
                   const Tensor16 o16{
                       o.data, ToStrides(o.batch_stride, o.head_stride, o.token_stride),
                       o.format != nullptr ? ToFormat(o.format, "o.format") : quant::Format::kBf16};
                   ExactForward(s, opts, q16, cache->cache, o16, lse, sequences, q_offsets);
                 });
}

lpattn_status lpattn_kint_forward_cached(const lpattn_shape* shape,
                                         const lpattn_options* options, const char* kint_options,
                                         lpattn_const_tensor q, const lpattn_kv_cache* cache,
                                         const int64_t* sequences, const int64_t* q_offsets,
                                         lpattn_tensor o, lpattn_kint_saved saved) {
  using namespace lpattn;
  return Guarded("lpattn_kint_forward_cached", shape, options,
                 [&](const AttentionShape& s, const AttentionOptions& opts) {
                   CheckCache(cache);
                   KIntervalForward(s, opts, ParseKIntervalText(kint_options), ToTensor(q),
                                    cache->cache, ToTensor(o), ToSaved(saved), sequences,
                                    q_offsets);
                 });
}

lpattn_status lpattn_tda_forward_cached(const lpattn_shape* shape, const lpattn_options* options,
                                        const char* tda_options, lpattn_const_tensor q1,
                                        lpattn_const_tensor q2, const lpattn_kv_cache* cache,
                                        const lpattn_kv_cache* second_keys,
                                        const int64_t* sequences, const int64_t* q_offsets,
                                        const float* lambda_param, lpattn_tensor o,
                                        int32_t* survivors) {
  using namespace lpattn;
  return Guarded("lpattn_tda_forward_cached", shape, options,
                 [&](const AttentionShape& s, const AttentionOptions& opts) {
                   CheckCache(cache);
                   ThresholdCachedArgs args;
                   args.q[0] = ToTensor(q1);
                   args.q[1] = ToTensor(q2);
                   args.second_keys = second_keys != nullptr ? &second_keys->cache : nullptr;
                   args.lambda_param = lambda_param;
                   args.o = ToTensor(o);
                   args.survivors = survivors;
                   ThresholdForward(s, opts, ParseThresholdText(tda_options), cache->cache, args,
                                    sequences, q_offsets);
                 });
}

const char* lpattn_last_error(void) { return lpattn::last_error.c_str(); }

const char* lpattn_version(void) { return LPATTN_VERSION_STRING; }

}  // extern "C"
