// The C API (kernels/lpattn.h): defaults, a forward and a backward call on cases whose answer
// is known in closed form, and the error paths (status, message, outputs untouched).
//
// Over 500 lines on purpose: it is the one suite of lpattn.h, each entry point beside its
// C++ counterpart and sharing the C-side buffers and checks at its top.
#include "kernels/attention.h"
#include "kernels/kinterval.h"
#include "kernels/kv_cache.h"
#include "kernels/lpattn.h"
#include "kernels/threshold.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr float kSentinel = -12345.0f;

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Dense [B, H, T, D] strides.
lpattn_const_tensor ConstView(const std::vector<float>& data, int64_t heads, int64_t tokens,
                              int64_t dim) {
  return {data.data(), heads * tokens * dim, tokens * dim, dim};
}
lpattn_tensor View(std::vector<float>& data, int64_t heads, int64_t tokens, int64_t dim) {
  return {data.data(), heads * tokens * dim, tokens * dim, dim};
}

// Deterministic, non-trivial values in [-1, 1).
std::vector<float> Filled(size_t n, uint32_t seed) {
  std::vector<float> out(n);
  uint32_t x = seed * 2654435761u + 1u;
  for (float& f : out) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
  }
  return out;
}

// A small problem with dense buffers, valid unless a test breaks it.
struct Problem {
  lpattn_shape shape{};
  lpattn_options options{};
  std::vector<float> q, k, v, o, lse;

  explicit Problem(lpattn_shape s) : shape(s) {
    lpattn_default_options(&options);
    q = Filled(QSize(), 1);
    k = Filled(KSize(), 2);
    v = Filled(KSize(), 3);
    o.assign(QSize(), kSentinel);
    lse.assign(static_cast<size_t>(s.batch * s.heads * s.q_len), kSentinel);
  }
  size_t QSize() const {
    return static_cast<size_t>(shape.batch * shape.heads * shape.q_len * shape.head_dim);
  }
  size_t KSize() const {
    return static_cast<size_t>(shape.batch * shape.kv_heads * shape.kv_len * shape.head_dim);
  }
  lpattn_const_tensor Q() const { return ConstView(q, shape.heads, shape.q_len, shape.head_dim); }
  lpattn_const_tensor K() const {
    return ConstView(k, shape.kv_heads, shape.kv_len, shape.head_dim);
  }
  lpattn_const_tensor V() const {
    return ConstView(v, shape.kv_heads, shape.kv_len, shape.head_dim);
  }
  lpattn_tensor O() { return View(o, shape.heads, shape.q_len, shape.head_dim); }
  lpattn_status Forward() {
    return lpattn_exact_forward(&shape, &options, Q(), K(), V(), O(), lse.data());
  }
  // The backward of the last Forward for this dO, into dq, dk, dv (resized) and d_sink.
  lpattn_status Backward(const std::vector<float>& d_o, std::vector<float>& dq,
                         std::vector<float>& dk, std::vector<float>& dv,
                         float* d_sink = nullptr) {
    dq.resize(QSize());
    dk.resize(KSize());
    dv.resize(KSize());
    const auto& s = shape;
    return lpattn_exact_backward(&s, &options, Q(), K(), V(),
                                 ConstView(o, s.heads, s.q_len, s.head_dim),
                                 ConstView(d_o, s.heads, s.q_len, s.head_dim), lse.data(),
                                 View(dq, s.heads, s.q_len, s.head_dim),
                                 View(dk, s.kv_heads, s.kv_len, s.head_dim),
                                 View(dv, s.kv_heads, s.kv_len, s.head_dim), d_sink);
  }
};

// The C++ forward on a problem's dense buffers with `options`: what its C call must match.
std::vector<float> CxxForward(const Problem& p, const lpattn::AttentionOptions& options) {
  const lpattn_shape& s = p.shape;
  std::vector<float> o(p.o.size()), lse(p.lse.size());
  const lpattn::Strides q_strides = lpattn::ContiguousBHTD(s.heads, s.q_len, s.head_dim);
  const lpattn::Strides kv_strides = lpattn::ContiguousBHTD(s.kv_heads, s.kv_len, s.head_dim);
  lpattn::ExactForward({s.batch, s.heads, s.kv_heads, s.q_len, s.kv_len, s.head_dim}, options,
                       {{p.q.data(), q_strides}, {p.k.data(), kv_strides},
                        {p.v.data(), kv_strides}, {o.data(), q_strides}, lse.data()});
  return o;
}

lpattn_shape MakeShape(int64_t batch, int64_t heads, int64_t kv_heads, int64_t q_len,
                       int64_t kv_len, int64_t head_dim) {
  return {batch, heads, kv_heads, q_len, kv_len, head_dim};
}

bool AllSentinel(const std::vector<float>& buffer) {
  return std::all_of(buffer.begin(), buffer.end(), [](float x) { return x == kSentinel; });
}

// An invalid call: the status, a message naming the problem, and no output written.
void ExpectRejected(Problem& p, lpattn_status status, const std::string& names) {
  EXPECT_EQ(status, LPATTN_ERROR_INVALID_ARGUMENT);
  const std::string message = lpattn_last_error();
  EXPECT_FALSE(message.empty());
  EXPECT_NE(Lower(message).find(Lower(names)), std::string::npos)
      << "message \"" << message << "\" does not mention \"" << names << "\"";
  EXPECT_TRUE(AllSentinel(p.o)) << "O was written by a rejected call";
  EXPECT_TRUE(AllSentinel(p.lse)) << "lse was written by a rejected call";
}

TEST(CApi, DefaultOptions) {
  lpattn_options options;
  options.causal = 7;
  options.scale = 3.0f;
  options.sink = LPATTN_SINK_LEARNED;
  float logit = 0.0f;
  options.sink_logits = &logit;
  options.threads = 5;
  lpattn_default_options(&options);
  EXPECT_EQ(options.causal, 0);
  EXPECT_EQ(options.scale, 0.0f);
  EXPECT_EQ(options.sink, LPATTN_SINK_NONE);
  EXPECT_EQ(options.sink_logits, nullptr);
  EXPECT_EQ(options.threads, 0);
  EXPECT_EQ(options.precision, nullptr);
  EXPECT_EQ(options.softcap, 0.0f);
  EXPECT_EQ(options.alibi_slopes, nullptr);
  EXPECT_EQ(options.window, 0);
  lpattn_default_options(nullptr);  // a no-op, not a crash
}

// docs/math.md §1.3 through the C API: options.softcap reaches the kernel (the C++ call's output
// with the same cap, unlike the uncapped one), and a negative cap is rejected.
TEST(CApi, SoftcapOption) {
  Problem p(MakeShape(1, 2, 1, 20, 20, 16));
  p.options.causal = 1;
  p.options.scale = 3.0f;  // scores of several units against a cap of 1
  ASSERT_EQ(p.Forward(), LPATTN_OK) << lpattn_last_error();
  const std::vector<float> uncapped = p.o;
  p.options.softcap = 1.0f;
  ASSERT_EQ(p.Forward(), LPATTN_OK) << lpattn_last_error();
  EXPECT_NE(p.o, uncapped);
  lpattn::AttentionOptions options;
  options.causal = true;
  options.scale = 3.0f;
  options.softcap = 1.0f;
  EXPECT_EQ(p.o, CxxForward(p, options));
  Problem bad(MakeShape(1, 2, 1, 20, 20, 16));
  bad.options.softcap = -1.0f;
  ExpectRejected(bad, bad.Forward(), "softcap");

  // ALiBi's slopes (docs/math.md §1.4) reach the kernel the same way.
  const std::vector<float> slopes = lpattn::AlibiSlopes(2);
  p.options.alibi_slopes = slopes.data();
  ASSERT_EQ(p.Forward(), LPATTN_OK) << lpattn_last_error();
  options.alibi_slopes = slopes.data();
  EXPECT_EQ(p.o, CxxForward(p, options));
  const std::vector<float> nan_slopes = {0.5f, NAN};
  bad.options.softcap = 0.0f;
  bad.options.alibi_slopes = nan_slopes.data();
  ExpectRejected(bad, bad.Forward(), "alibi_slopes[1]");

  // And the sliding window (§1.5).
  p.options.window = 5;
  ASSERT_EQ(p.Forward(), LPATTN_OK) << lpattn_last_error();
  options.window = 5;
  EXPECT_EQ(p.o, CxxForward(p, options));
  bad.options.alibi_slopes = nullptr;
  bad.options.window = -2;
  ExpectRejected(bad, bad.Forward(), "window");
}

// docs/math.md §4 through the C API: the option text reaches the kernel (the output is the C++ call's with
// the same precision), and bad text is rejected before anything is written.
TEST(CApi, PrecisionOptionText) {
  Problem p(MakeShape(1, 2, 1, 20, 20, 16));
  p.options.causal = 1;
  ASSERT_EQ(p.Forward(), LPATTN_OK) << lpattn_last_error();
  const std::vector<float> fp32 = p.o;
  p.options.precision = "qk=int8,pv=fp8e4m3,gran=token";
  ASSERT_EQ(p.Forward(), LPATTN_OK) << lpattn_last_error();
  EXPECT_NE(p.o, fp32);
  lpattn::AttentionOptions options;
  options.causal = true;
  options.precision = lpattn::ParsePrecision("qk=int8,pv=fp8e4m3,gran=token");
  EXPECT_EQ(p.o, CxxForward(p, options));

  Problem bad(MakeShape(1, 2, 1, 20, 20, 16));
  bad.options.precision = "qk=int4";
  ExpectRejected(bad, bad.Forward(), "int4");
}

TEST(CApi, Version) {
  const std::string version = lpattn_version();
  EXPECT_FALSE(version.empty());
  EXPECT_EQ(std::count(version.begin(), version.end(), '.'), 2) << version;
}

TEST(CApi, LastErrorIsEmptyOnAFreshThread) {
  std::string seen = "not run";
  std::thread([&] { seen = lpattn_last_error(); }).join();
  EXPECT_EQ(seen, "");
}

// One key: the softmax weight is 1, so O = V and lse is the score itself.
TEST(CApi, ForwardWithOneKeyCopiesV) {
  Problem p(MakeShape(2, 4, 2, 3, 1, 8));
  p.options.scale = 0.5f;
  ASSERT_EQ(p.Forward(), LPATTN_OK) << lpattn_last_error();
  const auto& s = p.shape;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t kvh = h / (s.heads / s.kv_heads);
      const float* k = &p.k[static_cast<size_t>((b * s.kv_heads + kvh) * s.head_dim)];
      const float* v = &p.v[static_cast<size_t>((b * s.kv_heads + kvh) * s.head_dim)];
      for (int64_t i = 0; i < s.q_len; ++i) {
        const size_t row = static_cast<size_t>((b * s.heads + h) * s.q_len + i);
        const float* q = &p.q[row * static_cast<size_t>(s.head_dim)];
        double score = 0.0;
        for (int64_t d = 0; d < s.head_dim; ++d) score += double{q[d]} * k[d];
        score *= 0.5;
        EXPECT_NEAR(p.lse[row], score, 1e-5) << "row " << row;
        for (int64_t d = 0; d < s.head_dim; ++d) {
          EXPECT_NEAR(p.o[row * static_cast<size_t>(s.head_dim) + static_cast<size_t>(d)], v[d],
                      1e-6)
              << "row " << row << " d " << d;
        }
      }
    }
  }
}

// Identical keys: equal weights, so O is the mean of V and lse = score + log(kv_len). The
// default scale is 1 / sqrt(head_dim).
TEST(CApi, ForwardWithEqualKeysAveragesV) {
  Problem p(MakeShape(1, 2, 1, 2, 5, 4));
  for (int64_t j = 0; j < p.shape.kv_len; ++j) {
    std::copy(p.k.begin(), p.k.begin() + 4, p.k.begin() + j * 4);
  }
  ASSERT_EQ(p.Forward(), LPATTN_OK) << lpattn_last_error();
  for (int64_t row = 0; row < p.shape.heads * p.shape.q_len; ++row) {
    double score = 0.0;
    for (int64_t d = 0; d < 4; ++d) score += double{p.q[row * 4 + d]} * p.k[d];
    EXPECT_NEAR(p.lse[row], score / 2.0 + std::log(5.0), 1e-5);
    for (int64_t d = 0; d < 4; ++d) {
      double mean = 0.0;
      for (int64_t j = 0; j < 5; ++j) mean += p.v[j * 4 + d] / 5.0;
      EXPECT_NEAR(p.o[row * 4 + d], mean, 1e-6);
    }
  }
}

// Off-by-one softmax with one key: weight e^s / (1 + e^s), lse = log(1 + e^s).
TEST(CApi, ForwardOffByOneSink) {
  Problem p(MakeShape(1, 1, 1, 1, 1, 2));
  p.q = {1.0f, 2.0f};
  p.k = {0.5f, 0.25f};
  p.v = {3.0f, -1.0f};
  p.options.scale = 1.0f;
  p.options.sink = LPATTN_SINK_OFF_BY_ONE;
  ASSERT_EQ(p.Forward(), LPATTN_OK) << lpattn_last_error();
  const double s = 1.0;
  const double w = std::exp(s) / (1.0 + std::exp(s));
  EXPECT_NEAR(p.lse[0], std::log1p(std::exp(s)), 1e-5);
  EXPECT_NEAR(p.o[0], 3.0 * w, 1e-5);
  EXPECT_NEAR(p.o[1], -1.0 * w, 1e-5);
}

// One key: P = 1 whatever the scores, so dS = 0 (dQ = dK = 0) and dV sums dO over the query
// rows (and query heads) that read it.
TEST(CApi, BackwardWithOneKey) {
  Problem p(MakeShape(1, 2, 1, 3, 1, 4));
  ASSERT_EQ(p.Forward(), LPATTN_OK) << lpattn_last_error();
  const std::vector<float> d_o = Filled(p.QSize(), 4);
  std::vector<float> dq(p.QSize(), kSentinel), dk(p.KSize(), kSentinel),
      dv(p.KSize(), kSentinel);
  const auto& s = p.shape;
  ASSERT_EQ(p.Backward(d_o, dq, dk, dv), LPATTN_OK) << lpattn_last_error();
  for (float x : dq) EXPECT_NEAR(x, 0.0f, 1e-5);
  for (float x : dk) EXPECT_NEAR(x, 0.0f, 1e-5);
  for (int64_t d = 0; d < s.head_dim; ++d) {
    double sum = 0.0;
    for (int64_t row = 0; row < s.heads * s.q_len; ++row) sum += d_o[row * s.head_dim + d];
    EXPECT_NEAR(dv[d], sum, 1e-5);
  }
}

// docs/math.md §4.2 through the C API: "bwd=bf16" reaches the backward (the gradients are the
// C++ call's with the same option, and not the fp32 ones).
TEST(CApi, LowPrecisionBackwardOptionText) {
  Problem p(MakeShape(1, 2, 1, 40, 40, 32));
  p.options.causal = 1;
  ASSERT_EQ(p.Forward(), LPATTN_OK) << lpattn_last_error();
  const std::vector<float> d_o = Filled(p.QSize(), 6);
  const auto backward = [&](const char* precision) {
    p.options.precision = precision;
    std::vector<float> dq, dk, dv;
    EXPECT_EQ(p.Backward(d_o, dq, dk, dv), LPATTN_OK) << lpattn_last_error();
    return dq;
  };
  const std::vector<float> fp32 = backward(nullptr), bf16 = backward("bwd=bf16");
  EXPECT_NE(bf16, fp32);
  std::vector<float> dq(p.QSize()), dk(p.KSize()), dv(p.KSize());
  lpattn::AttentionOptions options;
  options.causal = true;
  options.precision = lpattn::ParsePrecision("bwd=bf16");
  const lpattn::Strides q_strides{40 * 32 * 2, 40 * 32, 32}, kv_strides{40 * 32, 40 * 32, 32};
  lpattn::BackwardArgs args;
  args.q = {p.q.data(), q_strides};
  args.k = {p.k.data(), kv_strides};
  args.v = {p.v.data(), kv_strides};
  args.o = {p.o.data(), q_strides};
  args.d_o = {d_o.data(), q_strides};
  args.lse = p.lse.data();
  args.dq = {dq.data(), q_strides};
  args.dk = {dk.data(), kv_strides};
  args.dv = {dv.data(), kv_strides};
  lpattn::ExactBackward({1, 2, 1, 40, 40, 32}, options, args);
  EXPECT_EQ(bf16, dq);
}

TEST(CApi, LearnedSinkBackwardWritesDSink) {
  Problem p(MakeShape(1, 2, 2, 3, 4, 8));
  const std::vector<float> sink_logits = {0.25f, -0.5f};
  p.options.sink = LPATTN_SINK_LEARNED;
  p.options.sink_logits = sink_logits.data();
  ASSERT_EQ(p.Forward(), LPATTN_OK) << lpattn_last_error();
  const std::vector<float> d_o = Filled(p.QSize(), 5);
  std::vector<float> dq, dk, dv;
  std::vector<float> d_sink(2, kSentinel);
  ASSERT_EQ(p.Backward(d_o, dq, dk, dv, d_sink.data()), LPATTN_OK) << lpattn_last_error();
  for (float x : d_sink) {
    EXPECT_NE(x, kSentinel);
    EXPECT_TRUE(std::isfinite(x));
  }
}

TEST(CApi, NullShapeIsRejected) {
  Problem p(MakeShape(1, 1, 1, 2, 2, 4));
  ExpectRejected(p,
                 lpattn_exact_forward(nullptr, &p.options, p.Q(), p.K(), p.V(), p.O(),
                                      p.lse.data()),
                 "shape");
}

TEST(CApi, NullOptionsIsRejected) {
  Problem p(MakeShape(1, 1, 1, 2, 2, 4));
  ExpectRejected(p,
                 lpattn_exact_forward(&p.shape, nullptr, p.Q(), p.K(), p.V(), p.O(),
                                      p.lse.data()),
                 "options");
}

TEST(CApi, NullDataPointerIsRejected) {
  Problem p(MakeShape(1, 1, 1, 2, 2, 4));
  lpattn_const_tensor k = p.K();
  k.data = nullptr;
  ExpectRejected(
      p, lpattn_exact_forward(&p.shape, &p.options, p.Q(), k, p.V(), p.O(), p.lse.data()),
      "k.data");
}

TEST(CApi, HeadDimZeroIsRejected) {
  Problem p(MakeShape(1, 1, 1, 2, 2, 4));
  p.shape.head_dim = 0;
  ExpectRejected(p, p.Forward(), "head_dim");
}

TEST(CApi, HeadDimAboveMaximumIsRejected) {
  Problem p(MakeShape(1, 1, 1, 1, 1, 257));
  ExpectRejected(p, p.Forward(), "head_dim");
}

TEST(CApi, HeadsNotAMultipleOfKvHeadsIsRejected) {
  Problem p(MakeShape(1, 3, 2, 2, 2, 4));
  ExpectRejected(p, p.Forward(), "kv_heads");
}

TEST(CApi, InvalidSinkModeIsRejected) {
  Problem p(MakeShape(1, 1, 1, 2, 2, 4));
  // As a C caller could pass it; memcpy because the value is outside the C++ enum's range.
  const int bad_mode = 7;
  static_assert(sizeof bad_mode == sizeof p.options.sink);
  std::memcpy(&p.options.sink, &bad_mode, sizeof bad_mode);
  ExpectRejected(p, p.Forward(), "sink");
}

TEST(CApi, LearnedSinkWithoutLogitsIsRejected) {
  Problem p(MakeShape(1, 1, 1, 2, 2, 4));
  p.options.sink = LPATTN_SINK_LEARNED;
  ExpectRejected(p, p.Forward(), "sink");
}

// Infinite and NaN scales are rejected, as the C++ API rejects them (issue 20: a NaN used to
// select the default silently).
TEST(CApi, NonFiniteScaleIsRejected) {
  for (float scale : {std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN(),
                      -std::numeric_limits<float>::quiet_NaN()}) {
    Problem p(MakeShape(1, 1, 1, 2, 2, 4));
    p.options.scale = scale;
    ExpectRejected(p, p.Forward(), "scale");
  }
}

// Non-positive scales select 1 / sqrt(head_dim), like an unset C++ scale.
TEST(CApi, NonPositiveScaleMeansDefault) {
  Problem reference(MakeShape(1, 1, 1, 3, 5, 16));
  ASSERT_EQ(reference.Forward(), LPATTN_OK) << lpattn_last_error();
  for (float scale : {-1.0f, 0.0f, -std::numeric_limits<float>::infinity(),
                      1.0f / std::sqrt(16.0f)}) {
    Problem p(MakeShape(1, 1, 1, 3, 5, 16));
    p.options.scale = scale;
    ASSERT_EQ(p.Forward(), LPATTN_OK) << lpattn_last_error();
    EXPECT_EQ(p.o, reference.o) << "scale " << scale;
    EXPECT_EQ(p.lse, reference.lse) << "scale " << scale;
  }
}

TEST(CApi, BackwardNullShapeIsRejected) {
  Problem p(MakeShape(1, 1, 1, 2, 2, 4));
  std::vector<float> dq(p.QSize(), kSentinel), dk(p.KSize(), kSentinel),
      dv(p.KSize(), kSentinel);
  const auto& s = p.shape;
  EXPECT_EQ(lpattn_exact_backward(nullptr, &p.options, p.Q(), p.K(), p.V(), p.Q(), p.Q(),
                                  p.lse.data(), View(dq, s.heads, s.q_len, s.head_dim),
                                  View(dk, s.kv_heads, s.kv_len, s.head_dim),
                                  View(dv, s.kv_heads, s.kv_len, s.head_dim), nullptr),
            LPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lpattn_last_error()).find("shape"), std::string::npos);
  EXPECT_TRUE(AllSentinel(dq));
  EXPECT_TRUE(AllSentinel(dk));
  EXPECT_TRUE(AllSentinel(dv));
}

TEST(CApi, BackwardHeadDimAboveMaximumIsRejected) {
  Problem p(MakeShape(1, 1, 1, 1, 1, 257));
  std::vector<float> dq(p.QSize(), kSentinel), dk(p.KSize(), kSentinel),
      dv(p.KSize(), kSentinel);
  const auto& s = p.shape;
  EXPECT_EQ(lpattn_exact_backward(&s, &p.options, p.Q(), p.K(), p.V(), p.Q(), p.Q(),
                                  p.lse.data(), View(dq, s.heads, s.q_len, s.head_dim),
                                  View(dk, s.kv_heads, s.kv_len, s.head_dim),
                                  View(dv, s.kv_heads, s.kv_len, s.head_dim), nullptr),
            LPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lpattn_last_error()).find("head_dim"), std::string::npos);
  EXPECT_TRUE(AllSentinel(dq));
  EXPECT_TRUE(AllSentinel(dk));
  EXPECT_TRUE(AllSentinel(dv));
}

// The message belongs to the failing call's thread.
// K-interval forward: the same bits as the C++ entry point, and bad option text rejected
// with its message before anything is written.
struct KintSaved {
  explicit KintSaved(size_t rows)
      : m(rows, kSentinel), R(rows, kSentinel), Z(rows, kSentinel), lse(rows, kSentinel),
        argmax(rows, -1), argmin(rows, -1) {}
  lpattn_kint_saved View() {
    return {m.data(), R.data(), Z.data(), lse.data(), argmax.data(), argmin.data()};
  }
  std::vector<float> m, R, Z, lse;
  std::vector<int32_t> argmax, argmin;
};

TEST(CApi, KIntervalForwardMatchesTheCppEntryPoint) {
  Problem p(MakeShape(1, 2, 1, 9, 9, 8));
  p.options.causal = 1;
  KintSaved saved(p.lse.size());
  ASSERT_EQ(lpattn_kint_forward(&p.shape, &p.options, "K=4,cal=window,W=3,round=nearest,ste=prob",
                                p.Q(), p.K(), p.V(), p.O(), saved.View()),
            LPATTN_OK)
      << lpattn_last_error();
  std::vector<float> o(p.o.size());
  KintSaved expected(p.lse.size());
  lpattn::AttentionOptions options;
  options.causal = true;
  const lpattn::AttentionShape shape{1, 2, 1, 9, 9, 8};
  lpattn::KIntervalForwardArgs args{{p.q.data(), lpattn::ContiguousBHTD(2, 9, 8)},
                                    {p.k.data(), lpattn::ContiguousBHTD(1, 9, 8)},
                                    {p.v.data(), lpattn::ContiguousBHTD(1, 9, 8)},
                                    {o.data(), lpattn::ContiguousBHTD(2, 9, 8)},
                                    {expected.m.data(), expected.R.data(), expected.Z.data(),
                                     expected.lse.data(), expected.argmax.data(),
                                     expected.argmin.data()}};
  lpattn::KIntervalForward(shape, options,
                           lpattn::ParseKInterval("K=4,cal=window,W=3,round=nearest,ste=prob"),
                           args);
  EXPECT_EQ(p.o, o);
  EXPECT_EQ(saved.Z, expected.Z);
  EXPECT_EQ(saved.argmax, expected.argmax);
  EXPECT_EQ(saved.R[0], 3.0f);
}

TEST(CApi, KIntervalForwardRejectsBadOptionText) {
  Problem p(MakeShape(1, 1, 1, 3, 3, 4));
  KintSaved saved(p.lse.size());
  ExpectRejected(p, lpattn_kint_forward(&p.shape, &p.options, "K=4,round=nearest,ste=exact",
                                        p.Q(), p.K(), p.V(), p.O(), saved.View()),
                 "nearest");
  ExpectRejected(p, lpattn_kint_forward(&p.shape, &p.options, nullptr, p.Q(), p.K(), p.V(),
                                        p.O(), saved.View()),
                 "kint_options");
  EXPECT_TRUE(std::all_of(saved.Z.begin(), saved.Z.end(), [](float z) { return z == kSentinel; }));
}

// The backward through the C API: the same bits as the C++ entry point.
TEST(CApi, KIntervalBackwardMatchesTheCppEntryPoint) {
  Problem p(MakeShape(1, 2, 1, 9, 9, 8));
  const char* text = "K=4,ste=weight";
  KintSaved saved(p.lse.size());
  ASSERT_EQ(lpattn_kint_forward(&p.shape, &p.options, text, p.Q(), p.K(), p.V(), p.O(),
                                saved.View()),
            LPATTN_OK);
  const std::vector<float> d_o = Filled(p.QSize(), 4);
  std::vector<float> dq(p.QSize()), dk(p.KSize()), dv(p.KSize());
  ASSERT_EQ(lpattn_kint_backward(&p.shape, &p.options, text, p.Q(), p.K(), p.V(),
                                 ConstView(p.o, 2, 9, 8), ConstView(d_o, 2, 9, 8), saved.View(),
                                 View(dq, 2, 9, 8), View(dk, 1, 9, 8), View(dv, 1, 9, 8)),
            LPATTN_OK)
      << lpattn_last_error();
  std::vector<float> dq2(p.QSize()), dk2(p.KSize()), dv2(p.KSize());
  const auto q_strides = lpattn::ContiguousBHTD(2, 9, 8), kv_strides = lpattn::ContiguousBHTD(1, 9, 8);
  lpattn::KIntervalBackwardArgs args{{p.q.data(), q_strides},   {p.k.data(), kv_strides},
                                     {p.v.data(), kv_strides},  {p.o.data(), q_strides},
                                     {d_o.data(), q_strides},
                                     {saved.m.data(), saved.R.data(), saved.Z.data(),
                                      saved.lse.data(), saved.argmax.data(), saved.argmin.data()},
                                     {dq2.data(), q_strides},   {dk2.data(), kv_strides},
                                     {dv2.data(), kv_strides}};
  lpattn::KIntervalBackward({1, 2, 1, 9, 9, 8}, lpattn::AttentionOptions{},
                            lpattn::ParseKInterval(text), args);
  EXPECT_EQ(dq, dq2);
  EXPECT_EQ(dk, dk2);
  EXPECT_EQ(dv, dv2);
  EXPECT_TRUE(std::any_of(dq.begin(), dq.end(), [](float x) { return x != 0.0f; }));
}

// Thresholded attention through the C API: the same bits as the C++ entry points, forward and
// backward, and bad option text rejected before anything is written.
TEST(CApi, ThresholdForwardAndBackwardMatchTheCppEntryPoints) {
  Problem p(MakeShape(1, 2, 1, 9, 9, 8));
  p.options.causal = 1;
  const char* text = "views=2,p=2,beta=0.3";
  const std::vector<float> q2 = Filled(p.QSize(), 7), k2 = Filled(p.KSize(), 8);
  const std::vector<float> lambda = {0.25f, 0.75f};
  std::vector<int32_t> survivors(2 * p.lse.size(), -1);
  ASSERT_EQ(lpattn_tda_forward(&p.shape, &p.options, text, p.Q(), p.K(), ConstView(q2, 2, 9, 8),
                               ConstView(k2, 1, 9, 8), p.V(), lambda.data(), p.O(),
                               survivors.data()),
            LPATTN_OK)
      << lpattn_last_error();
  const auto q_strides = lpattn::ContiguousBHTD(2, 9, 8), kv_strides = lpattn::ContiguousBHTD(1, 9, 8);
  const lpattn::AttentionShape shape{1, 2, 1, 9, 9, 8};
  lpattn::AttentionOptions options;
  options.causal = true;
  std::vector<float> o(p.o.size());
  std::vector<int32_t> expected_survivors(survivors.size());
  lpattn::ThresholdForwardArgs args;
  args.q[0] = {p.q.data(), q_strides};
  args.k[0] = {p.k.data(), kv_strides};
  args.q[1] = {q2.data(), q_strides};
  args.k[1] = {k2.data(), kv_strides};
  args.v = {p.v.data(), kv_strides};
  args.lambda_param = lambda.data();
  args.o = {o.data(), q_strides};
  args.survivors = expected_survivors.data();
  lpattn::ThresholdForward(shape, options, lpattn::ParseThreshold(text), args);
  EXPECT_EQ(p.o, o);
  EXPECT_EQ(survivors, expected_survivors);
  EXPECT_TRUE(std::any_of(o.begin(), o.end(), [](float x) { return x != 0.0f; }));

  const std::vector<float> d_o = Filled(p.QSize(), 4);
  std::vector<float> grads[5] = {std::vector<float>(p.QSize()), std::vector<float>(p.QSize()),
                                 std::vector<float>(p.KSize()), std::vector<float>(p.KSize()),
                                 std::vector<float>(p.KSize())};
  std::vector<float> d_lambda(2, kSentinel);
  float d_beta = kSentinel;
  ASSERT_EQ(lpattn_tda_backward(&p.shape, &p.options, text, p.Q(), p.K(), ConstView(q2, 2, 9, 8),
                                ConstView(k2, 1, 9, 8), p.V(), ConstView(d_o, 2, 9, 8),
                                lambda.data(), View(grads[0], 2, 9, 8), View(grads[2], 1, 9, 8),
                                View(grads[1], 2, 9, 8), View(grads[3], 1, 9, 8),
                                View(grads[4], 1, 9, 8), d_lambda.data(), &d_beta),
            LPATTN_OK)
      << lpattn_last_error();
  std::vector<float> expected[5] = {std::vector<float>(p.QSize()), std::vector<float>(p.QSize()),
                                    std::vector<float>(p.KSize()), std::vector<float>(p.KSize()),
                                    std::vector<float>(p.KSize())};
  std::vector<float> expected_d_lambda(2);
  float expected_d_beta = 0.0f;
  lpattn::ThresholdBackwardArgs back;
  for (int t = 0; t < 2; ++t) {
    back.q[t] = args.q[t];
    back.k[t] = args.k[t];
    back.dq[t] = {expected[t].data(), q_strides};
    back.dk[t] = {expected[2 + t].data(), kv_strides};
  }
  back.v = args.v;
  back.d_o = {d_o.data(), q_strides};
  back.lambda_param = lambda.data();
  back.dv = {expected[4].data(), kv_strides};
  back.d_lambda = expected_d_lambda.data();
  back.d_beta = &expected_d_beta;
  lpattn::ThresholdBackward(shape, options, lpattn::ParseThreshold(text), back);
  for (int g = 0; g < 5; ++g) EXPECT_EQ(grads[g], expected[g]) << g;
  EXPECT_EQ(d_lambda, expected_d_lambda);
  EXPECT_EQ(d_beta, expected_d_beta);
  EXPECT_NE(d_beta, 0.0f);
}

TEST(CApi, ThresholdForwardRejectsBadOptionText) {
  Problem p(MakeShape(1, 1, 1, 3, 3, 4));
  ExpectRejected(p, lpattn_tda_forward(&p.shape, &p.options, "views=3", p.Q(), p.K(), p.Q(),
                                       p.K(), p.V(), nullptr, p.O(), nullptr),
                 "views");
  ExpectRejected(p, lpattn_tda_forward(&p.shape, &p.options, nullptr, p.Q(), p.K(), p.Q(), p.K(),
                                       p.V(), nullptr, p.O(), nullptr),
                 "tda_options");
  // One view needs neither a second view nor lambda.
  EXPECT_EQ(lpattn_tda_forward(&p.shape, &p.options, "views=1", p.Q(), p.K(), {}, {}, p.V(),
                               nullptr, p.O(), nullptr),
            LPATTN_OK)
      << lpattn_last_error();
}

TEST(CApi, LastErrorIsPerThread) {
  Problem p(MakeShape(1, 1, 1, 2, 2, 4));
  p.shape.head_dim = 0;
  ASSERT_EQ(p.Forward(), LPATTN_ERROR_INVALID_ARGUMENT);
  std::string other = "not run";
  std::thread([&] { other = lpattn_last_error(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_NE(std::string(lpattn_last_error()), "");
}

// A one-slot cache config of `format` K and V (the defaults otherwise).
lpattn_kv_cache_config CacheConfig(int64_t kv_heads, int64_t dim, int64_t capacity,
                                   const char* format = nullptr) {
  lpattn_kv_cache_config config;
  lpattn_kv_cache_default_config(&config);
  config.kv_heads = kv_heads;
  config.head_dim = dim;
  config.capacity = capacity;
  config.k_format = format;
  config.v_format = format;
  return config;
}

// The cache through C: appended tokens read back, a decode forward equal to the in-call forward
// of the same formats (per-token scales), and the errors with their statuses.
TEST(CApi, KvCacheAppendsReadsAndServesTheForward) {
  for (const char* format : {"fp32", "bf16", "int8"}) {
    for (const int64_t block_size : {int64_t(0), int64_t(16)}) {
      const int64_t heads = 4, kv_heads = 2, dim = 32, tokens = 40;
      lpattn_kv_cache_config config = CacheConfig(kv_heads, dim, 64, format);
      config.block_size = block_size;
      config.blocks = block_size > 0 ? 4 : 0;
      lpattn_kv_cache* cache = nullptr;
      ASSERT_EQ(lpattn_kv_cache_create(&config, &cache), LPATTN_OK) << lpattn_last_error();
      if (block_size > 0) {
        const int32_t blocks[] = {3, 0, 2, 1};
        ASSERT_EQ(lpattn_kv_cache_set_block_table(cache, 0, blocks, 4, -1), LPATTN_OK)
            << lpattn_last_error();
      }
      const std::vector<float> k = Filled(size_t(kv_heads * tokens * dim), 1);
      const std::vector<float> v = Filled(size_t(kv_heads * tokens * dim), 2);
      const lpattn_const_tensor k_view = ConstView(k, kv_heads, tokens, dim);
      const lpattn_const_tensor v_view = ConstView(v, kv_heads, tokens, dim);
      ASSERT_EQ(lpattn_kv_cache_append(cache, 0, tokens, k_view, v_view), LPATTN_OK)
          << lpattn_last_error();
      int64_t length = -1;
      ASSERT_EQ(lpattn_kv_cache_length(cache, 0, &length), LPATTN_OK);
      EXPECT_EQ(length, tokens);

      // The in-call forward on the cache's values with the same formats.
      Problem p(MakeShape(1, heads, kv_heads, 1, tokens, dim));
      p.k = k;
      p.v = v;
      p.options.causal = 1;
      const std::string precision = std::string("qk=") + format + ",pv=" + format + ",gran=token";
      p.options.precision = precision.c_str();
      ASSERT_EQ(p.Forward(), LPATTN_OK) << lpattn_last_error();
      std::vector<float> o(p.o.size(), kSentinel), lse(p.lse.size(), kSentinel);
      lpattn_options cached = p.options;
      cached.precision = nullptr;  // the cache's formats
      ASSERT_EQ(lpattn_exact_forward_cached(&p.shape, &cached, p.Q(), cache, nullptr, nullptr,
                                            View(o, heads, 1, dim), lse.data()),
                LPATTN_OK)
          << lpattn_last_error();
      for (size_t i = 0; i < o.size(); ++i) EXPECT_NEAR(o[i], p.o[i], 1e-6) << format << " " << i;
      for (size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], p.lse[i], 1e-5) << format;

      // Read back: K as the in-call quantizer has it (its forward matched), V too.
      std::vector<float> k_back(k.size()), v_back(v.size());
      ASSERT_EQ(lpattn_kv_cache_read(cache, 0, 0, tokens, View(k_back, kv_heads, tokens, dim),
                                     View(v_back, kv_heads, tokens, dim)),
                LPATTN_OK);
      if (std::string(format) == "fp32") EXPECT_EQ(k_back, k);
      EXPECT_EQ(lpattn_kv_cache_truncate(cache, 0, 10), LPATTN_OK);
      ASSERT_EQ(lpattn_kv_cache_length(cache, 0, &length), LPATTN_OK);
      EXPECT_EQ(length, 10);
      lpattn_kv_cache_free(cache);
    }
  }
}

// 16-bit Q and O through C: the C++ overload's bits, and a format name it does not know
// rejected.
TEST(CApi, CachedForwardWithSixteenBitActivations) {
  const lpattn_kv_cache_config config = CacheConfig(1, 16, 8);
  lpattn_kv_cache* cache = nullptr;
  ASSERT_EQ(lpattn_kv_cache_create(&config, &cache), LPATTN_OK);
  const std::vector<float> kv = Filled(8 * 16, 4);
  ASSERT_EQ(lpattn_kv_cache_append(cache, 0, 8, ConstView(kv, 1, 8, 16), ConstView(kv, 1, 8, 16)),
            LPATTN_OK);
  std::vector<uint16_t> q(2 * 16), o(2 * 16), want(2 * 16);
  for (size_t i = 0; i < q.size(); ++i) q[i] = uint16_t(0x3f00 + i);  // bf16 values near 0.5
  lpattn_shape shape = MakeShape(1, 2, 1, 1, 8, 16);
  lpattn_options options;
  lpattn_default_options(&options);
  std::vector<float> lse(2);
  const lpattn_const_tensor16 q16 = {q.data(), 32, 16, 16, "bf16"};
  ASSERT_EQ(lpattn_exact_forward_cached16(&shape, &options, q16, cache, nullptr, nullptr,
                                          {o.data(), 32, 16, 16, "fp16"}, lse.data()),
            LPATTN_OK)
      << lpattn_last_error();
  lpattn::KvCacheConfig cxx_config;
  cxx_config.head_dim = 16;
  cxx_config.capacity = 8;
  lpattn::KvCache cxx(cxx_config);
  cxx.Append(0, 8, {kv.data(), {0, 8 * 16, 16}}, {kv.data(), {0, 8 * 16, 16}});
  std::vector<float> lse_cxx(2);
  lpattn::ExactForward({1, 2, 1, 1, 8, 16}, lpattn::AttentionOptions{},
                       lpattn::ConstTensor16{q.data(), {32, 16, 16}, lpattn::quant::Format::kBf16}, cxx,
                       lpattn::Tensor16{want.data(), {32, 16, 16}, lpattn::quant::Format::kFp16},
                       lse_cxx.data());
  EXPECT_EQ(o, want);
  std::vector<uint16_t> untouched(o.size(), 0x1234);
  EXPECT_EQ(lpattn_exact_forward_cached16(&shape, &options, {q.data(), 32, 16, 16, "fp19"}, cache,
                                          nullptr, nullptr, {untouched.data(), 32, 16, 16, "fp16"},
                                          lse.data()),
            LPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lpattn_last_error()).find("fp19"), std::string::npos);
  EXPECT_EQ(untouched, std::vector<uint16_t>(o.size(), 0x1234));
  lpattn_kv_cache_free(cache);
}

TEST(CApi, KvCacheRejectsBadCalls) {
  const lpattn_kv_cache_config config = CacheConfig(1, 8, 4);
  lpattn_kv_cache* cache = nullptr;
  const auto rejected = [](lpattn_status status, const std::string& words) {
    EXPECT_EQ(status, LPATTN_ERROR_INVALID_ARGUMENT) << words;
    EXPECT_NE(std::string(lpattn_last_error()).find(words), std::string::npos)
        << lpattn_last_error();
  };
  lpattn_kv_cache_config bad = config;
  bad.k_format = "fp12";
  rejected(lpattn_kv_cache_create(&bad, &cache), "fp12");
  EXPECT_EQ(cache, nullptr);
  bad = config;
  const int invalid_layout = 7;  // as a C caller may pass it (not a C++ enum value)
  std::memcpy(&bad.layout, &invalid_layout, sizeof invalid_layout);
  bad.block_size = 4;
  bad.blocks = 2;
  rejected(lpattn_kv_cache_create(&bad, &cache), "layout");
  rejected(lpattn_kv_cache_create(nullptr, &cache), "config");
  ASSERT_EQ(lpattn_kv_cache_create(&config, &cache), LPATTN_OK);
  const std::vector<float> rows = Filled(5 * 8, 3);
  const lpattn_const_tensor five = ConstView(rows, 1, 5, 8);
  rejected(lpattn_kv_cache_append(cache, 0, 5, five, five), "fit");  // capacity 4
  rejected(lpattn_kv_cache_append(nullptr, 0, 1, five, five), "cache");
  rejected(lpattn_kv_cache_set_block_table(cache, 0, nullptr, 0, -1), "paged");
  int64_t length = -1;
  rejected(lpattn_kv_cache_length(cache, 3, &length), "sequence");
  EXPECT_EQ(length, -1);
  Problem p(MakeShape(1, 1, 1, 1, 1, 8));
  rejected(lpattn_exact_forward_cached(&p.shape, &p.options, p.Q(), cache, nullptr, nullptr,
                                       p.O(), p.lse.data()),
           "no tokens");
  lpattn_kv_cache_free(cache);
  lpattn_kv_cache_free(nullptr);  // a no-op
}

}  // namespace
