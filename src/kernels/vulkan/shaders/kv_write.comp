#version 450
// Rows of keys (or values) into their KV slots, as F32 or F16 rows (kv_format.h): one invocation per
// element (F32) or per pair of elements (F16: the two halves of one 32-bit word, so no two invocations
// write the same word). slots[i] is row i's slot; a slot's row starts at slot * stride bytes.
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer KV { uint kv[]; };
layout(std430, set = 0, binding = 2) readonly buffer S { int slots[]; };
layout(push_constant) uniform Params {
  uint n, width, x_off, kv_off, stride, f16, slots_off;  // kv_off in words, stride in bytes
} p;

void main() {
  const uint g = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  const uint per_row = p.f16 != 0u ? p.width / 2u : p.width;
  if (g >= p.n * per_row) return;
  const uint i = g / per_row, e = g % per_row;
  const uint row = p.kv_off + uint(slots[p.slots_off + i]) * (p.stride / 4u);
  const uint xo = p.x_off + i * p.width;
  if (p.f16 != 0u)
    kv[row + e] = packHalf2x16(vec2(x[xo + 2u * e], x[xo + 2u * e + 1u]));
  else
    kv[row + e] = floatBitsToUint(x[xo + e]);
}
