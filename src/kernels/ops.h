#pragma once
// Element-wise and row-wise operators on float32 activations (scalar; they are
// a small share of the time next to the matmuls).
#include <cstdint>

namespace kestrel {

// y = x / rms(x) * w for each of n_rows rows of length dim.
void rmsnorm_rows(const float* x, const float* w, float* y, int64_t n_rows, int64_t dim, float eps);
// In place, the orthonormal Walsh-Hadamard transform of n values (n a power of two; Sylvester's order, the
// matrix llama.cpp builds for its attention rotations); its own inverse.
void walsh_hadamard(float* x, int n);
// y = (x - mean) / sqrt(var + eps) * w + b per row (ggml_norm, then the weight and the bias; b may be null).
void layernorm_rows(const float* x, const float* w, const float* b, float* y, int64_t n_rows, int64_t dim, float eps);
// gate[i] = silu(gate[i]) * up[i]
void silu_mul(float* gate, const float* up, int64_t n);
// gate[i] = silu(min(gate[i], limit)) * clamp(up[i], -limit, limit): the clamped SwiGLU of DeepSeek-V4's
// experts (ggml_swiglu_clamp).
void swiglu_clamp(float* gate, const float* up, int64_t n, float limit);
// gpt-oss's SwiGLU (ggml_swiglu_oai): with g = min(gate[i], limit), u = clamp(up[i], -limit, limit),
// gate[i] = g * sigmoid(alpha * g) * (u + 1).
void swiglu_oai(float* gate, const float* up, int64_t n, float alpha, float limit);
// gate[i] = gelu(gate[i]) * up[i], GELU in its tanh form evaluated as ggml's
// CPU backend does (the input rounded to fp16, the result read from an fp16
// table; inputs beyond +-10 taken as 0 or x), so Gemma matches llama.cpp.
void gelu_mul(float* gate, const float* up, int64_t n);
// That table: gelu(x) of every fp16 bit pattern x, as fp16 (65536 entries; a device backend uploads it).
const uint16_t* gelu_fp16_table();
// x[i] = cap * tanh(x[i] / cap): Gemma 2's final logit soft-cap.
void softcap_inplace(float* x, int64_t n, float cap);
// The index of the largest of x[0, n): the first of equal ones (a NaN is never larger; x[0] a NaN: 0).
int32_t argmax(const float* x, int64_t n);
// The k largest of x[0, n) (k <= n), ordered by value descending, ties by index ascending (NaNs left out):
// their indices and values, best first.
void top_k(const float* x, int64_t n, int k, int32_t* ids, float* vals);
void scale_inplace(float* x, int64_t n, float s);
void add_inplace(float* x, const float* y, int64_t n);
void add_bias_rows(float* x, const float* bias, int64_t n_rows, int64_t dim);

enum class RopeStyle {
  Adjacent,  // rotate (x[2i], x[2i+1]) - llama.cpp "norm", llama2.c
  NeoX,      // rotate (x[i], x[i + n_rot/2]) - GPT-NeoX, Qwen2
};

struct RopeParams {
  RopeStyle style = RopeStyle::Adjacent;
  int n_rot = 0;             // rotated dimensions per head (<= head_dim)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;   // linear scaling: position * freq_scale
  // YaRN (ext_factor > 0), as ggml's rope_yarn: pair i keeps its original
  // frequency below corr_low, is interpolated by freq_scale above corr_high,
  // and mixes the two on a linear ramp between; cos and sin are scaled by
  // attn_factor * (1 + 0.1 ln(1 / freq_scale)). attn_factor scales them always.
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float corr_low = 0.0f, corr_high = 0.0f;
  // Per-pair frequency divisors (n_rot / 2 floats, or null): Llama 3's
  // `rope_freqs.weight`, Phi-3's LongRoPE `rope_factors_{short,long}`. Pair i
  // turns at pos * base^(-2i/n_rot) / freq_factors[i], as ggml's rope does.
  const float* freq_factors = nullptr;
  // Rotates by -theta instead (ggml's rope_back: DeepSeek-V4 takes the rotation back out of its attention output).
  bool inverse = false;
};

// Sets YaRN's ramp for a model trained on n_ctx_orig positions (ggml's
// ggml_rope_yarn_corr_dims: the pairs that turn fewer than beta_fast /
// more than beta_slow times over the original context) and ext_factor 1.
void set_yarn(RopeParams& p, int64_t n_ctx_orig, float beta_fast = 32.0f, float beta_slow = 1.0f);

// The rotation of pair i at position pos: its cosine and sine, scaled (YaRN's mscale, attn_factor) and
// negated for an inverse rotation, as rope_heads applies them (a device backend's RoPE takes these from the host).
// mscale: rope_mscale(p), the scale of cos and sin (attn_factor, and YaRN's), worked out once per call.
float rope_mscale(const RopeParams& p);
void rope_cos_sin(const RopeParams& p, float mscale, float pos, int i, float* c, float* s);
// Rotates the first n_rot dims of each head, in place, for row r at positions[r].
void rope_rows(float* x, const int32_t* positions, int64_t n_rows, int n_heads, int head_dim, const RopeParams& p);
// The same for heads [h0, h1) only, rows row_stride floats apart.
void rope_heads(float* x, int64_t row_stride, const int32_t* positions, int64_t n_rows, int h0, int h1, int head_dim,
                const RopeParams& p);

}  // namespace kestrel
