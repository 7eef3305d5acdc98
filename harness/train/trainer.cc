// Training runs and checkpoint evaluation (docs/harness.md §1-§3).
#include "harness/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
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
                      const std::function<void()>& after_batch = {},
                      const std::function<void(const float*, size_t)>& batch_losses = {}) {
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
    model.SetFirstWindow(first);
    sum += double(model.Forward(inputs.data(), targets.data(), n)) * double(n);
    if (after_batch) after_batch();
    if (batch_losses) batch_losses(model.losses(), n);  // [n][T] per-token losses
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

// LPATTN_FAIL_AT_STEP=<rank>:<step>: the step (0-based) at which that rank of the job (a sweep's
// runs are one-process runs on the job's ranks) throws, or -1.
int64_t InjectedFailureStep() {
  const char* spec = std::getenv("LPATTN_FAIL_AT_STEP");
  if (spec == nullptr) return -1;
  int rank = -1;
  long long step = -1;
  if (std::sscanf(spec, "%d:%lld", &rank, &step) != 2 || rank < 0 || step < 0) {
    throw std::invalid_argument(std::string("LPATTN_FAIL_AT_STEP is '") + spec +
                                "'; write <rank>:<step>, e.g. 1:25");
  }
  return rank == Ranks::World().rank() ? int64_t(step) : -1;
}

// This rank's windows of a step's batch of B: [B r / P, B (r + 1) / P).
struct BatchShare {
  size_t first, count;
};
BatchShare ShareOf(size_t B, const Ranks& ranks) {
  const size_t r = size_t(ranks.rank()), p = size_t(ranks.size());
  return {B * r / p, B * (r + 1) / p - B * r / p};
}

// Sums the ranks' gradients and losses in rank order, each scaled by its share of the batch, so
// that every rank holds the gradient and loss of the whole batch's mean loss.
void SumOverRanks(const Ranks& ranks, double share, std::vector<float>& grads, double& loss) {
  const float scale = float(share);
  for (float& g : grads) g *= scale;
  ranks.SumInRankOrder(grads);
  std::vector<double> losses = {loss * share};
  ranks.SumInRankOrder(losses);
  loss = losses[0];
}

template <class Fn>
auto InArena(int threads, const Fn& fn) {
  tbb::task_arena arena(threads > 0 ? threads : tbb::task_arena::automatic);
  return arena.execute(fn);
}

}  // namespace

RunSummary TrainRun(const TrainConfig& config, const std::string& out_dir, bool resume,
                    const ProgressFn& progress, const Ranks& ranks) {
  const fs::path dir(out_dir);
  const fs::path checkpoint_path = dir / "checkpoint.bin";
  CheckpointState state;
  Corpus corpus;
  int64_t fail_at = -1;
  ranks.Agree([&] {
    ValidateConfig(config);
    if (size_t(config.batch) < size_t(ranks.size())) {
      throw std::invalid_argument("a batch of " + std::to_string(config.batch) +
                                  " windows cannot be split over " +
                                  std::to_string(ranks.size()) +
                                  " ranks (each takes at least one window)");
    }
    fail_at = InjectedFailureStep();
    if (ranks.leader()) {
      if (resume) {
        state = ReadCheckpoint(checkpoint_path.string());
        CheckResumable(config, state.config, checkpoint_path.string());
      } else if (fs::exists(dir / "config.json") || fs::exists(checkpoint_path)) {
        throw std::invalid_argument("run directory " + out_dir +
                                    " already holds a run (resume it, or choose another --out)");
      }
    }
    corpus = LoadCorpus(CorpusPath(config, ""), size_t(config.model.context));
  });

  std::vector<MetricsRow> rows;
  if (ranks.leader()) {
    fs::create_directories(dir);
    WriteFileAtomically((dir / "config.json").string(), nlohmann::json(config).dump(2) + "\n");
    if (resume) rows = ReadMetrics(dir / "metrics.csv", state.step);
  }

  return InArena(config.threads, [&] {
    const size_t B = size_t(config.batch), T = size_t(config.model.context);
    const BatchShare share = ShareOf(B, ranks);
    // Rank 0 evaluates in batches of B, as one process does, so it holds activations for B.
    Gpt model(config.model, config.arm, ranks.leader() ? B : share.count);
    model.SetDenseFormat(ParseDenseFormat(config.precision));
    // Interference in training (docs/harness.md §1.5) corrupts the training batches only: the
    // validation loss and the diagnostics are measured clean.
    const Interference training_interference = ParseInterference(config.interference);
    const auto clean = [&](const auto& evaluate) {
      model.SetInterference({});
      const auto result = evaluate();
      model.SetInterference(training_interference);
      return result;
    };
    model.SetInterference(training_interference);
    AdamState adam;
    int64_t start = 0;
    if (resume) {
      ranks.Agree([&] {
        if (ranks.leader() && state.params.size() != model.params().size()) {
          throw std::runtime_error("checkpoint " + checkpoint_path.string() +
                                   " holds a different number of parameters");
        }
      });
      ranks.Broadcast(&state.step, sizeof(state.step));
      ranks.Broadcast(state.params);
      ranks.Broadcast(state.adam_m);
      ranks.Broadcast(state.adam_v);
      model.params() = state.params;
      adam.m = state.adam_m;
      adam.v = state.adam_v;
      start = state.step;
    } else {
      model.InitParams(InitSeed(config));
    }

    std::vector<uint8_t> batch, inputs(share.count * T), targets(share.count * T);
    std::vector<float> summed_grads;
    double train_sum = 0.0, train_seconds = 0.0, last_val = rows.empty() ? -1.0 : rows.back().val_loss;
    int train_count = 0;
    RunSummary summary;
    const auto run_start = Clock::now();
    for (int64_t step = start; step < config.steps; ++step) {
      if (step == fail_at) {
        throw std::runtime_error("failure injected at step " + std::to_string(step) +
                                 " (LPATTN_FAIL_AT_STEP)");
      }
      const auto step_start = Clock::now();
      TrainBatch(corpus.train, DataSeed(config), uint64_t(step), B, T, batch);
      for (size_t b = 0; b < share.count; ++b) {
        const auto window = batch.begin() + long((share.first + b) * (T + 1));
        std::copy_n(window, T, inputs.begin() + long(b * T));
        std::copy_n(window + 1, T, targets.begin() + long(b * T));
      }
      model.SetFirstWindow(uint64_t(step) * B + share.first);  // the batch's windows, numbered
      double loss = model.Forward(inputs.data(), targets.data(), share.count);
      model.Backward();
      const std::vector<float>* grads = &model.grads();
      if (ranks.size() > 1) {
        summed_grads = model.grads();
        SumOverRanks(ranks, double(share.count) / double(B), summed_grads, loss);
        grads = &summed_grads;
      }
      // Summed over the ranks, the loss and gradient are the same on every rank, so every rank
      // stops at the same step. AdamWStep applies nothing for a non-finite gradient.
      if (!std::isfinite(loss) ||
          !std::isfinite(AdamWStep(config, step, model.tensors(), *grads, model.params(), adam))) {
        summary.diverged_at_step = step + 1;
        break;
      }
      train_seconds += std::chrono::duration<double>(Clock::now() - step_start).count();
      train_sum += loss;
      ++train_count;

      const int64_t done = step + 1;
      const double tokens_per_s = double((done - start) * int64_t(B * T)) / train_seconds;
      const bool last = done == config.steps;
      if ((done % config.eval_every == 0 || last) && ranks.leader()) {
        last_val = clean([&] { return ValidationLoss(model, config, corpus.validation); });
        rows.push_back({done, done * int64_t(B * T), train_sum / train_count, last_val,
                        LearningRate(config, step), tokens_per_s});
        WriteFileAtomically((dir / "metrics.csv").string(), MetricsCsv(rows));
        if (done % config.checkpoint_every == 0 || last) {
          WriteCheckpoint(checkpoint_path.string(), {config, done, model.params(), adam.m, adam.v});
        }
      }
      if (done % config.eval_every == 0 || last) {
        summary.final_train_loss = train_sum / train_count;
        train_sum = 0.0;
        train_count = 0;
      }
      if (progress && ranks.leader()) {
        const double elapsed = std::chrono::duration<double>(Clock::now() - run_start).count();
        progress({int(done), config.steps, loss, last_val, tokens_per_s,
                  elapsed / double(done - start) * double(config.steps - done)});
      }
      summary.tokens_per_s = tokens_per_s;
    }
    const bool diverged = summary.diverged_at_step > 0;
    summary.steps = diverged ? int(summary.diverged_at_step - 1) : config.steps;
    summary.seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
    if (!ranks.leader()) return summary;  // the leader's summary has the losses
    if (!diverged) {  // a diverged model's attention is not a result
      WriteFileAtomically((dir / "attention.json").string(),
                          clean([&] {
                            return AttentionDiagnostics(model, config, corpus.validation);
                          }).dump(2) + "\n");
    }
    summary.final_val_loss = rows.empty() ? 0.0 : rows.back().val_loss;
    if (!rows.empty()) summary.final_train_loss = rows.back().train_loss;
    nlohmann::json j = {{"final_val_loss", summary.final_val_loss},
                        {"final_train_loss", summary.final_train_loss},
                        {"tokens_per_s", summary.tokens_per_s},
                        {"steps", summary.steps},
                        {"seconds", summary.seconds},
                        {"arm", config.arm},
                        {"preset", config.preset},
                        {"seed", config.seed},
                        {"init_seed", InitSeed(config)},
                        {"data_seed", DataSeed(config)},
                        {"tokens", uint64_t(summary.steps) * uint64_t(B * T)},
                        {"threads", config.threads},
                        {"ranks", ranks.size()}};
    if (diverged) {  // steps and tokens above count the steps applied
      j["diverged_at_step"] = summary.diverged_at_step;
      j["diverged_at_tokens"] = j["tokens"];
    }
    WriteFileAtomically((dir / "summary.json").string(), j.dump(2) + "\n");
    return summary;
  });
}

namespace {

// A checkpoint's model with its weights, sized for max_batch windows, under `arm` if given.
// `shape` replaces the checkpoint's model shape when given (another context, rotary positions).
Gpt LoadModel(const std::string& checkpoint_path, const CheckpointState& state,
              const std::string& arm, size_t max_batch, const ModelConfig* shape = nullptr) {
  const ModelConfig& model_config = shape ? *shape : state.config.model;
  // Counted before the model is built: a config that does not match the weights must not
  // first allocate a model of whatever size it names.
  if (state.params.size() != Gpt::ParamCount(model_config, state.config.arm)) {
    throw std::runtime_error("checkpoint " + checkpoint_path +
                             " holds a different number of parameters than its config");
  }
  Gpt model(model_config, state.config.arm, max_batch);
  model.params() = state.params;
  model.SetDenseFormat(ParseDenseFormat(state.config.precision));
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

ContextEvaluation EvaluateAtContext(const std::string& checkpoint_path, const std::string& arm,
                                    const std::string& data, int64_t context, int64_t windows) {
  const CheckpointState state = ReadCheckpoint(checkpoint_path);
  TrainConfig config = state.config;
  const int64_t trained = config.model.context;
  if (context < 1 || windows < 1) {
    throw std::invalid_argument("eval: the context and the window count must be >= 1");
  }
  if (context != trained && config.model.pos != "rope") {
    throw std::invalid_argument(
        "eval: " + checkpoint_path + " was trained with learned positions for a context of " +
        std::to_string(trained) + "; another context needs a model trained with --pos rope");
  }
  config.model.context = int(context);
  config.eval_windows = int(windows);
  ValidateConfig(config);
  const Corpus corpus = LoadCorpus(CorpusPath(config, data), size_t(context));
  return InArena(config.threads, [&] {
    // Rotary positions have no parameters: the trained weights fit a model of any context.
    Gpt model = LoadModel(checkpoint_path, state, arm, size_t(config.batch), &config.model);
    const size_t T = size_t(context), buckets = (T + size_t(trained) - 1) / size_t(trained);
    std::vector<double> loss_sum(buckets, 0.0), loss_count(buckets, 0.0);
    std::vector<std::vector<HeadDiagnostics>> per_layer;
    ContextEvaluation result;
    const auto diagnose = [&] { model.Diagnose(per_layer, size_t(trained)); };
    result.val_loss = ValidationLoss(model, config, corpus.validation, diagnose,
                                     [&](const float* losses, size_t n) {
      for (size_t r = 0; r < n * T; ++r) {
        loss_sum[(r % T) / size_t(trained)] += losses[r];
        loss_count[(r % T) / size_t(trained)] += 1.0;
      }
    });
    result.trained_context = trained;
    result.context = context;
    result.windows = windows;
    result.arm = model.arm().Name();
    result.pos = config.model.pos;
    for (size_t k = 0; k < buckets; ++k) {
      PositionBucket bucket;
      bucket.begin = int64_t(k) * trained;
      bucket.end = std::min<int64_t>(context, int64_t(k + 1) * trained);
      bucket.loss = loss_sum[k] / loss_count[k];
      double rows = 0.0;
      for (const std::vector<HeadDiagnostics>& layer : per_layer) {
        for (const HeadDiagnostics& d : layer) {
          if (k >= d.bucket_rows.size()) continue;
          rows += d.bucket_rows[k];
          bucket.entropy += d.bucket_entropy[k];
          bucket.max_weight += d.bucket_max[k];
        }
      }
      if (rows > 0.0) {
        bucket.entropy /= rows;
        bucket.max_weight /= rows;
      }
      result.buckets.push_back(bucket);
    }
    return result;
  });
}

InterferenceEvaluation EvaluateWithInterference(const std::string& checkpoint_path,
                                                const std::string& arm, const std::string& data,
                                                const Interference& interference) {
  const CheckpointState state = ReadCheckpoint(checkpoint_path);
  TrainConfig config = state.config;
  config.interference = FormatInterference(interference);
  ValidateConfig(config);  // a swap needs batch >= 2, a layer must exist
  const Corpus corpus = LoadCorpus(CorpusPath(config, data), size_t(config.model.context));
  return InArena(config.threads, [&] {
    Gpt model = LoadModel(checkpoint_path, state, arm, size_t(config.batch));
    const bool sink = model.arm().HasSink();
    InterferenceEvaluation e;
    e.arm = model.arm().Name();
    e.interference = config.interference;
    // Abstention: the mean over every layer's heads of the mean abstention per row.
    const auto abstention = [&](const std::vector<std::vector<HeadDiagnostics>>& per_layer) {
      double sum = 0.0, heads = 0.0;
      for (const auto& layer : per_layer) {
        for (const HeadDiagnostics& d : layer) sum += d.abstention / d.rows, heads += 1.0;
      }
      return sum / heads;
    };
    std::vector<std::vector<HeadDiagnostics>> clean, corrupted;
    e.clean_loss = ValidationLoss(model, config, corpus.validation, [&] { model.Diagnose(clean); });
    model.SetInterference(interference);
    e.loss = ValidationLoss(model, config, corpus.validation, [&] { model.Diagnose(corrupted); });
    if (sink) e.abstention_clean = abstention(clean), e.abstention = abstention(corrupted);
    double visible = 0.0, on_corrupted = 0.0, mass = 0.0, rows = 0.0;
    double gate[2] = {0.0, 0.0}, gates[2] = {0.0, 0.0};  // corrupted, clean: sums and counts
    for (size_t l = 0; l < corrupted.size(); ++l) {
      if (!interference.Corrupts(int(l))) continue;
      for (const HeadDiagnostics& d : corrupted[l]) {
        visible += d.visible;
        on_corrupted += d.corrupted_visible;
        mass += d.corrupted_mass;
        rows += d.rows;
        gate[0] += d.gate_corrupted, gates[0] += d.gate_corrupted_count;
        gate[1] += d.gate_clean, gates[1] += d.gate_clean_count;
      }
    }
    e.corrupted_share = visible > 0.0 ? on_corrupted / visible : 0.0;
    e.corrupted_mass = rows > 0.0 ? mass / rows : 0.0;
    if (gates[0] > 0.0) e.gate_corrupted = gate[0] / gates[0];
    if (gates[1] > 0.0) e.gate_clean = gate[1] / gates[1];
    return e;
  });
}

nlohmann::json ContextEvaluationJson(const ContextEvaluation& e) {
  nlohmann::json buckets = nlohmann::json::array();
  for (const PositionBucket& b : e.buckets) {
    buckets.push_back({{"begin", b.begin}, {"end", b.end}, {"loss", b.loss},
                       {"entropy", b.entropy}, {"max_weight", b.max_weight}});
  }
  return {{"arm", e.arm},         {"pos", e.pos},     {"trained_context", e.trained_context},
          {"context", e.context}, {"windows", e.windows}, {"val_loss", e.val_loss},
          {"buckets", buckets}};
}

nlohmann::json InterferenceEvaluationJson(const InterferenceEvaluation& e) {
  const auto optional = [](const std::optional<double>& x) {
    return x ? nlohmann::json(*x) : nlohmann::json(nullptr);
  };
  return {{"arm", e.arm},
          {"interference", e.interference},
          {"clean_loss", e.clean_loss},
          {"loss", e.loss},
          {"increase", e.loss - e.clean_loss},
          {"corrupted_share", e.corrupted_share},
          {"corrupted_mass", e.corrupted_mass},
          {"gate_corrupted", optional(e.gate_corrupted)},
          {"gate_clean", optional(e.gate_clean)},
          {"abstention_clean", optional(e.abstention_clean)},
          {"abstention", optional(e.abstention)}};
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
