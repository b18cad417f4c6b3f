#pragma once
// Helpers shared by the tests: where ../shared is, reading reference files.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "formats/block_formats.h"
#include "hw/cpu_features.h"
#include "kernels/qdot.h"
#include "gguf/gguf_writer.h"
#include "model/synth.h"
#include "formats/weight.h"
#include "runtime/loaded_model.h"
#include "runtime/generator.h"
#include "runtime/proposer.h"
#include "model/batch_io.h"

namespace kestrel::test {

// The qdot.h SIMD tables this CPU can run (each is tested against the scalar one).
inline std::vector<const QDotTable*> simd_qdot_tables() {
  std::vector<const QDotTable*> t;
  const auto& f = cpu_features();
  if (f.avx2 && f.fma && f.f16c)
    if (const QDotTable* k = avx2_qdots()) t.push_back(k);
  if (f.avx512vnni && f.avx512vl)
    if (const QDotTable* k = avx512vnni_qdots()) t.push_back(k);
  return t;
}

// n normally distributed floats, the same for the same seed.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A rows x cols matrix of random weights quantized to `type`, with a Weight
// viewing it (the bytes move with the struct; do not copy it).
struct QuantMatrix {
  std::vector<uint8_t> bytes;
  Weight w;
};
inline QuantMatrix quantized_matrix(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  QuantMatrix m;
  const auto f = random_floats(static_cast<size_t>(rows * cols), seed);
  const size_t rb = row_bytes(type, cols);
  m.bytes.resize(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; r++) quantize_row(type, f.data() + r * cols, m.bytes.data() + r * rb, cols);
  m.w = Weight{"blk.0.test.weight", type, {cols, rows}, m.bytes.data(), m.bytes.size(), {}, {}};
  return m;
}

// Model-level tests run a model without the scheduler that allocates its
// cache in the engine: they allocate the batch's positions here by hand (as
// the scheduler would: each sequence's window slid to its first position in
// the batch, every position it writes reserved), place the batch and run it.
inline void allocate_by_hand(const Batch& b, PagedKvCache& kv) {
  const int64_t n = b.size();
  if (kv.n_groups() > 1)
    for (int64_t i = 0; i < n; i++) {
      bool first = true;
      for (int64_t j = 0; j < n && first; j++)
        first = b.seq_ids[j] != b.seq_ids[i] || b.positions[j] > b.positions[i] ||
                (b.positions[j] == b.positions[i] && j >= i);
      if (first) kv.slide(b.seq_ids[i], b.positions[i]);
    }
  for (int64_t i = 0; i < n; i++)
    if (kv.length(b.seq_ids[i]) < b.positions[i] + 1) kv.reserve(b.seq_ids[i], b.positions[i] + 1);
}
inline void forward_alone(Model& m, PagedKvCache& kv, const Batch& b, float* logits, float* hidden = nullptr) {
  allocate_by_hand(b, kv);
  BatchPlacement place(std::max<int64_t>(b.size(), 1));
  place_batch(b, kv, m.config().n_vocab, place);
  m.forward(b, place, kv.store(), logits, hidden);
}
inline void forward_alone(LoadedModel& e, const Batch& b, float* logits, float* hidden = nullptr) {
  forward_alone(*e.model, *e.kv, b, logits, hidden);
}
// The MTP block likewise, over positions the trunk's rows hold already (or reserved here).
inline void forward_mtp_alone(Model& m, PagedKvCache& kv, const Batch& b, const float* hidden_in, float* logits,
                              float* hidden_out) {
  allocate_by_hand(b, kv);
  BatchPlacement place(std::max<int64_t>(b.size(), 1));
  place_batch(b, kv, m.config().n_vocab, place);
  m.forward_mtp(b, place, kv.store(), hidden_in, logits, hidden_out);
}

inline std::string shared_dir() {
  if (const char* env = std::getenv("KESTREL_SHARED_DIR")) return env;
  return KESTREL_SHARED_DIR;
}
inline std::string shared(const std::string& rel) { return shared_dir() + "/" + rel; }
// The model most tests load (../shared/models/stories260K.gguf).
inline const std::string kStories = shared("models/stories260K.gguf");

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(in), {}};
}

inline nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_text(path)); }

inline std::vector<float> read_f32(const std::string& path) {
  const std::string bytes = read_text(path);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// A scratch directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kestrel-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// LoadedModel options for a model under ../shared with 2 threads and a context
// (0: the model's own) — the setup most tests start from.
inline LoadOptions shared_engine(const std::string& rel, int64_t n_ctx = 0) {
  LoadOptions o;
  o.model_path = shared(rel);
  o.n_threads = 2;
  o.n_ctx = n_ctx;
  return o;
}

// A random-weight DeepSeek-V3-shaped model (synth preset tiny-v3, float32)
// with one multi-token-prediction block, written to path; returns path.
// A synth preset as it is (float32), written to path; returns path.
inline std::string write_synth_preset(const std::string& path, const std::string& arch, const std::string& preset) {
  SynthOptions so;
  so.shape = synth_preset(arch, preset);
  so.type = GgmlType::F32;
  synth_model(so).write_file(path);
  return path;
}
// DeepSeek-V4's tiny preset (with its MTP block), float32.
inline std::string write_synth_v4_model(const std::string& path) { return write_synth_preset(path, "deepseek4", "tiny"); }

// The error loading arch's tiny F32 synth file fails with once `edit` changed it (written to path), or
// "(loaded without an error)".
inline std::string load_error_of_edited_synth(const std::string& arch, const std::function<void(GgufWriter&)>& edit,
                                              const std::string& path) {
  SynthOptions so;
  so.shape = synth_preset(arch, "tiny");
  so.type = GgmlType::F32;
  GgufWriter w = synth_model(so);
  edit(w);
  w.write_file(path);
  LoadOptions o;
  o.model_path = path;
  o.n_threads = 1;
  try {
    LoadedModel::load(o);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(loaded without an error)";
}
inline std::string write_synth_glm4moe_model(const std::string& path) { return write_synth_preset(path, "glm4moe", "tiny"); }

inline std::string write_synth_mtp_model(const std::string& path) {
  SynthOptions so;
  so.shape = synth_preset("deepseek2", "tiny-v3");
  so.shape.ds.nextn = 1;
  so.type = GgmlType::F32;
  synth_model(so).write_file(path);
  return path;
}

// A copy of a GGUF with every tensor stored as F32 (the same numbers: F16
// and the block formats widen exactly), written to path; returns path.
inline std::string widen_to_f32(const std::string& src, const std::string& path) {
  const GgufFile f = GgufFile::open(src);
  GgufWriter w;
  for (const auto& [k, v] : f.metadata()) w.set(k, v);
  w.set_u32("general.file_type", 0);
  for (const auto& t : f.tensors()) {
    const GgufTensorInfo* info = &t;
    w.add_tensor(t.name, GgmlType::F32, t.ne, [info](uint8_t* dst, size_t) {
      dequantize_row(info->type, info->data, reinterpret_cast<float*>(dst), info->n_elements());
    });
  }
  w.write_file(path);
  return path;
}

// Greedy generation of max_tokens after prompt, every logits row (prompt rows too) in order.
inline std::vector<float> all_logits(LoadedModel& e, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  GenerationParams p;
  p.max_tokens = max_tokens;
  p.sampling.temperature = 0.0f;
  p.all_logits = true;
  std::vector<float> rows;
  GenerationCallbacks cb;
  cb.on_logits = [&](const float* r, int64_t n) { rows.insert(rows.end(), r, r + n); };
  generate(e, prompt, p, cb);
  return rows;
}

// ../shared/reference/compat/models/<cell>.gguf
inline std::string compat_model(const std::string& cell) { return shared("reference/compat/models/" + cell + ".gguf"); }

// A proposer whose drafts (and, if given, whose view of the target's hidden
// states) are a test's functions: oracles, part-wrong drafts, recording.
class FunctionProposer : public Proposer {
 public:
  using Draft = std::function<std::vector<int32_t>(const std::vector<int32_t>& history, int max)>;
  using Observe = std::function<void(int64_t first, const int32_t* tokens, const float* hidden, int64_t n, bool settled)>;
  explicit FunctionProposer(Draft draft, Observe observe = nullptr)
      : draft_(std::move(draft)), observe_(std::move(observe)) {}
  const char* name() const override { return "test"; }
  bool wants_hidden() const override { return static_cast<bool>(observe_); }
  void observe(int32_t, int64_t first, const int32_t* tokens, const float* hidden, int64_t n, bool settled) override {
    observe_(first, tokens, hidden, n, settled);
  }
  std::vector<std::vector<int32_t>> propose(const std::vector<DraftRequest>& batch) override {
    std::vector<std::vector<int32_t>> out;
    for (const auto& r : batch) out.push_back(draft_(*r.history, r.max));
    return out;
  }

 private:
  Draft draft_;
  Observe observe_;
};

}  // namespace kestrel::test
