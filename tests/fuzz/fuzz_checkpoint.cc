// Fuzzing of the checkpoint reader (docs/design.md §10): any file is refused with
// std::runtime_error, or read into a state whose arrays agree, whose step is >= 0 and whose
// config validates, which writes back to a file that reads back bit for bit. A model is built
// from it when its parameter count matches (as LoadModel checks) and it is small. Anything else is
// a finding. Half the inputs get a correct checksum appended, so the fuzzer reaches the
// parsing behind it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/model/model.h"
#include "harness/train/checkpoint.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

[[noreturn]] void Finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_checkpoint finding: %s\n", what.c_str());
  std::abort();
}

// The checkpoint's checksum (harness/train/checkpoint.cc): FNV-1a 64 of the bytes before it.
uint64_t Checksum(const std::vector<uint8_t>& bytes) {
  uint64_t hash = 14695981039346656037ull;
  for (uint8_t b : bytes) hash = (hash ^ b) * 1099511628211ull;
  return hash;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

// docs/design.md §10: byte 0 says whether to append the checksum; the rest is the file.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lpattn::harness;
  if (size == 0) return 0;
  std::vector<uint8_t> file(data + 1, data + size);
  if (data[0] & 1) {
    const uint64_t sum = Checksum(file);
    for (int i = 0; i < 8; ++i) file.push_back(uint8_t(sum >> (8 * i)));
  }
  const lpattn::fuzz::ScratchFile scratch("checkpoint", file.data(), file.size());
  CheckpointState state;
  try {
    state = ReadCheckpoint(scratch.path());
  } catch (const std::runtime_error&) {
    return 0;  // refused, naming the problem
  }
  if (state.step < 0 || state.adam_m.size() != state.params.size() ||
      state.adam_v.size() != state.params.size()) {
    Finding("an inconsistent state was read");
  }
  try {
    ValidateConfig(state.config);
  } catch (const std::invalid_argument& e) {
    Finding(std::string("a checkpoint's config does not validate: ") + e.what());
  }
  const std::string copy = scratch.path() + ".copy";
  WriteCheckpoint(copy, state);
  const CheckpointState back = ReadCheckpoint(copy);
  std::remove(copy.c_str());
  nlohmann::json a, b;
  to_json(a, state.config);
  to_json(b, back.config);
  if (back.step != state.step || a != b || !SameBits(back.params, state.params) ||
      !SameBits(back.adam_m, state.adam_m) || !SameBits(back.adam_v, state.adam_v)) {
    Finding("a checkpoint does not round-trip");
  }
  size_t count = 0;
  try {
    count = Gpt::ParamCount(state.config.model, state.config.arm);
  } catch (const std::invalid_argument&) {
    return 0;  // too large to count: LoadModel refuses it
  }
  // Built only when small: the activations grow with the context, which rotary positions leave
  // out of the parameter count.
  if (count == state.params.size() && count < (size_t(1) << 20) &&
      state.config.model.context <= 256) {
    Gpt model(state.config.model, state.config.arm, 1);
    if (model.params().size() != count) Finding("ParamCount differs from the model's arena");
  }
  return 0;
}
