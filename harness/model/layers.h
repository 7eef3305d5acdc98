// The GPT's layers as forward/backward pairs of plain functions over contiguous float buffers,
// in the style of llm.c's train_gpt2.c (docs/harness.md §1). Shapes use B (batch), T (tokens),
// C (channels), OC (output channels), V (vocabulary). Backward functions ACCUMULATE (+=) into
// their parameter and input gradients, so a block's residual branches add up naturally; the
// caller zeroes gradients once per step. The input gradients of the matmul and GELU backward
// can instead be overwritten (Write::kOverwrite) where that layer is their only writer, which
// spares the model zeroing them.
//
// Every function is deterministic: parallel work is split into fixed-size blocks of rows that
// do not depend on the thread count, and each output element has exactly one writer.
#ifndef LPATTN_HARNESS_MODEL_LAYERS_H_
#define LPATTN_HARNESS_MODEL_LAYERS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "harness/model/dense_operand.h"
#include "harness/model/dense_product.h"

namespace lpattn::harness {

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:] (wpe null: no learned positions, `--pos rope`)
void EncoderForward(float* out, const uint8_t* tokens, const float* wte, const float* wpe,
                    size_t B, size_t T, size_t C);
void EncoderBackward(float* dwte, float* dwpe, const float* dout, const uint8_t* tokens,
                     size_t B, size_t T, size_t C);

// Rotary position embeddings (docs/harness.md §1.1, `--pos rope`): in each head of D channels,
// the pairs (2i, 2i + 1) of q and k at position t turn by the angle t * base^(-2i / D), base
// 10000. The angles' cosines and sines for positions 0..T-1, computed in double.
struct RopeTable {
  size_t T = 0, half = 0;       // positions, pairs per head (D / 2)
  std::vector<float> cos, sin;  // [T, half]
};
RopeTable MakeRopeTable(size_t T, size_t head_dim, double base = 10000.0);
// Rotates q and k of qkv [B, T, 3C] in place (v untouched); C = n_head * head_dim, head_dim
// even, table.T >= T.
void RopeForward(float* qkv, const RopeTable& table, size_t B, size_t T, size_t C,
                 size_t n_head);
// The backward pass: the transposed rotation of dq and dk of dqkv [B, T, 3C], in place.
void RopeBackward(float* dqkv, const RopeTable& table, size_t B, size_t T, size_t C,
                  size_t n_head);

// LayerNorm over C with eps 1e-5; saves mean and rstd ([B*T]) for the backward pass.
void LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                      const float* weight, const float* bias, size_t N, size_t C);
void LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, const float* mean,
                       const float* rstd, size_t N, size_t C);

// Block forms (docs/harness.md §1.6): the rows [r0, r1) of a layer, computed in the calling
// thread exactly as the whole-N function computes them, for a model that chains several layers
// in one task per block of rows. Pointers are to the whole tensors, as above. The weight
// gradients, which sum over all rows, go to GradTasks (grad_tasks.h).
void LayerNormForwardBlock(float* out, float* mean, float* rstd, const float* inp,
                           const float* weight, const float* bias, size_t r0, size_t r1,
                           size_t C);
// dinp += the LayerNorm's input gradient of rows [r0, r1).
void LayerNormInputGradBlock(float* dinp, const float* dout, const float* inp, const float* weight,
                             const float* mean, const float* rstd, size_t r0, size_t r1,
                             size_t C);

// out[N,OC] = inp[N,C] weight[OC,C]^T + bias[OC] (bias may be null), through oneDNN's
// sgemm (dense_product.h), one call per fixed block of rows, the blocks run in parallel by TBB.
// With DenseFormat::kBf16, inp and weight enter the product rounded to bf16 (the bias is
// added in fp32).
void MatmulForward(float* out, const float* inp, const float* weight, const float* bias,
                   size_t N, size_t C, size_t OC, DenseFormat format = DenseFormat::kFp32);
// How a backward function writes an input gradient.
enum class Write { kAccumulate, kOverwrite };
// Block forms: the weight is prepared once per pass (OperandStore::Prepare, fp32: the weight
// itself), and each block prepares its own rows of inp or dout; the forward's rows must be
// the same blocks MatmulForward cuts (ProductRowBlock(N), for_blocks.h) for the same bits.
void MatmulForwardBlock(float* out, const float* inp, DenseOperand weight, const float* bias,
                        size_t r0, size_t r1, size_t C, size_t OC, DenseFormat format);
// A product and the residual sum after it in one: out = residual + (inp weight^T + bias), rows
// [r0, r1) (out and residual [N, OC], bias not null); summed as (residual + bias) + the product.
void MatmulResidualBlock(float* out, const float* residual, const float* inp, DenseOperand weight,
                         const float* bias, size_t r0, size_t r1, size_t C, size_t OC,
                         DenseFormat format);
// dinp[r0, r1) = (or +=) dout[r0, r1) weight.
void MatmulInputGradBlock(float* dinp, const float* dout, DenseOperand weight, size_t r0,
                          size_t r1, size_t C, size_t OC, Write dinp_write, DenseFormat format);

// dinp += dout weight (or = with kOverwrite); dweight += dout^T inp; dbias += column sums of
// dout (dbias may be null). With DenseFormat::kBf16, dout, inp and weight enter both products
// rounded to bf16; dbias sums dout in fp32.
void MatmulBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                    const float* inp, const float* weight, size_t N, size_t C, size_t OC,
                    Write dinp_write = Write::kAccumulate,
                    DenseFormat format = DenseFormat::kFp32);

// tanh-approximation GELU, elementwise over n values.
void GeluForward(float* out, const float* inp, size_t n);
void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n,
                  Write dinp_write = Write::kAccumulate);

// out = a + b, elementwise. Its backward needs no function: d(a) = d(b) = dout, which the model
// passes on by pointer (one branch) and by copy (the other).
void ResidualForward(float* out, const float* a, const float* b, size_t n);

// out = x * sigmoid(g), elementwise (the output gate of the `outgate` arm, docs/harness.md §1: G1).
void SigmoidGateForward(float* out, const float* x, const float* g, size_t n);
void SigmoidGateBackward(float* dx, float* dg, const float* dout, const float* x,
                         const float* g, size_t n);

// Per-head RMSNorm (the `tda` arm, docs/harness.md §1): each head's D = C / H channels of a
// row divided by their root mean square (eps 1e-6), times gain[c]. Saves rrms [N * H], the
// reciprocal RMS. The backward accumulates into dinp and dgain.
void HeadRmsNormForward(float* out, float* rrms, const float* inp, const float* gain, size_t N,
                        size_t C, size_t H);
void HeadRmsNormBackward(float* dinp, float* dgain, const float* dout, const float* inp,
                         const float* gain, const float* rrms, size_t N, size_t C, size_t H);

// Softmax over V of the logits and mean cross-entropy against targets, over N = B*T rows.
// probs[N,V] is saved; losses[N] holds each row's loss; returns the mean loss.
float CrossEntropyForward(float* probs, float* losses, const float* logits,
                          const uint8_t* targets, size_t N, size_t V);
// Block form: probs and losses of rows [r0, r1); MeanLoss sums the losses in row order.
void CrossEntropyForwardBlock(float* probs, float* losses, const float* logits,
                              const uint8_t* targets, size_t r0, size_t r1, size_t V);
float MeanLoss(const float* losses, size_t N);
// dlogits = (probs - onehot(target)) / N (overwrites dlogits).
void CrossEntropyBackward(float* dlogits, const float* probs, const uint8_t* targets, size_t N,
                          size_t V);
// Block form: dlogits of rows [r0, r1) of N.
void CrossEntropyBackwardBlock(float* dlogits, const float* probs, const uint8_t* targets,
                               size_t N, size_t r0, size_t r1, size_t V);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_MODEL_LAYERS_H_
