// Argument checks of every kernel entry point (docs/design.md §7; shapes per docs/math.md §0). They
// run before any work, so a rejected call leaves every output untouched.
#include "kernels/entry/validate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

namespace lpattn {
namespace {

[[noreturn]] void Fail(const std::string& message) {
  throw std::invalid_argument("lpattn: " + message);
}

void CheckPositive(int64_t value, const char* name) {
  if (value <= 0) Fail(std::string(name) + " must be positive, got " + std::to_string(value));
}

// §0 shapes: every size positive, D in the supported range, H a multiple of Hkv (GQA).
void CheckShape(const AttentionShape& shape) {
  CheckPositive(shape.batch, "batch");
  CheckPositive(shape.heads, "heads");
  CheckPositive(shape.kv_heads, "kv_heads");
  CheckPositive(shape.q_len, "q_len");
  CheckPositive(shape.kv_len, "kv_len");
  if (shape.head_dim < 1 || shape.head_dim > kMaxHeadDim) {
    Fail("head_dim must be in [1, " + std::to_string(kMaxHeadDim) + "], got " +
         std::to_string(shape.head_dim));
  }
  if (shape.heads % shape.kv_heads != 0) {
    Fail("heads (" + std::to_string(shape.heads) + ") must be a multiple of kv_heads (" +
         std::to_string(shape.kv_heads) + ")");
  }
}

// cached: a forward over a KvCache, the only one that takes pfold (precision.h).
void CheckOptions(const AttentionOptions& options, bool cached = false) {
  if (options.precision.p_folds_v && !cached) {
    Fail("pfold=1 applies to a forward over a KvCache's int8 V (kernels/kv_cache.h) only");
  }
  if (options.scale.has_value() && (!std::isfinite(*options.scale) || *options.scale == 0.0f)) {
    std::ostringstream message;
    message << "options.scale must be finite and nonzero, got " << *options.scale;
    Fail(message.str());
  }
  if (options.threads < 0) {
    Fail("options.threads must be >= 0, got " + std::to_string(options.threads));
  }
  if (!std::isfinite(options.softcap) || options.softcap < 0.0f) {
    std::ostringstream message;
    message << "options.softcap must be finite and >= 0 (0: off), got " << options.softcap;
    Fail(message.str());
  }
  if (options.window < 0) {
    Fail("options.window must be >= 0 (0: none), got " + std::to_string(options.window));
  }
  if (options.sink == SinkMode::kLearned && options.sink_logits == nullptr) {
    Fail("options.sink_logits is null (required with SinkMode::kLearned)");
  }
  ValidatePrecision(options.precision);
}

// §1.4: every head's ALiBi slope finite (after the shape: heads is known).
void CheckAlibiSlopes(const AttentionShape& shape, const AttentionOptions& options) {
  if (options.alibi_slopes == nullptr) return;
  for (int64_t h = 0; h < shape.heads; ++h) {
    if (!std::isfinite(options.alibi_slopes[h])) {
      std::ostringstream message;
      message << "options.alibi_slopes[" << h << "] must be finite, got "
              << options.alibi_slopes[h];
      Fail(message.str());
    }
  }
}

void CheckNotNull(const void* pointer, const char* name) {
  if (pointer == nullptr) Fail(std::string(name) + " is null");
}

// One outer dimension of a tensor view: its name in messages, extent and element stride.
struct Axis {
  const char* name;
  int64_t extent;
  int64_t stride;
};

// extent * stride, saturated at the int64 maximum: a span that large overlaps or overflows
// whatever comes next, and the check below reports it either way.
int64_t SpanOf(const Axis& axis) {
  int64_t span = 0;
  if (__builtin_mul_overflow(axis.extent, axis.stride, &span)) {
    return std::numeric_limits<int64_t>::max();
  }
  return span;
}

// Strides must be non-negative and the rows of head_dim contiguous elements must not overlap:
// with the outer dimensions sorted by stride (extent-1 dimensions never step, so they are
// skipped), each stride must be at least the span (stride x extent) of the one inside it,
// starting from the contiguous head dimension (stride 1, extent head_dim).
void CheckStrides(const Strides& strides, int64_t batch, int64_t heads, int64_t tokens,
                  int64_t head_dim, const char* tensor) {
  // Listed innermost first so that, between equal strides, the stable sort below blames the
  // conventionally outer dimension (a batch stride equal to the head stride names "batch").
  std::array<Axis, 3> outer = {Axis{"token", tokens, strides.token},
                               Axis{"head", heads, strides.head},
                               Axis{"batch", batch, strides.batch}};
  for (const Axis& axis : outer) {
    if (axis.stride < 0) {
      Fail(std::string(tensor) + ".strides." + axis.name + " must be non-negative, got " +
           std::to_string(axis.stride));
    }
  }
  std::stable_sort(outer.begin(), outer.end(),
                   [](const Axis& a, const Axis& b) { return a.stride < b.stride; });

  Axis inner{"head_dim", head_dim, 1};
  for (const Axis& axis : outer) {
    if (axis.extent == 1) continue;
    const int64_t inner_span = SpanOf(inner);
    if (axis.stride < inner_span) {
      Fail(std::string(tensor) + " has overlapping strides: strides." + axis.name + " = " +
           std::to_string(axis.stride) + " is less than " + std::to_string(inner_span) + " (" +
           inner.name + " extent " + std::to_string(inner.extent) + " x stride " +
           std::to_string(inner.stride) + ")");
    }
    inner = axis;
  }
  if (SpanOf(inner) == std::numeric_limits<int64_t>::max()) {
    Fail(std::string(tensor) + " spans more elements than int64 can index (strides." +
         inner.name + " = " + std::to_string(inner.stride) + ")");
  }
}

// Q-shaped tensors (q, o, d_o, dq) and K-shaped ones (k, v, dk, dv), docs/math.md §0.
void CheckQueryShaped(const Strides& strides, const AttentionShape& shape, const char* tensor) {
  CheckStrides(strides, shape.batch, shape.heads, shape.q_len, shape.head_dim, tensor);
}
void CheckKeyShaped(const Strides& strides, const AttentionShape& shape, const char* tensor) {
  CheckStrides(strides, shape.batch, shape.kv_heads, shape.kv_len, shape.head_dim, tensor);
}

}  // namespace

void ValidateForward(const AttentionShape& shape, const AttentionOptions& options,
                     const ForwardArgs& args) {
  CheckShape(shape);
  CheckOptions(options);
  CheckAlibiSlopes(shape, options);
  CheckNotNull(args.q.data, "q.data");
  CheckNotNull(args.k.data, "k.data");
  CheckNotNull(args.v.data, "v.data");
  CheckNotNull(args.o.data, "o.data");
  CheckNotNull(args.lse, "lse");
  CheckQueryShaped(args.q.strides, shape, "q");
  CheckKeyShaped(args.k.strides, shape, "k");
  CheckKeyShaped(args.v.strides, shape, "v");
  CheckQueryShaped(args.o.strides, shape, "o");
}

void ValidateBackward(const AttentionShape& shape, const AttentionOptions& options,
                      const BackwardArgs& args) {
  CheckShape(shape);
  CheckOptions(options);
  CheckAlibiSlopes(shape, options);
  CheckNotNull(args.q.data, "q.data");
  CheckNotNull(args.k.data, "k.data");
  CheckNotNull(args.v.data, "v.data");
  CheckNotNull(args.o.data, "o.data");
  CheckNotNull(args.d_o.data, "d_o.data");
  CheckNotNull(args.lse, "lse");
  CheckNotNull(args.dq.data, "dq.data");
  CheckNotNull(args.dk.data, "dk.data");
  CheckNotNull(args.dv.data, "dv.data");
  if (options.sink == SinkMode::kLearned && args.d_sink == nullptr) {
    Fail("d_sink is null (required with SinkMode::kLearned)");
  }
  CheckQueryShaped(args.q.strides, shape, "q");
  CheckKeyShaped(args.k.strides, shape, "k");
  CheckKeyShaped(args.v.strides, shape, "v");
  CheckQueryShaped(args.o.strides, shape, "o");
  CheckQueryShaped(args.d_o.strides, shape, "d_o");
  CheckQueryShaped(args.dq.strides, shape, "dq");
  CheckKeyShaped(args.dk.strides, shape, "dk");
  CheckKeyShaped(args.dv.strides, shape, "dv");
}

void ValidateShapeAndOptions(const AttentionShape& shape, const AttentionOptions& options) {
  CheckShape(shape);
  CheckOptions(options);
  CheckAlibiSlopes(shape, options);
}

void ValidateQueryShaped(const ConstTensor& tensor, const AttentionShape& shape, const char* name) {
  CheckNotNull(tensor.data, (std::string(name) + ".data").c_str());
  CheckQueryShaped(tensor.strides, shape, name);
}

void ValidateKeyShaped(const ConstTensor& tensor, const AttentionShape& shape, const char* name) {
  CheckNotNull(tensor.data, (std::string(name) + ".data").c_str());
  CheckKeyShaped(tensor.strides, shape, name);
}

std::vector<int64_t> ValidateCachedForward(const AttentionShape& shape,
                                           const AttentionOptions& options, const KvCache& cache,
                                           const ConstTensor& q, const ConstTensor& o,
                                           const int64_t* sequences, const int64_t* q_offsets,
                                           bool reads_values) {
  const KvCacheConfig& c = cache.config();
  if (reads_values && c.keys_only) {
    Fail("the cache holds keys only (KvCacheConfig::keys_only), the forward reads its values");
  }
  if (shape.kv_heads != c.kv_heads || shape.head_dim != c.head_dim) {
    Fail("the cache holds " + std::to_string(c.kv_heads) + " kv heads of dimension " +
         std::to_string(c.head_dim) + ", the call asks for " + std::to_string(shape.kv_heads) +
         " of " + std::to_string(shape.head_dim));
  }
  const Precision& p = options.precision;
  const bool as_held = p.qk == quant::Format::kFp32 && p.pv == quant::Format::kFp32;
  if (!as_held && (p.qk != c.k_format || p.pv != c.v_format)) {
    Fail(std::string("the cache holds K as ") + quant::FormatName(c.k_format) + " and V as " +
         quant::FormatName(c.v_format) + ", the call's precision has qk=" +
         quant::FormatName(p.qk) + " and pv=" + quant::FormatName(p.pv) +
         " (fp32 and fp32 mean as held)");
  }
  if (p.p_folds_v && (c.v_format != quant::Format::kInt8 || !reads_values)) {
    Fail(std::string("pfold=1 folds the token scales of an int8 V into P; the cache holds V as ") +
         (c.keys_only ? "nothing (keys only)" : quant::FormatName(c.v_format)) +
         (reads_values ? "" : ", and this forward does not round P"));
  }
  AttentionShape checked = shape;
  checked.kv_len = 1;  // each sequence's own, below
  if (q_offsets != nullptr) checked.q_len = 1;  // and each sequence's query count
  CheckShape(checked);
  CheckOptions(options, true);
  CheckAlibiSlopes(checked, options);
  if (sequences == nullptr && shape.batch > c.sequences) {
    Fail("batch " + std::to_string(shape.batch) + " exceeds the cache's " +
         std::to_string(c.sequences) + " sequences (pass the slots to read)");
  }
  std::vector<int64_t> lengths(size_t(shape.batch));
  for (int64_t b = 0; b < shape.batch; ++b) {
    const int64_t slot = sequences != nullptr ? sequences[b] : b;
    if (slot < 0 || slot >= c.sequences) {
      Fail("sequences[" + std::to_string(b) + "] = " + std::to_string(slot) + " is not in [0, " +
           std::to_string(c.sequences) + ")");
    }
    lengths[size_t(b)] = cache.Length(slot);
    if (lengths[size_t(b)] < 1) Fail("sequence " + std::to_string(slot) + " holds no tokens");
  }
  AttentionShape queries = shape;
  if (q_offsets != nullptr) {  // [total, heads, head_dim] views, one batch of total tokens
    if (q_offsets[0] != 0) Fail("q_offsets[0] must be 0, got " + std::to_string(q_offsets[0]));
    for (int64_t b = 0; b < shape.batch; ++b) {
      if (q_offsets[b + 1] <= q_offsets[b]) {
        Fail("q_offsets must increase (every sequence has a query): q_offsets[" +
             std::to_string(b) + "] = " + std::to_string(q_offsets[b]) + ", q_offsets[" +
             std::to_string(b + 1) + "] = " + std::to_string(q_offsets[b + 1]));
      }
    }
    queries.batch = 1;
    queries.q_len = q_offsets[shape.batch];
  }
  ValidateQueryShaped(q, queries, "q");
  ValidateQueryShaped(o, queries, "o");
  return lengths;
}

}  // namespace lpattn
