#pragma once
// Activation statistics for activation-aware quantization: the model runs
// over a calibration text (in perplexity's chunks) behind a backend that
// records, for every input that matrices read ("site": q/k/v share one,
// gate/up another), the mean magnitude of each input channel, a sample of
// input rows, and optionally the sum of x xᵀ (GPTQ's Hessian, up to a factor).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kestrel {

struct ActivationSite {
  std::vector<std::string> weights;  // the matrices that read this input
  int64_t cols = 0;
  int64_t n_rows = 0;           // rows (tokens) seen
  std::vector<double> abs_sum;  // sum over rows of |x_c|
  std::vector<double> sq_sum;   // sum over rows of x_c^2 (an importance matrix's in_sum2)
  std::vector<float> samples;   // up to CalibrationOptions::max_samples rows (reservoir sample)
  std::vector<double> xtx;      // cols x cols sum of x xᵀ (with CalibrationOptions::hessian)

  double mean_abs(int64_t c) const { return n_rows ? abs_sum[c] / static_cast<double>(n_rows) : 0.0; }
  int64_t n_samples() const { return cols ? static_cast<int64_t>(samples.size()) / cols : 0; }
};

struct CalibrationStats {
  std::vector<ActivationSite> sites;
  std::map<std::string, int> site_of;  // weight name -> index in sites
  int64_t n_tokens = 0;
  const ActivationSite* find(const std::string& weight) const {
    const auto it = site_of.find(weight);
    return it == site_of.end() ? nullptr : &sites[static_cast<size_t>(it->second)];
  }
};

struct CalibrationOptions {
  int64_t n_ctx = 128;     // chunk length
  int64_t max_chunks = 0;  // 0: the whole text
  int max_samples = 256;   // input rows kept per site
  bool hessian = false;    // also accumulate x xᵀ per site
  int n_threads = 0;
  // After each chunk: (chunk index, chunks in all, running perplexity).
  std::function<void(int64_t, int64_t, double)> progress;
};

// Throws Error when the text is shorter than one chunk or the model cannot load.
CalibrationStats collect_activation_stats(const std::string& model_path, const std::string& text,
                                          const CalibrationOptions& options);

}  // namespace kestrel
