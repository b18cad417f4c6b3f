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

std::string matmul_kernel_name(const DotKernels& k, GgmlType type, bool repacked) {
  const char* isa = isa_name(k.isa);
  if (repacked && packed_gemm_available() && has_packed_kind(type)) {
    // The k-quants' kernel (integer sub-block scales) runs one row group at a time, 8 tokens a pass.
    const bool k_quant = traits(type).block_size == 256 && type != GgmlType::IQ4_XS;
    return fmt::format(
        "{} repacked in 16-row groups x {}: vpdpbusd, one block per lane; {} rows x {} tokens for batches, "
        "16 rows x 1 token for decode (avx512 vnni)",
        type_name(type), activation_format_name(activation_format(type)), k_quant ? 16 : 32,
        k_quant ? 8 : 4);
  }
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16: {
      const std::string w = type == GgmlType::F32 ? "f32" : type == GgmlType::F16 ? "f16" : "bf16";
      if (type == GgmlType::BF16 && k.isa == IsaLevel::Avx512 && gemm_bf16_available())
        return "bf16 x bf16 (activations rounded): vdpbf16ps, tiled 4x4 (avx512 bf16)";
      if (k.isa == IsaLevel::Avx512) return fmt::format("{} x f32 fma: row dot for 1 token, tiled 4x4 gemm for more (avx512)", w);
      return fmt::format("{} x f32 fma row dot ({})", w, isa);
    }
    case GgmlType::Q8_0:
    case GgmlType::Q4_0: {
      const char* w = type == GgmlType::Q8_0 ? "q8_0" : "q4_0";
      if (gemm_q8_available() && k.isa == IsaLevel::Avx512)
        return fmt::format("{} x q8_0: vpdpbusd row dot for 1 token, tiled 8x4 int8 gemm for batches (avx512 vnni)", w);
      return fmt::format("{} x q8_0 int8 row dot, activations quantized per row ({})", w, isa);
    }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return fmt::format("{} x q8_K integer row dot ({})", type == GgmlType::Q4_K ? "q4_K" : type == GgmlType::Q5_K ? "q5_K" : "q6_K",
                         kquant_dots().isa);
    case GgmlType::KESTREL_FP8_E4M3: return fmt::format("fp8 e4m3 (as fp16) x f32 row dot ({})", kquant_dots().isa);
    default:
      if (qdots().find(type))
        return fmt::format("{} x {} integer row dot, {} tokens per pass for batches ({})", type_name(type),
                           activation_format_name(activation_format(type)), qdots().tokens, qdots().isa);
      return "none";
  }
}

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

static bool is_float_format(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }
static bool is_q8_format(GgmlType t) { return t == GgmlType::Q8_0 || t == GgmlType::Q4_0; }
// k-quants (activations quantized to Q8_K, integer dots) and FP8 (float
// activations): kernels/kquant_dot.h, one row dot per (row, token).
static bool is_kquant_format(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K || t == GgmlType::KESTREL_FP8_E4M3;
}

void Matmul::prepare(ThreadPool& pool, const Weight& w, const float* x, int64_t n) {
  // Repacked weights serve every batch, a single token too (their bytes are
  // the file's, give or take the k-quants' byte scales).
  if (w.packed) {
    qdot_ = nullptr;
    x_ = x;
    n_ = n;
    prepare_packed(pool, w, x, n);
    return;
  }
  qdot_ = qdots().find(w.type);
  if (!is_float_format(w.type) && !is_q8_format(w.type) && !is_kquant_format(w.type) && !qdot_)
    throw Error(fmt::format("tensor '{}': no matmul kernel for type {} yet", w.name, type_name(w.type)));
  x_ = x;
  n_ = n;
  if (qdot_ || is_kquant_format(w.type)) {
    // Row dots against activations in the format ggml pairs with this weight type (FP8: float ones).
    tiled_ = bf16_ = packed_ = false;
    if (w.type != GgmlType::KESTREL_FP8_E4M3) quantize_activations_for(pool, w.type, x, n, w.cols());
    return;
  }
  tiled_ = false;
  bf16_ = false;
  packed_ = false;
  if (w.type == GgmlType::BF16 && k_.isa == IsaLevel::Avx512 && gemm_bf16_available()) {
    const int64_t cols = w.cols();
    if (xbf16_.size() < static_cast<size_t>(n * cols)) xbf16_.resize(n * cols);
    uint16_t* xb = xbf16_.data();
    pool.parallel_for(n, [&](int64_t t0, int64_t t1) { convert_to_bf16(x + t0 * cols, xb + t0 * cols, (t1 - t0) * cols); });
    bf16_ = true;
    return;
  }
  if (is_float_format(w.type)) {
    tiled_ = k_.isa == IsaLevel::Avx512 && n >= 2;
    if (w.type == GgmlType::F16) {
      // ggml multiplies F16 weights with activations rounded to F16 (its
      // vec_dot_type), accumulating in float: round them the same way.
      const int64_t total = n * w.cols();
      if (xrounded_.size() < static_cast<size_t>(total)) xrounded_.resize(static_cast<size_t>(total));
      float* xr = xrounded_.data();
      pool.parallel_for(total, [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; i++) xr[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
      });
      x_ = xr;
    }
    return;
  }
  const int64_t cols = w.cols(), blocks_per_row = cols / kQK8_0;
  const size_t need = static_cast<size_t>(n * blocks_per_row);
  if (xq_.size() < need) xq_.resize(need);
  BlockQ8_0* xq = xq_.data();
  pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) k_.quantize_q8_0(x + t * cols, xq + t * blocks_per_row, cols);
  });
  // A single token streams weights: the row dot is leaner there.
  tiled_ = gemm_q8_available() && k_.isa == IsaLevel::Avx512 && n >= 2;
  if (tiled_) {
    if (xsums_.size() < need * 8) xsums_.resize(need * 8);
    int32_t* sums = xsums_.data();
    pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
      compute_lane_sums(xq + t0 * blocks_per_row, (t1 - t0) * blocks_per_row, sums + t0 * blocks_per_row * 8);
    });
    acts_ = {xq, sums, n, blocks_per_row};
  }
}

void Matmul::quantize_activations_for(ThreadPool& pool, GgmlType weight, const float* x, int64_t n, int64_t cols) {
  const ActFormat f = activation_format(weight);
  xact_stride_ = activation_row_bytes(f, cols);
  if (xact_.size() < n * xact_stride_) xact_.resize(n * xact_stride_);
  uint8_t* xa = xact_.data();
  const size_t stride = xact_stride_;
  pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) quantize_activations(f, x + t * cols, xa + t * stride, cols);
  });
}

void Matmul::prepare_packed(ThreadPool& pool, const Weight& w, const float* x, int64_t n) {
  tiled_ = bf16_ = false;
  packed_ = true;
  const int64_t cols = w.cols(), blocks_per_row = cols / kQK8_0;
  const size_t bytes = packed_activation_bytes(n, blocks_per_row);
  if (xpacked_.size() < bytes) xpacked_.resize(bytes);
  uint8_t* out = xpacked_.data();
  const int64_t tiles = (n + PackedActivations::kTokensPerTile - 1) / PackedActivations::kTokensPerTile;
  if (w.type != GgmlType::Q8_0 && w.type != GgmlType::Q4_0) {
    // Activations rounded as the row dots' (and ggml's) are for the type (Q8_K, Q8_1 or Q8_0).
    quantize_activations_for(pool, w.type, x, n, cols);
    const uint8_t* xa = xact_.data();
    const PackedKind kind = w.packed->kind;
    const ActFormat f = activation_format(w.type);
    pool.parallel_for(tiles, [&](int64_t i0, int64_t i1) {
      switch (f) {
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
  } else {
    const size_t need = static_cast<size_t>(n * blocks_per_row);
    if (xq_.size() < need) xq_.resize(need);
    BlockQ8_0* xq = xq_.data();
    pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; t++) k_.quantize_q8_0(x + t * cols, xq + t * blocks_per_row, cols);
    });
    const PackedKind kind = w.packed->kind;
    pool.parallel_for(tiles, [&](int64_t i0, int64_t i1) { pack_activations(kind, xq, n, blocks_per_row, i0, i1, out); });
  }
  packed_acts_ = {out, n, blocks_per_row};
}

int64_t Matmul::row_granule(const Weight& w) const {
  if (packed_) return PackedWeight::kRowsPerGroup;
  if (bf16_) return 4;
  if (!tiled_) return 1;
  return is_float_format(w.type) ? 4 : 8;
}

void Matmul::compute_rows(const Weight& w, int64_t r0, int64_t r1, float* y, int64_t ldy) const {
  const int64_t cols = w.cols(), n = n_;
  const size_t stride = w.row_stride();
  const auto* base = static_cast<const uint8_t*>(w.data);
  if (bf16_) {
    gemm_bf16(base, stride, cols, r0, r1, xbf16_.data(), n, y, ldy, tuning_.float_token_chunk);
    return;
  }
  if (packed_) {
    constexpr int64_t G = PackedWeight::kRowsPerGroup;
    if (packed_gemm_available())
      packed_gemm_vnni(*w.packed, r0 / G, (r1 + G - 1) / G, packed_acts_, y, ldy, tuning_.q8_token_chunk);
    else
      packed_gemm_reference(*w.packed, r0 / G, (r1 + G - 1) / G, packed_acts_, y, ldy);
    return;
  }
  if (qdot_) {
    compute_rows_qdot(w, r0, r1, y, ldy);
    return;
  }
  if (is_kquant_format(w.type)) {
    const KQuantDots& kd = kquant_dots();
    // Batches: panels of 32 rows (~40 KiB of Q4_K at 2048 columns, in L2)
    // against kd.tokens tokens at a time (their activations in L1), so
    // neither the weights nor the activations stream from further out once per token.
    constexpr int64_t kPanel = 32;
    const bool fp8 = w.type == GgmlType::KESTREL_FP8_E4M3;
    const int nt = kd.tokens;
    const int64_t n_many = fp8 ? 0 : n / nt * nt;
    for (int64_t p0 = r0; p0 < r1; p0 += kPanel) {
      const int64_t p1 = std::min(r1, p0 + kPanel);
      for (int64_t t = 0; t < n_many; t += nt) {
        const BlockQ8_K* xs[16];
        for (int j = 0; j < nt; j++) xs[j] = q8k(t + j);
        for (int64_t r = p0; r < p1; r++) {
          const void* wr = base + r * stride;
          float out[16];
          if (w.type == GgmlType::Q4_K) kd.q4_K_xt(static_cast<const BlockQ4_K*>(wr), xs, cols, out);
          else if (w.type == GgmlType::Q5_K) kd.q5_K_xt(static_cast<const BlockQ5_K*>(wr), xs, cols, out);
          else kd.q6_K_xt(static_cast<const BlockQ6_K*>(wr), xs, cols, out);
          for (int j = 0; j < nt; j++) y[(t + j) * ldy + r] = out[j];
        }
      }
      for (int64_t r = p0; r < p1; r++) {
        const void* wr = base + r * stride;
        for (int64_t t = n_many; t < n; t++) {
          const BlockQ8_K* xq = q8k(t);
          float v;
          switch (w.type) {
            case GgmlType::Q4_K: v = kd.q4_K(static_cast<const BlockQ4_K*>(wr), xq, cols); break;
            case GgmlType::Q5_K: v = kd.q5_K(static_cast<const BlockQ5_K*>(wr), xq, cols); break;
            case GgmlType::Q6_K: v = kd.q6_K(static_cast<const BlockQ6_K*>(wr), xq, cols); break;
            default: v = kd.fp8(static_cast<const BlockFp8*>(wr), x_ + t * cols, cols); break;
          }
          y[t * ldy + r] = v;
        }
      }
    }
    return;
  }
  if (is_float_format(w.type)) {
    if (tiled_) {
      gemm_float_avx512(w.type, base, stride, cols, r0, r1, x_, n, y, ldy, tuning_.float_token_chunk);
      return;
    }
    for (int64_t r = r0; r < r1; r++) {
      const void* wr = base + r * stride;
      for (int64_t t = 0; t < n; t++) {
        const float* xt = x_ + t * cols;
        float v;
        if (w.type == GgmlType::F32) v = k_.dot_f32(static_cast<const float*>(wr), xt, cols);
        else if (w.type == GgmlType::F16) v = k_.dot_f16_f32(static_cast<const uint16_t*>(wr), xt, cols);
        else v = k_.dot_bf16_f32(static_cast<const uint16_t*>(wr), xt, cols);
        y[t * ldy + r] = v;
      }
    }
    return;
  }
  if (tiled_) {
    gemm_q8_vnni(w.type, base, stride, r0, r1, acts_, y, ldy, tuning_.q8_token_chunk);
    return;
  }
  const int64_t blocks_per_row = cols / kQK8_0;
  const bool q8 = w.type == GgmlType::Q8_0;
  for (int64_t r = r0; r < r1; r++) {
    const void* wr = base + r * stride;
    for (int64_t t = 0; t < n; t++) {
      const BlockQ8_0* xt = xq_.data() + t * blocks_per_row;
      y[t * ldy + r] = q8 ? k_.dot_q8_0_q8_0(static_cast<const BlockQ8_0*>(wr), xt, cols)
                          : k_.dot_q4_0_q8_0(static_cast<const BlockQ4_0*>(wr), xt, cols);
    }
  }
}

void Matmul::compute_rows_qdot(const Weight& w, int64_t r0, int64_t r1, float* y, int64_t ldy) const {
  const int64_t cols = w.cols(), n = n_;
  const QTypeDots& d = *qdot_;
  const int nt = qdots().tokens;
  const int64_t n_many = n / nt * nt;
  // As for the k-quants: panels of rows (in L2) against `nt` tokens at a time (in L1).
  constexpr int64_t kPanel = 32;
  for (int64_t p0 = r0; p0 < r1; p0 += kPanel) {
    const int64_t p1 = std::min(r1, p0 + kPanel);
    for (int64_t t = 0; t < n_many; t += nt) {
      const void* xs[16];
      for (int j = 0; j < nt; j++) xs[j] = xact_.data() + (t + j) * xact_stride_;
      for (int64_t r = p0; r < p1; r++) {
        float out[16];
        d.many(w.row(r), xs, cols, out);
        for (int j = 0; j < nt; j++) y[(t + j) * ldy + r] = out[j];
      }
    }
    for (int64_t t = n_many; t < n; t++) {
      const void* xs[1] = {xact_.data() + t * xact_stride_};
      for (int64_t r = p0; r < p1; r++) d.one(w.row(r), xs, cols, y + t * ldy + r);
    }
  }
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
  prepare(pool, *ws[0], x, n);
  // One pass over the rows of all weights, in units of the kernel's height
  // (and of `align`); a thread's range may cross from one weight into the next.
  const int64_t kg = row_granule(*ws[0]);
  const int64_t g = std::lcm(kg, std::max<int64_t>(1, align));
  std::array<int64_t, kMaxShared + 1> first_unit{};  // no allocation on the decode path
  for (int i = 0; i < count; i++) first_unit[i + 1] = first_unit[i] + (ws[i]->rows() + g - 1) / g;
  split_rows(pool, first_unit[count], n, [&](int64_t u0, int64_t u1) {
    for (int i = 0; i < count; i++) {
      const int64_t a = std::max(u0, first_unit[i]), b = std::min(u1, first_unit[i + 1]);
      if (a >= b) continue;
      const int64_t rows = ws[i]->rows();
      const int64_t r0 = (a - first_unit[i]) * g, r1 = std::min(rows, (b - first_unit[i]) * g);
      compute_rows(*ws[i], r0, r1, ys[i], rows);
      epilogue(i, r0, r1);
    }
  });
}

void Matmul::run_swiglu(ThreadPool& pool, const Weight& gate, const Weight& up, const float* x, int64_t n, float* out,
                        float* up_scratch, GateActivation act) {
  if (!can_share_input(gate, up) || gate.rows() != up.rows())
    throw Error(fmt::format("tensors '{}' and '{}' cannot be fused into a gated FFN", gate.name, up.name));
  prepare(pool, gate, x, n);
  const int64_t g = row_granule(gate), rows = gate.rows();
  split_rows(pool, (rows + g - 1) / g, n, [&](int64_t u0, int64_t u1) {
    const int64_t r0 = u0 * g, r1 = std::min(rows, u1 * g);
    compute_rows(gate, r0, r1, out, rows);
    compute_rows(up, r0, r1, up_scratch, rows);
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
