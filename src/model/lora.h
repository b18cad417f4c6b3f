#pragma once
// LoRA adapters in llama.cpp's GGUF form (llama-adapter.cpp; ../shared/specs/multimodal-lora-router.md B.1):
// general.type = adapter, adapter.type = lora, adapter.lora.alpha (absent: 0), and for each matrix W of the base
// model a pair `W.lora_a` {n_in, r} and `W.lora_b` {r, n_out} (token_embd's A stored transposed: {r, n_vocab},
// B {r, n_embd}). A product by W then adds scale * B . (A . x), scale = user * alpha / r (alpha 0: the user's
// scale), the rank r being B's ne[0]; the embedding adds scale * B . A[token]. model/lora_backend.h applies them,
// per batch row.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "formats/weight.h"
#include "gguf/gguf.h"

namespace kestrel {

class Backend;

// The matrices a loaded model multiplies by (its products' weights, by name, {cols, rows}), what an adapter may
// name: LoraBackend records them as the model prepares its weights.
struct LoraTargets {
  std::string arch;
  std::unordered_map<std::string, std::pair<int64_t, int64_t>> products;
  // The routed experts' stacks (`blk.N.ffn_*_exps.weight`) by name: one expert's {cols, rows}.
  std::unordered_map<std::string, std::pair<int64_t, int64_t>> experts;
  // Matrices the model cut out of a file tensor's rows and multiplies by apart (a fused attn_qkv's q, k and v; a
  // fused ffn_up's gate and up halves; a fused ffn_gate_up_exps expert's halves), by their names: the tensor and the
  // rows (of the whole tensor, experts' rows in turn). An adapter on the tensor applies to each with B's rows.
  struct Slice {
    std::string tensor;
    int64_t row = 0, rows = 0;
  };
  std::unordered_map<std::string, Slice> slices;
  int64_t n_embd = 0, n_vocab = 0;  // token_embd.weight's
  bool tied_output = false;         // the output head is token_embd.weight
  const GgufFile* base = nullptr;   // the model's file (errors say whether a tensor is in it)
};

struct LoraPair {
  Weight a, b;       // prepared on the backend that multiplies by them
  int64_t rank = 0;  // b.ne[0]
  bool embedding = false;  // token_embd.weight's: A is a table of rows by token
  std::string stack;       // a routed expert's (`{stack}.{x}`): its 3-D pair's name
};

class LoraAdapter {
 public:
  // Reads and checks the file against the model (llama.cpp's checks, and Kestrel's: a tensor that is not a pair
  // member — llama.cpp drops `*_norm.weight` ones — or names a matrix Kestrel does not multiply by in this model is
  // an error naming it); A and B prepared on `be`.
  static std::shared_ptr<LoraAdapter> load(const std::string& path, const LoraTargets& targets, Backend& be);

  const std::string& path() const { return path_; }
  // Its name in metrics and logs: the model name it is served as (--lora-modules), else its file's stem.
  const std::string& label() const { return label_; }
  void set_label(std::string l) { label_ = std::move(l); }
  float alpha() const { return alpha_; }
  const std::string& task_name() const { return task_name_; }
  const std::string& prompt_prefix() const { return prompt_prefix_; }
  uint64_t content_hash() const { return hash_; }  // of the file's bytes
  int64_t bytes() const { return bytes_; }
  int64_t n_pairs() const { return static_cast<int64_t>(pairs_.size()); }
  // The pair for base matrix `name` (null: the adapter leaves it alone).
  const LoraPair* find(const std::string& name) const {
    auto it = pairs_.find(name);
    return it == pairs_.end() ? nullptr : &it->second;
  }
  const std::unordered_map<std::string, LoraPair>& pairs() const { return pairs_; }
  // The file's pair for a tensor as stored (not prepared; a 3-D pair's A and B as their ne[0] x the rest rows):
  // what the float64 reference multiplies by (null: none).
  const LoraPair* whole(const std::string& tensor) const {
    auto it = whole_.find(tensor);
    return it == whole_.end() ? nullptr : &it->second;
  }
  // llama_adapter_lora_weight::get_scale.
  float scale(const LoraPair& p, float user_scale) const {
    return alpha_ != 0.0f ? user_scale * alpha_ / static_cast<float>(p.rank) : user_scale;
  }

 private:
  void add_expert_pairs(const std::string& stack, const GgufTensorInfo& a, const GgufTensorInfo& b,
                        const LoraTargets& targets, Backend& be, const std::function<Error(const std::string&)>& err);
  // adapter.lora.alpha, task_name, prompt_prefix; any other key but general.* and adapter.type is err(what).
  void read_keys(const GgufFile& f, const std::function<Error(const std::string&)>& err);
  // The pairs of the matrices the model cut out of `tensor` (LoraTargets::slices; false: none).
  bool add_slice_pairs(const std::string& tensor, const GgufTensorInfo& a, const GgufTensorInfo& b,
                       const LoraTargets& targets, Backend& be, const std::function<Error(const std::string&)>& err);
  std::string path_, label_, task_name_, prompt_prefix_;
  float alpha_ = 0.0f;
  uint64_t hash_ = 0;
  int64_t bytes_ = 0;
  std::unique_ptr<GgufFile> file_;  // the mapped bytes A and B point into
  std::unordered_map<std::string, LoraPair> pairs_;
  std::unordered_map<std::string, LoraPair> whole_;
};

// The adapters a request runs with, each with its scale (none of them 0), in the order given.
struct LoraSet {
  std::vector<std::pair<std::shared_ptr<const LoraAdapter>, float>> adapters;
  // Names KV computed under the set (the prefix cache's root): 0 for no adapter, else a hash of the adapters'
  // contents and scales.
  uint64_t key = 0;
  bool empty() const { return adapters.empty(); }
};

// A set from (adapter, scale) pairs: scale-0 entries dropped (llama_set_adapters_lora), its key computed; null
// when nothing is left.
std::shared_ptr<const LoraSet> make_lora_set(std::vector<std::pair<std::shared_ptr<const LoraAdapter>, float>> list);

// A FILE:SCALE argument of `flag` (--lora-scaled, --control-vector-scaled: the last ':' splits; Error naming the flag
// and argument otherwise).
std::pair<std::string, float> parse_file_scale(const std::string& arg, const char* flag);

// A random adapter for `base` (kestrel synth --lora): every 2-D product matrix of its layers (attention, FFN,
// shared experts, MLA projections) and, with head, output.weight (with embedding, token_embd.weight), rank r,
// A and B in `type` (F32 or F16), alpha (0: the key is left out, as an adapter without it).
struct SynthLoraOptions {
  int64_t rank = 8;
  float alpha = 0.0f;
  uint64_t seed = 1;
  GgmlType type = GgmlType::F32;
  bool head = true, embedding = false;
  // Set: instead, every 2-D matrix of the layers (any name) and of head / embedding as chosen whose name contains one
  // of these.
  std::vector<std::string> only;
};
void write_synth_lora(const GgufFile& base, const std::string& path, const SynthLoraOptions& o);

}  // namespace kestrel
