// Runs: training a model under one arm into a run directory, and evaluating a checkpoint
// (optionally under another arm: the evaluation swap). docs/harness.md §1-§3.
#ifndef LPATTN_HARNESS_TRAIN_TRAINER_H_
#define LPATTN_HARNESS_TRAIN_TRAINER_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/common/ranks.h"
#include "harness/model/config.h"
#include "harness/model/interference.h"

namespace lpattn::harness {

struct Progress {
  int step = 0, steps = 0;
  double train_loss = 0.0;
  double val_loss = -1.0;  // the latest evaluation, < 0 before the first
  double tokens_per_s = 0.0;
  double eta_s = 0.0;
};
using ProgressFn = std::function<void(const Progress&)>;

struct RunSummary {
  double final_val_loss = 0.0;
  double final_train_loss = 0.0;
  double tokens_per_s = 0.0;  // training tokens per second of training wall time
  int steps = 0;
  double seconds = 0.0;
  // > 0: the run diverged, its loss or gradient not finite at this step (1-based; docs/harness.md
  // §3.2), and stopped there with its last finite weights; steps is then the steps applied.
  int64_t diverged_at_step = 0;
};

// Trains `config` into out_dir: config.json, metrics.csv (step, tokens, train_loss, val_loss,
// lr, tokens_per_s), summary.json, checkpoint.bin, and attention.json (the final model's
// attention diagnostics on the validation windows: zero fraction, first-token mass, sink rate,
// abstention; overall and per layer and head). With resume, continues from
// out_dir/checkpoint.bin (whose config must match) and ends with the numbers an uninterrupted
// run would have. Without resume, refuses an out_dir that already holds a run. Throws
// std::invalid_argument / std::runtime_error with a clear message before writing anything.
//
// Over several ranks (docs/harness.md §3.7) the run is data-parallel: rank r takes windows
// [B r / P, B (r + 1) / P) of every step's batch, the gradients (each scaled by its share of
// the batch) are summed in rank order, and every rank takes the same AdamW step. Rank 0 reads
// the checkpoint it resumes from (and sends it to the others), evaluates, and writes every file;
// progress is reported there. The environment variable LPATTN_FAIL_AT_STEP=<rank>:<step> makes
// that rank of the job (Ranks::World()) throw at the start of that step (0-based) of a run:
// how the tests end a job mid-run.
RunSummary TrainRun(const TrainConfig& config, const std::string& out_dir, bool resume,
                    const ProgressFn& progress, const Ranks& ranks = Ranks::Self());

// Validation loss of a checkpoint on its config's data (or `data` if not empty), with the
// attention arm it was trained with or, if `arm` is not empty, with that arm.
double EvaluateCheckpoint(const std::string& checkpoint_path, const std::string& arm,
                          const std::string& data);

// A checkpoint evaluated at a context other than its training context (docs/harness.md §3.8),
// on `windows` validation windows of that length: the loss per position bucket (positions
// [k T0, (k + 1) T0), T0 the training context) and the attention's dispersion in each bucket
// of row lengths, means over layers, heads and rows: the entropy (nats) of a row's |weight|
// shares, and its largest share.
struct PositionBucket {
  int64_t begin = 0, end = 0;  // positions (0-based); a row at position i sees i + 1 keys
  double loss = 0.0, entropy = 0.0, max_weight = 0.0;
};
struct ContextEvaluation {
  int64_t trained_context = 0, context = 0, windows = 0;
  std::string arm, pos;
  double val_loss = 0.0;
  std::vector<PositionBucket> buckets;
};
// A context other than the trained one needs rotary positions (a learned wpe has exactly the
// trained context's rows); throws std::invalid_argument otherwise, or for context < 1 or
// windows < 1, before reading the corpus.
ContextEvaluation EvaluateAtContext(const std::string& checkpoint_path, const std::string& arm,
                                    const std::string& data, int64_t context, int64_t windows);

// A checkpoint evaluated clean and with interference injected into its value reads
// (docs/harness.md §1.5), on the run's validation windows. Means over the corrupted layers'
// heads and rows: the attention mass (share of |w|, a sink's mass included in the whole) on
// corrupted value positions, against the share of positions corrupted; the value gates on
// corrupted and clean positions (gate arms); and over every layer, the sink's abstention mass
// clean and under interference (sink arms).
struct InterferenceEvaluation {
  std::string arm, interference;
  double clean_loss = 0.0, loss = 0.0;  // loss - clean_loss: the increase
  double corrupted_share = 0.0;          // of the value rows of the corrupted layers
  double corrupted_mass = 0.0;
  std::optional<double> gate_corrupted, gate_clean;
  std::optional<double> abstention_clean, abstention;
};
InterferenceEvaluation EvaluateWithInterference(const std::string& checkpoint_path,
                                                const std::string& arm, const std::string& data,
                                                const Interference& interference);

// The JSON `lpattn eval --context/--interference --out` and a sweep's evaluations write:
// {"arm", "pos", "trained_context", "context", "windows", "val_loss", "buckets": [{"begin",
// "end", "loss", "entropy", "max_weight"}]} and {"arm", "interference", "clean_loss", "loss",
// "increase", "corrupted_share", "corrupted_mass", "gate_corrupted", "gate_clean",
// "abstention_clean", "abstention"} (null where an arm has no gate or sink).
nlohmann::json ContextEvaluationJson(const ContextEvaluation& e);
nlohmann::json InterferenceEvaluationJson(const InterferenceEvaluation& e);

// The full-sequence forward's logits at every position of each prompt (byte tokens, 1 to
// context of them), under a checkpoint's weights with its own arm or, if `arm` is not empty,
// that one: [prompt][position * vocab + token]. What an engine serving the checkpoint must
// reproduce (examples/engine; docs/harness.md §3.6). Throws std::invalid_argument naming the
// prompt that is empty or longer than the context.
std::vector<std::vector<float>> PrefixLogits(const std::string& checkpoint_path,
                                             const std::string& arm,
                                             const std::vector<std::string>& prompts);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_TRAIN_TRAINER_H_
