// Throughput of one training step of the harness's GPT (forward, backward, AdamW):
//   train_step/<preset>/arm:<arm>[/precision:bf16]/threads:<n>
// Random byte tokens (speed does not depend on the text), the preset's batch and context, the
// step run in a TBB arena of n threads as `lpattn train --threads n` runs it. Counters:
// tokens_per_s, and GFLOPS / peak_frac for the model FLOPs of docs/performance.md (6 per
// parameter per token for the dense products, plus the attention products: 2 D for q.k and
// 2 D for p v per visible pair and head, forward, and 2.5 times that backward).
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <tbb/task_arena.h>

#include "bench/peak_fma.h"
#include "harness/model/config.h"
#include "harness/model/model.h"
#include "harness/train/data.h"
#include "harness/train/optimizer.h"

namespace lpattn::bench {
namespace {

// FLOPs of one step: 6 per matrix weight per token (forward 2, backward 4; biases, norms and
// the position table are not products), and the causal attention of every layer and head.
double StepFlops(const harness::TrainConfig& c) {
  const double C = c.model.n_embd, T = c.model.context, V = c.model.vocab;
  const double tokens = double(c.batch) * T;
  const double matrix_weights = c.model.n_layer * 12.0 * C * C + V * C;  // the head is tied
  const double pairs = T * (T + 1) / 2;  // visible (query, key) pairs of one causal window
  const double attention = 3.5 * 4.0 * C * pairs * c.batch * c.model.n_layer;
  return 6.0 * matrix_weights * tokens + attention;
}

void BM_TrainStep(benchmark::State& state, const std::string& preset, const std::string& arm,
                  const std::string& precision) {
  const int threads = static_cast<int>(state.range(0));
  harness::TrainConfig config = harness::PresetConfig(preset);
  config.arm = arm;
  config.precision = precision;
  const size_t B = size_t(config.batch), T = size_t(config.model.context);
  std::vector<uint8_t> inputs(B * T), targets(B * T);
  for (size_t i = 0; i < B * T; ++i) {
    inputs[i] = uint8_t(harness::SplitMix64(1, 0, i));
    targets[i] = uint8_t(harness::SplitMix64(1, 1, i));
  }
  tbb::task_arena arena(threads);
  arena.execute([&] {
    try {
      harness::Gpt model(config.model, config.arm, B);
      model.SetDenseFormat(harness::ParseDenseFormat(config.precision));
      model.InitParams(config.seed);
      harness::AdamState adam;
      int64_t step = 0;
      for (auto _ : state) {
        model.Forward(inputs.data(), targets.data(), B);
        model.Backward();
        harness::AdamWStep(config, step++, model.tensors(), model.grads(), model.params(), adam);
      }
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
    }
  });
  const double steps = static_cast<double>(state.iterations());
  const double gflop = StepFlops(config) * 1e-9 * steps;
  state.counters["tokens_per_s"] = benchmark::Counter(steps * double(B * T), benchmark::Counter::kIsRate);
  state.counters["GFLOPS"] = benchmark::Counter(gflop, benchmark::Counter::kIsRate);
  state.counters["peak_frac"] =
      benchmark::Counter(gflop / MeasuredPeakGflops(threads), benchmark::Counter::kIsRate);
}

const bool kRegistered = [] {
  // tiny and small in fp32; on small, exact with the low-precision backward (docs/math.md §4.2)
  // and the whole model in bf16 mixed precision (docs/harness.md §1.1), with fp32 and with bf16
  // attention.
  struct Row {
    const char *preset, *arm, *precision;
  };
  for (const Row& row : {Row{"tiny", "exact", "fp32"}, Row{"small", "exact", "fp32"},
                         Row{"small", "exact+bwd=bf16", "fp32"},
                         Row{"small", "exact+qk=bf16:pv=bf16:p=bf16:bwd=bf16", "fp32"},
                         Row{"small", "exact", "bf16"},
                         Row{"small", "exact+qk=bf16:pv=bf16:p=bf16:bwd=bf16", "bf16"}}) {
    const std::string name = std::string("train_step/") + row.preset + "/arm:" + row.arm +
                               (std::string(row.precision) == "fp32"
                                    ? ""
                                    : std::string("/precision:") + row.precision);
    benchmark::RegisterBenchmark(name.c_str(), BM_TrainStep, std::string(row.preset),
                                 std::string(row.arm), std::string(row.precision))
        ->ArgName("threads")
        ->Arg(1)
        ->Arg(2)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();

}  // namespace
}  // namespace lpattn::bench
