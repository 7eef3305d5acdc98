// The peer in every run (docs/performance.md §3): oneDNN's unfused attention, a matmul
// S = scale Q K^T, the causal mask added to S (a binary add), a softmax over each row of S,
// and a matmul O = P V, on the shapes of lpattn's precision families:
//   onednn:<type>_fwd/N:<T>/D:<D>/H:<H>/causal:1/threads:<n>   type f32 or bf16
// Q, K, V (and S, P) in the type, O in f32; oneDNN picks its kernels by CPU features (its AMX
// ones where the CPU has them) and the benchmark's label names the matmul's implementation.
// It computes the whole N x N square (the mask only zeroes weights): GFLOPS count lpattn's
// useful FLOPs of the same shape, so the two compare by time. Threads: OpenMP, the runtime
// Debian's oneDNN is built with, set per benchmark. Present when the build found oneDNN.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench/peak_fma.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace lpattn::bench {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

struct OnednnAttention {
  OnednnAttention(int64_t heads, int64_t tokens, int64_t dim, memory::data_type type)
      : stream(engine) {
    const memory::dims qkv_dims{heads, tokens, dim}, kt_dims{heads, dim, tokens};
    const memory::dims s_dims{heads, tokens, tokens}, mask_dims{1, tokens, tokens};
    const memory::desc q_md(qkv_dims, type, tag::abc), v_md(qkv_dims, type, tag::abc);
    const memory::desc kt_md(kt_dims, type, tag::acb);  // K [H, N, D] read as K^T [H, D, N]
    const memory::desc s_md(s_dims, type, tag::abc), o_md(qkv_dims, memory::data_type::f32, tag::abc);
    const memory::desc mask_md(mask_dims, memory::data_type::f32, tag::abc);

    dnnl::primitive_attr qk_attr;
    qk_attr.set_output_scales(0, {float(1.0 / std::sqrt(double(dim)))});
    const dnnl::matmul::primitive_desc qk_pd(dnnl::matmul::desc(q_md, kt_md, s_md), qk_attr, engine);
    // The mask as its own primitive: a binary post-op broadcasting [1, N, N] over the heads
    // sends oneDNN 2.6's matmul to its reference kernel.
    const dnnl::binary::primitive_desc mask_pd(
        dnnl::binary::desc(dnnl::algorithm::binary_add, s_md, mask_md, s_md), engine);
    const dnnl::softmax_v2_forward::primitive_desc softmax_pd(
        dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_inference,
                                       dnnl::algorithm::softmax_accurate, s_md, s_md, 2),
        engine);
    const dnnl::matmul::primitive_desc pv_pd(dnnl::matmul::desc(s_md, v_md, o_md), engine);
    qk = dnnl::matmul(qk_pd);
    softmax = dnnl::softmax_v2_forward(softmax_pd);
    add_mask = dnnl::binary(mask_pd);
    pv = dnnl::matmul(pv_pd);
    implementation = std::string(qk_pd.impl_info_str()) + " / " + mask_pd.impl_info_str() +
                     " / " + softmax_pd.impl_info_str() + " / " + pv_pd.impl_info_str();

    q = Filled(q_md, 1);
    k = Filled(memory::desc(qkv_dims, type, tag::abc), 2);
    kt = memory(kt_md, engine, k.get_data_handle());
    v = Filled(v_md, 3);
    s = memory(s_md, engine);
    o = memory(o_md, engine);
    mask = memory(mask_md, engine);
    float* m = static_cast<float*>(mask.get_data_handle());
    for (int64_t i = 0; i < tokens; ++i) {
      for (int64_t j = 0; j < tokens; ++j) {
        m[i * tokens + j] = j <= i ? 0.0f : -std::numeric_limits<float>::infinity();
      }
    }
  }

  // N(0, 1) values in f32, reordered into the memory's type.
  memory Filled(const memory::desc& md, uint32_t seed) {
    const memory::desc f32_md(md.dims(), memory::data_type::f32, tag::abc);
    memory f32(f32_md, engine), out(md, engine);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    float* data = static_cast<float*>(f32.get_data_handle());
    for (size_t i = 0; i < f32_md.get_size() / sizeof(float); ++i) data[i] = normal(rng);
    dnnl::reorder(f32, out).execute(stream, f32, out);
    stream.wait();
    return out;
  }

  void Run() {
    qk.execute(stream, {{DNNL_ARG_SRC, q},
                        {DNNL_ARG_WEIGHTS, kt},
                        {DNNL_ARG_DST, s}});
    add_mask.execute(stream, {{DNNL_ARG_SRC_0, s}, {DNNL_ARG_SRC_1, mask}, {DNNL_ARG_DST, s}});
    softmax.execute(stream, {{DNNL_ARG_SRC, s}, {DNNL_ARG_DST, s}});
    pv.execute(stream, {{DNNL_ARG_SRC, s}, {DNNL_ARG_WEIGHTS, v}, {DNNL_ARG_DST, o}});
    stream.wait();
  }

  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream;
  dnnl::matmul qk, pv;
  dnnl::softmax_v2_forward softmax;
  dnnl::binary add_mask;
  memory q, k, kt, v, s, o, mask;
  std::string implementation;
};

void BM_OnednnForward(benchmark::State& state, memory::data_type type) {
  const int64_t tokens = state.range(0), dim = state.range(1), heads = state.range(2);
  const int threads = static_cast<int>(state.range(4));
  omp_set_num_threads(threads);
  std::unique_ptr<OnednnAttention> attention;
  try {
    attention = std::make_unique<OnednnAttention>(heads, tokens, dim, type);
  } catch (const dnnl::error& e) {
    state.SkipWithError((std::string("oneDNN: ") + e.what()).c_str());
    return;
  }
  for (auto _ : state) attention->Run();
  state.SetLabel(attention->implementation);
  // lpattn's useful FLOPs of the causal shape (the visible pairs, T (T + 1) / 2 per head).
  const double flops = 4.0 * double(heads * dim) * double(tokens) * double(tokens + 1) / 2.0;
  const double gflop = flops * 1e-9 * double(state.iterations());
  state.counters["GFLOPS"] = benchmark::Counter(gflop, benchmark::Counter::kIsRate);
  state.counters["peak_frac"] =
      benchmark::Counter(gflop / MeasuredPeakGflops(threads), benchmark::Counter::kIsRate);
}

const bool kRegistered = [] {
  for (const auto& [name, type] : {std::pair{"onednn:f32_fwd", memory::data_type::f32},
                                   std::pair{"onednn:bf16_fwd", memory::data_type::bf16}}) {
    benchmark::RegisterBenchmark(name, BM_OnednnForward, type)
        ->ArgNames({"N", "D", "H", "causal", "threads"})
        ->ArgsProduct({{1024, 4096}, {64, 128}, {8}, {1}, {1, 2}})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();

}  // namespace
}  // namespace lpattn::bench
