// Argument validation (kernels/entry/validate.cc) as seen through ExactForward and ExactBackward:
// every invalid input is rejected with std::invalid_argument naming the argument, before any
// output is written.
#include "kernels/entry/validate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/attention.h"

namespace lpattn {
namespace {

// Outputs start as this value; a rejected call must leave every one of them unchanged.
constexpr float kSentinel = -12345.0f;
// Large enough for every shape used below, so a check that failed to reject an argument could
// not write out of bounds either.
constexpr size_t kBufferElements = size_t{1} << 16;

class ValidationTest : public ::testing::Test {
 protected:
  ValidationTest()
      : q_(kBufferElements, 0.25f), k_(kBufferElements, -0.5f), v_(kBufferElements, 0.75f),
        d_o_(kBufferElements, 1.0f), sink_logits_(kBufferElements, 0.0f),
        o_(kBufferElements, kSentinel), lse_(kBufferElements, kSentinel),
        dq_(kBufferElements, kSentinel), dk_(kBufferElements, kSentinel),
        dv_(kBufferElements, kSentinel), d_sink_(kBufferElements, kSentinel) {}

  // Valid [B, H, T, D] arguments for shape_.
  ForwardArgs ValidForward() {
    const Strides q_strides = ContiguousBHTD(shape_.heads, shape_.q_len, shape_.head_dim);
    const Strides kv_strides = ContiguousBHTD(shape_.kv_heads, shape_.kv_len, shape_.head_dim);
    return {.q = {q_.data(), q_strides},
            .k = {k_.data(), kv_strides},
            .v = {v_.data(), kv_strides},
            .o = {o_.data(), q_strides},
            .lse = lse_.data()};
  }
  BackwardArgs ValidBackward() {
    const Strides q_strides = ContiguousBHTD(shape_.heads, shape_.q_len, shape_.head_dim);
    const Strides kv_strides = ContiguousBHTD(shape_.kv_heads, shape_.kv_len, shape_.head_dim);
    return {.q = {q_.data(), q_strides},
            .k = {k_.data(), kv_strides},
            .v = {v_.data(), kv_strides},
            .o = {o_.data(), q_strides},
            .d_o = {d_o_.data(), q_strides},
            .lse = lse_.data(),
            .dq = {dq_.data(), q_strides},
            .dk = {dk_.data(), kv_strides},
            .dv = {dv_.data(), kv_strides},
            .d_sink = d_sink_.data()};
  }
  AttentionOptions LearnedSinkOptions() {
    AttentionOptions options;
    options.sink = SinkMode::kLearned;
    options.sink_logits = sink_logits_.data();
    return options;
  }

  // The backward reads o and lse, so they are inputs there; a forward call writes them. Both
  // stay at the sentinel here because the backward tests never run a forward first.
  void ExpectOutputsUntouched() {
    for (const std::vector<float>* output : {&o_, &lse_, &dq_, &dk_, &dv_, &d_sink_}) {
      for (float value : *output) {
        if (value != kSentinel) {
          ADD_FAILURE() << "an output was written before the arguments were rejected";
          return;
        }
      }
    }
  }

  void ExpectForwardRejected(const AttentionShape& shape, const AttentionOptions& options,
                             const ForwardArgs& args, const std::string& key) {
    ExpectRejected([&] { ExactForward(shape, options, args); }, key);
  }
  void ExpectBackwardRejected(const AttentionShape& shape, const AttentionOptions& options,
                              const BackwardArgs& args, const std::string& key) {
    ExpectRejected([&] { ExactBackward(shape, options, args); }, key);
  }

  AttentionShape shape_{.batch = 2, .heads = 4, .kv_heads = 2, .q_len = 3, .kv_len = 5,
                        .head_dim = 8};
  std::vector<float> q_, k_, v_, d_o_, sink_logits_;
  std::vector<float> o_, lse_, dq_, dk_, dv_, d_sink_;

 private:
  void ExpectRejected(const std::function<void()>& call, const std::string& key) {
    try {
      call();
      ADD_FAILURE() << "accepted; expected std::invalid_argument mentioning \"" << key << "\"";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(key), std::string::npos)
          << "message \"" << error.what() << "\" does not mention \"" << key << "\"";
    }
    ExpectOutputsUntouched();
  }
};

// ---- null pointers -------------------------------------------------------------------------

TEST_F(ValidationTest, ForwardRejectsEachNullPointer) {
  const std::vector<std::pair<std::string, std::function<void(ForwardArgs&)>>> cases = {
      {"q.data", [](ForwardArgs& a) { a.q.data = nullptr; }},
      {"k.data", [](ForwardArgs& a) { a.k.data = nullptr; }},
      {"v.data", [](ForwardArgs& a) { a.v.data = nullptr; }},
      {"o.data", [](ForwardArgs& a) { a.o.data = nullptr; }},
      {"lse", [](ForwardArgs& a) { a.lse = nullptr; }},
  };
  for (const auto& [name, make_null] : cases) {
    SCOPED_TRACE(name);
    ForwardArgs args = ValidForward();
    make_null(args);
    ExpectForwardRejected(shape_, {}, args, name + " is null");
  }
}

TEST_F(ValidationTest, BackwardRejectsEachNullPointer) {
  const std::vector<std::pair<std::string, std::function<void(BackwardArgs&)>>> cases = {
      {"q.data", [](BackwardArgs& a) { a.q.data = nullptr; }},
      {"k.data", [](BackwardArgs& a) { a.k.data = nullptr; }},
      {"v.data", [](BackwardArgs& a) { a.v.data = nullptr; }},
      {"o.data", [](BackwardArgs& a) { a.o.data = nullptr; }},
      {"d_o.data", [](BackwardArgs& a) { a.d_o.data = nullptr; }},
      {"lse", [](BackwardArgs& a) { a.lse = nullptr; }},
      {"dq.data", [](BackwardArgs& a) { a.dq.data = nullptr; }},
      {"dk.data", [](BackwardArgs& a) { a.dk.data = nullptr; }},
      {"dv.data", [](BackwardArgs& a) { a.dv.data = nullptr; }},
  };
  for (const auto& [name, make_null] : cases) {
    SCOPED_TRACE(name);
    BackwardArgs args = ValidBackward();
    make_null(args);
    ExpectBackwardRejected(shape_, {}, args, name + " is null");
  }
}

TEST_F(ValidationTest, LearnedSinkRequiresSinkLogits) {
  AttentionOptions options = LearnedSinkOptions();
  options.sink_logits = nullptr;
  ExpectForwardRejected(shape_, options, ValidForward(), "sink_logits");
  ExpectBackwardRejected(shape_, options, ValidBackward(), "sink_logits");
}

TEST_F(ValidationTest, LearnedSinkBackwardRequiresDSink) {
  BackwardArgs args = ValidBackward();
  args.d_sink = nullptr;
  ExpectBackwardRejected(shape_, LearnedSinkOptions(), args, "d_sink");
}

// Without a learned sink there is nothing to write to d_sink, so null is fine.
TEST_F(ValidationTest, DSinkMayBeNullWithoutLearnedSink) {
  BackwardArgs args = ValidBackward();
  args.d_sink = nullptr;
  for (SinkMode sink : {SinkMode::kNone, SinkMode::kOffByOne}) {
    AttentionOptions options;
    options.sink = sink;
    EXPECT_NO_THROW(ValidateBackward(shape_, options, args));
  }
}

// ---- shapes --------------------------------------------------------------------------------

TEST_F(ValidationTest, RejectsHeadDimOutsideSupportedRange) {
  for (int64_t head_dim : {int64_t{0}, int64_t{-1}, kMaxHeadDim + 1}) {
    SCOPED_TRACE(head_dim);
    AttentionShape shape = shape_;
    shape.head_dim = head_dim;
    ExpectForwardRejected(shape, {}, ValidForward(), "head_dim must be in [1, 256]");
    ExpectBackwardRejected(shape, {}, ValidBackward(), "head_dim must be in [1, 256]");
  }
}

TEST_F(ValidationTest, RejectsHeadsNotMultipleOfKvHeads) {
  AttentionShape shape = shape_;
  shape.kv_heads = 3;
  ExpectForwardRejected(shape, {}, ValidForward(), "multiple of kv_heads");
  ExpectBackwardRejected(shape, {}, ValidBackward(), "multiple of kv_heads");
}

TEST_F(ValidationTest, RejectsNonPositiveSizes) {
  const std::vector<std::pair<std::string, int64_t AttentionShape::*>> sizes = {
      {"batch", &AttentionShape::batch},   {"heads", &AttentionShape::heads},
      {"kv_heads", &AttentionShape::kv_heads}, {"q_len", &AttentionShape::q_len},
      {"kv_len", &AttentionShape::kv_len},
  };
  for (const auto& [name, member] : sizes) {
    for (int64_t bad : {0, -2}) {
      SCOPED_TRACE(name + " = " + std::to_string(bad));
      AttentionShape shape = shape_;
      shape.*member = bad;
      // The "lpattn: " prefix keeps "heads" from matching the kv_heads message.
      const std::string key = "lpattn: " + name + " must be positive";
      ExpectForwardRejected(shape, {}, ValidForward(), key);
      ExpectBackwardRejected(shape, {}, ValidBackward(), key);
    }
  }
}

// ---- strides -------------------------------------------------------------------------------

TEST_F(ValidationTest, RejectsNegativeStrides) {
  ForwardArgs forward = ValidForward();
  forward.q.strides.batch = -1;
  ExpectForwardRejected(shape_, {}, forward, "q.strides.batch must be non-negative");

  BackwardArgs backward = ValidBackward();
  backward.dk.strides.token = -static_cast<int64_t>(shape_.head_dim);
  ExpectBackwardRejected(shape_, {}, backward, "dk.strides.token must be non-negative");
}

// A token stride below head_dim makes consecutive rows share elements (q_len > 1).
TEST_F(ValidationTest, RejectsOverlappingTokenStride) {
  ForwardArgs forward = ValidForward();
  forward.q.strides.token = shape_.head_dim - 1;
  ExpectForwardRejected(shape_, {}, forward, "q has overlapping strides: strides.token");

  forward = ValidForward();
  forward.o.strides.token = 0;  // every row of a head written to the same place
  ExpectForwardRejected(shape_, {}, forward, "o has overlapping strides: strides.token");

  BackwardArgs backward = ValidBackward();
  backward.dv.strides.token = shape_.head_dim / 2;
  ExpectBackwardRejected(shape_, {}, backward, "dv has overlapping strides: strides.token");
}

// Heads that overlap in a [B, T, H, D] layout: head stride below head_dim.
TEST_F(ValidationTest, RejectsOverlappingHeadStride) {
  ForwardArgs forward = ValidForward();
  forward.k.strides = ContiguousBTHD(shape_.kv_heads, shape_.kv_len, shape_.head_dim);
  forward.k.strides.head = shape_.head_dim - 2;
  ExpectForwardRejected(shape_, {}, forward, "k has overlapping strides: strides.head");
}

// The batch stride must clear a whole [H, T, D] block, not just one row.
TEST_F(ValidationTest, RejectsOverlappingBatchStride) {
  BackwardArgs backward = ValidBackward();
  backward.d_o.strides.batch = backward.d_o.strides.head;  // == one head's block
  ExpectBackwardRejected(shape_, {}, backward, "d_o has overlapping strides: strides.batch");
}

// ---- options -------------------------------------------------------------------------------

// The score options: a scale that is not finite or is zero, a softcap that is negative or not
// finite (docs/math.md §1.3), an ALiBi slope that is not finite (§1.4).
TEST_F(ValidationTest, RejectsBadScoreOptions) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> slopes(size_t(shape_.heads), 0.5f);
  slopes.back() = kNaN;
  std::vector<std::pair<AttentionOptions, const char*>> bad;
  for (float scale : {kInf, -kInf, kNaN, 0.0f}) {
    bad.emplace_back(AttentionOptions{}, "scale must be finite and nonzero");
    bad.back().first.scale = scale;
  }
  for (float softcap : {-1.0f, kInf, kNaN}) {
    bad.emplace_back(AttentionOptions{}, "softcap must be finite and >= 0");
    bad.back().first.softcap = softcap;
  }
  bad.emplace_back(AttentionOptions{}, "alibi_slopes[");
  bad.back().first.alibi_slopes = slopes.data();
  bad.emplace_back(AttentionOptions{}, "window must be >= 0");
  bad.back().first.window = -1;
  for (const auto& [options, fragment] : bad) {
    SCOPED_TRACE(fragment);
    ExpectForwardRejected(shape_, options, ValidForward(), fragment);
    ExpectBackwardRejected(shape_, options, ValidBackward(), fragment);
  }
}

TEST_F(ValidationTest, RejectsNegativeThreads) {
  AttentionOptions options;
  options.threads = -1;
  ExpectForwardRejected(shape_, options, ValidForward(), "threads");
  ExpectBackwardRejected(shape_, options, ValidBackward(), "threads");
}

// ---- valid arguments pass ------------------------------------------------------------------

TEST_F(ValidationTest, AcceptsContiguousLayouts) {
  EXPECT_NO_THROW(ValidateForward(shape_, {}, ValidForward()));
  EXPECT_NO_THROW(ValidateBackward(shape_, LearnedSinkOptions(), ValidBackward()));

  // [B, T, H, D]: head stride D, token stride H * D.
  const Strides q_bthd = ContiguousBTHD(shape_.heads, shape_.q_len, shape_.head_dim);
  const Strides kv_bthd = ContiguousBTHD(shape_.kv_heads, shape_.kv_len, shape_.head_dim);
  ForwardArgs forward = ValidForward();
  forward.q.strides = q_bthd;
  forward.k.strides = kv_bthd;
  forward.v.strides = kv_bthd;
  forward.o.strides = q_bthd;
  EXPECT_NO_THROW(ValidateForward(shape_, {}, forward));
}

// Padded rows, and any stride on a dimension of extent 1 (it is never stepped), are fine.
TEST_F(ValidationTest, AcceptsPaddedStridesAndUnitExtentDimensions) {
  AttentionShape shape = shape_;
  shape.batch = 1;
  ForwardArgs forward = ValidForward();
  const int64_t padded_row = shape.head_dim + 3;
  forward.q.strides = {.batch = 0, .head = shape.q_len * padded_row, .token = padded_row};
  forward.o.strides = forward.q.strides;
  EXPECT_NO_THROW(ValidateForward(shape, {}, forward));

  // One query row: the token stride of q, o is never used.
  shape.q_len = 1;
  forward.q.strides.token = 0;
  EXPECT_NO_THROW(ValidateForward(shape, {}, forward));
}

}  // namespace
}  // namespace lpattn
