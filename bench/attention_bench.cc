// Throughput of the exact attention kernels and of an unfused baseline:
//   <kernel>_<pass>/N:<T>/D:<D>/H:<H>/causal:<0|1>/threads:<n>
// B = 1, Tq = Tk = N, inputs N(0, 1) in [B, H, T, D]. `threads` is AttentionOptions::threads
// (a private TBB arena of that size), timing is wall-clock, and the counters follow
// docs/performance.md: GFLOPS = useful FLOPs / wall time, peak_frac = GFLOPS / the FMA peak of
// the same number of threads (bench/peak_fma.h).
//
// Over 500 lines on purpose: each benchmark family (exact, prepared K/V, K-interval,
// thresholded, value gates, the unfused baseline) sits beside its FLOP or byte count, and the
// one registration function at the end names them all, so the list of benchmark names reads
// in one place.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <utility>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "bench/peak_bw.h"
#include "bench/peak_fma.h"
#include "bench/peak_native.h"
#include "kernels/attention.h"
#include "kernels/kinterval.h"
#include "kernels/kv_cache.h"
#include "kernels/prepared_kv.h"
#include "kernels/threshold.h"
#include "kernels/value_gate.h"

namespace lpattn::bench {
namespace {

constexpr int64_t kBatch = 1;
constexpr int64_t kHeads = 8;

// What a benchmark's arguments (N, D, H, causal, threads) describe.
struct BenchConfig {
  AttentionShape shape;
  AttentionOptions options;
};

BenchConfig ConfigOf(const benchmark::State& state) {
  BenchConfig config;
  const int64_t tokens = state.range(0);
  config.shape.batch = kBatch;
  config.shape.heads = state.range(2);
  config.shape.kv_heads = state.range(2);
  config.shape.q_len = tokens;
  config.shape.kv_len = tokens;
  config.shape.head_dim = state.range(1);
  config.options.causal = state.range(3) != 0;
  config.options.threads = static_cast<int>(state.range(4));
  return config;
}

// (i, j) pairs that are computed: all of them, or with the bottom-right aligned causal mask
// (key j visible to query i iff j <= i + kv_len - q_len) exactly the visible ones, which for
// q_len == kv_len == T is T (T + 1) / 2.
double VisiblePairs(const AttentionShape& shape, bool causal) {
  if (!causal) return static_cast<double>(shape.q_len) * static_cast<double>(shape.kv_len);
  double pairs = 0.0;
  for (int64_t i = 0; i < shape.q_len; ++i) {
    const int64_t visible =
        std::clamp<int64_t>(i + shape.kv_len - shape.q_len + 1, 0, shape.kv_len);
    pairs += static_cast<double>(visible);
  }
  return pairs;
}

// Useful FLOPs of one forward: 2 D for q.k and 2 D for p v per visible pair, per head.
double ForwardFlops(const AttentionShape& shape, bool causal) {
  return 4.0 * static_cast<double>(shape.batch * shape.heads * shape.head_dim) *
         VisiblePairs(shape, causal);
}

// The FlashAttention-2 recompute backward counts as 2.5 forwards.
double BackwardFlops(const AttentionShape& shape, bool causal) {
  return 2.5 * ForwardFlops(shape, causal);
}

// GFLOPS = flops_per_iteration * iterations / real time (UseRealTime makes the rate's
// denominator the wall time); peak_frac is the same rate over the measured peak.
void SetFlopCounters(benchmark::State& state, double flops_per_iteration, int threads) {
  const double gflop = flops_per_iteration * 1e-9 * static_cast<double>(state.iterations());
  state.counters["GFLOPS"] = benchmark::Counter(gflop, benchmark::Counter::kIsRate);
  state.counters["peak_frac"] =
      benchmark::Counter(gflop / MeasuredPeakGflops(threads), benchmark::Counter::kIsRate);
}

// The forward's format peak (docs/performance.md §2): the peak loop of the instruction family
// its score product runs on, as lpattn info's products say (AMX tiles for bf16 or int8 Q and K
// with a head dimension they take, else the int16 VNNI tile for int8), or none (fp32 FMA, the
// peak_frac counter's own).
// The backward's (`backward`): AMX bf16 tiles for bwd=bf16 with dP in bf16 (docs/math.md §4.2).
std::string FormatPeakFamily(const Precision& precision, int64_t dim, bool backward = false) {
  if (precision.path != ComputePath::kNative) return "";
  const DispatchInfo info = GetDispatchInfo();
  const auto enabled = [&](const char* name) {
    for (const NativePathInfo& path : info.native) {
      if (path.name == name) return path.enabled;
    }
    return false;
  };
  if (backward) {
    const bool bf16 = precision.bwd == quant::Format::kBf16 &&
                      precision.BackwardDpFormat() == quant::Format::kBf16;
    return bf16 && dim % 32 == 0 && enabled("amx_bf16") && enabled("avx512_bf16")
               ? "peak_amx_bf16"
               : "";
  }
  const bool fp8 = precision.qk == quant::Format::kFp8E4M3 || precision.qk == quant::Format::kFp8E5M2;
  if ((precision.qk == quant::Format::kBf16 || precision.qk == quant::Format::kFp16 || fp8) &&
      dim % 32 == 0 && enabled("amx_bf16") && !precision.smooth_k &&
      (!fp8 || precision.granularity != quant::Granularity::kChannel)) {
    return "peak_amx_bf16";  // fp16's split product does four bf16 products per fp16 one
  }
  if (precision.qk == quant::Format::kInt8 && !precision.smooth_k &&
      precision.granularity != quant::Granularity::kChannel) {
    if (dim % 64 == 0 && enabled("amx_int8")) return "peak_amx_int8";
    const bool quads = dim % 4 == 0;  // the u8 x s8 tile, else the int16 pair tile
    if (info.chosen == "AVX3" && enabled("avx512_vnni")) return quads ? "peak_vnni" : "peak_vnni16";
    if (info.chosen == "AVX2" && enabled("avx_vnni") && quads) return "peak_avxvnni";
  }
  return "";
}

// format_peak_frac: GFLOPS over the format peak of the same thread count, when there is one.
void SetFormatPeakCounter(benchmark::State& state, const Precision& precision, int64_t dim,
                          double flops_per_iteration, int threads, bool backward = false) {
  const std::string family = FormatPeakFamily(precision, dim, backward);
  if (family.empty()) return;
  const double peak = MeasuredNativePeak(family, threads);
  if (peak <= 0.0) return;
  const double gflop = flops_per_iteration * 1e-9 * static_cast<double>(state.iterations());
  state.counters["format_peak_frac"] = benchmark::Counter(gflop / peak, benchmark::Counter::kIsRate);
}

std::vector<float> RandomNormal(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values) value = normal(rng);
  return values;
}

size_t QElements(const AttentionShape& s) {
  return static_cast<size_t>(s.batch * s.heads * s.q_len * s.head_dim);
}
size_t KvElements(const AttentionShape& s) {
  return static_cast<size_t>(s.batch * s.kv_heads * s.kv_len * s.head_dim);
}

// Q, K, V (and O, lse for the forward's outputs) in [B, H, T, D].
struct ForwardBuffers {
  explicit ForwardBuffers(const AttentionShape& s)
      : q(RandomNormal(QElements(s), 1)),
        k(RandomNormal(KvElements(s), 2)),
        v(RandomNormal(KvElements(s), 3)),
        o(QElements(s)),
        lse(static_cast<size_t>(s.batch * s.heads * s.q_len)),
        q_strides(ContiguousBHTD(s.heads, s.q_len, s.head_dim)),
        kv_strides(ContiguousBHTD(s.kv_heads, s.kv_len, s.head_dim)) {}

  ForwardArgs Args() {
    return {{q.data(), q_strides},
            {k.data(), kv_strides},
            {v.data(), kv_strides},
            {o.data(), q_strides},
            lse.data()};
  }

  std::vector<float> q, k, v, o, lse;
  Strides q_strides, kv_strides;
};

// precision: docs/math.md §4's operand formats (default fp32).
void BM_ExactForward(benchmark::State& state, const Precision& precision = {}) {
  BenchConfig config = ConfigOf(state);
  config.options.precision = precision;
  ForwardBuffers buffers(config.shape);
  const ForwardArgs args = buffers.Args();
  for (auto _ : state) {
    try {
      ExactForward(config.shape, config.options, args);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      break;
    }
  }
  SetFlopCounters(state, ForwardFlops(config.shape, config.options.causal), config.options.threads);
  SetFormatPeakCounter(state, precision, config.shape.head_dim,
                       ForwardFlops(config.shape, config.options.causal), config.options.threads);
}

// K and V prepared once, untimed (an engine's KV cache); the forward reads them as stored.
// The counter kv_bytes is the prepared storage (fp32 K and V: 8 bytes per element pair).
void BM_PreparedForward(benchmark::State& state, const Precision& precision) {
  BenchConfig config = ConfigOf(state);
  config.options.precision = precision;
  ForwardBuffers buffers(config.shape);
  const ForwardArgs args = buffers.Args();
  std::unique_ptr<PreparedKv> kv;
  try {
    kv = std::make_unique<PreparedKv>(config.shape, precision, args.k, args.v,
                                      config.options.threads);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) ExactForward(config.shape, config.options, args.q, *kv, args.o, args.lse);
  SetFlopCounters(state, ForwardFlops(config.shape, config.options.causal), config.options.threads);
  SetFormatPeakCounter(state, precision, config.shape.head_dim,
                       ForwardFlops(config.shape, config.options.causal), config.options.threads);
  state.counters["kv_bytes"] = double(kv->StorageBytes());
}

// Decode's counters for a call that reads `bytes` of keys and values: GBps, and bw_frac against
// peak_bw of the same thread count in the same run.
void SetDecodeCounters(benchmark::State& state, double bytes, int threads) {
  const double gigabytes = bytes * 1e-9;
  state.counters["GBps"] =
      benchmark::Counter(gigabytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bw_frac"] = benchmark::Counter(gigabytes / MeasuredPeakBandwidth(threads),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["kv_bytes"] = bytes;
}

// Causal attention on `threads` threads (0: the caller's arena).
AttentionOptions CausalOptions(int threads) {
  AttentionOptions options;
  options.causal = true;
  options.threads = threads;
  return options;
}

// exact_decode*: q_len new queries (1; 4 and 16 for speculative decoding) against kv_len keys
// held in a PreparedKv of the cache's format, batch 1, causal (docs/performance.md §1). A call
// reads the cache once: GBps counts the bytes it holds per second, bw_frac divides them by
// peak_bw of the same thread count in the same run.
void BM_Decode(benchmark::State& state, AttentionShape shape, Precision precision, int threads) {
  AttentionOptions options = CausalOptions(threads);
  options.precision = precision;
  ForwardBuffers buffers(shape);
  const ForwardArgs args = buffers.Args();
  std::unique_ptr<PreparedKv> kv;
  try {
    kv = std::make_unique<PreparedKv>(shape, precision, args.k, args.v, threads);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) ExactForward(shape, options, args.q, *kv, args.o, args.lse);
  SetDecodeCounters(state, double(kv->StorageBytes()), threads);
}

// exact_decode_cache: the same step against a KvCache (kernels/kv_cache.h) of the format,
// filled with kv_len tokens: an engine's path, with every 8-bit side per token (int8 V as byte
// codes decoded per key tile, not the per-channel integer P V of exact_decode's int8).
// exact_decode_paged: the cache paged in blocks of block_size tokens (layout:head, the
// default, or layout:token, vLLM's flash layout), the sequence's blocks scattered over the
// pool in reverse order, or shuffled (order:random, a fixed seed) as an engine's free list
// leaves them. kv_bytes counts the tokens' rows, scales and sums, not the pool's padding.
// A cache of one slot in `format` (paged in blocks of block_size, its blocks in reverse or
// shuffled order over the pool, when block_size > 0) holding args' kv_len keys and values.
KvCache FilledCache(const AttentionShape& shape, quant::Format format, int64_t block_size,
                    PagedLayout layout, bool random_order, const ForwardArgs& args) {
  KvCacheConfig config{1, shape.kv_heads, shape.head_dim, shape.kv_len, format, format};
  config.block_size = block_size;
  config.blocks = block_size > 0 ? (shape.kv_len + block_size - 1) / block_size : 0;
  config.layout = layout;
  KvCache cache(config);
  if (block_size > 0) {
    std::vector<int32_t> table(size_t(config.blocks));
    for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(table.size() - 1 - i);
    if (random_order) std::shuffle(table.begin(), table.end(), std::mt19937(1));
    cache.SetBlockTable(0, table.data(), config.blocks);
  }
  cache.Append(0, shape.kv_len, args.k, args.v);
  return cache;
}

void BM_DecodeCache(benchmark::State& state, AttentionShape shape, quant::Format format,
                    Precision base, int threads, int64_t block_size, PagedLayout layout,
                    bool random_order) {
  AttentionOptions options = CausalOptions(threads);
  ForwardBuffers buffers(shape);
  const ForwardArgs args = buffers.Args();
  const KvCache cache = FilledCache(shape, format, block_size, layout, random_order, args);
  options.precision = CachePrecision(cache.config(), base);
  for (auto _ : state) ExactForward(shape, options, args.q, cache, args.o, args.lse);
  // The tokens' bytes: a contiguous cache's of the same length (a pool's padding is not read).
  KvCacheConfig tokens = cache.config();
  tokens.block_size = tokens.blocks = 0;
  SetDecodeCounters(state, double(KvCache(tokens).StorageBytes()), threads);
}

// exact_window_{fwd,bwd}: causal self-attention with a sliding window of W keys (docs/math.md
// §1.5); GFLOPS count the visible pairs only (each query's last min(i + 1, W) keys), so they
// read against exact_fwd's and exact_bwd's at the same N (docs/performance.md §1).
void BM_Window(benchmark::State& state, AttentionShape shape, int64_t window, bool backward,
               int threads) {
  AttentionOptions options = CausalOptions(threads);
  options.window = window;
  ForwardBuffers buffers(shape);
  const ForwardArgs args = buffers.Args();
  std::vector<float> d_o = RandomNormal(QElements(shape), 4);
  std::vector<float> dq(QElements(shape)), dk(KvElements(shape)), dv(KvElements(shape));
  BackwardArgs back;
  back.q = args.q;
  back.k = args.k;
  back.v = args.v;
  back.o = args.o;
  back.d_o = {d_o.data(), buffers.q_strides};
  back.lse = args.lse;
  back.dq = {dq.data(), buffers.q_strides};
  back.dk = {dk.data(), buffers.kv_strides};
  back.dv = {dv.data(), buffers.kv_strides};
  ExactForward(shape, options, args);
  for (auto _ : state) {
    if (backward) {
      ExactBackward(shape, options, back);
    } else {
      ExactForward(shape, options, args);
    }
  }
  double pairs = 0.0;
  for (int64_t i = 0; i < shape.q_len; ++i) pairs += double(std::min(i + 1, window));
  const double flops = 4.0 * double(shape.batch * shape.heads * shape.head_dim) * pairs;
  SetFlopCounters(state, backward ? 2.5 * flops : flops, threads);
}

// One untimed forward provides O and lse; only ExactBackward is timed.
void BM_ExactBackward(benchmark::State& state, const Precision& precision = {}) {
  BenchConfig config = ConfigOf(state);
  config.options.precision = precision;
  const AttentionShape& s = config.shape;
  ForwardBuffers forward(s);
  std::vector<float> d_o = RandomNormal(QElements(s), 4);
  std::vector<float> dq(QElements(s)), dk(KvElements(s)), dv(KvElements(s));
  try {
    ExactForward(s, config.options, forward.Args());
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  BackwardArgs args;
  args.q = {forward.q.data(), forward.q_strides};
  args.k = {forward.k.data(), forward.kv_strides};
  args.v = {forward.v.data(), forward.kv_strides};
  args.o = {forward.o.data(), forward.q_strides};
  args.d_o = {d_o.data(), forward.q_strides};
  args.lse = forward.lse.data();
  args.dq = {dq.data(), forward.q_strides};
  args.dk = {dk.data(), forward.kv_strides};
  args.dv = {dv.data(), forward.kv_strides};
  for (auto _ : state) {
    try {
      ExactBackward(s, config.options, args);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      break;
    }
  }
  SetFlopCounters(state, BackwardFlops(s, config.options.causal), config.options.threads);
  SetFormatPeakCounter(state, precision, s.head_dim, BackwardFlops(s, config.options.causal),
                       config.options.threads, true);
}

// ---- the unfused baseline ------------------------------------------------------------------

// One head, in three passes over a materialised q_len x kv_len score matrix, the way attention
// is written without fusion: S = scale Q K^T, softmax by rows in place, O = P V. Plain loops
// whose inner dimension is contiguous and free of reductions, so -O3 vectorises them; the
// compiler builds an x86-64-v3 (AVX2 + FMA) clone next to the baseline one and the loader
// picks the one this CPU runs.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
void NaiveHeadForward(const float* q, const float* k, const float* v, float* o, int64_t q_len,
                      int64_t kv_len, int64_t dim, float scale, bool causal) {
  const auto visible = [&](int64_t i) {
    return causal ? std::clamp<int64_t>(i + kv_len - q_len + 1, 0, kv_len) : kv_len;
  };
  // K^T, so that a row of S is a sum of axpys over contiguous memory.
  const std::unique_ptr<float[]> kt(new float[static_cast<size_t>(dim * kv_len)]);
  for (int64_t j = 0; j < kv_len; ++j) {
    for (int64_t d = 0; d < dim; ++d) kt[d * kv_len + j] = k[j * dim + d];
  }
  const std::unique_ptr<float[]> scores(new float[static_cast<size_t>(q_len * kv_len)]);

  for (int64_t i = 0; i < q_len; ++i) {
    float* row = scores.get() + i * kv_len;
    const int64_t n = visible(i);
    std::fill(row, row + n, 0.0f);
    for (int64_t d = 0; d < dim; ++d) {
      const float qd = scale * q[i * dim + d];
      const float* kt_d = kt.get() + d * kv_len;
      for (int64_t j = 0; j < n; ++j) row[j] += qd * kt_d[j];
    }
  }

  for (int64_t i = 0; i < q_len; ++i) {
    float* row = scores.get() + i * kv_len;
    const int64_t n = visible(i);
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) max = std::max(max, row[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      row[j] = std::exp(row[j] - max);
      sum += row[j];
    }
    const float inv = n > 0 ? 1.0f / sum : 0.0f;
    for (int64_t j = 0; j < n; ++j) row[j] *= inv;
  }

  for (int64_t i = 0; i < q_len; ++i) {
    const float* row = scores.get() + i * kv_len;
    float* o_i = o + i * dim;
    std::fill(o_i, o_i + dim, 0.0f);
    const int64_t n = visible(i);
    for (int64_t j = 0; j < n; ++j) {
      const float p = row[j];
      const float* v_j = v + j * dim;
      for (int64_t d = 0; d < dim; ++d) o_i[d] += p * v_j[d];
    }
  }
}

// Dense [B, H, T, D] tensors with H == kv_heads; heads run in parallel in an arena of
// `threads`, as the kernels do with AttentionOptions::threads.
void NaiveForward(const AttentionShape& s, bool causal, int threads, const float* q, const float* k,
                  const float* v, float* o) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const int64_t q_head = s.q_len * s.head_dim;
  const int64_t kv_head = s.kv_len * s.head_dim;
  tbb::task_arena arena(threads);
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, s.batch * s.heads, 1),
                      [&](const tbb::blocked_range<int64_t>& heads) {
                        for (int64_t h = heads.begin(); h < heads.end(); ++h) {
                          NaiveHeadForward(q + h * q_head, k + h * kv_head, v + h * kv_head,
                                           o + h * q_head, s.q_len, s.kv_len, s.head_dim, scale,
                                           causal);
                        }
                      });
  });
}

void BM_NaiveForward(benchmark::State& state) {
  const BenchConfig config = ConfigOf(state);
  ForwardBuffers buffers(config.shape);
  for (auto _ : state) {
    NaiveForward(config.shape, config.options.causal, config.options.threads, buffers.q.data(),
                 buffers.k.data(), buffers.v.data(), buffers.o.data());
    benchmark::DoNotOptimize(buffers.o.data());
    benchmark::ClobberMemory();
  }
  SetFlopCounters(state, ForwardFlops(config.shape, config.options.causal), config.options.threads);
}

// K-interval (docs/math.md §2): the forward's statistics pass and the backward's terms pass recompute
// score tiles, but the FLOPs counted are the same useful ones as exact_fwd's and exact_bwd's,
// so GFLOPS compare the kernels' speed directly.
struct KIntervalBuffers {
  KIntervalBuffers(const AttentionShape& s)
      : forward(s), m(forward.lse.size()), R(m.size()), Z(m.size()), lse_exact(m.size()),
        argmax(m.size()), argmin(m.size()) {}
  KIntervalSaved Saved() {
    return {m.data(), R.data(), Z.data(), lse_exact.data(), argmax.data(), argmin.data()};
  }
  KIntervalForwardArgs Args() {
    const ForwardArgs exact = forward.Args();
    return {exact.q, exact.k, exact.v, exact.o, Saved()};
  }
  ForwardBuffers forward;
  std::vector<float> m, R, Z, lse_exact;
  std::vector<int32_t> argmax, argmin;
};

void BM_KIntervalForwardAt(benchmark::State& state, const KIntervalOptions& kint,
                           const Precision& precision) {
  BenchConfig config = ConfigOf(state);
  config.options.precision = precision;
  KIntervalBuffers buffers(config.shape);
  const KIntervalForwardArgs args = buffers.Args();
  for (auto _ : state) {
    try {
      KIntervalForward(config.shape, config.options, kint, args);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      break;
    }
  }
  SetFlopCounters(state, ForwardFlops(config.shape, config.options.causal), config.options.threads);
}
void BM_KIntervalForward(benchmark::State& state, const KIntervalOptions& kint) {
  BM_KIntervalForwardAt(state, kint, Precision{});
}

// kint_decode: K-interval's decode step (docs/design.md §8) on fp32 K and V, causal; its keys
// are read twice (the statistics pass, then the weights), the bytes counted once.
void BM_KIntervalDecode(benchmark::State& state, AttentionShape shape, KIntervalOptions kint,
                        int threads) {
  AttentionOptions options = CausalOptions(threads);
  KIntervalBuffers buffers(shape);
  const KIntervalForwardArgs args = buffers.Args();
  for (auto _ : state) KIntervalForward(shape, options, kint, args);
  SetDecodeCounters(state, 2.0 * sizeof(float) * double(KvElements(shape)), threads);
}

// One untimed forward provides O and the saved statistics; only the backward is timed.
void BM_KIntervalBackward(benchmark::State& state, const KIntervalOptions& kint) {
  const BenchConfig config = ConfigOf(state);
  const AttentionShape& s = config.shape;
  KIntervalBuffers buffers(s);
  std::vector<float> d_o = RandomNormal(QElements(s), 4);
  std::vector<float> dq(QElements(s)), dk(KvElements(s)), dv(KvElements(s));
  const ForwardBuffers& f = buffers.forward;
  const KIntervalBackwardArgs args{{f.q.data(), f.q_strides}, {f.k.data(), f.kv_strides},
                                   {f.v.data(), f.kv_strides}, {f.o.data(), f.q_strides},
                                   {d_o.data(), f.q_strides},  buffers.Saved(),
                                   {dq.data(), f.q_strides},   {dk.data(), f.kv_strides},
                                   {dv.data(), f.kv_strides}};
  try {
    KIntervalForward(s, config.options, kint, buffers.Args());
    for (auto _ : state) KIntervalBackward(s, config.options, kint, args);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  SetFlopCounters(state, BackwardFlops(s, config.options.causal), config.options.threads);
}

// Thresholded attention (docs/math.md §3) on N(0, 1) inputs: with beta = 1 that is the null model, so
// more than 99% of the visible weights are exact zeros (the zero_frac counter says how many).
// FLOPs: the dense-equivalent count, a score product and a P V per view and visible pair
// (ForwardFlops per view, 2.5 times that for the backward), so GFLOPS says how far skipping
// zeros takes the kernel past a dense one.
double ThresholdForwardFlops(const AttentionShape& s, bool causal, int views) {
  return ForwardFlops(s, causal) * (views == 2 ? 1.5 : 1.0);
}

struct ThresholdBuffers {
  ThresholdBuffers(const AttentionShape& s, int views)
      : forward(s),
        q2(RandomNormal(QElements(s), 5)),
        k2(RandomNormal(KvElements(s), 6)),
        lambda(size_t(s.heads), 0.5f),
        survivors(size_t(views * s.batch * s.heads * s.q_len)) {}
  ThresholdForwardArgs Args() {
    ThresholdForwardArgs args;
    const ForwardArgs exact = forward.Args();
    args.q[0] = exact.q;
    args.k[0] = exact.k;
    args.q[1] = {q2.data(), forward.q_strides};
    args.k[1] = {k2.data(), forward.kv_strides};
    args.v = exact.v;
    args.o = exact.o;
    args.lambda_param = lambda.data();
    args.survivors = survivors.data();
    return args;
  }
  // The share of visible weights that are exact zeros in the last forward.
  double ZeroFraction(const AttentionShape& s, bool causal, int views) const {
    double kept = 0.0;
    for (const int32_t n : survivors) kept += n;
    return 1.0 - kept / (views * double(s.batch * s.heads) * VisiblePairs(s, causal));
  }
  ForwardBuffers forward;
  std::vector<float> q2, k2, lambda;
  std::vector<int32_t> survivors;
};

void BM_ThresholdForward(benchmark::State& state, const ThresholdOptions& threshold) {
  const BenchConfig config = ConfigOf(state);
  ThresholdBuffers buffers(config.shape, threshold.views);
  const ThresholdForwardArgs args = buffers.Args();
  try {
    for (auto _ : state) ThresholdForward(config.shape, config.options, threshold, args);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  SetFlopCounters(state, ThresholdForwardFlops(config.shape, config.options.causal, threshold.views),
                  config.options.threads);
  state.counters["zero_frac"] =
      buffers.ZeroFraction(config.shape, config.options.causal, threshold.views);
}

// tda_decode: thresholded attention's decode step on fp32 K (one per view) and V, causal.
void BM_ThresholdDecode(benchmark::State& state, AttentionShape shape, ThresholdOptions threshold,
                        int threads) {
  AttentionOptions options = CausalOptions(threads);
  ThresholdBuffers buffers(shape, threshold.views);
  const ThresholdForwardArgs args = buffers.Args();
  for (auto _ : state) ThresholdForward(shape, options, threshold, args);
  SetDecodeCounters(state, (1.0 + threshold.views) * sizeof(float) * double(KvElements(shape)),
                    threads);
}

// kint_decode_cache, tda_decode_cache: those decode steps against a contiguous KvCache of the
// format (kernels/kv_cache.h): K-interval reads the codes in place (its keys twice, the bytes
// counted once); thresholded attention (one view) decodes and normalises K, and decodes V,
// once per call, so its bytes count the cache once as well.
void BM_KIntervalDecodeCache(benchmark::State& state, AttentionShape shape, quant::Format format,
                             int threads) {
  AttentionOptions options = CausalOptions(threads);
  KIntervalBuffers buffers(shape);
  const KIntervalForwardArgs args = buffers.Args();
  const KvCache cache =
      FilledCache(shape, format, 0, PagedLayout::kHeadMajor, false, buffers.forward.Args());
  const KIntervalOptions kint = ParseKInterval("K=4");
  for (auto _ : state) KIntervalForward(shape, options, kint, args.q, cache, args.o, args.saved);
  SetDecodeCounters(state, double(cache.StorageBytes()), threads);
}
void BM_ThresholdDecodeCache(benchmark::State& state, AttentionShape shape,
                             quant::Format format, int threads) {
  AttentionOptions options = CausalOptions(threads);
  ThresholdBuffers buffers(shape, 1);
  const KvCache cache =
      FilledCache(shape, format, 0, PagedLayout::kHeadMajor, false, buffers.forward.Args());
  ThresholdCachedArgs args;
  args.q[0] = buffers.Args().q[0];
  args.o = buffers.Args().o;
  const ThresholdOptions threshold = ParseThreshold("views=1");
  for (auto _ : state) ThresholdForward(shape, options, threshold, cache, args);
  SetDecodeCounters(state, double(cache.StorageBytes()), threads);
}

// One untimed forward measures the zeros; only the backward is timed.
void BM_ThresholdBackward(benchmark::State& state, const ThresholdOptions& threshold) {
  const BenchConfig config = ConfigOf(state);
  const AttentionShape& s = config.shape;
  ThresholdBuffers buffers(s, threshold.views);
  std::vector<float> d_o = RandomNormal(QElements(s), 4), d_lambda(size_t(s.heads));
  std::vector<float> grads[5] = {std::vector<float>(QElements(s)), std::vector<float>(QElements(s)),
                                 std::vector<float>(KvElements(s)), std::vector<float>(KvElements(s)),
                                 std::vector<float>(KvElements(s))};
  const ThresholdForwardArgs forward = buffers.Args();
  const Strides qs = buffers.forward.q_strides, kvs = buffers.forward.kv_strides;
  ThresholdBackwardArgs args;
  for (int t = 0; t < 2; ++t) {
    args.q[t] = forward.q[t];
    args.k[t] = forward.k[t];
    args.dq[t] = {grads[t].data(), qs};
    args.dk[t] = {grads[2 + t].data(), kvs};
  }
  args.v = forward.v;
  args.d_o = {d_o.data(), qs};
  args.lambda_param = forward.lambda_param;
  args.dv = {grads[4].data(), kvs};
  args.d_lambda = d_lambda.data();
  try {
    ThresholdForward(s, config.options, threshold, forward);
    for (auto _ : state) ThresholdBackward(s, config.options, threshold, args);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  SetFlopCounters(state, 2.5 * ThresholdForwardFlops(s, config.options.causal, threshold.views),
                  config.options.threads);
  state.counters["zero_frac"] = buffers.ZeroFraction(s, config.options.causal, threshold.views);
}

// Runs body once per iteration; an exception ends the benchmark as skipped, with its message.
template <class Body>
bool TimeCalls(benchmark::State& state, const Body& body) {
  try {
    for (auto _ : state) body();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return false;
  }
  return true;
}

// Value gates (docs/math.md §1.2) over V [B, H, N, D]: one pass, memory-bound. FLOPs per value: 2 D for
// the norm or the projection and D for the scaling (forward); the backward about twice that.
struct GateBuffers {
  explicit GateBuffers(const AttentionShape& s)
      : v(RandomNormal(KvElements(s), 3)), d_gated(RandomNormal(KvElements(s), 4)),
        out(KvElements(s)), dv(KvElements(s)),
        alpha(size_t(s.kv_heads), 0.1f), beta(size_t(s.kv_heads), 0.0f),
        w(RandomNormal(size_t(s.kv_heads * s.head_dim), 5)), b(size_t(s.kv_heads), 0.0f),
        grads(size_t(s.kv_heads * (s.head_dim + 3))),
        strides(ContiguousBHTD(s.kv_heads, s.kv_len, s.head_dim)) {}
  ValueGateParams Params(ValueGateKind kind) const {
    return {kind, alpha.data(), beta.data(), w.data(), b.data()};
  }
  ValueGateGrads Grads() {
    float* g = grads.data();
    const size_t heads = alpha.size();
    return {g, g + heads, g + 2 * heads, g + 2 * heads + w.size()};
  }
  std::vector<float> v, d_gated, out, dv, alpha, beta, w, b, grads;
  Strides strides;
};

double GateFlops(const AttentionShape& s) {
  return 3.0 * double(s.batch * s.kv_heads * s.kv_len * s.head_dim);
}

void BM_GateForward(benchmark::State& state, ValueGateKind kind) {
  const BenchConfig config = ConfigOf(state);
  GateBuffers buffers(config.shape);
  const bool ran = TimeCalls(state, [&] {
    ValueGateForward(config.shape, buffers.Params(kind), {buffers.v.data(), buffers.strides},
                     {buffers.out.data(), buffers.strides}, nullptr, config.options.threads);
  });
  if (ran) SetFlopCounters(state, GateFlops(config.shape), config.options.threads);
}

void BM_GateBackward(benchmark::State& state, ValueGateKind kind) {
  const BenchConfig config = ConfigOf(state);
  GateBuffers buffers(config.shape);
  const bool ran = TimeCalls(state, [&] {
    ValueGateBackward(config.shape, buffers.Params(kind), {buffers.v.data(), buffers.strides},
                      {buffers.d_gated.data(), buffers.strides},
                      {buffers.dv.data(), buffers.strides}, buffers.Grads(),
                      config.options.threads);
  });
  if (ran) SetFlopCounters(state, 2.0 * GateFlops(config.shape), config.options.threads);
}

// ---- registration --------------------------------------------------------------------------

// No Iterations() or MinTime() here: Google Benchmark would append "/iterations:n" or
// "/min_time:t" to the names. A call at T = 4096 takes long enough that one iteration already
// meets the default min time (a few at most for the fastest of them), which keeps the full
// suite to a few minutes.
// The argument grid of a family: lengths, causal variants and the time unit; D in {64, 128},
// H = kHeads and threads in {1, 2} for all.
struct FamilyGrid {
  std::vector<int64_t> lengths, causal;
  benchmark::TimeUnit unit;
};
const FamilyGrid kAttentionGrid{{256, 1024, 4096}, {0, 1}, benchmark::kMillisecond};
const FamilyGrid kGateGrid{{1024, 4096}, {0}, benchmark::kMicrosecond};  // V only: not causal
const FamilyGrid kPrecisionGrid{{1024, 4096}, {1}, benchmark::kMillisecond};

template <class Function, class... Extra>
void RegisterFamily(const FamilyGrid& grid, const std::string& name, Function function,
                    Extra... extra) {
  benchmark::RegisterBenchmark(name.c_str(), function, extra...)
      ->ArgNames({"N", "D", "H", "causal", "threads"})
      ->ArgsProduct({grid.lengths, {64, 128}, {kHeads}, grid.causal, {1, 2}})
      ->UseRealTime()
      ->Unit(grid.unit);
}

const bool kRegistered = [] {
  RegisterFamily(kAttentionGrid, "exact_fwd", [](benchmark::State& s) { BM_ExactForward(s); });
  RegisterFamily(kAttentionGrid, "exact_bwd", [](benchmark::State& s) { BM_ExactBackward(s); });
  // Low-precision operands (docs/math.md §4), named exact+qk=int8+pv=bf16 and so on.
  for (const char* text : {"qk=bf16,pv=bf16", "qk=bf16,pv=bf16,p=bf16", "qk=fp16,pv=fp16",
                           "qk=int8,pv=int8",
                           "qk=fp8e4m3,pv=fp8e4m3", "qk=int8,pv=bf16",
                           "qk=int8,pv=int8,p=int8,gran=tensor",
                           "qk=int8,pv=int8,p=int8,gran=token,vgran=channel"}) {
    const Precision precision = ParsePrecision(text);
    std::string name = "exact+" + FormatPrecision(precision);
    std::replace(name.begin(), name.end(), ':', '+');
    RegisterFamily(kPrecisionGrid, name + "_fwd", BM_ExactForward, precision);
    RegisterFamily(kPrecisionGrid, name + "_bwd", BM_ExactBackward, precision);
    RegisterFamily(kPrecisionGrid, name + "+prepared_kv_fwd", BM_PreparedForward, precision);
  }
  RegisterFamily(kPrecisionGrid, "exact+prepared_kv_fwd", BM_PreparedForward, Precision{});
  // The low-precision backward (docs/math.md §4.2): _bwd only, the forward ignores bwd.
  for (const char* text : {"bwd=bf16", "bwd=fp16", "bwd=int8", "qk=bf16,pv=bf16,p=bf16,bwd=bf16"}) {
    const Precision precision = ParsePrecision(text);
    std::string name = "exact+" + FormatPrecision(precision);
    std::replace(name.begin(), name.end(), ':', '+');
    RegisterFamily(kPrecisionGrid, name + "_bwd", BM_ExactBackward, precision);
  }
  RegisterFamily(kAttentionGrid, "naive_fwd", BM_NaiveForward);
  // Decode against a KV cache in each format, with one byte an element for int8 (K per token,
  // V per channel) and fp8 (per token); H = 32 query heads over 8 kv heads, D = 128.
  const std::pair<const char*, const char*> kCacheFormats[] = {
      {"fp32", ""}, {"bf16", "qk=bf16,pv=bf16"}, {"fp16", "qk=fp16,pv=fp16"},
      {"int8", "qk=int8,pv=int8,p=int8,gran=token,vgran=channel"},
      {"fp8", "qk=fp8e4m3,pv=fp8e4m3,gran=token"}};
  for (const int64_t q_len : {1, 4, 16}) {
    for (const int64_t kv_len : {4096, 32768}) {
      for (const auto& [format, text] : kCacheFormats) {
        for (const int threads : {1, 2}) {
          if (q_len > 1 && threads == 1) continue;  // speculative decoding: 2 threads only
          const AttentionShape shape{1, 32, 8, q_len, kv_len, 128};
          const std::string name =
              std::string("exact_decode") + (q_len > 1 ? "_q" + std::to_string(q_len) : "") +
              "/Tk:" + std::to_string(kv_len) + "/D:128/H:32/Hkv:8/kv:" + format +
              "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), BM_Decode, shape, ParsePrecision(text), threads)
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
  // Each cache format, as held; int8 also with P rounded to int8 (p=int8: V's token scales
  // applied in fp32) and with those scales folded into P (pfold: P V on integer dot products,
  // docs/math.md §4.3).
  struct CacheStorage {
    const char* name;
    quant::Format format;
    const char* base;
  };
  const CacheStorage kCacheStorage[] = {{"fp32", quant::Format::kFp32, ""},
                                        {"bf16", quant::Format::kBf16, ""},
                                        {"fp16", quant::Format::kFp16, ""},
                                        {"int8", quant::Format::kInt8, ""},
                                        {"int8+p=int8", quant::Format::kInt8, "p=int8"},
                                        {"int8+p=int8+pfold=1", quant::Format::kInt8, "p=int8,pfold=1"},
                                        {"fp8", quant::Format::kFp8E4M3, ""}};
  for (const int64_t kv_len : {4096, 32768}) {
    for (const CacheStorage& storage : kCacheStorage) {
      for (const int threads : {1, 2}) {
        const AttentionShape shape{1, 32, 8, 1, kv_len, 128};
        const std::string name = "exact_decode_cache/Tk:" + std::to_string(kv_len) +
                                 "/D:128/H:32/Hkv:8/kv:" + storage.name + "/threads:" +
                                 std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), BM_DecodeCache, shape, storage.format,
                                     ParsePrecision(storage.base), threads, 0,
                                     PagedLayout::kHeadMajor, false)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  // Sliding windows (docs/math.md §1.5) at N = 4096, against exact_fwd/exact_bwd's GFLOPS.
  for (const bool backward : {false, true}) {
    for (const int64_t window : {256, 1024}) {
      const AttentionShape shape{1, 8, 8, 4096, 4096, 64};
      const std::string name = std::string(backward ? "exact_window_bwd" : "exact_window_fwd") +
                               "/N:4096/D:64/H:8/W:" + std::to_string(window) + "/threads:2";
      benchmark::RegisterBenchmark(name.c_str(), BM_Window, shape, window, backward, 2)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  // Paged against contiguous: the target's shape (Tk 32768, 2 threads), and Tk 4096 (inside
  // the last-level cache: what paging costs apart from DRAM); head-major blocks also in a
  // shuffled order.
  struct PagedCase {
    const char* layout_name;
    PagedLayout layout;
    bool random_order;
  };
  for (const PagedCase& c : {PagedCase{"head", PagedLayout::kHeadMajor, false},
                             PagedCase{"head/order:random", PagedLayout::kHeadMajor, true},
                             PagedCase{"token", PagedLayout::kTokenMajor, false}}) {
    for (const int64_t block_size : {16, 128}) {
      for (const CacheStorage& storage : kCacheStorage) {
        for (const int64_t kv_len : {4096, 32768}) {
          // q_len 4 (speculative decoding, 16-row tiles) at blocks of 16 in both layouts.
          for (const int64_t q_len : {1, 4}) {
            if (q_len > 1 && (block_size != 16 || c.random_order)) continue;
            const AttentionShape shape{1, 32, 8, q_len, kv_len, 128};
            const std::string name = std::string("exact_decode_paged") +
                                     (q_len > 1 ? "_q" + std::to_string(q_len) : "") +
                                     "/Tk:" + std::to_string(kv_len) +
                                     "/D:128/H:32/Hkv:8/kv:" + storage.name + "/block:" +
                                     std::to_string(block_size) + "/layout:" + c.layout_name +
                                     "/threads:2";
            benchmark::RegisterBenchmark(name.c_str(), BM_DecodeCache, shape, storage.format,
                                         ParsePrecision(storage.base), 2, block_size, c.layout,
                                         c.random_order)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
          }
        }
      }
    }
  }
  // The K-interval variants the paper's table turns on (docs/harness.md §4).
  for (const char* text : {"K=4,round=nearest,ste=weight", "K=4,cal=window,round=nearest,ste=prob",
                           "K=16,cal=window,ste=weight", "K=32"}) {
    const KIntervalOptions kint = ParseKInterval(text);
    const std::string name = "kint:" + FormatKInterval(kint);
    RegisterFamily(kAttentionGrid, name + "_fwd", BM_KIntervalForward, kint);
    RegisterFamily(kAttentionGrid, name + "_bwd", BM_KIntervalBackward, kint);
  }
  // K-interval with bf16 operands and bf16 P (both products on AMX tiles where the CPU has
  // them): the paper's premise, low-precision products beside a cheap exp (docs/performance.md
  // §4.4), against exact+qk=bf16+pv=bf16+p=bf16_fwd.
  for (const char* text : {"K=4,round=nearest,ste=weight", "K=32"}) {
    const KIntervalOptions kint = ParseKInterval(text);
    const Precision precision = ParsePrecision("qk=bf16,pv=bf16,p=bf16");
    std::string formats = FormatPrecision(precision);
    std::replace(formats.begin(), formats.end(), ':', '+');
    const std::string name = "kint:" + FormatKInterval(kint) + "+" + formats;
    RegisterFamily(kPrecisionGrid, name + "_fwd",
                   BM_KIntervalForwardAt, kint, precision);
  }
  for (const char* text : {"views=1", "views=2"}) {  // docs/math.md §3's defaults otherwise
    const ThresholdOptions threshold = ParseThreshold(text);
    const std::string name = "tda:" + FormatThreshold(threshold);
    RegisterFamily(kAttentionGrid, name + "_fwd", BM_ThresholdForward, threshold);
    RegisterFamily(kAttentionGrid, name + "_bwd", BM_ThresholdBackward, threshold);
  }
  // The other transforms' decode step, beside exact_decode/.../kv:fp32 (fp32 K and V).
  for (const int64_t kv_len : {4096, 32768}) {
    const AttentionShape shape{1, 32, 8, 1, kv_len, 128};
    const std::string tail = "/Tk:" + std::to_string(kv_len) + "/D:128/H:32/Hkv:8/threads:2";
    benchmark::RegisterBenchmark(("kint_decode" + tail).c_str(), BM_KIntervalDecode, shape,
                                 ParseKInterval("K=4"), 2)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("tda_decode" + tail).c_str(), BM_ThresholdDecode, shape,
                                 ParseThreshold("views=1"), 2)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    for (const CacheStorage& storage : kCacheStorage) {
      if (*storage.base != '\0') continue;  // the formats as held
      const std::string cached = tail.substr(0, tail.find("/threads")) + "/kv:" + storage.name +
                                 "/threads:2";
      benchmark::RegisterBenchmark(("kint_decode_cache" + cached).c_str(),
                                   BM_KIntervalDecodeCache, shape, storage.format, 2)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("tda_decode_cache" + cached).c_str(),
                                   BM_ThresholdDecodeCache, shape, storage.format, 2)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  RegisterFamily(kGateGrid, "gate:norm_fwd", BM_GateForward, ValueGateKind::kNorm);
  RegisterFamily(kGateGrid, "gate:norm_bwd", BM_GateBackward, ValueGateKind::kNorm);
  RegisterFamily(kGateGrid, "gate:proj_fwd", BM_GateForward, ValueGateKind::kProjection);
  RegisterFamily(kGateGrid, "gate:proj_bwd", BM_GateBackward, ValueGateKind::kProjection);
  return true;
}();

}  // namespace
}  // namespace lpattn::bench
