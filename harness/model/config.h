// Run configuration: the model shape (presets of docs/harness.md §1), the optimiser and
// schedule, the data and the attention arm. Serialised as config.json in every run directory.
#ifndef LPATTN_HARNESS_MODEL_CONFIG_H_
#define LPATTN_HARNESS_MODEL_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace lpattn::harness {

struct ModelConfig {
  int n_layer = 2;
  int n_head = 2;
  int n_embd = 64;
  int context = 64;  // T: tokens per training window
  int vocab = 256;   // bytes
  // Positions (docs/harness.md §1.1): "learned" (an embedding wpe [context, C] added to the
  // tokens') or "rope" (rotary embeddings on each head's q and k, no parameters, so the model
  // can be evaluated at a longer context than it was trained at).
  std::string pos = "learned";
};

struct TrainConfig {
  std::string preset = "tiny";
  std::string arm = "exact";  // an arm spec, e.g. "exact", "sink", "kint:K=4,cal=window"
  ModelConfig model;
  // `seed` seeds both the initial weights and the order of the training windows; init_seed
  // and data_seed, when set, replace it for one of the two (docs/harness.md §1.2), so a sweep
  // can vary one source of randomness with the other held fixed.
  uint64_t seed = 1;
  std::optional<uint64_t> init_seed, data_seed;
  int batch = 8;
  int steps = 200;
  float lr = 1e-3f;             // peak learning rate
  int warmup_steps = 20;        // linear warm-up, then cosine decay to min_lr_fraction * lr
  float min_lr_fraction = 0.1f;
  float weight_decay = 0.1f;    // on matrices only
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float grad_clip = 1.0f;       // global gradient-norm clipping
  int eval_every = 50;          // steps between validation evaluations (and the last step)
  int eval_windows = 64;        // fixed validation windows (evenly spaced; no seed)
  int checkpoint_every = 100;   // steps between checkpoints (and the last step)
  std::string data;             // corpus file; empty: the default Brown corpus cache
  // The dense products' operands: "fp32", or "bf16" (mixed precision: bf16 operands, fp32
  // accumulation, master weights and optimizer state; docs/harness.md §1.1).
  std::string precision = "fp32";
  // Interference injected into the training batches' value reads (docs/harness.md §1.5), as
  // ParseInterference reads it; "none" (the default) for clean training.
  std::string interference = "none";
  int threads = 0;              // 0: TBB's default
};

// The seeds in force: init_seed (data_seed) when set, else seed.
uint64_t InitSeed(const TrainConfig& config);
uint64_t DataSeed(const TrainConfig& config);

// Presets `tiny`, `small`, `medium`, `large` (names are part of the interface). Throws
// std::invalid_argument naming the known presets for any other name.
TrainConfig PresetConfig(const std::string& preset);

// Checks every field (positive sizes, n_embd divisible by n_head, rates in range, a known
// arm); throws std::invalid_argument with a message naming the field.
void ValidateConfig(const TrainConfig& config);

void to_json(nlohmann::json& j, const ModelConfig& m);
void from_json(const nlohmann::json& j, ModelConfig& m);
void to_json(nlohmann::json& j, const TrainConfig& c);
void from_json(const nlohmann::json& j, TrainConfig& c);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_MODEL_CONFIG_H_
