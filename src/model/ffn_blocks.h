#pragma once
// The feed-forward halves of a decoder layer that several architectures
// share: a gated FFN (SwiGLU or GeGLU) and a mixture of experts (routed
// experts, each run once over the tokens routed to it, all active experts in
// one backend call; optional shared experts, optionally gated).
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"
#include "model/weight_loader.h"

namespace kestrel {

struct FfnWeights {
  Weight gate, up, down;
  float clamp = 0.0f;  // > 0: SwiGLU clamped at this limit (DeepSeek-V4, ops.h swiglu_clamp)
  float alpha = 0.0f;  // > 0: gpt-oss's SwiGLU (ops.h swiglu_oai) at limit clamp
  std::vector<float> gate_b{}, up_b{}, down_b{};  // gpt-oss's experts' biases; empty: none
  bool gelu = false;  // a routed expert's GeGLU (Gemma 4; a dense FFN's activation is its caller's)
  bool present() const { return gate.present(); }
  Backend::FfnRef ref() const {
    auto p = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
    return {&gate, &up, &down, clamp, p(gate_b), p(up_b), p(down_b), alpha, gelu};
  }
};

struct MoeWeights {
  Weight router;                   // ffn_gate_inp: [n_expert rows]
  std::vector<float> router_bias;  // exp_probs_b (DeepSeek-V3): selection only; may be empty
  std::vector<float> logit_bias;   // ffn_gate_inp.bias (gpt-oss): added to the router's logits; may be empty
  std::vector<float> expert_scale;  // ffn_down_exps.scale (Gemma 4): each expert's output times its own; may be empty
  std::vector<FfnWeights> experts;
  FfnWeights shared;               // ffn_*_shexp; absent when the model has no shared expert
  Weight shared_gate;              // ffn_gate_inp_shexp (Qwen2-MoE): one row
  // DeepSeek-V4's hash-routed layers (ffn_gate_tid2eid): each token's n_used experts, per vocabulary id;
  // empty: routed by score.
  std::vector<int32_t> token_experts;
  bool present() const { return !experts.empty(); }
  // The first expert this rank holds (all are held without expert parallelism).
  const FfnWeights* first_held() const {
    for (const FfnWeights& e : experts)
      if (e.present()) return &e;
    return nullptr;
  }
};

// `{prefix}ffn_{gate,up,down}{suffix}.weight`, width rows wide; with
// fused_gate_up (Phi-3) the gate and up rows are the two halves of ffn_up.
// Under tensor parallelism, this rank's share of the width: gate and up
// rows, down columns (its output is then a partial sum).
FfnWeights load_ffn(const WeightLoader& ld, Backend& be, const std::string& prefix, const std::string& suffix,
                    int64_t dim, int64_t width, bool fused_gate_up = false, const TensorShard& shard = {});

// The widths this rank runs of an MoE layer under tensor parallelism (each
// expert's and the shared expert's FFN rows split over the group).
MoeConfig split_moe_widths(const MoeConfig& moe, const TensorShard& shard);

// Router, experts (3-D ffn_*_exps sliced per expert; gate and up as the halves of one ffn_gate_up_exps where
// the file fuses them, Gemma 4), the per-expert output scales (ffn_down_exps.scale), the selection bias
// when the file has one (and the router's and experts' biases: gpt-oss), and the shared expert(s) the config asks for. moe
// gives the file's widths; under tensor parallelism every expert keeps this
// rank's share of its width (the router is whole on every rank); under expert
// parallelism only this rank's group's experts are loaded (the others are
// absent: MoeFfn::run skips them) and the shared expert only in group 0.
MoeWeights load_moe(const WeightLoader& ld, Backend& be, const std::string& prefix, int64_t dim, const MoeConfig& moe,
                    const TensorShard& shard = {});

// out[n][dim] = down . act(gate . x) * (up . x); hb, hb2 hold n * width floats.
void run_ffn(Backend& be, const FfnWeights& f, FfnActivation act, Act x, int64_t n, Act hb, Act hb2, Act out);

// Scratch for one MoE layer at the largest batch, allocated once. The
// routing (which experts each token chose, with what weight) comes back to
// the host, which groups the tokens by expert; the rows themselves stay in
// the backend's buffers (gathered per expert, summed back weighted).
class MoeFfn {
 public:
  // moe: the widths this rank runs (its share under tensor parallelism).
  MoeFfn(Backend& be, int64_t dim, const MoeConfig& moe, int64_t max_tokens);
  // out[n][dim] = sum over chosen experts k of w_k * expert_k(x) (+ shared). tokens: the rows' token ids,
  // which hash-routed layers (w.token_experts) route by. router_in: the rows the router reads when they are
  // not x (Gemma 4 routes on its own norm of the residual stream); empty: x.
  void run(Backend& be, const MoeWeights& w, Act x, int64_t n, Act out, const int32_t* tokens = nullptr,
           Act router_in = {});
  // After run: touched()[t] != 0 where this rank added anything to row t
  // (the others are zero: under expert parallelism, another rank's experts).
  const uint8_t* touched() const { return touched_.data(); }

 private:
  int64_t dim_;
  MoeConfig cfg_;
  ActBuffer router_logits_, xe_, ye_, shared_out_, shared_gate_, hb_, hb2_;
  std::vector<float> expert_w_;
  std::vector<int32_t> expert_ids_, forced_ids_;
  std::vector<uint8_t> touched_;
  std::vector<std::vector<int64_t>> routed_;
  std::vector<int64_t> pick_rows_;  // per routed row, in expert order: its token
  // The weighted sum in llama.cpp's order, token by token, rank by rank: each pick's row of ye_ (-1: another
  // rank's expert), then the (token, row, weight) triples in that order.
  std::vector<int64_t> row_of_pick_, sum_rows_, sum_src_;
  std::vector<float> sum_w_;
  std::vector<Backend::FfnRef> ffn_refs_;
  std::vector<Act> ffn_in_, ffn_out_;
  std::vector<int64_t> ffn_rows_;
};

}  // namespace kestrel
