#include "model/lora.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>

#include "backend/backend.h"
#include "core/error.h"
#include "core/splitmix.h"
#include "formats/block_formats.h"
#include "formats/fp16.h"
#include "gguf/gguf_writer.h"

namespace kestrel {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The tensor as a matrix of ne[0] columns and every other dimension's rows.
Weight flat_weight_of(const GgufTensorInfo& t) {
  int64_t rows = 1;
  for (size_t i = 1; i < t.ne.size(); i++) rows *= t.ne[i];
  return Weight{t.name, t.type, {t.ne[0], rows}, t.data, t.nbytes, nullptr, nullptr};
}

Weight weight_of(const GgufTensorInfo& t) {
  std::vector<int64_t> ne = t.ne;
  while (ne.size() > 2 && ne.back() == 1) ne.pop_back();
  return Weight{t.name, t.type, ne, t.data, t.nbytes, nullptr, nullptr};
}

// Whether the pair (name's) fits the model: the embedding's (A by token; true) or a product's (false). Throws
// err(what) otherwise.
bool check_pair(const std::string& name, const GgufTensorInfo& a, const GgufTensorInfo& b, const LoraTargets& targets,
                const std::function<Error(const std::string&)>& err) {
  if (name == "token_embd.weight") {
    // A stored transposed: {r, n_vocab}; B {r, n_embd} (llm_graph_context::build_inp_embd).
    if (targets.tied_output)
      throw err("token_embd.weight: the model's output head is token_embd.weight too, and an embedding adapter "
                "(A stored by token) cannot apply to it as a product (llama.cpp fails on such a graph)");
    if (b.ne[1] != targets.n_embd || a.ne[1] != targets.n_vocab || a.ne[0] != b.ne[0])
      throw err(fmt::format("token_embd.weight: lora_a {} and lora_b {} do not fit the embedding {}x{} "
                            "(A is {{r, n_vocab}}, B {{r, n_embd}})",
                            shape_string(a.ne), shape_string(b.ne), targets.n_embd, targets.n_vocab));
    return true;
  }
  auto it = targets.products.find(name);
  if (it == targets.products.end()) {
    if (targets.base && !targets.base->find_tensor(name))
      throw err(fmt::format("'{}' is not a tensor of the model (an adapter for another model?)", name));
    throw err(fmt::format("'{}': Kestrel does not apply adapters to this tensor of a {} model (it is not one "
                          "matrix multiplying the batch's rows: routed experts, per-head or fused-and-split "
                          "matrices are not supported yet)",
                          name, targets.arch));
  }
  const auto [cols, rows] = it->second;
  if (a.ne[0] != cols || b.ne[1] != rows)
    throw err(fmt::format("'{}' is {}x{} but lora_a is {} and lora_b {} (A is {{n_in, r}}, B {{r, n_out}})", name,
                          cols, rows, shape_string(a.ne), shape_string(b.ne)));
  if (a.ne[1] != b.ne[0])
    throw err(fmt::format("'{}': lora_a {} and lora_b {} disagree on the rank", name, shape_string(a.ne),
                          shape_string(b.ne)));
  return false;
}

}  // namespace

void LoraAdapter::read_keys(const GgufFile& f, const std::function<Error(const std::string&)>& err) {
  for (const auto& [key, value] : f.metadata()) {
    if (key.rfind("general.", 0) == 0 || key == "adapter.type") continue;
    if (key == "adapter.lora.alpha") {
      if (!value.is_number()) throw err("adapter.lora.alpha is not a number");
      alpha_ = static_cast<float>(value.as_double());
    } else if (key == "adapter.lora.task_name") {
      task_name_ = value.as_string();
    } else if (key == "adapter.lora.prompt_prefix") {
      prompt_prefix_ = value.as_string();
    } else if (key.rfind("adapter.alora.", 0) == 0) {
      throw err(fmt::format("'{}': activated LoRA (aLoRA) adapters are not supported yet", key));
    } else {
      throw err(fmt::format("metadata key '{}' is not one a LoRA adapter has (Kestrel would ignore it)", key));
    }
  }
}

std::shared_ptr<LoraAdapter> LoraAdapter::load(const std::string& path, const LoraTargets& targets, Backend& be) {
  auto ad = std::make_shared<LoraAdapter>();
  ad->path_ = path;
  ad->label_ = std::filesystem::path(path).stem().string();
  ad->file_ = std::make_unique<GgufFile>(GgufFile::open(path));
  const GgufFile& f = *ad->file_;
  const std::function<Error(const std::string&)> err = [&](const std::string& what) {
    return Error(fmt::format("LoRA adapter {}: {}", path, what));
  };
  const auto type = f.get_string("general.type");
  if (type != "adapter") throw err(fmt::format("general.type is '{}', expected 'adapter'", type.value_or("")));
  const auto arch = f.get_string("general.architecture");
  if (arch != targets.arch)
    throw err(fmt::format("it is for architecture '{}', the model is '{}'", arch.value_or(""), targets.arch));
  const auto atype = f.get_string("adapter.type");
  if (atype != "lora") throw err(fmt::format("adapter.type is '{}', expected 'lora'", atype.value_or("")));
  ad->read_keys(f, err);
  // Pairs by base tensor name, in the file's order.
  std::map<std::string, std::pair<const GgufTensorInfo*, const GgufTensorInfo*>> pairs;
  XXH3_state_t* h = XXH3_createState();
  XXH3_64bits_reset(h);
  for (const GgufTensorInfo& t : f.tensors()) {
    const bool is_a = ends_with(t.name, ".lora_a"), is_b = ends_with(t.name, ".lora_b");
    if (!is_a && !is_b) {
      XXH3_freeState(h);
      if (ends_with(t.name, "_norm.weight"))
        throw err(fmt::format("tensor '{}': a norm vector in an adapter (llama.cpp skips these; Kestrel does not "
                              "drop what changes the model)",
                              t.name));
      throw err(fmt::format("tensor '{}' is neither a .lora_a nor a .lora_b", t.name));
    }
    const std::string base = t.name.substr(0, t.name.size() - 7);
    (is_a ? pairs[base].first : pairs[base].second) = &t;
    XXH3_64bits_update(h, t.name.data(), t.name.size());
    XXH3_64bits_update(h, t.data, t.nbytes);
  }
  XXH3_64bits_update(h, &ad->alpha_, sizeof ad->alpha_);
  ad->hash_ = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  if (pairs.empty()) throw err("it has no .lora_a/.lora_b tensors");
  for (const auto& [name, ab] : pairs) {
    if (!ab.first || !ab.second) throw err(fmt::format("'{}' has a {} but no {}", name, ab.first ? "lora_a" : "lora_b",
                                                       ab.first ? "lora_b" : "lora_a"));
    ad->whole_[name] = {flat_weight_of(*ab.first), flat_weight_of(*ab.second), ab.second->ne[0],
                        name == "token_embd.weight", ""};
    if (name.size() > 7 && targets.base &&
        targets.base->find_tensor(name.substr(0, name.size() - 7) + ".scale"))  // ffn_down_exps.scale (Gemma 4)
      throw err(fmt::format("'{}': llama.cpp adds an adapter's update after the per-expert output scale ({}), "
                            "Kestrel scales the expert's output whole; not supported yet",
                            name, name.substr(0, name.size() - 7) + ".scale"));
    if (targets.experts.count(name)) {  // a routed experts' stack: one pair per expert, slices of the 3-D pair
      ad->add_expert_pairs(name, *ab.first, *ab.second, targets, be, err);
      continue;
    }
    if (!targets.products.count(name) && name != "token_embd.weight" &&
        ad->add_slice_pairs(name, *ab.first, *ab.second, targets, be, err))
      continue;  // the matrices the model cut out of this tensor: each with its rows of B
    for (const GgufTensorInfo* t : {ab.first, ab.second}) {
      if (!traits(t->type).computable || t->ne.size() < 2 || (t->ne.size() > 2 && t->ne[2] != 1))
        throw err(fmt::format("tensor '{}' ({} {}) is not a matrix Kestrel multiplies by", t->name,
                              type_name(t->type), shape_string(t->ne)));
    }
    const GgufTensorInfo &a = *ab.first, &b = *ab.second;
    LoraPair p;
    p.rank = b.ne[0];
    p.embedding = check_pair(name, a, b, targets, err);
    p.a = be.prepare_weight(weight_of(a));
    p.b = be.prepare_weight(weight_of(b));
    ad->bytes_ += static_cast<int64_t>(a.nbytes + b.nbytes);
    ad->pairs_.emplace(name, std::move(p));
  }
  return ad;
}

void LoraAdapter::add_expert_pairs(const std::string& stack, const GgufTensorInfo& a, const GgufTensorInfo& b,
                                   const LoraTargets& targets, Backend& be,
                                   const std::function<Error(const std::string&)>& err) {
  const auto [cols, rows] = targets.experts.at(stack);
  const GgufTensorInfo* base = targets.base ? targets.base->find_tensor(stack) : nullptr;
  const int64_t n_exp = base && base->ne.size() > 2 ? base->ne[2] : 0;
  // build_lora_mm_id: A {n_in, r, n_expert}, B {r, n_out, n_expert}, each expert's slice on its rows.
  if (a.ne.size() != 3 || b.ne.size() != 3 || a.ne[0] != cols || a.ne[2] != n_exp || b.ne[1] != rows ||
      b.ne[2] != n_exp || a.ne[1] != b.ne[0] || !traits(a.type).computable || !traits(b.type).computable)
    throw err(fmt::format("'{}' is {} experts of {}x{} but lora_a is {} and lora_b {} (A is {{n_in, r, n_expert}}, B "
                          "{{r, n_out, n_expert}})",
                          stack, n_exp, cols, rows, shape_string(a.ne), shape_string(b.ne)));
  const Weight wa = weight_of(a), wb = weight_of(b);
  for (int64_t x = 0; x < n_exp; x++) {
    LoraPair p;
    p.rank = b.ne[0];
    p.stack = stack;
    Weight sa = weight_slice(wa, x, fmt::format("{}.{}", a.name, x)), sb = weight_slice(wb, x, fmt::format("{}.{}", b.name, x));
    sa.routed_expert = sb.routed_expert = true;  // (ggml_mul_mat_id: the row dots at every batch size)
    p.a = be.prepare_weight(std::move(sa));
    p.b = be.prepare_weight(std::move(sb));
    pairs_.emplace(fmt::format("{}.{}", stack, x), std::move(p));
  }
  bytes_ += static_cast<int64_t>(a.nbytes + b.nbytes);
}

bool LoraAdapter::add_slice_pairs(const std::string& tensor, const GgufTensorInfo& a, const GgufTensorInfo& b,
                                  const LoraTargets& targets, Backend& be,
                                  const std::function<Error(const std::string&)>& err) {
  const GgufTensorInfo* t = targets.base ? targets.base->find_tensor(tensor) : nullptr;
  if (!t) return false;
  std::vector<std::pair<std::string, LoraTargets::Slice>> cuts;
  for (const auto& [name, cut] : targets.slices)
    if (cut.tensor == tensor && !pairs_.count(name)) cuts.emplace_back(name, cut);
  if (cuts.empty()) return false;
  const bool stack = t->ne.size() == 3;  // a fused experts' stack (ffn_gate_up_exps): per expert, then its rows
  const int64_t n_exp = stack ? t->ne[2] : 1;
  if (a.ne.size() != b.ne.size() || a.ne[0] != t->ne[0] || b.ne[1] != t->ne[1] || a.ne[1] != b.ne[0] ||
      (stack && (a.ne.size() != 3 || a.ne[2] != n_exp || b.ne[2] != n_exp)) || (!stack && a.ne.size() != 2) ||
      !traits(a.type).computable || !traits(b.type).computable)
    throw err(fmt::format("'{}' is {} but lora_a is {} and lora_b {}", tensor, t->shape_string(), shape_string(a.ne),
                          shape_string(b.ne)));
  const Weight wa = weight_of(a), wb = weight_of(b);
  for (const auto& [name, cut] : cuts) {
    const int64_t x = stack ? cut.row / t->ne[1] : 0, local = stack ? cut.row % t->ne[1] : cut.row;
    Weight sa = stack ? weight_slice(wa, x, fmt::format("{}.{}", a.name, x)) : wa;
    Weight sb = weight_rows(stack ? weight_slice(wb, x, b.name) : wb, local, cut.rows, fmt::format("{}@{}", b.name, name));
    sa.routed_expert = sb.routed_expert = stack;
    LoraPair p;
    p.rank = b.ne[0];
    if (stack) p.stack = tensor;
    p.a = be.prepare_weight(std::move(sa));
    p.b = be.prepare_weight(std::move(sb));
    pairs_.emplace(name, std::move(p));
  }
  bytes_ += static_cast<int64_t>(a.nbytes + b.nbytes);
  return true;
}

std::shared_ptr<const LoraSet> make_lora_set(
    std::vector<std::pair<std::shared_ptr<const LoraAdapter>, float>> list) {
  auto set = std::make_shared<LoraSet>();
  uint64_t key = 0x6b65737472656c4cull;  // any nonzero seed
  for (auto& [adapter, scale] : list) {
    if (scale == 0.0f) continue;
    const uint64_t parts[2] = {adapter->content_hash(), static_cast<uint64_t>(std::bit_cast<uint32_t>(scale))};
    key = XXH3_64bits_withSeed(parts, sizeof parts, key);
    set->adapters.emplace_back(std::move(adapter), scale);
  }
  if (set->adapters.empty()) return nullptr;
  set->key = key ? key : 1;
  return set;
}

std::pair<std::string, float> parse_file_scale(const std::string& arg, const char* flag) {
  const size_t colon = arg.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == arg.size())
    throw Error(fmt::format("{} '{}': expected FILE:SCALE", flag, arg));
  const std::string num = arg.substr(colon + 1);
  char* end = nullptr;
  const float s = std::strtof(num.c_str(), &end);
  if (end != num.c_str() + num.size() || !std::isfinite(s))
    throw Error(fmt::format("{} '{}': '{}' is not a number", flag, arg, num));
  return {arg.substr(0, colon), s};
}

namespace {

// Whether synth --lora's adapter names this tensor of the base (the layers' projections by default; with only,
// every layer matrix whose name holds a pattern), the head and embedding as asked.
bool synth_lora_takes(const std::string& name, const SynthLoraOptions& o) {
  static const char* kLayerMatrices[] = {
      "attn_q.weight",     "attn_k.weight",     "attn_v.weight",     "attn_output.weight", "ffn_gate.weight",
      "ffn_up.weight",     "ffn_down.weight",   "ffn_gate_shexp.weight", "ffn_up_shexp.weight",
      "ffn_down_shexp.weight", "attn_q_a.weight", "attn_q_b.weight", "attn_kv_a_mqa.weight", "attn_qkv.weight",
      "attn_gate.weight", "ssm_out.weight", "ssm_beta.weight", "ssm_alpha.weight", "ssm_ba.weight", "inp_gate.weight",
      "proj.weight", "attn_kv.weight", "attn_output_a.weight", "attn_output_b.weight"};
  bool take = false;
  if (name == "output.weight") take = o.head;
  else if (name == "token_embd.weight") take = o.embedding;
  else if (name.rfind("blk.", 0) == 0 && o.only.empty())
    for (const char* m : kLayerMatrices)
      if (ends_with(name, std::string(".") + m)) take = true;
  // --lora-only: any of the layers' matrices (norm vectors are not matrices) whose name contains a pattern.
  if (!o.only.empty() && (take || (name.rfind("blk.", 0) == 0 && ends_with(name, ".weight"))))
    take = std::any_of(o.only.begin(), o.only.end(), [&](const std::string& p) { return name.find(p) != std::string::npos; });
  return take;
}

// The root-mean-square of a base matrix's first values (its scale), or 1/sqrt(n_in) for a type read no further
// (and for zeros or constants at the start, as some synth initialisations have).
double base_rms(const GgufTensorInfo& t) {
  const int64_t n = std::min<int64_t>(t.ne[0] * (t.ne.size() > 1 ? t.ne[1] : 1), 4096);
  const double fan_in = 1.0 / std::sqrt(static_cast<double>(t.ne[0]));
  if (t.type != GgmlType::F32 && t.type != GgmlType::F16 && t.type != GgmlType::BF16) return fan_in;
  std::vector<float> v(static_cast<size_t>(n));
  dequantize_row(t.type, t.data, v.data(), n);
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return s > 0 ? std::sqrt(s / static_cast<double>(n)) : fan_in;
}

}  // namespace

void write_synth_lora(const GgufFile& base, const std::string& path, const SynthLoraOptions& o) {
  if (o.rank < 1 || o.rank > 4096) throw Error(fmt::format("--lora-rank {} is out of range (1 to 4096)", o.rank));
  if (o.type != GgmlType::F32 && o.type != GgmlType::F16) throw Error("--lora-type: f32 or f16");
  const auto arch = base.get_string("general.architecture");
  if (!arch) throw Error(fmt::format("{}: no general.architecture", base.path()));
  GgufWriter w;
  w.set_str("general.architecture", *arch);
  w.set_str("general.type", "adapter");
  w.set_str("general.name", "kestrel-synth-lora");
  w.set_str("adapter.type", "lora");
  if (o.alpha != 0.0f) w.set_f32("adapter.lora.alpha", o.alpha);
  uint64_t state = o.seed * 0x9E3779B97F4A7C15ull + 17;
  const auto add = [&](const std::string& name, std::vector<int64_t> ne, double stddev) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    const double half = stddev * std::sqrt(3.0);
    for (float& x : v) x = static_cast<float>((2.0 * splitmix_unit(state) - 1.0) * half);
    if (o.type == GgmlType::F32) {
      w.add_tensor(name, o.type, ne, [v](uint8_t* dst, size_t bytes) { std::memcpy(dst, v.data(), bytes); });
    } else {
      w.add_tensor(name, o.type, ne, [v](uint8_t* dst, size_t) {
        for (size_t i = 0; i < v.size(); i++) {
          const uint16_t hv = fp32_to_fp16(v[i]);
          std::memcpy(dst + 2 * i, &hv, 2);
        }
      });
    }
  };
  const double r = static_cast<double>(o.rank);
  // The scale the update gets at user scale 1: with it, B's values make the update about half the matrix's
  // own product (A . x has x's size: A's values are 1/sqrt(n_in)).
  const double applied = o.alpha != 0.0f ? o.alpha / r : 1.0;
  // The multi-token-prediction blocks (the last nextn_predict_layers) are not part of the model llama.cpp loads.
  const int64_t blocks = base.get_int(*arch + ".block_count").value_or(0);
  const int64_t trunk = blocks - base.get_int(*arch + ".nextn_predict_layers").value_or(0);
  int64_t written = 0;
  for (const GgufTensorInfo& t : base.tensors()) {
    const std::string& name = t.name;
    if (name.rfind("blk.", 0) == 0 && std::atoll(name.c_str() + 4) >= trunk) continue;
    const bool take = synth_lora_takes(name, o);
    const bool stack = t.ne.size() == 3 && ends_with(name, "_exps.weight");  // routed experts: 3-D pairs
    if (!take || t.ne.size() < 2 || (t.ne.size() > 2 && t.ne[2] != 1 && !stack)) continue;
    const double b_std = 0.5 * base_rms(t) * std::sqrt(static_cast<double>(t.ne[0])) / std::sqrt(r) / applied;
    if (name == "token_embd.weight") {
      add(name + ".lora_a", {o.rank, t.ne[1]}, 1.0);
      add(name + ".lora_b", {o.rank, t.ne[0]}, 0.5 * base_rms(t) / std::sqrt(r) / applied);
    } else if (stack) {
      add(name + ".lora_a", {t.ne[0], o.rank, t.ne[2]}, 1.0 / std::sqrt(static_cast<double>(t.ne[0])));
      add(name + ".lora_b", {o.rank, t.ne[1], t.ne[2]}, b_std);
    } else {
      add(name + ".lora_a", {t.ne[0], o.rank}, 1.0 / std::sqrt(static_cast<double>(t.ne[0])));
      add(name + ".lora_b", {o.rank, t.ne[1]}, b_std);
    }
    written++;
  }
  if (written == 0) throw Error(fmt::format("{}: no matrix the adapter could name (--lora-only?)", base.path()));
  w.write_file(path);
}

}  // namespace kestrel
