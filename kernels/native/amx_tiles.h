// The AMX tile state of lpattn's tile products (docs/design.md §4): one palette for all of
// them, the eight tiles 16 rows x 64 bytes (16 fp32 or int32; 32 bf16 as 16 pairs; 64 int8 as
// 16 quads), configured for a scope and released at its end.
#ifndef LPATTN_KERNELS_NATIVE_AMX_TILES_H_
#define LPATTN_KERNELS_NATIVE_AMX_TILES_H_

#include <cstddef>

namespace lpattn::native {

inline constexpr size_t kAmxTileRows = 16;
inline constexpr size_t kAmxTileBytes = 64;

// The tiles configured for lpattn's products for as long as this object lives on the calling
// thread, released when it goes: a forward task configures them once, not once per product
// (ldtilecfg per product was a tenth of the products' time). Every tile product needs one alive
// on its thread; nothing else may use AMX on that thread meanwhile. Construct it only where
// native::NativePathEnabled says an AMX family is enabled (Linux's permission is granted then).
class AmxTiles {
 public:
  AmxTiles();
  ~AmxTiles();
  AmxTiles(const AmxTiles&) = delete;
  AmxTiles& operator=(const AmxTiles&) = delete;
};

}  // namespace lpattn::native

#endif  // LPATTN_KERNELS_NATIVE_AMX_TILES_H_
