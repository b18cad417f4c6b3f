#pragma once
// Tile parameters of the tiled kernels. Defaults are derived from the probed
// cache sizes; `kestrel tune` measures candidates on this machine and stores
// the winners in a per-machine file that later runs load. Never needed for
// correctness: every value gives the same results, only at different speeds.
#include <cstdint>
#include <optional>
#include <string>

namespace kestrel {

struct Tuning {
  int64_t q8_token_chunk = 64;     // tokens whose Q8_0 activations stay in L2 while weight rows stream
  int64_t float_token_chunk = 64;  // the same for float activations
  std::string source;              // "derived from caches" or the tuning file's path

  static constexpr int64_t kMaxTokenChunk = 256;
};

Tuning derived_tuning();                         // from topology(): L2 size
std::string tuning_file_path();                  // next to the measured limits
std::optional<Tuning> load_tuning_file();
void store_tuning_file(const Tuning& t);         // throws Error naming the path
const Tuning& tuning();                          // the file if present, else derived; read once

}  // namespace kestrel
