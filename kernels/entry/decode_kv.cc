// docs/design.md §8: coded rows decoded once per call, by the same per-target decoders the
// forward's key and value tiles use (tile_workspace-inl.h's DecodeRows), and fp16 and fp8 K's
// AMX key rows built once by the per-tile conversion (score_tile-inl.h's AmxCodeRow).
#include "kernels/entry/decode_kv.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/entry/decode_kv.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/skeleton/score_tile-inl.h"
#include "kernels/skeleton/tile_workspace-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {

void DecodeCodedRowsTarget(const CodedKv& coded, size_t b, size_t h, size_t first, size_t n,
                           size_t dim, float* out) {
  DecodeRows(CodedRowsOf(ConstTensor{}, coded, b, h), first, n, dim, dim, out);
}

void BuildAmxKeyRowsTarget(const CodedKv& coded, AmxScores kind, size_t b, size_t h,
                           size_t first, size_t n, size_t dim, uint16_t* out) {
  const HeadRows rows = CodedRowsOf(ConstTensor{}, coded, b, h);
  const size_t row_codes = kind == AmxScores::kFp16 ? 4 * dim : dim;
  for (size_t j = 0; j < n; ++j) AmxCodeRow(rows, first + j, dim, kind, true, out + j * row_codes);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn {

HWY_EXPORT(DecodeCodedRowsTarget);
HWY_EXPORT(BuildAmxKeyRowsTarget);

void DecodeCodedRows(const CodedKv& coded, size_t b, size_t h, size_t first, size_t n,
                     size_t dim, float* out) {
  HWY_DYNAMIC_DISPATCH(DecodeCodedRowsTarget)(coded, b, h, first, n, dim, out);
}

void BuildAmxKeyRows(const CodedKv& coded, AmxScores kind, size_t b, size_t h, size_t first,
                     size_t n, size_t dim, uint16_t* out) {
  HWY_DYNAMIC_DISPATCH(BuildAmxKeyRowsTarget)(coded, kind, b, h, first, n, dim, out);
}

}  // namespace lpattn
#endif  // HWY_ONCE
