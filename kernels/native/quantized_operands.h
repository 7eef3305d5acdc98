// The operands of a kernel call as the precision option stores them (docs/math.md §4), made
// once per call (or once per PreparedKv) and owned here:
// - simulation: each quantized operand replaced by a dense dequantized fp32 copy, so every row
//   transform sees exactly the values a low-precision product would multiply; in the backward
//   the same copies stand in for the operands (straight-through: the gradients with respect to
//   the unquantized operands are computed with the dequantized ones);
// - the native path of the dense forwards: bf16/fp16 K and V as 16-bit codes, fp8 ones as
//   8-bit codes with a scale per token, int8 Q and K as
//   integer codes with per-token scales, int8 V in key quads (or V^T) for the integer P V
//   product.
#ifndef LPATTN_KERNELS_NATIVE_QUANTIZED_OPERANDS_H_
#define LPATTN_KERNELS_NATIVE_QUANTIZED_OPERANDS_H_

#include <deque>
#include <vector>

#include "kernels/attention.h"
#include "kernels/native/buffer_pool.h"
#include "kernels/skeleton/attention_problem.h"

namespace lpattn {

// The copies and codes a call makes, pooled across calls (buffer_pool.h).
template <class T>
using Buffer = std::vector<T, native::PooledAllocator<T>>;

// What QuantizedOperands::PrepareBackward prepares.
struct BackwardPlan {
  bool tiles = true;       // the AMX tile layouts too (a sparse transform's backward reads none)
  bool forward_qk = true;  // the arguments' Q and K are the forward's (not normalised copies)
};

class QuantizedOperands {
 public:
  QuantizedOperands(const AttentionShape& shape, const Precision& precision)
      : shape_(shape), precision_(precision) {}

  // The view to multiply with: `t` itself when its format is fp32, else a dequantized copy
  // (owned by this object). Throws std::invalid_argument as quant::QuantizeDequantize does.
  ConstTensor Query(ConstTensor q, const char* name = "lpattn quantized Q");
  ConstTensor Key(ConstTensor k, const char* name = "lpattn quantized K");
  ConstTensor Value(ConstTensor v, const char* name = "lpattn quantized V");
  // Args (ForwardArgs, BackwardArgs, the K-interval ones) with q, k and v replaced.
  template <class Args>
  Args Substitute(Args args) {
    args.q = Query(args.q);
    args.k = Key(args.k);
    args.v = Value(args.v);
    return args;
  }
  // The same for a dense transform's forward, taking the native path where the precision
  // allows it (precision.h): bf16 or fp16 K and V become 16-bit codes (problem's k_codes,
  // v_codes), int8 Q and K (not per channel, not smoothed) integer codes (problem's int_qk);
  // the float views in the result are then not read.
  // A call that decodes K and V once (tile_sizes.h's DecodesKvOnce) takes their rounded fp32
  // copies at once instead of codes it would decode (docs/design.md §8).
  template <class Args>
  Args SubstituteForward(Args args, AttentionProblem& problem) {
    const KvViews kv = PrepareKv(args.k, args.v, problem, DecodesOnce());
    args.k = kv.k;
    args.v = kv.v;
    args.q = PrepareQueries(args.q, problem);
    return args;
  }
  // SubstituteForward's two halves: K and V (an engine may prepare them once, PreparedKv),
  // and Q (every call).
  struct KvViews {
    ConstTensor k, v;
  };
  // copies: bf16, fp16 and fp8 K and V that only the per-tile decoders would read become
  // rounded fp32 copies (the simulation's values, which the decoders give bit for bit).
  KvViews PrepareKv(ConstTensor k, ConstTensor v, AttentionProblem& problem,
                    bool copies = false);
  // A dense copy of a K-shaped tensor, owned like the others (PreparedKv's fp32 operands).
  ConstTensor OwnKeyShaped(ConstTensor t);
  // docs/math.md §4.2, the low-precision backward: rounded copies of its products' operands
  // (from `args` as Substitute returns them, so on the forward's dequantized Q, K and V) and
  // how P and dS are rounded, into problem.bwd. Nothing with bwd = bwd_dp = fp32.
  void PrepareBackward(const BackwardArgs& args, AttentionProblem& problem,
                       BackwardPlan plan = {});
  // Bytes of every buffer held: copies, codes and scales.
  size_t BytesHeld() const;
  ConstTensor PrepareQueries(ConstTensor q, AttentionProblem& problem);

 private:
  ConstTensor Quantize(ConstTensor t, const quant::QuantSpec& spec, int64_t heads,
                       int64_t tokens, const char* name);
  // bf16 or fp16 without smoothing, on the native path: storage the forward decodes itself.
  bool Native(const quant::QuantSpec& spec) const;
  // Whether this call decodes coded K and V once (DecodesKvOnce); whether a bf16 pair score
  // product (AMX or dot tiles) may read codes of K in format `key` themselves (AmxScoresFor);
  // whether the call's query tiles are a decode step's few rows (kFewQueries).
  bool DecodesOnce() const;
  bool TilesMayReadKeyCodes(quant::Format key) const;
  bool FewQueryTiles() const;
  CodedKv Encode(ConstTensor t, quant::Format format);
  // fp8 with a scale per token, block or tensor, without smoothing, on the native path: one
  // byte an element and a scale per token (quant::QuantizeToCodes), decoded per key tile.
  bool NativeFp8(const quant::QuantSpec& spec) const;
  CodedKv EncodeFp8(ConstTensor t, const quant::QuantSpec& spec, const char* what);
  // How the score product can run on bf16 pair tiles with K coded as `k` (PrepareKv's) and Q
  // in the precision's format: bf16 with bf16, fp8 with fp8, and on AMX fp16 with fp16
  // (attention_problem.h).
  AmxScores AmxScoresFor(const CodedKv& k) const;
  // int8 Q K^T on the native path: per-token, per-block or per-tensor scales, no smoothing.
  bool NativeInt8(const quant::QuantSpec& key) const;
  // int8 codes of Q (rows widened to int16), into `out`.
  void EncodeIntQueries(ConstTensor q, IntQk& out);
  // Whether int8 Q K^T can take AMX tiles (amx_int8 enabled, a head dimension they take) or
  // the u8 x s8 VNNI tile (a VNNI family enabled, head_dim a multiple of 4).
  bool AmxInt8Keys() const;
  bool VnniInt8Keys() const;
  // int8 K as rows of codes with their sums, one byte an element, into `out`.
  void EncodeInt8KeyRows(ConstTensor k, IntQk& out);
  // int8 P V on the native path: p = int8, V in int8 with one scale per tensor.
  bool NativeInt8Pv(const quant::QuantSpec& value) const;
  // V^T for AMX int8, else key quads.
  IntPv EncodeIntValues(ConstTensor v);
  // bf16 V with p = bf16, a head dimension the tiles take, avx512_bf16 and the pair tiles
  // enabled (AMX, or the dot tiles over query tiles of more than a few rows; V must also hold
  // no inf or NaN: EncodeTransposedValues): the P V product on bf16 pair tiles.
  bool AmxBf16Pv(const quant::QuantSpec& value) const;
  // V^T's codes into `out`, or false (nothing set) when V holds an inf or NaN.
  bool EncodeTransposedValues(ConstTensor v, AmxPv& out);
  Buffer<uint8_t> Int8Codes(ConstTensor t, const quant::QuantSpec& spec, int64_t heads,
                                 int64_t tokens, const char* what, Buffer<float>& scales);
  // §4.2's bf16 backward on AMX tiles: whether the options and the CPU allow it, and each
  // operand's tile layouts (BackwardTiles) from its rounded copy.
  bool BackwardTilesApply() const;
  void PrepareBackwardTiles(const BackwardArgs& args, BackwardRounding& r);
  // An operand's int8 codes with a scale per channel (BackwardTokenSumSpec's), dense
  // [slices][tokens][D], the scales [slice][D] into `scales`.
  Buffer<uint8_t> ChannelCodes(ConstTensor t, int64_t heads, int64_t tokens,
                               const float*& scales);
  // The same codes as the int8 backward's tiles read them: [D][t_pad] per slice (a channel's
  // codes along the tokens), zero past `tokens`; as int8 codes for AMX's int8 tiles, or as the
  // bf16 codes of their values (exact) for the dot tiles.
  const int8_t* Int8ChannelRows(ConstTensor t, int64_t heads, int64_t tokens, size_t t_pad,
                                const float*& scales);
  const uint16_t* Bf16ChannelRows(ConstTensor t, int64_t heads, int64_t tokens, size_t t_pad,
                                  const float*& scales);
  // Dense int8 codes [slices][tokens][D] transposed to [slices][D][t_pad], zero past `tokens`
  // (AMX int8 tiles' rows of tokens: V^T, and the int8 backward's operands), held here.
  const int8_t* TransposedCodes(const Buffer<uint8_t>& codes, size_t slices, size_t tokens,
                                size_t t_pad);
  // One AMX tile layout (attention_problem.h's BackwardTiles; kTransposed is the forward's V^T
  // too) of a tensor holding bf16 values, whose codes are the upper halves of their bits. Needs
  // AVX-512 (every AMX path's condition). finite turns false if an element is inf or NaN.
  enum class Bf16Layout { kRows, kTransposed, kChannelPairs };
  const uint16_t* Bf16Codes(ConstTensor t, int64_t heads, int64_t tokens, size_t t_pad,
                            Bf16Layout layout, bool& finite);
  AttentionShape shape_;
  Precision precision_;
  std::deque<Buffer<float>> copies_;
  std::deque<Buffer<uint16_t>> codes_;
  std::deque<Buffer<int16_t>> int_queries_;
  std::deque<Buffer<int32_t>> int_keys_;  // K's code sums
  std::deque<Buffer<uint8_t>> int8_rows_;
  std::deque<Buffer<uint16_t>> tile_codes_;  // written in full: no zeroing
};

}  // namespace lpattn

#endif  // LPATTN_KERNELS_NATIVE_QUANTIZED_OPERANDS_H_
