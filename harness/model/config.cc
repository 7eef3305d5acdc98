// Presets, validation and the strict JSON form of a run configuration (docs/harness.md §1, §3).
#include "harness/model/config.h"

#include "harness/model/dense_product.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "harness/model/attention_arm.h"
#include "harness/model/dense_product.h"
#include "harness/model/interference.h"
#include "kernels/attention.h"

namespace lpattn::harness {
namespace {

using nlohmann::json;

// The float's shortest decimal form as a double, so that config.json reads "lr": 0.001
// rather than 0.0010000000474974513. Falls back to the exact widening in the (theoretical)
// case where the double does not narrow back to the same float: the round trip must be exact.
double FloatForJson(float value, const char* field) {
  if (!std::isfinite(value)) {
    throw std::invalid_argument(std::string("config: ") + field +
                                " is not finite; JSON cannot represent it");
  }
  char buffer[64];
  const auto written = std::to_chars(buffer, buffer + sizeof(buffer), value);
  double shortest = 0.0;
  const auto parsed = std::from_chars(buffer, written.ptr, shortest);
  if (written.ec != std::errc() || parsed.ec != std::errc() ||
      static_cast<float>(shortest) != value) {
    return static_cast<double>(value);
  }
  return shortest;
}

std::string FormatFloat(float value) {
  char buffer[64];
  const auto written = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return written.ec == std::errc() ? std::string(buffer, written.ptr) : std::string("?");
}

// Reads the fields of one JSON object, rejecting unknown keys, missing keys and values of the
// wrong type or range: a typo in config.json must fail loudly, not fall back to a default.
class StrictObject {
 public:
  StrictObject(const json& j, std::string where, std::initializer_list<const char*> known)
      : j_(j), where_(std::move(where)), known_(known) {
    if (!j_.is_object()) {
      throw std::invalid_argument(where_ + ": expected a JSON object, got " +
                                  std::string(j_.type_name()));
    }
    for (const auto& item : j_.items()) {
      bool is_known = false;
      for (const char* name : known_) is_known = is_known || item.key() == name;
      if (!is_known) {
        std::string list;
        for (const char* name : known_) list += (list.empty() ? "" : ", ") + std::string(name);
        throw std::invalid_argument(where_ + ": unknown field '" + item.key() +
                                    "' (known fields: " + list + ")");
      }
    }
  }

  const json& Field(const char* key) const {
    const auto it = j_.find(key);
    if (it == j_.end()) {
      throw std::invalid_argument(where_ + ": missing field '" + key + "'");
    }
    return *it;
  }

  int Int(const char* key) const {
    const json& v = Field(key);
    if (v.is_number_unsigned()) {
      const auto u = v.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int>::max())) return static_cast<int>(u);
    } else if (v.is_number_integer()) {
      const auto i = v.get<int64_t>();
      if (i >= std::numeric_limits<int>::min() && i <= std::numeric_limits<int>::max()) {
        return static_cast<int>(i);
      }
    } else {
      Fail(key, "must be an integer", v);
    }
    Fail(key, "is out of the range of int", v);
  }

  uint64_t Uint64(const char* key) const {
    const json& v = Field(key);
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer()) {
      // A json built in code from a signed value is number_integer even when non-negative.
      const auto i = v.get<int64_t>();
      if (i >= 0) return static_cast<uint64_t>(i);
      Fail(key, "must be a non-negative integer", v);
    }
    Fail(key, "must be an integer", v);
  }

  float Float(const char* key) const {
    const json& v = Field(key);
    if (!v.is_number()) Fail(key, "must be a number", v);
    const double d = v.get<double>();
    // Values up to half a float ulp above FLT_MAX still round to it (to_json may write
    // FLT_MAX as 3.4028235e+38, slightly above it); beyond that the float would be infinite.
    const double limit = static_cast<double>(std::numeric_limits<float>::max()) +
                         std::ldexp(1.0, std::numeric_limits<float>::max_exponent - 1 -
                                             std::numeric_limits<float>::digits);
    if (!(std::fabs(d) < limit)) {
      Fail(key, "is out of the range of float", v);
    }
    return static_cast<float>(d);
  }

  std::string String(const char* key) const {
    const json& v = Field(key);
    if (!v.is_string()) Fail(key, "must be a string", v);
    return v.get<std::string>();
  }

  std::string Where(const char* key) const { return where_ + "." + key; }

 private:
  [[noreturn]] void Fail(const char* key, const char* what, const json& v) const {
    throw std::invalid_argument(where_ + ": field '" + key + "' " + what + ", got " + v.dump());
  }

  const json& j_;
  std::string where_;
  std::vector<const char*> known_;
};

void FromJsonModel(const json& j, const std::string& where, ModelConfig& m) {
  const StrictObject o(j, where, {"n_layer", "n_head", "n_embd", "context", "vocab", "pos"});
  ModelConfig out;
  out.n_layer = o.Int("n_layer");
  out.n_head = o.Int("n_head");
  out.n_embd = o.Int("n_embd");
  out.context = o.Int("context");
  out.vocab = o.Int("vocab");
  if (j.contains("pos")) out.pos = o.String("pos");  // absent: learned
  m = out;
}

[[noreturn]] void Invalid(const std::string& message) { throw std::invalid_argument(message); }

// "<field> (<value>) must be <rule>" for an integer field outside [lo, hi].
void CheckIntRange(const char* field, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    std::ostringstream message;
    message << field << " (" << value << ") must be ";
    if (hi == std::numeric_limits<int>::max()) {
      message << ">= " << lo;
    } else {
      message << "in [" << lo << ", " << hi << "]";
    }
    Invalid(message.str());
  }
}

// Written so that NaN fails every check.
void CheckFloat(const char* field, float value, bool ok, const char* rule) {
  if (!ok || std::isnan(value)) {
    Invalid(std::string(field) + " (" + FormatFloat(value) + ") must be " + rule);
  }
}

constexpr int kMaxInt = std::numeric_limits<int>::max();
// Generous bounds that keep every size product the trainer forms (B * T * C, L * C * C, ...)
// far from overflow.
constexpr int kMaxLayers = 1024;
constexpr int kMaxHeads = 1024;
constexpr int kMaxWidth = 1 << 16;
constexpr int kMaxContext = 1 << 20;
constexpr int kMaxBatch = 1 << 20;
// A private TBB arena of more threads than any machine has only exhausts memory.
constexpr int kMaxThreads = 1 << 16;
constexpr int kByteVocab = 256;

}  // namespace

TrainConfig PresetConfig(const std::string& preset) {
  TrainConfig c;
  c.preset = preset;
  c.lr = 1e-3f;  // nanoGPT's CPU character-level recipe
  c.eval_windows = 64;
  if (preset == "tiny") {
    c.model = {.n_layer = 2, .n_head = 2, .n_embd = 64, .context = 64, .vocab = kByteVocab};
    c.batch = 8;
    c.steps = 300;
    c.warmup_steps = 30;
    c.eval_every = 50;
  } else if (preset == "small") {
    c.model = {.n_layer = 4, .n_head = 4, .n_embd = 128, .context = 64, .vocab = kByteVocab};
    c.batch = 12;
    c.steps = 2000;
    c.warmup_steps = 100;
    c.eval_every = 100;
  } else if (preset == "medium") {
    c.model = {.n_layer = 6, .n_head = 6, .n_embd = 192, .context = 256, .vocab = kByteVocab};
    c.batch = 8;
    c.steps = 2000;
    c.warmup_steps = 100;
    c.eval_every = 100;
  } else if (preset == "large") {
    c.model = {.n_layer = 8, .n_head = 8, .n_embd = 256, .context = 256, .vocab = kByteVocab};
    c.batch = 8;
    c.steps = 2000;
    c.warmup_steps = 100;
    c.eval_every = 100;
  } else {
    throw std::invalid_argument("unknown preset '" + preset +
                                "' (known presets: tiny, small, medium, large)");
  }
  c.checkpoint_every = 2 * c.eval_every;
  return c;
}

void ValidateConfig(const TrainConfig& c) {
  if (c.preset.empty()) Invalid("preset must not be empty");
  try {
    MakeArm(c.arm);
  } catch (const std::invalid_argument& e) {
    Invalid(e.what());
  }

  const ModelConfig& m = c.model;
  CheckIntRange("n_layer", m.n_layer, 1, kMaxLayers);
  CheckIntRange("n_head", m.n_head, 1, kMaxHeads);
  CheckIntRange("n_embd", m.n_embd, 1, kMaxWidth);
  if (m.n_embd % m.n_head != 0) {
    Invalid("n_embd (" + std::to_string(m.n_embd) + ") must be divisible by n_head (" +
            std::to_string(m.n_head) + ")");
  }
  if (m.n_embd / m.n_head > kMaxHeadDim) {
    Invalid("head dimension n_embd / n_head (" + std::to_string(m.n_embd / m.n_head) +
            ") must be at most " + std::to_string(kMaxHeadDim) + " (the kernels' limit)");
  }
  CheckIntRange("context", m.context, 1, kMaxContext);
  if (m.pos != "learned" && m.pos != "rope") {
    Invalid("pos '" + m.pos + "' must be learned or rope");
  }
  if (m.pos == "rope" && (m.n_embd / m.n_head) % 2 != 0) {
    Invalid("pos rope needs an even head dimension, not " + std::to_string(m.n_embd / m.n_head));
  }
  if (m.vocab != kByteVocab) {
    Invalid("vocab (" + std::to_string(m.vocab) + ") must be " + std::to_string(kByteVocab) +
            " (byte-level tokens)");
  }

  CheckIntRange("batch", c.batch, 1, kMaxBatch);
  CheckIntRange("steps", c.steps, 1, kMaxInt);
  // Not bounded by steps: a short smoke run of a preset keeps the preset's warm-up.
  CheckIntRange("warmup_steps", c.warmup_steps, 0, kMaxInt);
  CheckFloat("lr", c.lr, c.lr > 0.0f && c.lr <= 1.0f, "in (0, 1]");
  CheckFloat("min_lr_fraction", c.min_lr_fraction,
             c.min_lr_fraction >= 0.0f && c.min_lr_fraction <= 1.0f, "in [0, 1]");
  CheckFloat("weight_decay", c.weight_decay,
             c.weight_decay >= 0.0f && std::isfinite(c.weight_decay), "finite and >= 0");
  CheckFloat("beta1", c.beta1, c.beta1 >= 0.0f && c.beta1 < 1.0f, "in [0, 1)");
  CheckFloat("beta2", c.beta2, c.beta2 >= 0.0f && c.beta2 < 1.0f, "in [0, 1)");
  CheckFloat("eps", c.eps, c.eps > 0.0f && std::isfinite(c.eps), "finite and > 0");
  CheckFloat("grad_clip", c.grad_clip, c.grad_clip > 0.0f && std::isfinite(c.grad_clip),
             "finite and > 0");
  CheckIntRange("eval_every", c.eval_every, 1, kMaxInt);
  CheckIntRange("eval_windows", c.eval_windows, 1, kMaxInt);
  CheckIntRange("checkpoint_every", c.checkpoint_every, 1, kMaxInt);
  // Checkpoints fall on evaluation steps, where the train-loss average is empty, so that a
  // resumed run's metrics match an uninterrupted run's.
  if (c.checkpoint_every % c.eval_every != 0) {
    throw std::invalid_argument("checkpoint_every (" + std::to_string(c.checkpoint_every) +
                                ") must be a multiple of eval_every (" +
                                std::to_string(c.eval_every) + ")");
  }
  CheckIntRange("threads", c.threads, 0, kMaxThreads);
  ParseDenseFormat(c.precision);  // throws, naming fp32 and bf16
  const Interference interference = ParseInterference(c.interference);  // throws, naming it
  if (interference.kind == Interference::Kind::kSwap && c.batch < 2) {
    Invalid("interference swap needs batch >= 2 (it swaps value rows between windows)");
  }
  if (interference.layer >= m.n_layer) {
    Invalid("interference layer " + std::to_string(interference.layer) + " is not one of the " +
            std::to_string(m.n_layer) + " layers");
  }
}

uint64_t InitSeed(const TrainConfig& config) { return config.init_seed.value_or(config.seed); }
uint64_t DataSeed(const TrainConfig& config) { return config.data_seed.value_or(config.seed); }

void to_json(nlohmann::json& j, const ModelConfig& m) {
  j = nlohmann::json{{"n_layer", m.n_layer},
                     {"n_head", m.n_head},
                     {"n_embd", m.n_embd},
                     {"context", m.context},
                     {"vocab", m.vocab}};
  if (m.pos != "learned") j["pos"] = m.pos;  // older configs have no field: learned
}

void from_json(const nlohmann::json& j, ModelConfig& m) { FromJsonModel(j, "model", m); }

void to_json(nlohmann::json& j, const TrainConfig& c) {
  nlohmann::json model;
  to_json(model, c.model);
  j = nlohmann::json{{"preset", c.preset},
                     {"arm", c.arm},
                     {"model", model},
                     {"seed", c.seed},
                     {"batch", c.batch},
                     {"steps", c.steps},
                     {"lr", FloatForJson(c.lr, "lr")},
                     {"warmup_steps", c.warmup_steps},
                     {"min_lr_fraction", FloatForJson(c.min_lr_fraction, "min_lr_fraction")},
                     {"weight_decay", FloatForJson(c.weight_decay, "weight_decay")},
                     {"beta1", FloatForJson(c.beta1, "beta1")},
                     {"beta2", FloatForJson(c.beta2, "beta2")},
                     {"eps", FloatForJson(c.eps, "eps")},
                     {"grad_clip", FloatForJson(c.grad_clip, "grad_clip")},
                     {"eval_every", c.eval_every},
                     {"eval_windows", c.eval_windows},
                     {"checkpoint_every", c.checkpoint_every},
                     {"data", c.data},
                     {"threads", c.threads}};
  // Written only when not fp32, so that the configs of earlier runs and sweeps (which have no
  // such field) still compare equal to an fp32 config on resume.
  if (c.precision != "fp32") j["precision"] = c.precision;
  if (c.interference != "none") j["interference"] = c.interference;  // likewise
  if (c.init_seed) j["init_seed"] = *c.init_seed;  // likewise: only when set
  if (c.data_seed) j["data_seed"] = *c.data_seed;
}

void from_json(const nlohmann::json& j, TrainConfig& c) {
  const StrictObject o(j, "config",
                       {"preset", "arm", "model", "seed", "batch", "steps", "lr", "warmup_steps",
                        "min_lr_fraction", "weight_decay", "beta1", "beta2", "eps", "grad_clip",
                        "eval_every", "eval_windows", "checkpoint_every", "data", "threads",
                        "precision", "init_seed", "data_seed", "interference"});
  TrainConfig out;
  out.preset = o.String("preset");
  out.arm = o.String("arm");
  FromJsonModel(o.Field("model"), o.Where("model"), out.model);
  out.seed = o.Uint64("seed");
  out.batch = o.Int("batch");
  out.steps = o.Int("steps");
  out.lr = o.Float("lr");
  out.warmup_steps = o.Int("warmup_steps");
  out.min_lr_fraction = o.Float("min_lr_fraction");
  out.weight_decay = o.Float("weight_decay");
  out.beta1 = o.Float("beta1");
  out.beta2 = o.Float("beta2");
  out.eps = o.Float("eps");
  out.grad_clip = o.Float("grad_clip");
  out.eval_every = o.Int("eval_every");
  out.eval_windows = o.Int("eval_windows");
  out.checkpoint_every = o.Int("checkpoint_every");
  out.data = o.String("data");
  out.threads = o.Int("threads");
  if (j.contains("precision")) out.precision = o.String("precision");  // absent: fp32
  if (j.contains("interference")) out.interference = o.String("interference");
  if (j.contains("init_seed")) out.init_seed = o.Uint64("init_seed");  // absent: seed
  if (j.contains("data_seed")) out.data_seed = o.Uint64("data_seed");
  c = std::move(out);
}

}  // namespace lpattn::harness
