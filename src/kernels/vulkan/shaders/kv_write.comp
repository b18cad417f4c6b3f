#version 450
// Rows of keys (or values) into their KV slots, as F32, F16 or BF16 rows (kv_format.h): one invocation per
// element (F32) or per pair of elements (F16, BF16: the two halves of one 32-bit word, so no two invocations
// write the same word). slots[i] is row i's slot; a slot's row starts at slot * stride bytes.
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer KV { uint kv[]; };
layout(std430, set = 0, binding = 2) readonly buffer S { int slots[]; };
layout(push_constant) uniform Params {
  uint n, width, x_off, kv_off, stride, half_type, slots_off;  // kv_off in words, stride in bytes; 1 F16, 2 BF16
} p;

// formats/fp16.h fp32_to_bf16: round to nearest even, NaN kept quiet.
uint bf16(float f) {
  const uint u = floatBitsToUint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 64u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

void main() {
  const uint g = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  const uint per_row = p.half_type != 0u ? p.width / 2u : p.width;
  if (g >= p.n * per_row) return;
  const uint i = g / per_row, e = g % per_row;
  const uint row = p.kv_off + uint(slots[p.slots_off + i]) * (p.stride / 4u);
  const uint xo = p.x_off + i * p.width;
  if (p.half_type == 1u)
    kv[row + e] = packHalf2x16(vec2(x[xo + 2u * e], x[xo + 2u * e + 1u]));
  else if (p.half_type == 2u)
    kv[row + e] = bf16(x[xo + 2u * e]) | (bf16(x[xo + 2u * e + 1u]) << 16);
  else
    kv[row + e] = floatBitsToUint(x[xo + e]);
}
