// The tile configuration (amx_tiles.h).
#include "kernels/native/amx_tiles.h"

#include <immintrin.h>

#include <cstdint>

namespace lpattn::native {
namespace {

// GCC 12's _tile_loadconfig declares only a pointer's worth of its operand as read, so the
// stores that fill a local configuration can be dropped as dead (and ldtilecfg then faults on
// garbage): the configuration is a constant in memory.
struct TileConfig {
  alignas(64) uint8_t bytes[64];
};
constexpr TileConfig MakeTileConfig() {
  TileConfig config{};
  config.bytes[0] = 1;  // palette 1
  for (int t = 0; t < 8; ++t) {
    config.bytes[16 + 2 * t] = kAmxTileBytes;  // bytes per row
    config.bytes[48 + t] = kAmxTileRows;       // rows
  }
  return config;
}
constexpr TileConfig kTileConfig = MakeTileConfig();

__attribute__((target("amx-tile"))) void ConfigureTiles() { _tile_loadconfig(kTileConfig.bytes); }
__attribute__((target("amx-tile"))) void ReleaseTiles() { _tile_release(); }

}  // namespace

AmxTiles::AmxTiles() { ConfigureTiles(); }
AmxTiles::~AmxTiles() { ReleaseTiles(); }

}  // namespace lpattn::native
