// Training runs and checkpoint evaluation (docs/harness.md §1-§3).
#include "harness/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/common/atomic_file.h"
#include "harness/model/model.h"
#include "harness/train/checkpoint.h"
#include "harness/train/data.h"
#include "harness/train/optimizer.h"
#include "tbb/task_arena.h"

namespace lpattn::harness {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

struct MetricsRow {
  int64_t step = 0, tokens = 0;
  double train_loss = 0, val_loss = 0, lr = 0, tokens_per_s = 0;
};

std::string MetricsCsv(const std::vector<MetricsRow>& rows) {
  std::ostringstream out;
  out << "step,tokens,train_loss,val_loss,lr,tokens_per_s\n";
  out.precision(17);  // round-trips doubles: a resumed run reads its earlier rows back
  for (const MetricsRow& r : rows) {
    out << r.step << ',' << r.tokens << ',' << r.train_loss << ',' << r.val_loss << ',' << r.lr
        << ',' << r.tokens_per_s << '\n';
  }
  return out.str();
}

// Rows of an earlier run's metrics.csv up to `last_step` (a resumed run rewrites the rest).
std::vector<MetricsRow> ReadMetrics(const fs::path& path, int64_t last_step) {
  std::vector<MetricsRow> rows;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    MetricsRow r;
    char comma;
    std::istringstream fields(line);
    fields >> r.step >> comma >> r.tokens >> comma >> r.train_loss >> comma >> r.val_loss >>
        comma >> r.lr >> comma >> r.tokens_per_s;
    if (fields && r.step <= last_step) rows.push_back(r);
  }
  return rows;
}

// Every field but the thread count must match for a resume: the thread count changes no
// number of the run.
void CheckResumable(const TrainConfig& requested, const TrainConfig& saved,
                    const std::string& path) {
  nlohmann::json a = requested, b = saved;
  a.erase("threads");
  b.erase("threads");
  for (auto it = a.begin(); it != a.end(); ++it) {
    if (!b.contains(it.key()) || b[it.key()] != it.value()) {
      throw std::invalid_argument("checkpoint " + path + " was written by a different config: " +
                                  it.key() + " is " + b.value(it.key(), nlohmann::json()).dump() +
                                  " there, " + it.value().dump() + " here");
    }
  }
}

std::string CorpusPath(const TrainConfig& config, const std::string& override_path) {
  if (!override_path.empty()) return override_path;
  return config.data.empty() ? DefaultCorpusPath() : config.data;
}

// The mean loss over the fixed validation windows, in batches of config.batch.
// The mean loss over the validation windows; after_batch (if set) runs after each batch's
// forward pass, while its activations are in the model.
double ValidationLoss(Gpt& model, const TrainConfig& config, const std::vector<uint8_t>& text,
                      const std::function<void()>& after_batch = {}) {
  const size_t T = size_t(config.model.context), B = size_t(config.batch);
  std::vector<uint8_t> windows;
  ValidationWindows(text, size_t(config.eval_windows), T, windows);
  const size_t count = size_t(config.eval_windows);
  std::vector<uint8_t> inputs, targets;
  double sum = 0.0;
  for (size_t first = 0; first < count; first += B) {
    const size_t n = std::min(B, count - first);
    inputs.clear();
    targets.clear();
    for (size_t w = first; w < first + n; ++w) {
      const uint8_t* window = windows.data() + w * (T + 1);
      inputs.insert(inputs.end(), window, window + T);
      targets.insert(targets.end(), window + 1, window + T + 1);
    }
    sum += double(model.Forward(inputs.data(), targets.data(), n)) * double(n);
    if (after_batch) after_batch();
  }
  return sum / double(count);
}

// Attention diagnostics of the model on the validation windows (issue 5): per layer and head
// the fraction of exact zeros among visible weights, the mean first-token mass and (sink arms)
// the mean abstention mass; overall, the zero fraction, the mean first-token mass, the sink
// rate (share of heads whose mean first-token mass exceeds 0.3) and the mean abstention.
nlohmann::json AttentionDiagnostics(Gpt& model, const TrainConfig& config,
                                    const std::vector<uint8_t>& text) {
  std::vector<std::vector<HeadDiagnostics>> per_layer;
  ValidationLoss(model, config, text, [&] { model.Diagnose(per_layer); });
  const bool sink = model.arm().HasSink();
  nlohmann::json layers = nlohmann::json::array();
  double zeros = 0.0, visible = 0.0, first = 0.0, abstention = 0.0, sinks = 0.0, heads = 0.0;
  for (const std::vector<HeadDiagnostics>& layer : per_layer) {
    nlohmann::json row = nlohmann::json::array();
    for (const HeadDiagnostics& d : layer) {
      const double first_mass = d.first_mass / d.rows, abstain = d.abstention / d.rows;
      row.push_back({{"zero_frac", d.zeros / d.visible},
                     {"first_mass", first_mass},
                     {"abstention", sink ? nlohmann::json(abstain) : nlohmann::json(nullptr)}});
      zeros += d.zeros;
      visible += d.visible;
      first += first_mass;
      abstention += abstain;
      sinks += first_mass > 0.3 ? 1.0 : 0.0;
      heads += 1.0;
    }
    layers.push_back(row);
  }
  return {{"windows", config.eval_windows},
          {"zero_frac", zeros / visible},
          {"first_mass", first / heads},
          {"sink_rate", sinks / heads},
          {"abstention", sink ? nlohmann::json(abstention / heads) : nlohmann::json(nullptr)},
          {"layers", layers}};
}

template <class Fn>
auto InArena(int threads, const Fn& fn) {
  tbb::task_arena arena(threads > 0 ? threads : tbb::task_arena::automatic);
  return arena.execute(fn);
}

}  // namespace

RunSummary TrainRun(const TrainConfig& config, const std::string& out_dir, bool resume,
                    const ProgressFn& progress) {
  ValidateConfig(config);
  const fs::path dir(out_dir);
  const fs::path checkpoint_path = dir / "checkpoint.bin";
  CheckpointState state;
  if (resume) {
    state = ReadCheckpoint(checkpoint_path.string());
    CheckResumable(config, state.config, checkpoint_path.string());
  } else if (fs::exists(dir / "config.json") || fs::exists(checkpoint_path)) {
    throw std::invalid_argument("run directory " + out_dir +
                                " already holds a run (resume it, or choose another --out)");
  }
  const Corpus corpus = LoadCorpus(CorpusPath(config, ""), size_t(config.model.context));

  fs::create_directories(dir);
  WriteFileAtomically((dir / "config.json").string(), nlohmann::json(config).dump(2) + "\n");
  std::vector<MetricsRow> rows;
  if (resume) rows = ReadMetrics(dir / "metrics.csv", state.step);

  return InArena(config.threads, [&] {
    const size_t B = size_t(config.batch), T = size_t(config.model.context);
    Gpt model(config.model, config.arm, B);
    AdamState adam;
    int64_t start = 0;
    if (resume) {
      if (state.params.size() != model.params().size()) {
        throw std::runtime_error("checkpoint " + checkpoint_path.string() +
                                 " holds a different number of parameters");
      }
      model.params() = state.params;
      adam.m = state.adam_m;
      adam.v = state.adam_v;
      start = state.step;
    } else {
      model.InitParams(config.seed);
    }

    std::vector<uint8_t> batch, inputs(B * T), targets(B * T);
    double train_sum = 0.0, train_seconds = 0.0, last_val = rows.empty() ? -1.0 : rows.back().val_loss;
    int train_count = 0;
    RunSummary summary;
    const auto run_start = Clock::now();
    for (int64_t step = start; step < config.steps; ++step) {
      const auto step_start = Clock::now();
      TrainBatch(corpus.train, config.seed, uint64_t(step), B, T, batch);
      for (size_t b = 0; b < B; ++b) {
        std::copy_n(batch.begin() + long(b * (T + 1)), T, inputs.begin() + long(b * T));
        std::copy_n(batch.begin() + long(b * (T + 1) + 1), T, targets.begin() + long(b * T));
      }
      const float loss = model.Forward(inputs.data(), targets.data(), B);
      model.Backward();
      AdamWStep(config, step, model.tensors(), model.grads(), model.params(), adam);
      train_seconds += std::chrono::duration<double>(Clock::now() - step_start).count();
      train_sum += loss;
      ++train_count;

      const int64_t done = step + 1;
      const double tokens_per_s = double((done - start) * int64_t(B * T)) / train_seconds;
      const bool last = done == config.steps;
      if (done % config.eval_every == 0 || last) {
        last_val = ValidationLoss(model, config, corpus.validation);
        rows.push_back({done, done * int64_t(B * T), train_sum / train_count, last_val,
                        LearningRate(config, step), tokens_per_s});
        summary.final_train_loss = train_sum / train_count;
        train_sum = 0.0;
        train_count = 0;
        WriteFileAtomically((dir / "metrics.csv").string(), MetricsCsv(rows));
        if (done % config.checkpoint_every == 0 || last) {
          WriteCheckpoint(checkpoint_path.string(), {config, done, model.params(), adam.m, adam.v});
        }
      }
      if (progress) {
        const double elapsed = std::chrono::duration<double>(Clock::now() - run_start).count();
        progress({int(done), config.steps, loss, last_val, tokens_per_s,
                  elapsed / double(done - start) * double(config.steps - done)});
      }
      summary.tokens_per_s = tokens_per_s;
    }
    WriteFileAtomically((dir / "attention.json").string(),
                        AttentionDiagnostics(model, config, corpus.validation).dump(2) + "\n");
    summary.steps = config.steps;
    summary.final_val_loss = rows.empty() ? 0.0 : rows.back().val_loss;
    if (!rows.empty()) summary.final_train_loss = rows.back().train_loss;
    summary.seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
    nlohmann::json j = {{"final_val_loss", summary.final_val_loss},
                        {"final_train_loss", summary.final_train_loss},
                        {"tokens_per_s", summary.tokens_per_s},
                        {"steps", summary.steps},
                        {"seconds", summary.seconds},
                        {"arm", config.arm},
                        {"preset", config.preset},
                        {"seed", config.seed},
                        {"threads", config.threads}};
    WriteFileAtomically((dir / "summary.json").string(), j.dump(2) + "\n");
    return summary;
  });
}

namespace {

// A checkpoint's model with its weights, sized for max_batch windows, under `arm` if given.
Gpt LoadModel(const std::string& checkpoint_path, const CheckpointState& state,
              const std::string& arm, size_t max_batch) {
  Gpt model(state.config.model, state.config.arm, max_batch);
  if (state.params.size() != model.params().size()) {
    throw std::runtime_error("checkpoint " + checkpoint_path +
                             " holds a different number of parameters than its config");
  }
  model.params() = state.params;
  if (!arm.empty()) model.SetArm(arm);
  return model;
}

}  // namespace

double EvaluateCheckpoint(const std::string& checkpoint_path, const std::string& arm,
                          const std::string& data) {
  const CheckpointState state = ReadCheckpoint(checkpoint_path);
  const TrainConfig& config = state.config;
  const Corpus corpus = LoadCorpus(CorpusPath(config, data), size_t(config.model.context));
  return InArena(config.threads, [&] {
    Gpt model = LoadModel(checkpoint_path, state, arm, size_t(config.batch));
    return ValidationLoss(model, config, corpus.validation);
  });
}

std::vector<std::vector<float>> PrefixLogits(const std::string& checkpoint_path,
                                             const std::string& arm,
                                             const std::vector<std::string>& prompts) {
  const CheckpointState state = ReadCheckpoint(checkpoint_path);
  const size_t T = size_t(state.config.model.context), V = size_t(state.config.model.vocab);
  if (prompts.empty()) throw std::invalid_argument("PrefixLogits: no prompts");
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (prompts[p].empty() || prompts[p].size() > T) {
      throw std::invalid_argument("prompt " + std::to_string(p + 1) + " has " +
                                  std::to_string(prompts[p].size()) +
                                  " bytes; the model takes 1 to " + std::to_string(T));
    }
  }
  // Causal attention: a prefix's logits do not depend on what follows it, so each prompt is
  // one window padded with zero bytes.
  std::vector<uint8_t> windows(prompts.size() * T, 0);
  for (size_t p = 0; p < prompts.size(); ++p) {
    std::copy(prompts[p].begin(), prompts[p].end(), windows.begin() + std::ptrdiff_t(p * T));
  }
  return InArena(state.config.threads, [&] {
    Gpt model = LoadModel(checkpoint_path, state, arm, prompts.size());
    model.Forward(windows.data(), nullptr, prompts.size());
    std::vector<std::vector<float>> logits(prompts.size());
    for (size_t p = 0; p < prompts.size(); ++p) {
      const float* first = model.logits() + p * T * V;
      logits[p].assign(first, first + prompts[p].size() * V);
    }
    return logits;
  });
}

}  // namespace lpattn::harness
