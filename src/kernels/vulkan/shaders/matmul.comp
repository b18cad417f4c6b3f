#version 450
// y[t][r] = sum_c x[t][c] * W[r][c] for the rows of one weight chunk and up to kTile tokens per workgroup:
// the 64 invocations of a workgroup share out row r's 32-element units, dequantize each once (weights.glsl)
// and take its dot with every token of the tile, then the partial sums are added in shared memory. The
// activations are rounded as the CPU backend rounds them for that weight type (F16: to fp16, BF16: to
// bf16) so both compute the same products.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

#include "weights.glsl"

layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 2) buffer Y { float y[]; };
#ifdef BLOCK_MIN
// Q4_1/Q5_1: the activations' Q8_1 block sums, fp16(d * sum q) (quantize_act.comp), one per 32 elements.
layout(std430, set = 0, binding = 3) readonly buffer S { float xs[]; };
#endif
layout(push_constant) uniform Params {
  uint rows;       // rows of this weight chunk
  uint cols;
  uint n;          // tokens
  uint x_off;      // floats
  uint y_off;      // floats: where row 0 of token 0 goes
  uint y_stride;   // floats between tokens' output rows
  uint row_bytes;
  uint groups_x;   // workgroups along x (row = group.y * groups_x + group.x)
  uint s_off;      // Q4_1/Q5_1: where token 0's block sums start in xs
} p;

const uint kTile = 8u;
shared float partial[kTile][64];

float activation(float v) {
#if defined(TYPE_F16)
  return unpackHalf2x16(packHalf2x16(vec2(v, 0.0))).x;
#elif defined(TYPE_BF16)
  uint b = floatBitsToUint(v);
  if ((b & 0x7fffffffu) > 0x7f800000u) return uintBitsToFloat((b | 0x00400000u) & 0xffff0000u);  // NaN stays NaN
  b += 0x7fffu + ((b >> 16) & 1u);  // round to nearest even
  return uintBitsToFloat(b & 0xffff0000u);
#else
  return v;
#endif
}

void main() {
  const uint r = gl_WorkGroupID.y * p.groups_x + gl_WorkGroupID.x;
  if (r >= p.rows) return;
  const uint t0 = gl_WorkGroupID.z * kTile, tid = gl_LocalInvocationID.x;
  const uint nt = min(kTile, p.n - t0);
  const uint units = (p.cols + 31u) / 32u;
  const uint base = r * p.row_bytes;
  float acc[kTile];
  for (uint t = 0u; t < kTile; t++) acc[t] = 0.0;
  float v[32];
  for (uint u = tid; u < units; u += 64u) {
    unit32(base, u, p.cols, v);
    const uint c0 = 32u * u, width = min(32u, p.cols - c0);
    for (uint t = 0u; t < nt; t++) {
      const uint xo = p.x_off + (t0 + t) * p.cols + c0;
      float s = 0.0;
      for (uint i = 0u; i < width; i++) s += v[i] * activation(x[xo + i]);
#ifdef BLOCK_MIN
      s += unit_min(base, u) * xs[p.s_off + (t0 + t) * units + u];
#endif
      acc[t] += s;
    }
  }
  for (uint t = 0u; t < kTile; t++) partial[t][tid] = acc[t];
  barrier();
  for (uint stride = 32u; stride > 0u; stride >>= 1) {
    if (tid < stride)
      for (uint t = 0u; t < kTile; t++) partial[t][tid] += partial[t][tid + stride];
    barrier();
  }
  if (tid < nt) y[p.y_off + (t0 + tid) * p.y_stride + r] = partial[tid][0];
}
