#include "ops/gated_delta_net.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/dot.h"

namespace kestrel {
namespace {

// The process's SIMD dot and axpy (kernels/dot.h): a plain loop's float sum does not vectorise (its order is
// fixed), and this file is built for the baseline ISA.
float dot(const float* a, const float* b, int64_t n) {
  static const auto kernel = dot_kernels().dot_f32;
  return kernel(a, b, n);
}
void axpy(float* y, float a, const float* x, int64_t n) {  // y += a x
  static const auto kernel = dot_kernels().axpy_f32;
  kernel(y, a, x, n);
}

// llama.cpp's build_gdn_l2_norm: rms_norm(x, eps / n) / sqrt(n), the sum in double as ggml_rms_norm takes it.
void l2_normalize(float* x, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) sum += static_cast<double>(x[i]) * x[i];
  const auto nf = static_cast<float>(n);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps / nf);
  const float rs = 1.0f / std::sqrt(nf);
  for (int64_t i = 0; i < n; i++) x[i] = x[i] * scale * rs;
}

float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

}  // namespace

void gdn_conv(const GdnShape& s, const GdnParams& p, float* qkv, int64_t n, float* conv_state, int64_t c0,
              int64_t c1) {
  const int64_t ch = s.channels();
  const int taps = s.d_conv;
  float win[16];  // the last taps - 1 inputs, then the new one (conv kernels are 4 wide; checked at load)
  for (int64_t c = c0; c < c1; c++) {
    float* st = conv_state + c * (taps - 1);
    const float* w = p.conv_w + c * taps;
    std::copy_n(st, taps - 1, win);
    for (int64_t t = 0; t < n; t++) {
      float& x = qkv[t * ch + c];
      win[taps - 1] = x;
      float sum = 0.0f;
      for (int i = 0; i < taps; i++) sum += win[i] * w[i];
      std::copy_n(win + 1, taps - 1, win);
      x = sum / (1.0f + std::exp(-sum));  // silu
    }
    std::copy_n(win, taps - 1, st);
  }
}

void gdn_gates(const GdnShape& s, const GdnParams& p, float* qkv, float* alpha, float* beta, int64_t r0, int64_t r1) {
  const int64_t ch = s.channels(), hd = s.head_dim;
  for (int64_t t = r0; t < r1; t++) {
    float* row = qkv + t * ch;
    for (int64_t h = 0; h < 2LL * s.n_k_heads; h++) l2_normalize(row + h * hd, hd, s.eps);
    for (int h = 0; h < s.n_v_heads; h++) {
      float& a = alpha[t * s.n_v_heads + h];
      a = softplus(a + p.dt_bias[h]) * p.a[h];
      float& b = beta[t * s.n_v_heads + h];
      b = 1.0f / (1.0f + std::exp(-b));
    }
  }
}

void gdn_recur(const GdnShape& s, const float* qkv, const float* g, const float* beta, int64_t n, float* ssm_state,
               int h, float* out) {
  const int64_t ch = s.channels(), hd = s.head_dim;
  const int64_t kh = s.key_head(h);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float* m = ssm_state + h * hd * hd;  // row j: column j of S
  float delta[512];                    // head sizes up to 512 (checked at load)
  for (int64_t t = 0; t < n; t++) {
    const float* row = qkv + t * ch;
    const float* q = row + kh * hd;
    const float* k = row + s.key_dim() + kh * hd;
    const float* v = row + 2 * s.key_dim() + h * hd;
    const float decay = std::exp(g[t * s.n_v_heads + h]);
    const float b = beta[t * s.n_v_heads + h];
    for (int64_t i = 0; i < hd * hd; i++) m[i] *= decay;
    for (int64_t j = 0; j < hd; j++) delta[j] = (v[j] - dot(m + j * hd, k, hd)) * b;
    for (int64_t j = 0; j < hd; j++) axpy(m + j * hd, delta[j], k, hd);
    float* o = out + t * s.value_dim() + h * hd;
    for (int64_t j = 0; j < hd; j++) o[j] = dot(m + j * hd, q, hd) * scale;
  }
}

int64_t gdn_chunk_scratch(const GdnShape& s, int chunk) {
  const int64_t c = chunk, hd = s.head_dim;
  return 3 * c * c + 2 * c * hd + 2 * c;  // kk, qk, a | u, w | gamma, decay
}

// Within a chunk of c tokens from state S0 (M = S0^T), with gamma the cumulative log-decays:
//   U  = (I + A)^-1 (b V - b e^gamma (K S0)),  A[t][i] = b_t e^(gamma_t - gamma_i) k_t.k_i  (i < t)
//   O  = e^gamma (Q S0) + (QK^T o D) U,        D[t][i] = e^(gamma_t - gamma_i)             (i <= t)
//   S  = e^gamma_C S0 + K^T diag(e^(gamma_C - gamma)) U
// which is the recurrence unrolled: u_t = b_t (v_t - S_{t-1}'^T k_t) is the delta each token adds.
void gdn_recur_chunked(const GdnShape& s, const float* qkv, const float* g, const float* beta, int64_t n,
                       float* ssm_state, int h, float* out, int chunk, float* scratch) {
  const int64_t ch = s.channels(), hd = s.head_dim, kh = s.key_head(h);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float* m = ssm_state + h * hd * hd;
  const int64_t C = chunk;
  float* kk = scratch;         // [C][C]
  float* qk = kk + C * C;      // [C][C]
  float* u = qk + C * C;       // [C][hd]
  float* w = u + C * hd;       // [C][hd]: K S0, then Q S0
  float* gam = w + C * hd;     // [C]
  float* eg = gam + C;         // [C]
  for (int64_t c0 = 0; c0 < n; c0 += C) {
    const int64_t c = std::min(C, n - c0);
    auto q = [&](int64_t t) { return qkv + (c0 + t) * ch + kh * hd; };
    auto k = [&](int64_t t) { return qkv + (c0 + t) * ch + s.key_dim() + kh * hd; };
    auto v = [&](int64_t t) { return qkv + (c0 + t) * ch + 2 * s.key_dim() + h * hd; };
    auto bt = [&](int64_t t) { return beta[(c0 + t) * s.n_v_heads + h]; };
    float acc = 0.0f;
    for (int64_t t = 0; t < c; t++) {
      acc += g[(c0 + t) * s.n_v_heads + h];
      gam[t] = acc;
      eg[t] = std::exp(acc);
    }
    for (int64_t t = 0; t < c; t++)
      for (int64_t i = 0; i <= t; i++) {
        const float d = std::exp(gam[t] - gam[i]);
        kk[t * C + i] = i < t ? bt(t) * d * dot(k(t), k(i), hd) : 0.0f;
        qk[t * C + i] = d * dot(q(t), k(i), hd);
      }
    // u_t = b_t v_t - b_t e^gamma_t (M k_t) - sum_{i<t} A[t][i] u_i
    for (int64_t t = 0; t < c; t++) {
      float* ut = u + t * hd;
      const float* kt = k(t);
      const float* vt = v(t);
      const float bb = bt(t), be = bt(t) * eg[t];
      for (int64_t j = 0; j < hd; j++) ut[j] = bb * vt[j] - be * dot(m + j * hd, kt, hd);
      for (int64_t i = 0; i < t; i++) axpy(ut, -kk[t * C + i], u + i * hd, hd);
    }
    // o_t = e^gamma_t (M q_t) + sum_{i<=t} QK[t][i] u_i
    for (int64_t t = 0; t < c; t++) {
      float* o = out + (c0 + t) * s.value_dim() + h * hd;
      const float* qt = q(t);
      for (int64_t j = 0; j < hd; j++) w[j] = eg[t] * dot(m + j * hd, qt, hd);
      for (int64_t i = 0; i <= t; i++) axpy(w, qk[t * C + i], u + i * hd, hd);
      for (int64_t j = 0; j < hd; j++) o[j] = w[j] * scale;
    }
    // M = e^gamma_C M + sum_t e^(gamma_C - gamma_t) u_t k_t^T
    const float last = gam[c - 1];
    for (int64_t i = 0; i < hd * hd; i++) m[i] *= eg[c - 1];
    for (int64_t t = 0; t < c; t++) {
      const float d = std::exp(last - gam[t]);
      const float* kt = k(t);
      const float* ut = u + t * hd;
      for (int64_t j = 0; j < hd; j++) axpy(m + j * hd, ut[j] * d, kt, hd);
    }
  }
}

namespace ops {
namespace {

// Tokens per chunk of the chunked form, and the fewest rows a sequence runs it for.
constexpr int kChunk = 64;
constexpr int64_t kChunkRows = 64;

void run_host(const OpContext& c, const GatedDeltaNetArgs& a) {
  const GdnShape& s = a.shape;
  float* qkv = OpContext::host(a.qkv);
  float* alpha = OpContext::host(a.alpha);
  float* beta = OpContext::host(a.beta);
  float* out = OpContext::host(a.out);
  const int64_t ch = s.channels();
  ThreadPool& pool = c.pool();
  for (int i = 0; i < a.n_seqs; i++) {
    const GdnSequence& q = a.seqs[i];
    pool.parallel_for(ch, [&](int64_t c0, int64_t c1) { gdn_conv(s, a.params, qkv + q.r0 * ch, q.n, q.state, c0, c1); });
    pool.parallel_for(q.n, [&](int64_t r0, int64_t r1) { gdn_gates(s, a.params, qkv, alpha, beta, q.r0 + r0, q.r0 + r1); });
  }
  const int64_t scratch = gdn_chunk_scratch(s, kChunk);
  pool.run([&](int ti, int nt) {
    thread_local std::vector<float> buf;  // the chunked form's scratch, per thread
    for (int64_t w = ti; w < static_cast<int64_t>(a.n_seqs) * s.n_v_heads; w += nt) {
      const GdnSequence& q = a.seqs[w / s.n_v_heads];
      const int h = static_cast<int>(w % s.n_v_heads);
      const float* rows = qkv + q.r0 * ch;
      const float* g = alpha + q.r0 * s.n_v_heads;
      const float* b = beta + q.r0 * s.n_v_heads;
      float* o = out + q.r0 * s.value_dim();
      if (q.n >= kChunkRows) {
        if (buf.size() < static_cast<size_t>(scratch)) buf.resize(static_cast<size_t>(scratch));
        gdn_recur_chunked(s, rows, g, b, q.n, q.state + s.conv_state(), h, o, kChunk, buf.data());
      } else {
        gdn_recur(s, rows, g, b, q.n, q.state + s.conv_state(), h, o);
      }
    }
  });
}

OpCost cost(const GatedDeltaNetArgs& a) {
  int64_t rows = 0;
  for (int i = 0; i < a.n_seqs; i++) rows += a.seqs[i].n;
  const double state = 8.0 * static_cast<double>(a.n_seqs) * static_cast<double>(a.shape.state_floats());
  return {8.0 * static_cast<double>(rows) * static_cast<double>(a.shape.channels()) + state,
          6.0 * static_cast<double>(rows) * static_cast<double>(a.shape.ssm_state())};
}

}  // namespace

const Op<GatedDeltaNetArgs> gated_delta_net("gated_delta_net", run_host, cost);

}  // namespace ops
}  // namespace kestrel
