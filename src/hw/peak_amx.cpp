// The tile unit's peaks (compiled with AMX; called only where amx_state() says the tiles are usable): four
// independent 16x16 int32 (fp32) accumulators, each a full 16x64-byte A times B per instruction.
#include <immintrin.h>

#include <cstring>

#include "hw/peak_kernels.h"
#include "hw/amx_tiles.h"

namespace kestrel::peak {
namespace {

TileConfig full_tiles() {
  TileConfig c;
  for (int t = 0; t < 8; t++) c.shape(t, 16, 64);
  return c;
}

// The tiles configured full, accumulators 0-3 zero, A operands in tiles 4 and 6, B operands in 5 and 7.
void load_operands(const void* a, const void* b) {
  const TileConfig c = full_tiles();
  _tile_loadconfig(&c);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, a, 64);
  _tile_loadd(5, b, 64);
  _tile_loadd(6, a, 64);
  _tile_loadd(7, b, 64);
}

}  // namespace

int32_t int8_dot_amx(int64_t iterations) {
  alignas(64) uint8_t a[16 * 64], b[16 * 64];
  std::memset(a, 3, sizeof a);
  std::memset(b, 0xFE, sizeof b);
  load_operands(a, b);
  for (int64_t it = 0; it < iterations; it++) {
    _tile_dpbssd(0, 4, 5);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 6, 5);
    _tile_dpbssd(3, 6, 7);
  }
  alignas(64) int32_t out[16 * 16];
  _tile_stored(0, out, 64);
  int32_t s = out[0];
  _tile_stored(3, out, 64);
  s ^= out[255];
  _tile_release();
  return s;
}

float bf16_dot_amx(int64_t iterations) {
  alignas(64) uint16_t a[16 * 32], b[16 * 32];
  for (auto& v : a) v = 0x3F80;  // 1.0
  for (auto& v : b) v = 0x3A83;  // ~0.001
  load_operands(a, b);
  for (int64_t it = 0; it < iterations; it++) {
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 6, 5);
    _tile_dpbf16ps(3, 6, 7);
  }
  alignas(64) float out[16 * 16];
  _tile_stored(0, out, 64);
  float s = out[0];
  _tile_stored(3, out, 64);
  s += out[255];
  _tile_release();
  return s;
}

}  // namespace kestrel::peak
