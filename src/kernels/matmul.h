#pragma once
// y[n][rows] = x[n][cols] . W^T for a weight W of any computable GGUF format.
// Quantized weights take activations quantized to Q8_0 first (ggml's scheme,
// so results match llama.cpp closely); BF16 weights on CPUs with AVX-512 BF16
// take activations rounded to BF16 (as llama.cpp does); other float weights
// take float activations.
//
// Kernels, best first: Q8_0/Q4_0 weights the backend repacked at load
// (Weight::packed, packed_q8.h: 16-row groups, VNNI, every batch size);
// then the file layout: VNNI 8x4 int8 tiles for batches and row dots for one
// token (bit-identical to llama.cpp); AVX-512 4x4 float tiles; row dots.
//
// Work happens in two steps: prepare() converts the activations once for a
// weight format, compute_rows() runs any row range of any weight of that
// format against them. The fused entry points use that split: several
// weights sharing one input share one preparation and one parallel pass.
#include <cstdint>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/dot.h"
#include "kernels/kquant_dot.h"
#include "hw/tuning.h"
#include "kernels/gemm_q8.h"
#include "kernels/packed_q8.h"
#include "kernels/qdot.h"
#include "formats/weight.h"

namespace kestrel {

class Matmul {
 public:
  explicit Matmul(const DotKernels& kernels, const Tuning& tuning = kestrel::tuning()) : k_(kernels), tuning_(tuning) {}

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

  const DotKernels& kernels() const { return k_; }

 private:
  void prepare(ThreadPool& pool, const Weight& w, const float* x, int64_t n);
  // Rows [r0, r1) of w for all n prepared tokens, into y with row stride ldy.
  void compute_rows(const Weight& w, int64_t r0, int64_t r1, float* y, int64_t ldy) const;
  // Activations in the format ggml pairs with `weight` (qdot.h), into xact_.
  void quantize_activations_for(ThreadPool& pool, GgmlType weight, const float* x, int64_t n, int64_t cols);
  const BlockQ8_K* q8k(int64_t token) const {
    return reinterpret_cast<const BlockQ8_K*>(xact_.data() + token * xact_stride_);
  }
  // Activations for repacked weights (packed_q8.h), any kind.
  void prepare_packed(ThreadPool& pool, const Weight& w, const float* x, int64_t n);
  // compute_rows for the formats of qdot.h.
  void compute_rows_qdot(const Weight& w, int64_t r0, int64_t r1, float* y, int64_t ldy) const;
  // Rows per work unit: the micro-kernel's height on the tiled paths.
  int64_t row_granule(const Weight& w) const;

  const DotKernels& k_;
  Tuning tuning_;
  const float* x_ = nullptr;          // float activations of the current call
  int64_t n_ = 0;
  bool tiled_ = false;                // the current call uses a tiled kernel
  bool bf16_ = false;                 // BF16 weights x BF16-rounded activations (gemm_bf16.h)
  bool packed_ = false;               // the current call's weights are repacked (packed_q8.h)
  std::vector<BlockQ8_0> xq_;         // quantized activations, grown once, reused every call
  const QTypeDots* qdot_ = nullptr;       // the current call's qdot.h kernel, if any
  std::vector<uint8_t> xact_;         // activations in its format, xact_stride_ bytes per token
  size_t xact_stride_ = 0;
  std::vector<int32_t> xsums_;        // their per-lane sums, for the tiled int8 kernel
  QuantizedActivations acts_;
  std::vector<uint16_t> xbf16_;       // activations rounded to BF16 for BF16 weights
  std::vector<float> xrounded_;       // activations rounded through F16 for F16 weights
  std::vector<uint8_t> xpacked_;      // activations in the packed kernels' token tiles
  PackedActivations packed_acts_;
};

// What runs for a weight format on this kernel table, e.g. "q4_0 x q8_0 int8 dot (avx512)";
// `repacked`: the backend repacks weights of this format at load.
std::string matmul_kernel_name(const DotKernels& k, GgmlType type, bool repacked = false);

// Dequantizes row `row` of w into out (w.cols() floats).
void dequantize_weight_row(const Weight& w, int64_t row, float* out);

}  // namespace kestrel
