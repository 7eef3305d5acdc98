// AdamW, the learning-rate schedule and gradient clipping (docs/harness.md §1).
#include "harness/train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "harness/train/adamw_update.h"
#include "tbb/blocked_range.h"
#include "tbb/parallel_for.h"
#include "tbb/partitioner.h"

namespace lpattn::harness {
namespace {

// A fixed-size piece of one tensor: the unit of parallel work, independent of the thread
// count, so sums and updates come out the same whatever the number of threads.
struct Chunk {
  size_t begin, end;
  bool decay;
};
constexpr size_t kChunk = 1 << 14;

std::vector<Chunk> Chunks(const std::vector<ParamTensor>& tensors) {
  std::vector<Chunk> chunks;
  for (const ParamTensor& t : tensors) {
    for (size_t i = t.offset; i < t.offset + t.size; i += kChunk) {
      chunks.push_back({i, std::min(i + kChunk, t.offset + t.size), t.decay});
    }
  }
  return chunks;
}

template <class Body>
void ForChunks(size_t count, const Body& body) {
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, count, 1),
      [&](const tbb::blocked_range<size_t>& r) {
        for (size_t c = r.begin(); c != r.end(); ++c) body(c);
      },
      tbb::simple_partitioner());
}

}  // namespace

float LearningRate(const TrainConfig& c, int64_t step) {
  if (step < c.warmup_steps) return c.lr * float(step + 1) / float(c.warmup_steps);
  const double decay_steps = std::max<int64_t>(1, c.steps - c.warmup_steps);
  const double progress = std::min(1.0, double(step - c.warmup_steps) / decay_steps);
  const double floor = double(c.min_lr_fraction) * c.lr;
  return float(floor + 0.5 * (c.lr - floor) * (1.0 + std::cos(M_PI * progress)));
}

double GradientNorm(const std::vector<float>& grads) {
  const size_t chunks = (grads.size() + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks, 0.0);
  ForChunks(chunks, [&](size_t c) {
    // Four interleaved partial sums: independent adds the compiler can keep in vector lanes.
    double lanes[4] = {0.0, 0.0, 0.0, 0.0};
    const float* g = grads.data();
    const size_t end = std::min(grads.size(), (c + 1) * kChunk);
    size_t i = c * kChunk;
    for (; i + 4 <= end; i += 4) {
      for (size_t j = 0; j < 4; ++j) lanes[j] += double(g[i + j]) * g[i + j];
    }
    for (; i < end; ++i) lanes[0] += double(g[i]) * g[i];
    partial[c] = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  });
  double sum = 0.0;  // in chunk order: the same for every thread count
  for (double p : partial) sum += p;
  return std::sqrt(sum);
}

double AdamWStep(const TrainConfig& c, int64_t step, const std::vector<ParamTensor>& tensors,
                 const std::vector<float>& grads, std::vector<float>& params, AdamState& state) {
  if (state.m.size() != params.size()) state.m.assign(params.size(), 0.0f);
  if (state.v.size() != params.size()) state.v.assign(params.size(), 0.0f);
  const double norm = GradientNorm(grads);
  if (!std::isfinite(norm)) return norm;
  const float clip = norm > c.grad_clip ? float(c.grad_clip / norm) : 1.0f;
  const float lr = LearningRate(c, step);
  const float bias1 = 1.0f - std::pow(c.beta1, float(step + 1));
  const float bias2 = 1.0f - std::pow(c.beta2, float(step + 1));
  const std::vector<Chunk> chunks = Chunks(tensors);
  const AdamConstants k{c.beta1, c.beta2, c.eps, lr, bias1, bias2, clip};
  ForChunks(chunks.size(), [&](size_t i) {
    const Chunk& chunk = chunks[i];
    AdamWUpdateSimd(k, chunk.decay ? c.weight_decay : 0.0f, chunk.end - chunk.begin,
                    grads.data() + chunk.begin, params.data() + chunk.begin,
                    state.m.data() + chunk.begin, state.v.data() + chunk.begin);
  });
  return norm;
}

}  // namespace lpattn::harness
