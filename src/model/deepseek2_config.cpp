#include "model/deepseek2_config.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "model/config_tensor_check.h"
#include "model/hparams_reader.h"

namespace kestrel {

ModelConfig read_deepseek2_config(const GgufFile& f) {
  ModelConfig c;
  c.arch = f.get_string("general.architecture").value_or("");
  c.name = f.get_string("general.name").value_or("");
  HparamReader h(f, c.arch);
  c.n_embd = h.need_int("embedding_length");
  c.n_layer = static_cast<int>(h.need_int("block_count"));
  // The multi-token-prediction blocks are counted in block_count and come last.
  c.n_mtp = static_cast<int>(h.int_or("nextn_predict_layers", 0));
  if (c.n_mtp >= c.n_layer)
    throw h.bad("nextn_predict_layers", fmt::format("= {} leaves no trunk layers of block_count {}", c.n_mtp, c.n_layer));
  c.n_layer -= c.n_mtp;
  c.n_head = static_cast<int>(h.need_int("attention.head_count"));
  // Conversions since the attn_kv_b split write 1 (the latent is one shared
  // KV head), older ones n_head: both describe the same math.
  if (const auto kv = h.opt_int("attention.head_count_kv"); kv && *kv != c.n_head && *kv != 1)
    throw h.bad("attention.head_count_kv", fmt::format("= {}: MLA has 1 or {} (one per query head)", *kv, c.n_head));
  c.n_ff = h.need_int("feed_forward_length");
  c.n_ctx_train = h.int_or("context_length", 4096);
  c.rms_eps = static_cast<float>(h.float_or("attention.layer_norm_rms_epsilon", 1e-6));
  if (!(c.rms_eps > 0.0f) || c.rms_eps > 1.0f)
    throw h.bad("attention.layer_norm_rms_epsilon", fmt::format("= {} must be in (0, 1]", c.rms_eps));
  if (const auto* tok = f.find_tensor("token_embd.weight"); tok && tok->ne.size() >= 2)
    c.n_vocab = tok->ne[1];
  else
    throw Error(fmt::format("{}: missing tensor 'token_embd.weight'", f.path()));
  c.tied_output = f.find_tensor("output.weight") == nullptr;
  check_config_against_tensors(h, c, false);

  // MLA. Files from before llama.cpp split attn_kv_b give the per-head sizes
  // in key_length / value_length; newer ones there give the latent cache's
  // and the per-head sizes in key_length_mla / value_length_mla.
  MlaConfig& m = c.mla;
  m.q_lora_rank = static_cast<int>(h.int_or("attention.q_lora_rank", 0));
  m.kv_lora_rank = static_cast<int>(h.need_int("attention.kv_lora_rank"));
  m.qk_rope = static_cast<int>(h.need_int("rope.dimension_count"));
  const bool split = h.has("attention.key_length_mla");
  const int head_k = static_cast<int>(h.need_int(split ? "attention.key_length_mla" : "attention.key_length"));
  m.v_head = static_cast<int>(h.need_int(split ? "attention.value_length_mla" : "attention.value_length"));
  if (split) {
    // The latent cache's row: kv_lora + rope keys, kv_lora values.
    const auto k = h.opt_int("attention.key_length"), v = h.opt_int("attention.value_length");
    if (k && *k != m.kv_lora_rank + m.qk_rope)
      throw h.bad("attention.key_length", fmt::format("= {}, expected kv_lora_rank + rope ({})", *k, m.kv_lora_rank + m.qk_rope));
    if (v && *v != m.kv_lora_rank)
      throw h.bad("attention.value_length", fmt::format("= {}, expected kv_lora_rank ({})", *v, m.kv_lora_rank));
  }
  m.qk_nope = head_k - m.qk_rope;
  if (m.qk_nope <= 0 || m.qk_rope % 2)
    throw h.bad("rope.dimension_count",
                fmt::format("= {} must be even and less than the key size {}", m.qk_rope, head_k));
  c.head_dim = head_k;
  c.n_head_kv = c.n_head;  // as a multi-head model once decompressed

  // DeepSeekMoE.
  MoeConfig& e = c.moe;
  MoeRouting& r = e.routing;
  r.n_expert = static_cast<int>(h.int_or("expert_count", 0));
  e.n_dense_lead = static_cast<int>(h.int_or("leading_dense_block_count", r.n_expert ? 0 : c.n_layer));
  if (r.n_expert > 0) {
    r.n_used = static_cast<int>(h.need_int("expert_used_count"));
    e.n_ff_expert = h.need_int("expert_feed_forward_length");
    e.n_ff_shared = h.int_or("expert_shared_count", 0) * e.n_ff_expert;
    const int64_t gating = h.int_or("expert_gating_func", 1);  // V2 files predate the key: softmax
    if (gating != 1 && gating != 2)
      throw h.bad("expert_gating_func", fmt::format("= {}: not 1 (softmax) or 2 (sigmoid)", gating));
    r.gating = static_cast<ExpertGating>(gating);
    const double scale = h.float_or("expert_weights_scale", 1.0);
    r.scale = scale == 0.0 ? 1.0f : static_cast<float>(scale);  // llama.cpp: 0 means "do not scale"
    r.normalize = h.opt_bool("expert_weights_norm").value_or(false);
    r.n_group = static_cast<int>(std::max<int64_t>(1, h.int_or("expert_group_count", 1)));
    r.n_group_used = static_cast<int>(std::max<int64_t>(1, h.int_or("expert_group_used_count", r.n_group)));
    if (r.n_used > r.n_expert)
      throw h.bad("expert_used_count", fmt::format("= {} exceeds expert_count {}", r.n_used, r.n_expert));
    if (r.n_group > 64 || r.n_expert % r.n_group != 0)
      throw h.bad("expert_group_count",
                  fmt::format("= {} must divide expert_count {} (at most 64 groups)", r.n_group, r.n_expert));
    if (r.n_group_used > r.n_group || r.n_used > r.n_group_used * (r.n_expert / r.n_group))
      throw h.bad("expert_group_used_count", fmt::format("= {} cannot hold {} experts", r.n_group_used, r.n_used));
    if (e.n_dense_lead > c.n_layer)
      throw h.bad("leading_dense_block_count", fmt::format("= {} exceeds block_count {}", e.n_dense_lead, c.n_layer));
  }

  // RoPE on the rotary dims only, adjacent pairs (llama.cpp's "norm" mode for deepseek2).
  c.rope.style = RopeStyle::Adjacent;
  c.rope.n_rot = m.qk_rope;
  c.rope.freq_base = static_cast<float>(h.float_or("rope.freq_base", 10000.0));
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(head_k));
  const std::string scaling = h.opt_string("rope.scaling.type").value_or("none");
  if (scaling == "yarn") {
    const double factor = h.float_or("rope.scaling.factor", 1.0);
    if (!(factor >= 1.0)) throw h.bad("rope.scaling.factor", fmt::format("= {} must be at least 1 for YaRN", factor));
    const int64_t n_orig = h.int_or("rope.scaling.original_context_length", c.n_ctx_train);
    if (n_orig <= 0) throw h.bad("rope.scaling.original_context_length", "must be positive");
    const auto log_mul = static_cast<float>(h.float_or("rope.scaling.yarn_log_multiplier", 0.0));
    const auto beta_fast = static_cast<float>(h.float_or("rope.scaling.yarn_beta_fast", 32.0));
    const auto beta_slow = static_cast<float>(h.float_or("rope.scaling.yarn_beta_slow", 1.0));
    c.rope.freq_scale = static_cast<float>(1.0 / factor);
    set_yarn(c.rope, n_orig, beta_fast, beta_slow);
    // DeepSeek's YaRN keeps the rotated dims at unit scale (ggml multiplies
    // cos/sin by 1 + 0.1 ln(factor); llama.cpp passes attn_factor to cancel
    // it) and moves the correction to the softmax: mscale^2 with HF's
    // mscale = 1 + 0.1 * mscale_all_dim * ln(factor). llama.cpp's converter
    // writes yarn_log_multiplier = 0.1 * mscale_all_dim for deepseek2 (and
    // its loader divides by 0.1 again), so here mscale = 1 + log_mul * ln(factor).
    const float ln_factor = std::log(static_cast<float>(factor));
    c.rope.attn_factor = 1.0f / (1.0f + 0.1f * ln_factor);
    const float mscale = 1.0f + log_mul * ln_factor;
    c.attn_scale *= mscale * mscale;
  } else if (scaling != "none") {
    throw h.bad("rope.scaling.type", fmt::format("= '{}' is not supported for deepseek2 (none or yarn)", scaling));
  } else if (const auto factor = h.opt_float("rope.scaling.factor"); factor && *factor != 1.0 && *factor != 0.0) {
    throw h.bad("rope.scaling.factor", fmt::format("= {} without a scaling type", *factor));
  }
  h.finish();
  return c;
}

}  // namespace kestrel
