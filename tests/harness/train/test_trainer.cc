// Training runs end to end on a generated corpus: the loss falls, runs are reproducible bit
// for bit, an interrupted run resumed from its checkpoint ends where an uninterrupted one
// does, the evaluation swap works, prompts' logits are the forward's, and bad requests fail
// before anything is written.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <limits>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/model/model.h"
#include "harness/train/checkpoint.h"
#include "harness/train/optimizer.h"
#include "harness/train/trainer.h"
#include "tests/harness/harness_fixture.h"

namespace lpattn::harness::test {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// metrics.csv without its timing column (tokens/s is wall-clock, not a number of the run).
std::string LossColumns(const std::string& run_dir) {
  std::istringstream in(Slurp(run_dir + "/metrics.csv"));
  std::string line, out;
  while (std::getline(in, line)) out += line.substr(0, line.rfind(',')) + "\n";
  return out;
}

// The tiny test config trained long enough to learn: 150 steps at rate 3e-3.
TrainConfig LearningConfig(const ScratchDir& dir) {
  TrainConfig c = TinyTestConfig(WriteGeneratedCorpus(dir));
  c.steps = 150;
  c.eval_every = 50;
  c.checkpoint_every = 50;
  c.lr = 3e-3f;
  return c;
}

TEST(Trainer, TinyRunLearnsAndWritesItsRunDirectory) {
  ScratchDir dir("lpattn-train");
  const TrainConfig c = LearningConfig(dir);
  const RunSummary s = TrainRun(c, dir / "run", false, nullptr);
  // ln(256) = 5.55 nats is the uniform guess over bytes.
  EXPECT_LT(s.final_val_loss, 0.55 * std::log(256.0));
  EXPECT_GT(s.tokens_per_s, 0.0);
  for (const char* f : {"config.json", "metrics.csv", "summary.json", "checkpoint.bin",
                        "attention.json"}) {
    EXPECT_TRUE(std::filesystem::exists(dir / ("run/" + std::string(f)))) << f;
  }
  EXPECT_NE(Slurp(dir / "run/summary.json").find("final_val_loss"), std::string::npos);
  // Diagnostics: one entry per layer and head, fractions in [0, 1], no abstention without a sink.
  const nlohmann::json attention = nlohmann::json::parse(Slurp(dir / "run/attention.json"));
  ASSERT_EQ(attention.at("layers").size(), size_t(c.model.n_layer));
  EXPECT_EQ(attention.at("layers")[0].size(), size_t(c.model.n_head));
  for (const char* key : {"zero_frac", "first_mass", "sink_rate"}) {
    const double value = attention.at(key).get<double>();
    EXPECT_GE(value, 0.0) << key;
    EXPECT_LE(value, 1.0) << key;
  }
  EXPECT_GT(attention.at("first_mass").get<double>(), 0.0);
  EXPECT_TRUE(attention.at("abstention").is_null());
}

TEST(Trainer, SameSeedSameNumbers) {
  ScratchDir dir("lpattn-determinism");
  const TrainConfig c = TinyTestConfig(WriteGeneratedCorpus(dir));
  const RunSummary a = TrainRun(c, dir / "a", false, nullptr);
  const RunSummary b = TrainRun(c, dir / "b", false, nullptr);
  EXPECT_EQ(a.final_val_loss, b.final_val_loss);
  EXPECT_EQ(LossColumns(dir / "a"), LossColumns(dir / "b"));
  EXPECT_EQ(ReadCheckpoint(dir / "a/checkpoint.bin").params,
            ReadCheckpoint(dir / "b/checkpoint.bin").params);
}

// --init-seed and --data-seed: a run is a function of the two seeds in force, not of `seed`.
TEST(Trainer, InitAndDataSeedsEachSetOneSourceOfRandomness) {
  ScratchDir dir("lpattn-seeds");
  TrainConfig c = TinyTestConfig(WriteGeneratedCorpus(dir));
  c.steps = 4;
  c.eval_every = 2;
  c.checkpoint_every = 4;
  TrainConfig init3_data1 = c, data1_init3 = c, data2_init3 = c, init4_data1 = c;
  init3_data1.seed = 3;
  init3_data1.data_seed = 1;
  data1_init3.seed = 1;
  data1_init3.init_seed = 3;
  data2_init3.seed = 2;
  data2_init3.init_seed = 3;
  init4_data1.seed = 1;
  init4_data1.init_seed = 4;
  TrainRun(init3_data1, dir / "a", false, nullptr);
  TrainRun(data1_init3, dir / "b", false, nullptr);
  TrainRun(data2_init3, dir / "c", false, nullptr);
  TrainRun(init4_data1, dir / "d", false, nullptr);
  const auto params = [&](const char* run) {
    return ReadCheckpoint(dir / (std::string(run) + "/checkpoint.bin")).params;
  };
  EXPECT_EQ(params("a"), params("b"));  // the same two seeds in force
  EXPECT_NE(params("b"), params("c"));  // another data order
  EXPECT_NE(params("b"), params("d"));  // another initialisation
  const nlohmann::json summary = nlohmann::json::parse(std::ifstream(dir / "a/summary.json"));
  EXPECT_EQ(summary.at("seed"), 3);
  EXPECT_EQ(summary.at("init_seed"), 3);
  EXPECT_EQ(summary.at("data_seed"), 1);
  EXPECT_EQ(summary.at("tokens"), 4 * c.batch * c.model.context);
}

TEST(Trainer, ResumeEndsIdenticalToAnUninterruptedRun) {
  ScratchDir dir("lpattn-resume");
  const TrainConfig c = TinyTestConfig(WriteGeneratedCorpus(dir));
  const RunSummary straight = TrainRun(c, dir / "straight", false, nullptr);
  // Interrupt after step 27: the last checkpoint is the one at step 20.
  auto stop = [](const Progress& p) {
    if (p.step == 27) throw std::runtime_error("interrupted");
  };
  EXPECT_THROW(TrainRun(c, dir / "resumed", false, stop), std::runtime_error);
  EXPECT_EQ(ReadCheckpoint(dir / "resumed/checkpoint.bin").step, 20);
  const RunSummary resumed = TrainRun(c, dir / "resumed", true, nullptr);
  EXPECT_EQ(straight.final_val_loss, resumed.final_val_loss);
  EXPECT_EQ(LossColumns(dir / "straight"), LossColumns(dir / "resumed"));
  EXPECT_EQ(ReadCheckpoint(dir / "straight/checkpoint.bin").params,
            ReadCheckpoint(dir / "resumed/checkpoint.bin").params);
}

// AdamWStep with a gradient whose norm is not finite applies nothing and says so; a finite one
// moves every parameter.
TEST(Trainer, AdamWStepRefusesANonFiniteGradient) {
  const TrainConfig c = PresetConfig("tiny");
  const std::vector<ParamTensor> tensors = {{"w", 0, 6, true}, {"b", 6, 2, false}};
  std::vector<float> params = {1, 2, 3, 4, 5, 6, 7, 8};
  AdamState state;
  std::vector<float> grads(8, 0.5f);
  grads[3] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(std::isfinite(AdamWStep(c, 0, tensors, grads, params, state)));
  EXPECT_EQ(params, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(state.m, std::vector<float>(8, 0.0f));
  grads[3] = std::nanf("");
  EXPECT_FALSE(std::isfinite(AdamWStep(c, 0, tensors, grads, params, state)));
  EXPECT_EQ(params, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  grads[3] = 0.5f;
  EXPECT_NEAR(AdamWStep(c, 0, tensors, grads, params, state), std::sqrt(8 * 0.25), 1e-9);
  for (size_t i = 0; i < params.size(); ++i) EXPECT_LT(params[i], float(i + 1)) << i;
}

// Three AdamW steps against the formula in double (docs/harness.md §1.2), on tensors whose
// sizes leave vector tails, with and without weight decay, the gradient clipped in the second.
TEST(Trainer, AdamWStepsFollowTheFormula) {
  TrainConfig c = PresetConfig("tiny");
  c.grad_clip = 1.0f;
  const std::vector<ParamTensor> tensors = {{"w", 0, 37, true}, {"b", 37, 21, false}};
  const size_t n = 58;
  std::vector<float> params(n);
  for (size_t i = 0; i < n; ++i) params[i] = 0.1f * float(int(i % 13) - 6);
  std::vector<double> p_ref(params.begin(), params.end()), m_ref(n, 0.0), v_ref(n, 0.0);
  AdamState state;
  for (int64_t step = 0; step < 3; ++step) {
    std::vector<float> grads(n);
    const float size = step == 1 ? 1.0f : 0.01f;  // the second step's norm is over the clip
    for (size_t i = 0; i < n; ++i) grads[i] = size * float(int((i * 7 + size_t(step)) % 11) - 5);
    const double norm = AdamWStep(c, step, tensors, grads, params, state);
    const double clip = norm > c.grad_clip ? c.grad_clip / norm : 1.0;
    const double lr = LearningRate(c, step);
    for (size_t i = 0; i < n; ++i) {
      const double g = grads[i] * clip;
      m_ref[i] = c.beta1 * m_ref[i] + (1.0 - c.beta1) * g;
      v_ref[i] = c.beta2 * v_ref[i] + (1.0 - c.beta2) * g * g;
      const double m_hat = m_ref[i] / (1.0 - std::pow(double(c.beta1), double(step + 1)));
      const double v_hat = v_ref[i] / (1.0 - std::pow(double(c.beta2), double(step + 1)));
      const double decay = i < 37 ? c.weight_decay : 0.0;
      p_ref[i] -= lr * (m_hat / (std::sqrt(v_hat) + c.eps) + decay * p_ref[i]);
      ASSERT_NEAR(params[i], p_ref[i], 1e-6 * (1.0 + std::abs(p_ref[i])))
          << "step " << step << " element " << i;
      ASSERT_NEAR(state.m[i], m_ref[i], 1e-6 * (1e-3 + std::abs(m_ref[i]))) << i;
      ASSERT_NEAR(state.v[i], v_ref[i], 1e-5 * (1e-6 + std::abs(v_ref[i]))) << i;
    }
  }
}

// A step whose loss is not finite ends the run (docs/harness.md §3.2): no update is applied,
// the last checkpoint stays as it was, summary.json says where, no attention.json is written,
// and TrainRun returns normally (a result, not an error). Forced by resuming from a
// checkpoint whose weights are NaN.
TEST(Trainer, ADivergedRunStopsWithItsLastWeights) {
  ScratchDir dir("lpattn-diverge");
  const TrainConfig c = TinyTestConfig(WriteGeneratedCorpus(dir));
  auto stop = [](const Progress& p) {
    if (p.step == 27) throw std::runtime_error("interrupted");
  };
  EXPECT_THROW(TrainRun(c, dir / "run", false, stop), std::runtime_error);
  CheckpointState state = ReadCheckpoint(dir / "run/checkpoint.bin");
  ASSERT_EQ(state.step, 20);
  state.params.assign(state.params.size(), std::nanf(""));
  WriteCheckpoint(dir / "run/checkpoint.bin", state);

  const RunSummary s = TrainRun(c, dir / "run", true, nullptr);
  EXPECT_EQ(s.diverged_at_step, 21);
  EXPECT_EQ(s.steps, 20);
  const nlohmann::json summary = nlohmann::json::parse(Slurp(dir / "run/summary.json"));
  const uint64_t tokens = 20u * uint64_t(c.batch) * uint64_t(c.model.context);
  EXPECT_EQ(summary.at("diverged_at_step"), 21);
  EXPECT_EQ(summary.at("diverged_at_tokens"), tokens);
  EXPECT_EQ(summary.at("tokens"), tokens);
  EXPECT_EQ(summary.at("steps"), 20);
  EXPECT_FALSE(std::filesystem::exists(dir / "run/attention.json"));
  const CheckpointState after = ReadCheckpoint(dir / "run/checkpoint.bin");
  EXPECT_EQ(after.step, 20);
  EXPECT_EQ(after.adam_m, state.adam_m);  // no step applied
  EXPECT_EQ(after.adam_v, state.adam_v);
}

// bf16 mixed precision (docs/harness.md §1.1): the run learns like fp32 (the same windows and
// initialisation; 150 steps end within 0.05 nats), is not fp32 (the format reaches the
// products), is reproducible, and its checkpoint is evaluated in bf16 again.
TEST(Trainer, Bf16MixedPrecisionLearnsLikeFp32) {
  ScratchDir dir("lpattn-bf16");
  TrainConfig c = LearningConfig(dir);
  const RunSummary fp32 = TrainRun(c, dir / "fp32", false, nullptr);
  c.precision = "bf16";
  const RunSummary bf16 = TrainRun(c, dir / "bf16", false, nullptr);
  const RunSummary again = TrainRun(c, dir / "bf16-again", false, nullptr);
  EXPECT_LT(bf16.final_val_loss, 0.55 * std::log(256.0));
  EXPECT_NEAR(bf16.final_val_loss, fp32.final_val_loss, 0.05);
  EXPECT_NE(bf16.final_val_loss, fp32.final_val_loss);
  EXPECT_EQ(LossColumns(dir / "bf16"), LossColumns(dir / "bf16-again"));
  EXPECT_EQ(ReadCheckpoint(dir / "bf16/checkpoint.bin").config.precision, "bf16");
  EXPECT_EQ(EvaluateCheckpoint(dir / "bf16/checkpoint.bin", "", ""), bf16.final_val_loss);
}

TEST(Trainer, EvaluationSwap) {
  ScratchDir dir("lpattn-swap");
  const TrainConfig c = TinyTestConfig(WriteGeneratedCorpus(dir));
  const RunSummary s = TrainRun(c, dir / "run", false, nullptr);
  const std::string checkpoint = dir / "run/checkpoint.bin";
  EXPECT_EQ(EvaluateCheckpoint(checkpoint, "", ""), s.final_val_loss);
  EXPECT_EQ(EvaluateCheckpoint(checkpoint, "exact", ""), s.final_val_loss);
  const double swapped = EvaluateCheckpoint(checkpoint, "offbyone", "");
  EXPECT_TRUE(std::isfinite(swapped));
  EXPECT_NE(swapped, s.final_val_loss);
  // A sink needs per-layer logits that an exact model does not have.
  EXPECT_THROW(EvaluateCheckpoint(checkpoint, "sink", ""), std::invalid_argument);
}

// Evaluation at another context (docs/harness.md §3.8): a rotary model evaluated at 4 times its
// training context, per position bucket; at its own context the loss is the run's.
TEST(Trainer, RotaryModelIsEvaluatedAtFourTimesItsContext) {
  ScratchDir dir("lpattn-context");
  TrainConfig c = TinyTestConfig(WriteGeneratedCorpus(dir));
  c.model.pos = "rope";
  c.model.context = 16;
  const RunSummary s = TrainRun(c, dir / "run", false, nullptr);
  const std::string checkpoint = dir / "run/checkpoint.bin";
  const ContextEvaluation same = EvaluateAtContext(checkpoint, "", "", 16, c.eval_windows);
  EXPECT_EQ(same.val_loss, s.final_val_loss);
  ASSERT_EQ(same.buckets.size(), 1u);
  EXPECT_NEAR(same.buckets[0].loss, same.val_loss, 1e-4);

  const ContextEvaluation longer = EvaluateAtContext(checkpoint, "", "", 64, 4);
  EXPECT_EQ(longer.trained_context, 16);
  EXPECT_EQ(longer.pos, "rope");
  ASSERT_EQ(longer.buckets.size(), 4u);
  double mean = 0.0;
  for (size_t k = 0; k < 4; ++k) {
    const PositionBucket& b = longer.buckets[k];
    EXPECT_EQ(b.begin, int64_t(16 * k));
    EXPECT_EQ(b.end, int64_t(16 * (k + 1)));
    EXPECT_TRUE(std::isfinite(b.loss));
    // Rows see more keys in later buckets: more spread, up to ln(keys) nats.
    EXPECT_GT(b.entropy, 0.0);
    EXPECT_LE(b.entropy, std::log(double(b.end)) + 1e-9);
    EXPECT_GT(b.max_weight, 0.0);
    EXPECT_LE(b.max_weight, 1.0);
    mean += b.loss / 4.0;
  }
  EXPECT_NEAR(mean, longer.val_loss, 1e-4);  // equal-sized buckets: their mean is the loss
  EXPECT_GT(longer.buckets[3].entropy, longer.buckets[0].entropy);

  // A learned-position model has exactly its trained context's embeddings.
  TrainConfig learned = c;
  learned.model.pos = "learned";
  TrainRun(learned, dir / "learned", false, nullptr);
  EXPECT_THROW(EvaluateAtContext(dir / "learned/checkpoint.bin", "", "", 64, 4),
               std::invalid_argument);
  EXPECT_NO_THROW(EvaluateAtContext(dir / "learned/checkpoint.bin", "", "", 16, 4));
}

// Interference at evaluation (docs/harness.md §1.5): the same checkpoint clean and corrupted;
// rho = 0 changes nothing; strong noise raises the loss; the corrupted share is about rho; a
// gate arm reports its gates, a sink arm its abstention.
TEST(Trainer, InterferenceAtEvaluationAndInTraining) {
  ScratchDir dir("lpattn-interference");
  TrainConfig c = TinyTestConfig(WriteGeneratedCorpus(dir));
  c.arm = "sink+normgate";
  const RunSummary s = TrainRun(c, dir / "run", false, nullptr);
  const std::string checkpoint = dir / "run/checkpoint.bin";
  const InterferenceEvaluation none =
      EvaluateWithInterference(checkpoint, "", "", ParseInterference("noise:rho=0,sigma=1"));
  EXPECT_EQ(none.clean_loss, s.final_val_loss);
  EXPECT_EQ(none.loss, none.clean_loss);
  const InterferenceEvaluation noisy =
      EvaluateWithInterference(checkpoint, "", "", ParseInterference("noise:rho=0.3,sigma=4"));
  EXPECT_EQ(noisy.clean_loss, s.final_val_loss);
  EXPECT_GT(noisy.loss, noisy.clean_loss);
  EXPECT_NEAR(noisy.corrupted_share, 0.3, 0.05);
  EXPECT_GT(noisy.corrupted_mass, 0.0);
  EXPECT_LT(noisy.corrupted_mass, 1.0);
  ASSERT_TRUE(noisy.gate_corrupted && noisy.gate_clean && noisy.abstention_clean);
  // normgate's gate reads ||v||, which the noise raises: its gate moves on corrupted rows.
  EXPECT_NE(*noisy.gate_corrupted, *noisy.gate_clean);
  EXPECT_EQ(noisy.interference, "noise:rho=0.3:sigma=4");
  const InterferenceEvaluation swapped =
      EvaluateWithInterference(checkpoint, "", "", ParseInterference("swap:rho=0.5,layer=1"));
  EXPECT_NE(swapped.loss, swapped.clean_loss);
  EXPECT_THROW(
      EvaluateWithInterference(checkpoint, "", "", ParseInterference("swap:rho=0.5,layer=9")),
      std::invalid_argument);
  // Exact attention: no gates, no abstention.
  TrainConfig exact = c;
  exact.arm = "exact";
  exact.steps = 4;
  exact.eval_every = 2;
  exact.checkpoint_every = 4;
  TrainRun(exact, dir / "exact", false, nullptr);
  const InterferenceEvaluation plain = EvaluateWithInterference(
      dir / "exact/checkpoint.bin", "", "", ParseInterference("noise:rho=0.3,sigma=1"));
  EXPECT_FALSE(plain.gate_corrupted.has_value());
  EXPECT_FALSE(plain.abstention.has_value());
  // Thresholded attention zeroes most weights, often whole rows: the share of positions
  // corrupted still counts every visible key (it is the uniform reader's mass).
  TrainConfig tda = exact;
  tda.arm = "tda";
  TrainRun(tda, dir / "tda", false, nullptr);
  const InterferenceEvaluation sparse = EvaluateWithInterference(
      dir / "tda/checkpoint.bin", "", "", ParseInterference("noise:rho=0.3,sigma=1"));
  EXPECT_NEAR(sparse.corrupted_share, 0.3, 0.05);
  EXPECT_LE(sparse.corrupted_mass, 1.0);

  // Training under interference: reproducible, different from clean training, and its
  // validation loss is measured clean (the checkpoint's clean evaluation gives it back).
  TrainConfig trained = exact;
  trained.interference = "swap:rho=0.3";
  const RunSummary a = TrainRun(trained, dir / "a", false, nullptr);
  const RunSummary b = TrainRun(trained, dir / "b", false, nullptr);
  EXPECT_EQ(a.final_val_loss, b.final_val_loss);
  EXPECT_NE(a.final_val_loss,
            EvaluateCheckpoint(dir / "exact/checkpoint.bin", "", ""));
  EXPECT_EQ(EvaluateCheckpoint(dir / "a/checkpoint.bin", "", ""), a.final_val_loss);
}

// The logits an engine checks itself against (docs/harness.md §3.6): a prompt's rows are the
// model's forward on a window it begins, whatever follows it and whatever else is in the call.
TEST(Trainer, PrefixLogitsAreTheForwardOnThePrompt) {
  ScratchDir dir("lpattn-logits");
  TrainConfig c = TinyTestConfig(WriteGeneratedCorpus(dir));
  c.arm = "sink:window=8";
  TrainRun(c, dir / "run", false, nullptr);
  const std::string checkpoint = dir / "run/checkpoint.bin";
  const std::vector<std::string> prompts = {"The cat sat on the mat", "A"};
  const auto logits = PrefixLogits(checkpoint, "", prompts);
  ASSERT_EQ(logits.size(), 2u);
  const size_t T = size_t(c.model.context), V = size_t(c.model.vocab);
  ASSERT_EQ(logits[0].size(), prompts[0].size() * V);
  ASSERT_EQ(logits[1].size(), V);

  Gpt model(c.model, c.arm, 1);
  model.params() = ReadCheckpoint(checkpoint).params;
  std::vector<uint8_t> window(T, 'x');  // other bytes after the prompt than PrefixLogits's
  std::copy(prompts[0].begin(), prompts[0].end(), window.begin());
  model.Forward(window.data(), nullptr, 1);
  for (size_t i = 0; i < logits[0].size(); ++i) {
    ASSERT_NEAR(logits[0][i], model.logits()[i], 1e-5f) << "position " << i / V;
  }
  // Alone, the second prompt gives its logits up to fp32 summation order: a call of one window
  // multiplies fewer rows, which OpenBLAS's Haswell and Zen sgemm kernels sum in another order
  // (bit-identical with its Sandybridge and Prescott kernels, last-bit apart on AMD Zen 3).
  const std::vector<float> alone = PrefixLogits(checkpoint, "", {prompts[1]})[0];
  ASSERT_EQ(alone.size(), logits[1].size());
  for (size_t i = 0; i < alone.size(); ++i) ASSERT_NEAR(alone[i], logits[1][i], 1e-5f) << i;
  // Another arm gives other logits; bad prompts are named.
  EXPECT_NE(PrefixLogits(checkpoint, "sink", {prompts[0]})[0], logits[0]);
  EXPECT_THROW(PrefixLogits(checkpoint, "", {""}), std::invalid_argument);
  EXPECT_THROW(PrefixLogits(checkpoint, "", {"ok", std::string(T + 1, 'a')}),
               std::invalid_argument);
  EXPECT_THROW(PrefixLogits(checkpoint, "", {}), std::invalid_argument);
}

TEST(Trainer, BadRequestsFailBeforeWriting) {
  ScratchDir dir("lpattn-bad");
  TrainConfig c = TinyTestConfig(WriteGeneratedCorpus(dir));
  TrainRun(c, dir / "run", false, nullptr);
  const std::string config_before = Slurp(dir / "run/config.json");
  const std::string metrics_before = Slurp(dir / "run/metrics.csv");

  // A second run into the same directory.
  EXPECT_THROW(TrainRun(c, dir / "run", false, nullptr), std::invalid_argument);
  // Resuming with another config.
  TrainConfig other = c;
  other.lr *= 2.0f;
  try {
    TrainRun(other, dir / "run", true, nullptr);
    ADD_FAILURE() << "resume with another config was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("lr"), std::string::npos) << e.what();
  }
  // A missing data file, an unknown arm.
  TrainConfig missing = c;
  missing.data = dir / "nope.txt";
  EXPECT_THROW(TrainRun(missing, dir / "run2", false, nullptr), std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(dir / "run2"));
  TrainConfig bad_arm = c;
  bad_arm.arm = "softmax2";
  EXPECT_THROW(TrainRun(bad_arm, dir / "run3", false, nullptr), std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(dir / "run3"));

  EXPECT_EQ(Slurp(dir / "run/config.json"), config_before);
  EXPECT_EQ(Slurp(dir / "run/metrics.csv"), metrics_before);
}

}  // namespace
}  // namespace lpattn::harness::test
