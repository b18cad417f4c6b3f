#include "kernels/packed_q8.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/gemm_q8.h"

namespace kestrel {

bool packable(const Weight& w) {
  return (w.type == GgmlType::Q8_0 || w.type == GgmlType::Q4_0) && w.ne.size() == 2 && w.cols() % kQK8_0 == 0 &&
         w.rows() > 0 && w.data != nullptr;
}

std::shared_ptr<const PackedWeight> pack_weight(const Weight& w, ThreadPool* pool, HugePageArena* arena) {
  if (!packable(w)) throw Error(fmt::format("tensor '{}' ({}) cannot be repacked", w.name, type_name(w.type)));
  constexpr int G = PackedWeight::kRowsPerGroup;
  auto p = std::make_shared<PackedWeight>();
  p->type = w.type;
  p->rows = w.rows();
  p->n_blocks = w.cols() / kQK8_0;
  p->n_groups = (p->rows + G - 1) / G;
  const int64_t nb = p->n_blocks;
  const size_t bytes = p->n_groups * p->group_bytes();
  if (arena) {
    auto a = arena->allocate(bytes, "repacking " + w.name);
    p->data = a.data;
    p->memory = std::move(a.owner);
  } else {
    auto own = std::make_shared<HugePageBuffer>(bytes, "repacking " + w.name);
    p->data = static_cast<const uint8_t*>(own->data());
    p->memory = std::move(own);
  }
  const bool q8 = w.type == GgmlType::Q8_0;
  auto pack_groups = [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; g++) {
      for (int i = 0; i < G && g * G + i < p->rows; i++) {
        const uint8_t* row = w.row(g * G + i);
        for (int64_t b = 0; b < nb; b++) {
          uint8_t* dst = const_cast<uint8_t*>(p->block_quants(g, b)) + i * 4;
          uint16_t* s = const_cast<uint16_t*>(p->block_scales(g, b));
          if (q8) {
            const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
            s[i] = blk.d;
            for (int k = 0; k < 8; k++)
              for (int j = 0; j < 4; j++) dst[k * 64 + j] = static_cast<uint8_t>(blk.qs[4 * k + j]) ^ 0x80;
          } else {
            const auto& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
            s[i] = blk.d;
            for (int k = 0; k < 4; k++) std::memcpy(dst + k * 64, blk.qs + 4 * k, 4);
          }
        }
      }
    }
  };
  if (pool)
    pool->parallel_for(p->n_groups, pack_groups);
  else
    pack_groups(0, p->n_groups);
  return p;
}

size_t packed_activation_bytes(int64_t n_tokens, int64_t n_blocks) {
  const int64_t tiles = (n_tokens + PackedActivations::kTokensPerTile - 1) / PackedActivations::kTokensPerTile;
  return static_cast<size_t>(tiles * n_blocks) * PackedActivations::kBytesPerBlock;
}

void pack_activations(GgmlType wtype, const BlockQ8_0* x, int64_t n_tokens, int64_t n_blocks, int64_t tile0,
                      int64_t tile1, uint8_t* out) {
  using PA = PackedActivations;
  const int32_t offset = wtype == GgmlType::Q8_0 ? 128 : 8;
  for (int64_t tile = tile0; tile < tile1; tile++)
    for (int64_t b = 0; b < n_blocks; b++) {
      uint8_t* dst = out + (tile * n_blocks + b) * PA::kBytesPerBlock;
      std::memset(dst, 0, PA::kBytesPerBlock);
      for (int t = 0; t < PA::kTokensPerTile; t++) {
        const int64_t token = tile * PA::kTokensPerTile + t;
        if (token >= n_tokens) break;
        const BlockQ8_0& blk = x[token * n_blocks + b];
        int32_t sum = 0;
        for (int j = 0; j < kQK8_0; j++) sum += blk.qs[j];
        const int32_t bias = -offset * sum;
        const float d = fp16_to_fp32(blk.d);
        std::memcpy(dst + t * kQK8_0, blk.qs, kQK8_0);
        std::memcpy(dst + PA::kBiasOffset + 4 * t, &bias, 4);
        std::memcpy(dst + PA::kScaleOffset + 4 * t, &d, 4);
      }
    }
}

// The unsigned quant of element e (0..31) of lane `row` in one packed block.
static int packed_quant(GgmlType type, const uint8_t* block, int row, int e) {
  if (type == GgmlType::Q8_0) return block[(e / 4) * 64 + row * 4 + e % 4];
  const uint8_t byte = block[((e % 16) / 4) * 64 + row * 4 + e % 4];
  return e < 16 ? (byte & 0x0F) : (byte >> 4);
}

void packed_gemm_reference(const PackedWeight& w, int64_t g0, int64_t g1, const PackedActivations& x, float* y,
                           int64_t ldy) {
  constexpr int G = PackedWeight::kRowsPerGroup;
  const int64_t nb = w.n_blocks;
  for (int64_t g = g0; g < g1; g++) {
    for (int i = 0; i < G && g * G + i < w.rows; i++)
      for (int64_t t = 0; t < x.n_tokens; t++) {
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
          const uint8_t* xb = x.block(t / PackedActivations::kTokensPerTile, b);
          const int tt = static_cast<int>(t % PackedActivations::kTokensPerTile);
          int32_t idot;
          float d;
          std::memcpy(&idot, xb + PackedActivations::kBiasOffset + 4 * tt, 4);
          std::memcpy(&d, xb + PackedActivations::kScaleOffset + 4 * tt, 4);
          const auto* qs = reinterpret_cast<const int8_t*>(xb + kQK8_0 * tt);
          for (int e = 0; e < kQK8_0; e++) idot += packed_quant(w.type, w.block_quants(g, b), i, e) * qs[e];
          const float scale = fp16_to_fp32(w.block_scales(g, b)[i]) * d;
          acc = std::fma(static_cast<float>(idot), scale, acc);
        }
        y[t * ldy + g * G + i] = acc;
      }
  }
}

#ifndef KESTREL_HAVE_AVX2_KERNELS
void packed_gemm_vnni(const PackedWeight&, int64_t, int64_t, const PackedActivations&, float*, int64_t, int64_t) {}
#endif

bool packed_gemm_available() { return gemm_q8_available(); }

}  // namespace kestrel
