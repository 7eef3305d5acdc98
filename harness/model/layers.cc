// The GPT's layers (docs/harness.md §1), one forward/backward pair each, after llm.c's
// train_gpt2.c. Dense products go through oneDNN's sgemm on fixed blocks of rows; TBB runs the
// blocks in parallel. Block boundaries never depend on the thread count and every output element
// is written by one block, so results are bit-identical for any number of threads. The row-wise
// layers have block forms, which the model chains per block of rows (docs/harness.md §1.6).
#include "harness/model/layers.h"

#include "harness/model/cross_entropy_rows.h"
#include "harness/model/dense_operand.h"
#include "harness/model/for_blocks.h"
#include "harness/model/gelu.h"
#include "harness/model/grad_tasks.h"
#include "harness/model/layernorm_rows.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <vector>

namespace lpattn::harness {
namespace {

constexpr size_t kRowBlock = 64;           // rows of N per task of the row-wise layers
constexpr size_t kElementBlock = 1 << 14;  // elements per task in the GELU loops

constexpr float kLayerNormEps = 1e-5f;

}  // namespace

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
void EncoderForward(float* out, const uint8_t* tokens, const float* wte, const float* wpe, size_t B,
                    size_t T, size_t C) {
  for (size_t b = 0; b < B; ++b) {
    for (size_t t = 0; t < T; ++t) {
      float* out_bt = out + (b * T + t) * C;
      const float* wte_ix = wte + static_cast<size_t>(tokens[b * T + t]) * C;
      if (wpe == nullptr) {
        std::copy_n(wte_ix, C, out_bt);
        continue;
      }
      const float* wpe_t = wpe + t * C;
      for (size_t i = 0; i < C; ++i) out_bt[i] = wte_ix[i] + wpe_t[i];
    }
  }
}

// dwte[token] += dout, dwpe[t] += dout; serial because tokens repeat (one writer per row).
void EncoderBackward(float* dwte, float* dwpe, const float* dout, const uint8_t* tokens, size_t B,
                     size_t T, size_t C) {
  for (size_t b = 0; b < B; ++b) {
    for (size_t t = 0; t < T; ++t) {
      const float* dout_bt = dout + (b * T + t) * C;
      float* dwte_ix = dwte + static_cast<size_t>(tokens[b * T + t]) * C;
      for (size_t i = 0; i < C; ++i) dwte_ix[i] += dout_bt[i];
      if (dwpe == nullptr) continue;
      float* dwpe_t = dwpe + t * C;
      for (size_t i = 0; i < C; ++i) dwpe_t[i] += dout_bt[i];
    }
  }
}

RopeTable MakeRopeTable(size_t T, size_t head_dim, double base) {
  if (head_dim % 2 != 0) throw std::invalid_argument("rotary embeddings need an even head_dim");
  RopeTable table;
  table.T = T;
  table.half = head_dim / 2;
  table.cos.resize(T * table.half);
  table.sin.resize(T * table.half);
  for (size_t i = 0; i < table.half; ++i) {
    const double frequency = std::pow(base, -2.0 * double(i) / double(head_dim));
    for (size_t t = 0; t < T; ++t) {
      table.cos[t * table.half + i] = float(std::cos(double(t) * frequency));
      table.sin[t * table.half + i] = float(std::sin(double(t) * frequency));
    }
  }
  return table;
}

namespace {

// Turns the pairs of q and k (the first 2C of each row of qkv) by +angle (sign 1, forward) or
// -angle (sign -1: the transpose, backward).
void RotatePairs(float* qkv, const RopeTable& table, size_t B, size_t T, size_t C,
                 size_t n_head, float sign) {
  const size_t half = table.half;
  if (table.T < T || 2 * half * n_head != C) {
    throw std::invalid_argument("RopeForward: the table does not fit the shape");
  }
  ForBlocks(B * T, kRowBlock, [&](size_t r0, size_t r1) {
    for (size_t row = r0; row < r1; ++row) {
      const float* cos_t = table.cos.data() + (row % T) * half;
      const float* sin_t = table.sin.data() + (row % T) * half;
      float* x = qkv + row * 3 * C;
      for (size_t head = 0; head < 2 * n_head; ++head) {  // q's heads, then k's
        float* pair = x + head * 2 * half;
        for (size_t i = 0; i < half; ++i) {
          const float a = pair[2 * i], b = pair[2 * i + 1];
          const float c = cos_t[i], s = sign * sin_t[i];
          pair[2 * i] = a * c - b * s;
          pair[2 * i + 1] = a * s + b * c;
        }
      }
    }
  });
}

}  // namespace

void RopeForward(float* qkv, const RopeTable& table, size_t B, size_t T, size_t C,
                 size_t n_head) {
  RotatePairs(qkv, table, B, T, C, n_head, 1.0f);
}

void RopeBackward(float* dqkv, const RopeTable& table, size_t B, size_t T, size_t C,
                  size_t n_head) {
  RotatePairs(dqkv, table, B, T, C, n_head, -1.0f);
}

// out = (inp - mean) * rstd * weight + bias over each row of C; saves mean and rstd.
void LayerNormForwardBlock(float* out, float* mean, float* rstd, const float* inp,
                           const float* weight, const float* bias, size_t r0, size_t r1,
                           size_t C) {
  LayerNormForwardRows(out + r0 * C, mean + r0, rstd + r0, inp + r0 * C, weight, bias, r1 - r0, C,
                       kLayerNormEps);
}

void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                      const float* bias, size_t N, size_t C) {
  ForBlocks(N, kRowBlock, [&](size_t r0, size_t r1) {
    LayerNormForwardBlock(out, mean, rstd, inp, weight, bias, r0, r1, C);
  });
}

void LayerNormInputGradBlock(float* dinp, const float* dout, const float* inp, const float* weight,
                             const float* mean, const float* rstd, size_t r0, size_t r1,
                             size_t C) {
  LayerNormBackwardRows(dinp + r0 * C, dout + r0 * C, inp + r0 * C, weight, mean + r0, rstd + r0,
                        r1 - r0, C);
}

// dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = weight * dout;
// dweight += sum over rows of norm * dout; dbias += sum over rows of dout.
void LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, const float* mean, const float* rstd,
                       size_t N, size_t C) {
  // Rows are independent for dinp; dweight and dbias sum over rows, kept in row order.
  ForBlocks(N, kRowBlock, [&](size_t r0, size_t r1) {
    LayerNormInputGradBlock(dinp, dout, inp, weight, mean, rstd, r0, r1, C);
  });
  thread_local GradTasks tasks;
  tasks.AddLayerNorm(dweight, dbias, dout, inp, mean, rstd, N, C);
  tasks.Run();
}

namespace {

// Rows [r0, r1) of out = base + inp weight^T: the base (bias rows, or residual + bias) written
// first and the product added to it (beta = 1), one pass over the block's outputs instead of a
// product pass and an addition pass.
void ProductOntoBase(float* out, const float* inp, DenseOperand weight, float beta, size_t r0,
                     size_t r1, size_t C, size_t OC, DenseFormat format) {
  const DenseOperand rows = PrepareInThread(0, inp + r0 * C, (r1 - r0) * C, format);
  DenseProduct(Trans::kNo, Trans::kYes, r1 - r0, OC, C, rows, C, weight, C, beta, out + r0 * OC,
               OC);
}

}  // namespace

void MatmulForwardBlock(float* out, const float* inp, DenseOperand weight, const float* bias,
                        size_t r0, size_t r1, size_t C, size_t OC, DenseFormat format) {
  if (bias != nullptr) {
    for (size_t r = r0; r < r1; ++r) std::copy_n(bias, OC, out + r * OC);
  }
  ProductOntoBase(out, inp, weight, bias != nullptr ? 1.0f : 0.0f, r0, r1, C, OC, format);
}

void MatmulResidualBlock(float* out, const float* residual, const float* inp, DenseOperand weight,
                         const float* bias, size_t r0, size_t r1, size_t C, size_t OC,
                         DenseFormat format) {
  for (size_t r = r0; r < r1; ++r) {
    for (size_t o = 0; o < OC; ++o) out[r * OC + o] = residual[r * OC + o] + bias[o];
  }
  ProductOntoBase(out, inp, weight, 1.0f, r0, r1, C, OC, format);
}

// out[N,OC] = inp[N,C] weight[OC,C]^T + bias, by blocks of ProductRowBlock(N) rows.
void MatmulForward(float* out, const float* inp, const float* weight, const float* bias, size_t N,
                   size_t C, size_t OC, DenseFormat format) {
  thread_local OperandStore weights;
  weights.Clear();
  const DenseOperand w = weights.Prepare(weight, OC * C, format);
  ForBlocks(N, ProductRowBlock(N), [&](size_t r0, size_t r1) {
    MatmulForwardBlock(out, inp, w, bias, r0, r1, C, OC, format);
  });
}

void MatmulInputGradBlock(float* dinp, const float* dout, DenseOperand weight, size_t r0,
                          size_t r1, size_t C, size_t OC, Write dinp_write, DenseFormat format) {
  const float beta = dinp_write == Write::kAccumulate ? 1.0f : 0.0f;
  const DenseOperand rows = PrepareInThread(0, dout + r0 * OC, (r1 - r0) * OC, format);
  DenseProduct(Trans::kNo, Trans::kNo, r1 - r0, C, OC, rows, OC, weight, C, beta, dinp + r0 * C,
               C);
}

// dinp += dout weight (blocks of rows); dweight += dout^T inp and dbias += column sums of dout
// (blocks of output channels, each summing over all N rows in one call: GradTasks).
void MatmulBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                    const float* weight, size_t N, size_t C, size_t OC, Write dinp_write,
                    DenseFormat format) {
  thread_local OperandStore weights;
  weights.Clear();
  const DenseOperand w = weights.Prepare(weight, OC * C, format);
  ForBlocks(N, ProductRowBlock(N), [&](size_t r0, size_t r1) {
    MatmulInputGradBlock(dinp, dout, w, r0, r1, C, OC, dinp_write, format);
  });
  thread_local GradTasks tasks;
  tasks.AddMatmul(dweight, dbias, dout, inp, N, C, OC, format);
  tasks.Run();
}

// out = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), evaluated as x sigmoid(2u):
// the same function (0.5 (1 + tanh u) = sigmoid(2u)), with one exp instead of glibc's tanhf
// (about 4x slower) and no cancellation in 1 + tanh u for negative x.
void GeluForward(float* out, const float* inp, size_t n) {
  ForBlocks(n, kElementBlock, [&](size_t i0, size_t i1) {
    GeluForwardSimd(out + i0, inp + i0, i1 - i0);
  });
}

// dinp (+)= dout * (s + 2 x s (1 - s) du/dx), s = sigmoid(2u), du/dx = sqrt(2/pi) (1 + 3 * 0.044715
// x^2) (the same as 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx).
void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n, Write dinp_write) {
  ForBlocks(n, kElementBlock, [&](size_t i0, size_t i1) {
    GeluBackwardSimd(dinp + i0, inp + i0, dout + i0, i1 - i0, dinp_write == Write::kAccumulate);
  });
}

// out = a + b
void ResidualForward(float* out, const float* a, const float* b, size_t n) {
  ForBlocks(n, kElementBlock, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
  });
}

// out = x * sigmoid(g)
void SigmoidGateForward(float* out, const float* x, const float* g, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = x[i] / (1.0f + std::exp(-g[i]));
}

// dx += dout * sigmoid(g), dg += dout * x * sigmoid(g) (1 - sigmoid(g))
void SigmoidGateBackward(float* dx, float* dg, const float* dout, const float* x, const float* g,
                         size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float s = 1.0f / (1.0f + std::exp(-g[i]));
    dx[i] += dout[i] * s;
    dg[i] += dout[i] * x[i] * s * (1.0f - s);
  }
}

// y = x r g with r = 1 / sqrt(mean(x^2) + eps) over each head's channels.
void HeadRmsNormForward(float* out, float* rrms, const float* inp, const float* gain, size_t N,
                        size_t C, size_t H) {
  const size_t D = C / H;
  ForBlocks(N, kRowBlock, [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      for (size_t h = 0; h < H; ++h) {
        const float* x = inp + r * C + h * D;
        double sum = 0.0;
        for (size_t c = 0; c < D; ++c) sum += double(x[c]) * x[c];
        const float rr = float(1.0 / std::sqrt(sum / double(D) + 1e-6));
        rrms[r * H + h] = rr;
        for (size_t c = 0; c < D; ++c) out[r * C + h * D + c] = x[c] * rr * gain[h * D + c];
      }
    }
  });
}

// dx_c = r g_c dy_c - x_c r^3 (1/D) sum_k g_k dy_k x_k;  dgain_c += dy_c x_c r (rows in order).
void HeadRmsNormBackward(float* dinp, float* dgain, const float* dout, const float* inp,
                         const float* gain, const float* rrms, size_t N, size_t C, size_t H) {
  const size_t D = C / H;
  ForBlocks(N, kRowBlock, [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      for (size_t h = 0; h < H; ++h) {
        const float* x = inp + r * C + h * D;
        const float* dy = dout + r * C + h * D;
        const float* g = gain + h * D;
        const float rr = rrms[r * H + h];
        double along = 0.0;
        for (size_t c = 0; c < D; ++c) along += double(g[c]) * dy[c] * x[c];
        const float k = float(along / double(D)) * rr * rr * rr;
        for (size_t c = 0; c < D; ++c) dinp[r * C + h * D + c] += rr * g[c] * dy[c] - x[c] * k;
      }
    }
  });
  for (size_t r = 0; r < N; ++r) {  // one writer per gain element, rows in order
    for (size_t c = 0; c < C; ++c) dgain[c] += dout[r * C + c] * inp[r * C + c] * rrms[r * H + c / D];
  }
}

// probs = softmax(logits) per row (max subtracted); losses = -log probs[target], computed as
// log(sum exp(l - max)) - (l[target] - max) so that it stays finite when probs[target]
// underflows (cross_entropy_rows.h).
void CrossEntropyForwardBlock(float* probs, float* losses, const float* logits,
                              const uint8_t* targets, size_t r0, size_t r1, size_t V) {
  CrossEntropyRowsSimd(probs + r0 * V, losses + r0, logits + r0 * V, targets + r0, r1 - r0, V);
}

float MeanLoss(const float* losses, size_t N) {
  double total = 0.0;
  for (size_t r = 0; r < N; ++r) total += losses[r];
  return static_cast<float>(total / static_cast<double>(N));
}

float CrossEntropyForward(float* probs, float* losses, const float* logits, const uint8_t* targets,
                          size_t N, size_t V) {
  ForBlocks(N, kRowBlock, [&](size_t r0, size_t r1) {
    CrossEntropyForwardBlock(probs, losses, logits, targets, r0, r1, V);
  });
  return MeanLoss(losses, N);
}

void CrossEntropyBackwardBlock(float* dlogits, const float* probs, const uint8_t* targets,
                               size_t N, size_t r0, size_t r1, size_t V) {
  const float inv_n = 1.0f / static_cast<float>(N);
  for (size_t r = r0; r < r1; ++r) {
    for (size_t v = 0; v < V; ++v) {
      const float indicator = v == targets[r] ? 1.0f : 0.0f;
      dlogits[r * V + v] = (probs[r * V + v] - indicator) * inv_n;
    }
  }
}

// dlogits = (probs - onehot(target)) / N, overwriting.
void CrossEntropyBackward(float* dlogits, const float* probs, const uint8_t* targets, size_t N,
                          size_t V) {
  ForBlocks(N, kRowBlock, [&](size_t r0, size_t r1) {
    CrossEntropyBackwardBlock(dlogits, probs, targets, N, r0, r1, V);
  });
}

}  // namespace lpattn::harness
