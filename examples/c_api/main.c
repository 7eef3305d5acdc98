/* Embeds the installed lpattn through its C API: one head of attention over three keys,
 * checked against the same softmax computed by hand.
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

  printf("lpattn %s: %s\n", lpattn_version(), failures == 0 ? "ok" : "MISMATCH");
  return failures == 0 ? 0 : 1;
}
