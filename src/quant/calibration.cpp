#include "quant/calibration.h"

#include <memory>
#include <mutex>
#include <random>
#include <utility>

#include "backend/forwarding_backend.h"
#include "runtime/loaded_model.h"
#include "measure/perplexity.h"

namespace kestrel {
namespace {

// Forwards every operator to the real backend, recording the inputs of
// matrix products first. The fused FFN of MoE layers is unfused (the base
// class's default) so that each expert's down projection is seen too.
class RecordingBackend final : public ForwardingBackend {
 public:
  RecordingBackend(Backend& inner, CalibrationStats& stats, const CalibrationOptions& o)
      : ForwardingBackend(inner), stats_(stats), o_(o) {}

  std::string describe() const override { return in_.describe() + ", recording activations"; }
  void matmul(const Weight& w, Act x, int64_t n, Act y) override {
    const Weight* ws[1] = {&w};
    record(ws, 1, host(x), n);
    in_.matmul(w, x, n, y);
  }
  void matmul_many(const Weight* const* ws, int count, Act x, int64_t n, const Act* ys) override {
    record(ws, count, host(x), n);
    in_.matmul_many(ws, count, x, n, ys);
  }
  void swiglu(const Weight& gate, const Weight& up, Act x, int64_t n, Act out, Act scratch) override {
    const Weight* ws[2] = {&gate, &up};
    record(ws, 2, host(x), n);
    in_.swiglu(gate, up, x, n, out, scratch);
  }
  void geglu(const Weight& gate, const Weight& up, Act x, int64_t n, Act out, Act scratch) override {
    const Weight* ws[2] = {&gate, &up};
    record(ws, 2, host(x), n);
    in_.geglu(gate, up, x, n, out, scratch);
  }
  void qkv_rope(const Weight* const* wqkv, const float* const* biases, Act x, int64_t n, const int32_t* positions,
                const RopeParams& rope, const QkvShape& shape, const Act* out) override {
    record(wqkv, 3, host(x), n);
    in_.qkv_rope(wqkv, biases, x, n, positions, rope, shape, out);
  }
  void ffn_many(const FfnRef* ffns, int count, const Act* xs, const int64_t* ns, const Act* ys) override {
    Backend::ffn_many(ffns, count, xs, ns, ys);
  }

 private:
  void record(const Weight* const* ws, int count, const float* x, int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);  // the model calls from one thread; cheap insurance
    auto it = stats_.site_of.find(ws[0]->name);
    if (it == stats_.site_of.end()) {
      ActivationSite s;
      s.cols = ws[0]->cols();
      for (int i = 0; i < count; i++) s.weights.push_back(ws[i]->name);
      s.abs_sum.assign(static_cast<size_t>(s.cols), 0.0);
      s.sq_sum.assign(static_cast<size_t>(s.cols), 0.0);
      if (o_.hessian) s.xtx.assign(static_cast<size_t>(s.cols * s.cols), 0.0);
      stats_.sites.push_back(std::move(s));
      const int index = static_cast<int>(stats_.sites.size()) - 1;
      for (int i = 0; i < count; i++) stats_.site_of[ws[i]->name] = index;
      it = stats_.site_of.find(ws[0]->name);
    }
    ActivationSite& s = stats_.sites[static_cast<size_t>(it->second)];
    const int64_t d = s.cols;
    for (int64_t t = 0; t < n; t++) {
      const float* row = x + t * d;
      for (int64_t c = 0; c < d; c++) {
        s.abs_sum[c] += std::fabs(row[c]);
        s.sq_sum[c] += double(row[c]) * row[c];
      }
      if (o_.hessian)
        for (int64_t i = 0; i < d; i++) {
          double* h = s.xtx.data() + i * d;
          const double xi = row[i];
          for (int64_t j = 0; j < d; j++) h[j] += xi * row[j];
        }
      // Reservoir sampling: every row seen so far is kept with equal probability.
      const int64_t seen = s.n_rows++;
      if (s.n_samples() < o_.max_samples) {
        s.samples.insert(s.samples.end(), row, row + d);
      } else {
        const auto k = std::uniform_int_distribution<int64_t>(0, seen)(rng_);
        if (k < o_.max_samples) std::copy_n(row, d, s.samples.begin() + k * d);
      }
    }
  }

  CalibrationStats& stats_;
  const CalibrationOptions& o_;
  std::mutex mu_;
  std::mt19937_64 rng_{12345};
};

}  // namespace

CalibrationStats collect_activation_stats(const std::string& model_path, const std::string& text,
                                          const CalibrationOptions& o) {
  CalibrationStats stats;
  LoadOptions eo;
  eo.model_path = model_path;
  eo.n_threads = o.n_threads;
  eo.n_ctx = o.n_ctx;
  eo.repack_weights = false;
  eo.wrap_backend = [&](Backend& inner) -> std::unique_ptr<Backend> {
    return std::make_unique<RecordingBackend>(inner, stats, o);
  };
  LoadedModel e = LoadedModel::load(eo);
  PerplexityOptions po;
  po.n_ctx = o.n_ctx;
  po.max_chunks = o.max_chunks;
  const PerplexityResult r = perplexity(e, text, po, o.progress);
  stats.n_tokens = r.n_tokens;
  return stats;
}

}  // namespace kestrel
