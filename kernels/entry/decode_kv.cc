// docs/design.md §8: coded rows decoded once per call, by the same per-target decoders the
// forward's key and value tiles use (tile_workspace-inl.h's DecodeRows).
#include "kernels/entry/decode_kv.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/entry/decode_kv.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/skeleton/tile_workspace-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {

void DecodeCodedRowsTarget(const CodedKv& coded, size_t b, size_t h, size_t first, size_t n,
                           size_t dim, float* out) {
  DecodeRows(CodedRowsOf(ConstTensor{}, coded, b, h), first, n, dim, dim, out);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn {

HWY_EXPORT(DecodeCodedRowsTarget);

void DecodeCodedRows(const CodedKv& coded, size_t b, size_t h, size_t first, size_t n,
                     size_t dim, float* out) {
  HWY_DYNAMIC_DISPATCH(DecodeCodedRowsTarget)(coded, b, h, first, n, dim, out);
}

}  // namespace lpattn
#endif  // HWY_ONCE
