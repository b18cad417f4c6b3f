#pragma once
// The one table of how a weight is multiplied: an entry per weight type —
// and one per type the backend repacks at load (Weight::packed) — holding the
// activation format and its quantizer, the row kernel for one token and the
// one for a batch, their work-unit heights, and the name `kestrel hw` prints.
// The table is built once per ISA level from the kernel families' own
// tables (isa_dispatch.h: dot.h, kquant_dot.h, qdot.h, the AVX-512 tiles of
// gemm_q8.h, gemm_bf16.h, gemm_float.h, packed_q8.h) by the rows of one
// list of kernel kinds (matmul_kernels.cpp: the types a kind multiplies and
// how it fills their entry, in order of preference; the first a level has
// runs), so Matmul asks it and checks no ISA itself. A type without an entry
// has no kernel on this CPU: the backend refuses such a weight at load,
// naming it, the type and the ISA. A new kernel kind (AVX2 or AMX GEMMs) is
// a new row and its files.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/ggml_types.h"
#include "formats/weight.h"
#include "hw/cpu_features.h"
#include "hw/tuning.h"
#include "kernels/dot.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_float.h"
#include "kernels/gemm_q8.h"
#include "kernels/kquant_dot.h"
#include "kernels/packed_q8.h"
#include "kernels/qdot.h"

namespace kestrel {

// How an entry wants its activations.
enum class ActPrep : uint8_t {
  Float,       // as they are (F32 weights, FP8 rows)
  F16Rounded,  // rounded through fp16: ggml's pairing for F16 weights
  Bf16Rounded, // rounded through bf16: ggml's pairing for BF16 weights, where the CPU has no bf16 dot
  Bf16,        // rounded to bf16, for the bf16 tiles
  Quantized,   // each token's row quantized by the entry's quantizer, in its activation format
  Packed,      // quantized, then packed into the repacked kernels' token tiles
};

// One call's activations, prepared for an entry (buffers are the Matmul's).
struct MatmulInput {
  const float* x = nullptr;  // float activations (Float, F16Rounded: the rounded copy)
  int64_t n = 0, cols = 0;
  const uint8_t* act = nullptr;  // Quantized: token t's row at act + t * act_stride
  size_t act_stride = 0;
  QuantizedActivations tiles;  // Quantized Q8_0 with lane sums (the int8 tiles)
  const uint16_t* bf16 = nullptr;
  PackedActivations packed;
  const Tuning* tuning = nullptr;
};

struct MatmulKernel;
// Rows [r0, r1) of w for every prepared token into y (row stride ldy).
using MatmulRows = void (*)(const MatmulKernel& k, const Weight& w, int64_t r0, int64_t r1, const MatmulInput& in,
                            float* y, int64_t ldy);

struct MatmulKernel {
  GgmlType type = GgmlType::F32;
  bool repacked = false;  // for weights the backend repacked at load
  std::string name;       // what runs, e.g. "q4_0 x q8_0: vpdpbusd row dot for 1 token, ..."
  ActPrep prep = ActPrep::Float;
  ActFormat act = ActFormat::Q8_0;  // Quantized / Packed: the activations' format
  // Quantized / Packed: one token's row of n activations into act's format.
  void (*quantize)(const MatmulKernel& k, const float* x, void* out, int64_t n) = nullptr;
  bool lane_sums = false;  // the batch kernel reads the int8 tiles' lane sums
  int64_t granule_one = 1, granule_many = 1;  // rows per work unit: the micro-kernel's height
  MatmulRows one = nullptr;   // one token
  MatmulRows many = nullptr;  // two tokens or more
  // The families' tables this entry's kernels read (its ISA's).
  const DotKernels* dots = nullptr;
  const KQuantDots* kquant = nullptr;
  const QTypeDots* qdot = nullptr;
  int qdot_tokens = 1;
  const Int8Tiles* int8 = nullptr;
  const Bf16Tiles* bf16 = nullptr;
  const FloatTiles* floats = nullptr;
  const PackedGemm* packed = nullptr;
  const PackedGemm* packed_tiles = nullptr;  // the tile unit's (AMX), for batches of Tuning::tile_min_tokens on
};

class MatmulKernels {
 public:
  explicit MatmulKernels(IsaLevel isa);
  IsaLevel isa() const { return isa_; }
  const DotKernels& dots() const { return dots_; }
  // The entry for a type (its repacked form's when repacked), or null.
  const MatmulKernel* find(GgmlType t, bool repacked = false) const;
  // The entry for a weight as it is (packed or not); Error naming the
  // tensor, its type and this ISA when there is none.
  const MatmulKernel& of(const Weight& w) const;
  // Whether the backend repacks weights of this type at load.
  bool repacks(GgmlType t) const { return find(t, true) != nullptr; }
  // What runs for a type, preferring its repacked form when there is one and `repacked` asks; "none" without.
  std::string name(GgmlType t, bool repacked = false) const;
  // A copy whose repacked entries take `tiles` for batches from the crossover on (tests: the tile model's
  // table where the CPU has no tile unit; benchmarks).
  MatmulKernels with_tile_gemm(const PackedGemm* tiles) const;

 private:
  IsaLevel isa_;
  const DotKernels& dots_;
  std::vector<MatmulKernel> entries_;
};

// The table for selected_isa(), built once.
const MatmulKernels& matmul_kernels();
// ...and for any level (tests and benchmarks compare levels), built once each.
const MatmulKernels& matmul_kernels_for(IsaLevel isa);

}  // namespace kestrel
