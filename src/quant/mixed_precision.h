#pragma once
// Per-tensor mixed precision: each matrix's sensitivity is measured on the
// calibration text as the KL divergence (against the unquantized model) of
// the model with only that matrix rounded to each candidate type; assuming
// the divergences add up, a greedy search then picks per-tensor types —
// starting from the narrowest type everywhere and repeatedly widening the
// matrix that buys the most divergence per byte — until the predicted
// divergence meets --target-kld, or while the file still fits --target-size.
// One model run per (matrix, type): meant for models that run in seconds.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "formats/ggml_types.h"

namespace kestrel {

struct MixedPrecisionOptions {
  std::vector<GgmlType> ladder;  // candidate types, narrowest first
  double target_kld = -1;        // >= 0: the smallest file whose predicted KLD is within this
  int64_t target_bytes = -1;     // >= 0: the lowest predicted KLD within this many tensor bytes
  int64_t n_ctx = 128;
  int64_t max_chunks = 4;  // calibration chunks per measurement
  int n_threads = 0;
  std::function<void(const std::string&)> progress;
};

struct TensorPlan {
  std::string name;
  GgmlType type;
  int64_t bytes = 0;
  double kld = 0;  // measured with only this tensor rounded to `type`
};

struct MixedPrecisionPlan {
  std::vector<TensorPlan> tensors;
  std::map<std::string, GgmlType> types;  // for RequantizeOptions::tensor_types
  double predicted_kld = 0;
  int64_t tensor_bytes = 0;  // all tensors, as planned
  bool met = true;           // false: even the widest types miss --target-kld, or the narrowest exceed --target-size
};

// Throws Error when neither target is set, the text is shorter than a chunk,
// or the model cannot be read.
MixedPrecisionPlan plan_mixed_precision(const std::string& model_path, const std::string& calib_text,
                                        const MixedPrecisionOptions& options);

}  // namespace kestrel
