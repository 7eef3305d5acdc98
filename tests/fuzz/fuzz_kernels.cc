// Differential fuzzing of the kernels (docs/design.md §10): every entry point of the public C++
// API on a shape, strides, options and values the input chooses, against the fp64 reference of
// kernels/reference.h, and every kernel entry point of the C API (lpattn.h) on the same call,
// which must refuse alike and otherwise write the same bits. A finding is a crash or sanitizer
// report, a write outside an output's elements (its padding and the guard bands around it are
// poisoned and checked), an unexpected exception, a C API that disagrees, or an error beyond
// the bound of §10.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
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
  // docs/design.md §10: a dense head-major [b, h, t, d] tensor, poisoned.
  static FuzzTensor DenseLayout(int64_t b, int64_t h, int64_t t, int64_t d) {
    FuzzTensor x;
    x.batch = b, x.heads = h, x.tokens = t, x.dim = d;
    x.strides = {h * t * d, t * d, d};
    x.buffer.assign(size_t(b * h * t * d + 2 * kGuard), Poison());
    return x;
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

  // Which of the buffer's floats are elements (the rest is padding and guard bands).
  std::vector<bool> Inside() const {
    std::vector<bool> inside(buffer.size(), false);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t c = 0; c < dim; ++c) inside[Offset(b, h, t, c)] = true;
    return inside;
  }
  // Every float outside the elements still holds the poison.
  void CheckUntouchedOutside(const char* name) const {
    const std::vector<bool> inside = Inside();
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
  void CheckUntouchedOutside(const char* name) const { CheckGuards(name); }
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

// ---- the C API (lpattn.h) on the C++ API's calls -------------------------------------------

// docs/design.md §10: a case's shape and options as the C API spells them. `expressible` is
// false where it cannot: the C API reads a scale <= 0 as "the default", so a negative C++ scale
// has no C spelling and the comparison is skipped.
struct CApiOptions {
  lpattn_shape shape;
  lpattn_options options;
  std::string precision;
  bool expressible;
  explicit CApiOptions(const Case& c)
      : shape{c.shape.batch, c.shape.heads,  c.shape.kv_heads,
              c.shape.q_len, c.shape.kv_len, c.shape.head_dim},
        precision(FormatPrecision(c.options.precision)),
        expressible(!(c.options.scale && *c.options.scale < 0.0f)) {
    lpattn_default_options(&options);
    options.causal = c.options.causal;
    options.scale = c.options.scale.value_or(0.0f);
    options.sink = lpattn_sink_mode(c.options.sink);
    options.sink_logits = c.options.sink_logits;
    options.threads = c.options.threads;
    options.precision = precision.c_str();
    options.softcap = c.options.softcap;
    options.alibi_slopes = c.options.alibi_slopes;
    options.window = c.options.window;
  }
  CApiOptions(const CApiOptions&) = delete;  // options.precision points into precision
  CApiOptions& operator=(const CApiOptions&) = delete;
};

lpattn_const_tensor CView(const FuzzTensor& t) {
  return {t.data(), t.strides.batch, t.strides.head, t.strides.token};
}
lpattn_tensor COut(FuzzTensor& t) { return {t.data(), t.strides.batch, t.strides.head, t.strides.token}; }

// docs/design.md §10: a fresh output for the C API's call, in the layout of the C++ call's.
FuzzTensor PoisonedLike(const FuzzTensor& like) {
  FuzzTensor t = like;
  std::fill(t.buffer.begin(), t.buffer.end(), Poison());
  return t;
}

// One output of a call: the C++ API's buffer and the C API's, both with their guard bands.
struct OutputPair {
  std::string name;
  std::function<void()> check_c_outside;  // the C output's padding and guard bands
  const void* cpp;
  const void* c;
  size_t bytes;
};
// docs/design.md §10: an output tensor or array of both calls.
template <class Out>
OutputPair Pair(const std::string& name, const Out& cpp, const Out& c) {
  const auto check = [&c, name] { c.CheckUntouchedOutside(("C API " + name).c_str()); };
  return {name, check, cpp.buffer.data(), c.buffer.data(), cpp.buffer.size() * sizeof(cpp.buffer[0])};
}

// docs/design.md §10: the C API wrote nothing outside its outputs, refused exactly when the C++
// API refused the same call (`ran`: the C++ call ran) and otherwise wrote the same bits.
void CheckCApiOutcome(const std::string& call, lpattn_status status, bool ran,
                      const std::vector<OutputPair>& outputs) {
  for (const OutputPair& out : outputs) out.check_c_outside();
  if ((status == LPATTN_OK) != ran) {
    Finding("the C API " + std::string(ran ? "refused" : "ran") + " a " + call + " the C++ API " +
            (ran ? "ran" : "refused") + ": " + lpattn_last_error());
  }
  if (!ran) return;
  for (const OutputPair& out : outputs) {
    if (std::memcmp(out.cpp, out.c, out.bytes) != 0) {
      Finding("the C API's " + call + " " + out.name + " differs from the C++ API's");
    }
  }
}

// The kernels' options texts (lpattn.h takes FormatKInterval's and FormatThreshold's canonical
// text, which carry no "kint:" or "tda:" arm prefix).
std::string COptionsText(const KIntervalOptions& kint) { return FormatKInterval(kint); }
std::string COptionsText(const ThresholdOptions& t) { return FormatThreshold(t); }

// ---- exact attention: ExactForward, ExactBackward, PreparedKv --------------------------------

// docs/design.md §10: an exact forward of the C API, `call(capi, o, lse)` (in-call or cached),
// on fresh outputs, against the C++ call's O and lse.
template <class Call>
void CheckCApiExactForward(const std::string& name, const Case& c, const FuzzTensor& o,
                           const GuardedArray<float>& lse, bool ran, const Call& call) {
  const CApiOptions capi(c);
  if (!capi.expressible) return;
  FuzzTensor o_c = PoisonedLike(o);
  GuardedArray<float> lse_c(lse.n);
  CheckCApiOutcome(name, call(capi, COut(o_c), lse_c.data()), ran,
                   {Pair("O", o, o_c), Pair("lse", lse, lse_c)});
}

// docs/design.md §10: the C API's exact backward (lpattn_exact_backward, d_sink included) on
// the same call, from the C++ forward's O and lse.
void CheckCApiBackward(const Case& c, const FuzzTensor& o, const GuardedArray<float>& lse,
                       const Gradients& d, const GuardedArray<float>& d_sink, bool ran) {
  const CApiOptions capi(c);
  if (!capi.expressible) return;
  Gradients d_c{PoisonedLike(d.dq), PoisonedLike(d.dk), PoisonedLike(d.dv)};
  GuardedArray<float> d_sink_c(d_sink.n);
  const lpattn_status status = lpattn_exact_backward(
      &capi.shape, &capi.options, CView(c.q), CView(c.k), CView(c.v), CView(o), CView(c.d_o),
      lse.data(), COut(d_c.dq), COut(d_c.dk), COut(d_c.dv), d_sink_c.data());
  CheckCApiOutcome("exact backward", status, ran,
                   {Pair("dQ", d.dq, d_c.dq), Pair("dK", d.dk, d_c.dk), Pair("dV", d.dv, d_c.dv),
                    Pair("d_sink", d_sink, d_sink_c)});
}

// docs/design.md §10: the forward's O and lse against ReferenceExactForward. `o_step` widens
// the bound by a step of O's own format (a 16-bit O rounds once at the end).
void CompareExactForward(const std::string& name, const Case& c, const FuzzTensor& o,
                         const GuardedArray<float>& lse, bool jumps, double o_step) {
  const Bounds bound = FloatBounds(c);
  const size_t dim = size_t(c.shape.head_dim);
  const ReferenceForwardResult ref = ReferenceExactForward(c.shape, c.options, DenseInputs(c));
  const double v_max = 1.0 + MaxAbs(c.v.Dense());
  const double tight = bound.forward + o_step * v_max;
  CompareRows((name + " O").c_str(), o.Dense(), ref.o, dim, tight, jumps ? 0.25 * v_max : tight,
              Flips(jumps, ref.o.size() / dim));
  // lse does not see P's rounding (Z sums the unrounded weights).
  const double lse_bound = bound.forward * (1.0 + MaxAbs(ref.lse));
  CompareRows((name + " lse").c_str(), lse.Dense(), ref.lse, 1, lse_bound, lse_bound, 0);
}

// docs/design.md §10: the sink mode the input picks, with the case's logits when learned.
void PickSink(ByteReader& in, Case& c) {
  c.options.sink = SinkMode(in.Pick(3));
  c.options.sink_logits = c.options.sink == SinkMode::kLearned ? c.sink_logits.data() : nullptr;
}

// docs/design.md §10: exact attention with every score option against ReferenceExactForward
// and ReferenceExactBackward.
void FuzzExact(ByteReader& in) {
  Case c = MakeCase(in, true);
  AttentionShape& s = c.shape;
  PickSink(in, c);
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
  CheckCApiExactForward("exact forward", c, o, lse, ran,
                        [&](const CApiOptions& capi, lpattn_tensor o_c, float* lse_c) {
                          return lpattn_exact_forward(&capi.shape, &capi.options, CView(c.q),
                                                      CView(c.k), CView(c.v), o_c, lse_c);
                        });
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
    CheckCApiBackward(c, o, lse, d, d_sink, ran_backward);
    if (!ran_backward) return;
  }
  if (!InputsFinite(c)) return;
  CompareExactForward("exact", c, o, lse, jumps, 0.0);
  if (!backward) return;
  const Bounds bound = FloatBounds(c);
  const size_t dim = size_t(s.head_dim);
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

// The forwards over a KvCache (docs/design.md §10), each through the C++ and the C API.
enum class CachedCall { kExact, kExact16, kKInterval, kThreshold };
void FuzzCached(ByteReader& in, Case& c, CachedCall call);

// docs/design.md §10: the forward over K and V prepared once (PreparedKv), against
// ReferenceExactForward with the precision the prepared K and V have, or (`cache`) the
// cached forwards of FuzzCached.
void FuzzStoredKv(ByteReader& in) {
  Case c = MakeCase(in, true);
  AttentionShape& s = c.shape;
  PickSink(in, c);
  if (in.Bool()) {
    FuzzCached(in, c, CachedCall::kExact);
    return;
  }
  FuzzTensor o = OutputLike(in, c.q);
  GuardedArray<float> lse(size_t(s.batch * s.heads * s.q_len));
  c.options.precision = PickPrecision(in);
  const bool ran = Ran([&] {
    const PreparedKv kv(s, c.options.precision, c.k.cview(), c.v.cview(), c.options.threads);
    ExactForward(s, c.options, c.q.cview(), kv, o.view(), lse.data());
  });
  o.CheckUntouchedOutside("prepared forward O");
  lse.CheckGuards("prepared forward lse");
  if (!ran || !InputsFinite(c)) return;
  CompareExactForward("prepared", c, o, lse, c.options.precision.p != quant::Format::kFp32, 0.0);
}

// ---- K-interval attention ------------------------------------------------------------------

// docs/design.md §10: K-interval options the input picks, valid by construction (fuzz_options
// tries the invalid ones): each variant only with the surrogate it belongs to, nearest rounding
// only with a surrogate that has a slope.
KIntervalOptions PickKInterval(ByteReader& in) {
  KIntervalOptions kint;
  kint.K = int(in.Range(1, 64));
  kint.calibration = in.Bool() ? KIntervalCalibration::kWindow : KIntervalCalibration::kMinMax;
  kint.window = double(in.Range(1, 4096)) / 8.0;  // up to W = 512: intervals wider than exp's range
  kint.rounding = in.Bool() ? KIntervalRounding::kNearest : KIntervalRounding::kLerp;
  kint.surrogate = KIntervalSurrogate(in.Pick(3));
  const bool variant = in.Pick(4) == 0;
  kint.weight_slope_from_grid = variant && kint.surrogate == KIntervalSurrogate::kWeight;
  kint.prob_jacobian_at_grid = variant && kint.surrogate == KIntervalSurrogate::kProb;
  kint.detach_extrema = in.Pick(4) == 0 && kint.surrogate != KIntervalSurrogate::kProb;
  if (kint.surrogate == KIntervalSurrogate::kExact) kint.rounding = KIntervalRounding::kLerp;
  kint.grid = in.Pick(4) == 0 ? kFormats[in.Pick(6)] : quant::Format::kFp32;
  ValidateKInterval(kint);
  return kint;
}

// The K-interval forward's saved statistics, [rows] each, between guard bands.
struct KIntervalSavedBuffers {
  GuardedArray<float> m, R, Z, lse_exact;
  GuardedArray<int32_t> argmax, argmin;
  explicit KIntervalSavedBuffers(size_t rows)
      : m(rows), R(rows), Z(rows), lse_exact(rows), argmax(rows), argmin(rows) {}
  KIntervalSaved cpp() {
    return {m.data(), R.data(), Z.data(), lse_exact.data(), argmax.data(), argmin.data()};
  }
  lpattn_kint_saved c() {
    return {m.data(), R.data(), Z.data(), lse_exact.data(), argmax.data(), argmin.data()};
  }
  // docs/design.md §10: no write outside any of the six.
  void CheckGuards() const {
    for (const auto* a : {&m, &R, &Z, &lse_exact}) a->CheckGuards("K-interval saved statistics");
    argmax.CheckGuards("K-interval argmax");
    argmin.CheckGuards("K-interval argmin");
  }
  // docs/design.md §10: the six against another call's, for CheckCApiOutcome.
  std::vector<OutputPair> Pairs(const KIntervalSavedBuffers& c) const {
    return {Pair("m", m, c.m),           Pair("R", R, c.R),
            Pair("Z", Z, c.Z),           Pair("lse_exact", lse_exact, c.lse_exact),
            Pair("argmax", argmax, c.argmax), Pair("argmin", argmin, c.argmin)};
  }
};

// docs/design.md §10: a K-interval forward of the C API, `call(capi, text, o, saved)` (in-call
// or cached, text FormatKInterval's), on fresh outputs, against the C++ call's O and statistics.
template <class Call>
void CheckCApiKIntervalForward(const std::string& name, const Case& c, const KIntervalOptions& kint,
                               const FuzzTensor& o, const KIntervalSavedBuffers& saved, bool ran,
                               const Call& call) {
  const CApiOptions capi(c);
  if (!capi.expressible) return;
  const std::string text = COptionsText(kint);
  FuzzTensor o_c = PoisonedLike(o);
  KIntervalSavedBuffers saved_c(saved.m.n);
  std::vector<OutputPair> outputs = saved.Pairs(saved_c);
  outputs.push_back(Pair("O", o, o_c));
  CheckCApiOutcome(name, call(capi, text.c_str(), COut(o_c), saved_c.c()), ran, outputs);
}

// docs/design.md §10: the C API's K-interval backward (lpattn_kint_backward) on the same call,
// from the C++ forward's O and statistics.
void CheckCApiKIntervalBackward(const Case& c, const KIntervalOptions& kint, const FuzzTensor& o,
                                KIntervalSavedBuffers& saved, const Gradients& d, bool ran) {
  const CApiOptions capi(c);
  if (!capi.expressible) return;
  const std::string text = COptionsText(kint);
  Gradients d_c{PoisonedLike(d.dq), PoisonedLike(d.dk), PoisonedLike(d.dv)};
  const lpattn_status status = lpattn_kint_backward(
      &capi.shape, &capi.options, text.c_str(), CView(c.q), CView(c.k), CView(c.v), CView(o),
      CView(c.d_o), saved.c(), COut(d_c.dq), COut(d_c.dk), COut(d_c.dv));
  CheckCApiOutcome("K-interval backward", status, ran,
                   {Pair("dQ", d.dq, d_c.dq), Pair("dK", d.dk, d_c.dk), Pair("dV", d.dv, d_c.dv)});
}

// Whether a K-interval row may flip (docs/design.md §10): nearest rounding, a rounded grid or a
// low-precision P.
bool KIntervalJumps(const KIntervalOptions& kint, const Precision& p) {
  return kint.rounding == KIntervalRounding::kNearest || kint.grid != quant::Format::kFp32 ||
         p.p != quant::Format::kFp32;
}

// docs/design.md §10: a K-interval forward's O against ReferenceKIntervalForward. A flip of
// nearest rounding moves one weight by a factor e^h; the row's O stays within V's range. Scores
// on a lattice (quantized operands, small D) put many coordinates exactly on half-nodes, where
// float and double round either way: under nearest any row may flip.
void CompareKIntervalForward(const std::string& name, const Case& c, const KIntervalOptions& kint,
                             const FuzzTensor& o) {
  const bool jumps = KIntervalJumps(kint, c.options.precision);
  const size_t dim = size_t(c.shape.head_dim), rows = o.Dense().size() / dim;
  const double tight = FloatBounds(c).forward;
  const ReferenceKIntervalForwardResult ref =
      ReferenceKIntervalForward(c.shape, c.options, kint, DenseInputs(c));
  CompareRows((name + " O").c_str(), o.Dense(), ref.o, dim, tight,
              jumps ? 2.0 * (1.0 + MaxAbs(c.v.Dense())) : tight,
              kint.rounding == KIntervalRounding::kNearest ? rows : Flips(jumps, rows));
}

// docs/design.md §10: K-interval attention (docs/math.md §2) with options the input picks,
// against ReferenceKIntervalForward and ReferenceKIntervalBackward.
void FuzzKInterval(ByteReader& in) {
  Case c = MakeCase(in, true);
  AttentionShape& s = c.shape;
  const KIntervalOptions kint = PickKInterval(in);
  c.options.precision = PickPrecision(in);
  const Precision& p = c.options.precision;
  const bool backward = in.Bool();
  const bool jumps = KIntervalJumps(kint, p);
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
  KIntervalSavedBuffers saved(rows);
  const bool ran = Ran([&] {
    KIntervalForward(s, c.options, kint, {c.q.cview(), c.k.cview(), c.v.cview(), o.view(), saved.cpp()});
  });
  o.CheckUntouchedOutside("K-interval forward O");
  saved.CheckGuards();
  CheckCApiKIntervalForward(
      "K-interval forward", c, kint, o, saved, ran,
      [&](const CApiOptions& capi, const char* text, lpattn_tensor o_c, lpattn_kint_saved saved_c) {
        return lpattn_kint_forward(&capi.shape, &capi.options, text, CView(c.q), CView(c.k),
                                   CView(c.v), o_c, saved_c);
      });
  if (!ran) return;
  Gradients d;
  if (backward) {
    d.Allocate(in, c);
    const KIntervalBackwardArgs args{c.q.cview(),   c.k.cview(), c.v.cview(),
                                     o.cview(),     c.d_o.cview(), saved.cpp(),
                                     d.dq.view(),   d.dk.view(), d.dv.view()};
    const bool ran_backward = Ran([&] { KIntervalBackward(s, c.options, kint, args); });
    d.CheckUntouchedOutside("K-interval backward");
    CheckCApiKIntervalBackward(c, kint, o, saved, d, ran_backward);
    if (!ran_backward) return;
  }
  if (!InputsFinite(c)) return;
  CompareKIntervalForward("K-interval", c, kint, o);
  if (!backward) return;
  const Bounds bound = FloatBounds(c);
  const size_t dim = size_t(s.head_dim);
  const ReferenceGradients grads =
      ReferenceKIntervalBackward(s, c.options, kint, DenseInputs(c), c.d_o.Dense());
  // The backward jumps at interior nodes (the chord's slope) and at ties of the extrema (the
  // calibration terms go to another key), besides the roundings: rows may flip, unbounded.
  const bool nearest = kint.rounding == KIntervalRounding::kNearest;
  const bool rounded = jumps || !p.BackwardIsFp32();
  d.Compare("K-interval", grads, dim, bound.backward, rounded ? 5e-2 : 0.0, INFINITY, true,
            nearest ? 50 : rounded ? 5 : 1);
}

// ---- thresholded attention ------------------------------------------------------------------

// docs/design.md §10: thresholded attention's options, as the input picks them.
ThresholdOptions PickThreshold(ByteReader& in) {
  ThresholdOptions t;
  t.views = int(in.Range(1, 2));
  t.power = int(in.Range(1, 3));
  t.beta = double(in.Range(0, 32)) / 8.0;
  t.kappa = double(in.Range(1, 64)) / 8.0;
  t.l2_normalize = in.Pick(4) != 0;
  return t;
}

// docs/design.md §10: the second view's queries and keys and the heads' lambda (read with two
// views only).
struct SecondView {
  FuzzTensor q2, k2;
  std::vector<float> lambda;
  SecondView(ByteReader& in, Case& c) : q2(OutputLike(in, c.q)), k2(OutputLike(in, c.k)) {
    Fill(q2, in, c.values);
    Fill(k2, in, c.values);
    for (int64_t h = 0; h < c.shape.heads; ++h) lambda.push_back(float(in.Range(-8, 24)) / 16.0f);
  }
  SecondView(FuzzTensor q, FuzzTensor k, std::vector<float> l)
      : q2(std::move(q)), k2(std::move(k)), lambda(std::move(l)) {}
};

// A thresholded backward's outputs, each view's dQ and dK, dV, d_lambda and d_beta.
struct ThresholdGradients {
  FuzzTensor dq[2], dk[2], dv;
  GuardedArray<float> d_lambda, d_beta;
  explicit ThresholdGradients(size_t heads) : d_lambda(heads), d_beta(1) {}
  // docs/design.md §10: fresh outputs in the same layouts, for the C API's call.
  ThresholdGradients Poisoned() const {
    ThresholdGradients g(d_lambda.n);
    for (int view = 0; view < 2; ++view) {
      g.dq[view] = PoisonedLike(dq[view]);
      g.dk[view] = PoisonedLike(dk[view]);
    }
    g.dv = PoisonedLike(dv);
    return g;
  }
  // docs/design.md §10: no write outside any of them.
  void CheckUntouchedOutside() const {
    for (int view = 0; view < 2; ++view) {
      dq[view].CheckUntouchedOutside("threshold backward dQ");
      dk[view].CheckUntouchedOutside("threshold backward dK");
    }
    dv.CheckUntouchedOutside("threshold backward dV");
    d_lambda.CheckGuards("threshold backward d_lambda");
    d_beta.CheckGuards("threshold backward d_beta");
  }
  // docs/design.md §10: all of them against another call's, for CheckCApiOutcome.
  std::vector<OutputPair> Pairs(const ThresholdGradients& c) const {
    return {Pair("dQ1", dq[0], c.dq[0]), Pair("dK1", dk[0], c.dk[0]), Pair("dQ2", dq[1], c.dq[1]),
            Pair("dK2", dk[1], c.dk[1]), Pair("dV", dv, c.dv),        Pair("d_lambda", d_lambda, c.d_lambda),
            Pair("d_beta", d_beta, c.d_beta)};
  }
};

// docs/design.md §10: a thresholded forward of the C API, `call(capi, text, o, survivors)`
// (in-call or cached, text FormatThreshold's), on fresh outputs, against the C++ call's O and
// survivors.
template <class Call>
void CheckCApiThresholdForward(const std::string& name, const Case& c, const ThresholdOptions& t,
                               const FuzzTensor& o, const GuardedArray<int32_t>& survivors,
                               bool ran, const Call& call) {
  const CApiOptions capi(c);
  if (!capi.expressible) return;
  const std::string text = COptionsText(t);
  FuzzTensor o_c = PoisonedLike(o);
  GuardedArray<int32_t> survivors_c(survivors.n);
  CheckCApiOutcome(name, call(capi, text.c_str(), COut(o_c), survivors_c.data()), ran,
                   {Pair("O", o, o_c), Pair("survivors", survivors, survivors_c)});
}

// docs/design.md §10: the C API's thresholded backward (lpattn_tda_backward: both views' dQ and
// dK, dV, d_lambda, d_beta) on the same call.
void CheckCApiThresholdBackward(const Case& c, const ThresholdOptions& t, const SecondView& second,
                                const ThresholdGradients& g, bool ran) {
  const CApiOptions capi(c);
  if (!capi.expressible) return;
  const std::string text = COptionsText(t);
  ThresholdGradients g_c = g.Poisoned();
  const lpattn_status status = lpattn_tda_backward(
      &capi.shape, &capi.options, text.c_str(), CView(c.q), CView(c.k), CView(second.q2),
      CView(second.k2), CView(c.v), CView(c.d_o), second.lambda.data(), COut(g_c.dq[0]),
      COut(g_c.dk[0]), COut(g_c.dq[1]), COut(g_c.dk[1]), COut(g_c.dv), g_c.d_lambda.data(),
      g_c.d_beta.data());
  CheckCApiOutcome("threshold backward", status, ran, g.Pairs(g_c));
}

// What the thresholded backward's comparison takes from the forward's.
struct ThresholdCheck {
  ReferenceThresholdInputs dense;
  double s_max = 0.0, tight = 0.0;
  bool jumps = false;
};

// docs/design.md §10: a thresholded forward's O against ReferenceThresholdForward. Scores are
// cosines times the scale with the L2 normalisation; the weights max(s - tau, 0)^p then reach
// |scale|^p per key, summed over the keys.
ThresholdCheck CompareThresholdForward(const std::string& name, const Case& c,
                                       const ThresholdOptions& t, const SecondView& second,
                                       const FuzzTensor& o) {
  const AttentionShape& s = c.shape;
  ThresholdCheck check;
  check.dense.q[0] = c.q.Dense();
  check.dense.k[0] = c.k.Dense();
  check.dense.q[1] = second.q2.Dense();
  check.dense.k[1] = second.k2.Dense();
  check.dense.v = c.v.Dense();
  check.dense.lambda_param.assign(second.lambda.begin(), second.lambda.end());
  const size_t dim = size_t(s.head_dim), rows = size_t(s.batch * s.heads * s.q_len);
  const double scale = ThresholdScale(c.options);
  check.s_max = t.l2_normalize ? std::abs(scale) : ScoreBound(c, scale);
  const double w_max = std::pow(1.0 + check.s_max + t.beta, t.power) * double(s.kv_len);
  const double v_max = 1.0 + MaxAbs(c.v.Dense());
  const double rel = std::ldexp(1.0, -15) * (1.0 + double(s.head_dim) / 16.0);
  const Precision& p = c.options.precision;
  check.jumps = p.p != quant::Format::kFp32 || !p.BackwardIsFp32();
  const ReferenceThresholdForwardResult ref = ReferenceThresholdForward(s, c.options, t, check.dense);
  check.tight = rel * w_max * v_max * (1.0 + check.s_max);
  CompareRows((name + " O").c_str(), o.Dense(), ref.o, dim, check.tight,
              check.jumps ? INFINITY : check.tight, Flips(check.jumps, rows));
  return check;
}

// docs/design.md §10: thresholded (differential) attention (docs/math.md §3), one or two
// views, against ReferenceThresholdForward and ReferenceThresholdBackward.
void FuzzThreshold(ByteReader& in) {
  Case c = MakeCase(in, true);
  AttentionShape& s = c.shape;
  const ThresholdOptions t = PickThreshold(in);
  c.options.precision = PickPrecision(in);
  const bool backward = in.Bool();
  const SecondView second(in, c);
  const FuzzTensor &q2 = second.q2, &k2 = second.k2;
  const std::vector<float>& lambda = second.lambda;

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
  CheckCApiThresholdForward(
      "threshold forward", c, t, o, survivors, ran,
      [&](const CApiOptions& capi, const char* text, lpattn_tensor o_c, int32_t* survivors_c) {
        return lpattn_tda_forward(&capi.shape, &capi.options, text, CView(c.q), CView(c.k),
                                  CView(second.q2), CView(second.k2), CView(c.v),
                                  second.lambda.data(), o_c, survivors_c);
      });
  if (!ran) return;
  ThresholdGradients g(size_t(s.heads));
  FuzzTensor(&dq)[2] = g.dq, (&dk)[2] = g.dk, &dv = g.dv;
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
    b.d_lambda = g.d_lambda.data();
    b.d_beta = g.d_beta.data();
    const bool ran_backward = Ran([&] { ThresholdBackward(s, c.options, t, b); });
    g.CheckUntouchedOutside();
    CheckCApiThresholdBackward(c, t, second, g, ran_backward);
    if (!ran_backward) return;
  }
  if (!InputsFinite(c) || !AllFinite(q2.Dense()) || !AllFinite(k2.Dense())) return;
  const ThresholdCheck check = CompareThresholdForward("threshold", c, t, second, o);
  const size_t dim = size_t(s.head_dim), rows = size_t(s.batch * s.heads * s.q_len);
  const double scale = ThresholdScale(c.options);
  const ReferenceThresholdInputs& dense = check.dense;
  const double s_max = check.s_max, tight = check.tight;
  const bool jumps = check.jumps;
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

// ---- the forwards over a KvCache ---------------------------------------------------------------

// docs/design.md §10: a cache for the case's K and V, contiguous or paged in either layout,
// every format, with spare capacity.
KvCacheConfig PickCacheConfig(ByteReader& in, const AttentionShape& s) {
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
  return config;
}

// Tokens [from, from + n) of batch b of t as a dense [1, heads, n, dim] tensor.
FuzzTensor SliceTokens(const FuzzTensor& t, int64_t b, int64_t from, int64_t n) {
  FuzzTensor x = FuzzTensor::DenseLayout(1, t.heads, n, t.dim);
  for (int64_t h = 0; h < t.heads; ++h)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < t.dim; ++c) x.buffer[x.Offset(0, h, i, c)] = t.buffer[t.Offset(b, h, from + i, c)];
  return x;
}

// docs/design.md §10: a cached call's batch as the input picks it: the slot each sequence reads
// (in order or reversed), each slot's keys (ragged: the first kv_lens[slot] <= kv_len of the
// case's), and each sequence's queries (ragged: its first q_lens[b] <= q_len, packed along the
// tokens of a [1, heads, total, dim] tensor at q_offsets[b], as cu_seqlens).
struct CachedBatch {
  std::vector<int64_t> slots, kv_lens, q_lens, q_offsets;  // q_offsets empty: not ragged
  FuzzTensor packed;  // the ragged queries' layout (and their outputs')
  size_t rows = 0;    // lse's rows: heads x the call's query tokens

  CachedBatch(ByteReader& in, const Case& c) {
    const AttentionShape& s = c.shape;
    const bool reversed = in.Bool(), ragged_kv = in.Bool(), ragged_q = in.Bool();
    for (int64_t b = 0; b < s.batch; ++b) {
      slots.push_back(reversed ? s.batch - 1 - b : b);
      kv_lens.push_back(ragged_kv ? in.Range(1, s.kv_len) : s.kv_len);
      q_lens.push_back(ragged_q ? in.Range(1, s.q_len) : s.q_len);
    }
    if (ragged_q) {
      q_offsets.push_back(0);
      for (int64_t n : q_lens) q_offsets.push_back(q_offsets.back() + n);
      packed = FuzzTensor(in, 1, s.heads, q_offsets.back(), s.head_dim);
    }
    rows = size_t(s.heads * (ragged_q ? q_offsets.back() : s.batch * s.q_len));
  }
  const int64_t* sequences() const { return slots.data(); }
  const int64_t* offsets() const { return q_offsets.empty() ? nullptr : q_offsets.data(); }
  // The call's queries from the case's [batch, heads, q_len, dim] ones q.
  FuzzTensor Queries(const FuzzTensor& q) const {
    if (q_offsets.empty()) return q;
    FuzzTensor x = packed;
    for (size_t b = 0; b < q_lens.size(); ++b)
      for (int64_t h = 0; h < q.heads; ++h)
        for (int64_t i = 0; i < q_lens[b]; ++i)
          for (int64_t d = 0; d < q.dim; ++d)
            x.buffer[x.Offset(0, h, q_offsets[b] + i, d)] = q.buffer[q.Offset(int64_t(b), h, i, d)];
    return x;
  }
  // A poisoned output for the call in the layout the input picks (ragged: the packed one).
  FuzzTensor Output(ByteReader& in, const FuzzTensor& q) const {
    return q_offsets.empty() ? OutputLike(in, q) : PoisonedLike(packed);
  }
  // docs/design.md §10: f(b, case, o_b, lse_b) for each sequence b of the call: b as a case of
  // its own (batch 1, its slot's keys, its queries), its rows of the call's output o and of lse
  // (null: none), for the references.
  template <class F>
  void ForEachSequence(const Case& c, const FuzzTensor& o, const GuardedArray<float>* lse,
                       const F& f) const {
    for (size_t b = 0; b < slots.size(); ++b) {
      Case sc = c;
      sc.shape.batch = 1;
      sc.shape.q_len = q_lens[b];
      sc.shape.kv_len = kv_lens[size_t(slots[b])];
      sc.q = SliceTokens(c.q, int64_t(b), 0, sc.shape.q_len);
      sc.d_o = SliceTokens(c.d_o, int64_t(b), 0, sc.shape.q_len);
      sc.k = SliceTokens(c.k, slots[b], 0, sc.shape.kv_len);
      sc.v = SliceTokens(c.v, slots[b], 0, sc.shape.kv_len);
      const int64_t first = q_offsets.empty() ? int64_t(b) * c.shape.q_len : q_offsets[b];
      const FuzzTensor o_b = q_offsets.empty() ? SliceTokens(o, int64_t(b), 0, sc.shape.q_len)
                                               : SliceTokens(o, 0, first, sc.shape.q_len);
      GuardedArray<float> lse_b(lse ? size_t(c.shape.heads * sc.shape.q_len) : 0);
      if (lse) std::copy_n(lse->data() + c.shape.heads * first, lse_b.n, lse_b.data());
      f(b, sc, o_b, lse_b);
    }
  }
};

// Throws the C API's refusal as the C++ API's (docs/design.md §10), so that Ran reads both
// alike; any other failure is a finding.
void Require(lpattn_status status) {
  if (status == LPATTN_ERROR_INVALID_ARGUMENT) throw std::invalid_argument(lpattn_last_error());
  if (status != LPATTN_OK) Finding(std::string("the C API failed: ") + lpattn_last_error());
}

// docs/design.md §10: how a cache is filled through either API: when paged, each slot's blocks
// in reverse order (so a table is not the identity), then its first kv_lens[slot] tokens of k
// and v appended in two pieces (so appending after existing tokens is exercised).
// set_table(slot, blocks, count) and append(slot, tokens, k, v) throw a refusal.
template <class SetTable, class Append>
void FillSlots(const KvCacheConfig& config, const std::vector<int64_t>& kv_lens,
               const FuzzTensor& k, const FuzzTensor& v, const SetTable& set_table,
               const Append& append) {
  const int64_t per_slot =
      (config.capacity + config.block_size - 1) / std::max<int64_t>(config.block_size, 1);
  for (int64_t b = 0; b < config.sequences; ++b) {
    if (config.block_size > 0) {
      std::vector<int32_t> table;
      for (int64_t i = per_slot - 1; i >= 0; --i) table.push_back(int32_t(b * per_slot + i));
      set_table(b, table.data(), per_slot);
    }
    const auto piece = [&](const FuzzTensor& t, int64_t from) {
      return ConstTensor{t.data() + b * t.strides.batch + from * t.strides.token, t.strides};
    };
    const int64_t first = kv_lens[size_t(b)] / 2;
    if (first > 0) append(b, first, piece(k, 0), piece(v, 0));
    append(b, kv_lens[size_t(b)] - first, piece(k, first), piece(v, first));
  }
}

lpattn_const_tensor CView(const ConstTensor& t) {
  return {t.data, t.strides.batch, t.strides.head, t.strides.token};
}

// docs/design.md §10: the same cache built through the C++ API (KvCache) and through the C API
// (lpattn_kv_cache_create, _set_block_table, _append), which must refuse alike; then every
// slot must hold the tokens appended (lpattn_kv_cache_length, KvCache::Length) and read back
// through both (KvCache::Read, lpattn_kv_cache_read) must give the same bits,
// write nothing outside the views, and give the values appended: exactly in fp32, bf16 and
// fp16, whose values the case's are, and in the 8-bit formats within their rounding (an eighth
// of the value, fp8 e5m2's half step, plus a step of int8's scale amax / 127 of the token's
// row in its head).
struct CachePair {
  std::optional<KvCache> cpp;
  lpattn_kv_cache* c = nullptr;
  bool built = false;

  CachePair(const KvCacheConfig& config, const std::vector<int64_t>& kv_lens, const FuzzTensor& k,
            const FuzzTensor& v) {
    built = Ran([&] {
      cpp.emplace(config);
      FillSlots(config, kv_lens, k, v,
                [&](int64_t b, const int32_t* t, int64_t n) { cpp->SetBlockTable(b, t, n, 0); },
                [&](int64_t b, int64_t n, ConstTensor kp, ConstTensor vp) { cpp->Append(b, n, kp, vp); });
    });
    const bool c_built = Ran([&] {
      lpattn_kv_cache_config cc;
      lpattn_kv_cache_default_config(&cc);
      cc = {config.sequences, config.kv_heads, config.head_dim, config.capacity,
            quant::FormatName(config.k_format), quant::FormatName(config.v_format),
            config.block_size, config.blocks,
            config.layout == PagedLayout::kHeadMajor ? LPATTN_PAGED_HEAD_MAJOR : LPATTN_PAGED_TOKEN_MAJOR,
            config.keys_only};
      Require(lpattn_kv_cache_create(&cc, &c));
      FillSlots(config, kv_lens, k, v,
                [&](int64_t b, const int32_t* t, int64_t n) {
                  Require(lpattn_kv_cache_set_block_table(c, b, t, n, 0));
                },
                [&](int64_t b, int64_t n, ConstTensor kp, ConstTensor vp) {
                  Require(lpattn_kv_cache_append(c, b, n, CView(kp), CView(vp)));
                });
    });
    if (built != c_built) {
      Finding(std::string("the C API ") + (built ? "refused" : "built") + " a cache the C++ API " +
              (built ? "built" : "refused"));
    }
    if (!built) return;
    for (int64_t b = 0; b < config.sequences; ++b) {
      int64_t length = -1;
      Require(lpattn_kv_cache_length(c, b, &length));
      if (length != kv_lens[size_t(b)] || cpp->Length(b) != length) {
        Finding("a slot's length is not the tokens appended (lpattn_kv_cache_length, Length)");
      }
      CheckReadBack(config, b, kv_lens[size_t(b)], k, false);
      if (!config.keys_only) CheckReadBack(config, b, kv_lens[size_t(b)], v, true);
    }
  }
  ~CachePair() { lpattn_kv_cache_free(c); }
  CachePair(const CachePair&) = delete;
  CachePair& operator=(const CachePair&) = delete;

  // docs/design.md §10: slot b's K (or V) read back through both APIs.
  void CheckReadBack(const KvCacheConfig& config, int64_t b, int64_t n, const FuzzTensor& appended,
                     bool values) const {
    FuzzTensor got = FuzzTensor::DenseLayout(1, config.kv_heads, n, config.head_dim);
    FuzzTensor got_c = got;
    const Tensor none{nullptr, got.strides};
    cpp->Read(b, 0, n, values ? none : got.view(), values ? got.view() : none);
    const lpattn_tensor none_c{nullptr, 0, 0, 0};
    Require(lpattn_kv_cache_read(c, b, 0, n, values ? none_c : COut(got_c), values ? COut(got_c) : none_c));
    got.CheckUntouchedOutside("cache read");
    CheckCApiOutcome(values ? "cache read of V" : "cache read of K", LPATTN_OK, true,
                     {Pair("", got, got_c)});
    const bool scaled = quant::FormatIsScaled(values ? config.v_format : config.k_format);
    const FuzzTensor want = SliceTokens(appended, b, 0, n);
    const size_t dim = size_t(config.head_dim);
    for (size_t row = 0; row < size_t(config.kv_heads * n); ++row) {
      const size_t first = size_t(kGuard) + row * dim;
      const std::vector<double> x(want.buffer.begin() + first, want.buffer.begin() + first + dim);
      if (!AllFinite(x)) continue;
      const double step = scaled ? MaxAbs(x) / 127.0 : 0.0;
      for (size_t i = first; i < first + dim; ++i) {
        const double bound = scaled ? 0.125 * std::abs(want.buffer[i]) + step : 0.0;
        if (!(std::abs(double(got.buffer[i]) - want.buffer[i]) <= bound)) {  // NaN included
          Finding(std::string("the cache read back ") + (values ? "V " : "K ") +
                  std::to_string(got.buffer[i]) + " for " + std::to_string(want.buffer[i]));
        }
      }
    }
  }
};

// A tensor's elements as bf16 or fp16 codes (an engine's activations) in the tensor's layout,
// the rest of the buffer poisoned (docs/design.md §10).
struct Codes16 {
  FuzzTensor layout;
  quant::Format format;
  std::vector<uint16_t> buffer;
  static constexpr uint16_t kPoison16 = 0xa5a5;
  // `encode`: t's elements; otherwise all poison (an output).
  Codes16(const FuzzTensor& t, quant::Format f, bool encode)
      : layout(t), format(f), buffer(t.buffer.size(), kPoison16) {
    if (!encode) return;
    const std::vector<bool> inside = t.Inside();
    for (size_t i = 0; i < buffer.size(); ++i) {
      if (inside[i]) buffer[i] = f == quant::Format::kBf16 ? quant::EncodeBf16(t.buffer[i]) : quant::EncodeFp16(t.buffer[i]);
    }
  }
  uint16_t* data() { return buffer.data() + kGuard; }
  const uint16_t* data() const { return buffer.data() + kGuard; }
  const Strides& strides() const { return layout.strides; }
  // The elements decoded to floats, in the layout's tensor.
  FuzzTensor Decoded() const {
    FuzzTensor x = layout;
    const std::vector<bool> inside = layout.Inside();
    for (size_t i = 0; i < buffer.size(); ++i) {
      if (inside[i]) x.buffer[i] = format == quant::Format::kBf16 ? quant::DecodeBf16(buffer[i]) : quant::DecodeFp16(buffer[i]);
    }
    return x;
  }
  void CheckUntouchedOutside(const char* name) const {
    const std::vector<bool> inside = layout.Inside();
    for (size_t i = 0; i < buffer.size(); ++i) {
      if (!inside[i] && buffer[i] != kPoison16) {
        Finding(std::string(name) + ": write outside the output at code " + std::to_string(i));
      }
    }
  }
};

// docs/design.md §10: the exact forward over the cache with float Q and O (ExactForward,
// lpattn_exact_forward_cached), against ReferenceExactForward per sequence.
void FuzzCachedExact(ByteReader& in, const Case& c, const CachedBatch& batch, const CachePair& caches) {
  const FuzzTensor q = batch.Queries(c.q);
  FuzzTensor o = batch.Output(in, c.q);
  GuardedArray<float> lse(batch.rows);
  const bool ran = Ran([&] {
    ExactForward(c.shape, c.options, q.cview(), *caches.cpp, o.view(), lse.data(),
                 batch.sequences(), batch.offsets());
  });
  o.CheckUntouchedOutside("cached forward O");
  lse.CheckGuards("cached forward lse");
  CheckCApiExactForward("cached exact forward", c, o, lse, ran,
                        [&](const CApiOptions& capi, lpattn_tensor o_c, float* lse_c) {
                          return lpattn_exact_forward_cached(&capi.shape, &capi.options, CView(q),
                                                             caches.c, batch.sequences(),
                                                             batch.offsets(), o_c, lse_c);
                        });
  if (!ran || !InputsFinite(c)) return;
  batch.ForEachSequence(c, o, &lse, [](size_t, const Case& sc, const FuzzTensor& o_b, const GuardedArray<float>& lse_b) {
    CompareExactForward("cached", sc, o_b, lse_b, false, 0.0);
  });
}

// docs/design.md §10: the same with Q and O in bf16 or fp16 (ExactForward over ConstTensor16,
// lpattn_exact_forward_cached16): Q's values are exact in either format, O is rounded once at
// the end, so the reference's bound grows by half a step of O's format.
void FuzzCachedExact16(ByteReader& in, const Case& c, const CachedBatch& batch, const CachePair& caches) {
  const quant::Format q_format = in.Bool() ? quant::Format::kFp16 : quant::Format::kBf16;
  const quant::Format o_format = in.Bool() ? quant::Format::kFp16 : quant::Format::kBf16;
  const Codes16 q(batch.Queries(c.q), q_format, true);
  Codes16 o(batch.Output(in, c.q), o_format, false);
  GuardedArray<float> lse(batch.rows);
  const bool ran = Ran([&] {
    ExactForward(c.shape, c.options, ConstTensor16{q.data(), q.strides(), q_format}, *caches.cpp,
                 Tensor16{o.data(), o.strides(), o_format}, lse.data(), batch.sequences(),
                 batch.offsets());
  });
  o.CheckUntouchedOutside("cached16 forward O");
  lse.CheckGuards("cached16 forward lse");
  if (const CApiOptions capi(c); capi.expressible) {
    Codes16 o_c(o.layout, o_format, false);
    GuardedArray<float> lse_c(lse.n);
    const Strides& qs = q.strides();
    const Strides& os = o.strides();
    const lpattn_status status = lpattn_exact_forward_cached16(
        &capi.shape, &capi.options,
        lpattn_const_tensor16{q.data(), qs.batch, qs.head, qs.token, quant::FormatName(q_format)},
        caches.c, batch.sequences(), batch.offsets(),
        lpattn_tensor16{o_c.data(), os.batch, os.head, os.token, quant::FormatName(o_format)},
        lse_c.data());
    CheckCApiOutcome("cached16 exact forward", status, ran, {Pair("O", o, o_c), Pair("lse", lse, lse_c)});
  }
  if (!ran || !InputsFinite(c)) return;
  const double half_step = std::ldexp(1.0, o_format == quant::Format::kBf16 ? -8 : -11);
  batch.ForEachSequence(c, o.Decoded(), &lse,
                        [&](size_t, const Case& sc, const FuzzTensor& o_b, const GuardedArray<float>& lse_b) {
                          CompareExactForward("cached16", sc, o_b, lse_b, false, half_step);
                        });
}

// docs/design.md §10: the K-interval forward over the cache (KIntervalForward,
// lpattn_kint_forward_cached), against ReferenceKIntervalForward per sequence.
void FuzzCachedKInterval(ByteReader& in, const Case& c, const CachedBatch& batch, const CachePair& caches) {
  const KIntervalOptions kint = PickKInterval(in);
  const FuzzTensor q = batch.Queries(c.q);
  FuzzTensor o = batch.Output(in, c.q);
  KIntervalSavedBuffers saved(batch.rows);
  const bool ran = Ran([&] {
    KIntervalForward(c.shape, c.options, kint, q.cview(), *caches.cpp, o.view(), saved.cpp(),
                     batch.sequences(), batch.offsets());
  });
  o.CheckUntouchedOutside("cached K-interval forward O");
  saved.CheckGuards();
  CheckCApiKIntervalForward(
      "cached K-interval forward", c, kint, o, saved, ran,
      [&](const CApiOptions& capi, const char* text, lpattn_tensor o_c, lpattn_kint_saved saved_c) {
        return lpattn_kint_forward_cached(&capi.shape, &capi.options, text, CView(q), caches.c,
                                          batch.sequences(), batch.offsets(), o_c, saved_c);
      });
  if (!ran || !InputsFinite(c)) return;
  batch.ForEachSequence(c, o, nullptr, [&](size_t, const Case& sc, const FuzzTensor& o_b, const GuardedArray<float>&) {
    CompareKIntervalForward("cached K-interval", sc, kint, o_b);
  });
}

// docs/design.md §10: the thresholded forward over the cache, one view or two (the second's
// keys in a keys-only cache built alike), through ThresholdForward and
// lpattn_tda_forward_cached, against ReferenceThresholdForward per sequence.
void FuzzCachedThreshold(ByteReader& in, Case& c, const KvCacheConfig& config,
                         const CachedBatch& batch, const CachePair& caches) {
  const ThresholdOptions t = PickThreshold(in);
  const SecondView second(in, c);
  std::optional<CachePair> second_keys;
  if (t.views == 2) {
    KvCacheConfig keys = config;
    keys.keys_only = true;
    second_keys.emplace(keys, batch.kv_lens, second.k2, second.k2);
    if (!second_keys->built) return;
  }
  const FuzzTensor q1 = batch.Queries(c.q), q2 = batch.Queries(second.q2);
  FuzzTensor o = batch.Output(in, c.q);
  GuardedArray<int32_t> survivors(size_t(t.views) * batch.rows);
  ThresholdCachedArgs args;
  args.q[0] = q1.cview();
  args.q[1] = q2.cview();
  args.second_keys = second_keys ? &*second_keys->cpp : nullptr;
  args.lambda_param = second.lambda.data();
  args.o = o.view();
  args.survivors = survivors.data();
  const bool ran = Ran([&] {
    ThresholdForward(c.shape, c.options, t, *caches.cpp, args, batch.sequences(), batch.offsets());
  });
  o.CheckUntouchedOutside("cached threshold forward O");
  survivors.CheckGuards("cached threshold survivors");
  CheckCApiThresholdForward(
      "cached threshold forward", c, t, o, survivors, ran,
      [&](const CApiOptions& capi, const char* text, lpattn_tensor o_c, int32_t* survivors_c) {
        return lpattn_tda_forward_cached(&capi.shape, &capi.options, text, CView(q1), CView(q2),
                                         caches.c, second_keys ? second_keys->c : nullptr,
                                         batch.sequences(), batch.offsets(),
                                         second.lambda.data(), o_c, survivors_c);
      });
  if (!ran || !InputsFinite(c) || !AllFinite(second.q2.Dense()) || !AllFinite(second.k2.Dense())) {
    return;
  }
  batch.ForEachSequence(c, o, nullptr, [&](size_t b, const Case& sc, const FuzzTensor& o_b,
                                           const GuardedArray<float>&) {
    const SecondView sequence(SliceTokens(second.q2, int64_t(b), 0, sc.shape.q_len),
                              SliceTokens(second.k2, batch.slots[b], 0, sc.shape.kv_len),
                              second.lambda);
    CompareThresholdForward("cached threshold", sc, t, sequence, o_b);
  });
}

// docs/design.md §10: a cache the input picks, built and read back through both APIs, and one
// of the forwards over it, with the precision the cached K and V have.
void FuzzCached(ByteReader& in, Case& c, CachedCall call) {
  const KvCacheConfig config = PickCacheConfig(in, c.shape);
  c.options.precision = CachePrecision(config);
  const CachedBatch batch(in, c);
  if (std::getenv("FUZZ_DEBUG")) {
    const AttentionShape& s = c.shape;
    std::fprintf(stderr, "cached call=%d B%ld H%ld/%ld T%ldx%ld D%ld causal=%d k=%s v=%s block=%ld "
                 "reversed=%d ragged_q=%d sink=%d finite=%d\n",
                 int(call), long(s.batch), long(s.heads), long(s.kv_heads), long(s.q_len),
                 long(s.kv_len), long(s.head_dim), int(c.options.causal),
                 quant::FormatName(config.k_format), quant::FormatName(config.v_format),
                 long(config.block_size), int(batch.slots[0] != 0), int(batch.offsets() != nullptr),
                 int(c.options.sink), int(c.values.finite));
  }
  const CachePair caches(config, batch.kv_lens, c.k, c.v);
  if (!caches.built) return;
  switch (call) {
    case CachedCall::kExact: FuzzCachedExact(in, c, batch, caches); break;
    case CachedCall::kExact16: FuzzCachedExact16(in, c, batch, caches); break;
    case CachedCall::kKInterval: FuzzCachedKInterval(in, c, batch, caches); break;
    case CachedCall::kThreshold: FuzzCachedThreshold(in, c, config, batch, caches); break;
  }
}

// docs/design.md §10: selectors 5-7, a cached forward other than the float exact one; sinks
// only where the call takes them (K-interval and thresholded attention refuse them).
void FuzzCachedCall(ByteReader& in, CachedCall call) {
  Case c = MakeCase(in, true);
  if (call == CachedCall::kExact16) PickSink(in, c);
  FuzzCached(in, c, call);
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
  switch (in.Byte() % 8) {
    case 0: FuzzExact(in); break;
    case 1: FuzzStoredKv(in); break;
    case 2: FuzzKInterval(in); break;
    case 3: FuzzThreshold(in); break;
    case 4: FuzzValueGate(in); break;
    case 5: FuzzCachedCall(in, CachedCall::kExact16); break;
    case 6: FuzzCachedCall(in, CachedCall::kKInterval); break;
    case 7: FuzzCachedCall(in, CachedCall::kThreshold); break;
  }
  return 0;
}
