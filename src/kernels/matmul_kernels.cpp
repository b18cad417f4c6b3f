#include "kernels/matmul_kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string_view>

#include "core/error.h"
#include "formats/fp16.h"
#include "kernels/isa_dispatch.h"

namespace kestrel {
namespace {

// ---- Quantizers ----

// The dot table's own Q8_0 quantizer (the ISA's; the same bytes as ggml's run-time one).
void quantize_q8_0_dots(const MatmulKernel& k, const float* x, void* out, int64_t n) {
  k.dots->quantize_q8_0(x, static_cast<BlockQ8_0*>(out), n);
}
// The activation format ggml pairs with the weight type (qdot.h).
void quantize_act(const MatmulKernel& k, const float* x, void* out, int64_t n) { quantize_activations(k.act, x, out, n); }

// ---- Row kernels ----

// F16 rows short enough to be all tail in the dot (DotKernels::f16_double_tail_below): 8 rows at a time, each
// summed exactly as the dot sums it (its products in float, the sum in double from 0), the rows' chains
// interleaved instead of one after another.
void rows_f16_short(const MatmulKernel& k, const Weight& w, int64_t r0, int64_t r1, const MatmulInput& in, float* y, int64_t ldy) {
  const int64_t cols = w.cols();
  const auto* data = static_cast<const uint16_t*>(w.data);
  const int64_t stride = static_cast<int64_t>(w.row_stride() / sizeof(uint16_t));
  for (int64_t t = 0; t < in.n; t++) {
    const float* xt = in.x + t * cols;
    if (k.dots->dot_f16_short_rows) {
      k.dots->dot_f16_short_rows(data + r0 * stride, stride, r1 - r0, xt, cols, y + t * ldy + r0);
      continue;
    }
    for (int64_t r = r0; r < r1; r += 8) {
      const int m = static_cast<int>(std::min<int64_t>(8, r1 - r));
      double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t i = 0; i < cols; i++)
        for (int j = 0; j < m; j++) s[j] += static_cast<double>(fp16_to_fp32(data[(r + j) * stride + i]) * xt[i]);
      for (int j = 0; j < m; j++) y[t * ldy + r + j] = static_cast<float>(s[j]);
    }
  }
}

void rows_float_dot(const MatmulKernel& k, const Weight& w, int64_t r0, int64_t r1, const MatmulInput& in, float* y,
                    int64_t ldy) {
  const int64_t cols = w.cols();
  if (w.type == GgmlType::F16 && cols < k.dots->f16_double_tail_below) return rows_f16_short(k, w, r0, r1, in, y, ldy);
  for (int64_t r = r0; r < r1; r++) {
    const void* wr = w.row(r);
    for (int64_t t = 0; t < in.n; t++) {
      const float* xt = in.x + t * cols;
      float v;
      if (w.type == GgmlType::F32) v = k.dots->dot_f32(static_cast<const float*>(wr), xt, cols);
      else if (w.type == GgmlType::F16) v = k.dots->dot_f16_f32(static_cast<const uint16_t*>(wr), xt, cols);
      else v = k.dots->dot_bf16_f32(static_cast<const uint16_t*>(wr), xt, cols);
      y[t * ldy + r] = v;
    }
  }
}

// Whether llama.cpp multiplies a batch of this float matrix with its GEMM (llamafile's tinyBLAS, for plain
// matrices whose rows are a multiple of 4 and columns of the vector width; ggml_mul_mat_id's routed experts
// and other shapes take the row dots), so that each output is summed in its order.
bool ggml_batches_in_gemm_order(const Weight& w, int64_t width) {
  return width > 0 && !w.routed_expert && w.rows() % 4 == 0 && w.cols() % width == 0;
}

// F32/F16 batches: the tiles where llama.cpp's GEMM takes the matrix, else the row dots (its vec_dot).
void rows_float_tiles(const MatmulKernel& k, const Weight& w, int64_t r0, int64_t r1, const MatmulInput& in, float* y,
                      int64_t ldy) {
  if (!ggml_batches_in_gemm_order(w, k.floats->ggml_width)) return rows_float_dot(k, w, r0, r1, in, y, ldy);
  k.floats->gemm(w.type, static_cast<const uint8_t*>(w.data), w.row_stride(), w.cols(), r0, r1, in.x, in.n, y, ldy,
                 in.tuning->float_token_chunk);
}

// BF16 without the bf16 dot, batches: rounded activations, each output in llama.cpp's order for the call (the
// tiles' where its GEMM takes the matrix, else the row dot's, with a widened weight vector serving 3 tokens).
void rows_bf16_batches(const MatmulKernel& k, const Weight& w, int64_t r0, int64_t r1, const MatmulInput& in,
                       float* y, int64_t ldy) {
  const auto* data = static_cast<const uint8_t*>(w.data);
  if (ggml_batches_in_gemm_order(w, k.floats->ggml_width))
    return k.floats->gemm(GgmlType::BF16, data, w.row_stride(), w.cols(), r0, r1, in.x, in.n, y, ldy,
                          in.tuning->float_token_chunk);
  k.floats->bf16_in_dot_order(data, w.row_stride(), w.cols(), r0, r1, in.x, in.n, y, ldy, in.tuning->float_token_chunk);
}

void rows_bf16_tiles(const MatmulKernel& k, const Weight& w, int64_t r0, int64_t r1, const MatmulInput& in, float* y,
                     int64_t ldy) {
  if (in.n > 1 && ggml_batches_in_gemm_order(w, k.bf16->gemm_width))
    return k.bf16->gemm_ggml_order(static_cast<const uint8_t*>(w.data), w.row_stride(), w.cols(), r0, r1, in.bf16,
                                   in.n, y, ldy, in.tuning->float_token_chunk);
  k.bf16->gemm(static_cast<const uint8_t*>(w.data), w.row_stride(), w.cols(), r0, r1, in.bf16, in.n, y, ldy,
               in.tuning->float_token_chunk);
}

void rows_q8_dot(const MatmulKernel& k, const Weight& w, int64_t r0, int64_t r1, const MatmulInput& in, float* y,
                 int64_t ldy) {
  const int64_t cols = w.cols();
  const bool q8 = w.type == GgmlType::Q8_0;
  for (int64_t r = r0; r < r1; r++) {
    const void* wr = w.row(r);
    for (int64_t t = 0; t < in.n; t++) {
      const auto* xt = reinterpret_cast<const BlockQ8_0*>(in.act + t * in.act_stride);
      y[t * ldy + r] = q8 ? k.dots->dot_q8_0_q8_0(static_cast<const BlockQ8_0*>(wr), xt, cols)
                          : k.dots->dot_q4_0_q8_0(static_cast<const BlockQ4_0*>(wr), xt, cols);
    }
  }
}

void rows_q8_tiles(const MatmulKernel& k, const Weight& w, int64_t r0, int64_t r1, const MatmulInput& in, float* y,
                   int64_t ldy) {
  k.int8->gemm(w.type, static_cast<const uint8_t*>(w.data), w.row_stride(), r0, r1, in.tiles, y, ldy,
               in.tuning->q8_token_chunk);
}

// Batches: panels of 32 rows (~40 KiB of Q4_K at 2048 columns, in L2)
// against kd.tokens tokens at a time (their activations in L1), so neither
// the weights nor the activations stream from further out once per token.
void rows_kquant(const MatmulKernel& k, const Weight& w, int64_t r0, int64_t r1, const MatmulInput& in, float* y,
                 int64_t ldy) {
  const KQuantDots& kd = *k.kquant;
  const int64_t cols = w.cols(), n = in.n;
  constexpr int64_t kPanel = 32;
  const bool fp8 = w.type == GgmlType::KESTREL_FP8_E4M3;
  const int nt = kd.tokens;
  const int64_t n_many = fp8 ? 0 : n / nt * nt;
  auto q8k = [&](int64_t t) { return reinterpret_cast<const BlockQ8_K*>(in.act + t * in.act_stride); };
  for (int64_t p0 = r0; p0 < r1; p0 += kPanel) {
    const int64_t p1 = std::min(r1, p0 + kPanel);
    for (int64_t t = 0; t < n_many; t += nt) {
      const BlockQ8_K* xs[16];
      for (int j = 0; j < nt; j++) xs[j] = q8k(t + j);
      for (int64_t r = p0; r < p1; r++) {
        const void* wr = w.row(r);
        float out[16];
        if (w.type == GgmlType::Q4_K) kd.q4_K_xt(static_cast<const BlockQ4_K*>(wr), xs, cols, out);
        else if (w.type == GgmlType::Q5_K) kd.q5_K_xt(static_cast<const BlockQ5_K*>(wr), xs, cols, out);
        else kd.q6_K_xt(static_cast<const BlockQ6_K*>(wr), xs, cols, out);
        for (int j = 0; j < nt; j++) y[(t + j) * ldy + r] = out[j];
      }
    }
    for (int64_t r = p0; r < p1; r++) {
      const void* wr = w.row(r);
      for (int64_t t = n_many; t < n; t++) {
        float v;
        switch (w.type) {
          case GgmlType::Q4_K: v = kd.q4_K(static_cast<const BlockQ4_K*>(wr), q8k(t), cols); break;
          case GgmlType::Q5_K: v = kd.q5_K(static_cast<const BlockQ5_K*>(wr), q8k(t), cols); break;
          case GgmlType::Q6_K: v = kd.q6_K(static_cast<const BlockQ6_K*>(wr), q8k(t), cols); break;
          default: v = kd.fp8(static_cast<const BlockFp8*>(wr), in.x + t * cols, cols); break;
        }
        y[t * ldy + r] = v;
      }
    }
  }
}

// As for the k-quants: panels of rows (in L2) against `tokens` tokens at a time (in L1).
void rows_qdot(const MatmulKernel& k, const Weight& w, int64_t r0, int64_t r1, const MatmulInput& in, float* y,
               int64_t ldy) {
  const int64_t cols = w.cols(), n = in.n;
  const QTypeDots& d = *k.qdot;
  const int nt = k.qdot_tokens;
  const int64_t n_many = n / nt * nt;
  constexpr int64_t kPanel = 32;
  for (int64_t p0 = r0; p0 < r1; p0 += kPanel) {
    const int64_t p1 = std::min(r1, p0 + kPanel);
    for (int64_t t = 0; t < n_many; t += nt) {
      const void* xs[16];
      for (int j = 0; j < nt; j++) xs[j] = in.act + (t + j) * in.act_stride;
      for (int64_t r = p0; r < p1; r++) {
        float out[16];
        d.many(w.row(r), xs, cols, out);
        for (int j = 0; j < nt; j++) y[(t + j) * ldy + r] = out[j];
      }
    }
    for (int64_t t = n_many; t < n; t++) {
      const void* xs[1] = {in.act + t * in.act_stride};
      for (int64_t r = p0; r < p1; r++) d.one(w.row(r), xs, cols, y + t * ldy + r);
    }
  }
}

void rows_packed(const MatmulKernel& k, const Weight& w, int64_t r0, int64_t r1, const MatmulInput& in, float* y,
                 int64_t ldy) {
  constexpr int64_t G = PackedWeight::kRowsPerGroup;
  // The tile unit's kernel from the measured crossover on (it reads the same packed weights).
  const PackedGemm* g = k.packed_tiles && in.n >= in.tuning->tile_min_tokens ? k.packed_tiles : k.packed;
  g->gemm(*w.packed, r0 / G, (r1 + G - 1) / G, in.packed, y, ldy, in.tuning->q8_token_chunk);
}

const char* float_name(GgmlType t) { return t == GgmlType::F32 ? "f32" : t == GgmlType::F16 ? "f16" : "bf16"; }

// ---- Kernel kinds ----
//
// One row per kind of kernel: the weight types it multiplies and how it fills a type's entry from an ISA level's
// kernel families — or declines, where the level lacks the unit it needs. For each type the first row that fills
// an entry is the one that runs, so a faster kind comes before the one it replaces. A new kernel kind is a row
// here (and its files); nothing else decides which kernel a type gets.

// An ISA level's kernel families (null: the level has none of that kind).
struct Families {
  const DotKernels& dots;
  const char* dot_isa;
  const KQuantDots& kquant;
  const QDotTable& qdots;
  const Int8Tiles* int8;
  const Bf16Tiles* bf16;
  const FloatTiles* floats;
  const PackedGemm* packed;
  const PackedGemm* packed_tiles;
};

struct KernelKind {
  bool repacked;  // for weights the backend repacked at load
  // The types the kind multiplies on this level (`plain`: the entries made so far for weights as they are).
  std::vector<GgmlType> (*types)(const Families& f, const std::vector<MatmulKernel>& plain);
  // Fills k (type and dots set) for type t; false where this level lacks the kind.
  bool (*fill)(MatmulKernel& k, const Families& f);
};

std::vector<GgmlType> float_types(const Families&, const std::vector<MatmulKernel>&) {
  return {GgmlType::F32, GgmlType::F16};
}
std::vector<GgmlType> bf16_type(const Families&, const std::vector<MatmulKernel>&) { return {GgmlType::BF16}; }
std::vector<GgmlType> q8_types(const Families&, const std::vector<MatmulKernel>&) {
  return {GgmlType::Q8_0, GgmlType::Q4_0};
}
std::vector<GgmlType> kquant_types(const Families&, const std::vector<MatmulKernel>&) {
  return {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::KESTREL_FP8_E4M3};
}
std::vector<GgmlType> qdot_types(const Families& f, const std::vector<MatmulKernel>&) {
  std::vector<GgmlType> out;
  for (const QTypeDots& d : f.qdots.dots) out.push_back(d.type);
  return out;
}
// Every type with a plain entry whose blocks packed_q8.h can repack.
std::vector<GgmlType> packable_types(const Families&, const std::vector<MatmulKernel>& plain) {
  std::vector<GgmlType> out;
  for (const MatmulKernel& k : plain)
    if (has_packed_kind(k.type)) out.push_back(k.type);
  return out;
}

// BF16 against bf16-rounded activations, as llama.cpp rounds them on every CPU (its vec_dot_type): the bf16 tiles
// where the CPU has the bf16 dot (every batch size)...
bool fill_bf16_tiles(MatmulKernel& k, const Families& f) {
  if (!f.bf16) return false;
  k.prep = ActPrep::Bf16;
  k.bf16 = f.bf16;
  k.one = k.many = rows_bf16_tiles;
  k.granule_one = k.granule_many = 4;
  k.name = fmt::format("bf16 x bf16 (activations rounded): vdpbf16ps, 1 token and routed experts in ggml's "
                       "row-dot order (4 rows x 3 tokens), other batches in its gemm's (4 rows x 6 tokens) ({})",
                       f.bf16->isa);
  return true;
}

// ...else in f32 FMAs of the two widened (the products are exact in f32), in llama.cpp's orders: with
// activations rounded to 8 bits of mantissa, a summation order of its own flips roundings downstream (the BF16
// compat cells of Gemma 2 and Qwen3-MoE left llama.cpp's ids with the f32 tiles for batches). The scalar level
// keeps the row dot for everything (ggml's GEMM needs SIMD).
bool fill_bf16_rounded(MatmulKernel& k, const Families& f) {
  k.prep = ActPrep::Bf16Rounded;
  k.one = k.many = rows_float_dot;
  k.name = fmt::format("bf16 x f32 rounded to bf16: fma row dot in ggml's order ({})", f.dot_isa);
  if (f.floats && f.floats->bf16_in_dot_order && f.floats->isa == std::string_view(f.dot_isa)) {
    // Batches: the row dot's outputs with a widened weight vector serving three tokens, or the GEMM's.
    k.floats = f.floats;
    k.many = rows_bf16_batches;
    k.granule_many = 4;
    k.name = fmt::format("bf16 x f32 rounded to bf16: fma, 1 token and routed experts in ggml's row-dot order, "
                         "other batches in its gemm's (4 rows x 3 tokens) ({})",
                         f.floats->isa);
  }
  return true;
}

// F32 and F16 (activations rounded through fp16, ggml's pairing): row dots for one token, f32-FMA tiles for
// batches where the level has them...
bool fill_float_tiles(MatmulKernel& k, const Families& f) {
  if (!f.floats) return false;
  k.prep = k.type == GgmlType::F16 ? ActPrep::F16Rounded : ActPrep::Float;
  k.one = rows_float_dot;
  k.floats = f.floats;
  k.many = rows_float_tiles;
  k.granule_many = 4;
  k.name = fmt::format("{} x f32 fma: row dot for 1 token, routed experts and odd shapes, tiled gemm in ggml's "
                       "order for other batches ({})",
                       float_name(k.type), f.floats->isa);
  return true;
}

// ...else the row dot for every batch.
bool fill_float_dot(MatmulKernel& k, const Families& f) {
  k.prep = k.type == GgmlType::F16 ? ActPrep::F16Rounded : ActPrep::Float;
  k.one = k.many = rows_float_dot;
  k.name = fmt::format("{} x f32 fma row dot ({})", float_name(k.type), f.dot_isa);
  return true;
}

const char* q8_weight_name(GgmlType t) { return t == GgmlType::Q8_0 ? "q8_0" : "q4_0"; }

// Q8_0 and Q4_0 in the file's layout: row dots (bit-identical to llama.cpp) for one token, int8 8x4 tiles for
// batches with AVX-512 VNNI...
bool fill_q8_tiles(MatmulKernel& k, const Families& f) {
  if (!f.int8) return false;
  k.prep = ActPrep::Quantized;
  k.act = ActFormat::Q8_0;
  k.quantize = quantize_q8_0_dots;
  k.one = rows_q8_dot;
  k.int8 = f.int8;
  k.lane_sums = true;
  k.many = rows_q8_tiles;
  k.granule_many = 8;
  k.name = fmt::format("{} x q8_0: vpdpbusd row dot for 1 token, tiled 8x4 int8 gemm for batches ({})",
                       q8_weight_name(k.type), f.int8->isa);
  return true;
}

// ...else the row dot for every batch.
bool fill_q8_dot(MatmulKernel& k, const Families& f) {
  k.prep = ActPrep::Quantized;
  k.act = ActFormat::Q8_0;
  k.quantize = quantize_q8_0_dots;
  k.one = k.many = rows_q8_dot;
  k.name = fmt::format("{} x q8_0 int8 row dot, activations quantized per row ({})", q8_weight_name(k.type), f.dot_isa);
  return true;
}

// The k-quants against Q8_K activations, FP8 against float ones.
bool fill_kquant(MatmulKernel& k, const Families& f) {
  k.kquant = &f.kquant;
  k.one = k.many = rows_kquant;
  if (k.type == GgmlType::KESTREL_FP8_E4M3) {
    k.prep = ActPrep::Float;
    k.name = fmt::format("fp8 e4m3 (as fp16) x f32 row dot ({})", f.kquant.isa);
    return true;
  }
  k.prep = ActPrep::Quantized;
  k.act = activation_format(k.type);
  k.quantize = quantize_act;
  k.name = fmt::format("{} x q8_K integer row dot ({})", type_name(k.type), f.kquant.isa);
  return true;
}

// The other block formats: one row dot for T tokens against the format ggml pairs with each.
bool fill_qdot(MatmulKernel& k, const Families& f) {
  const QTypeDots* d = nullptr;
  for (const QTypeDots& q : f.qdots.dots)
    if (q.type == k.type) d = &q;
  if (!d) return false;
  k.prep = ActPrep::Quantized;
  k.act = activation_format(k.type);
  k.quantize = quantize_act;
  k.qdot = d;
  k.qdot_tokens = f.qdots.tokens;
  k.one = k.many = rows_qdot;
  k.name = fmt::format("{} x {} integer row dot, {} tokens per pass for batches ({})", type_name(k.type),
                       activation_format_name(k.act), f.qdots.tokens, f.qdots.isa);
  return true;
}

// Repacked at load (packed_q8.h): 16-row groups, every batch size; the tile unit's kernel (AMX) from the
// measured crossover on.
bool fill_packed(MatmulKernel& k, const Families& f) {
  if (!f.packed) return false;
  k.prep = ActPrep::Packed;
  k.act = activation_format(k.type);
  // Q8_0 and Q4_0 take the dot table's quantizer, as their unpacked rows do.
  k.quantize = k.type == GgmlType::Q8_0 || k.type == GgmlType::Q4_0 ? quantize_q8_0_dots : quantize_act;
  k.packed = f.packed;
  k.packed_tiles = f.packed_tiles;
  k.one = k.many = rows_packed;
  k.granule_one = k.granule_many = PackedWeight::kRowsPerGroup;
  // The k-quants' kernel (integer sub-block scales) has its own blocking.
  const bool k_quant = traits(k.type).block_size == 256 && k.type != GgmlType::IQ4_XS;
  k.name = fmt::format("{} repacked in 16-row groups x {}: {} ({})", type_name(k.type), activation_format_name(k.act),
                       k_quant ? f.packed->k_quants : f.packed->blocks, f.packed->isa);
  if (f.packed_tiles)
    k.name += fmt::format("; from tuning's tile_min_tokens on: {} ({})",
                          k_quant ? f.packed_tiles->k_quants : f.packed_tiles->blocks, f.packed_tiles->isa);
  return true;
}

// In order of preference per type (the repacked row last: it reads the plain entries).
constexpr KernelKind kKinds[] = {
    {false, bf16_type, fill_bf16_tiles},   {false, bf16_type, fill_bf16_rounded}, {false, float_types, fill_float_tiles},
    {false, float_types, fill_float_dot},  {false, q8_types, fill_q8_tiles},      {false, q8_types, fill_q8_dot},
    {false, kquant_types, fill_kquant},    {false, qdot_types, fill_qdot},        {true, packable_types, fill_packed},
};

}  // namespace

MatmulKernels::MatmulKernels(IsaLevel isa) : isa_(isa), dots_(dot_kernels_for(isa)) {
  const Families f{dots_,           isa_name(dots_.isa), kquant_dots_for(isa), qdots_for(isa),          int8_tiles(isa),
                   bf16_tiles(isa), float_tiles(isa),    packed_gemm(isa),     packed_tile_gemm(isa)};
  for (const KernelKind& kind : kKinds) {
    const std::vector<MatmulKernel> plain = entries_;
    for (GgmlType t : kind.types(f, plain)) {
      if (find(t, kind.repacked)) continue;  // an earlier row's kernel runs it
      MatmulKernel k;
      k.type = t;
      k.repacked = kind.repacked;
      k.dots = &dots_;
      if (kind.fill(k, f)) entries_.push_back(std::move(k));
    }
  }
}

const MatmulKernel* MatmulKernels::find(GgmlType t, bool repacked) const {
  for (const MatmulKernel& k : entries_)
    if (k.type == t && k.repacked == repacked) return &k;
  return nullptr;
}

const MatmulKernel& MatmulKernels::of(const Weight& w) const {
  if (const MatmulKernel* k = find(w.type, w.packed != nullptr)) return *k;
  throw Error(fmt::format("tensor '{}': no matmul kernel for type {}{} with this CPU's kernels ({})", w.name,
                          type_name(w.type), w.packed ? " (repacked)" : "", isa_name(isa_)));
}

MatmulKernels MatmulKernels::with_tile_gemm(const PackedGemm* tiles) const {
  MatmulKernels copy = *this;
  for (MatmulKernel& k : copy.entries_)
    if (k.repacked) k.packed_tiles = tiles;
  return copy;
}

std::string MatmulKernels::name(GgmlType t, bool repacked) const {
  if (const MatmulKernel* k = repacked ? find(t, true) : nullptr) return k->name;
  if (const MatmulKernel* k = find(t)) return k->name;
  return "none";
}

const MatmulKernels& matmul_kernels_for(IsaLevel isa) {
  static const std::array<MatmulKernels, 4> tables = {MatmulKernels(IsaLevel::Scalar), MatmulKernels(IsaLevel::Avx2),
                                                      MatmulKernels(IsaLevel::Avx512), MatmulKernels(IsaLevel::Amx)};
  return tables[static_cast<size_t>(isa)];
}

const MatmulKernels& matmul_kernels() {
  static const MatmulKernels& k = matmul_kernels_for(selected_isa());
  return k;
}

}  // namespace kestrel
