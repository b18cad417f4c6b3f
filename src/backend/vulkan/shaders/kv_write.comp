#version 450
// Rows of keys (or values) into their KV slots, as F32, F16 or BF16 rows (kv_format.h): one invocation per
// element (F32) or per pair of elements (F16, BF16: the two halves of one 32-bit word, so no two invocations
// write the same word), or as Q8_0, FP8 or Q4 rows, one invocation per group of `group` (<= 32) elements
// (write_group); such a group is 2 + group or 4 + group / 2 bytes, not word-aligned, so its bytes are set
// through atomics. slots[i] is row i's slot; a slot's row starts at slot * stride bytes.
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer KV { uint kv[]; };
layout(std430, set = 0, binding = 2) readonly buffer S { int slots[]; };
layout(push_constant) uniform Params {
  uint n, width, x_off, kv_off, stride, half_type, slots_off;  // kv_off in words, stride in bytes; 1 F16, 2 BF16, 3 Q8_0, 4 FP8, 5 Q4
  uint group;  // Q8_0, FP8, Q4
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

// formats/fp8.h fp32_to_e4m3 for a finite f: round to nearest even, saturating at 448 (0x7e).
uint e4m3(float f) {
  const uint u = floatBitsToUint(f), sign = (u >> 24) & 0x80u;
  const float a = abs(f);
  if (a >= 448.0) return sign | 0x7eu;
  if (a < 0.015625) return sign | uint(roundEven(a * 512.0));  // subnormal: multiples of 2^-9
  const uint ua = floatBitsToUint(a);
  const float m = uintBitsToFloat((ua & 0x007fffffu) | (126u << 23));  // a = m * 2^e, m in [0.5, 1)
  const int e = int(ua >> 23) - 126;
  int mant = int(roundEven(m * 16.0)) - 8, ex = e - 1 + 7;
  if (mant == 8) {
    mant = 0;
    ex++;
  }
  if (ex > 15 || (ex == 15 && mant > 6)) return sign | 0x7eu;
  return sign | uint(ex << 3) | uint(mant);
}

uint half_bits(float v) { return packHalf2x16(vec2(v, 0.0)) & 0xffffu; }

// One group of a quantized row (kv_format.cpp quantize): Q8_0 (3) and Q4 (5) Walsh-Hadamard rotated first;
// Q8_0: fp16 amax / 127, int8; FP8 (4): fp16 amax / 448, E4M3; Q4: fp16 (hi - lo) / 15, fp16 lo, nibble pairs.
void write_group(uint g) {
  const uint per_row = p.width / p.group;
  if (g >= p.n * per_row) return;
  const uint i = g / per_row, gi = g % per_row, n = p.group, type = p.half_type;
  float v[32];
  for (uint j = 0u; j < n; j++) v[j] = x[p.x_off + i * p.width + gi * n + j];
  if (type != 4u) {
    for (uint h = 1u; h < n; h *= 2u)
      for (uint a = 0u; a < n; a += 2u * h)
        for (uint j = a; j < a + h; j++) {
          const float s = v[j], t = v[j + h];
          v[j] = s + t;
          v[j + h] = s - t;
        }
    const float norm = 1.0 / sqrt(float(n));
    for (uint j = 0u; j < n; j++) v[j] *= norm;
  }
  float lo = v[0], hi = v[0], amax = 0.0;
  for (uint j = 0u; j < n; j++) {
    lo = min(lo, v[j]);
    hi = max(hi, v[j]);
    amax = max(amax, abs(v[j]));
  }
  const uint bytes = type == 5u ? 4u + n / 2u : 2u + n;
  const uint at = uint(slots[p.slots_off + i]) * p.stride + gi * bytes;
  const uint dh = half_bits(type == 3u ? amax / 127.0 : type == 4u ? amax / 448.0 : (hi - lo) / 15.0);
  const float d = unpackHalf2x16(dh).x, id = d != 0.0 ? 1.0 / d : 0.0;
  put_byte(at, dh);
  put_byte(at + 1u, dh >> 8);
  if (type == 3u) {
    for (uint j = 0u; j < n; j++) put_byte(at + 2u + j, uint(int(clamp(roundEven(v[j] * id), -127.0, 127.0))));
  } else if (type == 4u) {
    for (uint j = 0u; j < n; j++) put_byte(at + 2u + j, e4m3(v[j] * id));
  } else {
    const uint mh = half_bits(lo);
    const float m = unpackHalf2x16(mh).x;
    put_byte(at + 2u, mh);
    put_byte(at + 3u, mh >> 8);
    for (uint j = 0u; j < n; j += 2u) {
      const uint q0 = uint(clamp(roundEven((v[j] - m) * id), 0.0, 15.0));
      const uint q1 = uint(clamp(roundEven((v[j + 1u] - m) * id), 0.0, 15.0));
      put_byte(at + 4u + j / 2u, q0 | (q1 << 4));
    }
  }
}

void main() {
  const uint g = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (p.half_type >= 3u) {
    write_group(g);
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
