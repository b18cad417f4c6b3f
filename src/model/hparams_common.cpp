#include "model/hparams_common.h"

#include <fmt/format.h>

#include <cmath>

#include "model/config_tensor_check.h"

namespace kestrel {

ModelConfig read_common(HparamReader& h, const CommonDefaults& d) {
  const GgufFile& f = h.file();
  ModelConfig c;
  c.arch = h.arch();
  c.name = f.get_string("general.name").value_or("");
  c.n_embd = h.need_int("embedding_length");
  // An embedding model's pooling (the server's /v1/embeddings reads it; generation does not).
  if (const auto p = h.opt_int("pooling_type")) {
    if (*p < 0 || *p > 4) throw h.bad("pooling_type", fmt::format("= {} is not one of 0 (none) to 4 (rank)", *p));
    c.pooling_type = static_cast<int>(*p);
  }
  const std::string labels_key = c.arch + ".classifier.output_labels";
  if (f.find(labels_key)) {
    h.accept("classifier.output_labels");
    for (const auto& v : f.get(labels_key).as_array().items) c.classifier_labels.push_back(v.as_string());
  }
  c.n_layer = static_cast<int>(h.need_int("block_count"));
  if (d.mtp_blocks) {
    // The multi-token-prediction blocks are counted in block_count and come last.
    c.n_mtp = static_cast<int>(h.int_or("nextn_predict_layers", 0));
    if (c.n_mtp >= c.n_layer)
      throw h.bad("nextn_predict_layers",
                  fmt::format("= {} leaves no trunk layers of block_count {}", c.n_mtp, c.n_layer));
    c.n_layer -= c.n_mtp;
  }
  c.n_head = static_cast<int>(h.need_int("attention.head_count"));
  if (const GgufValue* ff = f.find(h.arch() + ".feed_forward_length");
      d.ffn_per_layer && ff && ff->type == GgufValueType::ARRAY && !ff->as_array().items.empty())
    c.n_ff = ff->as_array().items[0].as_int();
  else
    c.n_ff = d.ffn_optional ? h.int_or("feed_forward_length", 0) : h.need_int("feed_forward_length");
  c.n_ctx_train = h.int_or("context_length", d.n_ctx);
  c.rms_eps = static_cast<float>(h.float_or("attention.layer_norm_rms_epsilon", d.rms_eps));
  if (!(c.rms_eps > 0.0f) || c.rms_eps > 1.0f)
    throw h.bad("attention.layer_norm_rms_epsilon", fmt::format("= {} must be in (0, 1]", c.rms_eps));
  if (const auto* tok = f.find_tensor("token_embd.weight"); tok && tok->ne.size() >= 2)
    c.n_vocab = tok->ne[1];
  else
    throw Error(fmt::format("{}: missing tensor 'token_embd.weight'", f.path()));
  c.tied_output = f.find_tensor("output.weight") == nullptr;
  check_config_against_tensors(h, c, false);
  return c;
}

void read_gqa_heads(HparamReader& h, ModelConfig& c) {
  c.n_head_kv = static_cast<int>(h.int_or("attention.head_count_kv", c.n_head));
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0)
    throw h.bad("attention.head_count_kv",
                fmt::format("= {}: {} attention heads cannot be grouped over it", c.n_head_kv, c.n_head));
  c.head_dim = static_cast<int>(h.int_or("attention.key_length", c.n_embd / c.n_head));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    throw h.bad("attention.key_length", fmt::format("= {}: the head size must be positive and even", c.head_dim));
  if (const auto v = h.opt_int("attention.value_length"); v && *v != c.head_dim)
    throw h.bad("attention.value_length",
                fmt::format("= {} differs from the key length {}: not supported for {}", *v, c.head_dim, c.arch));
  check_config_against_tensors(h, c, true);
}

void read_yarn(HparamReader& h, ModelConfig& c, RopeParams& rope) {
  const int64_t n_orig = h.int_or("rope.scaling.original_context_length", c.n_ctx_train);
  if (n_orig <= 0) throw h.bad("rope.scaling.original_context_length", "must be positive for YaRN");
  set_yarn(rope, n_orig, static_cast<float>(h.float_or("rope.scaling.yarn_beta_fast", 32.0)),
           static_cast<float>(h.float_or("rope.scaling.yarn_beta_slow", 1.0)));
}

void read_rope(HparamReader& h, ModelConfig& c, RopeStyle style) {
  RopeParams& r = c.rope;
  r.style = style;
  r.n_rot = static_cast<int>(h.int_or("rope.dimension_count", c.head_dim));
  if (r.n_rot <= 0 || r.n_rot > c.head_dim || r.n_rot % 2)
    throw h.bad("rope.dimension_count",
                fmt::format("= {} must be even and at most the head size {}", r.n_rot, c.head_dim));
  r.freq_base = static_cast<float>(h.float_or("rope.freq_base", 10000.0));
  if (!(r.freq_base > 1.0f)) throw h.bad("rope.freq_base", fmt::format("= {} must be above 1", r.freq_base));
  // llama.cpp: the scaling type defaults to linear, a factor of 0 means none;
  // "rope.scale_linear" is the old name of the factor.
  auto factor = h.opt_float("rope.scaling.factor");
  if (!factor) factor = h.opt_float("rope.scale_linear");
  const std::string type = h.opt_string("rope.scaling.type").value_or("linear");
  c.n_ctx_orig = h.int_or("rope.scaling.original_context_length", c.n_ctx_train);
  if (type == "linear" || type == "yarn") {
    if (factor && *factor < 0.0) throw h.bad("rope.scaling.factor", fmt::format("= {} must not be negative", *factor));
    r.freq_scale = !factor || *factor == 0.0 ? 1.0f : static_cast<float>(1.0 / *factor);
    if (type == "yarn") read_yarn(h, c, r);
  } else if (type != "none") {
    throw h.bad("rope.scaling.type", fmt::format("= '{}' is not supported for {} (none, linear or yarn)", type, c.arch));
  }
  // Multiplies cos and sin (ggml's attn_factor; Phi-3's LongRoPE scaling).
  r.attn_factor = static_cast<float>(h.float_or("rope.scaling.attn_factor", 1.0));
  if (!(r.attn_factor > 0.0f)) throw h.bad("rope.scaling.attn_factor", "must be positive");
  if (type == "yarn") {
    // llama.cpp's context: with yarn_log_multiplier m (HF's mscale_all_dim) the rotated dims are scaled by
    // (1 + 0.1 ln f) / (1 + 0.1 m ln f) instead of 1 + 0.1 ln f (RopeParams applies the latter itself).
    const double log_mul = h.float_or("rope.scaling.yarn_log_multiplier", 0.0);
    if (log_mul < 0) throw h.bad("rope.scaling.yarn_log_multiplier", "must not be negative");
    if (r.freq_scale < 1.0f) r.attn_factor /= static_cast<float>(1.0 + 0.1 * log_mul * std::log(1.0 / r.freq_scale));
  }
  c.rope_sliding = r;
}

ModelConfig read_decoder_basics(HparamReader& h, RopeStyle rope_style) {
  ModelConfig c = read_common(h);
  read_gqa_heads(h, c);
  read_rope(h, c, rope_style);
  return c;
}

void read_expert_counts(HparamReader& h, ModelConfig& c) {
  MoeRouting& r = c.moe.routing;
  r.n_expert = static_cast<int>(h.need_int("expert_count"));
  r.n_used = static_cast<int>(h.need_int("expert_used_count"));
  if (r.n_used > r.n_expert)
    throw h.bad("expert_used_count", fmt::format("= {} exceeds expert_count {}", r.n_used, r.n_expert));
}

void read_routed_experts(HparamReader& h, ModelConfig& c, int64_t n_ff_expert, bool normalize) {
  read_expert_counts(h, c);
  MoeRouting& r = c.moe.routing;
  if (const auto g = h.opt_int("expert_gating_func"); g && *g != static_cast<int>(ExpertGating::Softmax))
    throw h.bad("expert_gating_func", fmt::format("= {}: {} routes by softmax (1)", *g, c.arch));
  r.gating = ExpertGating::Softmax;
  r.normalize = normalize;
  c.moe.n_ff_expert = n_ff_expert;
  if (c.moe.n_ff_expert <= 0) throw h.bad("expert_feed_forward_length", "must be positive");
}

void set_sliding_layers(ModelConfig& c, int32_t window, int pattern) {
  c.sliding_window = window;
  c.sliding_layers.assign(static_cast<size_t>(c.n_layer), 0);
  if (window <= 0 || pattern <= 0) return;
  for (int l = 0; l < c.n_layer; l++) c.sliding_layers[l] = pattern == 1 || l % pattern < pattern - 1;
}

}  // namespace kestrel
