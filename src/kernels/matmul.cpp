#include "kernels/matmul.h"

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/gemm_float.h"
#include "kernels/gemm_q8.h"

namespace kestrel {

std::string matmul_kernel_name(const DotKernels& k, GgmlType type) {
  const char* isa = isa_name(k.isa);
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16: {
      const std::string w = type == GgmlType::F32 ? "f32" : type == GgmlType::F16 ? "f16" : "bf16";
      if (k.isa == IsaLevel::Avx512) return fmt::format("{} x f32 fma: row dot for 1 token, tiled 4x4 gemm for more (avx512)", w);
      return fmt::format("{} x f32 fma row dot ({})", w, isa);
    }
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
      if (gemm_q8_available() && k.isa == IsaLevel::Avx512)
        return fmt::format("{} x q8_0 tiled 4x4 int8 gemm, vpdpbusd (avx512 vnni)", type == GgmlType::Q8_0 ? "q8_0" : "q4_0");
      return fmt::format("{} x q8_0 int8 dot, activations quantized per row ({})", type == GgmlType::Q8_0 ? "q8_0" : "q4_0", isa);
    default: return "none";
  }
}

void dequantize_weight_row(const Weight& w, int64_t row, float* out) {
  dequantize_row(w.type, w.row(row), out, w.cols());
}

void Matmul::run(ThreadPool& pool, const Weight& w, const float* x, int64_t n, float* y) {
  const int64_t cols = w.cols(), rows = w.rows();
  const size_t stride = w.row_stride();
  const auto* base = static_cast<const uint8_t*>(w.data);

  switch (w.type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16: {
      if (k_.isa == IsaLevel::Avx512 && n >= 2) {
        // Groups of 4 rows per thread, the micro-kernel's height.
        pool.parallel_for((rows + 3) / 4, [&](int64_t g0, int64_t g1) {
          gemm_float_avx512(w.type, base, stride, cols, g0 * 4, std::min(rows, g1 * 4), x, n, y, rows);
        });
        return;
      }
      pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; r++) {
          const void* wr = base + r * stride;
          for (int64_t t = 0; t < n; t++) {
            const float* xt = x + t * cols;
            float v;
            if (w.type == GgmlType::F32) v = k_.dot_f32(static_cast<const float*>(wr), xt, cols);
            else if (w.type == GgmlType::F16) v = k_.dot_f16_f32(static_cast<const uint16_t*>(wr), xt, cols);
            else v = k_.dot_bf16_f32(static_cast<const uint16_t*>(wr), xt, cols);
            y[t * rows + r] = v;
          }
        }
      });
      return;
    }
    case GgmlType::Q8_0:
    case GgmlType::Q4_0: {
      const int64_t blocks_per_row = cols / kQK8_0;
      const size_t need = static_cast<size_t>(n * blocks_per_row);
      if (xq_.size() < need) xq_.resize(need);
      BlockQ8_0* xq = xq_.data();
      pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; t++) k_.quantize_q8_0(x + t * cols, xq + t * blocks_per_row, cols);
      });
      if (gemm_q8_available() && k_.isa == IsaLevel::Avx512 && n >= 2) {  // a single token streams weights: the row dot is leaner there
        if (xsums_.size() < need * 8) xsums_.resize(need * 8);
        int32_t* sums = xsums_.data();
        pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
          compute_lane_sums(xq + t0 * blocks_per_row, (t1 - t0) * blocks_per_row, sums + t0 * blocks_per_row * 8);
        });
        const QuantizedActivations acts{xq, sums, n, blocks_per_row};
        // Threads take groups of 8 rows, the micro-kernel's height.
        pool.parallel_for((rows + 7) / 8, [&](int64_t g0, int64_t g1) {
          gemm_q8_vnni(w.type, base, stride, g0 * 8, std::min(rows, g1 * 8), acts, y, rows);
        });
        return;
      }
      const bool q8 = w.type == GgmlType::Q8_0;
      pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; r++) {
          const void* wr = base + r * stride;
          for (int64_t t = 0; t < n; t++) {
            const BlockQ8_0* xt = xq + t * blocks_per_row;
            y[t * rows + r] = q8 ? k_.dot_q8_0_q8_0(static_cast<const BlockQ8_0*>(wr), xt, cols)
                                 : k_.dot_q4_0_q8_0(static_cast<const BlockQ4_0*>(wr), xt, cols);
          }
        }
      });
      return;
    }
    default:
      throw Error(fmt::format("tensor '{}': no matmul kernel for type {} yet", w.name, type_name(w.type)));
  }
}

}  // namespace kestrel
