#pragma once
// Gated DeltaNet, the linear attention of Qwen3-Next and Qwen3.5 (model/arch/qwen35_layer.cpp): per
// sequence a fixed-size recurrent state — the last d_conv - 1 inputs of a causal depthwise convolution and,
// per value head, a head_dim x head_dim matrix S — advanced one token at a time. For token t:
//
//   x_t  = silu(conv1d([conv state | qkv_t]))          q, k, v split from x_t (q and k: n_k_heads heads)
//   q, k = L2-normalised per head                       (x / sqrt(sum x^2 + eps))
//   g    = softplus(alpha_t + dt_bias) * a              (a = -exp(A_log), the converter's ssm_a)
//   b    = sigmoid(beta_t)
//   S    = exp(g) S;   S += k (b (v - S^T k))^T;   o_t = S^T q / sqrt(head_dim)
//
// per value head h, which reads key head h % n_k_heads (Qwen3.5's converter orders the value heads so) or
// h / (n_v_heads / n_k_heads) (Qwen3-Next's: repeat-interleaved). This is llama.cpp's ggml_ssm_conv +
// ggml_gated_delta_net (its fused form), in its order of operations; S is stored transposed as llama.cpp
// stores it (row j holds column j of S).
//
// The same recurrence in chunks (gated_delta_net_chunked): a chunk of C tokens as matrix products — the
// in-chunk triangular solve (I + strict_tril(b k k^T . decay))^-1, then one state update per chunk — the
// form prefill takes on matrix units. Both give the same result up to rounding (tests/unit/test_gated_delta_net).
//
// The operator (ops::gated_delta_net, a named operator: backend/operator.h) runs one layer's core over a
// step's sequences: the convolution over channels, the gates over rows, the recurrence over (sequence, value
// head) pairs on the backend's threads; a sequence of at least 64 rows (prefill) takes the chunked form.
#include <cstdint>

#include "backend/operator.h"

namespace kestrel {

struct GdnShape {
  int d_conv = 0;     // the convolution's taps (ssm.conv_kernel)
  int n_k_heads = 0;  // ssm.group_count
  int n_v_heads = 0;  // ssm.time_step_rank
  int head_dim = 0;   // ssm.state_size (keys and values alike)
  bool interleaved = false;  // value head h reads key head h / (n_v / n_k) (Qwen3-Next); else h % n_k
  float eps = 1e-6f;         // the L2 norm's (the model's RMSNorm epsilon)

  int64_t key_dim() const { return static_cast<int64_t>(n_k_heads) * head_dim; }
  int64_t value_dim() const { return static_cast<int64_t>(n_v_heads) * head_dim; }
  int64_t channels() const { return 2 * key_dim() + value_dim(); }  // q | k | v rows of the convolution
  int64_t conv_state() const { return (d_conv - 1) * channels(); }
  int64_t ssm_state() const { return value_dim() * head_dim; }
  int64_t state_floats() const { return conv_state() + ssm_state(); }
  int key_head(int v_head) const {
    return interleaved ? v_head / (n_v_heads / n_k_heads) : v_head % n_k_heads;
  }
};

// The layer's constants, host floats: the convolution's weights [channels][d_conv], dt_bias and a [n_v_heads].
struct GdnParams {
  const float* conv_w = nullptr;
  const float* dt_bias = nullptr;
  const float* a = nullptr;
};

// One sequence's rows of a step: rows [r0, r0 + n) of the buffers, in position order, and its state
// (conv_state() floats, then ssm_state() floats), which the call advances past them.
struct GdnSequence {
  int64_t r0 = 0, n = 0;
  float* state = nullptr;
};

// Stage 1, channels [c0, c1) of one sequence: qkv rows (channels() floats each) replaced by
// silu(conv1d) in place, the convolution state advanced.
void gdn_conv(const GdnShape& s, const GdnParams& p, float* qkv, int64_t n, float* conv_state, int64_t c0, int64_t c1);
// Stage 2, rows [r0, r1): q and k heads L2-normalised in place; alpha becomes the log-decay g and beta
// sigmoid(beta) (n_v_heads floats per row each).
void gdn_gates(const GdnShape& s, const GdnParams& p, float* qkv, float* alpha, float* beta, int64_t r0, int64_t r1);
// Stage 3, value head h of one sequence: the recurrence over its n rows, out rows value_dim() floats.
void gdn_recur(const GdnShape& s, const float* qkv, const float* g, const float* beta, int64_t n, float* ssm_state,
               int h, float* out);
// The same recurrence in chunks of `chunk` tokens (matrix products within a chunk); scratch holds
// gdn_chunk_scratch(s, chunk) floats.
void gdn_recur_chunked(const GdnShape& s, const float* qkv, const float* g, const float* beta, int64_t n,
                       float* ssm_state, int h, float* out, int chunk, float* scratch);
int64_t gdn_chunk_scratch(const GdnShape& s, int chunk);

namespace ops {
// One Gated DeltaNet layer's core over a step's sequences (each its own rows, in order, and its state, which
// the call advances): qkv rows (channels() floats: the projections before the convolution) become
// silu(conv1d) with q and k L2-normalised, alpha rows the log-decays and beta rows the gates, in place; out
// rows (value_dim() floats) the recurrence's outputs.
struct GatedDeltaNetArgs {
  GdnShape shape;
  GdnParams params;
  Act qkv, alpha, beta;
  const GdnSequence* seqs = nullptr;
  int n_seqs = 0;
  Act out;
};
extern const Op<GatedDeltaNetArgs> gated_delta_net;
}  // namespace ops

}  // namespace kestrel
