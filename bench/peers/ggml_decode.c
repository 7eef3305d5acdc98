// ggml's flash attention (llama.cpp's CPU kernel, ggml_flash_attn_ext) on lpattn's decode
// shape, as a peer for the exact_decode benchmarks: one query per head against Tk cached keys,
// D 128, H 32 over Hkv 8, K and V in f32, f16, bf16 or q8_0, every key visible (a decode step),
// on a persistent ggml threadpool. Prints one line per case: the median of `reps` timed runs
// in ms and the GB/s of K and V read. Built and run by scripts/ggml_peer.sh, not by the build.
//   ggml_decode THREADS REPS TK...
#define _POSIX_C_SOURCE 199309L  // clock_gettime

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-cpu.h"
#include "ggml.h"

enum { kD = 128, kHeads = 32, kKvHeads = 8 };

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int CompareDoubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

// Uniform [-1, 1) from a fixed-seed LCG: the same operands every run.
static void Fill(float* x, int64_t n, uint64_t seed) {
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(seed >> 11) * 0x1.0p-52 - 1.0);
  }
}

// Writes rows of floats into t (which has t->ne[0] elements per row) in t's type.
static void Store(struct ggml_tensor* t, const float* src) {
  const int64_t n_per_row = t->ne[0], rows = ggml_nelements(t) / n_per_row;
  switch (t->type) {
    case GGML_TYPE_F32: memcpy(t->data, src, (size_t)ggml_nbytes(t)); break;
    case GGML_TYPE_F16: ggml_fp32_to_fp16_row(src, (ggml_fp16_t*)t->data, rows * n_per_row); break;
    case GGML_TYPE_BF16: ggml_fp32_to_bf16_row(src, (ggml_bf16_t*)t->data, rows * n_per_row); break;
    default: ggml_quantize_chunk(t->type, src, t->data, 0, rows, n_per_row, NULL); break;
  }
}

static void RunCase(enum ggml_type type, int64_t tk, int threads, int reps,
                    struct ggml_threadpool* pool) {
  const size_t kv_bytes = 2 * ggml_row_size(type, kD) * (size_t)(tk * kKvHeads);
  struct ggml_init_params params = {kv_bytes + ((size_t)64 << 20), NULL, false};
  struct ggml_context* ctx = ggml_init(params);
  struct ggml_tensor* q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, kD, 1, kHeads, 1);
  struct ggml_tensor* k = ggml_new_tensor_4d(ctx, type, kD, tk, kKvHeads, 1);
  struct ggml_tensor* v = ggml_new_tensor_4d(ctx, type, kD, tk, kKvHeads, 1);
  float* values = malloc(sizeof(float) * (size_t)(kD * tk * kKvHeads));
  Fill(values, kD * kHeads, 1);
  memcpy(q->data, values, sizeof(float) * kD * kHeads);
  Fill(values, kD * tk * kKvHeads, 2);
  Store(k, values);
  Fill(values, kD * tk * kKvHeads, 3);
  Store(v, values);
  free(values);

  struct ggml_tensor* out =
      ggml_flash_attn_ext(ctx, q, k, v, NULL, 1.0f / sqrtf((float)kD), 0.0f, 0.0f);
  struct ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, out);
  struct ggml_cplan plan = ggml_graph_plan(graph, threads, pool);
  plan.work_data = malloc(plan.work_size + 1);

  double* ms = malloc(sizeof(double) * (size_t)reps);
  for (int r = -2; r < reps; ++r) {  // two warm-up runs
    const double start = Now();
    if (ggml_graph_compute(graph, &plan) != GGML_STATUS_SUCCESS) {
      fprintf(stderr, "ggml_graph_compute failed\n");
      exit(1);
    }
    if (r >= 0) ms[r] = 1e3 * (Now() - start);
  }
  qsort(ms, (size_t)reps, sizeof(double), CompareDoubles);
  const double median = ms[reps / 2];
  printf("ggml_decode/Tk:%lld/D:%d/H:%d/Hkv:%d/kv:%s/threads:%d %.3f ms %.2f GBps\n",
         (long long)tk, kD, kHeads, kKvHeads, ggml_type_name(type), threads, median,
         (double)(ggml_nbytes(k) + ggml_nbytes(v)) / (median * 1e6));
  fflush(stdout);
  free(ms);
  free(plan.work_data);
  ggml_free(ctx);
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s THREADS REPS TK...\n", argv[0]);
    return 2;
  }
  const int threads = atoi(argv[1]), reps = atoi(argv[2]);
  if (threads < 1 || reps < 1) {
    fprintf(stderr, "THREADS and REPS must be positive\n");
    return 2;
  }
  struct ggml_threadpool_params pool_params = ggml_threadpool_params_default(threads);
  struct ggml_threadpool* pool = ggml_threadpool_new(&pool_params);
  const enum ggml_type types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0};
  for (int a = 3; a < argc; ++a) {
    const int64_t tk = atoll(argv[a]);
    if (tk < 1) {
      fprintf(stderr, "TK must be positive, got %s\n", argv[a]);
      return 2;
    }
    for (size_t t = 0; t < sizeof types / sizeof types[0]; ++t) {
      RunCase(types[t], tk, threads, reps, pool);
    }
  }
  ggml_threadpool_free(pool);
  return 0;
}
