#version 450
// Prefill's product on the GPU's matrix units: matmul_tiled.comp's tile of 64 weight rows by 32 tokens per
// workgroup of 128, each 32-element unit dequantized (weights.glsl) and the activations loaded into shared memory
// as fp16, then multiplied by VK_NV_cooperative_matrix 16x16x16 fp16 tiles into fp32 accumulators: each subgroup
// of 32 takes a 16-row band by the 32 tokens (two accumulators, two k-steps a unit). Built twice: for devices
// with the extension and a 32-wide subgroup, and (COOP_EMULATED) as a plain-GLSL model of the same tiles —
// the same fp16 operands, fp32 sums — that any device runs, so the tiling is tested where no matrix unit is
// (lavapipe). Both round weights and activations to fp16, as llama.cpp's Vulkan matrix-unit path does: not for
// F32/BF16 weights (fp16's range) nor Q4_1/Q5_1 (their block minimum; those take matmul_tiled.comp).
#extension GL_GOOGLE_include_directive : require
#ifndef COOP_EMULATED
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#endif
layout(local_size_x = 128) in;

const uint kRows = 64u, kTokens = 32u;
const uint kLd = 40u;  // a shared row's stride in elements (80 bytes: the 16-byte multiple the loads want)
const uint kCd = 68u;  // the result tile's stride in floats ([token][row])
#ifdef COOP_EMULATED
#define HALF float
float to_half(float v) { return unpackHalf2x16(packHalf2x16(vec2(v, 0.0))).x; }
#else
#define HALF float16_t
float16_t to_half(float v) { return float16_t(v); }
#endif
shared HALF ws[kRows * kLd];
shared HALF xt[kTokens * kLd];
shared float cs[kTokens * kCd];
#define PUT_W(r, i, v) ws[(r) * kLd + (i)] = to_half(v)
#define PUT_X(t, i, v) xt[(t) * kLd + (i)] = to_half(v)
#include "product.glsl"

void main() {
  const uint id = gl_LocalInvocationID.x;
  const uint r0 = gl_WorkGroupID.x * kRows, t0 = gl_WorkGroupID.y * kTokens;
  const uint units = (p.cols + 31u) / 32u;
#ifdef COOP_EMULATED
  const uint band = id / 32u, lane = id % 32u;
  const uint er = band * 16u + lane % 16u, et = (lane / 16u) * 16u;  // this invocation's row, first of 16 tokens
  float acc[16];
  for (uint j = 0u; j < 16u; j++) acc[j] = 0.0;
#else
  const uint band = gl_SubgroupID;
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc0 = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc1 = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
#endif
  for (uint u = 0u; u < units; u++) {
    load_unit(id, u, r0, t0, units);
    barrier();
#ifdef COOP_EMULATED
    for (uint j = 0u; j < 16u; j++) {
      float s = 0.0;
      for (uint c = 0u; c < 32u; c++) s += ws[er * kLd + c] * xt[(et + j) * kLd + c];
      acc[j] += s;
    }
#else
    for (uint kk = 0u; kk < 32u; kk += 16u) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a, b0, b1;
      coopMatLoadNV(a, ws, band * 16u * kLd + kk, kLd, false);  // rows x k, row-major
      coopMatLoadNV(b0, xt, kk, kLd, true);                     // k x tokens 0-15: column-major
      coopMatLoadNV(b1, xt, 16u * kLd + kk, kLd, true);         // tokens 16-31
      acc0 = coopMatMulAddNV(a, b0, acc0);
      acc1 = coopMatMulAddNV(a, b1, acc1);
    }
#endif
    barrier();
  }
  // The tile into shared memory as [token][row], then into y within the matrix and the batch.
#ifdef COOP_EMULATED
  for (uint j = 0u; j < 16u; j++) cs[(et + j) * kCd + er] = acc[j];
#else
  coopMatStoreNV(acc0, cs, band * 16u, kCd, true);
  coopMatStoreNV(acc1, cs, 16u * kCd + band * 16u, kCd, true);
#endif
  barrier();
  for (uint i = id; i < kRows * kTokens; i += 128u) {
    const uint t = i / kRows, r = i % kRows;
    if (r0 + r < p.rows && t0 + t < p.n) y[p.y_off + (t0 + t) * p.y_stride + r0 + r] = cs[t * kCd + r];
  }
}
