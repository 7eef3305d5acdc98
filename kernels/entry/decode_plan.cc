// docs/design.md §8: the decode layout and the split-KV blocks of a forward call.
#include "kernels/entry/decode_plan.h"

#include <algorithm>
#include <cstdint>

#include "kernels/skeleton/tile_sizes.h"

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

}  // namespace

void PlanDecode(AttentionProblem& p, ForwardArgs& args) {
  const size_t group = p.group();
  if (group > 1 && group * p.q_len <= kTileQ) {
    const int64_t q_len = int64_t(p.q_len), g = int64_t(group);
    const Strides q = GroupRowStrides(args.q.strides, q_len, g);
    const Strides o = GroupRowStrides(args.o.strides, q_len, g);
    const Strides codes = GroupRowStrides(p.q_codes.strides, q_len, g);
    const bool coded = p.q_codes.codes8 != nullptr;
    if (q.token != 0 && o.token != 0 && (!coded || codes.token != 0)) {
      args.q.strides = q;
      args.o.strides = o;
      if (coded) p.q_codes.strides = codes;
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
}

}  // namespace lpattn
