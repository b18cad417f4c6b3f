#include <fmt/format.h>

#include "core/error.h"
#include "model/llama_config.h"

namespace kestrel {

ModelConfig read_llama_config(const GgufFile& f) {
  ModelConfig c;
  c.arch = f.get_string("general.architecture").value_or("");
  c.name = f.get_string("general.name").value_or("");
  const std::string& a = c.arch;
  auto need_int = [&](const std::string& key) -> int64_t {
    auto v = f.get_int(a + "." + key);
    if (!v) throw Error(fmt::format("{}: missing metadata key '{}.{}'", f.path(), a, key));
    if (*v <= 0) throw Error(fmt::format("{}: metadata '{}.{}' = {} must be positive", f.path(), a, key, *v));
    return *v;
  };
  c.n_embd = need_int("embedding_length");
  c.n_layer = static_cast<int>(need_int("block_count"));
  c.n_head = static_cast<int>(need_int("attention.head_count"));
  c.n_head_kv = static_cast<int>(f.get_int(a + ".attention.head_count_kv").value_or(c.n_head));
  c.n_ff = need_int("feed_forward_length");
  c.n_ctx_train = f.get_int(a + ".context_length").value_or(2048);
  c.rms_eps = static_cast<float>(f.get_double(a + ".attention.layer_norm_rms_epsilon").value_or(1e-5));
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0)
    throw Error(fmt::format("{}: {} attention heads cannot be grouped over {} KV heads", f.path(), c.n_head, c.n_head_kv));
  c.head_dim = static_cast<int>(f.get_int(a + ".attention.key_length").value_or(c.n_embd / c.n_head));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    throw Error(fmt::format("{}: head size {} must be positive and even", f.path(), c.head_dim));

  if (const auto* tok = f.find_tensor("token_embd.weight"); tok && tok->ne.size() >= 2) c.n_vocab = tok->ne[1];
  else throw Error(fmt::format("{}: missing tensor 'token_embd.weight'", f.path()));

  c.rope.n_rot = static_cast<int>(f.get_int(a + ".rope.dimension_count").value_or(c.head_dim));
  if (c.rope.n_rot <= 0 || c.rope.n_rot > c.head_dim || c.rope.n_rot % 2)
    throw Error(fmt::format("{}: rope.dimension_count {} must be even and at most the head size {}", f.path(), c.rope.n_rot, c.head_dim));
  c.rope.freq_base = static_cast<float>(f.get_double(a + ".rope.freq_base").value_or(10000.0));
  c.rope.style = (a == "qwen2") ? RopeStyle::NeoX : RopeStyle::Adjacent;
  const std::string scaling = f.get_string(a + ".rope.scaling.type").value_or("");
  float factor = static_cast<float>(f.get_double(a + ".rope.scaling.factor").value_or(0.0));
  if (factor == 0.0f) factor = static_cast<float>(f.get_double(a + ".rope.scale_linear").value_or(1.0));
  if (scaling == "linear" || (scaling.empty() && factor != 1.0f)) {
    if (factor <= 0.0f) throw Error(fmt::format("{}: rope scaling factor {} must be positive", f.path(), factor));
    c.rope.freq_scale = 1.0f / factor;
  } else if (!scaling.empty() && scaling != "none") {
    throw Error(fmt::format("{}: rope scaling type '{}' is not supported for {}", f.path(), scaling, a));
  }
  c.qkv_bias = (a == "qwen2");
  c.tied_output = f.find_tensor("output.weight") == nullptr;
  return c;
}

}  // namespace kestrel
