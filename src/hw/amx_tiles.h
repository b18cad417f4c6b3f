#pragma once
// The AMX tile unit as the kernels see it, twice: the hardware (HwTiles, in
// the files compiled with -mamx-*) and a scalar model of its instructions
// (ModelTiles) with the same interface, so that one kernel body runs on a
// machine without AMX and its packing and blocking are checked there.
//
// The model follows Intel's definitions (SDM vol. 2, "Intel AMX"; the
// intrinsics guide's pseudocode): palette 1, 8 tiles of up to 16 rows x 64
// bytes; ldtilecfg's 64-byte layout; tileloadd fills rows x colsb bytes and
// zeroes the rest of the tile; TDPB[SU][SU]D: C[m].dword[n] += sum over
// k < A.colsb/4 and j < 4 of A[m].byte[4k+j] * B[k].byte[4n+j], each byte
// signed or unsigned as the mnemonic says, in wrapping 32-bit arithmetic;
// TDPBF16PS: C[m].fp32[n] += A[m].bf16[2k] * B[k].bf16[2n], then
// += A[m].bf16[2k+1] * B[k].bf16[2n+1] (bf16 products are exact in fp32;
// each addition rounds to nearest even; denormal inputs and results are
// zero). What the hardware faults on — an unconfigured tile, shapes that do
// not chain (C.rows != A.rows, C.colsb != B.colsb, A.colsb != 4 B.rows), a
// palette other than 0/1, more than 16 rows or 64 bytes — throws
// std::logic_error naming it (a kernel bug, never an input error).
#include <cstddef>
#include <cstdint>

namespace kestrel {

// ldtilecfg's operand: the tiles' shapes.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row, tiles 0-7 (8-15 reserved: zero)
  uint8_t rows[16] = {};
  void shape(int tile, int n_rows, int bytes_per_row) {
    rows[tile] = static_cast<uint8_t>(n_rows);
    colsb[tile] = static_cast<uint16_t>(bytes_per_row);
  }
};
static_assert(sizeof(TileConfig) == 64);

// The scalar model: one per thread (the tile state is per thread, as the hardware's).
class TileModel {
 public:
  static constexpr int kTiles = 8, kMaxRows = 16, kMaxColsb = 64;
  void configure(const TileConfig& c);  // ldtilecfg (palette 0: release)
  void release();                       // tilerelease
  void load(int t, const void* base, size_t stride);  // tileloadd
  void store(int t, void* base, size_t stride) const;  // tilestored
  void zero(int t);                                    // tilezero
  void dpbssd(int c, int a, int b) { dp_int8(c, a, b, true, true); }
  void dpbsud(int c, int a, int b) { dp_int8(c, a, b, true, false); }
  void dpbusd(int c, int a, int b) { dp_int8(c, a, b, false, true); }
  void dpbuud(int c, int a, int b) { dp_int8(c, a, b, false, false); }
  void dpbf16ps(int c, int a, int b);
  bool configured() const { return configured_; }

 private:
  void check(int t, const char* op) const;
  void dp_int8(int c, int a, int b, bool a_signed, bool b_signed);
  void check_chain(int c, int a, int b, const char* op) const;
  alignas(64) uint8_t data_[kTiles][kMaxRows][kMaxColsb] = {};
  int rows_[kTiles] = {}, colsb_[kTiles] = {};
  bool configured_ = false;
};
TileModel& this_thread_tile_model();

// The kernels' interface, tile numbers as template arguments (the hardware's are immediates).
struct ModelTiles {
  static constexpr const char* kName = "amx (scalar model of the tile instructions)";
  static void configure(const TileConfig& c) { this_thread_tile_model().configure(c); }
  static void release() { this_thread_tile_model().release(); }
  template <int T>
  static void load(const void* p, size_t stride) { this_thread_tile_model().load(T, p, stride); }
  template <int T>
  static void store(void* p, size_t stride) { this_thread_tile_model().store(T, p, stride); }
  template <int T>
  static void zero() { this_thread_tile_model().zero(T); }
  template <int C, int A, int B>
  static void dpbsud() { this_thread_tile_model().dpbsud(C, A, B); }
};

}  // namespace kestrel
