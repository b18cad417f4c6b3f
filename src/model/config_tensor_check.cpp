#include "model/config_tensor_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace kestrel {
namespace {

// Output rows of a 2-D weight (ne[1]), or -1 when the tensor is absent.
int64_t rows_of(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.find_tensor(name);
  return t && t->ne.size() >= 2 ? t->ne[1] : -1;
}

// One more than the highest N of the "blk.N." tensors.
int64_t blocks_in(const GgufFile& f) {
  int64_t n = 0;
  for (const auto& t : f.tensors()) {
    if (t.name.rfind("blk.", 0) != 0) continue;
    char* end = nullptr;
    const long i = std::strtol(t.name.c_str() + 4, &end, 10);
    if (end && *end == '.') n = std::max<int64_t>(n, i + 1);
  }
  return n;
}

}  // namespace

void check_config_against_tensors(const HparamReader& h, const ModelConfig& c, bool per_head_projections) {
  const GgufFile& f = h.file();
  if (const GgufTensorInfo* tok = f.find_tensor("token_embd.weight"); tok && tok->ne[0] != c.n_embd)
    throw h.bad("embedding_length",
                fmt::format("= {} but tensor 'token_embd.weight' has rows of {}", c.n_embd, tok->ne[0]));
  const int64_t blocks = blocks_in(f);
  const int64_t declared = c.n_layer + c.n_mtp;
  if (blocks != declared)
    throw h.bad("block_count", fmt::format("= {} but the file's tensors are for {} blocks (blk.0 to blk.{})", declared,
                                           blocks, blocks - 1));
  if (per_head_projections) {
    if (const int64_t q = rows_of(f, "blk.0.attn_q.weight"); q >= 0 && q != int64_t{c.n_head} * c.head_dim)
      throw h.bad("attention.head_count",
                  fmt::format("= {} heads of {} but tensor 'blk.0.attn_q.weight' has {} outputs", c.n_head, c.head_dim, q));
    if (const int64_t k = rows_of(f, "blk.0.attn_k.weight"); k >= 0 && k != int64_t{c.n_head_kv} * c.head_dim)
      throw h.bad("attention.head_count_kv", fmt::format("= {} heads of {} but tensor 'blk.0.attn_k.weight' has {} outputs",
                                                         c.n_head_kv, c.head_dim, k));
  }
  // A gated FFN with its own gate (Phi-3 fuses gate and up into one tensor of
  // twice the rows; a MoE layer has expert tensors instead; DeepSeek's first
  // layers are dense).
  const int64_t up = rows_of(f, "blk.0.ffn_up.weight");
  if (up >= 0 && rows_of(f, "blk.0.ffn_gate.weight") >= 0 && up != c.n_ff)
    throw h.bad("feed_forward_length",
                fmt::format("= {} but tensor 'blk.0.ffn_up.weight' has {} outputs", c.n_ff, up));
}

}  // namespace kestrel
