#include "model/synth.h"

#include <fmt/format.h>

#include <cmath>

#include "core/block_formats.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/storage_type.h"

namespace kestrel {
namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A synthetic SentencePiece vocabulary: specials, the 256 byte tokens, then
// word-start pieces and letter n-grams with decreasing scores, so that any
// text tokenizes and decodes.
void add_synthetic_vocab(GgufWriter& w, int64_t n) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; b++) {
    tokens.push_back(fmt::format("<0x{:02X}>", b));
    types.push_back(6);
  }
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqzETAOINSHRDLCUMWFGYPBVKJXQZ0123456789.,!?'\"-:;()";
  const std::string space = "\xE2\x96\x81";
  std::vector<std::string> pieces = {space};
  for (char c : letters) pieces.push_back(std::string(1, c));
  for (char c : letters) pieces.push_back(space + c);
  for (size_t len = 2; static_cast<int64_t>(tokens.size() + pieces.size()) < n && len <= 4; len++) {
    // Letter n-grams of increasing length, enumerated in a fixed order.
    std::vector<std::string> grams;
    for (const auto& p : pieces)
      if (p.size() == len - 1 + (p.rfind(space, 0) == 0 ? space.size() : 0))
        for (char c : letters.substr(0, 26)) grams.push_back(p + c);
    for (auto& g : grams) {
      if (static_cast<int64_t>(tokens.size() + pieces.size()) >= n) break;
      pieces.push_back(std::move(g));
    }
  }
  std::vector<float> scores(tokens.size(), 0.0f);
  for (size_t i = 0; i < pieces.size() && static_cast<int64_t>(tokens.size()) < n; i++) {
    tokens.push_back(pieces[i]);
    types.push_back(1);
    scores.push_back(-static_cast<float>(i));
  }
  for (int64_t i = static_cast<int64_t>(tokens.size()); i < n; i++) {  // pad a very large vocabulary
    tokens.push_back(fmt::format("<unused{}>", i));
    types.push_back(5);
    scores.push_back(-1e9f);
  }
  w.set_str("tokenizer.ggml.model", "llama");
  w.set("tokenizer.ggml.tokens", GgufValue::strings(tokens));
  w.set("tokenizer.ggml.scores", GgufValue::floats(scores));
  w.set("tokenizer.ggml.token_type", GgufValue::int32s(types));
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
}

}  // namespace

SynthShape synth_preset(const std::string& arch, const std::string& preset) {
  if (arch != "llama" && arch != "qwen2")
    throw Error(fmt::format("--arch '{}' is not supported by synth yet (supported: llama, qwen2)", arch));
  SynthShape s;
  s.arch = arch;
  if (preset == "tiny") s = {arch, 64, 2, 4, 2, 192, 512, 512};
  else if (preset == "1b") s = {arch, 2048, 22, 32, 4, 5632, 32000, 2048};
  else if (preset == "7b") s = {arch, 4096, 32, 32, 32, 11008, 32000, 4096};
  else throw Error(fmt::format("--preset '{}' is not one of tiny, 1b, 7b", preset));
  return s;
}

GgufWriter synth_model(const SynthOptions& o) {
  SynthShape s = o.shape;
  if (o.vocab_from) s.vocab = static_cast<int64_t>(o.vocab_from->get("tokenizer.ggml.tokens").as_array().items.size());
  auto positive = [](const char* what, int64_t v, int64_t max) {
    if (v <= 0 || v > max) throw Error(fmt::format("{} = {} is out of range (1 to {})", what, v, max));
  };
  positive("--dim", s.dim, 1 << 16);
  positive("--layers", s.layers, 1024);
  positive("--heads", s.heads, 1024);
  positive("--kv-heads", s.kv_heads, 1024);
  positive("--ffn", s.ffn, 1 << 18);
  positive("--vocab", s.vocab, 1 << 22);
  positive("--ctx", s.ctx, 1 << 24);
  if (s.dim % s.heads != 0) throw Error(fmt::format("--dim {} is not divisible by --heads {}", s.dim, s.heads));
  if (s.heads % s.kv_heads != 0) throw Error(fmt::format("--heads {} is not divisible by --kv-heads {}", s.heads, s.kv_heads));
  if ((s.dim / s.heads) % 2 != 0) throw Error(fmt::format("head size {} must be even for RoPE", s.dim / s.heads));
  if (!can_quantize_to(o.type)) throw Error(fmt::format("--type {} cannot be written yet", type_name(o.type)));

  const std::string a = s.arch;
  const int64_t head = s.dim / s.heads, kv_dim = head * s.kv_heads;
  GgufWriter w;
  w.set_str("general.architecture", a);
  w.set_str("general.name", o.name);
  w.set_u32("general.file_type", llama_file_type(o.type));
  w.set_u32(a + ".context_length", static_cast<uint32_t>(s.ctx));
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(s.dim));
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(s.ffn));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(s.layers));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(s.heads));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.kv_heads));
  w.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(head));
  w.set_f32(a + ".rope.freq_base", a == "qwen2" ? 1000000.0f : 10000.0f);
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_u32(a + ".vocab_size", static_cast<uint32_t>(s.vocab));
  if (o.vocab_from) {
    for (const auto& [k, v] : o.vocab_from->metadata())
      if (k.rfind("tokenizer.", 0) == 0) w.set(k, v);
  } else {
    add_synthetic_vocab(w, s.vocab);
  }

  // Uniform weights with standard deviation 1/sqrt(fan_in) keep every
  // projection's output near unit scale; the two projections that write into
  // the residual stream are shrunk by 1/sqrt(2*layers) so it does not grow.
  const float residual_scale = 1.0f / std::sqrt(2.0f * static_cast<float>(s.layers));
  uint64_t tensor_id = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, float stddev, float constant = 0.0f) {
    const GgmlType type = storage_type_for(o.type, ne);
    const uint64_t id = tensor_id++;
    const uint64_t seed = o.seed;
    const int threads = o.n_threads;
    w.add_tensor(name, type, ne, [=](uint8_t* dst, size_t) {
      const int64_t cols = ne[0], rows = ne.size() > 1 ? ne[1] : 1;
      const size_t rb = row_bytes(type, cols);
      const float half_width = stddev * std::sqrt(3.0f);
      ThreadPool pool(threads);
      pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = r0; r < r1; r++) {
          uint64_t state = seed * 0x100000001B3ull ^ (id << 40) ^ static_cast<uint64_t>(r);
          for (auto& x : row) {
            const double u = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
            x = stddev == 0.0f ? constant : static_cast<float>((2.0 * u - 1.0) * half_width);
          }
          quantize_row(type, row.data(), dst + r * rb, cols);
        }
      });
    });
  };
  const float in_std = 1.0f / std::sqrt(static_cast<float>(s.dim));
  add("token_embd.weight", {s.dim, s.vocab}, 1.0f);
  add("output_norm.weight", {s.dim}, 0.0f, 1.0f);
  add("output.weight", {s.dim, s.vocab}, in_std);
  for (int64_t l = 0; l < s.layers; l++) {
    const std::string p = fmt::format("blk.{}.", l);
    add(p + "attn_norm.weight", {s.dim}, 0.0f, 1.0f);
    add(p + "attn_q.weight", {s.dim, s.dim}, in_std);
    add(p + "attn_k.weight", {s.dim, kv_dim}, in_std);
    add(p + "attn_v.weight", {s.dim, kv_dim}, in_std);
    if (a == "qwen2") {
      add(p + "attn_q.bias", {s.dim}, 0.02f);
      add(p + "attn_k.bias", {kv_dim}, 0.02f);
      add(p + "attn_v.bias", {kv_dim}, 0.02f);
    }
    add(p + "attn_output.weight", {s.dim, s.dim}, in_std * residual_scale);
    add(p + "ffn_norm.weight", {s.dim}, 0.0f, 1.0f);
    add(p + "ffn_gate.weight", {s.dim, s.ffn}, in_std);
    add(p + "ffn_up.weight", {s.dim, s.ffn}, in_std);
    add(p + "ffn_down.weight", {s.ffn, s.dim}, residual_scale / std::sqrt(static_cast<float>(s.ffn)));
  }
  return w;
}

}  // namespace kestrel
