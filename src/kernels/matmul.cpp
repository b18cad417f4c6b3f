#include "kernels/matmul.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <vector>

#include "formats/block_formats.h"
#include "core/error.h"
#include "formats/fp16.h"
#include "formats/q4q5_formats.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_float.h"
#include "kernels/kquant_dot.h"
#include "kernels/ops.h"
#include "kernels/qdot.h"

namespace kestrel {

void dequantize_weight_row(const Weight& w, int64_t row, float* out) {
  dequantize_row(w.type, w.row(row), out, w.cols());
}

// Batches take their row units in chunks that a thread done with its own can take over (one vCPU of a
// shared machine may run 1.5x slower than the other: pp512 +12-16% with a busy neighbour, within noise
// on a quiet machine); a single token keeps one contiguous range per thread, each thread's weights one
// unbroken stream (fixed chunks measured 8-13% slower decode over interleaved runs; halving claims within
// 1% of the static split in a per-call A/B inside one decode run: nothing to gain).
static void split_rows(ThreadPool& pool, int64_t units, int64_t n_tokens, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n_tokens > 1) pool.parallel_for_balanced(units, fn);
  else pool.parallel_for(units, fn);
}

void Matmul::quantize(ThreadPool& pool, const MatmulKernel& k, const float* x, int64_t n, int64_t cols) {
  const size_t stride = activation_row_bytes(k.act, cols);
  if (act_.size() < n * stride) act_.resize(n * stride);
  uint8_t* xa = act_.data();
  pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) k.quantize(k, x + t * cols, xa + t * stride, cols);
  });
  in_.act = xa;
  in_.act_stride = stride;
}

// The packed kernels' activation tiles start on a page boundary plus a fixed
// offset, whatever the heap gave: where they fall against the weight stream
// otherwise moves with every allocation made before them, and an unlucky
// place (4K aliasing with the streamed rows) cost decode 30% (1.1B Q4_0, 2
// threads: 51 -> 37 tok/s after an unrelated change of allocation order).
uint8_t* Matmul::tile_start(uint8_t* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return p + ((kTileOffset - a % kTileAlign) + kTileAlign) % kTileAlign;
}

const MatmulKernel& Matmul::prepare(ThreadPool& pool, const Weight& w, const float* x, int64_t n) {
  const MatmulKernel& k = k_.of(w);
  const int64_t cols = w.cols();
  in_ = MatmulInput{};
  in_.x = x;
  in_.n = n;
  in_.cols = cols;
  in_.tuning = &tuning_;
  switch (k.prep) {
    case ActPrep::Float: break;
    case ActPrep::F16Rounded:
    case ActPrep::Bf16Rounded: {
      // ggml multiplies F16 (BF16) weights with activations rounded to F16
      // (BF16), its vec_dot_type, accumulating in float: round them the same way.
      const int64_t total = n * cols;
      if (xrounded_.size() < static_cast<size_t>(total)) xrounded_.resize(static_cast<size_t>(total));
      float* xr = xrounded_.data();
      const bool f16 = k.prep == ActPrep::F16Rounded;
      pool.parallel_for(total, [&](int64_t a, int64_t b) {
        if (f16)
          for (int64_t i = a; i < b; i++) xr[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
        else
          for (int64_t i = a; i < b; i++) xr[i] = bf16_to_fp32(fp32_to_bf16(x[i]));
      });
      in_.x = xr;
      break;
    }
    case ActPrep::Bf16: {
      if (xbf16_.size() < static_cast<size_t>(n * cols)) xbf16_.resize(static_cast<size_t>(n * cols));
      uint16_t* xb = xbf16_.data();
      pool.parallel_for(n, [&](int64_t t0, int64_t t1) { k.bf16->convert(x + t0 * cols, xb + t0 * cols, (t1 - t0) * cols); });
      in_.bf16 = xb;
      break;
    }
    case ActPrep::Quantized: {
      quantize(pool, k, x, n, cols);
      // A single token streams weights: the row dot is leaner there.
      if (k.lane_sums && n >= 2) {
        const int64_t blocks_per_row = cols / kQK8_0;
        const size_t need = static_cast<size_t>(n * blocks_per_row);
        if (sums_.size() < need * 8) sums_.resize(need * 8);
        const auto* xq = reinterpret_cast<const BlockQ8_0*>(in_.act);
        int32_t* sums = sums_.data();
        pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
          k.int8->lane_sums(xq + t0 * blocks_per_row, (t1 - t0) * blocks_per_row, sums + t0 * blocks_per_row * 8);
        });
        in_.tiles = {xq, sums, n, blocks_per_row};
      }
      break;
    }
    case ActPrep::Packed: {
      // Activations rounded as the row dots' (and ggml's) are for the type
      // (Q8_K, Q8_1 or Q8_0), then laid out in the packed kernels' token tiles.
      quantize(pool, k, x, n, cols);
      const int64_t blocks_per_row = cols / kQK8_0;
      const size_t bytes = packed_activation_bytes(n, blocks_per_row);
      if (xpacked_.size() < bytes + kTileAlign) xpacked_.resize(bytes + kTileAlign);
      uint8_t* out = tile_start(xpacked_.data());
      const uint8_t* xa = in_.act;
      const int64_t tiles = (n + PackedActivations::kTokensPerTile - 1) / PackedActivations::kTokensPerTile;
      const PackedKind kind = w.packed->kind;
      pool.parallel_for(tiles, [&](int64_t i0, int64_t i1) {
        switch (k.act) {
          case ActFormat::Q8_K:
            pack_activations_q8k(kind, reinterpret_cast<const BlockQ8_K*>(xa), n, blocks_per_row, i0, i1, out);
            break;
          case ActFormat::Q8_1:
            pack_activations_q8_1(reinterpret_cast<const BlockQ8_1*>(xa), n, blocks_per_row, i0, i1, out);
            break;
          case ActFormat::Q8_0:
            pack_activations(kind, reinterpret_cast<const BlockQ8_0*>(xa), n, blocks_per_row, i0, i1, out);
            break;
        }
      });
      in_.packed = {out, n, blocks_per_row};
      break;
    }
  }
  return k;
}

void Matmul::run(ThreadPool& pool, const Weight& w, const float* x, int64_t n, float* y) {
  const Weight* ws[1] = {&w};
  float* ys[1] = {y};
  run_many(pool, ws, 1, x, n, ys);
}

bool Matmul::can_share_input(const Weight& a, const Weight& b) {
  return a.type == b.type && a.cols() == b.cols() && (a.packed != nullptr) == (b.packed != nullptr);
}

void Matmul::run_many(ThreadPool& pool, const Weight* const* ws, int count, const float* x, int64_t n, float* const* ys) {
  run_many_then(pool, ws, count, x, n, ys, 1, [](int, int64_t, int64_t) {});
}

void Matmul::run_many_then(ThreadPool& pool, const Weight* const* ws, int count, const float* x, int64_t n,
                           float* const* ys, int64_t align, FunctionRef<void(int, int64_t, int64_t)> epilogue) {
  constexpr int kMaxShared = 8;
  if (count < 1 || count > kMaxShared) throw Error(fmt::format("run_many takes 1 to {} weights, not {}", kMaxShared, count));
  for (int i = 1; i < count; i++)
    if (!can_share_input(*ws[0], *ws[i]))
      throw Error(fmt::format("tensors '{}' and '{}' cannot share one input pass", ws[0]->name, ws[i]->name));
  const MatmulKernel& k = prepare(pool, *ws[0], x, n);
  // One pass over the rows of all weights, in units of the kernel's height
  // (and of `align`); a thread's range may cross from one weight into the next.
  const int64_t kg = row_granule(k);
  const int64_t g = std::lcm(kg, std::max<int64_t>(1, align));
  std::array<int64_t, kMaxShared + 1> first_unit{};  // no allocation on the decode path
  for (int i = 0; i < count; i++) first_unit[i + 1] = first_unit[i] + (ws[i]->rows() + g - 1) / g;
  split_rows(pool, first_unit[count], n, [&](int64_t u0, int64_t u1) {
    for (int i = 0; i < count; i++) {
      const int64_t a = std::max(u0, first_unit[i]), b = std::min(u1, first_unit[i + 1]);
      if (a >= b) continue;
      const int64_t rows = ws[i]->rows();
      const int64_t r0 = (a - first_unit[i]) * g, r1 = std::min(rows, (b - first_unit[i]) * g);
      compute_rows(k, *ws[i], r0, r1, ys[i], rows);
      epilogue(i, r0, r1);
    }
  });
}

void Matmul::run_swiglu(ThreadPool& pool, const Weight& gate, const Weight& up, const float* x, int64_t n, float* out,
                        float* up_scratch, GateActivation act) {
  if (!can_share_input(gate, up) || gate.rows() != up.rows())
    throw Error(fmt::format("tensors '{}' and '{}' cannot be fused into a gated FFN", gate.name, up.name));
  const MatmulKernel& k = prepare(pool, gate, x, n);
  const int64_t g = row_granule(k), rows = gate.rows();
  split_rows(pool, (rows + g - 1) / g, n, [&](int64_t u0, int64_t u1) {
    const int64_t r0 = u0 * g, r1 = std::min(rows, u1 * g);
    compute_rows(k, gate, r0, r1, out, rows);
    compute_rows(k, up, r0, r1, up_scratch, rows);
    // Epilogue while both are still in cache: out = act(gate) * up.
    for (int64_t t = 0; t < n; t++) {
      float* o = out + t * rows + r0;
      const float* u = up_scratch + t * rows + r0;
      if (act == GateActivation::Silu) silu_mul(o, u, r1 - r0);
      else gelu_mul(o, u, r1 - r0);
    }
  });
}

}  // namespace kestrel
