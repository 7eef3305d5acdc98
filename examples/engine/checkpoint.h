// Reading a checkpoint written by `lpattn train` (its layout: the lpattn repository's
// docs/harness.md §3.3, parameters in the order of §3.6), without the harness: the file is
// checked (magic, version, checksum) and its weights are handed out as named views.
#ifndef LPATTN_ENGINE_CHECKPOINT_H_
#define LPATTN_ENGINE_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include <lpattn/kernels/attention.h>

namespace engine {

struct ModelShape {
  int64_t n_layer = 0, n_head = 0, n_embd = 0, context = 0, vocab = 0;
};

// One block's weights: matrices [out][in] row-major, as the harness trains them.
struct LayerWeights {
  const float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *attproj_w, *attproj_b;
  const float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
  const float* sink = nullptr;  // [n_head] sink logits (the `sink` arms), else null
};

// What the trained arm asks of attention: the softmax arms `exact`, `sink` and `offbyone`,
// and `exact:` or `sink:` with softcap=<c>, alibi=1 and window=<w> (docs/harness.md §1.3).
// A `+<precision>` suffix is not kept: the engine's precision is its cache's format.
struct AttentionArm {
  lpattn::SinkMode sink = lpattn::SinkMode::kNone;
  float softcap = 0.0f;
  bool alibi = false;
  int64_t window = 0;
};
// Throws std::runtime_error for an arm the engine does not serve (the gated, K-interval and
// thresholded arms) or options it cannot read.
AttentionArm ParseArm(const std::string& arm);

struct Checkpoint {
  Checkpoint() = default;
  Checkpoint(const Checkpoint&) = delete;  // the views point into params
  Checkpoint(Checkpoint&&) = default;

  ModelShape model;
  std::string arm_text;  // the arm it was trained with, e.g. "sink" or "exact:window=32"
  AttentionArm arm;
  int64_t step = 0;
  std::vector<float> params;
  // Views into params.
  const float *wte = nullptr, *wpe = nullptr, *lnf_w = nullptr, *lnf_b = nullptr;
  std::vector<LayerWeights> layers;
};

// Throws std::runtime_error naming the file and what is wrong with it: unreadable, not a
// checkpoint, another version, corrupt, or weights that do not fit its model and arm.
Checkpoint LoadCheckpoint(const std::string& path);

}  // namespace engine

#endif  // LPATTN_ENGINE_CHECKPOINT_H_
