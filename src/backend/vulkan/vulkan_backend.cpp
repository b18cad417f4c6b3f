// The Vulkan backend (backend/vulkan/vulkan_backend.h, docs/gpu.md).
#include "backend/vulkan/vulkan_backend.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"

#if KESTREL_HAVE_VULKAN
#include <algorithm>
#include <map>
#include <random>
#include <unordered_map>
#include <vector>

#include "formats/fp16.h"
#include "backend/forwarding_backend.h"
#include "backend/operator.h"
#include "kernels/qdot.h"
#include "backend/vulkan/vk_context.h"
#endif

namespace kestrel {

int parse_device(const std::string& value) {
  if (value == "cpu") return -1;
  if (value == "vulkan") return 0;
  if (value.rfind("vulkan:", 0) == 0) {
    const std::string n = value.substr(7);
    if (!n.empty() && n.size() < 4 && n.find_first_not_of("0123456789") == std::string::npos) return std::stoi(n);
  }
  throw Error(fmt::format("--device {}: expected cpu, vulkan or vulkan:N (N a device index from `kestrel hw`)", value));
}

std::string DeviceCounters::placement() const {
  std::string s;
  if (gpu_layers < 0 || gpu_layers >= n_layer)
    s = "every layer, the embedding and the output head on the device";
  else if (gpu_layers == 0)
    s = fmt::format("layers 0-{}, the embedding and the output head on the CPU", n_layer - 1);
  else
    s = fmt::format("layers 0-{} on the device; layers {}-{}, the embedding and the output head on the CPU",
                    gpu_layers - 1, gpu_layers, n_layer - 1);
  return s + (cpu_moe ? "; routed experts on the CPU (--cpu-moe)" : "");
}

#if !KESTREL_HAVE_VULKAN

std::unique_ptr<Backend> make_vulkan_backend(const VulkanOptions&, std::unique_ptr<Backend>) {
  throw Error(
      "--device vulkan: this build has no Vulkan (libvulkan-dev and glslc were not found when it was configured; "
      "scripts/setup.sh installs them)");
}

const DeviceCounters* device_counters(const Backend&) { return nullptr; }

#else

namespace {

// The matrix product shaders for a weight type (decode's row-parallel one and prefill's tiled one), or null:
// that type's products run on the CPU.
struct MatmulShaders {
  GgmlType type;
  const char* rows;
  const char* tiled;
  const char* coop;      // on matrix units, or null (F32, BF16: fp16's range; Q4_1, Q5_1: their block minimum)
  const char* coop_emu;  // the same tiles in plain GLSL (tests)
};
#define KESTREL_MATMUL(T) \
  { GgmlType::T, "matmul_" #T, "matmul_tiled_" #T, nullptr, nullptr }
#define KESTREL_MATMUL_COOP(T) \
  { GgmlType::T, "matmul_" #T, "matmul_tiled_" #T, "matmul_coop_" #T, "matmul_coopemu_" #T }
constexpr MatmulShaders kMatmulShaders[] = {
    KESTREL_MATMUL(F32),       KESTREL_MATMUL_COOP(F16),    KESTREL_MATMUL(BF16),        KESTREL_MATMUL_COOP(Q8_0),
    KESTREL_MATMUL_COOP(Q4_0), KESTREL_MATMUL(Q4_1),        KESTREL_MATMUL_COOP(Q5_0),   KESTREL_MATMUL(Q5_1),
    KESTREL_MATMUL_COOP(Q2_K), KESTREL_MATMUL_COOP(Q3_K),   KESTREL_MATMUL_COOP(Q4_K),   KESTREL_MATMUL_COOP(Q5_K),
    KESTREL_MATMUL_COOP(Q6_K), KESTREL_MATMUL_COOP(IQ4_NL), KESTREL_MATMUL_COOP(IQ4_XS), KESTREL_MATMUL_COOP(MXFP4)};
#undef KESTREL_MATMUL_COOP
#undef KESTREL_MATMUL
const MatmulShaders* matmul_shaders(GgmlType t) {
  for (const MatmulShaders& m : kMatmulShaders)
    if (m.type == t) return &m;
  return nullptr;
}
// Decode's product kernel's invocations per row for rows of `cols`: enough for the row's 32-element units (at
// least 8, the token tile's width for the reduction's last step), at most the workgroup's 64 — the shape
// class its pipeline is specialised for (matmul.comp's kTpr).
uint32_t tpr_for(int64_t cols) {
  const int64_t units = (cols + 31) / 32;
  uint32_t tpr = 8;
  while (tpr < 64 && tpr < units) tpr *= 2;
  return tpr;
}
// Their bindings: the weights, x, y, and for Q4_1/Q5_1 the activations' block sums.
uint32_t matmul_bindings(GgmlType t) { return t == GgmlType::Q4_1 || t == GgmlType::Q5_1 ? 4 : 3; }

// The shaders besides the products and their bindings: their pipelines are made with the backend.
constexpr std::pair<const char*, uint32_t> kShaders[] = {{"quantize_act", 2}, {"rmsnorm", 3},  {"rope", 2},
                                                         {"eltwise", 3},      {"kv_write", 3}, {"attention", 5},
                                                         {"argmax", 2},       {"top_k", 3},    {"moe_route", 5}};

// The element-wise shader's operators (shaders/eltwise.comp).
enum class Elt : uint32_t {
  Add,
  SiluMul,
  GeluMul,
  Scale,
  Softcap,
  AddBias,
  Fill,
  CopyRows,
  Gather,
  SwigluClamp,
  SwigluOai
};

// The product shaders' push constants (matmul.comp's block; matmul_tiled.comp and matmul_coop.comp read the
// same one and ignore groups_x and tpr).
struct MatmulPush {
  uint32_t rows, cols, n, x_off, y_off, y_stride, row_bytes, groups_x, s_off, tpr, x_stride;
};

struct EltPush {
  uint32_t op, n, x_off, y_off, dim, x_stride, y_stride;
  float a, b;
};

// A 1-D launch of `count` invocations in workgroups of 64, spread over y when x would pass the limit.
void grid(int64_t count, uint32_t* gx, uint32_t* gy) {
  const int64_t groups = (count + 63) / 64;
  *gx = static_cast<uint32_t>(std::min<int64_t>(groups, 65535));
  *gy = static_cast<uint32_t>((groups + *gx - 1) / *gx);
}

class VulkanBackend final : public ForwardingBackend, private VulkanOpContext {
 public:
  VulkanBackend(const VulkanOptions& o, std::unique_ptr<Backend> host)
      : ForwardingBackend(*host), host_(std::move(host)), ctx_(o.device), o_(o) {
    if (o.max_binding_bytes > 0) ctx_.limit_binding(o.max_binding_bytes);
    if (o.gpu_layers < -1) throw Error(fmt::format("--gpu-layers {} must be 0 or more", o.gpu_layers));
    if (o.memory_limit < 0) throw Error(fmt::format("--gpu-memory {} must be positive", o.memory_limit));
    ctx_.limit_memory(static_cast<size_t>(o.memory_limit));
    for (const auto& [name, bindings] : kShaders) ctx_.prepare(name, bindings);
    if (o.coop == VulkanOptions::Coop::Emulated)
      coop_on_ = coop_emulated_ = true;
    else if (o.coop == VulkanOptions::Coop::Off)
      coop_note_ = "off";
    else if (!ctx_.coop())
      coop_note_ = ctx_.coop_absent();
    else
      coop_self_check();
  }

  ~VulkanBackend() override {
    ffn_h_ = ActBuffer();  // its own buffers first, through release()
    ffn_h2_ = ActBuffer();
    gather_ = ActBuffer();
    route_ = ActBuffer();
    try {
      ctx_.flush();
    } catch (const Error&) {  // a lost device: nothing left to wait for
    }
    for (auto& [p, b] : acts_) ctx_.destroy(*b);
    for (auto& b : weight_chunks_) ctx_.destroy(*b);
    for (auto& [p, v] : vectors_) ctx_.destroy(*v.buffer);
    for (auto& b : retired_) ctx_.destroy(*b);
    for (auto& b : staging_) ctx_.destroy(*b);
    if (gelu_) ctx_.destroy(*gelu_);
    if (xq_) ctx_.destroy(*xq_);
  }

  std::string describe() const override {
    DeviceCounters c = counters_;
    fill(c);
    return fmt::format(
        "Vulkan device {} ({}; {}; {:.1f} MiB of device memory in use{}): matrix products ({}), {}norms, RoPE, "
        "element-wise operators, MoE routing and sampling's argmax and top-k on the device; "
        "{}embeddings on the host: {}{}{}{}{}{}",
        ctx_.index(), ctx_.name(), c.placement(), static_cast<double>(ctx_.allocated()) / (1 << 20),
        ctx_.budget() > 0 ? fmt::format(" of --gpu-memory {:.1f} MiB", static_cast<double>(ctx_.budget()) / (1 << 20))
                          : "",
        coop_on_ ? (coop_emulated_ ? "prefill on the cooperative-matrix model" : "prefill on cooperative matrices")
                 : "prefill tiled; no matrix units: " + coop_note_,
        kv_bytes_ > 0 ? fmt::format("attention over the KV cache ({:.1f} MiB on the device), ",
                                    static_cast<double>(kv_bytes_) / (1 << 20))
                      : "",
        kv_bytes_ > 0 ? "" : "attention, ", in_.describe(),
        c.submissions > 0
            ? fmt::format("; {} submissions, {} of them recorded command buffers replayed", c.submissions, c.reused)
            : "",
        c.argmax_rows > 0 ? fmt::format("; greedy ids of {} logits rows taken on the device", c.argmax_rows) : "",
        c.top_k_rows > 0 ? fmt::format("; the top-k of {} logits rows taken on the device", c.top_k_rows) : "",
        c.routed > 0 ? fmt::format("; {} token-layers MoE-routed on the device", c.routed) : "",
        c.device_ops > 0 ? fmt::format("; {} named operators run by their Vulkan kernels", c.device_ops) : "");
  }

  // The model's layer annotations place the operators: a layer --gpu-layers leaves out runs on the CPU.
  void annotate_layer(int layer) override {
    on_cpu_ = !on_device(layer);
    in_.annotate_layer(layer);
  }

  const DeviceCounters& counters() {
    fill(counters_);
    return counters_;
  }

  Weight prepare_weight(Weight w) override {
    if (computes(w) && w.ne.size() >= 2 && on_device(layer_of(w.name))) {
      device_weight(w);
      const MatmulShaders& m = *matmul_shaders(w.type);  // its products' pipelines, now
      ctx_.prepare(m.rows, matmul_bindings(w.type), tpr_for(w.cols()));  // its shape class
      ctx_.prepare(m.tiled, matmul_bindings(w.type));
      if (const char* coop = coop_shader(m)) ctx_.prepare(coop, 3);
      return w;
    }
    return in_.prepare_weight(std::move(w));
  }

  // ---- The KV cache ----
  // A layer's KV rows in device memory the host can map (the CPU's attention still reads them when an
  // operator falls back), for the layers on the device and pools one binding can span; else host memory.
  std::shared_ptr<void> kv_memory(int layer, size_t bytes, const std::string& what) override {
    if (!on_device(layer) || bytes > ctx_.max_binding()) return nullptr;
    auto b = ctx_.create(bytes, vk::Memory::Activations,
                         what + " (a smaller context, -c, or fewer --gpu-layers need less)", false);
    if (!b->mapped) return nullptr;
    void* p = b->mapped;
    kv_bytes_ += bytes;
    acts_.emplace(reinterpret_cast<uintptr_t>(p), std::move(b));
    return std::shared_ptr<void>(p, [this](void* q) { release(as_act(static_cast<float*>(q))); });
  }

  void write_kv(const KvLayerWrite& view, const int64_t* slots, int64_t n, Act k, Act v) override {
    const bool device = !on_cpu_ && device_memory(view.k) && (!view.v || device_memory(view.v)) &&
                        row_type(view.k_format) >= 0 && (!view.v || row_type(view.v_format) >= 0) &&
                        view.k_width % 2 == 0 && view.v_width % 2 == 0;
    if (!device) return fwd().write_kv(view, slots, n, k, v);
    if (n <= 0) return;
    auto [s, bs] = stage(static_cast<size_t>(n) * sizeof(int32_t));
    auto* s32 = reinterpret_cast<int32_t*>(s);
    for (int64_t i = 0; i < n; i++) s32[i] = static_cast<int32_t>(slots[i]);
    auto one = [&](void* rows, int64_t stride, int64_t width, const KvRowFormat& f, Act x) {
      const vk::Binding bx = bind(x, n * width, Use::In), bkv = bind_memory(rows);
      const auto type = static_cast<uint32_t>(row_type(f));
      struct {
        uint32_t n, width, x_off, kv_off, stride, half_type, slots_off, group;
      } push{u32(n), u32(width), bx.word, bkv.word, u32(stride), type, bs.word, static_cast<uint32_t>(f.group())};
      uint32_t gx, gy;
      grid(n * (type >= 3 ? width / f.group() : type != 0 ? width / 2 : width), &gx, &gy);
      dispatch("kv_write", {bx, bkv, bs}, &push, sizeof push, gx, gy);
    };
    one(view.k, view.k_stride, view.k_width, view.k_format, k);
    if (view.v) one(view.v, view.v_stride, view.v_width, view.v_format, v);
  }

  void attention(const PagedKvLayerView& kv, const AttentionRows& rows, const AttentionShape& s) override {
    // (Rows that see past their own position, a media span attended both ways, read to their horizon.)
    const bool device = !on_cpu_ && kv.v && device_memory(kv.k) && device_memory(kv.v) && row_type(kv.k_format) >= 0 &&
                        row_type(kv.v_format) >= 0 && s.head_dim <= 1024 && s.value_dim() <= 1024 && s.n_kv_head > 0 &&
                        s.n_head % s.n_kv_head == 0;
    if (!device) return fwd().attention(kv, rows, s);
    const int64_t n = rows.n_tokens;
    if (n <= 0) return;
    // meta: per token its position, table start and last position seen (its horizon), then each distinct table
    // (as long as its tokens need), then the sinks.
    auto& tables = attn_tables_;  // a table and the entries its tokens read (members: no allocation per call)
    auto& which = attn_which_;
    tables.clear();
    which.resize(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; t++) {
      const int32_t* table = rows.block_tables[t];
      const int32_t last = rows.horizons ? rows.horizons[t] : rows.positions[t];
      const int64_t need = last / kv.block_size + 1;
      size_t i = 0;
      while (i < tables.size() && tables[i].first != table) i++;
      if (i == tables.size()) tables.emplace_back(table, 0);
      tables[i].second = std::max(tables[i].second, need);
      which[static_cast<size_t>(t)] = i;
    }
    int64_t words = 3 * n + (s.sinks ? s.n_head : 0);
    for (const auto& tb : tables) words += tb.second;
    const vk::Binding bq = bind(rows.q, n * s.n_head * s.head_dim, Use::In);
    auto [m, bm] = stage(static_cast<size_t>(words) * sizeof(int32_t));
    auto* meta = reinterpret_cast<int32_t*>(m);
    auto& start = attn_start_;
    start.resize(tables.size());
    int64_t at = 3 * n;
    for (size_t i = 0; i < tables.size(); i++) {
      start[i] = at;
      std::memcpy(meta + at, tables[i].first, static_cast<size_t>(tables[i].second) * sizeof(int32_t));
      at += tables[i].second;
    }
    for (int64_t t = 0; t < n; t++) {
      meta[3 * t] = rows.positions[t];
      meta[3 * t + 1] = static_cast<int32_t>(bm.word + start[which[static_cast<size_t>(t)]]);
      meta[3 * t + 2] = rows.horizons ? rows.horizons[t] : rows.positions[t];
    }
    if (s.sinks) std::memcpy(meta + at, s.sinks, static_cast<size_t>(s.n_head) * sizeof(float));
    const vk::Binding bk = bind_memory(kv.k), bv = bind_memory(kv.v);
    const vk::Binding bo = bind(rows.out, n * s.n_head * s.value_dim(), Use::Out);
    struct {
      uint32_t n_head, n_kv_head, hd, vd, q_off, o_off, k_off, v_off, k_stride, v_stride, block_size, meta_off;
      int32_t window, chunk, sinks_off;
      uint32_t k_type, v_type;
      float scale, softcap;
      uint32_t k_group, v_group;
    } push{u32(s.n_head),
           u32(s.n_kv_head),
           u32(s.head_dim),
           u32(s.value_dim()),
           bq.word,
           bo.word,
           bk.word,
           bv.word,
           u32(kv.k_stride),
           u32(kv.v_stride),
           u32(kv.block_size),
           bm.word,
           s.window,
           s.chunk,
           s.sinks ? static_cast<int32_t>(bm.word + at) : -1,
           static_cast<uint32_t>(row_type(kv.k_format)),
           static_cast<uint32_t>(row_type(kv.v_format)),
           s.scale,
           s.softcap,
           static_cast<uint32_t>(kv.k_format.group()),
           static_cast<uint32_t>(kv.v_format.group())};
    if (n > 65535) throw Error(fmt::format("Vulkan attention: {} query tokens in one call (at most 65535)", n));
    dispatch("attention", {bq, bk, bv, bo, bm}, &push, sizeof push, u32(s.n_head), u32(n));
  }

  // MoE routing (kernels/moe_route.h) where the router's logits are: only the chosen experts and their weights
  // come back (the model groups the tokens by expert from them).
  void moe_route(const MoeRouting& r, Act logits, const float* bias, int64_t n, int32_t* ids, float* weights) override {
    if (on_cpu_ || !device_memory(host(logits)) || r.n_group > 64)
      return fwd().moe_route(r, logits, bias, n, ids, weights);
    if (n <= 0) return;
    const int64_t picks = n * r.n_used;
    if (r.forced) std::memcpy(ids, r.forced, static_cast<size_t>(picks) * sizeof(int32_t));
    route_.ensure(*this, 2 * n * r.n_expert);  // first: growing it submits what is recorded
    const vk::Binding bl = bind(logits, n * r.n_expert, Use::In);
    const vk::Binding bb = bias ? vector(bias, r.n_expert) : bl;  // (not read without a bias)
    const vk::Binding bs = bind(route_, 2 * n * r.n_expert, Use::Out);
    const vk::Binding bi = bind(host_view(reinterpret_cast<float*>(ids)), picks, r.forced ? Use::InOut : Use::Out);
    const vk::Binding bw = bind(host_view(weights), picks, Use::Out);
    uint32_t gx, gy;
    grid(n, &gx, &gy);
    struct {
      uint32_t n, n_expert, n_used, gating, n_group, n_group_used, flags;
      float scale;
      uint32_t logits_off, bias_off, scratch_off, ids_off, w_off, groups_x;
    } push{u32(n),
           u32(r.n_expert),
           u32(r.n_used),
           static_cast<uint32_t>(r.gating),
           u32(r.n_group),
           u32(r.n_group_used),
           (r.normalize ? 1u : 0u) | (r.select_by_logit ? 2u : 0u) | (bias ? 4u : 0u) | (r.forced ? 8u : 0u),
           r.scale,
           bl.word,
           bb.word,
           bs.word,
           bi.word,
           bw.word,
           gx};
    dispatch("moe_route", {bl, bb, bs, bi, bw}, &push, sizeof push, gx, gy);
    counters_.routed += static_cast<uint64_t>(n);
    sync();
  }

  // A failed step's recorded work is dropped, and the host outputs it staged are never copied back.
  void abandon() override {
    ctx_.discard();
    copy_back_.clear();
    sync();
    in_.abandon();
  }

  // ---- Sampling's candidates ----
  // Where the output head runs on the device: the rows' argmax or top-k there, and only those come back.
  bool best_on_device() const override { return on_device(-1); }
  void top_k_rows(Act x, int64_t rows, int64_t n, int k, int32_t* ids, float* vals) override {
    if (on_cpu_ || !device_memory(host(x))) return fwd().top_k_rows(x, rows, n, k, ids, vals);
    if (rows <= 0) return;
    if (rows > 65535 || k < 1 || k > 64)
      throw Error(fmt::format("Vulkan top-k: {} rows, k {} (at most 65535 rows, k 1 to 64)", rows, k));
    const vk::Binding bx = bind(x, rows * n, Use::In);
    const vk::Binding bi = bind(host_view(reinterpret_cast<float*>(ids)), rows * k, Use::Out);  // ints
    const vk::Binding bv = bind(host_view(vals), rows * k, Use::Out);
    struct {
      uint32_t n, k, x_off, ids_off, vals_off;
    } push{u32(n), u32(k), bx.word, bi.word, bv.word};
    dispatch("top_k", {bx, bi, bv}, &push, sizeof push, u32(rows));
    counters_.top_k_rows += static_cast<uint64_t>(rows);
    sync();
  }
  void argmax_rows(Act x, int64_t rows, int64_t n, int32_t* ids) override {
    if (on_cpu_ || !device_memory(host(x))) return fwd().argmax_rows(x, rows, n, ids);
    if (rows <= 0) return;
    if (rows > 65535) throw Error(fmt::format("Vulkan argmax: {} rows in one call (at most 65535)", rows));
    const vk::Binding bx = bind(x, rows * n, Use::In);
    const vk::Binding bi = bind(host_view(reinterpret_cast<float*>(ids)), rows, Use::Out);  // ints, copied back
    struct {
      uint32_t n, x_off, ids_off;
    } push{u32(n), bx.word, bi.word};
    dispatch("argmax", {bx, bi}, &push, sizeof push, u32(rows));
    counters_.argmax_rows += static_cast<uint64_t>(rows);
    sync();
  }

  // Attention over dense float rows (MLA's rebuilt keys under --mla decompressed, the sparse rows DeepSeek-V3.2's
  // indexer picked): one block of every position, through the same shader.
  void attention_dense(Act k, Act v, int64_t k_width, int64_t v_width, int64_t len, const AttentionRows& rows,
                       const AttentionShape& s) override {
    if (on_cpu_) return fwd().attention_dense(k, v, k_width, v_width, len, rows, s);
    Backend::attention_dense(k, v, k_width, v_width, len, rows, s);
  }
  // dst row i = the key row at position i (read_kv_rows) or positions[i] (gather_kv_rows) of the sequence with
  // this block table: gathered by slot on the device for F32 rows as wide as their stride, else on the CPU.
  void read_kv_rows(const PagedKvLayerView& view, const int32_t* table, int64_t len, int64_t k_width,
                    Act dst) override {
    if (!kv_gather(view, table, nullptr, len, k_width, dst)) fwd().read_kv_rows(view, table, len, k_width, dst);
  }
  void gather_kv_rows(const PagedKvLayerView& view, const int32_t* table, const int32_t* positions, int64_t count,
                      int64_t k_width, Act dst) override {
    if (!kv_gather(view, table, positions, count, k_width, dst))
      fwd().gather_kv_rows(view, table, positions, count, k_width, dst);
  }

  // ---- Buffers ----
  Act alloc(int64_t n) override {
    auto b = ctx_.create(static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float), vk::Memory::Activations,
                         fmt::format("an activation buffer of {} floats", n));
    if (!b->mapped) throw Error("Vulkan activation memory is not host-visible");
    auto* p = static_cast<float*>(b->mapped);
    acts_.emplace(reinterpret_cast<uintptr_t>(p), std::move(b));
    return as_act(p);
  }
  void release(Act a) override {
    const auto it = acts_.find(reinterpret_cast<uintptr_t>(host(a)));
    if (it == acts_.end()) return;
    sync();
    ctx_.destroy(*it->second);
    acts_.erase(it);
  }
  Act host_view(float* p) override { return as_act(p); }
  Act host_view(const float* p) override { return as_act(const_cast<float*>(p)); }
  void read(Act src, float* dst, int64_t n) override {
    sync();
    if (host(src) != dst) std::memcpy(dst, host(src), static_cast<size_t>(n) * sizeof(float));
  }
  float* map(Act a, int64_t) override {
    sync();
    return host(a);
  }

  // ---- Matrix products ----
  void matmul(const Weight& w, Act x, int64_t n, Act y) override {
    if (on_cpu_ || !computes(w)) return fwd().matmul(w, x, n, y);
    matmul_rows(w, x, w.cols(), n, y, w.rows());
  }
  // Per-head products (MLA's absorbed keys and values): each head one strided product on the device.
  void matmul_heads(const Weight* ws, int n_heads, Act x, int64_t x_stride, int64_t x_head_stride, int64_t n, Act y,
                    int64_t y_stride, int64_t y_head_stride) override {
    bool device = !on_cpu_;
    for (int h = 0; h < n_heads && device; h++) device = computes(ws[h]);
    if (!device) return fwd().matmul_heads(ws, n_heads, x, x_stride, x_head_stride, n, y, y_stride, y_head_stride);
    for (int h = 0; h < n_heads; h++)
      matmul_rows(ws[h], x + h * x_head_stride, x_stride, n, y + h * y_head_stride, y_stride);
  }
  void matmul_many(const Weight* const* ws, int count, Act x, int64_t n, const Act* ys) override {
    if (on_cpu_) return fwd().matmul_many(ws, count, x, n, ys);
    for (int i = 0; i < count; i++) matmul(*ws[i], x, n, ys[i]);
  }
  void swiglu(const Weight& g, const Weight& u, Act x, int64_t n, Act out, Act scratch) override {
    if (on_cpu_) return fwd().swiglu(g, u, x, n, out, scratch);
    Backend::swiglu(g, u, x, n, out, scratch);
  }
  void geglu(const Weight& g, const Weight& u, Act x, int64_t n, Act out, Act scratch) override {
    if (on_cpu_) return fwd().geglu(g, u, x, n, out, scratch);
    Backend::geglu(g, u, x, n, out, scratch);
  }
  void qkv_rope(const Weight* const* w, const float* const* b, Act x, int64_t n, const int32_t* pos,
                const RopeParams& rope, const QkvShape& shape, const Act* out) override {
    if (on_cpu_) return fwd().qkv_rope(w, b, x, n, pos, rope, shape, out);
    Backend::qkv_rope(w, b, x, n, pos, rope, shape, out);
  }

  // A MoE layer's experts, each over the tokens routed to it as one matrix, on the device (gate, up, their
  // biases and activation, down and its bias: plain SwiGLU, gpt-oss's biased and clamped SwiGLU, DeepSeek-V4's
  // clamped one, Gemma 4's GeGLU); under --cpu-moe on the CPU.
  void ffn_many(const FfnRef* ffns, int count, const Act* xs, const int64_t* ns, const Act* ys) override {
    bool device = !on_cpu_ && !o_.cpu_moe;
    int64_t most = 0;
    for (int i = 0; i < count && device; i++) {
      device = computes(*ffns[i].gate) && computes(*ffns[i].up) && computes(*ffns[i].down);
      most = std::max(most, ns[i] * ffns[i].gate->rows());
    }
    if (!device) return fwd().ffn_many(ffns, count, xs, ns, ys);
    ffn_h_.ensure(*this, most);
    ffn_h2_.ensure(*this, most);
    for (int i = 0; i < count; i++) {
      if (ns[i] == 0) continue;
      const FfnRef& f = ffns[i];
      if (f.plain()) {
        swiglu(*f.gate, *f.up, xs[i], ns[i], ffn_h_, ffn_h2_);
      } else {  // FfnRef::activate's steps
        const int64_t width = f.gate->rows(), m = ns[i] * width;
        matmul(*f.gate, xs[i], ns[i], ffn_h_);
        matmul(*f.up, xs[i], ns[i], ffn_h2_);
        if (f.gate_b) add_bias(ffn_h_, f.gate_b, ns[i], width);
        if (f.up_b) add_bias(ffn_h2_, f.up_b, ns[i], width);
        if (f.gelu)
          gelu_mul(ffn_h_, ffn_h2_, m);
        else if (f.alpha > 0.0f)
          binary(Elt::SwigluOai, ffn_h_, ffn_h2_, m, f.clamp, f.alpha);
        else if (f.clamp > 0.0f)
          swiglu_clamp(ffn_h_, ffn_h2_, m, f.clamp);
        else
          silu_mul(ffn_h_, ffn_h2_, m);
      }
      matmul(*f.down, ffn_h_, ns[i], ys[i]);
      if (f.down_b) add_bias(ys[i], f.down_b, ns[i], f.down->rows());
    }
  }

  // ---- Row and element-wise operators ----
  void rmsnorm(Act x, const float* w, Act y, int64_t rows, int64_t dim, float eps) override {
    if (on_cpu_) return fwd().rmsnorm(x, w, y, rows, dim, eps);
    if (rows <= 0) return;
    const vk::Binding bw = vector(w, dim), bx = bind(x, rows * dim, Use::In), by = bind(y, rows * dim, Use::Out);
    struct {
      uint32_t rows, dim, x_off, y_off, w_off, groups_x;
      float eps;
    } push{u32(rows), u32(dim), bx.word, by.word, bw.word, std::min<uint32_t>(u32(rows), 32768), eps};
    dispatch("rmsnorm", {bx, bw, by}, &push, sizeof push, push.groups_x,
             (push.rows + push.groups_x - 1) / push.groups_x);
  }
  void rope(Act x, const int32_t* positions, int64_t rows, int heads, int head_dim, const RopeParams& p) override {
    if (on_cpu_) return fwd().rope(x, positions, rows, heads, head_dim, p);
    const int half = p.n_rot / 2;
    if (rows <= 0 || half <= 0) return;
    const vk::Binding bx = bind(x, rows * heads * head_dim, Use::InOut);
    auto [table, bt] = stage(static_cast<size_t>(rows * half) * 2 * sizeof(float));
    const float mscale = rope_mscale(p);
    for (int64_t r = 0; r < rows; r++)
      for (int i = 0; i < half; i++)
        rope_cos_sin(p, mscale, static_cast<float>(positions[r]), i, &table[2 * (r * half + i)],
                     &table[2 * (r * half + i) + 1]);
    struct {
      uint32_t rows, heads, head_dim, half_rot, neox, x_off, row_stride, cs_off;
    } push{u32(rows),
           u32(heads),
           u32(head_dim),
           u32(half),
           p.style == RopeStyle::NeoX ? 1u : 0u,
           bx.word,
           u32(int64_t{heads} * head_dim),
           bt.word / 2};
    uint32_t gx, gy;
    grid(rows * heads * half, &gx, &gy);
    dispatch("rope", {bx, bt}, &push, sizeof push, gx, gy);
  }
  void silu_mul(Act g, Act u, int64_t n) override {
    if (on_cpu_) return fwd().silu_mul(g, u, n);
    binary(Elt::SiluMul, g, u, n);
  }
  void gelu_mul(Act g, Act u, int64_t n) override {
    if (on_cpu_) return fwd().gelu_mul(g, u, n);
    binary(Elt::GeluMul, g, u, n);
  }
  void swiglu_clamp(Act g, Act u, int64_t n, float limit) override {
    if (on_cpu_) return fwd().swiglu_clamp(g, u, n, limit);
    binary(Elt::SwigluClamp, g, u, n, limit);
  }
  void add(Act x, Act y, int64_t n) override {
    if (on_cpu_) return fwd().add(x, y, n);
    binary(Elt::Add, x, y, n);
  }
  void scale(Act x, int64_t n, float s) override {
    if (on_cpu_) return fwd().scale(x, n, s);
    unary(Elt::Scale, x, n, s, Use::InOut);
  }
  void softcap(Act x, int64_t n, float cap) override {
    if (on_cpu_) return fwd().softcap(x, n, cap);
    unary(Elt::Softcap, x, n, cap, Use::InOut);
  }
  void fill(Act x, int64_t n, float value) override {
    if (on_cpu_) return fwd().fill(x, n, value);
    unary(Elt::Fill, x, n, value, Use::Out);
  }
  void add_bias(Act x, const float* bias, int64_t rows, int64_t dim) override {
    if (on_cpu_) return fwd().add_bias(x, bias, rows, dim);
    if (rows <= 0) return;
    const vk::Binding bb = vector(bias, dim), bx = bind(x, rows * dim, Use::InOut);
    elt(Elt::AddBias, bx, bb, rows * dim, dim, 0, 0, 0.0f);
  }
  // dst row i = src row rows[i] (dst may be src: gathered into scratch first, then copied back).
  void gather_rows(Act dst, Act src, const int64_t* rows, int64_t n, int64_t dim) override {
    if (on_cpu_) return fwd().gather_rows(dst, src, rows, n, dim);
    bool identity = dst == src;
    for (int64_t i = 0; i < n && identity; i++) identity = rows[i] == i;
    if (identity || n <= 0) return;
    int64_t last = 0;
    for (int64_t i = 0; i < n; i++) last = std::max(last, rows[i]);
    gather_.ensure(*this, n * dim);  // first: growing it submits what is recorded (and resets the staging)
    auto [idx, bidx] = stage(static_cast<size_t>(n) * sizeof(uint32_t));
    for (int64_t i = 0; i < n; i++) reinterpret_cast<uint32_t*>(idx)[i] = u32(rows[i]);
    const vk::Binding bs = bind(src, (last + 1) * dim, Use::In);
    gather(bind(gather_, n * dim, Use::Out), bs, bidx, n, dim);
    copy(dst, dim, gather_, dim, n, dim);
  }
  // A named operator: its Vulkan kernel where its file gives one (recording through dispatch below), else its
  // host kernel on the CPU backend once the recorded work is done.
  void run(const Operator& op, const void* args) override {
    if (!on_cpu_)
      if (const auto kernel = op.device_kernel(kVulkanKernel)) {
        kernel(static_cast<VulkanOpContext*>(this), args);
        counters_.device_ops++;
        return;
      }
    ForwardingBackend::run(op, args);
  }
  void dispatch(const char* shader, std::initializer_list<VulkanBuffer> buffers, const void* push, uint32_t push_bytes,
                int64_t invocations) override {
    constexpr size_t kMax = 6;
    if (buffers.size() > kMax || push_bytes + 4 * buffers.size() > 128)
      throw Error(fmt::format("Vulkan operator {}: {} buffers and {} bytes of push constants", shader, buffers.size(),
                              push_bytes));
    if (invocations <= 0) return;
    vk::Binding b[kMax];
    uint8_t block[128];
    size_t i = 0;
    for (const VulkanBuffer& x : buffers) {
      const Use use = x.use == VulkanBuffer::Use::In ? Use::In : x.use == VulkanBuffer::Use::Out ? Use::Out : Use::InOut;
      b[i] = bind(x.act, x.floats, use);
      std::memcpy(block + 4 * i, &b[i].word, 4);
      i++;
    }
    std::memcpy(block + 4 * i, push, push_bytes);
    uint32_t gx, gy;
    grid(invocations, &gx, &gy);
    ctx_.dispatch(shader, b, i, block, static_cast<uint32_t>(4 * i + push_bytes), gx, gy);
    counters_.dispatches++;
  }
  void copy(Act dst, int64_t dst_stride, Act src, int64_t src_stride, int64_t rows, int64_t cols) override {
    if (on_cpu_) return fwd().copy(dst, dst_stride, src, src_stride, rows, cols);
    if (rows <= 0 || cols <= 0) return;
    const vk::Binding bs = bind(src, (rows - 1) * src_stride + cols, Use::In);
    const vk::Binding bd = bind(dst, (rows - 1) * dst_stride + cols, Use::InOut);
    elt(Elt::CopyRows, bd, bs, rows * cols, cols, dst_stride, src_stride, 0.0f);
  }

 protected:
  // An operator with no shader: the recorded work finishes first, then the CPU backend runs on the same memory.
  void before_forward() override {
    counters_.host_ops++;
    sync();
  }

 private:
  enum class Use { In, Out, InOut };
  struct DeviceWeight {
    GgmlType type;
    size_t nbytes;
    struct Part {
      vk::Buffer* buffer;
      size_t offset;
      int64_t row0, rows;
    };
    std::vector<Part> parts;
  };
  struct DeviceVector {
    std::unique_ptr<vk::Buffer> buffer;
    std::vector<float> copy;  // what was uploaded: a pointer whose floats changed is uploaded again
  };
  struct CopyBack {
    const void* from;
    void* to;
    size_t bytes;
  };

  // Whether layer `layer` (-1: the embedding and output head) runs on the device under --gpu-layers.
  bool on_device(int layer) const {
    if (o_.gpu_layers < 0 || o_.gpu_layers >= o_.n_layer) return true;
    return layer >= 0 && layer < o_.gpu_layers;
  }
  // The layer a weight belongs to: N of "blk.N.", else -1 (the embedding, the output head).
  static int layer_of(const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return -1;
    return std::atoi(name.c_str() + 4);
  }
  void fill(DeviceCounters& c) const {
    c.device = fmt::format("Vulkan {}: {}", ctx_.index(), ctx_.name());
    c.submissions = ctx_.submissions();
    c.reused = ctx_.reused();
    c.weight_bytes = static_cast<int64_t>(uploaded_);
    c.gpu_layers = o_.gpu_layers;
    c.n_layer = o_.n_layer;
    c.cpu_moe = o_.cpu_moe;
    c.kv_bytes = static_cast<int64_t>(kv_bytes_);
  }

  // (Bindings as a braced list: no allocation per dispatch.)
  void dispatch(const char* shader, std::initializer_list<vk::Binding> b, const void* push, uint32_t bytes, uint32_t gx,
                uint32_t gy = 1, uint32_t gz = 1, uint32_t spec = 0) {
    ctx_.dispatch(shader, b, push, bytes, gx, gy, gz, spec);
    counters_.dispatches++;
  }

  // Submits what was recorded, waits, and hands the host the outputs that were staged for host memory.
  // keep_staged: an operator is binding its buffers (what it staged already stays where it is).
  void sync(bool keep_staged = false) {
    ctx_.flush();
    for (const CopyBack& c : copy_back_) std::memcpy(c.to, c.from, c.bytes);
    copy_back_.clear();
    if (!keep_staged) stage_chunk_ = 0, stage_at_ = 0;
    for (auto& b : retired_) ctx_.destroy(*b);
    retired_.clear();
  }

  // `bytes` of staging memory for this submission: its host address and binding.
  std::pair<float*, vk::Binding> stage(size_t bytes) {
    const size_t align = ctx_.offset_alignment();
    for (; stage_chunk_ < staging_.size(); stage_chunk_++, stage_at_ = 0) {
      const size_t at = (stage_at_ + align - 1) / align * align;
      if (at + bytes <= staging_[stage_chunk_]->bytes) {
        stage_at_ = at + bytes;
        return {reinterpret_cast<float*>(static_cast<char*>(staging_[stage_chunk_]->mapped) + at),
                ctx_.bind(*staging_[stage_chunk_], at, bytes)};
      }
    }
    staging_.push_back(ctx_.create(std::max<size_t>(bytes, size_t{4} << 20), vk::Memory::Staging, "staging memory"));
    stage_at_ = bytes;
    return {static_cast<float*>(staging_.back()->mapped), ctx_.bind(*staging_.back(), 0, bytes)};
  }

  // The device view of `floats` floats at a: its buffer, or (host memory) a staged copy, copied back at sync.
  // Every operator binds its inputs before its outputs, so the outputs of earlier operators that such a flush
  // copies back are never this one's.
  vk::Binding bind(Act a, int64_t floats, Use use) {
    float* p = host(a);
    const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
    if (const auto* b = buffer_of(p)) return ctx_.bind(*b->second, reinterpret_cast<uintptr_t>(p) - b->first, bytes);
    if (use != Use::Out && !copy_back_.empty()) sync(true);  // the host memory may be waiting for an output
    auto [staged, b] = stage(bytes);
    if (use != Use::Out) std::memcpy(staged, p, bytes);
    if (use != Use::In) copy_back_.push_back({staged, p, bytes});
    return b;
  }

  // The shaders' code for a KV row format: 0 F32, 1 F16, 2 BF16, 3 Q8_0, 4 FP8, 5 Q4 (Q8_0 and Q4 in rotated
  // groups); -1: a format the shaders do not know (read and written on the CPU).
  static int row_type(const KvRowFormat& f) {
    switch (f.type()) {
      case KvType::F32:
        return 0;
      case KvType::F16:
        return 1;
      case KvType::BF16:
        return 2;
      case KvType::Q8_0:
        return 3;
      case KvType::FP8:
        return 4;
      case KvType::Q4:
        return 5;
    }
    return -1;
  }

  // The buffer of this backend's (its mapped address and the buffer; a KV pool from kv_memory among them)
  // that p lies in, or null: host memory.
  const std::pair<const uintptr_t, std::unique_ptr<vk::Buffer> >* buffer_of(const void* p) const {
    const auto addr = reinterpret_cast<uintptr_t>(p);
    auto it = acts_.upper_bound(addr);
    if (it == acts_.begin()) return nullptr;
    --it;
    return addr < it->first + it->second->bytes ? &*it : nullptr;
  }
  bool device_memory(const void* p) const { return buffer_of(p) != nullptr; }
  // The rest of the buffer p lies in, from p (a KV pool).
  vk::Binding bind_memory(const void* p) {
    const auto* b = buffer_of(p);
    const size_t at = reinterpret_cast<uintptr_t>(p) - b->first;
    return ctx_.bind(*b->second, at, b->second->bytes - at);
  }

  // A vector of the model's (a norm's weights, a bias): uploaded on first use, again if its floats changed.
  vk::Binding vector(const float* p, int64_t n) {
    DeviceVector& v = vectors_[p];
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    if (!v.buffer || v.copy.size() != static_cast<size_t>(n) || std::memcmp(v.copy.data(), p, bytes) != 0) {
      if (v.buffer) retired_.push_back(std::move(v.buffer));  // pending work may still read the old one
      v.buffer = ctx_.create(bytes, vk::Memory::Activations, "a norm or bias vector");
      std::memcpy(v.buffer->mapped, p, bytes);
      v.copy.assign(p, p + n);
    }
    return ctx_.bind(*v.buffer, 0, bytes);
  }

  const DeviceWeight& device_weight(const Weight& w) {
    // By address and size: a matrix's first rows (an expert's slice) start where the whole matrix does.
    const auto key = std::make_pair(w.data, w.nbytes);
    auto it = weights_.find(key);
    if (it != weights_.end() && it->second.type == w.type) return it->second;
    DeviceWeight dw{w.type, w.nbytes, {}};
    const size_t stride = w.row_stride();
    const auto max_rows = static_cast<int64_t>(ctx_.max_binding() / stride);
    if (max_rows < 1)
      throw Error(fmt::format("{}: one row ({} bytes) is larger than a Vulkan binding may be on {}", w.name, stride,
                              ctx_.name()));
    for (int64_t r0 = 0; r0 < w.rows(); r0 += max_rows) {
      const int64_t rows = std::min(max_rows, w.rows() - r0);
      const size_t bytes = static_cast<size_t>(rows) * stride;
      const size_t align = ctx_.offset_alignment();
      size_t at = (chunk_used_ + align - 1) / align * align;
      if (weight_chunks_.empty() || at + bytes > weight_chunks_.back()->bytes) {
        const auto what = fmt::format(
            "weight {} ({:.1f} MiB; {:.1f} MiB of weights uploaded before it; fewer "
            "--gpu-layers or --cpu-moe keep more on the CPU)",
            w.name, static_cast<double>(bytes) / (1 << 20), static_cast<double>(uploaded_) / (1 << 20));
        // Under --gpu-memory each weight gets just its bytes: a chunk's spare room would count against the KV
        // cache and activations.
        const size_t chunk = ctx_.budget() > 0 ? bytes : std::max<size_t>(bytes, size_t{64} << 20);
        weight_chunks_.push_back(ctx_.create(chunk, vk::Memory::Weights, what));
        at = 0;
      }
      ctx_.upload(*weight_chunks_.back(), at, w.row(r0), bytes);
      dw.parts.push_back({weight_chunks_.back().get(), at, r0, rows});
      chunk_used_ = at + bytes;
      uploaded_ += bytes;
    }
    return weights_[key] = std::move(dw);
  }

  // Whether products with w run here, in a layer on the device: a type with a shader, not a --cpu-moe expert.
  bool computes(const Weight& w) const {
    return matmul_shaders(w.type) && w.present() && !(w.routed_expert && o_.cpu_moe);
  }

  // y[t * y_stride + r] = x[t * x_stride ..] . W row r for n tokens.
  void matmul_rows(const Weight& w, Act x, int64_t x_stride, int64_t n, Act y, int64_t y_stride) {
    if (n <= 0) return;
    const MatmulShaders& shaders = *matmul_shaders(w.type);
    const DeviceWeight& dw = device_weight(w);
    vk::Binding bx = bind(x, (n - 1) * x_stride + w.cols(), Use::In), bs{};
    int64_t stride = x_stride;
    if (w.type != GgmlType::F32) {
      bx = quantized_activations(bx, x_stride, w.type, n, w.cols(), &bs);
      stride = w.cols();
    }
    const vk::Binding by = bind(y, (n - 1) * y_stride + w.rows(), Use::Out);
    for (const auto& part : dw.parts) {
      const vk::Binding bw = ctx_.bind(*part.buffer, part.offset, static_cast<size_t>(part.rows) * w.row_stride());
      // Decode's kernel: tpr_for's invocations per row (its pipeline specialised for them), the rest of the
      // workgroup takes more rows. Prefill's tiled kernel (the same push constants, groups_x and tpr unused):
      // a workgroup per 64 rows by 32 tokens.
      const bool tiled = n >= kVulkanTiledTokens;
      const uint32_t tpr = tpr_for(w.cols());
      const uint32_t groups = (u32(part.rows) + 64 / tpr - 1) / (64 / tpr);
      const MatmulPush push{u32(part.rows),
                            u32(w.cols()),
                            u32(n),
                            bx.word,
                            by.word + u32(part.row0),
                            u32(y_stride),
                            u32(static_cast<int64_t>(w.row_stride())),
                            std::min<uint32_t>(groups, 32768),
                            bs.word,
                            tpr,
                            u32(stride)};
      uint32_t gx = push.groups_x, gy = (groups + push.groups_x - 1) / push.groups_x, gz = u32((n + 7) / 8);
      const char* shader = tiled ? shaders.tiled : shaders.rows;
      if (tiled) {
        gx = u32((part.rows + 63) / 64), gy = u32((n + 31) / 32), gz = 1;
        if (gx > 65535 || gy > 65535) throw Error(fmt::format("{}: a product of {} tokens is too large", w.name, n));
        counters_.tiled++;
        if (const char* coop = coop_shader(shaders)) shader = coop, counters_.coop++;  // the same tile and grid
      }
      const uint32_t spec = tiled ? 0 : tpr;  // decode's pipeline per shape class
      if (bs.buffer)  // Q4_1/Q5_1: the activations' block sums too
        dispatch(shader, {bw, bx, by, bs}, &push, sizeof push, gx, gy, gz, spec);
      else
        dispatch(shader, {bw, bx, by}, &push, sizeof push, gx, gy, gz, spec);
    }
  }

  bool kv_gather(const PagedKvLayerView& view, const int32_t* table, const int32_t* positions, int64_t n, int64_t width,
                 Act dst) {
    if (on_cpu_ || view.k_format.type() != KvType::F32 || view.k_stride != width * 4 || !device_memory(view.k))
      return false;
    if (n <= 0) return true;
    auto [idx, bidx] = stage(static_cast<size_t>(n) * sizeof(uint32_t));
    for (int64_t i = 0; i < n; i++) {
      const int64_t pos = positions ? positions[i] : i;
      reinterpret_cast<uint32_t*>(idx)[i] =
          u32(int64_t{table[pos / view.block_size]} * view.block_size + pos % view.block_size);
    }
    const vk::Binding bk = bind_memory(view.k);
    gather(bind(dst, n * width, Use::Out), bk, bidx, n, width);
    return true;
  }

  // dst row i = src row idx[i] (rows of dim floats; idx the staged uint32 row numbers): eltwise.comp's gather.
  void gather(const vk::Binding& dst, const vk::Binding& src, const vk::Binding& idx, int64_t n, int64_t dim) {
    const EltPush push{
        static_cast<uint32_t>(Elt::Gather), u32(n * dim), dst.word, src.word, u32(dim), idx.word, 0, 0.0f, 0.0f};
    uint32_t gx, gy;
    grid(n * dim, &gx, &gy);
    dispatch("eltwise", {dst, src, idx}, &push, sizeof push, gx, gy);
  }

  // Prefill's product on matrix units for this type, or null: the tiled kernel.
  const char* coop_shader(const MatmulShaders& m) const {
    return !coop_on_ ? nullptr : coop_emulated_ ? m.coop_emu : m.coop;
  }

  // The matrix units against the tiled kernel on one F16 product of 80 rows by 40 tokens (fp16 weights and
  // activations, so only the order of the fp32 sums differs) before any model uses them: a device whose
  // cooperative matrices disagree keeps the tiled kernel, and the summary line says why.
  void coop_self_check() {
    const int64_t rows = 80, cols = 96, n = 40;
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<uint16_t> w(static_cast<size_t>(rows * cols));
    std::vector<float> x(static_cast<size_t>(n * cols));
    for (auto& v : w) v = fp32_to_fp16(dist(rng));
    for (auto& v : x) v = fp16_to_fp32(fp32_to_fp16(dist(rng)));
    const size_t wb = w.size() * 2, xb = x.size() * 4, yb = static_cast<size_t>(2 * n * rows) * 4;
    auto bw = ctx_.create(wb, vk::Memory::Weights, "the matrix-unit self-check's weights");
    auto bx = ctx_.create(xb, vk::Memory::Activations, "the matrix-unit self-check's activations");
    auto by = ctx_.create(yb, vk::Memory::Activations, "the matrix-unit self-check's products");
    ctx_.upload(*bw, 0, w.data(), wb);
    std::memcpy(bx->mapped, x.data(), xb);
    MatmulPush push{u32(rows), u32(cols), u32(n), 0, 0, u32(rows), u32(cols * 2), 0, 0, 0, u32(cols)};
    const vk::Binding lw = ctx_.bind(*bw, 0, wb), lx = ctx_.bind(*bx, 0, xb), ly = ctx_.bind(*by, 0, yb);
    const uint32_t gx = u32((rows + 63) / 64), gy = u32((n + 31) / 32);
    std::string failure;
    try {
      ctx_.dispatch("matmul_tiled_F16", {lw, lx, ly}, &push, sizeof push, gx, gy);
      push.y_off = u32(n * rows);
      ctx_.dispatch("matmul_coop_F16", {lw, lx, ly}, &push, sizeof push, gx, gy);
      ctx_.flush();
      const auto* y = static_cast<const float*>(by->mapped);
      for (int64_t t = 0; t < n && failure.empty(); t++)
        for (int64_t r = 0; r < rows && failure.empty(); r++) {
          double scale = 0;
          for (int64_t c = 0; c < cols; c++) scale += std::fabs(fp16_to_fp32(w[r * cols + c]) * x[t * cols + c]);
          const float a = y[t * rows + r], b = y[n * rows + t * rows + r];
          if (!(std::fabs(a - b) <= 1e-4 * scale + 1e-6))
            failure = fmt::format("the self-check's product differs (row {}, token {}: {} on the tiled kernel, {})", r,
                                  t, a, b);
        }
    } catch (const Error& e) {
      ctx_.discard();
      failure = fmt::format("the self-check failed: {}", e.what());
    }
    ctx_.destroy(*bw);
    ctx_.destroy(*bx);
    ctx_.destroy(*by);
    coop_on_ = failure.empty();
    coop_note_ = failure;
  }

  // x's n rows of `cols` rounded as the CPU rounds them for a product with this weight type (its activation
  // format: Q8_0, Q8_1 or Q8_K), in the backend's scratch buffer; for Q8_1 *sums = the blocks' scaled sums.
  vk::Binding quantized_activations(const vk::Binding& x, int64_t x_stride, GgmlType type, int64_t n, int64_t cols,
                                    vk::Binding* sums) {
    enum Mode : uint32_t { kQ8_0, kQ8_K, kQ8_1, kF16, kBF16 };
    const Mode mode = type == GgmlType::F16                        ? kF16
                      : type == GgmlType::BF16                     ? kBF16
                      : activation_format(type) == ActFormat::Q8_K ? kQ8_K
                      : activation_format(type) == ActFormat::Q8_1 ? kQ8_1
                                                                   : kQ8_0;
    const int64_t floats = n * cols, blocks = floats / (mode == kQ8_K ? 256 : mode >= kF16 ? 1 : 32);
    const auto bytes = static_cast<size_t>(floats + (mode == kQ8_1 ? blocks : 0)) * sizeof(float);
    if (!xq_ || xq_->bytes < bytes) {
      if (xq_) retired_.push_back(std::move(xq_));
      xq_ = ctx_.create(bytes, vk::Memory::Activations, "the rounded activations' scratch buffer");
    }
    const vk::Binding out = ctx_.bind(*xq_, 0, bytes);
    struct {
      uint32_t mode, blocks, x_off, y_off, s_off, cols, x_stride;
    } push{mode, u32(blocks), x.word, out.word, out.word + u32(floats), u32(cols), u32(x_stride)};
    uint32_t gx, gy;
    grid(blocks, &gx, &gy);
    dispatch("quantize_act", {x, out}, &push, sizeof push, gx, gy);
    if (mode == kQ8_1) *sums = out, sums->word = push.s_off;
    return out;
  }

  void elt(Elt op, const vk::Binding& x, const vk::Binding& y, int64_t n, int64_t dim, int64_t xs, int64_t ys, float a,
           float b = 0.0f) {
    if (!gelu_) {
      gelu_ = ctx_.create(65536 * sizeof(uint16_t), vk::Memory::Activations, "the GELU table");
      std::memcpy(gelu_->mapped, gelu_fp16_table(), 65536 * sizeof(uint16_t));
    }
    const EltPush push{static_cast<uint32_t>(op), u32(n), x.word, y.word, u32(dim), u32(xs), u32(ys), a, b};
    uint32_t gx, gy;
    grid(n, &gx, &gy);
    // The table is bound whole only where it is read.
    const size_t table = op == Elt::GeluMul ? 65536 * sizeof(uint16_t) : sizeof(uint32_t);
    dispatch("eltwise", {x, y, ctx_.bind(*gelu_, 0, table)}, &push, sizeof push, gx, gy);
  }
  void binary(Elt op, Act x, Act y, int64_t n, float a = 0.0f, float b = 0.0f) {
    if (n <= 0) return;
    const vk::Binding by = bind(y, n, Use::In), bx = bind(x, n, Use::InOut);
    elt(op, bx, by, n, 1, 0, 0, a, b);
  }
  void unary(Elt op, Act x, int64_t n, float a, Use use) {
    if (n <= 0) return;
    const vk::Binding bx = bind(x, n, use);
    elt(op, bx, bx, n, 1, 0, 0, a);
  }

  std::unique_ptr<Backend> host_;
  vk::Context ctx_;
  std::map<uintptr_t, std::unique_ptr<vk::Buffer> > acts_;  // by mapped address
  std::map<std::pair<const void*, size_t>, DeviceWeight> weights_;
  std::vector<std::unique_ptr<vk::Buffer> > weight_chunks_;
  size_t chunk_used_ = 0, uploaded_ = 0, kv_bytes_ = 0;
  VulkanOptions o_;
  bool on_cpu_ = false;       // the current layer runs on the CPU (--gpu-layers)
  bool coop_on_ = false, coop_emulated_ = false;  // prefill on matrix units (or their model: tests)
  std::string coop_note_;                         // why not
  ActBuffer ffn_h_, ffn_h2_, gather_, route_;  // ffn_many's, gather_rows' and moe_route's scratch (released first)
  std::unordered_map<const float*, DeviceVector> vectors_;
  std::vector<std::unique_ptr<vk::Buffer> > retired_;
  std::vector<std::unique_ptr<vk::Buffer> > staging_;
  size_t stage_chunk_ = 0, stage_at_ = 0;
  std::vector<CopyBack> copy_back_;
  std::unique_ptr<vk::Buffer> gelu_, xq_;
  DeviceCounters counters_;
  std::vector<std::pair<const int32_t*, int64_t> > attn_tables_;  // attention()'s per-call lists, kept
  std::vector<size_t> attn_which_;
  std::vector<int64_t> attn_start_;
};

}  // namespace

std::unique_ptr<Backend> make_vulkan_backend(const VulkanOptions& options, std::unique_ptr<Backend> host) {
  return std::make_unique<VulkanBackend>(options, std::move(host));
}

const DeviceCounters* device_counters(const Backend& backend) {
  auto* v = dynamic_cast<const VulkanBackend*>(&backend);
  return v ? &const_cast<VulkanBackend*>(v)->counters() : nullptr;
}

#endif

}  // namespace kestrel
