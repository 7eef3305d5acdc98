// docs/design.md §8: the decode layout and the split-KV blocks of a forward call.
#include "kernels/entry/decode_plan.h"

#include <algorithm>
#include <cstdint>

#include "kernels/entry/decode_kv.h"
#include "kernels/skeleton/tile_sizes.h"
#include "tbb/blocked_range2d.h"
#include "tbb/parallel_for.h"

namespace lpattn {
namespace {

// Strides that step through a group's rows (query head after query head, query after query)
// with one token stride, or nothing (token stride 0) when the layout has none.
Strides GroupRowStrides(const Strides& s, int64_t q_len, int64_t group) {
  Strides grouped{s.batch, s.head * group, 0};
  if (q_len == 1) {
    grouped.token = s.head;
  } else if (s.head == q_len * s.token) {
    grouped.token = s.token;
  }
  return grouped;
}

// Row t of head h of batch b of a view.
template <class T>
T* Row(T* data, const Strides& s, size_t b, size_t h, size_t t) {
  return data + b * size_t(s.batch) + h * size_t(s.head) + t * size_t(s.token);
}

// Q's rows copied into [B, H, T, D] order.
void CopyQueryRows(ConstTensor& q, size_t batch, size_t heads, size_t q_len, size_t dim,
                   std::vector<float, native::PooledAllocator<float>>& rows) {
  const Strides dense = ContiguousBHTD(int64_t(heads), int64_t(q_len), int64_t(dim));
  rows.resize(batch * heads * q_len * dim);
  for (size_t b = 0; b < batch; ++b) {
    for (size_t h = 0; h < heads; ++h) {
      for (size_t t = 0; t < q_len; ++t) {
        const float* row = Row(q.data, q.strides, b, h, t);
        std::copy(row, row + dim, Row(rows.data(), dense, b, h, t));
      }
    }
  }
  q = {rows.data(), dense};
}

// fn(slice, first, n) over every (batch, kv head) slice's K or V rows in blocks of up to 256,
// in parallel: the per-call passes over a call's kv rows.
template <class Fn>
void ForEachRowBlock(const AttentionProblem& p, const Fn& fn) {
  constexpr size_t kRowsPerTask = 256;
  tbb::parallel_for(
      tbb::blocked_range2d<size_t>(0, p.batch * p.kv_heads, 1, 0, p.kv_len, kRowsPerTask),
      [&](const tbb::blocked_range2d<size_t>& r) {
        for (size_t slice = r.rows().begin(); slice < r.rows().end(); ++slice) {
          fn(slice, r.cols().begin(), r.cols().size());
        }
      });
}

// Rows of `coded` decoded into rows (dense [B, Hkv, kv_len, D]), in parallel over heads and
// blocks of rows: each row's values are the decoder's whatever the split.
ConstTensor DecodeOnce(const AttentionProblem& p, const CodedKv& coded,
                       std::vector<float, native::PooledAllocator<float>>& rows) {
  rows.resize(p.batch * p.kv_heads * p.kv_len * p.dim);
  ForEachRowBlock(p, [&](size_t slice, size_t first, size_t n) {
    DecodeCodedRows(coded, slice / p.kv_heads, slice % p.kv_heads, first, n, p.dim,
                    rows.data() + (slice * p.kv_len + first) * p.dim);
  });
  return {rows.data(), ContiguousBHTD(int64_t(p.kv_heads), int64_t(p.kv_len), int64_t(p.dim))};
}

// K's rows for the AMX score product built once (BuildsAmxKeyRows) into rows: dense
// [B, Hkv, kv_len, row codes] bf16 codes, in parallel as DecodeOnce; fp8's token scales stay
// the codes'.
CodedKv AmxKeyRowsOnce(const AttentionProblem& p,
                       std::vector<uint16_t, native::PooledAllocator<uint16_t>>& rows) {
  const size_t row_codes = p.amx_qk == AmxScores::kFp16 ? 4 * p.dim : p.dim;
  rows.resize(p.batch * p.kv_heads * p.kv_len * row_codes);
  ForEachRowBlock(p, [&](size_t slice, size_t first, size_t n) {
    BuildAmxKeyRows(p.k_codes, p.amx_qk, slice / p.kv_heads, slice % p.kv_heads, first, n,
                    p.dim, rows.data() + (slice * p.kv_len + first) * row_codes);
  });
  CodedKv built;
  built.data = rows.data();
  built.strides = ContiguousBHTD(int64_t(p.kv_heads), int64_t(p.kv_len), int64_t(row_codes));
  built.token_scales = p.k_codes.token_scales;
  built.scale_strides = p.k_codes.scale_strides;
  return built;
}

// Whether rows `s` apart lay each token's kv heads side by side: a head's row starts within
// one token's stride of the previous head's.
bool HeadsSideBySide(const Strides& s) { return s.head > 0 && s.head < s.token; }

}  // namespace

size_t SpanHeads(const AttentionProblem& p, const ForwardArgs& args) {
  if (p.key_block == 0 || p.kv_len <= p.key_block || p.group() != 1 || p.heads < 2 ||
      p.q_len > kSpanRows) {
    return 1;
  }
  bool keys = HeadsSideBySide(p.k_codes.set() ? p.k_codes.strides : args.k.strides);
  if (p.int_qk.k_rows != nullptr) {  // the integer products read their own rows
    const size_t first = p.int_qk.KeyRow(0, 0, p.kv_heads, p.kv_len, 0);
    const size_t next_head = p.int_qk.KeyRow(0, 1, p.kv_heads, p.kv_len, 0);
    const size_t next_token = p.int_qk.KeyRow(0, 0, p.kv_heads, p.kv_len, 1);
    keys = next_head > first && next_head - first < next_token - first;
  }
  const bool values =
      !p.int_pv.set() && HeadsSideBySide(p.v_codes.set() ? p.v_codes.strides : args.v.strides);
  if (!keys && !values) return 1;
  const size_t blocks = (p.kv_len + p.key_block - 1) / p.key_block;
  size_t span = std::min(kSpanHeads, p.heads);
  while (span > 2 && p.batch * ((p.heads + span - 1) / span) * blocks < kMinSpannedTasks) {
    span = (span + 1) / 2;
  }
  return span;
}

bool BuildsAmxKeyRows(const AttentionProblem& p) {
  if (p.amx_qk != AmxScores::kFp16 && p.amx_qk != AmxScores::kFp8) return false;
  if (p.k_codes.block_tables != nullptr) return false;  // paged: per tile (scales per block)
  const size_t row_codes = p.amx_qk == AmxScores::kFp16 ? 4 * p.dim : p.dim;
  return BuildsKeyRowsOnce(p.batch, p.heads, p.kv_heads, p.q_len, p.kv_len, row_codes);
}

bool DecodesOnce(const AttentionProblem& p, bool keys) {
  const CodedKv& coded = keys ? p.k_codes : p.v_codes;
  if (coded.data == nullptr && coded.codes8 == nullptr) return false;  // fp32 or no codes
  if (keys && p.amx_qk != AmxScores::kOff) return false;  // the tiles read K's codes
  return DecodesKvOnce(p.batch, p.heads, p.kv_heads, p.q_len, p.kv_len, p.dim);
}

DecodePlan::DecodePlan(AttentionProblem& p, ForwardArgs& args, ConstTensor* second_q) {
  const size_t group = p.group();
  if (DecodeTileRows(p.heads, p.kv_heads, p.q_len) != p.q_len) {
    const int64_t q_len = int64_t(p.q_len), g = int64_t(group);
    const bool coded = p.q_codes.codes8 != nullptr;
    // Q's fp8 codes are made per call in [B, H, T, D] order, which always groups.
    if (!coded || GroupRowStrides(p.q_codes.strides, q_len, g).token != 0) {
      const Strides dense = ContiguousBHTD(int64_t(p.heads), q_len, int64_t(p.dim));
      batch_ = p.batch, heads_ = p.heads, q_len_ = p.q_len, dim_ = p.dim;
      if (GroupRowStrides(args.q.strides, q_len, g).token == 0) {  // copied into [B, H, T, D]
        CopyQueryRows(args.q, batch_, heads_, q_len_, dim_, q_rows_);
      }
      if (second_q != nullptr) {
        if (GroupRowStrides(second_q->strides, q_len, g).token == 0) {
          CopyQueryRows(*second_q, batch_, heads_, q_len_, dim_, q2_rows_);
        }
        second_q->strides = GroupRowStrides(second_q->strides, q_len, g);
      }
      if (GroupRowStrides(args.o.strides, q_len, g).token == 0) {  // written there, copied back
        o_rows_.resize(batch_ * heads_ * q_len_ * dim_);
        caller_o_ = args.o;
        args.o = {o_rows_.data(), dense};
      }
      args.q.strides = GroupRowStrides(args.q.strides, q_len, g);
      args.o.strides = GroupRowStrides(args.o.strides, q_len, g);
      if (coded) {
        p.q_codes.strides = GroupRowStrides(p.q_codes.strides, q_len, g);
        p.q_codes.scale_strides = GroupRowStrides(p.q_codes.scale_strides, q_len, g);
      }
      p.head_rows = p.q_len;
      p.query_group = group;
      p.q_len *= group;
      p.heads = p.kv_heads;
    }
  }
  if (p.q_len <= kTileQ && p.kv_len > kKeyBlock) {
    const size_t spread = (p.kv_len + kMaxKeyBlocks - 1) / kMaxKeyBlocks;
    p.key_block = std::max(kKeyBlock, (spread + kTileK - 1) / kTileK * kTileK);
  }
  if (BuildsAmxKeyRows(p)) {
    p.k_codes = AmxKeyRowsOnce(p, k_amx_rows_);
    p.amx_key_rows = true;
  }
  if (DecodesOnce(p, true)) {
    args.k = DecodeOnce(p, p.k_codes, k_rows_);
    p.k_codes = {};
  }
  if (DecodesOnce(p, false)) {
    args.v = DecodeOnce(p, p.v_codes, v_rows_);
    p.v_codes = {};
  }
  p.span_heads = SpanHeads(p, args);
}

void DecodePlan::Finish() const {
  if (o_rows_.empty()) return;
  const Strides dense = ContiguousBHTD(int64_t(heads_), int64_t(q_len_), int64_t(dim_));
  for (size_t b = 0; b < batch_; ++b) {
    for (size_t h = 0; h < heads_; ++h) {
      for (size_t t = 0; t < q_len_; ++t) {
        const float* row = Row(o_rows_.data(), dense, b, h, t);
        std::copy(row, row + dim_, Row(caller_o_.data, caller_o_.strides, b, h, t));
      }
    }
  }
}

}  // namespace lpattn
