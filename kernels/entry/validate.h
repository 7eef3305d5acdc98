// Argument checks shared by every kernel entry point: they run before any work and throw
// std::invalid_argument with a message that names the offending argument.
#ifndef LPATTN_KERNELS_ENTRY_VALIDATE_H_
#define LPATTN_KERNELS_ENTRY_VALIDATE_H_

#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "kernels/kv_cache.h"

namespace lpattn {

void ValidateForward(const AttentionShape& shape, const AttentionOptions& options,
                     const ForwardArgs& args);
void ValidateBackward(const AttentionShape& shape, const AttentionOptions& options,
                      const BackwardArgs& args);

// The pieces, for entry points with other arguments: the shape and options, and one Q-shaped
// (q, o, d_o, dq) or K-shaped (k, v, dk, dv) tensor named `name` (data not null, strides valid).
void ValidateShapeAndOptions(const AttentionShape& shape, const AttentionOptions& options);
void ValidateQueryShaped(const ConstTensor& tensor, const AttentionShape& shape, const char* name);
void ValidateKeyShaped(const ConstTensor& tensor, const AttentionShape& shape, const char* name);

// A forward over a KvCache (kv_cache.h): the shape against the cache, the slots named (each
// holding a token at least), the precision against the cache's formats, q and o (the caller
// checks its per-row outputs); a keys_only cache when reads_values. Returns each sequence's
// length.
std::vector<int64_t> ValidateCachedForward(const AttentionShape& shape,
                                           const AttentionOptions& options, const KvCache& cache,
                                           const ConstTensor& q, const ConstTensor& o,
                                           const int64_t* sequences, const int64_t* q_offsets,
                                           bool reads_values = true);

}  // namespace lpattn

#endif  // LPATTN_KERNELS_ENTRY_VALIDATE_H_
