#include "hw/tuning.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "hw/limits.h"
#include "hw/topology.h"

namespace kestrel {
namespace {

// Largest power of two <= v, within [16, kMaxTokenChunk].
int64_t clamp_pow2(int64_t v) {
  int64_t p = 16;
  while (p * 2 <= v && p * 2 <= Tuning::kMaxTokenChunk) p *= 2;
  return p;
}

}  // namespace

int64_t tile_crossover(const std::vector<CrossoverPoint>& points) {
  int64_t from = points.empty() ? Tuning{}.tile_min_tokens : points.back().tokens + 1;
  for (auto it = points.rbegin(); it != points.rend() && it->tiles_s < it->streaming_s; ++it) from = it->tokens;
  return from;
}

Tuning derived_tuning() {
  Tuning t;
  const int64_t l2 = topology().l2_bytes() > 0 ? topology().l2_bytes() : (512 << 10);
  // Half of L2 for the activation chunk of a typical 4096-wide row:
  // Q8_0 takes 34 bytes + 32 bytes of lane sums per 32 values, floats 4 bytes each.
  t.q8_token_chunk = clamp_pow2(l2 / 2 / (4096 / 32 * 66));
  t.float_token_chunk = clamp_pow2(l2 / 2 / (4096 * 4));
  t.source = fmt::format("derived from the {} KiB L2", l2 >> 10);
  return t;
}

std::string tuning_file_path() { return per_machine_cache_file("tuning", ".json"); }

std::optional<Tuning> load_tuning_file() {
  std::ifstream in(tuning_file_path());
  if (!in) return std::nullopt;
  try {
    const auto j = nlohmann::json::parse(in);
    Tuning t;
    t.q8_token_chunk = std::clamp<int64_t>(j.at("q8_token_chunk").get<int64_t>(), 1, Tuning::kMaxTokenChunk);
    t.float_token_chunk = std::clamp<int64_t>(j.at("float_token_chunk").get<int64_t>(), 1, Tuning::kMaxTokenChunk);
    // Files from before the crossover was measured keep the default.
    if (j.contains("tile_min_tokens"))
      t.tile_min_tokens = std::clamp<int64_t>(j.at("tile_min_tokens").get<int64_t>(), 1, 1 << 20);
    t.source = tuning_file_path();
    return t;
  } catch (const std::exception&) {
    return std::nullopt;  // a damaged file falls back to the derived defaults
  }
}

void store_tuning_file(const Tuning& t) {
  std::error_code ec;
  std::filesystem::create_directories(limits_cache_path(), ec);
  std::ofstream out(tuning_file_path());
  if (!out) throw Error(fmt::format("{}: cannot write the tuning file", tuning_file_path()));
  out << nlohmann::json{{"q8_token_chunk", t.q8_token_chunk},
                        {"float_token_chunk", t.float_token_chunk},
                        {"tile_min_tokens", t.tile_min_tokens}}
             .dump(2)
      << "\n";
}

const Tuning& tuning() {
  static const Tuning t = load_tuning_file().value_or(derived_tuning());
  return t;
}

}  // namespace kestrel
