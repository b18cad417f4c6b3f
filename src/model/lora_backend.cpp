#include "model/lora_backend.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "model/batch.h"

namespace kestrel {

LoraBackend::LoraBackend(std::unique_ptr<Backend> inner, Backend* ops)
    : ForwardingBackend(*inner), owned_(std::move(inner)), ops_(ops ? *ops : *owned_) {}

Weight LoraBackend::prepare_weight(Weight w) {
  if (w.ne.size() == 2 && !w.routed_expert) targets_.products[w.name] = {w.cols(), w.rows()};
  // A slice of a file tensor's rows under a name of its own: the tensor (the longest prefix of the name at a '.'
  // that is one, holding the slice's bytes) and the rows.
  if (w.ne.size() == 2 && targets_.base && !targets_.base->find_tensor(w.name) && w.data)
    for (size_t dot = w.name.rfind('.'); dot != std::string::npos && dot > 0; dot = w.name.rfind('.', dot - 1)) {
      const GgufTensorInfo* t = targets_.base->find_tensor(w.name.substr(0, dot));
      if (!t) continue;
      const auto* p = static_cast<const uint8_t*>(w.data);
      const size_t stride = w.row_stride();
      if (t->ne[0] == w.cols() && p >= t->data && p + w.rows() * stride <= t->data + t->nbytes &&
          (p - t->data) % stride == 0)
        targets_.slices[w.name] = {t->name, static_cast<int64_t>((p - t->data) / stride), w.rows()};
      break;
    }
  // A routed expert's matrix, `{stack}.{x}` of a `*_exps.weight` stack: the stack takes 3-D pairs.
  if (w.ne.size() == 2 && w.routed_expert) {
    const size_t dot = w.name.rfind('.');
    const std::string stack = dot == std::string::npos ? std::string() : w.name.substr(0, dot);
    if (stack.size() > 12 && stack.compare(stack.size() - 12, 12, "_exps.weight") == 0 &&
        w.name.find_first_not_of("0123456789", dot + 1) == std::string::npos)
      targets_.experts[stack] = {w.cols(), w.rows()};
  }
  if (w.name == "token_embd.weight") targets_.tied_output = true;  // prepared: multiplied by, as the head
  return fwd().prepare_weight(std::move(w));
}

void LoraBackend::annotate_batch(const Batch& b) {
  fwd().annotate_batch(b);
  sets_.clear();
  row_set_.clear();
  announced_set_ = false;
  active_ = mixed_ = false;
  if (b.lora_rows.empty()) return;
  if (static_cast<int64_t>(b.lora_rows.size()) != b.size())
    throw Error(fmt::format("LoRA: {} rows of adapter sets for a batch of {}", b.lora_rows.size(), b.size()));
  sets_ = b.lora_sets;
  row_set_ = b.lora_rows;
  for (int32_t s : row_set_) {
    if (s >= static_cast<int32_t>(sets_.size()) || s < -1 || (s >= 0 && !sets_[s]))
      throw Error(fmt::format("LoRA: a row's adapter set {} of {}", s, sets_.size()));
    if (s >= 0) active_ = true;
    if (s != row_set_[0]) mixed_ = true;
  }
}

void LoraBackend::annotate_rows(const int64_t* list, int64_t first, int64_t n) {
  fwd().annotate_rows(list, first, n);
  if (!active_) return;
  announced_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) announced_[i] = list ? list[first + i] : first + i;
  announced_set_ = true;
}

void LoraBackend::annotate_subrows(const int64_t* picks, int64_t n) {
  fwd().annotate_subrows(picks, n);
  if (!active_ || !announced_set_) return;
  if (!picks) {
    announced_ = layer_rows_;
    return;
  }
  layer_rows_ = announced_;
  announced_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) announced_[i] = layer_rows_[static_cast<size_t>(picks[i])];
}

void LoraBackend::ffn_many(const FfnRef* ffns, int count, const Act* xs, const int64_t* ns, const Act* ys) {
  bool any = false;
  for (int i = 0; i < count && !any; i++) any = touches(*ffns[i].gate) || touches(*ffns[i].up) || touches(*ffns[i].down);
  if (!any) return fwd().ffn_many(ffns, count, xs, ns, ys);
  // One expert at a time through the plain operators, its products updated on its rows (the gathered stretch's
  // rows, expert after expert, as annotate_subrows announced them).
  const std::vector<int64_t> stretch = announced_;
  int64_t off = 0;
  for (int i = 0; i < count; i++) {
    if (mixed_) {
      if (off + ns[i] > static_cast<int64_t>(stretch.size()))
        throw Error(fmt::format("LoRA: the experts' rows ({} so far) exceed the {} announced", off + ns[i],
                                stretch.size()));
      announced_.assign(stretch.begin() + off, stretch.begin() + off + ns[i]);
    }
    Backend::ffn_many(&ffns[i], 1, &xs[i], &ns[i], &ys[i]);
    off += ns[i];
  }
  announced_ = stretch;
}

bool LoraBackend::touches(const Weight& w) const {
  if (!active_) return false;
  for (const LoraSet* s : sets_)
    for (const auto& [adapter, scale] : s->adapters)
      if (adapter->find(w.name)) return true;
  return false;
}

void LoraBackend::apply(const LoraPair& p, float scale, Act x, const int32_t* tokens, int64_t n, Act y,
                        const int64_t* rows, int64_t out_dim) {
  if (checking_) applied_.insert(&p);
  t_.ensure(in_, n * p.rank);
  u_.ensure(in_, n * out_dim);
  if (p.embedding) ops_.embed(p.a, tokens, n, t_);
  else ops_.matmul(p.a, x, n, t_);
  ops_.matmul(p.b, t_, n, u_);
  if (!rows) {
    ops_.scale(u_, n * out_dim, scale);
    ops_.add(y, u_, n * out_dim);
    return;
  }
  scales_.assign(static_cast<size_t>(n), scale);
  ops_.scatter_add_rows(y, u_, rows, scales_.data(), n, out_dim);
}

void LoraBackend::add_updates(const Weight& w, Act x, const int32_t* tokens, int64_t n, Act y) {
  if (!touches(w)) return;
  const bool embedding = tokens != nullptr;
  const int64_t in_dim = w.cols(), out_dim = embedding ? w.cols() : w.rows();
  // Every row of the call runs set k: the update over all of them, in place.
  const auto whole = [&](const LoraSet& set) {
    for (const auto& [adapter, user] : set.adapters)
      if (const LoraPair* p = adapter->find(w.name); p && p->embedding == embedding)
        apply(*p, adapter->scale(*p, user), x, tokens, n, y, nullptr, out_dim);
  };
  if (!mixed_) return whole(*sets_[row_set_[0]]);
  if (!announced_set_ || static_cast<int64_t>(announced_.size()) != n)
    throw Error(fmt::format("LoRA: a product by '{}' over {} rows, in a step whose rows run different adapters and "
                            "whose model announced {} rows: Kestrel cannot tell which row runs which adapter here",
                            w.name, n, announced_set_ ? static_cast<int64_t>(announced_.size()) : 0));
  for (int32_t k = 0; k < static_cast<int32_t>(sets_.size()); k++) {
    rows_.clear();
    for (int64_t i = 0; i < n; i++)
      if (row_set_[static_cast<size_t>(announced_[i])] == k) rows_.push_back(i);
    if (rows_.empty()) continue;
    if (static_cast<int64_t>(rows_.size()) == n) {
      whole(*sets_[k]);
      continue;
    }
    const auto m = static_cast<int64_t>(rows_.size());
    Act xs;
    if (embedding) {
      tokens_.resize(static_cast<size_t>(m));
      for (int64_t i = 0; i < m; i++) tokens_[i] = tokens[rows_[i]];
    } else {
      xg_.ensure(in_, m * in_dim);
      ops_.gather_rows(xg_, x, rows_.data(), m, in_dim);
      xs = xg_;
    }
    for (const auto& [adapter, user] : sets_[k]->adapters)
      if (const LoraPair* p = adapter->find(w.name); p && p->embedding == embedding)
        apply(*p, adapter->scale(*p, user), xs, embedding ? tokens_.data() : nullptr, m, y, rows_.data(), out_dim);
  }
}

void LoraBackend::matmul(const Weight& w, Act x, int64_t n, Act y) {
  fwd().matmul(w, x, n, y);
  add_updates(w, x, nullptr, n, y);
}

void LoraBackend::matmul_many(const Weight* const* ws, int count, Act x, int64_t n, const Act* ys) {
  fwd().matmul_many(ws, count, x, n, ys);
  for (int i = 0; i < count; i++) add_updates(*ws[i], x, nullptr, n, ys[i]);
}

bool LoraBackend::gate_up_updated(const Weight& g, const Weight& u, Act x, int64_t n, Act out, Act scratch) {
  if (!touches(g) && !touches(u)) return false;
  const Weight* ws[2] = {&g, &u};
  const Act ys[2] = {out, scratch};
  matmul_many(ws, 2, x, n, ys);
  return true;
}

void LoraBackend::swiglu(const Weight& g, const Weight& u, Act x, int64_t n, Act out, Act scratch) {
  if (gate_up_updated(g, u, x, n, out, scratch)) return silu_mul(out, scratch, n * g.rows());
  fwd().swiglu(g, u, x, n, out, scratch);
}

void LoraBackend::geglu(const Weight& g, const Weight& u, Act x, int64_t n, Act out, Act scratch) {
  if (gate_up_updated(g, u, x, n, out, scratch)) return gelu_mul(out, scratch, n * g.rows());
  fwd().geglu(g, u, x, n, out, scratch);
}

void LoraBackend::qkv_rope(const Weight* const* w, const float* const* b, Act x, int64_t n, const int32_t* pos,
                           const RopeParams& rope, const QkvShape& shape, const Act* out) {
  if (touches(*w[0]) || touches(*w[1]) || touches(*w[2]))
    return Backend::qkv_rope(w, b, x, n, pos, rope, shape, out);  // updated before the biases, norms and RoPE
  fwd().qkv_rope(w, b, x, n, pos, rope, shape, out);
}

void LoraBackend::embed(const Weight& t, const int32_t* tokens, int64_t n, Act out) {
  fwd().embed(t, tokens, n, out);
  if (t.name == "token_embd.weight") add_updates(t, Act(), tokens, n, out);
}

}  // namespace kestrel
