#include "model/synth.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "formats/block_formats.h"
#include "core/error.h"
#include "core/splitmix.h"
#include "core/thread_pool.h"
#include "formats/storage_type.h"
#include "model/family.h"

namespace kestrel {
namespace {

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

void SynthFile::u32(const std::string& key, int64_t v) { w_.set_u32(s_.arch + "." + key, static_cast<uint32_t>(v)); }
void SynthFile::f32(const std::string& key, float v) { w_.set_f32(s_.arch + "." + key, v); }
void SynthFile::str(const std::string& key, const std::string& v) { w_.set_str(s_.arch + "." + key, v); }
void SynthFile::boolean(const std::string& key, bool v) { w_.set_bool(s_.arch + "." + key, v); }

void SynthFile::values(const std::string& name, const std::vector<float>& v, std::vector<int64_t> ne) {
  if (ne.empty()) ne = {static_cast<int64_t>(v.size())};
  w_.add_tensor(name, GgmlType::F32, ne, [v](uint8_t* dst, size_t bytes) { std::memcpy(dst, v.data(), bytes); });
}

void SynthFile::gated_ffn(const std::string& p, const std::string& suffix, int64_t width,
                          const std::vector<int64_t>& extra) {
  const int64_t dim = s_.dim;
  std::vector<int64_t> in = {dim, width}, out = {width, dim};
  in.insert(in.end(), extra.begin(), extra.end());
  out.insert(out.end(), extra.begin(), extra.end());
  random(p + "ffn_gate" + suffix + ".weight", in, fan_in(dim));
  random(p + "ffn_up" + suffix + ".weight", in, fan_in(dim));
  random(p + "ffn_down" + suffix + ".weight", out, residual_std(width));
}

void SynthFile::qkv(const std::string& p, int64_t q_dim, int64_t kv_dim, float bias_std) {
  const float in_std = fan_in(s_.dim);
  random(p + "attn_q.weight", {s_.dim, q_dim}, in_std);
  random(p + "attn_k.weight", {s_.dim, kv_dim}, in_std);
  random(p + "attn_v.weight", {s_.dim, kv_dim}, in_std);
  if (bias_std <= 0.0f) return;
  random(p + "attn_q.bias", {q_dim}, bias_std);
  random(p + "attn_k.bias", {kv_dim}, bias_std);
  random(p + "attn_v.bias", {kv_dim}, bias_std);
}

void synth_sizes(SynthFile& out, int64_t blocks, int64_t head_count_kv, int64_t rope_dims, float freq_base,
                 float rms_eps) {
  const SynthShape& s = out.shape();
  out.u32("context_length", s.ctx);
  out.u32("embedding_length", s.dim);
  out.u32("feed_forward_length", s.ffn);
  out.u32("block_count", blocks);
  out.u32("attention.head_count", s.heads);
  out.u32("attention.head_count_kv", head_count_kv);
  out.u32("rope.dimension_count", rope_dims);
  out.f32("rope.freq_base", freq_base);
  out.f32("attention.layer_norm_rms_epsilon", rms_eps);
}

int64_t synth_head_dim(const SynthShape& s) { return s.dec.head_dim > 0 ? s.dec.head_dim : s.dim / s.heads; }

void synth_gqa_keys(SynthFile& out, float rms_eps, bool expert_ffn_key) {
  const SynthShape& s = out.shape();
  const SynthDecoder& d = s.dec;
  const int64_t head = synth_head_dim(s);
  if (d.head_dim == 0 && s.dim % s.heads != 0)
    throw Error(fmt::format("--dim {} is not divisible by --heads {}", s.dim, s.heads));
  if (s.heads % s.kv_heads != 0) throw Error(fmt::format("--heads {} is not divisible by --kv-heads {}", s.heads, s.kv_heads));
  if (head % 2 != 0) throw Error(fmt::format("head size {} must be even for RoPE", head));
  if (d.experts > 0 && (d.experts_used <= 0 || d.experts_used > d.experts || d.ffn_expert <= 0))
    throw Error(fmt::format("{} experts: the used experts must be 1 to {} and their FFN width positive", d.experts, d.experts));
  synth_sizes(out, s.layers, s.kv_heads, head, d.rope_base, rms_eps);
  if (d.head_dim > 0) {
    out.u32("attention.key_length", head);
    out.u32("attention.value_length", head);
  }
  if (d.experts > 0) {
    out.u32("expert_count", d.experts);
    out.u32("expert_used_count", d.experts_used);
    if (expert_ffn_key) out.u32("expert_feed_forward_length", d.ffn_expert);
    if (d.ffn_shared > 0) out.u32("expert_shared_feed_forward_length", d.ffn_shared);
  }
}

void synth_gqa_layers(SynthFile& out, const LayerRecipe& r) {
  const SynthShape& s = out.shape();
  const SynthDecoder& d = s.dec;
  const int64_t head = synth_head_dim(s), q_dim = s.heads * head, kv_dim = s.kv_heads * head;
  const float in_std = SynthFile::fan_in(s.dim);
  for (int64_t l = 0; l < s.layers; l++) {
    const std::string p = fmt::format("blk.{}.", l);
    out.norm(p + "attn_norm.weight", s.dim);
    if (r.fused_qkv)  // no biases: the fused form has none (load_gqa)
      out.random(p + "attn_qkv.weight", {s.dim, q_dim + 2 * kv_dim}, in_std);
    else
      out.qkv(p, q_dim, kv_dim, r.qkv_bias ? 0.02f : 0.0f);
    if (r.qk_norm) {
      out.norm(p + "attn_q_norm.weight", head);
      out.norm(p + "attn_k_norm.weight", head);
    }
    out.random(p + "attn_output.weight", {q_dim, s.dim}, out.residual_std(q_dim));
    if (r.post_norms) {
      out.norm(p + "post_attention_norm.weight", s.dim);
      out.norm(p + "post_ffw_norm.weight", s.dim);
    }
    out.norm(p + "ffn_norm.weight", s.dim);
    if (d.experts > 0) {
      out.random(p + "ffn_gate_inp.weight", {s.dim, d.experts}, in_std);
      out.gated_ffn(p, "_exps", d.ffn_expert, {d.experts});
      if (d.ffn_shared > 0) {
        out.gated_ffn(p, "_shexp", d.ffn_shared);
        out.random(p + "ffn_gate_inp_shexp.weight", {s.dim}, in_std);
      }
    } else if (r.fused_gate_up) {
      out.random(p + "ffn_up.weight", {s.dim, 2 * s.ffn}, in_std);
      out.random(p + "ffn_down.weight", {s.ffn, s.dim}, out.residual_std(s.ffn));
    } else {
      out.gated_ffn(p, "", s.ffn);
    }
  }
}

GgufWriter synth_model(const SynthOptions& o) {
  SynthShape s = o.shape;
  const Family& family = family_of(s.arch);
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
  const LayerRecipe::Attention att = family.recipe.attention;
  const int max_mtp = att == LayerRecipe::Attention::Mla ? 4 : att == LayerRecipe::Attention::Compressed ? 1 : family.max_mtp;
  if (s.ds.nextn < 0 || s.ds.nextn > max_mtp)
    throw Error(fmt::format("--mtp {}: deepseek2 models carry 0 to 4 multi-token-prediction blocks, deepseek4 and "
                            "glm4moe 0 or 1 (llama.cpp runs one), others none",
                            s.ds.nextn));
  if (!can_quantize_to(o.type)) throw Error(fmt::format("--type {} cannot be written yet", type_name(o.type)));

  GgufWriter w;
  w.set_str("general.architecture", s.arch);
  w.set_str("general.name", o.name);
  w.set_u32("general.file_type", llama_file_type(o.type));

  // Uniform weights with standard deviation 1/sqrt(fan_in) keep every
  // projection's output near unit scale; the two projections that write into
  // the residual stream are shrunk by 1/sqrt(2*layers) so it does not grow.
  // Routers (ffn_gate_inp) stay F32, as llama-quantize keeps them.
  uint64_t tensor_id = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, float stddev, float constant) {
    // Biases stay F32 too, whatever their shape (gpt-oss's per-expert ones are 2-D), as the converters write them.
    const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    const GgmlType type = is_moe_router(name) || bias ? GgmlType::F32 : storage_type_for(o.type, ne);
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
            const double u = splitmix_unit(state);
            x = stddev == 0.0f ? constant : static_cast<float>((2.0 * u - 1.0) * half_width);
          }
          quantize_row(type, row.data(), dst + r * rb, cols);
        }
      });
    });
  };
  // What every family has, then the family's own keys and layer tensors.
  add("token_embd.weight", {s.dim, s.vocab}, s.dec.embed_std > 0 ? s.dec.embed_std : 1.0f, 0.0f);
  add("output_norm.weight", {s.dim}, 0.0f, 1.0f);
  if (!s.dec.tied) add("output.weight", {s.dim, s.vocab}, SynthFile::fan_in(s.dim), 0.0f);
  SynthFile out(w, s, add);
  family.synth(out);
  w.set_u32(s.arch + ".vocab_size", static_cast<uint32_t>(s.vocab));
  if (o.vocab_from) {
    for (const auto& [k, v] : o.vocab_from->metadata())
      if (k.rfind("tokenizer.", 0) == 0) w.set(k, v);
  } else {
    add_synthetic_vocab(w, s.vocab);
  }
  return w;
}

}  // namespace kestrel
