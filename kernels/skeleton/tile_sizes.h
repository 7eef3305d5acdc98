// Tile sizes of the attention skeleton, shared by every target and row transform.
#ifndef LPATTN_KERNELS_SKELETON_TILE_SIZES_H_
#define LPATTN_KERNELS_SKELETON_TILE_SIZES_H_

#include <stddef.h>
#include <stdint.h>

#include "kernels/precision.h"

namespace lpattn {

// Queries per tile (a TBB task's unit of forward work) and keys per tile. Both are multiples
// of the 6-row microkernel block and of two vectors on every target (16 lanes included), so
// every product over a full tile runs in whole 6 x 2 register blocks; a 96 x 48 fp32 score
// tile (18 KiB) stays in L1 beside the operand rows.
inline constexpr size_t kTileQ = 96;
inline constexpr size_t kTileK = 48;
inline constexpr size_t kTileMax = kTileQ > kTileK ? kTileQ : kTileK;
// Split-KV (docs/math.md §5): key blocks of kKeyBlock keys (whole key tiles), more once a
// row would have over kMaxKeyBlocks of them.
inline constexpr size_t kKeyBlock = 32 * kTileK;
inline constexpr size_t kMaxKeyBlocks = 128;

// A decode tile of at most kFewQueries rows takes fp32 dot products for its scores
// (score_tile-inl.h's FewQueryScores) instead of a register-tiled or AMX product.
inline constexpr size_t kFewQueries = 4;
// Split-KV over K or V that lays a token's kv heads side by side (token-major pages, [B, T, H,
// D] tensors): a task runs the decode tiles of up to kSpanHeads kv heads in lockstep, tiles of
// at most kSpanRows rows (few-query tiles, whose queries each head packs once), while that
// leaves at least kMinSpannedTasks tasks (docs/design.md §8).
inline constexpr size_t kSpanHeads = 8;
inline constexpr size_t kSpanRows = kFewQueries;
inline constexpr size_t kMinSpannedTasks = 16;
// Rows of the forward's query tiles under the decode plan (docs/design.md §8): a GQA group's
// H / Hkv x q_len queries when there is a group and they fit a tile, else q_len.
inline constexpr size_t DecodeTileRows(size_t heads, size_t kv_heads, size_t q_len) {
  const size_t group = heads / kv_heads;
  return group > 1 && group * q_len <= kTileQ ? group * q_len : q_len;
}

// A forward with at least kDecodeOnceTiles query tiles per kv head (under the decode plan's
// grouping) decodes its coded K and V once per call into fp32 rows rather than once per query
// tile (docs/design.md §8), when a kv head's fp32 K and V take at most kMaxDecodedHeadBytes
// and a side's whole copy at most kMaxDecodedBytes. With fewer tiles each key tile is decoded
// about as often either way (once per query tile, fewer under the causal mask) and the copy
// costs its writes; with longer heads every query tile would stream twice (bf16, fp16) or
// four times (fp8) the codes' bytes, which on AMD Zen 3 cost what decoding per tile saved
// (docs/performance.md §4.5).
inline constexpr size_t kDecodeOnceTiles = 4;
inline constexpr size_t kMaxDecodedHeadBytes = size_t(2) << 20;
inline constexpr size_t kMaxDecodedBytes = size_t(256) << 20;
// Query tiles that read each kv head's keys, under the decode plan's grouping.
inline constexpr size_t QueryTilesPerKvHead(size_t heads, size_t kv_heads, size_t q_len) {
  return DecodeTileRows(heads, kv_heads, q_len) == q_len
             ? (q_len + kTileQ - 1) / kTileQ * (heads / kv_heads)
             : 1;
}
inline constexpr bool DecodesKvOnce(size_t batch, size_t heads, size_t kv_heads, size_t q_len,
                                    size_t kv_len, size_t dim) {
  const size_t head_bytes = 2 * kv_len * dim * sizeof(float);
  return QueryTilesPerKvHead(heads, kv_heads, q_len) >= kDecodeOnceTiles &&
         head_bytes <= kMaxDecodedHeadBytes &&
         batch * kv_heads * head_bytes / 2 <= kMaxDecodedBytes;
}
// The same for the AMX (or dot-tile) score product's key rows built from fp16 or fp8 K
// (AttentionProblem::amx_key_rows): enough query tiles to repeat the per-tile conversion, and
// at most kMaxDecodedBytes of rows (row_codes 16-bit codes a key). No cap per head: the rows
// are what the tiles read, as bf16 K's codes are, so nothing is decoded per tile instead.
inline constexpr bool BuildsKeyRowsOnce(size_t batch, size_t heads, size_t kv_heads,
                                        size_t q_len, size_t kv_len, size_t row_codes) {
  return QueryTilesPerKvHead(heads, kv_heads, q_len) >= kDecodeOnceTiles &&
         batch * kv_heads * kv_len * row_codes * sizeof(uint16_t) <= kMaxDecodedBytes;
}

// The score-tile columns (queries of a tile) [begin, end) a forward computes for one key tile;
// with first_query (the query of column 0, when the columns are consecutive queries of one
// head), each block of keys narrows them to the queries that see it.
struct ColumnRange {
  size_t begin, end;
  size_t first_query = SIZE_MAX;
};

// The backward's dS blocks (docs/math.md §4.2) are the tiles.
static_assert(kTileQ == size_t(kBlockQueries) && kTileK == size_t(kBlockKeys));

}  // namespace lpattn

#endif  // LPATTN_KERNELS_SKELETON_TILE_SIZES_H_
