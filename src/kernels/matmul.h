#pragma once
// y[n][rows] = x[n][cols] . W^T for a weight W of any computable GGUF format,
// with the kernel the table gives for its type (kernels/matmul_kernels.h):
// quantized weights take activations quantized to the format ggml pairs
// with them (so results match llama.cpp closely), BF16 weights on CPUs with
// AVX-512 BF16 take activations rounded to BF16 (as llama.cpp does), other
// float weights take float activations; weights the backend repacked at load
// take their packed kernels.
//
// Work happens in two steps: prepare() converts the activations once for a
// weight's entry, then its row kernel runs any row range of any weight of
// that type against them. The fused entry points use that split: several
// weights sharing one input share one preparation and one parallel pass.
#include <cstdint>
#include <string>
#include <vector>

#include "core/function_ref.h"
#include "core/thread_pool.h"
#include "formats/weight.h"
#include "hw/tuning.h"
#include "kernels/matmul_kernels.h"

namespace kestrel {

class Matmul {
 public:
  explicit Matmul(const MatmulKernels& kernels = matmul_kernels(), const Tuning& tuning = kestrel::tuning())
      : k_(kernels), tuning_(tuning) {}

  // Throws Error naming the weight if its format has no kernel.
  void run(ThreadPool& pool, const Weight& w, const float* x, int64_t n, float* y);

  // ys[i] = x . ws[i]^T for weights with the same format and row length:
  // activations prepared once, all rows in one parallel pass.
  void run_many(ThreadPool& pool, const Weight* const* ws, int count, const float* x, int64_t n, float* const* ys);

  // run_many, then epilogue(i, r0, r1) on the thread that computed rows
  // [r0, r1) of weight i, while they are in cache. Ranges are multiples of
  // `align` rows (except at a weight's end), e.g. whole attention heads.
  void run_many_then(ThreadPool& pool, const Weight* const* ws, int count, const float* x, int64_t n, float* const* ys,
                     int64_t align, FunctionRef<void(int, int64_t, int64_t)> epilogue);

  // out = act(x . gate^T) * (x . up^T), the SwiGLU (or GeGLU) applied by each
  // thread to the rows it just computed (up_scratch: n * rows floats).
  enum class GateActivation { Silu, Gelu };
  void run_swiglu(ThreadPool& pool, const Weight& gate, const Weight& up, const float* x, int64_t n, float* out,
                  float* up_scratch, GateActivation act = GateActivation::Silu);

  // Whether run_many / run_swiglu can take these weights together.
  static bool can_share_input(const Weight& a, const Weight& b);

  const MatmulKernels& kernels() const { return k_; }

 private:
  // The weight's entry, with the n tokens' activations prepared for it in in_.
  const MatmulKernel& prepare(ThreadPool& pool, const Weight& w, const float* x, int64_t n);
  // Rows [r0, r1) of w for all prepared tokens, into y with row stride ldy.
  void compute_rows(const MatmulKernel& k, const Weight& w, int64_t r0, int64_t r1, float* y, int64_t ldy) const {
    (in_.n >= 2 ? k.many : k.one)(k, w, r0, r1, in_, y, ldy);
  }
  int64_t row_granule(const MatmulKernel& k) const { return in_.n >= 2 ? k.granule_many : k.granule_one; }
  // Each token's row in the entry's activation format, into act_.
  void quantize(ThreadPool& pool, const MatmulKernel& k, const float* x, int64_t n, int64_t cols);

  const MatmulKernels& k_;
  Tuning tuning_;
  MatmulInput in_;                 // the current call's activations
  std::vector<uint8_t> act_;       // quantized activations, grown once, reused every call
  std::vector<int32_t> sums_;      // their per-lane sums, for the int8 tiles
  std::vector<uint16_t> xbf16_;    // activations rounded to BF16 for BF16 weights
  std::vector<float> xrounded_;    // activations rounded through F16 for F16 weights
  std::vector<uint8_t> xpacked_;   // activations in the packed kernels' token tiles (from tile_start())
  static constexpr uintptr_t kTileAlign = 4096, kTileOffset = 2048;
  static uint8_t* tile_start(uint8_t* p);
};


// Dequantizes row `row` of w into out (w.cols() floats).
void dequantize_weight_row(const Weight& w, int64_t row, float* out);

}  // namespace kestrel
