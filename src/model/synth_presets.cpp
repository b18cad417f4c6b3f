// The shapes `kestrel synth` writes: each family's own list (model/arch/),
// "tiny" ones for tests and the real models people download (from their
// config.json files) for benchmarks.
#include <fmt/format.h>

#include "core/error.h"
#include "model/family.h"
#include "model/synth.h"

namespace kestrel {

SynthShape synth_shape(const std::string& arch, int64_t dim, int64_t layers, int64_t heads, int64_t kv, int64_t ffn,
                       int64_t vocab, int64_t ctx, SynthDecoder dec) {
  SynthShape s;
  s.arch = arch;
  s.dim = dim, s.layers = layers, s.heads = heads, s.kv_heads = kv, s.ffn = ffn, s.vocab = vocab, s.ctx = ctx;
  s.dec = dec;
  return s;
}

const std::vector<std::pair<std::string, std::vector<std::string>>>& synth_presets() {
  static const auto list = [] {
    std::vector<std::pair<std::string, std::vector<std::string>>> l;
    for (const Family* f : families()) {
      l.push_back({f->name, {}});
      for (const SynthPreset& p : f->presets()) l.back().second.push_back(p.name);
    }
    return l;
  }();
  return list;
}

SynthShape synth_preset(const std::string& arch, const std::string& preset) {
  const Family* f = find_family(arch);
  if (!f) {
    std::string archs;
    for (const auto& [a, names] : synth_presets()) archs += (archs.empty() ? "" : ", ") + a;
    throw Error(fmt::format("--arch '{}' is not supported by synth (supported: {})", arch, archs));
  }
  std::string known;
  for (const SynthPreset& p : f->presets()) {
    if (p.name == preset) return p.shape;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw Error(fmt::format("--preset '{}' is not one of {} for {}", preset, known, arch));
}

}  // namespace kestrel
