#include "quant/quant_mix.h"

#include "model/family.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "formats/block_formats.h"
#include "core/error.h"
#include "formats/storage_type.h"

namespace kestrel {
namespace {

// llama_ftype values (llama.h).
enum Ftype : uint32_t {
  kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 7, kQ5_0 = 8, kQ5_1 = 9, kQ2_K = 10, kQ3_K_S = 11, kQ3_K_M = 12, kQ3_K_L = 13,
  kQ4_K_S = 14, kQ4_K_M = 15, kQ5_K_S = 16, kQ5_K_M = 17, kQ6_K = 18, kIQ2_XXS = 19, kIQ2_XS = 20, kQ2_K_S = 21,
  kIQ3_XS = 22, kIQ3_XXS = 23, kIQ1_S = 24, kIQ4_NL = 25, kIQ3_S = 26, kIQ3_M = 27, kIQ2_S = 28, kIQ2_M = 29,
  kIQ4_XS = 30, kIQ1_M = 31, kMXFP4_MOE = 38,
};

using T = GgmlType;

enum class Category { TokenEmbd, AttnQ, AttnV, AttnK, AttnQkv, AttnKvB, AttnOutput, FfnUp, FfnGate, FfnDown, Output, Other };

Category category_of(const std::string& n) {
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  if (n == "output.weight") return Category::Output;
  if (n == "token_embd.weight" || n == "per_layer_token_embd.weight") return Category::TokenEmbd;
  if (has("attn_qkv.weight")) return Category::AttnQkv;
  if (has("attn_kv_b.weight")) return Category::AttnKvB;
  if (has("attn_v.weight")) return Category::AttnV;
  if (has("attn_k.weight")) return Category::AttnK;
  if (has("attn_q.weight")) return Category::AttnQ;
  if (has("attn_output.weight")) return Category::AttnOutput;
  if (has("ffn_up")) return Category::FfnUp;
  if (has("ffn_gate")) return Category::FfnGate;
  if (has("ffn_down")) return Category::FfnDown;
  return Category::Other;
}

bool is_attn_v_like(Category c) { return c == Category::AttnV || c == Category::AttnQkv || c == Category::AttnKvB; }

// Which tensors llama-quantize quantizes at all: 2-D and 3-D weights, not
// norms, routers or the few small tables it keeps.
bool allows_quantization(const GgufTensorInfo& t) {
  if (t.ne.size() < 2) return false;
  const std::string& n = t.name;
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  if (n.size() < 6 || n.compare(n.size() - 6, 6, "weight") != 0) return false;
  return !has("_norm.weight") && !has("ffn_gate_inp.weight") && !has("ffn_gate_tid2eid.weight") && !has("altup") &&
         !has("laurel") && !has("per_layer_model_proj") && n != "position_embd.weight" && n != "token_types.weight" &&
         !has("ssm_conv1d") && !has("attn_rel_b.weight");
}

int layer_of(const std::string& name) {
  int layer = -1;
  std::sscanf(name.c_str(), "blk.%d.", &layer);
  return layer;
}

struct QuantModel {
  std::string arch;
  int n_layer = 0, n_head = 1, n_head_kv = 1, n_expert = 0;
  bool is_70b = false;
  int n_gqa() const { return n_head_kv > 0 ? n_head / n_head_kv : 1; }
};

QuantModel model_of(const GgufFile& f) {
  QuantModel m;
  m.arch = f.get_string("general.architecture").value_or("");
  const auto key = [&](const char* k) { return f.get_int(m.arch + "." + k); };
  m.n_layer = static_cast<int>(key("block_count").value_or(0));
  m.n_head = static_cast<int>(key("attention.head_count").value_or(1));
  // A per-layer array (Gemma 4): layer 0's, as llama-quantize's n_gqa() reads it.
  const GgufValue* kv = f.find(m.arch + ".attention.head_count_kv");
  if (kv && kv->type == GgufValueType::ARRAY)
    m.n_head_kv = kv->as_array().items.empty() ? m.n_head : static_cast<int>(kv->as_array().items[0].as_int());
  else
    m.n_head_kv = static_cast<int>(key("attention.head_count_kv").value_or(m.n_head));
  m.n_expert = static_cast<int>(key("expert_count").value_or(0));
  // llama.cpp calls an 80-layer Llama "70B" and raises its attn_v further.
  const Family* fam = find_family(m.arch);
  m.is_70b = fam && fam->quant_70b_layers > 0 && m.n_layer == fam->quant_70b_layers;
  return m;
}

struct State {
  const QuantModel& m;
  uint32_t ftype;
  const QuantMixOptions& o;
  bool tied = true;  // token_embd is also the output head (no output.weight)
  int n_attention_wv = 0, i_attention_wv = 0, i_ffn_down = 0, i_ffn_gate = 0, i_ffn_up = 0;
};

bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// The layer a per-layer counter stands for: its count, or (MoE files, whose
// expert tensors need not come in layer order) the name's layer.
int layer_for(const State& s, int counter, const std::string& name) {
  if (s.m.n_expert <= 1) return counter;
  const int layer = layer_of(name);
  if (layer < 0 || layer >= s.m.n_layer) throw Error(fmt::format("tensor '{}': cannot tell its layer", name));
  return layer;
}

bool one_of(uint32_t f, std::initializer_list<uint32_t> list) { return std::find(list.begin(), list.end(), f) != list.end(); }

// llama.cpp's llama_tensor_get_type_impl for the mixes, rule for rule.
GgmlType rule_type(State& s, GgmlType t, const GgufTensorInfo& ti, Category c) {
  const uint32_t f = s.ftype;
  const QuantModel& m = s.m;
  const std::string& name = ti.name;
  const bool iq_low = one_of(f, {kIQ2_XXS, kIQ2_XS, kIQ1_S, kIQ2_S, kIQ2_M, kIQ1_M});
  if (c == Category::Output || (s.tied && c == Category::TokenEmbd)) {
    if (s.o.output_type) return *s.o.output_type;
    if (f == kMXFP4_MOE || ti.ne[0] % traits(t).block_size != 0) return T::Q8_0;
    if (one_of(f, {kIQ2_XXS, kIQ2_XS, kIQ3_XXS, kIQ1_S, kIQ2_S, kIQ2_M, kIQ1_M})) return T::Q5_K;
    return t != T::Q8_0 ? T::Q6_K : t;
  }
  if (f == kMXFP4_MOE) return ti.ne.size() > 2 && ti.ne[2] > 1 ? T::MXFP4 : T::Q8_0;
  if (c == Category::TokenEmbd) {
    if (s.o.token_embedding_type) return *s.o.token_embedding_type;
    if (one_of(f, {kIQ2_XXS, kIQ2_XS, kIQ1_S, kIQ1_M})) return T::Q2_K;
    if (one_of(f, {kIQ2_S, kIQ2_M, kIQ3_XXS})) return T::IQ3_S;
    return t;
  }
  if (iq_low) {
    const bool iq2sm = f == kIQ2_S || f == kIQ2_M;
    if (is_attn_v_like(c)) {
      t = m.n_gqa() >= 4 || m.n_expert >= 4 ? T::Q4_K : iq2sm ? T::IQ3_S : T::Q2_K;
      ++s.i_attention_wv;
    } else if (m.n_expert == 8 && c == Category::AttnK) {
      t = T::Q4_K;
    } else if (c == Category::FfnDown) {
      if (s.i_ffn_down < m.n_layer / 8) t = iq2sm ? T::IQ3_S : T::Q2_K;
      ++s.i_ffn_down;
    } else if (c == Category::AttnOutput) {
      if (m.n_expert == 8) t = T::Q5_K;
      else if (f == kIQ1_S || f == kIQ1_M) t = T::IQ2_XXS;
      else if (iq2sm) t = T::IQ3_S;
    }
    return t;
  }
  if (is_attn_v_like(c)) {
    if (f == kQ2_K) t = m.n_gqa() >= 4 ? T::Q4_K : T::Q3_K;
    else if (f == kQ2_K_S && m.n_gqa() >= 4) t = T::Q4_K;
    else if (f == kIQ3_XXS) t = m.n_gqa() >= 4 ? T::Q4_K : !s.o.has_imatrix ? T::IQ3_S : T::IQ3_XXS;
    else if ((f == kIQ3_XS || f == kIQ3_S) && m.n_gqa() >= 4) t = T::Q4_K;
    else if (f == kIQ3_M) t = T::Q4_K;
    else if (f == kQ3_K_M) t = s.i_attention_wv < 2 ? T::Q5_K : T::Q4_K;
    else if (f == kQ3_K_L) t = T::Q5_K;
    else if ((f == kIQ4_NL || f == kIQ4_XS) && m.n_gqa() >= 4) t = T::Q5_K;
    else if ((f == kQ4_K_M || f == kQ5_K_M) && use_more_bits(s.i_attention_wv, s.n_attention_wv)) t = T::Q6_K;
    else if (f == kQ4_K_S && s.i_attention_wv < 4) t = T::Q5_K;
    if (m.is_70b && (t == T::Q3_K || t == T::Q4_K)) t = T::Q5_K;
    if (m.n_expert == 8) t = T::Q8_0;
    ++s.i_attention_wv;
  } else if (c == Category::AttnK) {
    if (m.n_expert == 8) t = T::Q8_0;
    else if (f == kIQ3_XS) t = T::IQ3_XXS;
    else if (f == kIQ3_XXS) t = T::IQ2_S;
  } else if (c == Category::AttnQ) {
    if (f == kIQ3_XS) t = T::IQ3_XXS;
    else if (f == kIQ3_XXS) t = T::IQ2_S;
  } else if (c == Category::FfnDown) {
    const int i = layer_for(s, s.i_ffn_down, name), n = m.n_layer;
    if (f == kQ2_K) t = T::Q3_K;
    else if (f == kQ2_K_S) { if (i < n / 8) t = T::Q4_K; }
    else if (f == kIQ3_XXS && !s.o.has_imatrix) t = i < n / 8 ? T::Q4_K : T::Q3_K;
    else if (f == kQ3_K_M) t = i < n / 16 ? T::Q5_K : T::Q4_K;  // (Falcon's Q3_K exception: not an architecture we load)
    else if (f == kIQ3_M && (i < n / 8 || (m.n_expert == 8 && use_more_bits(i, n)))) t = T::Q4_K;
    else if (f == kQ3_K_L) t = T::Q5_K;
    else if (f == kQ4_K_M) { if (use_more_bits(i, n)) t = T::Q6_K; }
    else if (i < n / 8 && (f == kIQ4_NL || f == kIQ4_XS) && !s.o.has_imatrix) t = T::Q5_K;
    else if (f == kQ5_K_M && use_more_bits(i, n)) t = T::Q6_K;
    else if (f == kQ4_K_S && i < n / 8) t = T::Q5_K;
    else if ((f == kQ4_0 || f == kQ5_0) && s.o.has_imatrix && i < n / 8) t = f == kQ4_0 ? T::Q4_1 : T::Q5_1;
    ++s.i_ffn_down;
  } else if (c == Category::AttnOutput) {
    if (m.n_expert == 8) {
      if (one_of(f, {kQ2_K, kIQ3_XS, kIQ3_XXS, kQ3_K_S, kQ3_K_M, kIQ4_NL, kQ4_K_S, kQ4_K_M, kIQ3_S, kIQ3_M, kIQ4_XS}))
        t = T::Q5_K;
    } else {
      if (f == kQ2_K) t = T::Q3_K;
      else if (f == kIQ3_XXS) t = T::IQ3_S;
      else if (f == kQ3_K_M) t = T::Q4_K;
      else if (f == kQ3_K_L) t = T::Q5_K;
      else if (f == kIQ3_M) t = T::Q4_K;
    }
  } else if (c == Category::AttnQkv) {
    if (one_of(f, {kQ3_K_M, kQ3_K_L, kIQ3_M})) t = T::Q4_K;
    else if (f == kQ4_K_M) t = T::Q5_K;
    else if (f == kQ5_K_M) t = T::Q6_K;
  } else if (c == Category::FfnGate || c == Category::FfnUp) {
    int& counter = c == Category::FfnGate ? s.i_ffn_gate : s.i_ffn_up;
    const int i = layer_for(s, counter, name), n = m.n_layer;
    if (f == kIQ3_XS && i >= n / 8 && i < 7 * n / 8) t = T::IQ3_XXS;
    ++counter;
  }
  return t;
}

const std::vector<QuantMix> kMixes = {
    {"Q4_0", kQ4_0, T::Q4_0, "4.5 bpw"},
    {"Q4_1", kQ4_1, T::Q4_1, "5.0 bpw"},
    {"Q5_0", kQ5_0, T::Q5_0, "5.5 bpw"},
    {"Q5_1", kQ5_1, T::Q5_1, "6.0 bpw"},
    {"Q8_0", kQ8_0, T::Q8_0, "8.5 bpw"},
    {"Q2_K", kQ2_K, T::Q2_K, "Q2_K, attn_v/ffn_down Q3_K-Q4_K"},
    {"Q2_K_S", kQ2_K_S, T::Q2_K, "Q2_K, fewer raised tensors (needs --imatrix)", true},
    {"Q3_K_S", kQ3_K_S, T::Q3_K, "Q3_K throughout"},
    {"Q3_K_M", kQ3_K_M, T::Q3_K, "Q3_K, attn_v/attn_output/ffn_down Q4_K-Q5_K"},
    {"Q3_K_L", kQ3_K_L, T::Q3_K, "Q3_K, attn_v/attn_output/ffn_down Q5_K"},
    {"Q4_K_S", kQ4_K_S, T::Q4_K, "Q4_K, the first layers' attn_v/ffn_down Q5_K"},
    {"Q4_K_M", kQ4_K_M, T::Q4_K, "Q4_K, half of attn_v/ffn_down Q6_K"},
    {"Q5_K_S", kQ5_K_S, T::Q5_K, "Q5_K throughout"},
    {"Q5_K_M", kQ5_K_M, T::Q5_K, "Q5_K, half of attn_v/ffn_down Q6_K"},
    {"Q6_K", kQ6_K, T::Q6_K, "6.56 bpw"},
    {"IQ4_NL", kIQ4_NL, T::IQ4_NL, "4.5 bpw, non-linear levels"},
    {"IQ4_XS", kIQ4_XS, T::IQ4_XS, "4.25 bpw, non-linear levels"},
    {"MXFP4_MOE", kMXFP4_MOE, T::MXFP4, "MoE experts MXFP4, the rest Q8_0"},
    {"IQ3_XXS", kIQ3_XXS, T::IQ3_XXS, "3.06 bpw (needs --imatrix)", true},
    {"IQ3_XS", kIQ3_XS, T::IQ3_S, "3.3 bpw (needs --imatrix)", true},
    {"IQ3_S", kIQ3_S, T::IQ3_S, "3.44 bpw"},
    {"IQ3_M", kIQ3_M, T::IQ3_S, "3.66 bpw"},
    {"IQ2_XXS", kIQ2_XXS, T::IQ2_XXS, "2.06 bpw (needs --imatrix)", true},
    {"IQ2_XS", kIQ2_XS, T::IQ2_XS, "2.31 bpw (needs --imatrix)", true},
    {"IQ2_S", kIQ2_S, T::IQ2_XS, "2.5 bpw (needs --imatrix)", true},
    {"IQ2_M", kIQ2_M, T::IQ2_S, "2.7 bpw (needs --imatrix)", true},
    {"IQ1_S", kIQ1_S, T::IQ1_S, "1.56 bpw (needs --imatrix)", true},
    {"IQ1_M", kIQ1_M, T::IQ1_M, "1.75 bpw (needs --imatrix)", true},
};

std::string upper(std::string_view s) {
  std::string u(s);
  std::transform(u.begin(), u.end(), u.begin(), [](unsigned char c) { return std::toupper(c); });
  return u;
}

}  // namespace

const std::vector<QuantMix>& quant_mixes() { return kMixes; }

std::optional<QuantMix> find_quant_mix(std::string_view name) {
  const std::string u = upper(name);
  for (const auto& m : kMixes)
    if (u == m.name) return m;
  return std::nullopt;
}

std::string quant_mix_names() {
  std::string out;
  for (const auto& m : kMixes) out += (out.empty() ? "" : ", ") + std::string(m.name);
  return out;
}

std::map<std::string, GgmlType> plan_quant_mix(const GgufFile& in, const QuantMix& mix, const QuantMixOptions& o) {
  if (mix.needs_imatrix && !o.has_imatrix)
    throw Error(fmt::format("mix {} needs an importance matrix: --imatrix FILE (make one with kestrel imatrix -m MODEL "
                            "-f TEXT)",
                            mix.name));
  const QuantModel m = model_of(in);
  State s{m, mix.ftype, o};
  std::vector<const GgufTensorInfo*> order;
  for (const auto& t : in.tensors()) {
    order.push_back(&t);
    const Category c = category_of(t.name);
    if (is_attn_v_like(c)) s.n_attention_wv++;
    if (c == Category::Output) s.tied = false;
  }
  // llama.cpp visits tensors by layer (non-layer tensors first), then by name.
  std::stable_sort(order.begin(), order.end(), [](const GgufTensorInfo* a, const GgufTensorInfo* b) {
    const int la = layer_of(a->name), lb = layer_of(b->name);
    return la != lb ? la < lb : a->name < b->name;
  });
  std::map<std::string, GgmlType> plan;
  for (const GgufTensorInfo* t : order) {
    if (!allows_quantization(*t)) {
      plan[t->name] = t->type;
      continue;
    }
    const GgmlType chosen = fallback_type(rule_type(s, mix.base, *t, category_of(t->name)), t->ne[0]);
    if (needs_importance_matrix(t->name, chosen) && !o.has_imatrix)
      throw Error(fmt::format("mix {}: tensor '{}' would be {}, which is rounded only with an importance matrix: "
                              "--imatrix FILE (make one with kestrel imatrix -m MODEL -f TEXT)",
                              mix.name, t->name, type_name(chosen)));
    if (!can_quantize_to(chosen))
      throw Error(fmt::format("mix {}: tensor '{}' would be {}, which Kestrel cannot write yet", mix.name, t->name,
                              type_name(chosen)));
    plan[t->name] = chosen;
  }
  return plan;
}

}  // namespace kestrel
