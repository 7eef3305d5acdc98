// SplitMix64 with random access (counter_rng.h).
#include "harness/common/counter_rng.h"

namespace lpattn::harness {
namespace {

// SplitMix64's output function (Steele, Lea and Flood 2014; the finaliser of Vigna's
// splitmix64.c).
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;  // SplitMix64's Weyl increment

}  // namespace

uint64_t SplitMix64(uint64_t seed, uint64_t stream, uint64_t index) {
  // A per-(seed, stream) starting state, then element `index` of SplitMix64's sequence from
  // it: state_i = key + (i + 1) * golden, output Mix(state_i). Random access, no state.
  const uint64_t key = Mix(Mix(seed) + (stream + 1) * kGolden);
  return Mix(key + (index + 1) * kGolden);
}

}  // namespace lpattn::harness
