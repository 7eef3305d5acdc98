// Public C++ API of lpattn's attention kernels. No Highway types appear here.
//
// Tensors are views: a base pointer plus element strides for (batch, head, token); the head
// dimension is contiguous. [B, H, T, D] and [B, T, H, D] are both plain stride choices
// (see ContiguousBHTD / ContiguousBTHD). The math is docs/math.md; section numbers below
// refer to it.
#ifndef LPATTN_KERNELS_ATTENTION_H_
#define LPATTN_KERNELS_ATTENTION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/precision.h"

namespace lpattn {

inline constexpr int64_t kMaxHeadDim = 256;

// Element strides of a 4-d tensor whose last (head) dimension is contiguous.
struct Strides {
  int64_t batch = 0;
  int64_t head = 0;
  int64_t token = 0;
};

// Dense [batch, heads, tokens, dim] and [batch, tokens, heads, dim] layouts.
Strides ContiguousBHTD(int64_t heads, int64_t tokens, int64_t dim);
Strides ContiguousBTHD(int64_t heads, int64_t tokens, int64_t dim);

struct ConstTensor {
  const float* data = nullptr;
  Strides strides;
};

struct Tensor {
  float* data = nullptr;
  Strides strides;
  operator ConstTensor() const { return {data, strides}; }
};

// §0: Q has `heads` heads of q_len tokens; K and V have `kv_heads` heads of kv_len tokens
// (grouped-query attention: query head h reads kv head h / (heads / kv_heads)).
struct AttentionShape {
  int64_t batch = 1;
  int64_t heads = 1;
  int64_t kv_heads = 1;
  int64_t q_len = 1;
  int64_t kv_len = 1;
  int64_t head_dim = 1;
};

// §1.1: no sink, a learnable per-head sink logit, or the off-by-one softmax (sink fixed at 0).
enum class SinkMode { kNone, kLearned, kOffByOne };

struct AttentionOptions {
  // Bottom-right aligned: key j is visible to query i iff j <= i + (kv_len - q_len).
  bool causal = false;
  // Score scale; unset means 1 / sqrt(head_dim).
  std::optional<float> scale;
  SinkMode sink = SinkMode::kNone;
  // [heads] sink logits, required with SinkMode::kLearned and ignored otherwise.
  const float* sink_logits = nullptr;
  // 0: run in the caller's TBB arena (all its threads); n > 0: in a private arena of n threads.
  int threads = 0;
  // §4: formats of the Q K^T and P V operands (default fp32: no quantization).
  Precision precision;
  // §1.3 logit softcap (Gemma 2), exact attention only: each scaled score s becomes
  // c tanh(s / c) before the softmax, forward and backward; a sink logit is not capped.
  // 0: off. Must be finite and >= 0.
  float softcap = 0.0f;
  // §1.4 ALiBi, exact attention only: [heads] slopes, each scaled score s_ij becoming
  // s_ij - slope_h |i + kv_len - q_len - j| (before the softcap). Null: none. Finite slopes.
  const float* alibi_slopes = nullptr;
  // §1.5 sliding window, exact attention only: query i sees key j only if
  // j > i + kv_len - q_len - window (and, when causal, j <= i + kv_len - q_len). 0: none.
  int64_t window = 0;
};

// The ALiBi paper's slopes for `heads` heads: 2^(-8 (h + 1) / heads) for head h.
std::vector<float> AlibiSlopes(int64_t heads);

// Forward outputs: O with Q's shape, and lse = m + log Z per row, a dense [batch, heads, q_len]
// array. A row with no visible key and no sink gets O = 0 and lse = -inf.
struct ForwardArgs {
  ConstTensor q, k, v;
  Tensor o;
  float* lse = nullptr;
};

// Backward: inputs are the forward's inputs and outputs plus dO; dQ has Q's shape, dK and dV
// K's. d_sink ([heads], summed over batch and rows) is written with SinkMode::kLearned and may
// be null otherwise. Every output is overwritten, not accumulated into.
struct BackwardArgs {
  ConstTensor q, k, v, o, d_o;
  const float* lse = nullptr;
  Tensor dq, dk, dv;
  float* d_sink = nullptr;
};

// §1, §1.1. Throws std::invalid_argument, before touching any output, on null pointers,
// head_dim outside [1, kMaxHeadDim], heads not a multiple of kv_heads, non-positive sizes,
// negative or overlapping strides, a missing sink array, or a non-finite scale.
void ExactForward(const AttentionShape& shape, const AttentionOptions& options,
                  const ForwardArgs& args);
void ExactBackward(const AttentionShape& shape, const AttentionOptions& options,
                   const BackwardArgs& args);

// The scale actually used: options.scale or 1 / sqrt(head_dim).
float ResolvedScale(const AttentionShape& shape, const AttentionOptions& options);

// Highway dynamic dispatch. Names are Highway's ("SSE4", "AVX2", "AVX3", ...).
// A native instruction family of the low-precision paths (docs/design.md §4): VNNI,
// AVX512_BF16, AVX512_FP16 or AMX, which Highway has no operations for.
struct NativePathInfo {
  std::string name;       // "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16", ...
  bool compiled = false;  // the library has a kernel that uses it
  bool cpu = false;       // this CPU and its OS can take it (AMX: Linux granted tile data)
  bool enabled = false;   // taken where it applies (SelectNativePaths, LPATTN_NATIVE)
  std::string note;       // why a family the CPU has is not usable or not enabled
};

struct DispatchInfo {
  std::vector<std::string> compiled;   // targets compiled into the library
  std::vector<std::string> supported;  // compiled targets this CPU can run
  std::string chosen;                  // the one kernels dispatch to now
  std::vector<NativePathInfo> native;  // every native family, compiled or not
  // How each kind of operand is multiplied now, one line each ("int8 Q K^T and P V: ...").
  std::vector<std::string> products;
};
DispatchInfo GetDispatchInfo();

// Restricts dispatch to one compiled and supported target (for tests and benchmarks that
// compare targets); an empty name restores the default. Returns false, changing nothing, if the
// target is unknown or unsupported. Not thread-safe with concurrent kernel calls.
bool SelectTarget(const std::string& name);

// Restricts the native families the kernels take to `names`: "" (all this CPU has, the
// default), "none" (the Highway code only), or names separated by ',' (NativePathInfo::name).
// The environment variable LPATTN_NATIVE sets the same at the first kernel call. Returns
// false, changing nothing, for an unknown name or a family this CPU lacks. Not thread-safe with
// concurrent kernel calls.
bool SelectNativePaths(const std::string& names);

}  // namespace lpattn

#endif  // LPATTN_KERNELS_ATTENTION_H_
