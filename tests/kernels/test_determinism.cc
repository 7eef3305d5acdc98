// Run-to-run and thread-count determinism: no atomics, fixed reduction orders, and a work
// split in which each output row has exactly one writer (docs/design.md §5).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/kernels/attention_case.h"

namespace lpattn::test {
namespace {

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void ExpectIdentical(const KernelOutputs& a, const KernelOutputs& b) {
  EXPECT_TRUE(SameBits(a.o.storage, b.o.storage)) << "O";
  EXPECT_TRUE(SameBits(a.lse, b.lse)) << "lse";
  EXPECT_TRUE(SameBits(a.dq.storage, b.dq.storage)) << "dQ";
  EXPECT_TRUE(SameBits(a.dk.storage, b.dk.storage)) << "dK";
  EXPECT_TRUE(SameBits(a.dv.storage, b.dv.storage)) << "dV";
  EXPECT_TRUE(SameBits(a.d_sink, b.d_sink)) << "d_sink";
}

AttentionCase LargeCase() {
  return AttentionCase({2, 4, 2, 300, 300, 40}, true, SinkMode::kLearned, Layout::kBTHD);
}

TEST(Determinism, RepeatedRunsAreBitIdentical) {
  AttentionCase c = LargeCase();
  c.options.threads = 2;
  const KernelOutputs first = c.Run();
  for (int run = 0; run < 3; ++run) ExpectIdentical(first, c.Run());
}

TEST(Determinism, ThreadCountDoesNotChangeResults) {
  AttentionCase c = LargeCase();
  c.options.threads = 1;
  const KernelOutputs one = c.Run();
  for (int threads : {2, 4}) {
    c.options.threads = threads;
    ExpectIdentical(one, c.Run());
  }
  c.options.threads = 0;  // the caller's arena
  ExpectIdentical(one, c.Run());
}

}  // namespace
}  // namespace lpattn::test
