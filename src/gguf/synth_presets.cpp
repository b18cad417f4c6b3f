// The shapes `kestrel synth` writes: "tiny" ones for tests, and the real
// models people download (from their config.json files), for benchmarks.
#include <fmt/format.h>

#include "core/error.h"
#include "gguf/synth.h"

namespace kestrel {
namespace {

struct Preset {
  const char* arch;
  const char* name;
  SynthShape shape;
};

// dim, layers, heads, kv_heads, ffn, vocab, ctx; then the family's extras.
SynthShape shape(const char* arch, int64_t dim, int64_t layers, int64_t heads, int64_t kv, int64_t ffn, int64_t vocab,
                 int64_t ctx, SynthDecoder dec = {}) {
  SynthShape s;
  s.arch = arch;
  s.dim = dim, s.layers = layers, s.heads = heads, s.kv_heads = kv, s.ffn = ffn, s.vocab = vocab, s.ctx = ctx;
  s.dec = dec;
  return s;
}

const std::vector<Preset>& decoder_presets() {
  static const std::vector<Preset> presets = {
      {"llama", "tiny", shape("llama", 64, 2, 4, 2, 192, 512, 512)},
      {"llama", "1b", shape("llama", 2048, 22, 32, 4, 5632, 32000, 2048)},     // TinyLlama-1.1B
      {"llama", "7b", shape("llama", 4096, 32, 32, 32, 11008, 32000, 4096)},   // Llama-2-7B
      {"llama", "llama3-1b",                                                   // Llama-3.2-1B
       shape("llama", 2048, 16, 32, 8, 8192, 128256, 131072, SynthDecoder{.tied = true, .rope_base = 5e5f, .rope_factor = 32.0f, .rope_orig_ctx = 8192})},
      {"llama", "llama3-8b",                                                   // Llama-3.1-8B, R1-Distill-Llama-8B
       shape("llama", 4096, 32, 32, 8, 14336, 128256, 131072, SynthDecoder{.rope_base = 5e5f, .rope_factor = 8.0f, .rope_orig_ctx = 8192})},
      {"llama", "tiny-moe", shape("llama", 64, 2, 4, 2, 96, 512, 512, SynthDecoder{.experts = 4, .experts_used = 2, .ffn_expert = 96})},
      {"llama", "mixtral",                                                     // Mixtral-8x7B
       shape("llama", 4096, 32, 32, 8, 14336, 32000, 32768, SynthDecoder{.rope_base = 1e6f, .experts = 8, .experts_used = 2, .ffn_expert = 14336})},
      {"qwen2", "tiny", shape("qwen2", 64, 2, 4, 2, 192, 512, 512, SynthDecoder{.rope_base = 1e6f})},
      {"qwen2", "0.5b", shape("qwen2", 896, 24, 14, 2, 4864, 151936, 32768, SynthDecoder{.tied = true, .rope_base = 1e6f})},  // Qwen2.5-0.5B
      {"qwen2", "r1-1.5b", shape("qwen2", 1536, 28, 12, 2, 8960, 151936, 131072)},  // DeepSeek-R1-Distill-Qwen-1.5B
      {"qwen2", "7b", shape("qwen2", 3584, 28, 28, 4, 18944, 152064, 32768, SynthDecoder{.rope_base = 1e6f})},  // Qwen2.5-7B
      {"qwen2moe", "tiny",
       shape("qwen2moe", 64, 2, 4, 4, 192, 512, 512, SynthDecoder{.rope_base = 1e6f, .experts = 4, .experts_used = 2, .ffn_expert = 32, .ffn_shared = 64})},
      {"qwen2moe", "a2.7b",  // Qwen1.5-MoE-A2.7B
       shape("qwen2moe", 2048, 24, 16, 16, 5632, 151936, 8192,
             SynthDecoder{.rope_base = 1e6f, .experts = 60, .experts_used = 4, .ffn_expert = 1408, .ffn_shared = 5632})},
      {"qwen3", "tiny", shape("qwen3", 64, 2, 4, 2, 192, 512, 512, SynthDecoder{.head_dim = 32, .tied = true, .rope_base = 1e6f})},
      {"qwen3", "0.6b", shape("qwen3", 1024, 28, 16, 8, 3072, 151936, 40960, SynthDecoder{.head_dim = 128, .tied = true, .rope_base = 1e6f})},
      {"qwen3", "4b", shape("qwen3", 2560, 36, 32, 8, 9728, 151936, 40960, SynthDecoder{.head_dim = 128, .tied = true, .rope_base = 1e6f})},
      {"qwen3", "8b", shape("qwen3", 4096, 36, 32, 8, 12288, 151936, 40960, SynthDecoder{.head_dim = 128, .rope_base = 1e6f})},
      {"qwen3moe", "tiny",
       shape("qwen3moe", 64, 2, 4, 2, 192, 512, 512, SynthDecoder{.head_dim = 32, .rope_base = 1e6f, .experts = 8, .experts_used = 2, .ffn_expert = 32})},
      {"qwen3moe", "30b-a3b",  // Qwen3-30B-A3B
       shape("qwen3moe", 2048, 48, 32, 4, 6144, 151936, 40960,
             SynthDecoder{.head_dim = 128, .rope_base = 1e6f, .experts = 128, .experts_used = 8, .ffn_expert = 768})},
      {"phi3", "tiny", shape("phi3", 64, 2, 4, 4, 192, 512, 2048, SynthDecoder{.rope_orig_ctx = 256, .window = 2048})},
      {"phi3", "mini", shape("phi3", 3072, 32, 32, 32, 8192, 32064, 131072, SynthDecoder{.rope_orig_ctx = 4096, .window = 262144})},  // Phi-3.5-mini
      {"gemma2", "tiny", shape("gemma2", 64, 2, 2, 1, 192, 512, 512, SynthDecoder{.head_dim = 32, .tied = true, .window = 16})},
      {"gemma2", "2b", shape("gemma2", 2304, 26, 8, 4, 9216, 256000, 8192, SynthDecoder{.head_dim = 256, .tied = true, .window = 4096})},
      {"gemma2", "9b", shape("gemma2", 3584, 42, 16, 8, 14336, 256000, 8192, SynthDecoder{.head_dim = 256, .tied = true, .window = 4096})},
      {"gemma3", "tiny",
       shape("gemma3", 64, 6, 2, 1, 128, 512, 1024, SynthDecoder{.head_dim = 32, .tied = true, .rope_base = 1e6f, .rope_factor = 8.0f, .window = 16})},
      {"gemma3", "1b", shape("gemma3", 1152, 26, 4, 1, 6912, 262144, 32768, SynthDecoder{.head_dim = 256, .tied = true, .rope_base = 1e6f, .window = 512})},
      {"gemma3", "4b",  // Gemma-3-4B (text)
       shape("gemma3", 2560, 34, 8, 4, 10240, 262208, 131072,
             SynthDecoder{.head_dim = 256, .tied = true, .rope_base = 1e6f, .rope_factor = 8.0f, .window = 1024})},
  };
  return presets;
}

SynthShape deepseek_preset(const std::string& preset) {
  SynthShape s;
  s.arch = "deepseek2";
  SynthDeepseek& d = s.ds;
  if (preset == "tiny" || preset == "tiny-v3") {
    s.dim = 64, s.layers = 3, s.heads = 4, s.ffn = 128, s.vocab = 512, s.ctx = 4096;
    d.kv_lora = 32, d.qk_nope = 16, d.qk_rope = 8, d.v_head = 16;
    d.experts = 8, d.experts_used = 2, d.experts_shared = 2, d.ffn_expert = 32;
    if (preset == "tiny-v3") {
      d.q_lora = 48, d.experts = 16, d.experts_used = 4, d.experts_shared = 1, d.groups = 4, d.groups_used = 2;
      d.sigmoid = d.selection_bias = d.norm_weights = true, d.weights_scale = 2.5f;
      d.yarn_factor = 4.0f, d.yarn_orig_ctx = 1024;
    }
  } else if (preset == "lite") {  // DeepSeek-V2-Lite
    s.dim = 2048, s.layers = 27, s.heads = 16, s.ffn = 10944, s.vocab = 102400, s.ctx = 163840;
    d.kv_lora = 512, d.qk_nope = 128, d.qk_rope = 64, d.v_head = 128;
    d.experts = 64, d.experts_used = 6, d.experts_shared = 2, d.ffn_expert = 1408;
    d.yarn_factor = 40.0f, d.yarn_orig_ctx = 4096, d.yarn_log_mul = 0.0707f;
  } else {  // v3-small, v3
    const bool full = preset == "v3";
    s.dim = full ? 7168 : 1024, s.layers = full ? 61 : 8, s.heads = full ? 128 : 16;
    s.ffn = full ? 18432 : 2816, s.vocab = full ? 129280 : 32000, s.ctx = 163840;
    d.q_lora = full ? 1536 : 384, d.kv_lora = 512, d.qk_nope = 128, d.qk_rope = 64, d.v_head = 128;
    d.dense_lead = full ? 3 : 1, d.experts = full ? 256 : 64, d.experts_used = 8, d.experts_shared = 1;
    d.ffn_expert = full ? 2048 : 256, d.groups = 8, d.groups_used = 4;
    d.sigmoid = d.selection_bias = d.norm_weights = true, d.weights_scale = 2.5f;
    d.yarn_factor = 40.0f, d.yarn_orig_ctx = 4096, d.yarn_log_mul = 0.1f;
  }
  s.kv_heads = s.heads;
  return s;
}

}  // namespace

const std::vector<std::pair<std::string, std::vector<std::string>>>& synth_presets() {
  static const auto list = [] {
    std::vector<std::pair<std::string, std::vector<std::string>>> l;
    for (const auto& p : decoder_presets()) {
      if (l.empty() || l.back().first != p.arch) l.push_back({p.arch, {}});
      l.back().second.push_back(p.name);
    }
    l.push_back({"deepseek2", {"tiny", "tiny-v3", "lite", "v3-small", "v3"}});
    return l;
  }();
  return list;
}

SynthShape synth_preset(const std::string& arch, const std::string& preset) {
  for (const auto& [a, names] : synth_presets()) {
    if (a != arch) continue;
    for (const auto& n : names) {
      if (n != preset) continue;
      if (arch == "deepseek2") return deepseek_preset(preset);
      for (const auto& p : decoder_presets())
        if (arch == p.arch && preset == p.name) return p.shape;
    }
    std::string known;
    for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
    throw Error(fmt::format("--preset '{}' is not one of {} for {}", preset, known, arch));
  }
  std::string archs;
  for (const auto& [a, names] : synth_presets()) archs += (archs.empty() ? "" : ", ") + a;
  throw Error(fmt::format("--arch '{}' is not supported by synth (supported: {})", arch, archs));
}

}  // namespace kestrel
