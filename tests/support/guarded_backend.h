#pragma once
// A test backend that owns its activation buffers and fails on any host
// access to them between operators: each buffer is its own mapping, kept
// PROT_NONE except while one of this backend's operators runs (the CPU
// backend inside then reads and writes it). A model that touched activation
// memory itself — a memcpy, a loop over a float* — would fault, and the
// fault handler names it. Running a model on it is the proof that the model
// code goes through operators only, so that a device backend plugs in
// without changing it. Caller memory handed over as a host_view (logits,
// hidden states) is the caller's and is not guarded; map() (host memory for
// MPI) is refused.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "core/error.h"
#include "backend/forwarding_backend.h"

namespace kestrel::test {

class GuardedBackend final : public ForwardingBackend {
 public:
  explicit GuardedBackend(Backend& inner) : ForwardingBackend(inner) {
    instance() = this;
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, &old_segv_);
  }
  ~GuardedBackend() override {
    sigaction(SIGSEGV, &old_segv_, nullptr);
    for (auto& [p, bytes] : regions_) munmap(p, bytes);
    instance() = nullptr;
  }

  std::string describe() const override { return in_.describe() + ", guarded buffers"; }
  int64_t operators() const { return operators_; }
  int64_t buffers() const { return static_cast<int64_t>(regions_.size()); }
  int64_t bytes() const {
    int64_t n = 0;
    for (const auto& [p, b] : regions_) n += static_cast<int64_t>(b);
    return n;
  }

  Act alloc(int64_t n) override {
    const long page = sysconf(_SC_PAGESIZE);
    const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + page - 1) / page * page;
    void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);  // zeroed, and closed
    if (p == MAP_FAILED) throw Error("guarded backend: mmap failed");
    regions_[p] = bytes;
    return as_act(static_cast<float*>(p));
  }
  void release(Act buffer) override {
    void* p = host(buffer);
    auto it = regions_.find(p);
    if (it == regions_.end()) throw Error("guarded backend: release of a buffer it does not own");
    munmap(p, it->second);
    regions_.erase(it);
  }
  // Caller memory stays the caller's (unguarded): the CPU backend's own view of it.
  Act host_view(float* p) override { return as_act(p); }
  Act host_view(const float* p) override { return as_act(const_cast<float*>(p)); }
  void read(Act src, float* dst, int64_t n) override { open([&] { in_.read(src, dst, n); }); }
  float* map(Act, int64_t) override {
    throw Error("guarded backend: no host access to its buffers (map is for transports between ranks)");
  }

#define KESTREL_GUARDED(sig, call) \
  void sig override { open([&] { in_.call; }); }
  KESTREL_GUARDED(matmul(const Weight& w, Act x, int64_t n, Act y), matmul(w, x, n, y))
  KESTREL_GUARDED(matmul_many(const Weight* const* ws, int c, Act x, int64_t n, const Act* ys),
                  matmul_many(ws, c, x, n, ys))
  KESTREL_GUARDED(swiglu(const Weight& g, const Weight& u, Act x, int64_t n, Act o, Act s), swiglu(g, u, x, n, o, s))
  KESTREL_GUARDED(geglu(const Weight& g, const Weight& u, Act x, int64_t n, Act o, Act s), geglu(g, u, x, n, o, s))
  KESTREL_GUARDED(qkv_rope(const Weight* const* w, const float* const* b, Act x, int64_t n, const int32_t* p,
                           const RopeParams& r, const QkvShape& s, const Act* o),
                  qkv_rope(w, b, x, n, p, r, s, o))
  KESTREL_GUARDED(matmul_heads(const Weight* ws, int h, Act x, int64_t xs, int64_t xh, int64_t n, Act y, int64_t ys,
                               int64_t yh),
                  matmul_heads(ws, h, x, xs, xh, n, y, ys, yh))
  KESTREL_GUARDED(ffn_many(const FfnRef* f, int c, const Act* xs, const int64_t* ns, const Act* ys),
                  ffn_many(f, c, xs, ns, ys))
  KESTREL_GUARDED(moe_route(const MoeRouting& r, Act l, const float* b, int64_t n, int32_t* i, float* w),
                  moe_route(r, l, b, n, i, w))
  KESTREL_GUARDED(embed(const Weight& t, const int32_t* tok, int64_t n, Act o), embed(t, tok, n, o))
  KESTREL_GUARDED(rmsnorm(Act x, const float* w, Act y, int64_t r, int64_t d, float e), rmsnorm(x, w, y, r, d, e))
  KESTREL_GUARDED(rope(Act x, const int32_t* p, int64_t r, int h, int hd, const RopeParams& rp),
                  rope(x, p, r, h, hd, rp))
  KESTREL_GUARDED(silu_mul(Act g, Act u, int64_t n), silu_mul(g, u, n))
  KESTREL_GUARDED(gelu_mul(Act g, Act u, int64_t n), gelu_mul(g, u, n))
  KESTREL_GUARDED(scale(Act x, int64_t n, float s), scale(x, n, s))
  KESTREL_GUARDED(softcap(Act x, int64_t n, float c), softcap(x, n, c))
  KESTREL_GUARDED(swiglu_clamp(Act g, Act u, int64_t n, float l), swiglu_clamp(g, u, n, l))
  KESTREL_GUARDED(add(Act x, Act y, int64_t n), add(x, y, n))
  KESTREL_GUARDED(add_bias(Act x, const float* b, int64_t r, int64_t d), add_bias(x, b, r, d))
  KESTREL_GUARDED(fill(Act x, int64_t n, float v), fill(x, n, v))
  KESTREL_GUARDED(copy(Act d, int64_t ds, Act s, int64_t ss, int64_t r, int64_t c), copy(d, ds, s, ss, r, c))
  KESTREL_GUARDED(gather_rows(Act d, Act s, const int64_t* r, int64_t n, int64_t dim), gather_rows(d, s, r, n, dim))
  KESTREL_GUARDED(scatter_rows(Act d, Act s, const int64_t* r, int64_t n, int64_t dim), scatter_rows(d, s, r, n, dim))
  KESTREL_GUARDED(scatter_add_rows(Act d, Act s, const int64_t* r, const float* w, int64_t n, int64_t dim,
                                   const int64_t* src_rows),
                  scatter_add_rows(d, s, r, w, n, dim, src_rows))
  KESTREL_GUARDED(run(const Operator& op, const void* args), run(op, args))  // every named operator
  KESTREL_GUARDED(write_kv(const KvLayerWrite& v, const int64_t* s, int64_t n, Act k, Act vv), write_kv(v, s, n, k, vv))
  KESTREL_GUARDED(read_kv_rows(const PagedKvLayerView& v, const int32_t* t, int64_t l, int64_t w, Act d),
                  read_kv_rows(v, t, l, w, d))
  KESTREL_GUARDED(attention(const PagedKvLayerView& kv, const AttentionRows& r, const AttentionShape& s),
                  attention(kv, r, s))
  KESTREL_GUARDED(attention_dense(Act k, Act v, int64_t kw, int64_t vw, int64_t l, const AttentionRows& r,
                                  const AttentionShape& s),
                  attention_dense(k, v, kw, vw, l, r, s))
#undef KESTREL_GUARDED

  // For the test that the guard bites: the memory behind a buffer, as model code would have to reach it.
  static float* peek(Act a) { return host(a); }

 private:
  // The buffers open while an operator runs, closed again after it.
  template <class F>
  void open(F&& f) {
    operators_++;
    protect(PROT_READ | PROT_WRITE);
    try {
      f();
    } catch (...) {
      protect(PROT_NONE);
      throw;
    }
    protect(PROT_NONE);
  }
  void protect(int prot) {
    for (auto& [p, bytes] : regions_)
      if (mprotect(p, bytes, prot) != 0) std::abort();
  }

  static GuardedBackend*& instance() {
    static GuardedBackend* g = nullptr;
    return g;
  }
  static void on_fault(int, siginfo_t* info, void*) {
    if (GuardedBackend* g = instance())
      for (const auto& [p, bytes] : g->regions_) {
        const auto* a = static_cast<const char*>(info->si_addr);
        if (a >= static_cast<const char*>(p) && a < static_cast<const char*>(p) + bytes) {
          static const char msg[] = "guarded backend: host access to a backend buffer between operators\n";
          (void)!write(2, msg, sizeof msg - 1);
          _exit(86);
        }
      }
    signal(SIGSEGV, SIG_DFL);  // not ours: the ordinary crash
  }

  std::map<void*, size_t> regions_;
  int64_t operators_ = 0;
  struct sigaction old_segv_ {};
};

}  // namespace kestrel::test
