#include "quant/gptq.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "formats/block_formats.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/quant_grid.h"

namespace kestrel {
namespace {

// In-place lower Cholesky factor of the n x n symmetric matrix a (row-major); false if not positive definite.
bool cholesky_lower(std::vector<double>& a, int64_t n) {
  for (int64_t j = 0; j < n; j++) {
    double d = a[j * n + j];
    for (int64_t k = 0; k < j; k++) d -= a[j * n + k] * a[j * n + k];
    if (d <= 0) return false;
    d = std::sqrt(d);
    a[j * n + j] = d;
    for (int64_t i = j + 1; i < n; i++) {
      double s = a[i * n + j];
      for (int64_t k = 0; k < j; k++) s -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = s / d;
    }
    for (int64_t k = j + 1; k < n; k++) a[j * n + k] = 0;
  }
  return true;
}

// The upper factor U of H⁻¹ = UᵀU, which GPTQ's updates read row by row.
std::vector<double> inverse_hessian_factor(std::vector<double> h, int64_t n) {
  if (!cholesky_lower(h, n)) throw Error("GPTQ: the Hessian is not positive definite; raise --gptq-damp");
  // L⁻¹ by forward substitution, then H⁻¹ = L⁻ᵀ L⁻¹.
  std::vector<double> li(static_cast<size_t>(n * n), 0.0);
  for (int64_t j = 0; j < n; j++) {
    li[j * n + j] = 1.0 / h[j * n + j];
    for (int64_t i = j + 1; i < n; i++) {
      double s = 0;
      for (int64_t k = j; k < i; k++) s += h[i * n + k] * li[k * n + j];
      li[i * n + j] = -s / h[i * n + i];
    }
  }
  std::vector<double> inv(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j <= i; j++) {
      double s = 0;
      for (int64_t k = i; k < n; k++) s += li[k * n + i] * li[k * n + j];
      inv[i * n + j] = inv[j * n + i] = s;
    }
  if (!cholesky_lower(inv, n)) throw Error("GPTQ: the inverse Hessian is not positive definite; raise --gptq-damp");
  // U = Lᵀ of H⁻¹'s factor.
  std::vector<double> u(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = i; j < n; j++) u[i * n + j] = inv[j * n + i];
  return u;
}

}  // namespace

void gptq_quantize(GgmlType type, float* w, int64_t rows, int64_t cols, const std::vector<double>& xtx,
                   const GptqOptions& o, uint8_t* out) {
  if (!has_quant_grid(type)) throw Error(fmt::format("GPTQ cannot write {} blocks", type_name(type)));
  if (static_cast<int64_t>(xtx.size()) != cols * cols)
    throw Error(fmt::format("GPTQ: Hessian of {} values for {} columns", xtx.size(), cols));
  std::vector<double> h = xtx;
  double mean_diag = 0;
  for (int64_t i = 0; i < cols; i++) mean_diag += h[i * cols + i];
  mean_diag /= static_cast<double>(cols);
  if (mean_diag <= 0) mean_diag = 1;
  std::vector<bool> dead(static_cast<size_t>(cols), false);
  for (int64_t i = 0; i < cols; i++) {
    // A channel that never carried signal: its weights cannot matter, so they are zeroed (as GPTQ does).
    if (h[i * cols + i] == 0) dead[i] = true, h[i * cols + i] = 1;
    h[i * cols + i] += o.damp * mean_diag;
  }
  const std::vector<double> u = inverse_hessian_factor(std::move(h), cols);

  const int64_t block = traits(type).block_size;
  const size_t block_bytes = traits(type).type_size, out_row = row_bytes(type, cols);
  ThreadPool pool(o.n_threads);
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
      float* wr = w + r * cols;
      uint8_t* qr = out + r * out_row;
      for (int64_t i = 0; i < cols; i++)
        if (dead[i]) wr[i] = 0;
      for (int64_t b0 = 0; b0 < cols; b0 += block) {
        uint8_t* blk = qr + (b0 / block) * block_bytes;
        quantize_row(type, wr + b0, blk, block);  // the block's scales, from the compensated values
        for (int64_t i = b0; i < b0 + block; i++) {
          const float q = snap_to_grid(type, blk, static_cast<int>(i - b0), wr[i]);
          const double err = (wr[i] - q) / u[i * cols + i];
          wr[i] = q;
          const double* ui = u.data() + i * cols;
          for (int64_t j = i + 1; j < cols; j++) wr[j] -= static_cast<float>(err * ui[j]);
        }
      }
    }
  });
}

}  // namespace kestrel
