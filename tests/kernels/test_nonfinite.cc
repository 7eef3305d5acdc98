// Documented behaviour on non-finite and extreme inputs (docs/math.md §0, §1; README "Non-finite
// input"):
// - a NaN or Inf that makes a score or value non-finite reaches only the rows that attend to
//   it: a NaN in query row i makes output row i NaN and no other; a NaN in key or value row j
//   makes NaN exactly the rows whose visible set contains j (masked keys are never multiplied);
// - scores of +-1e4 give finite outputs (the max is subtracted before exp);
// - a row with no visible key outputs zeros (lse = -inf without a sink) and zero gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "tests/kernels/attention_case.h"

namespace lpattn::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

bool RowIsFinite(const OwnedTensor& t, int64_t b, int64_t h, int64_t i) {
  for (int64_t c = 0; c < t.dim; ++c) {
    if (!std::isfinite(t.at(b, h, i, c))) return false;
  }
  return true;
}
bool RowHasNaN(const OwnedTensor& t, int64_t b, int64_t h, int64_t i) {
  for (int64_t c = 0; c < t.dim; ++c) {
    if (std::isnan(t.at(b, h, i, c))) return true;
  }
  return false;
}

// Self-attention, causal, 150 tokens (three query tiles, three key tiles).
AttentionCase CausalCase() {
  return AttentionCase({1, 2, 1, 150, 150, 16}, true, SinkMode::kNone, Layout::kBHTD);
}

TEST(NonFinite, NaNInQueryRowStaysInThatRow) {
  for (const std::string& target : SupportedTargets()) {
    SCOPED_TRACE(target);
    ScopedTarget pin(target);
    AttentionCase c = CausalCase();
    const int64_t bad = 70;
    c.q.at(0, 1, bad, 5) = kNaN;
    const KernelOutputs out = c.Run();
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t i = 0; i < 150; ++i) {
        const bool poisoned = h == 1 && i == bad;
        EXPECT_EQ(RowHasNaN(out.o, 0, h, i), poisoned) << "O row " << i << " head " << h;
        EXPECT_EQ(RowHasNaN(out.dq, 0, h, i), poisoned) << "dQ row " << i << " head " << h;
      }
    }
  }
}

// A forward that leaves NaN in every score tile of the threads' workspaces (the causal
// diagonal's score product skips the columns above it, whose weights are never read).
void PoisonWorkspaces() {
  AttentionCase poison({1, 2, 1, 300, 300, 16}, false, SinkMode::kNone, Layout::kBHTD);
  for (int64_t i = 0; i < 300; ++i) poison.q.at(0, 0, i, 0) = kNaN;
  poison.Run(false);
}

TEST(NonFinite, NaNInKeyOrValueReachesOnlyRowsThatSeeIt) {
  for (const std::string& target : SupportedTargets()) {
    SCOPED_TRACE(target);
    ScopedTarget pin(target);
    for (bool in_value : {false, true}) {
      PoisonWorkspaces();
      AttentionCase c = CausalCase();
      const int64_t bad = 100;  // a key in the middle of the second key tile
      (in_value ? c.v : c.k).at(0, 0, bad, 3) = kNaN;
      const KernelOutputs out = c.Run(false);
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t i = 0; i < 150; ++i) {
          EXPECT_EQ(RowHasNaN(out.o, 0, h, i), i >= bad)
              << (in_value ? "V" : "K") << " NaN, row " << i;
        }
      }
    }
  }
}

// An infinite value on the causal diagonal: rows before it stay finite (the diagonal's P V
// runs its blocks over all of their keys only when the tile of V is finite, zero weights
// then giving exact zeros), rows from it on are not.
TEST(NonFinite, InfiniteValueOnTheDiagonalReachesOnlyRowsThatSeeIt) {
  for (const std::string& target : SupportedTargets()) {
    SCOPED_TRACE(target);
    ScopedTarget pin(target);
    PoisonWorkspaces();
    AttentionCase c = CausalCase();
    const int64_t bad = 99;  // a row of the first 6-row block of the query tile [96, 150)
    c.v.at(0, 0, bad, 5) = std::numeric_limits<float>::infinity();
    const KernelOutputs out = c.Run(false);
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t i = 0; i < 150; ++i) {
        EXPECT_EQ(RowIsFinite(out.o, 0, h, i), i < bad) << "row " << i;
      }
    }
  }
}

// The same under a sliding window (§1.5), whose forward computes scores only for the rows that
// see a key tile and reads V only from each row's first visible key: a NaN in key or value
// row j reaches rows [j, j + W) alone, after a forward that left NaN in every score tile of
// the threads' workspaces (columns the windowed forward skips are never read); the same for
// dQ, and for the dK and dV of keys outside a NaN query's window.
TEST(NonFinite, NaNInKeyOrValueReachesOnlyRowsWhoseWindowHasIt) {
  for (const std::string& target : SupportedTargets()) {
    SCOPED_TRACE(target);
    ScopedTarget pin(target);
    for (bool in_value : {false, true}) {
      PoisonWorkspaces();
      AttentionCase c({1, 2, 1, 300, 300, 16}, true, SinkMode::kNone, Layout::kBHTD);
      const int64_t window = 40, bad = 130;
      c.options.window = window;
      (in_value ? c.v : c.k).at(0, 0, bad, 3) = kNaN;
      const KernelOutputs out = c.Run();
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t i = 0; i < 300; ++i) {
          EXPECT_EQ(RowHasNaN(out.o, 0, h, i), i >= bad && i < bad + window)
              << (in_value ? "V" : "K") << " NaN, row " << i;
          EXPECT_EQ(RowHasNaN(out.dq, 0, h, i), i >= bad && i < bad + window)
              << (in_value ? "V" : "K") << " NaN, dQ row " << i;
        }
      }
    }
    // And a NaN in query row i reaches the gradients of the keys in its window alone.
    AttentionCase c({1, 2, 1, 300, 300, 16}, true, SinkMode::kNone, Layout::kBHTD);
    const int64_t window = 40, bad = 200;
    c.options.window = window;
    c.q.at(0, 1, bad, 2) = kNaN;
    const KernelOutputs out = c.Run();
    for (int64_t j = 0; j < 300; ++j) {
      const bool seen = j > bad - window && j <= bad;
      EXPECT_EQ(RowHasNaN(out.dk, 0, 0, j), seen) << "Q NaN, dK row " << j;
      EXPECT_EQ(RowHasNaN(out.dv, 0, 0, j), seen) << "Q NaN, dV row " << j;
    }
  }
}

// The same with K and V held as 16-bit codes (the native paths decode them per key tile, with
// F16C or the minifloat decoder, or multiply them on AMX tiles at D = 64), on every target.
TEST(NonFinite, NaNInCodedKeyOrValueReachesOnlyRowsThatSeeIt) {
  for (const std::string& target : SupportedTargets()) {
    SCOPED_TRACE(target);
    ScopedTarget pin(target);
    for (const char* precision : {"qk=fp16,pv=fp16", "qk=bf16,pv=bf16", "qk=bf16,pv=bf16,p=bf16"}) {
      for (const int64_t dim : {16, 64}) {
        for (bool in_value : {false, true}) {
          AttentionCase c({1, 2, 1, 150, 150, dim}, true, SinkMode::kNone, Layout::kBHTD);
          c.options.precision = ParsePrecision(precision);
          const int64_t bad = 100;
          (in_value ? c.v : c.k).at(0, 0, bad, 3) = kNaN;
          const KernelOutputs out = c.Run(false);
          for (int64_t h = 0; h < 2; ++h) {
            for (int64_t i = 0; i < 150; ++i) {
              EXPECT_EQ(RowHasNaN(out.o, 0, h, i), i >= bad)
                  << precision << " D " << dim << (in_value ? " V" : " K") << " NaN, row " << i;
            }
          }
        }
      }
    }
  }
}

TEST(NonFinite, HugeScoresStayFinite) {
  for (const std::string& target : SupportedTargets()) {
    SCOPED_TRACE(target);
    ScopedTarget pin(target);
    for (float sign : {1.0f, -1.0f}) {
      // q . k = +-1e4 exactly for every pair: scores far outside exp's range.
      AttentionCase c({1, 1, 1, 70, 70, 4}, false, SinkMode::kLearned, Layout::kBHTD);
      c.options.scale = 1.0f;
      for (int64_t t = 0; t < 70; ++t) {
        for (int64_t d = 0; d < 4; ++d) {
          c.q.at(0, 0, t, d) = sign * 50.0f;
          c.k.at(0, 0, t, d) = 50.0f;
        }
      }
      const KernelOutputs out = c.Run();
      const ReferenceForwardResult ref = c.ReferenceForward();
      for (int64_t i = 0; i < 70; ++i) {
        EXPECT_TRUE(RowIsFinite(out.o, 0, 0, i)) << i;
        EXPECT_TRUE(RowIsFinite(out.dq, 0, 0, i)) << i;
        EXPECT_TRUE(std::isfinite(out.lse[size_t(i)])) << i;
        EXPECT_NEAR(out.lse[size_t(i)], ref.lse[size_t(i)], 1e-6 * std::abs(ref.lse[size_t(i)]));
      }
      for (int64_t j = 0; j < 70; ++j) {
        EXPECT_TRUE(RowIsFinite(out.dk, 0, 0, j)) << j;
        EXPECT_TRUE(RowIsFinite(out.dv, 0, 0, j)) << j;
      }
      EXPECT_TRUE(std::isfinite(out.d_sink[0]));
    }
  }
}

TEST(NonFinite, RowsWithoutVisibleKeysAreZero) {
  for (const std::string& target : SupportedTargets()) {
    SCOPED_TRACE(target);
    ScopedTarget pin(target);
    // Tq > Tk causal: rows 0 .. 99 see no key.
    AttentionCase c({1, 2, 1, 140, 40, 8}, true, SinkMode::kNone, Layout::kBHTD);
    const KernelOutputs out = c.Run();
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t i = 0; i < 100; ++i) {
        EXPECT_EQ(out.lse[size_t(h * 140 + i)], -std::numeric_limits<float>::infinity());
        for (int64_t d = 0; d < 8; ++d) {
          EXPECT_EQ(out.o.at(0, h, i, d), 0.0f);
          EXPECT_EQ(out.dq.at(0, h, i, d), 0.0f);
        }
      }
      EXPECT_TRUE(RowIsFinite(out.o, 0, h, 100));
    }
  }
}

}  // namespace
}  // namespace lpattn::test
