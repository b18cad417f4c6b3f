#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/huge_page_arena.h"
#include "core/thread_pool.h"
#include "backend/backend.h"
#include "kernels/attention_dense.h"
#include "kernels/matmul.h"
#include "backend/operator.h"

namespace kestrel {
namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(int n_threads, const CpuBackendOptions& o) : options_(o), pool_(n_threads), matmul_(matmul_kernels()) {
    head_scratch_.reserve(pool_.size());
    for (int i = 0; i < pool_.size(); i++) head_scratch_.emplace_back(matmul_kernels());
  }

  // The level's name, and why the tile unit is idle where the CPU has one (refused permission, an OS without
  // the tile state, KESTREL_ISA): said in every run's and server's first line.
  std::string describe() const override {
    std::string amx;
    if (amx_state().present && matmul_.kernels().isa() != IsaLevel::Amx)
      amx = fmt::format("; AMX not used: {}", amx_state().usable ? "KESTREL_ISA lowers the level" : amx_state().detail);
    return fmt::format("cpu ({} threads, {} kernels{})", pool_.size(), isa_name(matmul_.kernels().isa()), amx);
  }
  int n_threads() const override { return pool_.size(); }

  // Repacked when the kernel table has a repacked entry for the type; a
  // weight whose type has no kernel at all is refused here, at load.
  Weight prepare_weight(Weight w) override {
    const MatmulKernels& k = matmul_.kernels();
    if (options_.repack_weights && k.repacks(w.type) && packable(w)) w.packed = pack_weight(w, &pool_, &packed_memory_);
    (void)k.of(w);
    return w;
  }

  void matmul(const Weight& w, Act x, int64_t n, Act y) override { matmul_.run(pool_, w, host(x), n, host(y)); }

  void matmul_many(const Weight* const* ws, int count, Act x, int64_t n, const Act* ys) override {
    bool shared = true;
    for (int i = 1; i < count; i++) shared = shared && Matmul::can_share_input(*ws[0], *ws[i]);
    if (!shared || count > kMaxMany) return Backend::matmul_many(ws, count, x, n, ys);
    float* out[kMaxMany];
    matmul_.run_many(pool_, ws, count, host(x), n, hosts(ys, count, out));
  }

  void swiglu(const Weight& gate, const Weight& up, Act x, int64_t n, Act out, Act scratch) override {
    if (fuses(gate, up))
      matmul_.run_swiglu(pool_, gate, up, host(x), n, host(out), host(scratch));
    else
      Backend::swiglu(gate, up, x, n, out, scratch);
  }

  void geglu(const Weight& gate, const Weight& up, Act x, int64_t n, Act out, Act scratch) override {
    if (fuses(gate, up))
      matmul_.run_swiglu(pool_, gate, up, host(x), n, host(out), host(scratch), Matmul::GateActivation::Gelu);
    else
      Backend::geglu(gate, up, x, n, out, scratch);
  }

  bool fuses(const Weight& a, const Weight& b) const override { return Matmul::can_share_input(a, b); }

  // One pass over the q, k and v rows in whole heads; each thread adds the
  // biases, normalises (Qwen3, Gemma 3) and rotates the heads it just
  // computed (the RoPE epilogue).
  void qkv_rope(const Weight* const* w, const float* const* biases, Act x, int64_t n, const int32_t* positions,
                const RopeParams& rope, const QkvShape& shape, const Act* out_acts) override {
    if (!fuses(*w[0], *w[1]) || !fuses(*w[0], *w[2])) {
      Backend::qkv_rope(w, biases, x, n, positions, rope, shape, out_acts);
      return;
    }
    const int hd = shape.head_dim;
    float* out[3];
    hosts(out_acts, 3, out);
    matmul_.run_many_then(pool_, w, 3, host(x), n, out, hd, [&](int i, int64_t r0, int64_t r1) {
      const int64_t rows = w[i]->rows();
      if (biases[i])
        for (int64_t t = 0; t < n; t++) add_inplace(out[i] + t * rows + r0, biases[i] + r0, r1 - r0);
      if (const float* norm = i == 0 ? shape.q_norm : i == 1 ? shape.k_norm : nullptr)
        for (int64_t t = 0; t < n; t++)
          for (int64_t h0 = r0; h0 < r1; h0 += hd) {
            float* head = out[i] + t * rows + h0;
            rmsnorm_rows(head, norm, head, 1, hd, shape.norm_eps);
          }
      if (i < 2)
        rope_heads(out[i], rows, positions, n, static_cast<int>(r0 / hd), static_cast<int>((r1 + hd - 1) / hd), hd,
                   rope);
    });
  }

  // Heads dealt out to the threads, each head's product on one thread: one
  // wake-up and barrier for all heads instead of one per head (MLA runs
  // this twice per layer over 16-128 heads).
  void matmul_heads(const Weight* ws, int n_heads, Act x_act, int64_t x_stride, int64_t x_head_stride, int64_t n,
                    Act y_act, int64_t y_stride, int64_t y_head_stride) override {
    const float* x = host(x_act);
    float* y = host(y_act);
    HeadScratch* scratch = head_scratch_.data();
    pool_.run([&](int ti, int nt) {
      HeadScratch& s = scratch[ti];
      for (int h = ti; h < n_heads; h += nt) {
        const int64_t cols = ws[h].cols(), rows = ws[h].rows();
        if (s.x.size() < static_cast<size_t>(n * cols)) s.x.resize(static_cast<size_t>(n * cols));
        if (s.y.size() < static_cast<size_t>(n * rows)) s.y.resize(static_cast<size_t>(n * rows));
        for (int64_t t = 0; t < n; t++) std::copy_n(x + t * x_stride + h * x_head_stride, cols, s.x.data() + t * cols);
        s.matmul.run(solo_, ws[h], s.x.data(), n, s.y.data());
        for (int64_t t = 0; t < n; t++) std::copy_n(s.y.data() + t * rows, rows, y + t * y_stride + h * y_head_stride);
      }
    });
  }

  // With at least as many FFNs as threads, each thread runs whole FFNs: one
  // wake-up and barrier for a MoE layer's experts instead of two per expert,
  // and each expert's weights stream on one core. The deal is fixed (largest
  // first, snaking over the threads) rather than first-come: the same batch
  // then gives every thread the same work, so its buffers never grow again
  // (no allocation after warm-up) and the results do not depend on timing.
  void ffn_many(const FfnRef* ffns, int count, const Act* xs, const int64_t* ns, const Act* ys) override {
    if (count < pool_.size()) {
      Backend::ffn_many(ffns, count, xs, ns, ys);
      return;
    }
    if (ffn_order_.size() < static_cast<size_t>(count)) ffn_order_.resize(static_cast<size_t>(count));
    int* order = ffn_order_.data();
    for (int i = 0; i < count; i++) order[i] = i;
    // Largest first, ties in index order (insertion sort: std::stable_sort may allocate).
    for (int a = 1; a < count; a++)
      for (int b = a; b > 0 && ns[order[b]] > ns[order[b - 1]]; b--) std::swap(order[b], order[b - 1]);
    HeadScratch* scratch = head_scratch_.data();
    pool_.run([&](int ti, int nt) {
      HeadScratch& s = scratch[ti];
      for (int k = 0; k < count; k++) {
        const int round = k / nt, slot = k % nt;
        if ((round % 2 == 0 ? slot : nt - 1 - slot) != ti) continue;
        const int i = order[k];
        const auto need = static_cast<size_t>(ns[i] * ffns[i].gate->rows());
        if (s.x.size() < need) s.x.resize(need);
        if (s.y.size() < need) s.y.resize(need);
        if (!ffns[i].plain()) {
          s.matmul.run(solo_, *ffns[i].gate, host(xs[i]), ns[i], s.x.data());
          s.matmul.run(solo_, *ffns[i].up, host(xs[i]), ns[i], s.y.data());
          ffns[i].activate(s.x.data(), s.y.data(), ns[i]);
        } else if (Matmul::can_share_input(*ffns[i].gate, *ffns[i].up)) {
          s.matmul.run_swiglu(solo_, *ffns[i].gate, *ffns[i].up, host(xs[i]), ns[i], s.x.data(), s.y.data());
        } else {
          s.matmul.run(solo_, *ffns[i].gate, host(xs[i]), ns[i], s.x.data());
          s.matmul.run(solo_, *ffns[i].up, host(xs[i]), ns[i], s.y.data());
          kestrel::silu_mul(s.x.data(), s.y.data(), static_cast<int64_t>(need));
        }
        s.matmul.run(solo_, *ffns[i].down, s.x.data(), ns[i], host(ys[i]));
        ffns[i].finish(host(ys[i]), ns[i]);
      }
    });
  }

  void embed(const Weight& table, const int32_t* tokens, int64_t n, Act out_act) override {
    float* out = host(out_act);
    for (int64_t i = 0; i < n; i++) dequantize_weight_row(table, tokens[i], out + i * table.cols());
  }

  void rmsnorm(Act x_act, const float* w, Act y_act, int64_t n_rows, int64_t dim, float eps) override {
    const float* x = host(x_act);
    float* y = host(y_act);
    pool_.parallel_for(n_rows,
                       [&](int64_t r0, int64_t r1) { rmsnorm_rows(x + r0 * dim, w, y + r0 * dim, r1 - r0, dim, eps); });
  }

  void rope(Act x_act, const int32_t* positions, int64_t n_rows, int n_heads, int head_dim,
            const RopeParams& p) override {
    float* x = host(x_act);
    pool_.parallel_for(n_rows, [&](int64_t r0, int64_t r1) {
      rope_rows(x + r0 * n_heads * head_dim, positions + r0, r1 - r0, n_heads, head_dim, p);
    });
  }

  void attention(const PagedKvLayerView& kv, const AttentionRows& rows, const AttentionShape& shape) override {
    attention_paged(pool_, kv, host_rows(rows), shape);
  }

  // Many queries seeing every key (a vision tower's patches): by GEMMs (kernels/attention_dense.h), else paged.
  void attention_dense(Act k, Act v, int64_t k_width, int64_t v_width, int64_t len, const AttentionRows& rows,
                       const AttentionShape& shape) override {
    if (!attention_dense_gemm(pool_, host(k), host(v), k_width, v_width, len, host_rows(rows), shape))
      Backend::attention_dense(k, v, k_width, v_width, len, rows, shape);
  }

  void gather_kv_rows(const PagedKvLayerView& view, const int32_t* table, const int32_t* positions, int64_t count,
                      int64_t k_width, Act dst_act) override {
    float* dst = host(dst_act);
    pool_.parallel_for(count, [&](int64_t i0, int64_t i1) { copy_kv_rows(view, table, positions, i0, i1, k_width, dst); });
  }

  // A named operator's host kernel on this backend's threads.
  void run(const Operator& op, const void* args) override { op.run_host(OpContext(pool_), args); }

  void silu_mul(Act gate_act, Act up_act, int64_t n) override {
    float* gate = host(gate_act);
    const float* up = host(up_act);
    pool_.parallel_for(n, [&](int64_t a, int64_t b) { kestrel::silu_mul(gate + a, up + a, b - a); });
  }

  void gelu_mul(Act gate_act, Act up_act, int64_t n) override {
    float* gate = host(gate_act);
    const float* up = host(up_act);
    pool_.parallel_for(n, [&](int64_t a, int64_t b) { kestrel::gelu_mul(gate + a, up + a, b - a); });
  }

  void softcap(Act x_act, int64_t n, float cap) override {
    float* x = host(x_act);
    pool_.parallel_for(n, [&](int64_t a, int64_t b) { softcap_inplace(x + a, b - a, cap); });
  }

  void add(Act x, Act y, int64_t n) override { add_inplace(host(x), host(y), n); }

  void add_bias(Act x, const float* bias, int64_t n_rows, int64_t dim) override {
    add_bias_rows(host(x), bias, n_rows, dim);
  }

 private:
  static constexpr int kMaxMany = 8;  // Matmul::run_many's most weights sharing an input
  static float* const* hosts(const Act* acts, int count, float** out) {
    for (int i = 0; i < count; i++) out[i] = host(acts[i]);
    return out;
  }

  struct HeadScratch {
    explicit HeadScratch(const MatmulKernels& k) : matmul(k) {}
    Matmul matmul;  // its own activation buffers: threads run different heads at once
    std::vector<float> x, y;
  };

  CpuBackendOptions options_;
  ThreadPool pool_;
  ThreadPool solo_{1};  // runs a job inline on the calling thread (no state: shared by all)
  Matmul matmul_;
  std::vector<HeadScratch> head_scratch_;
  std::vector<int> ffn_order_;
  HugePageArena packed_memory_;  // repacked weights end to end in huge pages
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads, const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(n_threads, options);
}

}  // namespace kestrel
