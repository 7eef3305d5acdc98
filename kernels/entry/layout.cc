// Dense layout helpers, the default score scale and ALiBi's slopes declared in attention.h
// (docs/math.md §0, §1.4).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention.h"

namespace lpattn {

// §0: [B, H, T, D], head-major within a batch.
Strides ContiguousBHTD(int64_t heads, int64_t tokens, int64_t dim) {
  return {.batch = heads * tokens * dim, .head = tokens * dim, .token = dim};
}

// §0: [B, T, H, D], token-major within a batch (the layout a fused QKV projection produces).
Strides ContiguousBTHD(int64_t heads, int64_t tokens, int64_t dim) {
  return {.batch = tokens * heads * dim, .head = dim, .token = heads * dim};
}

// §0: default scale 1/sqrt(D). Computed in double and rounded once, so every kernel and the
// fp64 reference see the same float value.
float ResolvedScale(const AttentionShape& shape, const AttentionOptions& options) {
  if (options.scale.has_value()) return *options.scale;
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.head_dim)));
}

// §1.4: the ALiBi paper's geometric slopes, 2^(-8 (h + 1) / H).
std::vector<float> AlibiSlopes(int64_t heads) {
  std::vector<float> slopes(size_t(std::max<int64_t>(heads, 0)));
  for (size_t h = 0; h < slopes.size(); ++h) {
    slopes[h] = float(std::exp2(-8.0 * double(h + 1) / double(heads)));
  }
  return slopes;
}

}  // namespace lpattn
