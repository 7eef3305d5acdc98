// The AMX tile products and tile scope (amx_products.h, amx_tiles.h) and the bf16 dot tiles
// (bf16_pair_products.h) in a build that is not x86-64, where kernels/CMakeLists.txt compiles
// this file instead of amx_products.cc, amx_tiles.cc and bf16_dot_products.cc (docs/design.md
// §11). No family is enabled there, so the skeleton never takes a
// tile path and none of these is reached; each names itself and aborts if one were.
#include "kernels/native/amx_products.h"
#include "kernels/native/bf16_pair_products.h"
#include "kernels/native/cpu_features.h"
#include "kernels/native/native_paths.h"

#if LPATTN_NATIVE_X86
#error "amx_off_x86.cc is for builds that are not x86-64: compile amx_products.cc and amx_tiles.cc"
#endif

namespace lpattn::native {

AmxTiles::AmxTiles() { NativeFamilyNotCompiled("AmxTiles"); }
AmxTiles::~AmxTiles() = default;

void AmxBf16MatMul(const uint16_t*, size_t, size_t, const uint16_t*, size_t, size_t, size_t, bool,
                   float*, size_t, uint16_t*) {
  NativeFamilyNotCompiled("AmxBf16MatMul");
}
void AmxInt8MatMul(const int8_t*, size_t, size_t, const int8_t*, size_t, size_t, size_t, int32_t*,
                   size_t, int8_t*) {
  NativeFamilyNotCompiled("AmxInt8MatMul");
}
void AmxBf16ScoreTile(const uint16_t*, size_t, size_t, const uint16_t*, size_t, size_t, size_t,
                      float, float*, size_t, uint16_t*) {
  NativeFamilyNotCompiled("AmxBf16ScoreTile");
}
void AmxBf16ScaledScoreTile(const uint16_t*, size_t, size_t, const uint16_t*, size_t, size_t,
                            size_t, const float*, const float*, float*, size_t, uint16_t*) {
  NativeFamilyNotCompiled("AmxBf16ScaledScoreTile");
}
void AmxInt8ScoreTile(const int8_t*, size_t, size_t, const int8_t*, size_t, size_t, size_t,
                      const float*, const float*, float*, size_t, int8_t*, const int8_t* const*) {
  NativeFamilyNotCompiled("AmxInt8ScoreTile");
}
void AmxBf16WeightPairs(const float*, size_t, size_t, size_t, size_t, uint16_t*) {
  NativeFamilyNotCompiled("AmxBf16WeightPairs");
}

bool Bf16DotAtFmaRate() { return false; }
void DotBf16MatMul(const uint16_t*, size_t, size_t, const uint16_t*, size_t, size_t, size_t, bool,
                   float*, size_t) {
  NativeFamilyNotCompiled("DotBf16MatMul");
}
void DotBf16ScoreTile(const uint16_t*, size_t, size_t, const uint16_t*, size_t, size_t, size_t,
                      float, const float*, const float*, float*, size_t) {
  NativeFamilyNotCompiled("DotBf16ScoreTile");
}

}  // namespace lpattn::native
