#version 450
// Rows of keys (or values) into their KV slots, as F32, F16 or BF16 rows (kv_format.h): one invocation per
// element (F32) or per pair of elements (F16, BF16: the two halves of one 32-bit word, so no two invocations
// write the same word), or as Q8_0 rows: each group of `group` (<= 32) Walsh-Hadamard rotated (ops.h
// walsh_hadamard), an fp16 scale amax / 127 and int8 values, one invocation per group; such a group is 2 + group
// bytes, not word-aligned, so its bytes are set through atomics. slots[i] is row i's slot; a slot's row starts
// at slot * stride bytes.
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer KV { uint kv[]; };
layout(std430, set = 0, binding = 2) readonly buffer S { int slots[]; };
layout(push_constant) uniform Params {
  uint n, width, x_off, kv_off, stride, half_type, slots_off;  // kv_off in words, stride in bytes; 1 F16, 2 BF16, 3 Q8_0
  uint group;  // Q8_0
} p;

// formats/fp16.h fp32_to_bf16: round to nearest even, NaN kept quiet.
uint bf16(float f) {
  const uint u = floatBitsToUint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 64u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

void put_byte(uint byte, uint v) {
  const uint w = p.kv_off + (byte >> 2), shift = (byte & 3u) * 8u;
  atomicAnd(kv[w], ~(0xffu << shift));
  atomicOr(kv[w], (v & 0xffu) << shift);
}

void write_q8_0(uint g) {
  const uint per_row = p.width / p.group;
  if (g >= p.n * per_row) return;
  const uint i = g / per_row, gi = g % per_row, n = p.group;
  float v[32];
  for (uint j = 0u; j < n; j++) v[j] = x[p.x_off + i * p.width + gi * n + j];
  for (uint h = 1u; h < n; h *= 2u)
    for (uint a = 0u; a < n; a += 2u * h)
      for (uint j = a; j < a + h; j++) {
        const float s = v[j], t = v[j + h];
        v[j] = s + t;
        v[j + h] = s - t;
      }
  const float norm = 1.0 / sqrt(float(n));
  float amax = 0.0;
  for (uint j = 0u; j < n; j++) {
    v[j] *= norm;
    amax = max(amax, abs(v[j]));
  }
  const uint dh = packHalf2x16(vec2(amax / 127.0, 0.0)) & 0xffffu;
  const float d = unpackHalf2x16(dh).x, id = d != 0.0 ? 1.0 / d : 0.0;
  const uint at = uint(slots[p.slots_off + i]) * p.stride + gi * (2u + n);
  put_byte(at, dh);
  put_byte(at + 1u, dh >> 8);
  for (uint j = 0u; j < n; j++) put_byte(at + 2u + j, uint(int(clamp(roundEven(v[j] * id), -127.0, 127.0))));
}

void main() {
  const uint g = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (p.half_type == 3u) {
    write_q8_0(g);
    return;
  }

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
