// Checkpoints: everything needed to resume a run bit for bit (docs/harness.md §3). The file
// is written to a temporary name and renamed, carries a format version, and ends with a
// checksum of all preceding bytes, so a truncated or corrupted file is rejected, not loaded.
#ifndef LPATTN_HARNESS_TRAIN_CHECKPOINT_H_
#define LPATTN_HARNESS_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "harness/model/config.h"

namespace lpattn::harness {

inline constexpr uint32_t kCheckpointVersion = 1;

struct CheckpointState {
  TrainConfig config;
  int64_t step = 0;  // optimiser steps completed
  std::vector<float> params, adam_m, adam_v;
};

// Atomic: writes path + ".tmp", flushes, renames over path.
void WriteCheckpoint(const std::string& path, const CheckpointState& state);

// Throws std::runtime_error naming the file and the problem: missing, bad magic, unsupported
// version, truncated, checksum mismatch, or array sizes inconsistent with each other.
CheckpointState ReadCheckpoint(const std::string& path);


}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_TRAIN_CHECKPOINT_H_
