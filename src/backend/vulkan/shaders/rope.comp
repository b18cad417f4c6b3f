#version 450
// RoPE with the angles' cosines and sines from the host (cs[row][pair] = (cos, sin), already scaled as
// ops.h rope_heads computes them): one invocation per (row, head, pair).
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer CS { vec2 cs[]; };
layout(push_constant) uniform Params {
  uint rows, heads, head_dim, half_rot, neox, x_off, row_stride, cs_off;
} p;

void main() {
  const uint g = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  const uint per_row = p.heads * p.half_rot;
  if (g >= p.rows * per_row) return;
  const uint r = g / per_row, h = (g % per_row) / p.half_rot, i = g % p.half_rot;
  const vec2 c = cs[p.cs_off + r * p.half_rot + i];
  const uint v = p.x_off + r * p.row_stride + h * p.head_dim;
  const uint i0 = p.neox != 0u ? i : 2u * i, i1 = p.neox != 0u ? i + p.half_rot : 2u * i + 1u;
  const float a = x[v + i0], b = x[v + i1];
  x[v + i0] = a * c.x - b * c.y;
  x[v + i1] = a * c.y + b * c.x;
}
