// The one tiled attention skeleton (docs/design.md §3): tiling, causal tile skipping, GQA indexing,
// tails, operand packing and the TBB work split live here once; a row transform policy
// (e.g. SoftmaxTransform) decides how scores become weights and how dP becomes dS.
//
//   forward  (task = batch, head, query tile): S^T = K Q^T, W = policy(S), O += W V
//   backward, query side (task = batch, head, query tile): dQ += dS K
//   backward, key side   (task = batch, kv head, key tile): dV += W^T dO, dK += dS^T Q
//   backward, short sequences (task = batch, kv head; Tq, Tk <= kTileMax): both sides at once
//       (dense transforms; sparse ones take the two sides at every length)
// The backward split means no two tasks write the same dQ, dK or dV rows: no atomics, and the
// result does not depend on the thread count. The pieces every pass shares (workspace, packing,
// the task grid) are in tile_workspace-inl.h, the sparse transforms' tiles in
// sparse_tiles-inl.h.
//
// A row transform policy is an object (its options and where its saved statistics go) that
// provides (see SoftmaxTransform, KIntervalTransform, ThresholdTransform):
//   ForwardState, BeginForward(state, sinks, row)  per-row state of one query tile whose first
//       row is `row` of the [batch, heads, q_len] grid; sinks: each row's sink logit, or null
//   kRowStatsPass: if true, ObserveTile(st, nk, columns, j0, visible, all_visible, state) on
//       every key tile and then EndObserving(state, columns), before any weight: for weights
//       that need the final row statistics (K-interval: row max, min, argmax, argmin)
//   WeighTile(st, nk, columns, visible, all_visible, state, alpha)  scores -> weights in place
//       on a key-major tile (the first `columns` queries), with a per-row factor that rescales
//       the output accumulated so far
//   kSparseWeights: if true, instead of WeighTile, WeighTiles(st, st2, nk, columns, visible,
//       all_visible, state) turns one view's scores (st2 null) or two views' into weights in st
//       and returns how many are nonzero; the tile's P V is then skipped (none), accumulated
//       entry by entry (few) or as a dense product. No rescaling. A second view's queries and
//       keys come in SecondView. In the backward a sparse transform's weight is c * a(s), c a
//       per-row coefficient (row parameter kCoefficientParam) and a(s) zero for most scores:
//       Exceed(d, s, row, a, slope) gives a and da/ds, so that dV takes c a, dS = c dP slope,
//       and dP is computed only where a != 0 (dense tiles fall back to the products). Its
//       row sums sum_j dS and sum_j a dP reach FinishTerms (no terms pass).
//   FinishForward(state, nq, out_factor, row)    final output factor; saves the statistics of
//       rows [row, row + nq) of the [batch, heads, q_len] grid
//   kMergesKeyBlocks (split-KV, docs/math.md §5): a key block's kBlockState floats a row,
//       SaveBlock(state, nq, stride, out) and EmptyBlock(nq, stride, out) (no visible key);
//       MergeBlocks(states, blocks, stride, i, sink, row, weights) gives row i's weight per
//       block's output and saves the row's statistics; with kRowStatsPass also
//       MergeObserved(block_states, blocks, merged) and SaveObserved(merged, nq, row), the
//       statistics merged before any block weighs
//   kRowParams, RowParams(row, delta, out)      the backward's view of a row, kRowParams floats
//   WeightAndGrad(d, s, dp, params, w, ds)      the backward's elementwise map: the weight (for
//       dV) and dS from a score and dP, with the row's parameters as vectors
//   kHasRowTerms: if true and NeedsRowTerms(), Terms(d, s, dp, params, t1, t2) summed over each
//       row's visible keys, FinishTerms(row, t1, t2, params, corrections) completing the row's
//       parameters and its dS corrections at Argmax(row) and Argmin(row) (see the backward);
//       a dense one also says GradWaitsForTerms() (does dS need the completed parameters?)
//       and, when it does not, GradAndTerms(d, s, dp, params, ds, t1, t2) gives both at once
//   Specialized(body), optional: calls body(t) with t a compile-time specialisation of the
//       transform for its options; the skeleton runs its per-entry loops inside (WithSpecialized)
//
//
// This header is the contract; the passes are in tiled_forward-inl.h (forward),
// backward_query_side-inl.h and tiled_backward-inl.h (backward). Including it includes them all,
// once per Highway target (each has its own per-target include guard).
#include "kernels/skeleton/tiled_backward-inl.h"
#include "kernels/skeleton/tiled_forward-inl.h"
