// Run configuration (harness/model/config.cc): the presets of docs/harness.md §1, validation that
// names the offending field, and a strict JSON form that round-trips every field exactly.
#include "harness/model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/model/attention_arm.h"

namespace lpattn::harness {
namespace {

using nlohmann::json;

// Every field compared, bit for bit for floats.
void ExpectSameConfig(const TrainConfig& a, const TrainConfig& b) {
  const auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
  };
  EXPECT_EQ(a.preset, b.preset);
  EXPECT_EQ(a.arm, b.arm);
  EXPECT_EQ(a.model.n_layer, b.model.n_layer);
  EXPECT_EQ(a.model.n_head, b.model.n_head);
  EXPECT_EQ(a.model.n_embd, b.model.n_embd);
  EXPECT_EQ(a.model.context, b.model.context);
  EXPECT_EQ(a.model.vocab, b.model.vocab);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.init_seed, b.init_seed);
  EXPECT_EQ(a.data_seed, b.data_seed);
  EXPECT_EQ(a.batch, b.batch);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(bits(a.lr), bits(b.lr));
  EXPECT_EQ(a.warmup_steps, b.warmup_steps);
  EXPECT_EQ(bits(a.min_lr_fraction), bits(b.min_lr_fraction));
  EXPECT_EQ(bits(a.weight_decay), bits(b.weight_decay));
  EXPECT_EQ(bits(a.beta1), bits(b.beta1));
  EXPECT_EQ(bits(a.beta2), bits(b.beta2));
  EXPECT_EQ(bits(a.eps), bits(b.eps));
  EXPECT_EQ(bits(a.grad_clip), bits(b.grad_clip));
  EXPECT_EQ(a.eval_every, b.eval_every);
  EXPECT_EQ(a.eval_windows, b.eval_windows);
  EXPECT_EQ(a.precision, b.precision);
  EXPECT_EQ(a.checkpoint_every, b.checkpoint_every);
  EXPECT_EQ(a.data, b.data);
  EXPECT_EQ(a.threads, b.threads);
}

// A config in which every field differs from its default, so a field that to_json or
// from_json forgot could not pass the round trip by falling back to the default.
TrainConfig NonDefaultConfig() {
  TrainConfig c;
  c.preset = "small";
  c.arm = "kint:K=4,cal=window";
  c.model = {.n_layer = 3, .n_head = 5, .n_embd = 80, .context = 33, .vocab = 257};
  c.seed = std::numeric_limits<uint64_t>::max() - 7;  // beyond int64 and double precision
  c.batch = 11;
  c.steps = 1234;
  c.lr = 3.3e-4f;
  c.warmup_steps = 17;
  c.min_lr_fraction = 0.05f;
  c.weight_decay = 0.01f;
  c.beta1 = 0.8f;
  c.beta2 = 0.99f;
  c.eps = 1e-6f;
  c.grad_clip = 0.5f;
  c.eval_every = 7;
  c.eval_windows = 9;
  c.checkpoint_every = 21;
  c.data = "/data/corpus \"quoted\" \xc3\xa9.txt";
  c.threads = 2;
  c.precision = "bf16";
  c.init_seed = 0;  // set, and 0: not the same as absent
  c.data_seed = std::numeric_limits<uint64_t>::max();
  return c;
}

TrainConfig FromJsonText(const std::string& text) {
  TrainConfig c;
  from_json(json::parse(text), c);
  return c;
}

// The message of the std::invalid_argument `f` throws; fails the test if it throws nothing.
std::string InvalidArgumentMessage(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected std::invalid_argument";
  return "";
}

// ---- presets -----------------------------------------------------------------------------

TEST(ConfigPresets, TinyMatchesSpec) {
  const TrainConfig c = PresetConfig("tiny");
  EXPECT_EQ(c.preset, "tiny");
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.model.n_head, 2);
  EXPECT_EQ(c.model.n_embd, 64);
  EXPECT_EQ(c.model.context, 64);
  EXPECT_EQ(c.model.vocab, 256);
  EXPECT_EQ(c.batch, 8);
  EXPECT_EQ(c.steps, 300);
  EXPECT_EQ(c.warmup_steps, 30);
  EXPECT_EQ(c.eval_every, 50);
  EXPECT_EQ(c.checkpoint_every, 100);
  EXPECT_EQ(c.eval_windows, 64);
  EXPECT_FLOAT_EQ(c.lr, 1e-3f);
}

TEST(ConfigPresets, SmallMatchesSpec) {
  const TrainConfig c = PresetConfig("small");
  EXPECT_EQ(c.preset, "small");
  EXPECT_EQ(c.model.n_layer, 4);
  EXPECT_EQ(c.model.n_head, 4);
  EXPECT_EQ(c.model.n_embd, 128);
  EXPECT_EQ(c.model.context, 64);
  EXPECT_EQ(c.batch, 12);
  EXPECT_EQ(c.steps, 2000);
  EXPECT_EQ(c.warmup_steps, 100);
  EXPECT_EQ(c.eval_every, 100);
  EXPECT_EQ(c.checkpoint_every, 200);
  EXPECT_EQ(c.eval_windows, 64);
}

TEST(ConfigPresets, MediumMatchesSpec) {
  const TrainConfig c = PresetConfig("medium");
  EXPECT_EQ(c.preset, "medium");
  EXPECT_EQ(c.model.n_layer, 6);
  EXPECT_EQ(c.model.n_head, 6);
  EXPECT_EQ(c.model.n_embd, 192);
  EXPECT_EQ(c.model.context, 256);
  EXPECT_EQ(c.batch, 8);
  EXPECT_EQ(c.steps, 2000);
  EXPECT_EQ(c.warmup_steps, 100);
  EXPECT_EQ(c.eval_every, 100);
  EXPECT_EQ(c.checkpoint_every, 200);
}

TEST(ConfigPresets, SharedRecipe) {
  for (const char* name : {"tiny", "small", "medium"}) {
    SCOPED_TRACE(name);
    const TrainConfig c = PresetConfig(name);
    EXPECT_EQ(c.arm, "exact");
    EXPECT_EQ(c.model.vocab, 256);
    EXPECT_FLOAT_EQ(c.lr, 1e-3f);
    EXPECT_FLOAT_EQ(c.min_lr_fraction, 0.1f);
    EXPECT_FLOAT_EQ(c.weight_decay, 0.1f);
    EXPECT_FLOAT_EQ(c.beta1, 0.9f);
    EXPECT_FLOAT_EQ(c.beta2, 0.95f);
    EXPECT_FLOAT_EQ(c.eps, 1e-8f);
    EXPECT_FLOAT_EQ(c.grad_clip, 1.0f);
    EXPECT_EQ(c.checkpoint_every, 2 * c.eval_every);
    EXPECT_NO_THROW(ValidateConfig(c));
  }
}

TEST(ConfigPresets, UnknownPresetListsTheKnownOnes) {
  const std::string message = InvalidArgumentMessage([] { PresetConfig("huge"); });
  EXPECT_NE(message.find("huge"), std::string::npos) << message;
  for (const char* name : {"tiny", "small", "medium", "large"}) {
    EXPECT_NE(message.find(name), std::string::npos) << message;
  }
  EXPECT_THROW(PresetConfig(""), std::invalid_argument);
  EXPECT_THROW(PresetConfig("Tiny"), std::invalid_argument);
}

// ---- validation --------------------------------------------------------------------------

TEST(ConfigValidate, DefaultsAreValid) { EXPECT_NO_THROW(ValidateConfig(TrainConfig{})); }

TEST(ConfigValidate, EdgeValuesAreValid) {
  TrainConfig c = PresetConfig("tiny");
  c.lr = 1.0f;
  c.warmup_steps = 0;
  c.steps = 1;
  c.min_lr_fraction = 0.0f;
  c.weight_decay = 0.0f;
  c.beta1 = 0.0f;
  c.threads = 0;
  c.model.n_head = 1;
  c.model.n_embd = 256;  // head dimension 256: the kernels' limit
  c.model.context = 1;
  c.batch = 1;
  c.eval_every = 1;
  c.eval_windows = 1;
  c.checkpoint_every = 1;
  EXPECT_NO_THROW(ValidateConfig(c));
  c.warmup_steps = 1000;  // longer than the run: a short smoke run of a preset stays valid
  EXPECT_NO_THROW(ValidateConfig(c));
}

struct BadField {
  const char* name;       // for the trace
  const char* expected;   // substring the message must contain
  std::function<void(TrainConfig&)> mutate;
};

TEST(ConfigValidate, EveryBadFieldIsNamed) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<BadField> cases = {
      {"preset", "preset", [](TrainConfig& c) { c.preset = ""; }},
      {"arm", "arm 'softmaxx'", [](TrainConfig& c) { c.arm = "softmaxx"; }},
      {"arm empty", "arm", [](TrainConfig& c) { c.arm = ""; }},
      {"n_layer", "n_layer (0)", [](TrainConfig& c) { c.model.n_layer = 0; }},
      {"n_head", "n_head (0)", [](TrainConfig& c) { c.model.n_head = 0; }},
      {"n_head negative", "n_head (-2)", [](TrainConfig& c) { c.model.n_head = -2; }},
      {"n_embd", "n_embd (0)", [](TrainConfig& c) { c.model.n_embd = 0; }},
      {"divisible", "n_embd (100) must be divisible by n_head (3)",
       [](TrainConfig& c) {
         c.model.n_embd = 100;
         c.model.n_head = 3;
       }},
      {"head dim", "n_embd / n_head (512)",
       [](TrainConfig& c) {
         c.model.n_embd = 512;
         c.model.n_head = 1;
       }},
      {"context", "context (0)", [](TrainConfig& c) { c.model.context = 0; }},
      {"vocab", "vocab (255)", [](TrainConfig& c) { c.model.vocab = 255; }},
      {"pos", "pos 'alibi' must be learned or rope", [](TrainConfig& c) { c.model.pos = "alibi"; }},
      {"pos rope odd head", "pos rope needs an even head dimension, not 5",
       [](TrainConfig& c) {
         c.model.pos = "rope";
         c.model.n_embd = 10;
         c.model.n_head = 2;
       }},
      {"batch", "batch (0)", [](TrainConfig& c) { c.batch = 0; }},
      {"steps", "steps (0)", [](TrainConfig& c) { c.steps = 0; }},
      {"warmup_steps", "warmup_steps (-1)", [](TrainConfig& c) { c.warmup_steps = -1; }},
      {"lr zero", "lr (0) must be in (0, 1]", [](TrainConfig& c) { c.lr = 0.0f; }},
      {"lr big", "lr (1.5) must be in (0, 1]", [](TrainConfig& c) { c.lr = 1.5f; }},
      {"lr nan", "lr (nan)", [nan](TrainConfig& c) { c.lr = nan; }},
      {"min_lr_fraction", "min_lr_fraction", [](TrainConfig& c) { c.min_lr_fraction = 1.1f; }},
      {"min_lr_fraction nan", "min_lr_fraction",
       [nan](TrainConfig& c) { c.min_lr_fraction = nan; }},
      {"weight_decay", "weight_decay", [](TrainConfig& c) { c.weight_decay = -0.1f; }},
      {"weight_decay inf", "weight_decay", [inf](TrainConfig& c) { c.weight_decay = inf; }},
      {"beta1", "beta1 (1)", [](TrainConfig& c) { c.beta1 = 1.0f; }},
      {"beta1 negative", "beta1", [](TrainConfig& c) { c.beta1 = -0.5f; }},
      {"beta2", "beta2 (1)", [](TrainConfig& c) { c.beta2 = 1.0f; }},
      {"beta2 nan", "beta2", [nan](TrainConfig& c) { c.beta2 = nan; }},
      {"eps", "eps (0)", [](TrainConfig& c) { c.eps = 0.0f; }},
      {"eps inf", "eps", [inf](TrainConfig& c) { c.eps = inf; }},
      {"grad_clip", "grad_clip (0)", [](TrainConfig& c) { c.grad_clip = 0.0f; }},
      {"grad_clip nan", "grad_clip", [nan](TrainConfig& c) { c.grad_clip = nan; }},
      {"eval_every", "eval_every (0)", [](TrainConfig& c) { c.eval_every = 0; }},
      {"eval_windows", "eval_windows (0)", [](TrainConfig& c) { c.eval_windows = 0; }},
      {"checkpoint_every", "checkpoint_every (0)", [](TrainConfig& c) { c.checkpoint_every = 0; }},
      {"threads", "threads (-1)", [](TrainConfig& c) { c.threads = -1; }},
  };
  for (const BadField& bad : cases) {
    SCOPED_TRACE(bad.name);
    TrainConfig c = PresetConfig("tiny");
    bad.mutate(c);
    const std::string message = InvalidArgumentMessage([&] { ValidateConfig(c); });
    EXPECT_NE(message.find(bad.expected), std::string::npos)
        << "message: " << message << "\nexpected to contain: " << bad.expected;
  }
}

TEST(ConfigValidate, KnownArmsAreAccepted) {
  ASSERT_FALSE(KnownArms().empty());
  for (const std::string& arm : KnownArms()) {
    TrainConfig c = PresetConfig("tiny");
    c.arm = arm;
    EXPECT_NO_THROW(ValidateConfig(c)) << arm;
  }
}

// ---- JSON --------------------------------------------------------------------------------

TEST(ConfigJson, RoundTripsEveryField) {
  const TrainConfig original = NonDefaultConfig();
  json j;
  to_json(j, original);
  TrainConfig back;
  from_json(j, back);
  ExpectSameConfig(original, back);
  // Through text too, as config.json and the checkpoint store it.
  ExpectSameConfig(original, FromJsonText(j.dump()));
  ExpectSameConfig(original, FromJsonText(j.dump(2)));
  // And through nlohmann's own conversions, which find these functions by ADL.
  ExpectSameConfig(original, json(original).get<TrainConfig>());
}

// The dense products' precision: bf16 is written and read back; fp32, the default, is not
// written, so a config from before the field existed reads as fp32 and compares equal.
TEST(ConfigJson, PrecisionIsWrittenOnlyWhenNotFp32) {
  TrainConfig c = PresetConfig("small");
  EXPECT_FALSE(json(c).contains("precision"));
  EXPECT_EQ(json(c).get<TrainConfig>().precision, "fp32");
  c.precision = "bf16";
  EXPECT_EQ(json(c).at("precision"), "bf16");
  EXPECT_EQ(json(c).get<TrainConfig>().precision, "bf16");
  c.precision = "fp16";
  const std::string message = InvalidArgumentMessage([&] { ValidateConfig(c); });
  EXPECT_NE(message.find("precision 'fp16': the dense products take fp32 or bf16"),
            std::string::npos)
      << message;
}

// init_seed and data_seed are written only when set, so older configs compare equal; the
// seeds in force fall back to `seed`.
TEST(ConfigJson, SeedsOfInitAndDataAreWrittenOnlyWhenSet) {
  TrainConfig c = PresetConfig("small");
  c.seed = 9;
  EXPECT_FALSE(json(c).contains("init_seed"));
  EXPECT_FALSE(json(c).contains("data_seed"));
  EXPECT_EQ(InitSeed(c), 9u);
  EXPECT_EQ(DataSeed(c), 9u);
  c.data_seed = 4;
  EXPECT_EQ(json(c).at("data_seed"), 4);
  EXPECT_FALSE(json(c).contains("init_seed"));
  EXPECT_EQ(InitSeed(c), 9u);
  EXPECT_EQ(DataSeed(c), 4u);
  const TrainConfig back = json(c).get<TrainConfig>();
  EXPECT_FALSE(back.init_seed.has_value());
  EXPECT_EQ(back.data_seed, std::optional<uint64_t>(4));
  json bad = json(c);
  bad["data_seed"] = -1;
  EXPECT_THROW(bad.get<TrainConfig>(), std::invalid_argument);
}

TEST(ConfigJson, PositionsAreWrittenOnlyWhenRotary) {
  TrainConfig c = PresetConfig("small");
  EXPECT_FALSE(json(c).at("model").contains("pos"));
  EXPECT_EQ(json(c).get<TrainConfig>().model.pos, "learned");
  c.model.pos = "rope";
  EXPECT_EQ(json(c).at("model").at("pos"), "rope");
  EXPECT_EQ(json(c).get<TrainConfig>().model.pos, "rope");
  EXPECT_NO_THROW(ValidateConfig(c));
}

TEST(ConfigPresets, LargeIsEightLayersOfWidth256) {
  const TrainConfig c = PresetConfig("large");
  EXPECT_EQ(c.model.n_layer, 8);
  EXPECT_EQ(c.model.n_embd, 256);
  EXPECT_EQ(c.model.n_embd / c.model.n_head, 32);
  EXPECT_EQ(c.model.context, 256);
  EXPECT_NO_THROW(ValidateConfig(c));
}

TEST(ConfigJson, PresetsRoundTrip) {
  for (const char* name : {"tiny", "small", "medium"}) {
    SCOPED_TRACE(name);
    const TrainConfig c = PresetConfig(name);
    ExpectSameConfig(c, FromJsonText(json(c).dump()));
  }
}

TEST(ConfigJson, FloatsAreWrittenShortAndReadBackExactly) {
  const json j = PresetConfig("tiny");
  const std::string text = j.dump();
  EXPECT_NE(text.find("\"lr\":0.001"), std::string::npos) << text;
  EXPECT_NE(text.find("\"beta2\":0.95"), std::string::npos) << text;
  EXPECT_NE(text.find("\"eps\":1e-08"), std::string::npos) << text;

  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-40, 30);
  for (int i = 0; i < 2000; ++i) {
    TrainConfig c;
    c.lr = std::ldexp(unit(rng), exponent(rng));
    c.eps = std::nextafter(c.lr, 1.0f);
    c.beta1 = std::numeric_limits<float>::denorm_min() * static_cast<float>(i + 1);
    c.weight_decay = std::numeric_limits<float>::max() / static_cast<float>(i + 1);
    const TrainConfig back = FromJsonText(json(c).dump());
    ASSERT_EQ(back.lr, c.lr) << i;
    ASSERT_EQ(back.eps, c.eps) << i;
    ASSERT_EQ(back.beta1, c.beta1) << i;
    ASSERT_EQ(back.weight_decay, c.weight_decay) << i;
  }
}

TEST(ConfigJson, NonFiniteFloatIsRejectedOnWrite) {
  TrainConfig c;
  c.lr = std::numeric_limits<float>::quiet_NaN();
  const std::string message = InvalidArgumentMessage([&] {
    json j = c;
    (void)j;
  });
  EXPECT_NE(message.find("lr"), std::string::npos) << message;
}

TEST(ConfigJson, UnknownKeyIsRejected) {
  json j = PresetConfig("tiny");
  j["stepz"] = 100;
  const std::string message = InvalidArgumentMessage([&] { j.get<TrainConfig>(); });
  EXPECT_NE(message.find("unknown field 'stepz'"), std::string::npos) << message;
  EXPECT_NE(message.find("steps"), std::string::npos) << message;  // the known list

  json nested = PresetConfig("tiny");
  nested["model"]["n_heads"] = 4;
  const std::string nested_message = InvalidArgumentMessage([&] { nested.get<TrainConfig>(); });
  EXPECT_NE(nested_message.find("config.model"), std::string::npos) << nested_message;
  EXPECT_NE(nested_message.find("'n_heads'"), std::string::npos) << nested_message;
}

TEST(ConfigJson, EveryMissingKeyIsRejected) {
  const json full = PresetConfig("small");
  for (const auto& item : full.items()) {
    SCOPED_TRACE(item.key());
    json j = full;
    j.erase(item.key());
    const std::string message = InvalidArgumentMessage([&] { j.get<TrainConfig>(); });
    EXPECT_NE(message.find("missing field '" + item.key() + "'"), std::string::npos) << message;
  }
  for (const auto& item : full["model"].items()) {
    SCOPED_TRACE(item.key());
    json j = full;
    j["model"].erase(item.key());
    const std::string message = InvalidArgumentMessage([&] { j.get<TrainConfig>(); });
    EXPECT_NE(message.find("config.model: missing field '" + item.key() + "'"),
              std::string::npos)
        << message;
  }
}

TEST(ConfigJson, WrongTypesAreRejected) {
  struct Case {
    const char* key;
    json value;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"steps", "300", "'steps' must be an integer"},
      {"steps", 300.5, "'steps' must be an integer"},
      {"steps", 1e12, "'steps' must be an integer"},
      {"steps", int64_t{1} << 40, "'steps' is out of the range"},
      {"batch", nullptr, "'batch' must be an integer"},
      {"seed", -1, "'seed' must be a non-negative integer"},
      {"lr", "0.001", "'lr' must be a number"},
      {"lr", nullptr, "'lr' must be a number"},
      {"lr", 1e300, "'lr' is out of the range of float"},
      {"arm", 3, "'arm' must be a string"},
      {"data", json::array(), "'data' must be a string"},
      {"model", 5, "config.model: expected a JSON object"},
  };
  for (const Case& bad : cases) {
    SCOPED_TRACE(bad.key);
    json j = PresetConfig("tiny");
    j[bad.key] = bad.value;
    const std::string message = InvalidArgumentMessage([&] { j.get<TrainConfig>(); });
    EXPECT_NE(message.find(bad.expected), std::string::npos) << message;
  }
  EXPECT_THROW(json::array().get<TrainConfig>(), std::invalid_argument);
  EXPECT_THROW(json(nullptr).get<TrainConfig>(), std::invalid_argument);
}

TEST(ConfigJson, IntegerValuedNumbersAreAcceptedForFloats) {
  json j = PresetConfig("tiny");
  j["lr"] = 1;
  j["weight_decay"] = 0;
  const TrainConfig c = j.get<TrainConfig>();
  EXPECT_EQ(c.lr, 1.0f);
  EXPECT_EQ(c.weight_decay, 0.0f);
}

TEST(ConfigJson, ModelRoundTripsOnItsOwn) {
  const ModelConfig m{.n_layer = 9, .n_head = 3, .n_embd = 96, .context = 17, .vocab = 256};
  const ModelConfig back = json::parse(json(m).dump()).get<ModelConfig>();
  EXPECT_EQ(back.n_layer, 9);
  EXPECT_EQ(back.n_head, 3);
  EXPECT_EQ(back.n_embd, 96);
  EXPECT_EQ(back.context, 17);
  EXPECT_EQ(back.vocab, 256);
  json extra = m;
  extra["dropout"] = 0.1;
  EXPECT_THROW(extra.get<ModelConfig>(), std::invalid_argument);
}

}  // namespace
}  // namespace lpattn::harness
