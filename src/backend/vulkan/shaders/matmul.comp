#version 450
// y[t][r] = sum_c x[t][c] * W[r][c] for the rows of one weight chunk and up to kTile tokens per workgroup.
// A workgroup of 64 invocations takes 64 / tpr rows, tpr invocations per row (tpr, a power of two up to 64,
// fits the row's 32-element units: short rows share a workgroup instead of leaving most of it idle). The
// invocations of a row share out its units, dequantize each once (weights.glsl) and take its dot with every
// token of the tile; their partial sums are added in shared memory. The activations arrive already rounded
// as the CPU backend rounds them for this weight type (quantize_act.comp), so both compute the same products.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

#include "product.glsl"

const uint kTile = 8u;
// Invocations per row: a specialisation constant (the pipeline per shape class the backend makes at load), so
// the reduction's loop is unrolled for it; p.tpr carries the same value.
layout(constant_id = 0) const uint kTpr = 8u;
shared float partial[kTile][64];

void main() {
  const uint lane = gl_LocalInvocationID.x % kTpr, slot = gl_LocalInvocationID.x / kTpr;
  const uint r = (gl_WorkGroupID.y * p.groups_x + gl_WorkGroupID.x) * (64u / kTpr) + slot;
  const uint t0 = gl_WorkGroupID.z * kTile;
  const uint nt = min(kTile, p.n - t0);
  const uint units = (p.cols + 31u) / 32u;
  const uint base = r * p.row_bytes;
  float acc[kTile];
  for (uint t = 0u; t < kTile; t++) acc[t] = 0.0;
  float v[32];
  if (r < p.rows) {
    for (uint u = lane; u < units; u += kTpr) {
      unit32(base, u, p.cols, v);
      const uint c0 = 32u * u, width = min(32u, p.cols - c0);
      for (uint t = 0u; t < nt; t++) {
        const uint xo = p.x_off + (t0 + t) * p.x_stride + c0;
        float s = 0.0;
        if (width == 32u)
          for (uint i = 0u; i < 32u; i++) s += v[i] * x[xo + i];
        else
          for (uint i = 0u; i < width; i++) s += v[i] * x[xo + i];
#ifdef BLOCK_MIN
        s += unit_min(base, u) * xs[p.s_off + (t0 + t) * units + u];
#endif
        acc[t] += s;
      }
    }
  }
  for (uint t = 0u; t < kTile; t++) partial[t][gl_LocalInvocationID.x] = acc[t];
  barrier();
  for (uint stride = kTpr / 2u; stride > 0u; stride >>= 1) {
    if (lane < stride)
      for (uint t = 0u; t < nt; t++) partial[t][gl_LocalInvocationID.x] += partial[t][gl_LocalInvocationID.x + stride];
    barrier();
  }
  if (r < p.rows && lane < nt) y[p.y_off + (t0 + lane) * p.y_stride + r] = partial[lane][slot * kTpr];
}
