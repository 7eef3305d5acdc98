/* Embeds the installed lpattn through its C API: one head of attention over three keys,
 * checked against the same softmax computed by hand, then the same keys in a paged KV cache
 * and a decode step against it.
 *
 *   cc main.c $(pkg-config --cflags --libs lpattn) -lm    or find_package(lpattn) in CMake
 */
#include <lpattn/kernels/lpattn.h>

#include <math.h>
#include <stdio.h>

enum { kQLen = 2, kKvLen = 3, kDim = 4 };

int main(void) {
  /* Dense [batch=1, heads=1, tokens, dim] tensors. */
  const float q[kQLen * kDim] = {0.5f, -1.0f, 0.25f, 2.0f, 1.0f, 0.0f, -0.5f, 0.75f};
  const float k[kKvLen * kDim] = {1.0f,  0.5f, -1.0f, 0.0f, -0.5f, 1.5f,
                                  0.25f, 1.0f, 0.0f,  -1.0f, 2.0f,  0.5f};
  const float v[kKvLen * kDim] = {1.0f, 2.0f, 3.0f, 4.0f, -1.0f, 0.0f,
                                  1.0f, 0.5f, 2.5f, -2.0f, 0.0f, 1.0f};
  float o[kQLen * kDim];
  float lse[kQLen];

  lpattn_shape shape = {1, 1, 1, kQLen, kKvLen, kDim};
  lpattn_options options;
  lpattn_default_options(&options); /* scale 1/sqrt(dim), not causal, no sink */
  const lpattn_const_tensor tq = {q, kQLen * kDim, kQLen * kDim, kDim};
  const lpattn_const_tensor tk = {k, kKvLen * kDim, kKvLen * kDim, kDim};
  const lpattn_const_tensor tv = {v, kKvLen * kDim, kKvLen * kDim, kDim};
  const lpattn_tensor to = {o, kQLen * kDim, kQLen * kDim, kDim};

  lpattn_status status = lpattn_exact_forward(&shape, &options, tq, tk, tv, to, lse);
  if (status != LPATTN_OK) {
    fprintf(stderr, "lpattn_exact_forward failed (%d): %s\n", (int)status, lpattn_last_error());
    return 1;
  }

  /* By hand, for query row 1: softmax(q . k_j / sqrt(dim)) weighted sum of v_j. */
  const int row = 1;
  double scores[kKvLen];
  double max_score = -INFINITY;
  for (int j = 0; j < kKvLen; ++j) {
    double dot = 0.0;
    for (int d = 0; d < kDim; ++d) dot += (double)q[row * kDim + d] * k[j * kDim + d];
    scores[j] = dot / sqrt((double)kDim);
    if (scores[j] > max_score) max_score = scores[j];
  }
  double z = 0.0;
  for (int j = 0; j < kKvLen; ++j) z += exp(scores[j] - max_score);
  const double expected_lse = max_score + log(z);

  int failures = 0;
  for (int d = 0; d < kDim; ++d) {
    double expected = 0.0;
    for (int j = 0; j < kKvLen; ++j) expected += exp(scores[j] - max_score) / z * v[j * kDim + d];
    const double got = o[row * kDim + d];
    printf("o[%d][%d] = %.6f (by hand %.6f)\n", row, d, got, expected);
    if (fabs(got - expected) > 1e-5) ++failures;
  }
  printf("lse[%d] = %.6f (by hand %.6f)\n", row, lse[row], expected_lse);
  if (fabs(lse[row] - expected_lse) > 1e-5) ++failures;

  /* An engine's decode step: K and V appended token by token to a paged KV cache (blocks of
   * two tokens, taken from the pool in any order), then query row 1 against the cache. */
  lpattn_kv_cache_config config;
  lpattn_kv_cache_default_config(&config); /* fp32 K and V */
  config.sequences = 1;
  config.kv_heads = 1;
  config.head_dim = kDim;
  config.capacity = 4;
  config.block_size = 2;
  config.blocks = 2;
  lpattn_kv_cache* cache = NULL;
  const int32_t blocks[2] = {1, 0};
  status = lpattn_kv_cache_create(&config, &cache);
  if (status == LPATTN_OK) status = lpattn_kv_cache_set_block_table(cache, 0, blocks, 2, -1);
  for (int j = 0; j < kKvLen && status == LPATTN_OK; ++j) {
    const lpattn_const_tensor kj = {k + j * kDim, 0, kDim, kDim};
    const lpattn_const_tensor vj = {v + j * kDim, 0, kDim, kDim};
    status = lpattn_kv_cache_append(cache, 0, 1, kj, vj);
  }
  float o_step[kDim];
  float lse_step[1];
  const lpattn_shape step = {1, 1, 1, 1, 0 /* kv_len: the cache's */, kDim};
  const lpattn_const_tensor q_step = {q + row * kDim, kDim, kDim, kDim};
  const lpattn_tensor to_step = {o_step, kDim, kDim, kDim};
  if (status == LPATTN_OK) {
    status = lpattn_exact_forward_cached(&step, &options, q_step, cache, NULL, NULL, to_step,
                                         lse_step);
  }
  lpattn_kv_cache_free(cache);
  if (status != LPATTN_OK) {
    fprintf(stderr, "the cached decode step failed (%d): %s\n", (int)status, lpattn_last_error());
    return 1;
  }
  for (int d = 0; d < kDim; ++d) {
    if (fabs(o_step[d] - o[row * kDim + d]) > 1e-6) ++failures;
  }
  printf("decode step from the paged cache: lse %.6f (full forward %.6f)\n", lse_step[0], lse[row]);

  printf("lpattn %s: %s\n", lpattn_version(), failures == 0 ? "ok" : "MISMATCH");
  return failures == 0 ? 0 : 1;
}
