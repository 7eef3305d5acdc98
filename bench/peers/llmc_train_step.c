// llm.c's CPU trainer (train_gpt2.c) on lpattn's `small` shape, for the training comparison of
// docs/performance.md §4: 4 layers, 4 heads, width 128, context 64, byte vocabulary (256),
// batch 12, random N(0, 0.02) weights written as an llm.c checkpoint (its header, version 3),
// random byte windows. Times forward, zero_grad, backward and AdamW steps and prints tokens/s.
// Built by scripts/llmc_peer.sh against an llm.c checkout; not part of lpattn's build.
//   llmc_train_step STEPS
#define TESTING
#include "train_gpt2.c"

static uint64_t peer_state = 0x9E3779B97F4A7C15ull;
static double peer_uniform(void) {
  peer_state = peer_state * 6364136223846793005ull + 1442695040888963407ull;
  return ((peer_state >> 11) + 0.5) / 9007199254740992.0;
}

static void write_checkpoint(const char* path, GPT2Config config) {
  int header[256] = {0};
  header[0] = 20240326;
  header[1] = 3;
  header[2] = config.max_seq_len;
  header[3] = config.vocab_size;
  header[4] = config.num_layers;
  header[5] = config.num_heads;
  header[6] = config.channels;
  header[7] = config.padded_vocab_size;
  size_t sizes[NUM_PARAMETER_TENSORS], count = 0;
  fill_in_parameter_sizes(sizes, config);
  for (int i = 0; i < NUM_PARAMETER_TENSORS; ++i) count += sizes[i];
  float* params = (float*)mallocCheck(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) {  // Box-Muller, N(0, 0.02)
    params[i] = (float)(0.02 * sqrt(-2.0 * log(peer_uniform())) * cos(6.283185307179586 *
                                                                       peer_uniform()));
  }
  FILE* f = fopenCheck(path, "wb");
  fwriteCheck(header, sizeof(int), 256, f);
  fwriteCheck(params, sizeof(float), count, f);
  fcloseCheck(f);
  free(params);
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? atoi(argv[1]) : 30;
  const int B = 12, T = 64;
  GPT2Config config = {.max_seq_len = T, .vocab_size = 256, .padded_vocab_size = 256,
                       .num_layers = 4, .num_heads = 4, .channels = 128};
  const char* path = "llmc_small.bin";
  write_checkpoint(path, config);
  GPT2 model;
  gpt2_build_from_checkpoint(&model, path);
  int* inputs = (int*)mallocCheck(B * T * sizeof(int));
  int* targets = (int*)mallocCheck(B * T * sizeof(int));
  for (int i = 0; i < B * T; ++i) {
    inputs[i] = (int)(peer_uniform() * 256);
    targets[i] = (int)(peer_uniform() * 256);
  }
  struct timespec start, end;
  for (int step = 0; step < steps + 3; ++step) {
    if (step == 3) clock_gettime(CLOCK_MONOTONIC, &start);  // 3 warm-up steps
    gpt2_forward(&model, inputs, targets, B, T);
    gpt2_zero_grad(&model);
    gpt2_backward(&model);
    gpt2_update(&model, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step + 1);
  }
  clock_gettime(CLOCK_MONOTONIC, &end);
  const double seconds = (end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9;
  printf("llm.c small: %d threads, %.2f ms/step, %.0f tokens/s (loss %.4f)\n",
         omp_get_max_threads(), 1e3 * seconds / steps, steps * (double)(B * T) / seconds,
         model.mean_loss);
  gpt2_free(&model);
  free(inputs);
  free(targets);
  return 0;
}
