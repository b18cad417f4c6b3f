#include "model/ffn_blocks.h"

#include <fmt/format.h>

#include "ops/sigmoid_gate.h"


namespace kestrel {

FfnWeights load_ffn(const WeightLoader& ld, Backend& be, const std::string& p, const std::string& suffix, int64_t dim,
                    int64_t width, bool fused_gate_up, const TensorShard& shard) {
  const Weight down = be.prepare_weight(shard.columns(ld.require(p + "ffn_down" + suffix + ".weight", {width, dim})));
  if (fused_gate_up) {
    const Weight up = ld.require(p + "ffn_up" + suffix + ".weight", {dim, 2 * width});
    return {.gate = be.prepare_weight(shard.rows(weight_rows(up, 0, width, up.name + ".gate"))),
            .up = be.prepare_weight(shard.rows(weight_rows(up, width, width, up.name + ".up"))),
            .down = down};
  }
  return {.gate = be.prepare_weight(shard.rows(ld.require(p + "ffn_gate" + suffix + ".weight", {dim, width}))),
          .up = be.prepare_weight(shard.rows(ld.require(p + "ffn_up" + suffix + ".weight", {dim, width}))),
          .down = down};
}

MoeConfig split_moe_widths(const MoeConfig& moe, const TensorShard& shard) {
  MoeConfig local = moe;
  if (moe.routing.n_expert == 0) return local;
  local.n_ff_expert = shard.share(moe.n_ff_expert, "expert FFN rows");
  local.n_ff_shared = shard.share(moe.n_ff_shared, "shared-expert FFN rows");
  return local;
}

MoeWeights load_moe(const WeightLoader& ld, Backend& be, const std::string& p, int64_t dim, const MoeConfig& e,
                    const TensorShard& shard) {
  const int ne = e.routing.n_expert;
  MoeWeights m;
  m.router = be.prepare_weight(ld.require(p + "ffn_gate_inp.weight", {dim, ne}));
  m.router_bias = ld.optional_vector(p + "exp_probs_b.bias", ne);
  m.logit_bias = ld.optional_vector(p + "ffn_gate_inp.bias", ne);
  // Per-expert biases (gpt-oss), [n_expert][width]: gate and up split like their rows, down's added once
  // (by tensor rank 0: its output is summed over the ranks).
  auto expert_bias = [&](const char* name, int64_t width) {
    return ld.optional_floats(p + name, {width, ne});
  };
  const std::vector<float> gate_b = expert_bias("ffn_gate_exps.bias", e.n_ff_expert),
                           up_b = expert_bias("ffn_up_exps.bias", e.n_ff_expert),
                           down_b = expert_bias("ffn_down_exps.bias", dim);
  auto slice = [](const std::vector<float>& v, int x, int64_t width) {
    return v.empty() ? v : std::vector<float>(v.begin() + x * width, v.begin() + (x + 1) * width);
  };
  m.expert_scale = ld.optional_vector(p + "ffn_down_exps.scale", ne);
  const bool fused = ld.has(p + "ffn_gate_up_exps.weight");
  const Weight gate_up = fused ? ld.require(p + "ffn_gate_up_exps.weight", {dim, 2 * e.n_ff_expert, ne}) : Weight{};
  const Weight gate = fused ? Weight{} : ld.require(p + "ffn_gate_exps.weight", {dim, e.n_ff_expert, ne});
  const Weight up = fused ? Weight{} : ld.require(p + "ffn_up_exps.weight", {dim, e.n_ff_expert, ne});
  const Weight down = ld.require(p + "ffn_down_exps.weight", {e.n_ff_expert, dim, ne});
  if (ne % shard.ep != 0)
    throw Error(fmt::format("expert parallelism over {} groups: {} experts do not split evenly", shard.ep, ne));
  for (int x = 0; x < ne; x++) {
    const std::string tag = fmt::format(".{}", x);
    if (!shard.holds_expert(x, ne)) {  // another expert group's: left in the file, never read
      m.experts.emplace_back();
      continue;
    }
    auto expert = [&](Weight w) {
      w.routed_expert = true;
      return be.prepare_weight(std::move(w));
    };
    FfnWeights& f = m.experts.emplace_back();
    if (fused) {
      const Weight both = weight_slice(gate_up, x, gate_up.name + tag);
      f.gate = expert(shard.rows(weight_rows(both, 0, e.n_ff_expert, both.name + ".gate")));
      f.up = expert(shard.rows(weight_rows(both, e.n_ff_expert, e.n_ff_expert, both.name + ".up")));
    } else {
      f.gate = expert(shard.rows(weight_slice(gate, x, gate.name + tag)));
      f.up = expert(shard.rows(weight_slice(up, x, up.name + tag)));
    }
    f.gelu = e.expert_act == FfnActivation::Gelu;
    f.down = expert(shard.columns(weight_slice(down, x, down.name + tag)));
    if (!gate_b.empty()) f.gate_b = shard.part(slice(gate_b, x, e.n_ff_expert), 0, e.n_ff_expert);
    if (!up_b.empty()) f.up_b = shard.part(slice(up_b, x, e.n_ff_expert), 0, e.n_ff_expert);
    if (shard.rank == 0) f.down_b = slice(down_b, x, dim);
    if (e.swiglu_alpha > 0.0f) f.alpha = e.swiglu_alpha, f.clamp = e.swiglu_limit;
  }
  if (!shard.holds_shared_expert()) {
    for (const char* t : {"ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight", "ffn_gate_inp_shexp.weight"})
      if (ld.has(p + t)) ld.skip(p + t, "expert parallelism: the shared expert runs in expert group 0");
    return m;
  }
  if (e.n_ff_shared > 0) m.shared = load_ffn(ld, be, p, "_shexp", dim, e.n_ff_shared, false, shard);
  if (e.shared_gate) m.shared_gate = be.prepare_weight(ld.require(p + "ffn_gate_inp_shexp.weight", {dim}));
  return m;
}

void run_ffn(Backend& be, const FfnWeights& f, FfnActivation act, Act x, int64_t n, Act hb, Act hb2, Act out) {
  if (f.clamp > 0.0f) {
    be.matmul(f.gate, x, n, hb);
    be.matmul(f.up, x, n, hb2);
    be.swiglu_clamp(hb, hb2, n * f.gate.rows(), f.clamp);
  } else if (act == FfnActivation::Gelu)
    be.geglu(f.gate, f.up, x, n, hb, hb2);
  else
    be.swiglu(f.gate, f.up, x, n, hb, hb2);
  be.matmul(f.down, hb, n, out);
}

MoeFfn::MoeFfn(Backend& be, int64_t dim, const MoeConfig& moe, int64_t n) : dim_(dim), cfg_(moe) {
  const MoeRouting& rt = moe.routing;
  router_logits_ = ActBuffer(be, n * rt.n_expert);
  expert_ids_.resize(static_cast<size_t>(n * rt.n_used));
  expert_w_.resize(static_cast<size_t>(n * rt.n_used));
  routed_.resize(static_cast<size_t>(rt.n_expert));
  touched_.reserve(static_cast<size_t>(n));
  for (auto& v : routed_) v.reserve(static_cast<size_t>(n));
  // Every (token, chosen expert) pair's input and output rows.
  xe_ = ActBuffer(be, n * rt.n_used * dim);
  ye_ = ActBuffer(be, n * rt.n_used * dim);
  pick_rows_.reserve(static_cast<size_t>(n * rt.n_used));
  row_of_pick_.reserve(static_cast<size_t>(n * rt.n_used));
  sum_rows_.reserve(static_cast<size_t>(n * rt.n_used));
  sum_src_.reserve(static_cast<size_t>(n * rt.n_used));
  sum_w_.reserve(static_cast<size_t>(n * rt.n_used));
  if (moe.n_ff_shared > 0) {
    shared_out_ = ActBuffer(be, n * dim);
    hb_ = ActBuffer(be, n * moe.n_ff_shared);
    hb2_ = ActBuffer(be, n * moe.n_ff_shared);
  }
  if (moe.shared_gate) shared_gate_ = ActBuffer(be, n);
  ffn_refs_.reserve(static_cast<size_t>(rt.n_expert));
  ffn_in_.reserve(static_cast<size_t>(rt.n_expert));
  ffn_out_.reserve(static_cast<size_t>(rt.n_expert));
  ffn_rows_.reserve(static_cast<size_t>(rt.n_expert));
}

void MoeFfn::run(Backend& be, const MoeWeights& w, Act x, int64_t n, Act out, const int32_t* tokens,
                 Act router_in) {
  MoeRouting rt = cfg_.routing;
  const int64_t dim = dim_;
  if (!w.token_experts.empty()) {
    if (!tokens) throw Error("a hash-routed MoE layer needs the rows' token ids");
    forced_ids_.resize(static_cast<size_t>(n * rt.n_used));
    for (int64_t t = 0; t < n; t++)
      for (int k = 0; k < rt.n_used; k++)
        forced_ids_[t * rt.n_used + k] = w.token_experts[static_cast<size_t>(tokens[t]) * rt.n_used + k];
    rt.forced = forced_ids_.data();
  }
  be.matmul(w.router, router_in ? router_in : x, n, router_logits_);
  if (!w.logit_bias.empty()) be.add_bias(router_logits_, w.logit_bias.data(), n, rt.n_expert);
  be.moe_route(rt, router_logits_, w.router_bias.empty() ? nullptr : w.router_bias.data(), n, expert_ids_.data(),
               expert_w_.data());
  be.fill(out, n * dim, 0.0f);
  // Token lists per expert, in token order; each active expert's inputs
  // gathered into its own stretch of xe_, all experts run in one call.
  for (auto& v : routed_) v.clear();
  for (int64_t t = 0; t < n; t++)
    for (int k = 0; k < rt.n_used; k++) routed_[expert_ids_[t * rt.n_used + k]].push_back(t * rt.n_used + k);
  // Experts another rank holds (expert parallelism) add nothing here: their
  // share of the sum comes from that rank.
  for (int e = 0; e < rt.n_expert; e++)
    if (!w.experts[e].present()) routed_[e].clear();
  touched_.assign(static_cast<size_t>(n), w.shared.present() ? 1 : 0);
  ffn_refs_.clear();
  ffn_in_.clear();
  ffn_out_.clear();
  ffn_rows_.clear();
  pick_rows_.clear();
  row_of_pick_.assign(static_cast<size_t>(n * rt.n_used), -1);
  for (int e = 0; e < rt.n_expert; e++) {
    const auto& picks = routed_[e];
    if (picks.empty()) continue;
    const auto row = static_cast<int64_t>(pick_rows_.size());
    for (int64_t pick : picks) {
      row_of_pick_[static_cast<size_t>(pick)] = static_cast<int64_t>(pick_rows_.size());
      pick_rows_.push_back(pick / rt.n_used);
      touched_[static_cast<size_t>(pick / rt.n_used)] = 1;
    }
    ffn_refs_.push_back(w.experts[e].ref());
    ffn_in_.push_back(xe_ + row * dim);
    ffn_out_.push_back(ye_ + row * dim);
    ffn_rows_.push_back(static_cast<int64_t>(picks.size()));
  }
  const auto rows = static_cast<int64_t>(pick_rows_.size());
  be.gather_rows(xe_, x, pick_rows_.data(), rows, dim);
  if (cfg_.weight_input)  // Llama 4: each expert's input row times its weight, the outputs summed as they are
    for (int64_t p = 0; p < n * rt.n_used; p++)
      if (const int64_t r = row_of_pick_[static_cast<size_t>(p)]; r >= 0)
        be.scale(xe_ + r * dim, dim, expert_w_[static_cast<size_t>(p)]);
  be.annotate_subrows(pick_rows_.data(), rows);
  be.ffn_many(ffn_refs_.data(), static_cast<int>(ffn_refs_.size()), ffn_in_.data(), ffn_rows_.data(), ffn_out_.data());
  be.annotate_subrows(nullptr, 0);
  // Each token's experts summed best first (llama.cpp's build_moe_ffn: the rank views of the experts'
  // weighted outputs added in turn), not in the order the experts ran.
  sum_rows_.clear();
  sum_src_.clear();
  sum_w_.clear();
  for (int64_t p = 0; p < n * rt.n_used; p++) {
    const int64_t r = row_of_pick_[static_cast<size_t>(p)];
    if (r < 0) continue;
    sum_rows_.push_back(p / rt.n_used);
    sum_src_.push_back(r);
    const float scale = w.expert_scale.empty() ? 1.0f : w.expert_scale[expert_ids_[static_cast<size_t>(p)]];
    sum_w_.push_back((cfg_.weight_input ? 1.0f : expert_w_[static_cast<size_t>(p)]) * scale);
  }
  be.scatter_add_rows(out, ye_, sum_rows_.data(), sum_w_.data(), static_cast<int64_t>(sum_rows_.size()), dim,
                      sum_src_.data());
  if (!w.shared.present()) return;
  run_ffn(be, w.shared, FfnActivation::Silu, x, n, hb_, hb2_, shared_out_);
  if (w.shared_gate.present()) {
    // Qwen2-MoE: the shared expert's output times sigmoid(x . g), per token.
    be.matmul(w.shared_gate, x, n, shared_gate_);
    ops::sigmoid_gate(be, {shared_out_, shared_gate_, n * dim, dim});
  }
  be.add(out, shared_out_, n * dim);
}

}  // namespace kestrel
