#pragma once
// Tile parameters of the tiled kernels. Defaults are derived from the probed
// cache sizes; `kestrel tune` measures candidates on this machine and stores
// the winners in a per-machine file that later runs load. Never needed for
// correctness: every value gives the same results, only at different speeds.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kestrel {

struct Tuning {
  int64_t q8_token_chunk = 64;     // tokens whose Q8_0 activations stay in L2 while weight rows stream
  int64_t float_token_chunk = 64;  // the same for float activations
  // The smallest batch the tile unit's kernels (AMX) take over from the streaming ones (AVX-512 VNNI) at:
  // `kestrel tune` measures the crossover where the tiles are usable; 16 (two 8-token tiles) until then.
  int64_t tile_min_tokens = 16;
  std::string source;              // "derived from caches" or the tuning file's path

  static constexpr int64_t kMaxTokenChunk = 256;
};

// The crossover from timings of the same weight at growing batch sizes: the smallest measured batch from
// which on the tiles are faster than the streaming kernels at that size and every larger one; one past the
// largest batch measured when they never are (tiles unused there).
struct CrossoverPoint {
  int64_t tokens;
  double streaming_s, tiles_s;
};
int64_t tile_crossover(const std::vector<CrossoverPoint>& points);

Tuning derived_tuning();                         // from topology(): L2 size
std::string tuning_file_path();                  // next to the measured limits
std::optional<Tuning> load_tuning_file();
void store_tuning_file(const Tuning& t);         // throws Error naming the path
const Tuning& tuning();                          // the file if present, else derived; read once

}  // namespace kestrel
