// Differential fuzzing of the kernels (docs/design.md §10): every entry point of the public C++
// API on a shape, strides, options and values the input chooses, against the fp64 reference of
// kernels/reference.h. A finding is a crash or sanitizer report, a write outside an output's
// elements (its padding and the guard bands around it are poisoned and checked), an
// unexpected exception, or an error beyond the bound of §10.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/kinterval.h"
#include "kernels/kv_cache.h"
#include "kernels/lpattn.h"
#include "kernels/precision.h"
#include "kernels/prepared_kv.h"
#include "kernels/reference.h"
#include "kernels/threshold.h"
#include "kernels/value_gate.h"
#include "tests/fuzz/fuzz_support.h"

namespace lpattn::fuzz {
namespace {

// A float no kernel computes: what every guard band and padding element holds (docs/design.md
// §10's check for writes outside an output).
constexpr uint32_t kPoisonBits = 0x7fa5a5a5u;  // a signalling-NaN pattern
constexpr int64_t kGuard = 16;                 // poisoned floats before and after every buffer

[[noreturn]] void Finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_kernels finding: %s\n", what.c_str());
  std::abort();
}

bool IsPoison(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits == kPoisonBits;
}
float Poison() {
  float x;
  std::memcpy(&x, &kPoisonBits, sizeof x);
  return x;
}

// A [batch, heads, tokens, dim] tensor in a strided layout the input picks (head-major or
// token-major, with padding after each row and each outer block), inside a poisoned buffer
// (docs/design.md §10).
struct FuzzTensor {
  int64_t batch = 0, heads = 0, tokens = 0, dim = 0;
  Strides strides;
  std::vector<float> buffer;  // kGuard + span + kGuard floats

  FuzzTensor() = default;
  FuzzTensor(ByteReader& in, int64_t b, int64_t h, int64_t t, int64_t d)
      : batch(b), heads(h), tokens(t), dim(d) {
    const bool token_major = in.Bool();
    const int64_t row = d + in.Range(0, 3);
    if (token_major) {
      strides.head = row;
      strides.token = h * row + in.Range(0, 2);
      strides.batch = t * strides.token + in.Range(0, 2);
    } else {
      strides.token = row;
      strides.head = t * row + in.Range(0, 2);
      strides.batch = h * strides.head + in.Range(0, 2);
    }
    const int64_t span = (b - 1) * strides.batch + (h - 1) * strides.head +
                         (t - 1) * strides.token + d;
    buffer.assign(size_t(span + 2 * kGuard), Poison());
  }
  float* data() { return buffer.data() + kGuard; }
  const float* data() const { return buffer.data() + kGuard; }
  size_t Offset(int64_t b, int64_t h, int64_t t, int64_t c) const {
    return size_t(kGuard + b * strides.batch + h * strides.head + t * strides.token + c);
  }
  template <class F>
  void ForEach(const F& f) {
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t c = 0; c < dim; ++c) f(buffer[Offset(b, h, t, c)]);
  }
  Tensor view() { return {data(), strides}; }
  ConstTensor cview() const { return {data(), strides}; }
  std::vector<double> Dense() const { return DenseFromView(cview(), batch, heads, tokens, dim); }

  // Every float outside the elements still holds the poison.
  void CheckUntouchedOutside(const char* name) const {
    std::vector<bool> inside(buffer.size(), false);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t c = 0; c < dim; ++c) inside[Offset(b, h, t, c)] = true;
    for (size_t i = 0; i < buffer.size(); ++i) {
      if (!inside[i] && !IsPoison(buffer[i])) {
        Finding(std::string(name) + ": write outside the output at float " + std::to_string(i));
      }
    }
  }
};

// A dense output array ([n] floats or ints) between guard bands (docs/design.md §10).
template <class T>
struct GuardedArray {
  std::vector<T> buffer;
  size_t n = 0;
  explicit GuardedArray(size_t count) : n(count) {
    buffer.resize(count + 2 * kGuard);
    std::memset(buffer.data(), 0xa5, buffer.size() * sizeof(T));
  }
  T* data() { return buffer.data() + kGuard; }
  const T* data() const { return buffer.data() + kGuard; }
  void CheckGuards(const char* name) const {
    const auto* bytes = reinterpret_cast<const uint8_t*>(buffer.data());
    const size_t guard_bytes = kGuard * sizeof(T), end = (kGuard + n) * sizeof(T);
    for (size_t i = 0; i < guard_bytes; ++i) {
      if (bytes[i] != 0xa5 || bytes[end + i] != 0xa5) {
        Finding(std::string(name) + ": write outside the array");
      }
    }
  }
  std::vector<double> Dense() const { return std::vector<double>(data(), data() + n); }
};

// The input's values: a scale 2^e (e in [-4, 3]) times a byte's offset from 128 over 64, so
// values are exact in every format's range; with `finite` off, one byte in 32 becomes an
// infinity or a NaN (checked for crashes and stray writes only). Past the input's end the
// bytes come from a fixed hash of their position, so a short input still has varied values.
struct ValueSource {
  float scale = 1.0f;
  bool finite = true;
  uint32_t past_end = 0;
  float Next(ByteReader& in) {
    const uint8_t b = in.remaining() > 0 ? in.Byte() : uint8_t((++past_end * 2654435761u) >> 24);
    if (!finite && b % 32 == 31) {
      return (b >> 5) == 7 ? NAN : ((b >> 5) & 1) ? INFINITY : -INFINITY;
    }
    return scale * float(int(b) - 128) / 64.0f;
  }
};

void Fill(FuzzTensor& t, ByteReader& in, ValueSource& values) {
  t.ForEach([&](float& x) { x = values.Next(in); });
}

double MaxAbs(const std::vector<double>& x) {
  double m = 0.0;
  for (double v : x) {
    if (std::isfinite(v)) m = std::max(m, std::abs(v));
  }
  return m;
}
// max over rows of the L2 norm of [rows x dim] dense values.
double MaxRowNorm(const std::vector<double>& x, size_t dim) {
  double m = 0.0;
  for (size_t r = 0; r < x.size() / dim; ++r) {
    double s = 0.0;
    for (size_t c = 0; c < dim; ++c) s += x[r * dim + c] * x[r * dim + c];
    m = std::max(m, std::sqrt(s));
  }
  return m;
}

// The bound of docs/design.md §10: rows (of `dim` values) whose error exceeds `tight` number at
// most `flips` (0 where the map is continuous), and no row exceeds `loose`. A NaN on one side
// only is an infinite error.
void CompareRows(const char* name, const std::vector<double>& got, const std::vector<double>& want,
                 size_t dim, double tight, double loose, size_t flips) {
  if (got.size() != want.size()) Finding(std::string(name) + ": size differs");
  size_t bad = 0;
  for (size_t r = 0; r < want.size() / dim; ++r) {
    double err = 0.0;
    for (size_t c = 0; c < dim; ++c) {
      const double a = got[r * dim + c], b = want[r * dim + c];
      if (std::isnan(a) != std::isnan(b)) err = INFINITY;
      else if (!std::isnan(a) && a != b) err = std::max(err, std::abs(a - b));
    }
    if (err > loose) {
      if (std::getenv("FUZZ_DEBUG")) {
        for (size_t c = 0; c < dim; ++c) {
          std::fprintf(stderr, "  [%zu] got %.9g want %.9g\n", c, got[r * dim + c], want[r * dim + c]);
        }
      }
      Finding(std::string(name) + ": row " + std::to_string(r) + " off by " + std::to_string(err) +
              " (bound " + std::to_string(loose) + ")");
    }
    if (err > tight) ++bad;
  }
  if (bad > flips) {
    Finding(std::string(name) + ": " + std::to_string(bad) + " rows beyond " +
            std::to_string(tight) + " (" + std::to_string(flips) + " may flip)");
  }
}

// ---- the case: shape, options, inputs ------------------------------------------------------

struct Case {
  AttentionShape shape;
  AttentionOptions options;
  FuzzTensor q, k, v, d_o;
  std::vector<float> sink_logits, alibi;
  ValueSource values;
  bool jumps = false;  // a discontinuous rounding is in play (a low-precision P or backward)
};

const quant::Format kFormats[] = {quant::Format::kFp32,    quant::Format::kBf16,
                                  quant::Format::kFp16,    quant::Format::kFp8E4M3,
                                  quant::Format::kFp8E5M2, quant::Format::kInt8};
const quant::Format kBackwardFormats[] = {quant::Format::kFp32, quant::Format::kBf16,
                                          quant::Format::kFp16, quant::Format::kInt8};

Precision PickPrecision(ByteReader& in) {
  Precision p;
  if (!in.Bool()) return p;  // half the cases in fp32
  p.qk = kFormats[in.Pick(6)];
  p.pv = kFormats[in.Pick(6)];
  p.p = in.Pick(4) == 0 ? kFormats[in.Pick(6)] : quant::Format::kFp32;
  p.granularity = quant::Granularity(in.Pick(4));
  if (in.Pick(4) == 0) p.value_granularity = quant::Granularity(in.Pick(4));
  p.block = in.Range(1, 64);
  p.smooth_k = in.Pick(4) == 0;
  p.path = in.Bool() ? ComputePath::kNative : ComputePath::kSimulated;
  if (in.Pick(4) == 0) p.bwd = kBackwardFormats[in.Pick(4)];
  return p;
}

// docs/design.md §10's cases. Sizes are kept small (at most 2 x 4 heads x 72 x 72 tokens x 72)
// so an iteration under ASan takes milliseconds; tile edges (kTileQ, kTileK, kBlockKeys = 48)
// all fall inside.
Case MakeCase(ByteReader& in, bool grouped) {
  Case c;
  AttentionShape& s = c.shape;
  s.batch = in.Range(1, 2);
  s.kv_heads = in.Range(1, 2);
  s.heads = grouped ? s.kv_heads * in.Range(1, 2) : s.kv_heads;
  s.q_len = in.Range(1, 72);
  s.kv_len = in.Bool() ? s.q_len : in.Range(1, 72);
  s.head_dim = in.Pick(8) == 0 ? in.Range(73, 256) : in.Range(1, 72);
  if (s.head_dim > 72) s.q_len = std::min<int64_t>(s.q_len, 8);  // long rows, few of them
  c.options.causal = in.Bool();
  if (in.Bool()) c.options.scale = float(in.Range(-64, 64)) / 16.0f;  // 0: the default
  if (c.options.scale && *c.options.scale == 0.0f) c.options.scale.reset();
  c.options.threads = int(in.Range(0, 2));
  c.values.scale = std::ldexp(1.0f, int(in.Range(-4, 3)));
  c.values.finite = in.Pick(8) != 0;
  c.q = FuzzTensor(in, s.batch, s.heads, s.q_len, s.head_dim);
  c.k = FuzzTensor(in, s.batch, s.kv_heads, s.kv_len, s.head_dim);
  c.v = FuzzTensor(in, s.batch, s.kv_heads, s.kv_len, s.head_dim);
  c.d_o = FuzzTensor(in, s.batch, s.heads, s.q_len, s.head_dim);
  Fill(c.q, in, c.values);
  Fill(c.k, in, c.values);
  Fill(c.v, in, c.values);
  Fill(c.d_o, in, c.values);
  for (int64_t h = 0; h < s.heads; ++h) c.sink_logits.push_back(c.values.Next(in));
  return c;
}

// A finite reference: every input is finite (the bound is defined only there).
bool AllFinite(const std::vector<double>& x) {
  return std::all_of(x.begin(), x.end(), [](double v) { return std::isfinite(v); });
}

// The largest |score| the call can form, |scale| max|q| max|k|: the kernels' fp32 scores carry an
// error of a few ulps of it, which the softmax passes on to the weights.
double ScoreBound(const Case& c, double scale) {
  const size_t dim = size_t(c.shape.head_dim);
  return std::abs(scale) * MaxRowNorm(c.q.Dense(), dim) * MaxRowNorm(c.k.Dense(), dim);
}

struct Bounds {
  double forward, backward;
};
// The fp32 bounds of §10, from the scores' size: a relative 2^-16 (a few hundred ulps) of
// (1 + max |score|) on O (times max |V|) and lse, and on the gradients of (1 + max |score|)^2
// times the product of the magnitudes a gradient is made of.
Bounds FloatBounds(const Case& c) {
  const double scale = ResolvedScale(c.shape, c.options), d_o_scale = MaxAbs(c.d_o.Dense());
  const double s = 1.0 + ScoreBound(c, scale);
  const double v = 1.0 + MaxAbs(c.v.Dense());
  const double qk = 1.0 + std::max(MaxAbs(c.q.Dense()), MaxAbs(c.k.Dense()));
  const double rel = std::ldexp(1.0, -16) * (1.0 + double(c.shape.head_dim) / 16.0);
  return {rel * s * v, rel * s * s * v * (1.0 + d_o_scale) * qk * (1.0 + std::abs(scale))};
}

ReferenceInputs DenseInputs(const Case& c) {
  ReferenceInputs in{c.q.Dense(), c.k.Dense(), c.v.Dense(), {}};
  in.sink_logits.assign(c.sink_logits.begin(), c.sink_logits.end());
  return in;
}

bool InputsFinite(const Case& c) {
  return AllFinite(c.q.Dense()) && AllFinite(c.k.Dense()) && AllFinite(c.v.Dense()) &&
         AllFinite(c.d_o.Dense()) &&
         std::all_of(c.sink_logits.begin(), c.sink_logits.end(),
                     [](float x) { return std::isfinite(x); });
}

// docs/design.md §10: runs a kernel call; an std::invalid_argument is an accepted refusal (the options the input
// chose may be invalid: the kernels must say so before writing anything, which the poisoned
// outputs check). Returns whether the call ran.
template <class F>
bool Ran(const F& call) {
  try {
    call();
    return true;
  } catch (const std::invalid_argument& e) {
    // FUZZ_DEBUG=1 says why, for seeing which choices a corpus never gets past.
    if (std::getenv("FUZZ_DEBUG")) std::fprintf(stderr, "refused: %s\n", e.what());
    return false;
  }
}

FuzzTensor OutputLike(ByteReader& in, const FuzzTensor& like) {
  return FuzzTensor(in, like.batch, like.heads, like.tokens, like.dim);
}

// Flips allowed where a rounding is discontinuous: a row in 50, plus two (docs/design.md §10).
size_t Flips(bool jumps, size_t rows) { return jumps ? rows / 50 + 2 : 0; }

// The gradients dQ, dK and dV of a backward, each in its own poisoned layout.
struct Gradients {
  FuzzTensor dq, dk, dv;
  // docs/design.md §10: laid out as the input picks, like Q and K.
  void Allocate(ByteReader& in, const Case& c) {
    dq = OutputLike(in, c.q);
    dk = OutputLike(in, c.k);
    dv = OutputLike(in, c.v);
  }
  // docs/design.md §10: no write outside any of the three.
  void CheckUntouchedOutside(const std::string& call) const {
    dq.CheckUntouchedOutside((call + " dQ").c_str());
    dk.CheckUntouchedOutside((call + " dK").c_str());
    dv.CheckUntouchedOutside((call + " dV").c_str());
  }
  // docs/design.md §10: each against the reference, within `bound` plus `step` of its size (a
  // rounded backward's flips), up to `flips` per 50 rows (+ 2) beyond it and none beyond `loose`.
  void Compare(const std::string& call, const ReferenceGradients& want, size_t dim, double bound,
               double step, double loose, bool jumps, size_t flip_factor) const {
    const struct {
      const char* name;
      const FuzzTensor& got;
      const std::vector<double>& want;
    } parts[] = {{" dQ", dq, want.dq}, {" dK", dk, want.dk}, {" dV", dv, want.dv}};
    for (const auto& part : parts) {
      CompareRows((call + part.name).c_str(), part.got.Dense(), part.want, dim,
                  bound + step * (1.0 + MaxAbs(part.want)), loose,
                  Flips(jumps, part.want.size() / dim) * flip_factor);
    }
  }
};

// ---- exact attention: ExactForward, ExactBackward, PreparedKv, KvCache ------------------------

// docs/design.md §10: the C API's exact forward (lpattn.h) on the same call refuses when the
// C++ one does and otherwise writes the same bits.
void CheckCApiAgrees(const Case& c, const FuzzTensor& o, const GuardedArray<float>& lse, bool ran) {
  // The C API reads a scale <= 0 as "the default": a negative C++ scale has no C spelling.
  if (c.options.scale && *c.options.scale < 0.0f) return;
  const AttentionShape& s = c.shape;
  const lpattn_shape shape{s.batch, s.heads, s.kv_heads, s.q_len, s.kv_len, s.head_dim};
  lpattn_options options;
  lpattn_default_options(&options);
  options.causal = c.options.causal;
  options.scale = c.options.scale.value_or(0.0f);
  options.sink = lpattn_sink_mode(c.options.sink);
  options.sink_logits = c.options.sink_logits;
  options.threads = c.options.threads;
  const std::string precision = FormatPrecision(c.options.precision);
  options.precision = precision.c_str();
  options.softcap = c.options.softcap;
  options.alibi_slopes = c.options.alibi_slopes;
  options.window = c.options.window;
  const auto view = [](const FuzzTensor& t) {
    return lpattn_const_tensor{t.data(), t.strides.batch, t.strides.head, t.strides.token};
  };
  FuzzTensor o_c = o;
  std::fill(o_c.buffer.begin(), o_c.buffer.end(), Poison());
  GuardedArray<float> lse_c(lse.n);
  const lpattn_status status = lpattn_exact_forward(
      &shape, &options, view(c.q), view(c.k), view(c.v),
      lpattn_tensor{o_c.data(), o.strides.batch, o.strides.head, o.strides.token}, lse_c.data());
  o_c.CheckUntouchedOutside("C API exact forward O");
  lse_c.CheckGuards("C API exact forward lse");
  if ((status == LPATTN_OK) != ran) {
    Finding("the C API " + std::string(ran ? "refused" : "ran") + " a call the C++ API " +
            (ran ? "ran" : "refused") + ": " + lpattn_last_error());
  }
  if (ran && (std::memcmp(o_c.buffer.data(), o.buffer.data(), o.buffer.size() * sizeof(float)) ||
              std::memcmp(lse_c.buffer.data(), lse.buffer.data(), lse.buffer.size() * sizeof(float)))) {
    Finding("the C API's exact forward differs from the C++ API's");
  }
}

// docs/design.md §10: exact attention with every score option against ReferenceExactForward
// and ReferenceExactBackward.
void FuzzExact(ByteReader& in) {
  Case c = MakeCase(in, true);
  AttentionShape& s = c.shape;
  c.options.sink = SinkMode(in.Pick(3));
  c.options.sink_logits = c.options.sink == SinkMode::kLearned ? c.sink_logits.data() : nullptr;
  if (in.Pick(3) == 0) c.options.softcap = float(in.Range(1, 64)) / 2.0f;
  if (in.Pick(3) == 0) {
    c.alibi = AlibiSlopes(s.heads);
    c.options.alibi_slopes = c.alibi.data();
  }
  if (in.Pick(3) == 0) c.options.window = in.Range(1, 80);
  c.options.precision = PickPrecision(in);
  const bool backward = in.Bool();
  const Precision& p = c.options.precision;
  const bool jumps = p.p != quant::Format::kFp32 || !p.BackwardIsFp32();
  if (std::getenv("FUZZ_DEBUG")) {
    std::fprintf(stderr, "exact B%ld H%ld/%ld T%ldx%ld D%ld causal=%d scale=%g sink=%d softcap=%g "
                 "alibi=%d window=%ld precision='%s' backward=%d vscale=%g finite=%d\n",
                 long(s.batch), long(s.heads), long(s.kv_heads), long(s.q_len), long(s.kv_len),
                 long(s.head_dim), int(c.options.causal), double(c.options.scale.value_or(0.0f)),
                 int(c.options.sink), double(c.options.softcap), c.options.alibi_slopes != nullptr,
                 long(c.options.window), FormatPrecision(p).c_str(), int(backward),
                 double(c.values.scale), int(c.values.finite));
  }

  FuzzTensor o = OutputLike(in, c.q);
  GuardedArray<float> lse(size_t(s.batch * s.heads * s.q_len));
  const bool ran = Ran([&] {
    ExactForward(s, c.options, {c.q.cview(), c.k.cview(), c.v.cview(), o.view(), lse.data()});
  });
  o.CheckUntouchedOutside("exact forward O");
  lse.CheckGuards("exact forward lse");
  CheckCApiAgrees(c, o, lse, ran);
  if (!ran) return;
  Gradients d;
  GuardedArray<float> d_sink(size_t(s.heads));
  if (backward) {
    d.Allocate(in, c);
    BackwardArgs args{c.q.cview(), c.k.cview(), c.v.cview(), o.cview(), c.d_o.cview(), lse.data(),
                      d.dq.view(), d.dk.view(), d.dv.view(), d_sink.data()};
    const bool ran_backward = Ran([&] { ExactBackward(s, c.options, args); });
    d.CheckUntouchedOutside("exact backward");
    d_sink.CheckGuards("exact backward d_sink");
    if (!ran_backward) return;
  }
  if (!InputsFinite(c)) return;
  const Bounds bound = FloatBounds(c);
  const size_t dim = size_t(s.head_dim);
  const ReferenceForwardResult ref = ReferenceExactForward(s, c.options, DenseInputs(c));
  const double loose_o = jumps ? 0.25 * (1.0 + MaxAbs(c.v.Dense())) : bound.forward;
  CompareRows("exact O", o.Dense(), ref.o, dim, bound.forward, loose_o,
              Flips(jumps, ref.o.size() / dim));
  // lse does not see P's rounding (Z sums the unrounded weights).
  CompareRows("exact lse", lse.Dense(), ref.lse, 1, bound.forward * (1.0 + MaxAbs(ref.lse)),
              bound.forward * (1.0 + MaxAbs(ref.lse)), 0);
  if (!backward) return;
  const ReferenceGradients grads =
      ReferenceExactBackward(s, c.options, DenseInputs(c), c.d_o.Dense());
  // A rounded backward's row moves by a step of its format wherever an entry flips; its bound
  // scales with the gradient's size.
  d.Compare("exact", grads, dim, bound.backward, jumps ? 5e-2 : 0.0,
            jumps ? INFINITY : bound.backward, jumps, 1);
  if (c.options.sink == SinkMode::kLearned) {
    const double sink_bound = bound.backward * double(s.batch * s.q_len);
    CompareRows("exact d_sink", d_sink.Dense(), grads.d_sink, 1, sink_bound, jumps ? INFINITY : sink_bound,
                Flips(jumps, size_t(s.heads)));
  }
}

// docs/design.md §10: the forward over K and V prepared once (PreparedKv) and over an
// appendable cache (KvCache, contiguous or paged), against ReferenceExactForward with the
// precision the stored K and V have.
void FuzzStoredKv(ByteReader& in) {
  Case c = MakeCase(in, true);
  AttentionShape& s = c.shape;
  c.options.sink = SinkMode(in.Pick(3));
  c.options.sink_logits = c.options.sink == SinkMode::kLearned ? c.sink_logits.data() : nullptr;
  const bool cache = in.Bool();
  FuzzTensor o = OutputLike(in, c.q);
  GuardedArray<float> lse(size_t(s.batch * s.heads * s.q_len));
  Precision precision;
  if (!cache) {
    c.options.precision = PickPrecision(in);
    precision = c.options.precision;
    const bool ran = Ran([&] {
      const PreparedKv kv(s, c.options.precision, c.k.cview(), c.v.cview(), c.options.threads);
      ExactForward(s, c.options, c.q.cview(), kv, o.view(), lse.data());
    });
    o.CheckUntouchedOutside("prepared forward O");
    lse.CheckGuards("prepared forward lse");
    if (!ran) return;
  } else {
    KvCacheConfig config;
    config.sequences = s.batch;
    config.kv_heads = s.kv_heads;
    config.head_dim = s.head_dim;
    config.capacity = s.kv_len + in.Range(0, 8);
    config.k_format = kFormats[in.Pick(6)];
    config.v_format = kFormats[in.Pick(6)];
    if (in.Bool()) {
      config.block_size = int64_t(1) << in.Range(0, 5);
      config.blocks = s.batch * ((config.capacity + config.block_size - 1) / config.block_size);
      config.layout = in.Bool() ? PagedLayout::kHeadMajor : PagedLayout::kTokenMajor;
    }
    precision = CachePrecision(config);
    c.options.precision = precision;
    const bool ran = Ran([&] {
      KvCache kv(config);
      const int64_t per_slot = (config.capacity + config.block_size - 1) / std::max<int64_t>(config.block_size, 1);
      for (int64_t b = 0; b < s.batch; ++b) {
        if (config.block_size > 0) {
          // Slot b's blocks in reverse order, so a table is not the identity.
          std::vector<int32_t> table;
          for (int64_t i = per_slot - 1; i >= 0; --i) table.push_back(int32_t(b * per_slot + i));
          kv.SetBlockTable(b, table.data(), per_slot, 0);
        }
        // Appended in two pieces, so that appending after existing tokens is exercised.
        const int64_t first = s.kv_len / 2;
        const auto piece = [&](const FuzzTensor& t, int64_t from) {
          return ConstTensor{t.data() + b * t.strides.batch + from * t.strides.token, t.strides};
        };
        if (first > 0) kv.Append(b, first, piece(c.k, 0), piece(c.v, 0));
        kv.Append(b, s.kv_len - first, piece(c.k, first), piece(c.v, first));
      }
      ExactForward(s, c.options, c.q.cview(), kv, o.view(), lse.data());
    });
    o.CheckUntouchedOutside("cached forward O");
    lse.CheckGuards("cached forward lse");
    if (!ran) return;
  }
  if (!InputsFinite(c)) return;
  const Bounds bound = FloatBounds(c);
  const bool jumps = precision.p != quant::Format::kFp32;
  const ReferenceForwardResult ref = ReferenceExactForward(s, c.options, DenseInputs(c));
  const size_t dim = size_t(s.head_dim);
  CompareRows(cache ? "cached O" : "prepared O", o.Dense(), ref.o, dim, bound.forward,
              jumps ? 0.25 * (1.0 + MaxAbs(c.v.Dense())) : bound.forward,
              Flips(jumps, ref.o.size() / dim));
  CompareRows(cache ? "cached lse" : "prepared lse", lse.Dense(), ref.lse, 1,
              bound.forward * (1.0 + MaxAbs(ref.lse)), bound.forward * (1.0 + MaxAbs(ref.lse)), 0);
}

// ---- K-interval attention ------------------------------------------------------------------

// docs/design.md §10: K-interval attention (docs/math.md §2) with options the input picks,
// against ReferenceKIntervalForward and ReferenceKIntervalBackward.
void FuzzKInterval(ByteReader& in) {
  Case c = MakeCase(in, true);
  AttentionShape& s = c.shape;
  KIntervalOptions kint;
  kint.K = int(in.Range(1, 64));
  kint.calibration = in.Bool() ? KIntervalCalibration::kWindow : KIntervalCalibration::kMinMax;
  kint.window = double(in.Range(1, 4096)) / 8.0;  // up to W = 512: intervals wider than exp's range
  kint.rounding = in.Bool() ? KIntervalRounding::kNearest : KIntervalRounding::kLerp;
  kint.surrogate = KIntervalSurrogate(in.Pick(3));
  // Valid by construction (fuzz_options tries the invalid ones): each variant only with the
  // surrogate it belongs to, nearest rounding only with a surrogate that has a slope.
  const bool variant = in.Pick(4) == 0;
  kint.weight_slope_from_grid = variant && kint.surrogate == KIntervalSurrogate::kWeight;
  kint.prob_jacobian_at_grid = variant && kint.surrogate == KIntervalSurrogate::kProb;
  kint.detach_extrema = in.Pick(4) == 0 && kint.surrogate != KIntervalSurrogate::kProb;
  if (kint.surrogate == KIntervalSurrogate::kExact) kint.rounding = KIntervalRounding::kLerp;
  kint.grid = in.Pick(4) == 0 ? kFormats[in.Pick(6)] : quant::Format::kFp32;
  ValidateKInterval(kint);
  c.options.precision = PickPrecision(in);
  const Precision& p = c.options.precision;
  const bool backward = in.Bool();
  const bool jumps = kint.rounding == KIntervalRounding::kNearest ||
                     kint.grid != quant::Format::kFp32 || p.p != quant::Format::kFp32;
  if (std::getenv("FUZZ_DEBUG")) {
    std::fprintf(stderr, "kint B%ld H%ld/%ld T%ldx%ld D%ld causal=%d scale=%g kint='%s' "
                 "precision='%s' backward=%d vscale=%g finite=%d\n",
                 long(s.batch), long(s.heads), long(s.kv_heads), long(s.q_len), long(s.kv_len),
                 long(s.head_dim), int(c.options.causal), double(c.options.scale.value_or(0.0f)),
                 FormatKInterval(kint).c_str(), FormatPrecision(p).c_str(), int(backward),
                 double(c.values.scale), int(c.values.finite));
  }

  const size_t rows = size_t(s.batch * s.heads * s.q_len);
  FuzzTensor o = OutputLike(in, c.q);
  GuardedArray<float> m(rows), R(rows), Z(rows), lse_exact(rows);
  GuardedArray<int32_t> argmax(rows), argmin(rows);
  const KIntervalSaved saved{m.data(), R.data(), Z.data(), lse_exact.data(), argmax.data(),
                             argmin.data()};
  const bool ran = Ran([&] {
    KIntervalForward(s, c.options, kint, {c.q.cview(), c.k.cview(), c.v.cview(), o.view(), saved});
  });
  o.CheckUntouchedOutside("K-interval forward O");
  for (const auto* a : {&m, &R, &Z, &lse_exact}) a->CheckGuards("K-interval saved statistics");
  argmax.CheckGuards("K-interval argmax");
  argmin.CheckGuards("K-interval argmin");
  if (!ran) return;
  Gradients d;
  if (backward) {
    d.Allocate(in, c);
    const KIntervalBackwardArgs args{c.q.cview(),   c.k.cview(), c.v.cview(),
                                     o.cview(),     c.d_o.cview(), saved,
                                     d.dq.view(),   d.dk.view(), d.dv.view()};
    const bool ran_backward = Ran([&] { KIntervalBackward(s, c.options, kint, args); });
    d.CheckUntouchedOutside("K-interval backward");
    if (!ran_backward) return;
  }
  if (!InputsFinite(c)) return;
  const Bounds bound = FloatBounds(c);
  const size_t dim = size_t(s.head_dim);
  const ReferenceKIntervalForwardResult ref =
      ReferenceKIntervalForward(s, c.options, kint, DenseInputs(c));
  // A flip of nearest rounding moves one weight by a factor e^h; the row's O stays within V's
  // range. Scores on a lattice (quantized operands, small D) put many coordinates exactly on
  // half-nodes, where float and double round either way: under nearest any row may flip.
  const bool nearest = kint.rounding == KIntervalRounding::kNearest;
  CompareRows("K-interval O", o.Dense(), ref.o, dim, bound.forward,
              jumps ? 2.0 * (1.0 + MaxAbs(c.v.Dense())) : bound.forward,
              nearest ? rows : Flips(jumps, rows));
  if (!backward) return;
  const ReferenceGradients grads =
      ReferenceKIntervalBackward(s, c.options, kint, DenseInputs(c), c.d_o.Dense());
  // The backward jumps at interior nodes (the chord's slope) and at ties of the extrema (the
  // calibration terms go to another key), besides the roundings: rows may flip, unbounded.
  const bool rounded = jumps || !p.BackwardIsFp32();
  d.Compare("K-interval", grads, dim, bound.backward, rounded ? 5e-2 : 0.0, INFINITY, true,
            nearest ? 50 : rounded ? 5 : 1);
}

// ---- thresholded attention ------------------------------------------------------------------

// docs/design.md §10: thresholded (differential) attention (docs/math.md §3), one or two
// views, against ReferenceThresholdForward and ReferenceThresholdBackward.
void FuzzThreshold(ByteReader& in) {
  Case c = MakeCase(in, true);
  AttentionShape& s = c.shape;
  ThresholdOptions t;
  t.views = int(in.Range(1, 2));
  t.power = int(in.Range(1, 3));
  t.beta = double(in.Range(0, 32)) / 8.0;
  t.kappa = double(in.Range(1, 64)) / 8.0;
  t.l2_normalize = in.Pick(4) != 0;
  c.options.precision = PickPrecision(in);
  const bool backward = in.Bool();
  FuzzTensor q2 = OutputLike(in, c.q), k2 = OutputLike(in, c.k);
  Fill(q2, in, c.values);
  Fill(k2, in, c.values);
  std::vector<float> lambda;
  for (int64_t h = 0; h < s.heads; ++h) lambda.push_back(float(in.Range(-8, 24)) / 16.0f);

  ThresholdForwardArgs args;
  args.q[0] = c.q.cview();
  args.k[0] = c.k.cview();
  args.q[1] = q2.cview();
  args.k[1] = k2.cview();
  args.v = c.v.cview();
  args.lambda_param = lambda.data();
  FuzzTensor o = OutputLike(in, c.q);
  args.o = o.view();
  GuardedArray<int32_t> survivors(size_t(t.views * s.batch * s.heads * s.q_len));
  args.survivors = survivors.data();
  const bool ran = Ran([&] { ThresholdForward(s, c.options, t, args); });
  o.CheckUntouchedOutside("threshold forward O");
  survivors.CheckGuards("threshold survivors");
  if (!ran) return;
  FuzzTensor dq[2], dk[2], dv;
  GuardedArray<float> d_lambda(size_t(s.heads)), d_beta(1);
  if (backward) {
    ThresholdBackwardArgs b;
    for (int view = 0; view < 2; ++view) {
      b.q[view] = args.q[view];
      b.k[view] = args.k[view];
      dq[view] = OutputLike(in, c.q);
      dk[view] = OutputLike(in, c.k);
      b.dq[view] = dq[view].view();
      b.dk[view] = dk[view].view();
    }
    b.v = c.v.cview();
    b.d_o = c.d_o.cview();
    b.lambda_param = lambda.data();
    dv = OutputLike(in, c.v);
    b.dv = dv.view();
    b.d_lambda = d_lambda.data();
    b.d_beta = d_beta.data();
    const bool ran_backward = Ran([&] { ThresholdBackward(s, c.options, t, b); });
    for (int view = 0; view < 2; ++view) {
      dq[view].CheckUntouchedOutside("threshold backward dQ");
      dk[view].CheckUntouchedOutside("threshold backward dK");
    }
    dv.CheckUntouchedOutside("threshold backward dV");
    d_lambda.CheckGuards("threshold backward d_lambda");
    d_beta.CheckGuards("threshold backward d_beta");
    if (!ran_backward) return;
  }
  if (!InputsFinite(c) || !AllFinite(q2.Dense()) || !AllFinite(k2.Dense())) return;
  ReferenceThresholdInputs dense;
  dense.q[0] = c.q.Dense();
  dense.k[0] = c.k.Dense();
  dense.q[1] = q2.Dense();
  dense.k[1] = k2.Dense();
  dense.v = c.v.Dense();
  dense.lambda_param.assign(lambda.begin(), lambda.end());
  const size_t dim = size_t(s.head_dim), rows = size_t(s.batch * s.heads * s.q_len);
  const double scale = ThresholdScale(c.options);
  // Scores are cosines times the scale with the L2 normalisation; the weights max(s - tau, 0)^p
  // then reach |scale|^p per key, summed over the keys.
  const double s_max = t.l2_normalize ? std::abs(scale) : ScoreBound(c, scale);
  const double w_max = std::pow(1.0 + s_max + t.beta, t.power) * double(s.kv_len);
  const double v_max = 1.0 + MaxAbs(c.v.Dense());
  const double rel = std::ldexp(1.0, -15) * (1.0 + double(s.head_dim) / 16.0);
  const Precision& p = c.options.precision;
  const bool jumps = p.p != quant::Format::kFp32 || !p.BackwardIsFp32();
  const ReferenceThresholdForwardResult ref = ReferenceThresholdForward(s, c.options, t, dense);
  const double tight = rel * w_max * v_max * (1.0 + s_max);
  CompareRows("threshold O", o.Dense(), ref.o, dim, tight, jumps ? INFINITY : tight,
              Flips(jumps, rows));
  if (!backward) return;
  const ReferenceThresholdGradients grads =
      ReferenceThresholdBackward(s, c.options, t, dense, c.d_o.Dense());
  // Weights are not smooth at tau (p = 1 jumps there, p = 2 bends): rows may flip.
  const double g_tight = tight * (1.0 + MaxAbs(c.d_o.Dense())) * (1.0 + s_max) *
                         (1.0 + std::abs(scale)) * (jumps ? 64.0 : 1.0);
  for (int view = 0; view < t.views; ++view) {
    CompareRows("threshold dQ", dq[view].Dense(), grads.dq[view], dim, g_tight, INFINITY,
                Flips(true, rows) * 2);
    CompareRows("threshold dK", dk[view].Dense(), grads.dk[view], dim, g_tight, INFINITY,
                Flips(true, grads.dk[view].size() / dim) * 2);
  }
  CompareRows("threshold dV", dv.Dense(), grads.dv, dim, g_tight, INFINITY,
              Flips(true, grads.dv.size() / dim) * 2);
}

// ---- value gates --------------------------------------------------------------------------

// docs/design.md §10: the norm and projection value gates (docs/math.md §1.2) against
// ReferenceValueGateForward and ReferenceValueGateBackward.
void FuzzValueGate(ByteReader& in) {
  Case c = MakeCase(in, false);
  const AttentionShape& s = c.shape;
  const size_t heads = size_t(s.kv_heads), dim = size_t(s.head_dim);
  ReferenceValueGateParams ref_params;
  ref_params.kind = in.Bool() ? ValueGateKind::kProjection : ValueGateKind::kNorm;
  std::vector<float> alpha(heads), beta(heads), w(heads * dim), b(heads);
  for (float& x : alpha) x = float(in.Range(-64, 64)) / 16.0f;
  for (float& x : beta) x = float(in.Range(-64, 64)) / 16.0f;
  for (float& x : w) x = float(in.Range(-64, 64)) / 32.0f;
  for (float& x : b) x = float(in.Range(-64, 64)) / 16.0f;
  const ValueGateParams params{ref_params.kind, alpha.data(), beta.data(), w.data(), b.data()};
  FuzzTensor gated = OutputLike(in, c.v);
  GuardedArray<float> gates(size_t(s.batch) * heads * size_t(s.kv_len));
  const int threads = c.options.threads;
  const bool ran = Ran([&] { ValueGateForward(s, params, c.v.cview(), gated.view(), gates.data(), threads); });
  gated.CheckUntouchedOutside("value gate forward");
  gates.CheckGuards("value gate gates");
  if (!ran) return;
  FuzzTensor d_gated = OutputLike(in, c.v);
  Fill(d_gated, in, c.values);
  FuzzTensor dv = OutputLike(in, c.v);
  GuardedArray<float> d_alpha(heads), d_beta(heads), d_w(heads * dim), d_b(heads);
  const ValueGateGrads grads{d_alpha.data(), d_beta.data(), d_w.data(), d_b.data()};
  const bool ran_backward = Ran([&] {
    ValueGateBackward(s, params, c.v.cview(), d_gated.cview(), dv.view(), grads, threads);
  });
  dv.CheckUntouchedOutside("value gate backward dV");
  for (const auto* g : {&d_alpha, &d_beta, &d_w, &d_b}) g->CheckGuards("value gate gradients");
  if (!ran_backward) return;
  if (!AllFinite(c.v.Dense()) || !AllFinite(d_gated.Dense())) return;
  ref_params.alpha.assign(alpha.begin(), alpha.end());
  ref_params.beta.assign(beta.begin(), beta.end());
  ref_params.w.assign(w.begin(), w.end());
  ref_params.b.assign(b.begin(), b.end());
  std::vector<double> ref_gates;
  const std::vector<double> ref = ReferenceValueGateForward(s, ref_params, c.v.Dense(), &ref_gates);
  const double v_max = 1.0 + MaxAbs(c.v.Dense());
  // The gate's argument alpha ||v|| + beta (or w . v + b) in float: a relative 2^-18 of its
  // size moves g by at most a quarter of that.
  const double arg = 4.0 + 4.0 * v_max * std::sqrt(double(dim)) * 2.0;
  const double rel = std::ldexp(1.0, -18) * arg;
  CompareRows("value gate v~", gated.Dense(), ref, dim, rel * v_max, rel * v_max, 0);
  CompareRows("value gate g", gates.Dense(), ref_gates, 1, rel, rel, 0);
  const ReferenceValueGateGrads ref_grads =
      ReferenceValueGateBackward(s, ref_params, c.v.Dense(), d_gated.Dense());
  const double dg = 1.0 + MaxAbs(d_gated.Dense());
  const double tokens = double(s.batch * s.kv_len);
  CompareRows("value gate dV", dv.Dense(), ref_grads.dv, dim, rel * dg * v_max * arg,
              rel * dg * v_max * arg, 0);
  const double sum_bound = rel * dg * v_max * v_max * arg * tokens * double(dim);
  if (ref_params.kind == ValueGateKind::kNorm) {
    CompareRows("value gate d alpha", d_alpha.Dense(), ref_grads.alpha, 1, sum_bound, sum_bound, 0);
    CompareRows("value gate d beta", d_beta.Dense(), ref_grads.beta, 1, sum_bound, sum_bound, 0);
  } else {
    CompareRows("value gate d w", d_w.Dense(), ref_grads.w, dim, sum_bound, sum_bound, 0);
    CompareRows("value gate d b", d_b.Dense(), ref_grads.b, 1, sum_bound, sum_bound, 0);
  }
}

}  // namespace
}  // namespace lpattn::fuzz

// docs/design.md §10: the first byte picks the entry point, the rest is its case.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lpattn::fuzz;
  ByteReader in(data, size);
  switch (in.Byte() % 5) {
    case 0: FuzzExact(in); break;
    case 1: FuzzStoredKv(in); break;
    case 2: FuzzKInterval(in); break;
    case 3: FuzzThreshold(in); break;
    case 4: FuzzValueGate(in); break;
  }
  return 0;
}
