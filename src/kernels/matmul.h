#pragma once
// y[n][rows] = x[n][cols] . W^T for a weight W of any computable GGUF format.
// Quantized weights take activations quantized to Q8_0 first (ggml's scheme,
// so results match llama.cpp closely); float weights take float activations.
#include <cstdint>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/dot.h"
#include "model/weight.h"

namespace kestrel {

class Matmul {
 public:
  explicit Matmul(const DotKernels& kernels) : k_(kernels) {}

  // Throws Error naming the weight if its format has no kernel.
  void run(ThreadPool& pool, const Weight& w, const float* x, int64_t n, float* y);

  const DotKernels& kernels() const { return k_; }

 private:
  const DotKernels& k_;
  std::vector<BlockQ8_0> xq_;     // quantized activations, grown once, reused every call
  std::vector<int32_t> xsums_;    // their per-lane sums, for the tiled int8 kernel
};

// What runs for a weight format on this kernel table, e.g. "q4_0 x q8_0 int8 dot (avx512)".
std::string matmul_kernel_name(const DotKernels& k, GgmlType type);

// Dequantizes row `row` of w into out (w.cols() floats).
void dequantize_weight_row(const Weight& w, int64_t row, float* out);

}  // namespace kestrel
