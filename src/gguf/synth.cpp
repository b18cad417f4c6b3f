#include "gguf/synth.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "formats/block_formats.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/storage_type.h"

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

namespace {

void write_deepseek_metadata(GgufWriter& w, const SynthShape& s) {
  const SynthDeepseek& d = s.ds;
  const std::string a = "deepseek2.";
  auto u32 = [&](const std::string& k, int64_t v) { w.set_u32(a + k, static_cast<uint32_t>(v)); };
  u32("leading_dense_block_count", d.dense_lead);
  if (d.q_lora > 0) u32("attention.q_lora_rank", d.q_lora);
  u32("attention.kv_lora_rank", d.kv_lora);
  u32("attention.key_length", d.kv_lora + d.qk_rope);  // the latent cache's sizes
  u32("attention.value_length", d.kv_lora);
  u32("attention.key_length_mla", d.qk_nope + d.qk_rope);  // per head
  u32("attention.value_length_mla", d.v_head);
  u32("expert_feed_forward_length", d.ffn_expert);
  u32("expert_count", d.experts);
  u32("expert_used_count", d.experts_used);
  u32("expert_shared_count", d.experts_shared);
  w.set_f32(a + "expert_weights_scale", d.weights_scale);
  w.set_bool(a + "expert_weights_norm", d.norm_weights);
  u32("expert_gating_func", d.sigmoid ? 2 : 1);
  if (d.groups > 1) {
    u32("expert_group_count", d.groups);
    u32("expert_group_used_count", d.groups_used);
  }
  if (d.nextn > 0) u32("nextn_predict_layers", d.nextn);
  if (d.yarn_factor > 0) {
    w.set_str(a + "rope.scaling.type", "yarn");
    w.set_f32(a + "rope.scaling.factor", d.yarn_factor);
    u32("rope.scaling.original_context_length", d.yarn_orig_ctx);
    w.set_f32(a + "rope.scaling.yarn_log_multiplier", d.yarn_log_mul);
  }
}

// A gated FFN's three tensors, `extra` dimensions appended (3-D experts).
template <typename Add>
void add_gated_ffn(Add& add, const std::string& p, const std::string& suffix, int64_t dim, int64_t width,
                   const std::vector<int64_t>& extra, float residual_scale) {
  std::vector<int64_t> in = {dim, width}, out = {width, dim};
  in.insert(in.end(), extra.begin(), extra.end());
  out.insert(out.end(), extra.begin(), extra.end());
  const float in_std = 1.0f / std::sqrt(static_cast<float>(dim));
  add(p + "ffn_gate" + suffix + ".weight", in, in_std);
  add(p + "ffn_up" + suffix + ".weight", in, in_std);
  add(p + "ffn_down" + suffix + ".weight", out, residual_scale / std::sqrt(static_cast<float>(width)));
}

// The deepseek2 tensors, in llama.cpp's names and layouts (split attn_k_b /
// attn_v_b, 3-D expert tensors); MTP blocks last, each a full block plus
// its `nextn` tensors (the head and embedding shared with the trunk).
template <typename Add>
void add_deepseek_layers(const SynthShape& s, Add& add) {
  const SynthDeepseek& d = s.ds;
  const float in_std = 1.0f / std::sqrt(static_cast<float>(s.dim));
  const float residual_scale = 1.0f / std::sqrt(2.0f * static_cast<float>(s.layers));
  const int64_t hk = d.qk_nope + d.qk_rope;
  for (int64_t l = 0; l < s.layers + d.nextn; l++) {
    const std::string p = fmt::format("blk.{}.", l);
    if (l >= s.layers) {
      add(p + "nextn.eh_proj.weight", {2 * s.dim, s.dim}, 1.0f / std::sqrt(2.0f * static_cast<float>(s.dim)));
      add(p + "nextn.enorm.weight", {s.dim}, 0.0f, 1.0f);
      add(p + "nextn.hnorm.weight", {s.dim}, 0.0f, 1.0f);
      add(p + "nextn.shared_head_norm.weight", {s.dim}, 0.0f, 1.0f);
    }
    add(p + "attn_norm.weight", {s.dim}, 0.0f, 1.0f);
    if (d.q_lora > 0) {
      add(p + "attn_q_a.weight", {s.dim, d.q_lora}, in_std);
      add(p + "attn_q_a_norm.weight", {d.q_lora}, 0.0f, 1.0f);
      add(p + "attn_q_b.weight", {d.q_lora, s.heads * hk}, 1.0f / std::sqrt(static_cast<float>(d.q_lora)));
    } else {
      add(p + "attn_q.weight", {s.dim, s.heads * hk}, in_std);
    }
    add(p + "attn_kv_a_mqa.weight", {s.dim, d.kv_lora + d.qk_rope}, in_std);
    add(p + "attn_kv_a_norm.weight", {d.kv_lora}, 0.0f, 1.0f);
    const float lora_std = 1.0f / std::sqrt(static_cast<float>(d.kv_lora));
    add(p + "attn_k_b.weight", {d.qk_nope, d.kv_lora, s.heads}, 1.0f / std::sqrt(static_cast<float>(d.qk_nope)));
    add(p + "attn_v_b.weight", {d.kv_lora, d.v_head, s.heads}, lora_std);
    add(p + "attn_output.weight", {s.heads * d.v_head, s.dim},
        residual_scale / std::sqrt(static_cast<float>(s.heads * d.v_head)));
    add(p + "ffn_norm.weight", {s.dim}, 0.0f, 1.0f);
    auto ffn = [&](const std::string& suffix, int64_t width, std::vector<int64_t> extra) {
      add_gated_ffn(add, p, suffix, s.dim, width, extra, residual_scale);
    };
    if (l < d.dense_lead || d.experts == 0) {
      ffn("", s.ffn, {});
      continue;
    }
    add(p + "ffn_gate_inp.weight", {s.dim, d.experts}, in_std);
    if (d.selection_bias) add(p + "exp_probs_b.bias", {d.experts}, 0.05f);
    ffn("_exps", d.ffn_expert, {d.experts});
    if (d.experts_shared > 0) ffn("_shexp", d.ffn_expert * d.experts_shared, {});
  }
}

// The decoder families' own keys, as llama.cpp's converter writes them.
void write_decoder_metadata(GgufWriter& w, const SynthShape& s, int64_t head) {
  const SynthDecoder& d = s.dec;
  const std::string a = s.arch + ".";
  auto u32 = [&](const std::string& k, int64_t v) { w.set_u32(a + k, static_cast<uint32_t>(v)); };
  if (d.head_dim > 0) {
    u32("attention.key_length", head);
    u32("attention.value_length", head);
  }
  if (d.experts > 0) {
    u32("expert_count", d.experts);
    u32("expert_used_count", d.experts_used);
    if (s.arch != "llama") u32("expert_feed_forward_length", d.ffn_expert);
    if (d.ffn_shared > 0) u32("expert_shared_feed_forward_length", d.ffn_shared);
  }
  if (s.arch == "phi3") {
    u32("rope.scaling.original_context_length", d.rope_orig_ctx);
    // LongRoPE's magnitude correction: sqrt(1 + ln(ctx / original) / ln(original)).
    w.set_f32(a + "rope.scaling.attn_factor",
              static_cast<float>(std::sqrt(1.0 + std::log(static_cast<double>(s.ctx) / d.rope_orig_ctx) /
                                                     std::log(static_cast<double>(d.rope_orig_ctx)))));
  }
  if (s.arch == "gemma2") {
    w.set_f32(a + "attn_logit_softcapping", 50.0f);
    w.set_f32(a + "final_logit_softcapping", 30.0f);
  }
  if (s.arch == "gemma3") {
    w.set_f32(a + "rope.freq_base_swa", 10000.0f);
    if (d.rope_factor > 0) {
      w.set_str(a + "rope.scaling.type", "linear");
      w.set_f32(a + "rope.scaling.factor", d.rope_factor);
    }
  }
  if (d.window > 0) u32("attention.sliding_window", d.window);
}

// Llama 3's RoPE frequency divisors, by llama.cpp's converter rule
// (low_freq_factor 1, high_freq_factor 4).
std::vector<float> llama3_rope_freqs(int64_t n_rot, float base, float factor, int64_t orig_ctx) {
  std::vector<float> f;
  const double low_wavelen = static_cast<double>(orig_ctx) / 1.0, high_wavelen = static_cast<double>(orig_ctx) / 4.0;
  for (int64_t i = 0; i < n_rot; i += 2) {
    const double freq = 1.0 / std::pow(base, static_cast<double>(i) / n_rot), wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) f.push_back(1.0f);
    else if (wavelen > low_wavelen) f.push_back(factor);
    else {
      const double smooth = (orig_ctx / wavelen - 1.0) / (4.0 - 1.0);
      f.push_back(static_cast<float>(1.0 / ((1 - smooth) / factor + smooth)));
    }
  }
  return f;
}

// The tensors of a decoder family in llama.cpp's names and layouts.
template <typename Add>
void add_decoder_tensors(GgufWriter& w, const SynthShape& s, int64_t head, Add& add) {
  const SynthDecoder& d = s.dec;
  const std::string& a = s.arch;
  const bool qk_norm = a == "qwen3" || a == "qwen3moe" || a == "gemma3";
  const bool biases = a == "qwen2" || a == "qwen2moe";
  const bool post_norms = a == "gemma2" || a == "gemma3";
  const int64_t q_dim = s.heads * head, kv_dim = s.kv_heads * head;
  const float in_std = 1.0f / std::sqrt(static_cast<float>(s.dim));
  const float residual_scale = 1.0f / std::sqrt(2.0f * static_cast<float>(s.layers));
  auto values = [&](const std::string& name, std::vector<float> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    w.add_tensor(name, GgmlType::F32, {n}, [v](uint8_t* dst, size_t bytes) { std::memcpy(dst, v.data(), bytes); });
  };
  if (a == "llama" && d.rope_factor > 0) values("rope_freqs.weight", llama3_rope_freqs(head, d.rope_base, d.rope_factor, d.rope_orig_ctx));
  if (a == "phi3") {  // short factors near 1, long ones growing with the pair's wavelength
    std::vector<float> shorts, longs;
    for (int64_t i = 0; i < head / 2; i++) {
      shorts.push_back(1.0f + 0.05f * static_cast<float>(i) / static_cast<float>(head / 2));
      longs.push_back(1.0f + 40.0f * static_cast<float>(i) / static_cast<float>(head / 2));
    }
    values("rope_factors_short.weight", shorts);
    values("rope_factors_long.weight", longs);
  }
  for (int64_t l = 0; l < s.layers; l++) {
    const std::string p = fmt::format("blk.{}.", l);
    add(p + "attn_norm.weight", {s.dim}, 0.0f, 1.0f);
    if (a == "phi3") {
      add(p + "attn_qkv.weight", {s.dim, q_dim + 2 * kv_dim}, in_std);
    } else {
      add(p + "attn_q.weight", {s.dim, q_dim}, in_std);
      add(p + "attn_k.weight", {s.dim, kv_dim}, in_std);
      add(p + "attn_v.weight", {s.dim, kv_dim}, in_std);
    }
    if (biases) {
      add(p + "attn_q.bias", {q_dim}, 0.02f);
      add(p + "attn_k.bias", {kv_dim}, 0.02f);
      add(p + "attn_v.bias", {kv_dim}, 0.02f);
    }
    if (qk_norm) {
      add(p + "attn_q_norm.weight", {head}, 0.0f, 1.0f);
      add(p + "attn_k_norm.weight", {head}, 0.0f, 1.0f);
    }
    add(p + "attn_output.weight", {q_dim, s.dim}, residual_scale / std::sqrt(static_cast<float>(q_dim)));
    if (post_norms) {
      add(p + "post_attention_norm.weight", {s.dim}, 0.0f, 1.0f);
      add(p + "post_ffw_norm.weight", {s.dim}, 0.0f, 1.0f);
    }
    add(p + "ffn_norm.weight", {s.dim}, 0.0f, 1.0f);
    auto ffn = [&](const std::string& suffix, int64_t width, std::vector<int64_t> extra) {
      add_gated_ffn(add, p, suffix, s.dim, width, extra, residual_scale);
    };
    if (d.experts > 0) {
      add(p + "ffn_gate_inp.weight", {s.dim, d.experts}, in_std);
      ffn("_exps", d.ffn_expert, {d.experts});
      if (d.ffn_shared > 0) {
        ffn("_shexp", d.ffn_shared, {});
        add(p + "ffn_gate_inp_shexp.weight", {s.dim}, in_std);
      }
    } else if (a == "phi3") {
      add(p + "ffn_up.weight", {s.dim, 2 * s.ffn}, in_std);
      add(p + "ffn_down.weight", {s.ffn, s.dim}, residual_scale / std::sqrt(static_cast<float>(s.ffn)));
    } else {
      ffn("", s.ffn, {});
    }
  }
}

}  // namespace

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
  const bool ds = s.arch == "deepseek2";
  const SynthDecoder& d = s.dec;
  const int64_t head = !ds && d.head_dim > 0 ? d.head_dim : s.dim / s.heads;
  if (!ds) {
    if (d.head_dim == 0 && s.dim % s.heads != 0)
      throw Error(fmt::format("--dim {} is not divisible by --heads {}", s.dim, s.heads));
    if (s.heads % s.kv_heads != 0) throw Error(fmt::format("--heads {} is not divisible by --kv-heads {}", s.heads, s.kv_heads));
    if (head % 2 != 0) throw Error(fmt::format("head size {} must be even for RoPE", head));
    if (d.experts > 0 && (d.experts_used <= 0 || d.experts_used > d.experts || d.ffn_expert <= 0))
      throw Error(fmt::format("{} experts: the used experts must be 1 to {} and their FFN width positive", d.experts, d.experts));
  } else if (s.ds.experts % s.ds.groups != 0 || s.ds.experts_used > s.ds.experts || s.ds.dense_lead > s.layers) {
    throw Error("deepseek2: experts must split into the groups, and the used experts and dense layers must fit");
  }
  if (s.ds.nextn < 0 || s.ds.nextn > 4 || (!ds && s.ds.nextn > 0))
    throw Error(fmt::format("--mtp {}: deepseek2 models carry 0 to 4 multi-token-prediction blocks", s.ds.nextn));
  if (!can_quantize_to(o.type)) throw Error(fmt::format("--type {} cannot be written yet", type_name(o.type)));

  const std::string a = s.arch;
  GgufWriter w;
  w.set_str("general.architecture", a);
  w.set_str("general.name", o.name);
  w.set_u32("general.file_type", llama_file_type(o.type));
  w.set_u32(a + ".context_length", static_cast<uint32_t>(s.ctx));
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(s.dim));
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(s.ffn));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(s.layers + (ds ? s.ds.nextn : 0)));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(s.heads));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(ds ? 1 : s.kv_heads));  // MLA: one latent "head"
  w.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(ds ? s.ds.qk_rope : head));
  w.set_f32(a + ".rope.freq_base", ds ? 10000.0f : d.rope_base);
  const bool eps6 = ds || a.rfind("qwen", 0) == 0 || a.rfind("gemma", 0) == 0;
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", eps6 ? 1e-6f : 1e-5f);
  if (ds) write_deepseek_metadata(w, s);
  else write_decoder_metadata(w, s, head);
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
  // Routers (ffn_gate_inp) stay F32, as llama-quantize keeps them.
  uint64_t tensor_id = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, float stddev, float constant = 0.0f) {
    const GgmlType type = is_moe_router(name) ? GgmlType::F32 : storage_type_for(o.type, ne);
    const uint64_t id = tensor_id++;
    const uint64_t seed = o.seed;
    const int threads = o.n_threads;
    w.add_tensor(name, type, ne, [=](uint8_t* dst, size_t) {
      int64_t rows = 1;  // every row of every matrix (3-D: one matrix per expert or head)
      for (size_t i = 1; i < ne.size(); i++) rows *= ne[i];
      const int64_t cols = ne[0];
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
  if (ds || !d.tied) add("output.weight", {s.dim, s.vocab}, in_std);
  if (ds) {
    add_deepseek_layers(s, add);
    return w;
  }
  add_decoder_tensors(w, s, head, add);
  return w;
}

}  // namespace kestrel
