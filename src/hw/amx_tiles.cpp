#include "hw/amx_tiles.h"

#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

namespace kestrel {

void TileModel::configure(const TileConfig& c) {
  if (c.palette_id == 0) return release();
  if (c.palette_id != 1) throw std::logic_error("ldtilecfg: palette " + std::to_string(c.palette_id) + " (only 0 and 1 exist)");
  for (int t = 0; t < 16; t++) {
    const bool extra = t >= kTiles;
    if (c.rows[t] > kMaxRows || c.colsb[t] > kMaxColsb || (extra && (c.rows[t] || c.colsb[t])) ||
        ((c.rows[t] == 0) != (c.colsb[t] == 0)))
      throw std::logic_error("ldtilecfg: tile " + std::to_string(t) + " shape " + std::to_string(c.rows[t]) + "x" +
                             std::to_string(c.colsb[t]) + " is invalid");
  }
  if (c.start_row != 0) throw std::logic_error("ldtilecfg: start_row must be 0");
  std::memset(data_, 0, sizeof data_);
  for (int t = 0; t < kTiles; t++) rows_[t] = c.rows[t], colsb_[t] = c.colsb[t];
  configured_ = true;
}

void TileModel::release() {
  std::memset(data_, 0, sizeof data_);
  for (int t = 0; t < kTiles; t++) rows_[t] = colsb_[t] = 0;
  configured_ = false;
}

void TileModel::check(int t, const char* op) const {
  if (!configured_) throw std::logic_error(std::string(op) + ": no tile configuration loaded (#UD)");
  if (t < 0 || t >= kTiles || rows_[t] == 0)
    throw std::logic_error(std::string(op) + ": tile " + std::to_string(t) + " is not configured (#UD)");
}

void TileModel::load(int t, const void* base, size_t stride) {
  check(t, "tileloadd");
  const auto* p = static_cast<const uint8_t*>(base);
  std::memset(data_[t], 0, sizeof data_[t]);
  for (int r = 0; r < rows_[t]; r++) std::memcpy(data_[t][r], p + r * stride, colsb_[t]);
}

void TileModel::store(int t, void* base, size_t stride) const {
  check(t, "tilestored");
  auto* p = static_cast<uint8_t*>(base);
  for (int r = 0; r < rows_[t]; r++) std::memcpy(p + r * stride, data_[t][r], colsb_[t]);
}

void TileModel::zero(int t) {
  check(t, "tilezero");
  std::memset(data_[t], 0, sizeof data_[t]);
}

void TileModel::check_chain(int c, int a, int b, const char* op) const {
  check(c, op), check(a, op), check(b, op);
  if (c == a || c == b || a == b) throw std::logic_error(std::string(op) + ": the three tiles must differ (#UD)");
  if (rows_[c] != rows_[a] || colsb_[c] != colsb_[b] || colsb_[a] != 4 * rows_[b] || colsb_[a] % 4 || colsb_[c] % 4)
    throw std::logic_error(std::string(op) + ": shapes do not chain: C " + std::to_string(rows_[c]) + "x" +
                           std::to_string(colsb_[c]) + ", A " + std::to_string(rows_[a]) + "x" +
                           std::to_string(colsb_[a]) + ", B " + std::to_string(rows_[b]) + "x" +
                           std::to_string(colsb_[b]) + " (#UD)");
}

void TileModel::dp_int8(int c, int a, int b, bool a_signed, bool b_signed) {
  check_chain(c, a, b, "tdpb*d");
  auto byte = [](uint8_t v, bool s) { return s ? static_cast<int32_t>(static_cast<int8_t>(v)) : static_cast<int32_t>(v); };
  for (int m = 0; m < rows_[c]; m++)
    for (int n = 0; n < colsb_[c] / 4; n++) {
      uint32_t acc;
      std::memcpy(&acc, data_[c][m] + 4 * n, 4);
      for (int k = 0; k < colsb_[a] / 4; k++)
        for (int j = 0; j < 4; j++)  // products fit int32 (|x| <= 2^16); the sum wraps as the hardware's
          acc += static_cast<uint32_t>(byte(data_[a][m][4 * k + j], a_signed) * byte(data_[b][k][4 * n + j], b_signed));
      std::memcpy(data_[c][m] + 4 * n, &acc, 4);
    }
}

namespace {
// bf16 -> fp32 with denormals as zero; fp32 results with denormals flushed to zero (sign kept).
float bf16_daz(uint16_t v) {
  const uint32_t bits = ((v & 0x7F80u) == 0 ? (v & 0x8000u) : v) << 16;
  return std::bit_cast<float>(bits);
}
float ftz(float f) {
  const auto bits = std::bit_cast<uint32_t>(f);
  return (bits & 0x7F800000u) == 0 ? std::bit_cast<float>(bits & 0x80000000u) : f;
}
}  // namespace

void TileModel::dpbf16ps(int c, int a, int b) {
  check_chain(c, a, b, "tdpbf16ps");
  for (int m = 0; m < rows_[c]; m++)
    for (int n = 0; n < colsb_[c] / 4; n++) {
      float acc;
      std::memcpy(&acc, data_[c][m] + 4 * n, 4);
      for (int k = 0; k < colsb_[a] / 4; k++)
        for (int j = 0; j < 2; j++) {
          uint16_t x, y;
          std::memcpy(&x, data_[a][m] + 4 * k + 2 * j, 2);
          std::memcpy(&y, data_[b][k] + 4 * n + 2 * j, 2);
          // The product of two bf16 values is exact in fp32 (8 x 8 significand bits) unless it underflows,
          // which FTZ makes zero; volatile keeps the compiler from contracting it into an FMA.
          volatile float p = ftz(bf16_daz(x) * bf16_daz(y));
          acc = ftz(acc + p);
        }
      std::memcpy(data_[c][m] + 4 * n, &acc, 4);
    }
}

TileModel& this_thread_tile_model() {
  thread_local TileModel model;
  return model;
}

}  // namespace kestrel
